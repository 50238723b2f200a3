package jail

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"

	"github.com/jailrt/jail/landlock"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
	"github.com/jailrt/jail/seccomp"
)

// Clone flags (linux/sched.h), spelled out so the planner builds and is
// tested on every OS.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
)

var cloneFlag = map[string]uintptr{
	"user": cloneNewUser, "pid": cloneNewPID, "mount": cloneNewNS, "net": cloneNewNet,
	"uts": cloneNewUTS, "ipc": cloneNewIPC, "cgroup": cloneNewCgroup,
}

// waitKillableMissing explains a kernel without
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV.
const waitKillableMissing = "a signal can make a call the policy kills return EINTR before it is killed and reported; that needs SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19)"

// hostFacts is what the planner needs to know about the host and the caller.
type hostFacts struct {
	euid, egid int
	// namespaces holds the namespace kinds this kernel has (/proc/self/ns).
	namespaces map[string]bool
	fs         rootfs.Host
	// seccompWaitKillable: the kernel has
	// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19).
	seccompWaitKillable bool
	// landlockABI is the kernel's Landlock ABI, 0 without Landlock.
	landlockABI int
	// rlimitHard holds this process's hard limits of the DefaultRlimits,
	// which the jail inherits and cannot raise.
	rlimitHard map[string]uint64
	// userStack finds pasta for an unprivileged caller's egress
	// (netns.UserStack), or says why it cannot run; asked only then.
	userStack func() (string, error)
	// resolved holds the addresses of an egress allow-list's host names,
	// resolved on the host before planning (resolveAllow).
	resolved map[string][]netip.Addr
	// overlay says why this kernel cannot have an overlay workspace, nil
	// if it can; asked only for one. A nil func: not on this platform.
	overlay func() error
	// private returns what an overlay's id map would expose below the
	// host directories dirs (privateEntries); asked only for an overlay.
	private func(dirs []string) ([]rootfs.HiddenPath, error)
}

// launch is a complete, validated plan for one run: what the parent passes
// to clone(2) and what the child stage executes.
type launch struct {
	plan       nsexec.Plan
	proc       nsexec.Process
	cloneflags uintptr
	userns     bool
	setgroups  bool // root caller: setgroups is allowed in the new user namespace
	uidMap     []IDMap
	gidMap     []IDMap
	iso        Isolation
	// sources are the host paths of the plan, in source number order.
	sources []hostSource
	// checked holds the descriptors validation opened; Start closes them.
	checked *checkedSpec
	// egress is an egress jail's allow-list, one entry per address, and
	// pool its address pool; egress is nil for the other modes.
	egress []netns.Dest
	pool   netip.Prefix
	// pasta is the path of pasta for a user-mode egress jail (an
	// unprivileged caller's), empty otherwise.
	pasta string
}

