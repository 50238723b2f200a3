// Package oci maps a jail [jail.Spec] onto the OCI runtime-spec, the form
// container runtimes take (runc, crun, gVisor) and the one Docker's and
// Kubernetes' objects are made from. It is the half the container backends
// share: backend/docker maps the result on to the Engine API, and names what
// that API cannot say on top of what is named here.
//
// Nothing is dropped silently. A field the runtime-spec cannot express is
// refused with a *[jail.FeatureError] when the Spec asks for it, or listed in
// [Mapping.NotEnforced] when it is a default the Spec did not ask for (or
// when the Spec allows unenforced settings). The mapping is pure: it reads
// no host state, so `jail export` shows exactly what a backend would submit.
package oci

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/seccomp"
)

// Mapping is a Spec as the runtime-spec says it, and what a backend must
// carry out itself because the runtime-spec has no field for it.
type Mapping struct {
	// Spec is the container: process (argv, ids, env, cwd, rlimits, no
	// capabilities, no_new_privs), mounts, namespaces, resources, seccomp,
	// masked and read-only /proc paths. Root.Path is the Spec's root, or
	// "rootfs" for an image's.
	Spec *specs.Spec
	// Image is the Spec's image.
	Image string
	// SeccompName is the policy's name for the report ("strict", a file's
	// path, "none").
	SeccompName string
	// Timeout, KillGrace and CPUTime are the run's limits a backend
	// watches: the runtime-spec has no wall-clock or cgroup-wide CPU time
	// limit.
	Timeout, KillGrace, CPUTime time.Duration
	// OutputLimitBytes is the capture's head+tail limit.
	OutputLimitBytes int64
	// NetworkMode is none, host or egress. The runtime-spec has no
	// allow-list: a backend carries Network.Allow its own way (a
	// Kubernetes NetworkPolicy) or refuses egress.
	NetworkMode string
	// NotEnforced lists, as "what: why", what the Spec asked for or jail
	// gives by default that the mapping does not have.
	NotEnforced []string
	// SystemMounts is how many of Spec.Mounts, at its start, are jail's
	// own (/proc, /dev, /dev/pts, /dev/shm, /tmp); the Spec's follow.
	SystemMounts int
}

// SystemTargets are where a container runtime mounts its own file systems:
// a container backend refuses the Spec's mounts on them or below them.
var SystemTargets = []string{"/proc", "/dev", "/sys"}

// Gap records a field a target cannot express. A field the Spec asked for
// (asked) is refused with a *jail.FeatureError unless the Spec allows
// unenforced settings; a default it did not ask for, or one allowed, is
// listed in notEnforced as "field: why".
func Gap(s *jail.Spec, notEnforced *[]string, field string, asked bool, why string) error {
	if asked && !s.AllowUnenforced {
		return &jail.FeatureError{Feature: field, Reason: why + " (--allow-unenforced runs without it and lists it in the report)"}
	}
	*notEnforced = append(*notEnforced, field+": "+why)
	return nil
}

// Paths the workload may not read (masked) or write (read-only), as runc's
// default spec and Docker's have them, and jail's own /proc masks.
var (
	MaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats",
		"/sys/devices/virtual/powercap", "/sys/firmware"}
	ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// FromSpec maps s and the command argv. It validates s first (bind sources
