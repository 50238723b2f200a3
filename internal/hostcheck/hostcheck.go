package hostcheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/jailrt/jail/rootfs"
)

// Verdict is the outcome of one check.
type Verdict string

const (
	// OK means jail can use the feature.
	OK Verdict = "ok"
	// Warn means jail runs, with the limitation the detail names.
	Warn Verdict = "warn"
	// Missing means jail cannot provide what the feature stands for.
	Missing Verdict = "missing"
)

// Feature is the result of one check, as `jail check` prints it.
type Feature struct {
	// Name names the feature, e.g. "user namespaces".
	Name string `json:"name"`
	// Verdict says whether jail can use the feature.
	Verdict Verdict `json:"verdict"`
	// Detail is one line saying what was found.
	Detail string `json:"detail"`
	// Fix is one line saying how to get the feature; it is empty when Verdict is OK.
	Fix string `json:"fix,omitempty"`
}

// Feature names, in the order Run reports them.
const (
	nameKernel     = "kernel"
	nameUserNS     = "user namespaces"
	nameNamespaces = "pid, mount, net, uts, ipc, cgroup namespaces"
	nameTimeNS     = "time namespace"
	nameCgroups    = "cgroups"
	nameSnapshots  = "session snapshots"
	nameOverlay    = "overlay workspace"
	nameSeccomp    = "seccomp"
	nameLandlock   = "landlock"
	nameNftables   = "nftables"
	nameMountAPI   = "mount API"
	nameRootFS     = "root file system"
	nameCaller     = "caller"
)

// minKernel is the oldest kernel jail runs on: mount_setattr(2) arrived in
// 5.12 (openat2(2), also needed, in 5.6).
var minKernel = kernelVersion{Major: 5, Minor: 12}

// kernelVersion is the major.minor part of a kernel release.
type kernelVersion struct {
	Major, Minor int
}

// String returns the version as "major.minor".
func (v kernelVersion) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v kernelVersion) Less(w kernelVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	return v.Minor < w.Minor
}

// parseKernelRelease reads major.minor from a uname release such as
// "6.8.0-45-generic" or "5.15.153.1-microsoft-standard-WSL2".
func parseKernelRelease(release string) (kernelVersion, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return kernelVersion{}, fmt.Errorf("parse kernel release %q: want major.minor", release)
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return kernelVersion{}, fmt.Errorf("parse kernel release %q: %w", release, err)
	}
	// The minor number may run into a suffix ("4.19-rc1", "6.1+deb").
	minorText := parts[1]
	if i := strings.IndexFunc(minorText, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorText = minorText[:i]
	}
	minor, err := strconv.Atoi(minorText)
	if err != nil {
		return kernelVersion{}, fmt.Errorf("parse kernel release %q: %w", release, err)
	}
	return kernelVersion{Major: major, Minor: minor}, nil
}

// kernelFeature judges the uname release.
func kernelFeature(release string) Feature {
	f := Feature{Name: nameKernel}
	v, err := parseKernelRelease(release)
	switch {
	case err != nil:
		f.Verdict = Warn
		f.Detail = fmt.Sprintf("release %q: cannot tell the version", release)
		f.Fix = "make sure the kernel is " + minKernel.String() + " or later (mount_setattr)"
	case v.Less(minKernel):
		f.Verdict = Missing
		f.Detail = fmt.Sprintf("%s is older than %s (jail needs mount_setattr, 5.12, and openat2, 5.6)", release, minKernel)
		f.Fix = "upgrade the kernel to 5.12 or later"
	default:
		f.Verdict = OK
		f.Detail = release
	}
	return f
}

// overlayFeature says whether this caller can have a session with an
// overlay workspace (a writable root): it needs root, whose parent makes
// the id-mapped lower layers, and Linux 6.6.
func overlayFeature(release string, euid int) Feature {
	f := Feature{Name: nameOverlay}
	switch err := rootfs.OverlayKernel(release); {
	case err != nil:
		f.Verdict = Warn
		f.Detail = "`session create --workspace overlay` " + err.Error() + "; tmpfs and dir workspaces work"
		f.Fix = "upgrade the kernel to 6.6 or later"
	case euid != 0:
		f.Verdict = Warn
		f.Detail = "`session create --workspace overlay` needs root (only the host's root may id-map a mount of the host's directories); tmpfs and dir workspaces work"
		f.Fix = "run as root"
	default:
		f.Verdict = OK
		f.Detail = "sessions may have a writable root (/usr and the other host directories it binds, over id-mapped host directories, and /etc, /opt, /var...): overlays whose changes are in the session's tmpfs"
	}
	return f
}