// newLaunch validates a Spec and turns it and the command into a launch. It fails
// closed: a namespace this kernel lacks refuses the run (a *FeatureError)
// unless the Spec allows unenforced settings. The time namespace is taken
// where the kernel has it and reported as not in force where it does not.
// Host paths are resolved once, by validation, and planned as resolved.
func newLaunch(s *Spec, argv []string, h hostFacts) (_ *launch, retErr error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &SpecError{Field: "command", Value: "", Err: fmt.Errorf("is empty")}
	}
	if err := s.checkNative(); err != nil {
		return nil, err
	}
	cs, err := s.validate()
	if err != nil {
		return nil, err
	}
	l := &launch{checked: cs}
	defer func() {
		if retErr != nil {
			cs.close()
		}
	}()
	iso := &l.iso
	iso.Backend = BackendNative
	iso.Namespaces, iso.NotEnforced, iso.UIDMap, iso.GIDMap = []string{}, []string{}, []IDMap{}, []IDMap{}
	want := func(ns string) bool {
		if s.disabled(ns) {
			return false
		}
		if !h.namespaces[ns] {
			iso.NotEnforced = append(iso.NotEnforced, ns+" namespace: this kernel does not have it")
			return false
		}
		iso.Namespaces = append(iso.Namespaces, ns)
		return true
	}
	for _, ns := range Namespaces {
		if !want(ns) {
			continue
		}
		if ns == "time" {
			l.plan.Flags |= nsexec.FlagTimeNS
		} else {
			l.cloneflags |= cloneFlag[ns]
		}
	}
	iso.Network = NetworkInfo{Mode: s.netMode(), Allow: []AllowInfo{}}
	if iso.Network.Mode == NetworkEgress {
		iso.Network.Stack = NetworkStackVeth
		if h.euid != 0 {
			// No veth in the host's namespace for an unprivileged caller:
			// pasta, with the rules in the jail's namespace.
			path, err := "", errors.New("no user-mode network stack on this platform")
			if h.userStack != nil {
				path, err = h.userStack()
			}
			if err != nil {
				return nil, &FeatureError{Feature: "egress network", Reason: err.Error()}
			}
			l.pasta = path
			l.plan.Flags |= nsexec.FlagNetfilter
			iso.Network.Stack = NetworkStackPasta
		}
		l.plan.Sysctls = netns.JailSysctls
		l.egress, iso.Network.Allow = egressDests(cs.egress, h.resolved)
		l.pool = s.Network.pool()
	}
	iso.SensitiveSources = cs.sensitiveSources()
	iso.TrustedOnly = s.trustedOnly(iso.SensitiveSources)
	for _, ne := range iso.NotEnforced {
		if ne[:5] != "time " && !s.AllowUnenforced {
			return nil, &FeatureError{Feature: ne[:len(ne)-len(": this kernel does not have it")], Reason: "this kernel does not have it (see `jail check`; --allow-unenforced runs without it)"}
		}
	}

	uid, gid := s.ids()
	hostUID, hostGID := s.hostIDs()
	l.userns = l.cloneflags&cloneNewUser != 0
	switch {
	case l.userns && h.euid == 0:
		// Root maps the jail's ids to an unprivileged host id, so a process
		// that breaks out holds nothing.
		iso.UIDMap = []IDMap{{uid, hostUID, 1}}
		iso.GIDMap = []IDMap{{gid, hostGID, 1}}
		l.setgroups = true
		l.proc.Flags |= nsexec.FlagSetgroups
	case l.userns:
		// Setuid-free: an unprivileged caller can map only its own ids.
		iso.UIDMap = []IDMap{{uid, uint32(h.euid), 1}}
		iso.GIDMap = []IDMap{{gid, uint32(h.egid), 1}}
	case h.euid == 0:
		// No user namespace: the ids are host ids.
		uid, gid = hostUID, hostGID
		l.proc.Flags |= nsexec.FlagSetgroups
	default:
		if !s.disabled("user") {
			return nil, &FeatureError{Feature: "user namespace", Reason: "needed by an unprivileged caller, and this kernel does not have it"}
		}
		return nil, &FeatureError{Feature: "user namespace", Reason: "only root may run without one"}
	}
	l.uidMap, l.gidMap = iso.UIDMap, iso.GIDMap
	iso.UID, iso.GID = uid, gid

	p, proc := &l.plan, &l.proc
	proc.UID, proc.GID = uid, gid
	proc.Argv = argv
	proc.Env = s.env()
	proc.Path = s.searchPath()
	proc.Cwd = s.Cwd
	if proc.Cwd == "" {
		proc.Cwd = DefaultCwd
	}
	if l.cloneflags&cloneNewUTS != 0 {
		p.Hostname = s.Hostname
		if p.Hostname == "" {
			p.Hostname = DefaultHostname
		}
	}
	if l.cloneflags&cloneNewNet != 0 {
		p.Flags |= nsexec.FlagLoopback
	}
	if l.cloneflags&cloneNewPID != 0 {
		p.Flags |= nsexec.FlagPIDNS
	}
	if l.cloneflags&cloneNewCgroup != 0 {
		p.Flags |= nsexec.FlagCgroupNS
	}
	for _, r := range s.rlimits(h.rlimitHard) {
		proc.Rlimits = append(proc.Rlimits, nsexec.Rlimit{Resource: rlimitResources[r.Name], Cur: r.Soft, Max: r.Hard})
	}
	iso.Seccomp = seccomp.None
	var prog *seccomp.Program
	switch opts := (seccomp.Options{Log: s.SeccompLog}); {
	case cs.seccomp != nil:
		if prog, err = seccomp.Compile(cs.seccomp, opts); err != nil {
			field := "seccomp"
			if s.SeccompPolicy != nil {
				field = "seccomp_policy"
			}
			return nil, &SpecError{Field: field, Value: cs.seccomp.Name, Err: err}
		}
	case cs.seccompName != seccomp.None:
		if prog, err = seccomp.CompileBuiltin(cs.seccompName, opts); err != nil {
			return nil, &SpecError{Field: "seccomp", Value: cs.seccompName, Err: err}
		}
	}
	if prog != nil {
		p.Seccomp, p.SeccompRules = prog.Filter, prog.Rules
		if prog.Notify {
			p.Flags |= nsexec.FlagSeccompNotify
			switch {
			case h.seccompWaitKillable:
				p.Flags |= nsexec.FlagSeccompWaitKillable
			case !s.AllowUnenforced:
				return nil, &FeatureError{Feature: "seccomp kills", Reason: waitKillableMissing + " (--allow-unenforced runs without it)"}
			default:
				iso.NotEnforced = append(iso.NotEnforced, "seccomp kills: "+waitKillableMissing)
			}
		}
		iso.Seccomp = prog.Policy
	}

	iso.Landlock = LandlockInfo{Enforced: []string{}, Missing: []string{}}
	if s.Landlock == LandlockOff {
		iso.Landlock.Missing = []string{"landlock: off, as the Spec says"}
	}
	if l.cloneflags&cloneNewNS == 0 {
		iso.Root = "host"
		if s.Landlock != LandlockOff {
			iso.Landlock.Missing = []string{"landlock: no mount namespace, so no mount plan to make rules from"}
		}
		if proc.Cwd == DefaultCwd && s.Cwd == "" {
			proc.Cwd = "/"
		}
		return l, nil
	}
	p.Flags |= nsexec.FlagMountNS | nsexec.FlagRootRO
	if h.fs.Initramfs {
		p.Flags |= nsexec.FlagInitramfs
	}
	iso.Root = "tmpfs"
	if s.Root != "" {
		iso.Root, iso.RootPath = "directory", s.Root
	}
	cfg := rootfs.Config{UID: uid, GID: gid, Hostname: p.Hostname, TmpSizeBytes: s.TmpSizeBytes, ShmSizeBytes: s.ShmSizeBytes, PtyMax: s.PtyMax, Mounts: cs.mounts,
		HostProc: l.cloneflags&cloneNewPID == 0, FileSources: map[string]bool{}}
	if cs.root != nil {
		cfg.Dir = cs.root.Path
	}
	for _, d := range cs.egress {
		if d.Host != "" && len(h.resolved[d.Host]) > 0 {
			cfg.Hosts = append(cfg.Hosts, rootfs.HostEntry{Name: d.Host, Addrs: h.resolved[d.Host]})
		}
	}
	for _, src := range cs.sources {
		cfg.FileSources[src.Path] = !src.Dir
	}
	if s.overlayBytes != 0 {
		if err := overlayAllowed(h); err != nil {
			return nil, err
		}
		hidden, err := h.private(rootfs.OverlayDirs(h.fs))
		if err != nil {
			return nil, &InitError{Step: "plan root", Err: fmt.Errorf("overlay workspace: looking for what its id map would expose: %w", err)}
		}
		cfg.Overlay = &rootfs.Overlay{SizeBytes: s.overlayBytes, Workspace: WorkspacePath, Hidden: hidden}
		if s.overlayTree != "" {
			cfg.Overlay.Lowers = map[string]string{}
			for _, d := range rootfs.OverlayTargets(h.fs) {
				// One the host gained since the snapshot has none.
				if _, err := os.Lstat(path.Join(s.overlayTree, d)); err == nil {
					cfg.Overlay.Lowers[d] = path.Join(s.overlayTree, d)
				}
			}
		}
	}
	rp, err := rootfs.Build(cfg, h.fs)
	if err != nil {
		return nil, &InitError{Step: "plan root", Err: err}
	}
	p.Attach, p.Root, p.Mounts = rp.Attach, rp.Root, rp.Mounts
	if err := l.planLandlock(s, h, rp); err != nil {
		return nil, err
	}
	l.numberSources(cs)
	return l, nil
}