// are looked up on this host: the backends run their engine here).
func FromSpec(s *jail.Spec, argv []string) (*Mapping, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &jail.SpecError{Field: "command", Err: fmt.Errorf("is empty")}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m := &Mapping{Image: s.Image, Timeout: time.Duration(s.Timeout), KillGrace: time.Duration(s.KillGrace),
		CPUTime: time.Duration(s.CPUTime), OutputLimitBytes: s.OutputLimitBytes, NotEnforced: []string{}}
	if m.OutputLimitBytes == 0 {
		m.OutputLimitBytes = jail.DefaultOutputLimitBytes
	}
	uid, gid := uint32(jail.DefaultUID), uint32(jail.DefaultUID)
	if s.UID != nil {
		uid = *s.UID
	}
	if s.GID != nil {
		gid = *s.GID
	}
	env := s.Env
	if env == nil {
		env = jail.DefaultEnv
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = jail.DefaultCwd
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = jail.DefaultHostname
	}
	o := &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			Args: append([]string{}, argv...), Env: append([]string{}, env...), Cwd: cwd,
			User:            specs.User{UID: uid, GID: gid},
			Capabilities:    &specs.LinuxCapabilities{Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{}},
			NoNewPrivileges: true,
			Rlimits:         rlimits(s.Rlimits),
		},
		Linux: &specs.Linux{MaskedPaths: MaskedPaths, ReadonlyPaths: ReadonlyPaths, Resources: resources(s)},
	}
	if s.Root != "" {
		o.Root.Path = s.Root
	}
	m.Spec = o

	// Namespaces: every one jail makes, but those the Spec disables.
	disabled := map[string]bool{}
	for _, n := range s.DisableNamespaces {
		disabled[n] = true
	}
	m.NetworkMode = s.Network.Mode
	if m.NetworkMode == "" {
		m.NetworkMode = jail.NetworkNone
		if disabled["net"] {
			m.NetworkMode = jail.NetworkHost
		}
	}
	if m.NetworkMode == jail.NetworkHost {
		disabled["net"] = true
	}
	for _, n := range []struct {
		name string
		typ  specs.LinuxNamespaceType
	}{{"pid", specs.PIDNamespace}, {"net", specs.NetworkNamespace}, {"mount", specs.MountNamespace},
		{"ipc", specs.IPCNamespace}, {"uts", specs.UTSNamespace}, {"user", specs.UserNamespace},
		{"cgroup", specs.CgroupNamespace}, {"time", specs.TimeNamespace}} {
		if !disabled[n.name] {
			o.Linux.Namespaces = append(o.Linux.Namespaces, specs.LinuxNamespace{Type: n.typ})
		}
	}
	if !disabled["user"] {
		hu, hg := uint32(jail.DefaultHostUID), uint32(jail.DefaultHostUID)
		if s.HostUID != nil {
			hu = *s.HostUID
		}
		if s.HostGID != nil {
			hg = *s.HostGID
		}
		o.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: uid, HostID: hu, Size: 1}}
		o.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: gid, HostID: hg, Size: 1}}
	}
	o.Linux.CgroupsPath = s.CgroupParent

	o.Mounts = systemMounts(s)
	m.SystemMounts = len(o.Mounts)
	for i, mt := range s.Mounts {
		for _, sys := range SystemTargets {
			if mt.Target == sys || strings.HasPrefix(mt.Target, sys+"/") {
				return nil, &jail.FeatureError{Feature: fmt.Sprintf("mounts[%d] (%s)", i, mt.Target),
					Reason: "a container's runtime mounts /proc, /dev and /sys itself: a mount there would be dropped or fought over"}
			}
		}
		switch mt.Type {
		case mounts.Tmpfs:
			o.Mounts = append(o.Mounts, tmpfs(mt.Target, mt.SizeBytes, "1777"))
		default:
			opts := []string{"rbind", "rprivate", "nosuid", "nodev"}
			if mt.Type == mounts.ROBind {
				opts = append(opts, "ro")
			} else {
				opts = append(opts, "rw")
			}
			// Clean: "DIR/." and "DIR/" are DIR to every check below.
			o.Mounts = append(o.Mounts, specs.Mount{Destination: mt.Target, Type: "bind", Source: filepath.Clean(mt.Source), Options: opts})
		}
	}

	// Seccomp.
	var err error
	var pol *seccomp.Policy
	switch {
	case s.SeccompPolicy != nil:
		m.SeccompName = s.SeccompPolicy.Name
		if m.SeccompName == "" {
			m.SeccompName = "inline"
		}
		pol = s.SeccompPolicy
		if o.Linux.Seccomp, err = s.SeccompPolicy.OCI(); err != nil {
			return nil, &jail.SpecError{Field: "seccomp_policy", Err: err}
		}
	default:
		m.SeccompName = s.Seccomp
		if m.SeccompName == "" {
			m.SeccompName = jail.DefaultSeccomp
		}
		if m.SeccompName != seccomp.None {
			p, err := seccomp.Load(m.SeccompName)
			if err != nil {
				return nil, &jail.SpecError{Field: "seccomp", Value: m.SeccompName, Err: err}
			}
			pol = p
			if o.Linux.Seccomp, err = p.OCI(); err != nil {
				return nil, &jail.SpecError{Field: "seccomp", Value: m.SeccompName, Err: err}
			}
		}
	}
	if pol != nil {
		if idx := pol.OverridingRules(); len(idx) > 0 {
			var what []string
			for _, i := range idx {
				r := pol.Rules[i]
				var conds []string
				for _, a := range r.Args {
					c := fmt.Sprintf("arg%d %s %#x", a.Index, a.Op, uint64(a.Value))
					if a.Op == seccomp.OpMaskedEq {
						c = fmt.Sprintf("arg%d&%#x == %#x", a.Index, uint64(a.Mask), uint64(a.Value))
					}
					conds = append(conds, c)
				}
				what = append(what, fmt.Sprintf("%s %s if %s", r.Action, strings.Join(r.Names, ","), strings.Join(conds, " and ")))
			}
			// A policy of the caller's asked for these rules; the built-in
			// ones' are ioctl kills that need a terminal.
			asked := s.SeccompPolicy != nil || !seccomp.IsBuiltin(m.SeccompName)
			if err := Gap(s, &m.NotEnforced, "seccomp rules", asked, fmt.Sprintf("an OCI runtime gives a call's unconditional rule precedence over its conditional ones, so these rules of the policy are not in force: %s (jail's own filter has them; the built-in policies' are ioctl TIOCSTI and TIOCLINUX, which need a terminal, and the container has none)", strings.Join(what, "; "))); err != nil {
				return nil, err
			}
		}
	}
	if s.SeccompLog {
		if err := Gap(s, &m.NotEnforced, "seccomp_log", true, "OCI runtimes log denied calls to the kernel's audit log, not to the report"); err != nil {
			return nil, err
		}
	}

	// Landlock: the runtime-spec has no Landlock ruleset.
	switch s.Landlock {
	case jail.LandlockOff:
	default:
		if err := Gap(s, &m.NotEnforced, "landlock", s.Landlock == jail.LandlockRequire,
			"the runtime-spec has no Landlock ruleset: the mount namespace is the only wall"); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// systemMounts are the mounts every jail has: /proc, a /dev with the
// usual devices (the runtime makes them), its own devpts, /dev/shm and
// /tmp with their sizes.
func systemMounts(s *jail.Spec) []specs.Mount {
	pty := s.PtyMax
	if pty == 0 {
		pty = jail.DefaultPtyMax
	}
	shm := tmpfs("/dev/shm", s.ShmSizeBytes, "1777")
	shm.Options = append(shm.Options, "noexec")
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", fmt.Sprintf("max=%d", pty)}},
		shm,
		tmpfs("/tmp", s.TmpSizeBytes, "1777"),
	}
}