// nsKernelConfig names the kernel option behind each /proc/self/ns entry
// checked for [nameNamespaces].
var nsKernelConfig = []struct{ File, Config string }{
	{"pid", "CONFIG_PID_NS"},
	{"mnt", "CONFIG_NAMESPACES"},
	{"net", "CONFIG_NET_NS"},
	{"uts", "CONFIG_UTS_NS"},
	{"ipc", "CONFIG_IPC_NS"},
	{"cgroup", "CONFIG_CGROUPS"},
}

// namespacesFeature judges which /proc/self/ns entries exist; present is
// called with "pid", "mnt", and so on.
func namespacesFeature(present func(ns string) bool) Feature {
	f := Feature{Name: nameNamespaces}
	var missing, configs []string
	for _, ns := range nsKernelConfig {
		if !present(ns.File) {
			missing = append(missing, ns.File)
			configs = append(configs, ns.Config+"=y")
		}
	}
	if len(missing) == 0 {
		f.Verdict = OK
		f.Detail = "all present in /proc/self/ns"
		return f
	}
	f.Verdict = Missing
	f.Detail = "not in /proc/self/ns: " + strings.Join(missing, ", ")
	f.Fix = "use a kernel built with " + strings.Join(configs, ", ")
	return f
}

// timeNSFeature judges whether /proc/self/ns/time exists.
func timeNSFeature(present bool) Feature {
	if present {
		return Feature{Name: nameTimeNS, Verdict: OK, Detail: "present in /proc/self/ns"}
	}
	return Feature{
		Name:    nameTimeNS,
		Verdict: Warn,
		Detail:  "no /proc/self/ns/time: jail runs without it; the report says so",
		Fix:     "use a 5.6 or later kernel built with CONFIG_TIME_NS=y",
	}
}

// seccompFacts is what the seccomp probe found.
type seccompFacts struct {
	// StatusLine is the value of "Seccomp:" in /proc/self/status, or "" if absent.
	StatusLine string
	// Mode is what prctl(PR_GET_SECCOMP) returned, valid if ModeErr is nil.
	Mode    int
	ModeErr error
	// ActionsAvail is /proc/sys/kernel/seccomp/actions_avail, valid if ActionsErr is nil.
	ActionsAvail string
	ActionsErr   error
	// NoWaitKillable: the kernel lacks SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	// (Linux 5.19), which a policy that kills needs (see jail.Spec).
	NoWaitKillable bool
}

// seccompFeature judges seccomp support.
func seccompFeature(s seccompFacts) Feature {
	f := Feature{Name: nameSeccomp}
	if s.StatusLine == "" || s.ModeErr != nil {
		f.Verdict = Missing
		switch {
		case s.StatusLine == "":
			f.Detail = "no Seccomp line in /proc/self/status"
		default:
			f.Detail = fmt.Sprintf("prctl PR_GET_SECCOMP: %v", s.ModeErr)
		}
		f.Fix = "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
		return f
	}
	mode := fmt.Sprintf("mode %d", s.Mode)
	if s.Mode == 2 {
		mode += " (this process is already filtered; jail's filter stacks on it)"
	}
	if s.ActionsErr != nil {
		f.Verdict = Warn
		f.Detail = fmt.Sprintf("%s; read actions_avail: %v", mode, s.ActionsErr)
		f.Fix = "use a 4.14 or later kernel, which lists seccomp actions and has SECCOMP_RET_KILL_PROCESS"
		return f
	}
	actions := strings.Fields(s.ActionsAvail)
	for _, a := range actions {
		if a == "kill_process" {
			f.Verdict = OK
			f.Detail = fmt.Sprintf("%s; actions %s", mode, strings.Join(actions, " "))
			if s.NoWaitKillable {
				f.Verdict = Warn
				f.Detail += "; no SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: a signal could make a call the policy kills return EINTR instead, so the default and strict policies are refused (--allow-unenforced runs them without it)"
				f.Fix = "use Linux 5.19 or later"
			}
			return f
		}
	}
	f.Verdict = Warn
	f.Detail = fmt.Sprintf("%s; no kill_process in actions %q", mode, s.ActionsAvail)
	f.Fix = "use a 4.14 or later kernel, which has SECCOMP_RET_KILL_PROCESS"
	return f
}