// planLandlock makes the second wall from the mount plan's intent, for the
// kernel's Landlock ABI. "require" refuses a kernel below ABI 6 unless the
// Spec allows unenforced settings; what the kernel lacks is reported.
func (l *launch) planLandlock(s *Spec, h hostFacts, rp rootfs.Plan) error {
	if s.Landlock == LandlockOff {
		return nil
	}
	info := &l.iso.Landlock
	abi := h.landlockABI
	info.Missing = landlock.Missing(abi)
	if abi == 0 {
		info.Missing = []string{"landlock: this kernel has none (Linux 5.13, with landlock in lsm=)"}
	}
	if s.Landlock == LandlockRequire && abi < landlockRequiredABI {
		reason := fmt.Sprintf("the Spec requires Landlock ABI %d, and this kernel has %d (see `jail check`)", landlockRequiredABI, abi)
		if !s.AllowUnenforced {
			return &FeatureError{Feature: "landlock", Reason: reason + "; --allow-unenforced runs without it"}
		}
		l.iso.NotEnforced = append(l.iso.NotEnforced, "landlock: "+reason)
	}
	if abi == 0 {
		return nil
	}
	info.ABI, info.Enforced = abi, landlock.Enforced(abi)
	handled := landlock.HandledFS(abi)
	p := &l.plan
	p.LandlockFS, p.LandlockScoped = uint64(handled), landlock.Scopes(abi)
	for _, r := range landlock.FromMounts(rp.Root, rp.Mounts) {
		p.LandlockRules = append(p.LandlockRules, nsexec.LandlockRule{Path: r.Path, Access: uint64(r.Access & handled)})
	}
	return nil
}