// tmpfs is a tmpfs mount of size bytes (0: mounts.DefaultTmpfsBytes).
func tmpfs(target string, size int64, mode string) specs.Mount {
	if size == 0 {
		size = mounts.DefaultTmpfsBytes
	}
	return specs.Mount{Destination: target, Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "mode=" + mode, fmt.Sprintf("size=%d", size)}}
}

// rlimits are the Spec's rlimits and jail's defaults for those it does not
// name, as the runtime-spec names them.
func rlimits(rl []jail.Rlimit) []specs.POSIXRlimit {
	out := []specs.POSIXRlimit{}
	named := map[string]bool{}
	add := func(r jail.Rlimit) {
		named[r.Name] = true
		out = append(out, specs.POSIXRlimit{Type: RlimitType(r.Name), Soft: r.Soft, Hard: r.Hard})
	}
	for _, r := range rl {
		add(r)
	}
	for _, d := range jail.DefaultRlimits {
		if !named[d.Name] {
			add(d)
		}
	}
	return out
}

// RlimitType is the runtime-spec's name of a jail rlimit: "nofile" is
// "RLIMIT_NOFILE".
func RlimitType(name string) string {
	b := []byte("RLIMIT_" + name)
	for i := range b {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// cpuPeriod is the CFS period a CPUs limit is a quota of (100 ms, as jail's
// cgroup package and Docker use).
const cpuPeriod = 100000

// resources are the Spec's cgroup limits.
func resources(s *jail.Spec) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if s.MemoryMaxBytes > 0 {
		limit, swap := s.MemoryMaxBytes, s.MemoryMaxBytes+s.SwapMaxBytes // runtime-spec's swap is memory+swap
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if s.PidsMax > 0 {
		p := s.PidsMax
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if s.CPUs > 0 || s.CPUWeight > 0 {
		r.CPU = &specs.LinuxCPU{}
		if s.CPUs > 0 {
			q, p := int64(s.CPUs*cpuPeriod), uint64(cpuPeriod)
			r.CPU.Quota, r.CPU.Period = &q, &p
		}
		if s.CPUWeight > 0 {
			sh := CPUShares(s.CPUWeight)
			r.CPU.Shares = &sh
		}
	}
	if s.IOWeight > 0 {
		w := BlkioWeight(s.IOWeight)
		r.BlockIO = &specs.LinuxBlockIO{Weight: &w}
	}
	return r
}

// CPUShares is the cgroup v1 cpu.shares of a cgroup v2 cpu.weight (1 to
// 10000, 100 the default), as runc converts the other way: 100 is 1024.
func CPUShares(weight uint64) uint64 {
	return max(2, min(262144, weight*1024/100))
}

// BlkioWeight is the blkio weight (10 to 1000, 500 the default) of an
// io.weight (1 to 10000, 100 the default).
func BlkioWeight(weight uint64) uint16 {
	return uint16(max(10, min(1000, weight*5)))
}