// landlockFeature judges the result of
// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
func landlockFeature(abi int, err error) Feature {
	f := Feature{Name: nameLandlock}
	if err == nil {
		f.Verdict, f.Detail = OK, fmt.Sprintf("ABI v%d: the second wall (file rules from the mount plan", abi)
		switch {
		case abi >= 9:
			f.Detail += ", signal and socket scopes, unix sockets by path)"
		case abi >= 6:
			f.Detail += ", signal and abstract socket scopes; unix sockets by path need ABI 9, Linux 7.1)"
		default:
			f.Verdict = Warn
			f.Detail += "; signal and socket scopes need ABI 6, and --landlock require refuses this kernel)"
			f.Fix = "use Linux 6.12 or later for the scopes"
		}
		return f
	}
	// jail runs without it ("auto"), and the report says so.
	f.Verdict = Warn
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP):
		f.Detail = "built in but disabled at boot: jails run without their second wall, and say so"
		f.Fix = "add landlock to the lsm= kernel boot parameter"
	case errors.Is(err, syscall.ENOSYS):
		f.Detail = "not in this kernel: jails run without their second wall, and say so"
		f.Fix = "use a 5.13 or later kernel built with CONFIG_SECURITY_LANDLOCK=y"
	default:
		f.Detail = fmt.Sprintf("landlock_create_ruleset: %v: jails run without their second wall", err)
		f.Fix = "use a 5.13 or later kernel built with CONFIG_SECURITY_LANDLOCK=y"
	}
	return f
}

// rootFSFeature judges the host's /: the initramfs (rootfs) has no parent
// mount, which pivot_root needs.
func rootFSFeature(initramfs bool) Feature {
	if initramfs {
		return Feature{Name: nameRootFS, Verdict: OK,
			Detail: "/ is the initramfs (rootfs), which pivot_root refuses: each jail enters a copy of the tree first, so pivot_root can detach the host's tree"}
	}
	return Feature{Name: nameRootFS, Verdict: OK, Detail: "/ is a mounted file system: pivot_root detaches the host's tree"}
}

// nftablesFeature judges the result of opening a NETLINK_NETFILTER socket.
func nftablesFeature(err error) Feature {
	if err == nil {
		return Feature{Name: nameNftables, Verdict: OK, Detail: "NETLINK_NETFILTER socket opens"}
	}
	return Feature{
		Name:    nameNftables,
		Verdict: Warn,
		Detail:  fmt.Sprintf("NETLINK_NETFILTER socket: %v (needed later for egress allow-lists)", err),
		Fix:     "load nfnetlink and nf_tables (modprobe nf_tables) or use a kernel built with CONFIG_NF_TABLES",
	}
}

// mountAPIFeature judges the result of a no-op mount_setattr call. Only
// ENOSYS means the syscall is absent: EBADF, EINVAL, EPERM (no CAP_SYS_ADMIN)
// and success all show the kernel knows it.
func mountAPIFeature(err error) Feature {
	f := Feature{Name: nameMountAPI}
	switch {
	case errors.Is(err, syscall.ENOSYS):
		f.Verdict = Missing
		f.Detail = "mount_setattr: not implemented"
		f.Fix = "upgrade the kernel to 5.12 or later"
	case err == nil:
		f.Verdict = OK
		f.Detail = "mount_setattr present"
	default:
		f.Verdict = OK
		f.Detail = fmt.Sprintf("mount_setattr present (probe got %v)", err)
	}
	return f
}

// overflowUID is the host uid jail maps in-jail ids to when run as root.
const overflowUID = 65534

// callerFeature describes who is calling. For root, cwdUnreachable says
// why the jail's host uid cannot reach the working directory cwd ("" when
// it can): a bind source there would be refused at setup.
func callerFeature(uid, euid int, cwd, cwdUnreachable string) Feature {
	f := Feature{Name: nameCaller, Verdict: OK}
	switch {
	case uid == 0 && euid == 0:
		f.Detail = fmt.Sprintf("root (jail maps in-jail ids to host uid %d)", overflowUID)
	case euid == 0:
		f.Detail = fmt.Sprintf("uid %d, euid 0 (root: jail maps in-jail ids to host uid %d)", uid, overflowUID)
	case uid != euid:
		f.Detail = fmt.Sprintf("uid %d, euid %d (unprivileged: jail maps your uid into the jail)", uid, euid)
	default:
		f.Detail = fmt.Sprintf("uid %d (unprivileged: jail maps your uid into the jail)", uid)
	}
	if euid == 0 && cwdUnreachable != "" {
		f.Verdict = Warn
		f.Detail += fmt.Sprintf("; host uid %d cannot reach the working directory %s: %s", overflowUID, cwd, cwdUnreachable)
		f.Fix = fmt.Sprintf("bind sources must be reachable by host uid %d: keep them out of 0700 directories (mktemp -d, a home directory), chmod o+rx the directories above them, or give --host-uid the id of their owner (never 0 for code you do not trust)", overflowUID)
	}
	return f
}