// overlayAllowed refuses an overlay workspace where it cannot be made.
func overlayAllowed(h hostFacts) error {
	const feature = "overlay workspace"
	if h.euid != 0 {
		return &FeatureError{Feature: feature, Reason: "needs root: its lower layers are id-mapped mounts of the host's directories, which only the host's root may make; use --workspace tmpfs"}
	}
	if h.overlay == nil || h.private == nil {
		return &FeatureError{Feature: feature, Reason: "not on this platform"}
	}
	if err := h.overlay(); err != nil {
		return &FeatureError{Feature: feature, Reason: err.Error()}
	}
	return nil
}

// hostSource is a host path the child binds or attaches to: opened by
// validation (the caller's sources, checked) or, when file is nil, by
// Start (jail's own: /usr, /dev/null, the attach point...). With tree
// set, what the child gets is not the path but an id-mapped detached
// mount of it that Start makes (nsexec.OpTree).
type hostSource struct {
	path string
	file *os.File
	ours bool // opened by Start, not by validation
	tree bool
}

// numberSources gives every host path of the plan its source number (the
// order of the descriptors the child inherits), one per distinct path.
func (l *launch) numberSources(cs *checkedSpec) {
	opened := map[string]*os.File{}
	if cs.root != nil {
		opened[cs.root.Path] = cs.root.File
	}
	for _, src := range cs.sources {
		opened[src.Path] = src.File
	}
	index := map[string]uint32{}
	number := func(path string) uint32 {
		if k, ok := index[path]; ok {
			return k
		}
		l.sources = append(l.sources, hostSource{path: path, file: opened[path]})
		index[path] = uint32(len(l.sources))
		return index[path]
	}
	p := &l.plan
	p.AttachSrc = number(p.Attach)
	for _, m := range append([]*nsexec.Mount{&p.Root}, ptrs(p.Mounts)...) {
		switch {
		case m.Kind == nsexec.OpBind && m.Flags&nsexec.OpTree != 0: // a mount of its own, moved once
			l.sources = append(l.sources, hostSource{path: m.Source, tree: true})
			m.Src = uint32(len(l.sources))
		case m.Kind == nsexec.OpBind && m.Flags&nsexec.OpSrcInRoot == 0:
			m.Src = number(m.Source)
		}
	}
	p.Sources = uint32(len(l.sources))
}

func ptrs(ms []nsexec.Mount) []*nsexec.Mount {
	out := make([]*nsexec.Mount, len(ms))
	for i := range ms {
		out[i] = &ms[i]
	}
	return out
}

// stepSysctl is nsexec.c's step that writes the plan's sysctls.
const stepSysctl = "sysctl"

// failedItem names the item a child's failed step was at, for an error
// message: the mount op of "mount plan" (and the steps that open its
// sources), or the key of "sysctl"; "" when there is none.
func (l *launch) failedItem(step string, index int32) string {
	switch {
	case index < 0:
	case step == stepSysctl && int(index) < len(l.plan.Sysctls):
		return l.plan.Sysctls[index].Key
	case step != stepSysctl && int(index) < len(l.plan.Mounts):
		return describeOp(l.plan.Mounts[index])
	}
	return ""
}

// describeOp names a mount op for an error message.
func describeOp(m nsexec.Mount) string {
	switch m.Kind {
	case nsexec.OpBind:
		return fmt.Sprintf("bind %s on %s", m.Source, m.Target)
	case nsexec.OpFS:
		return fmt.Sprintf("%s on %s", m.FSType, m.Target)
	case nsexec.OpMkdir:
		return "mkdir " + m.Target
	case nsexec.OpWriteFile:
		return "write " + m.Target
	case nsexec.OpSymlink:
		return "symlink " + m.Target
	default:
		return "mount attributes of " + m.Target
	}
}
