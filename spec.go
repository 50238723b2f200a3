package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/seccomp"
)

// Spec describes what to isolate and what to limit. It is plain data:
// profiles load into it, services send it as JSON, adapters translate it.
// The zero Spec is the most isolated jail (every namespace, default root,
// non-root ids); fields only loosen or tune it. [Spec.Validate] runs in
// [Cmd.Start].
type Spec struct {
	// Root is a host directory used as the jail's root filesystem, mounted
	// read-only (e.g. a debootstrap or an unpacked image); its mount points
	// (/proc, /dev, /tmp and those of Mounts) must exist in it. Empty: a
	// fresh tmpfs root with read-only binds of the host's /usr, /bin, /lib...
	// and a minimal /etc.
	Root string `json:"root,omitempty"`

	// Mounts are added to the root in order, after the system mounts.
	Mounts []mounts.Mount `json:"mounts,omitempty"`

	// AllowSensitiveSources allows bind sources (and a Root) that
	// [mounts.IsSensitive] refuses: under /proc, /sys, /dev, /boot, /run,
	// the Docker socket, the host's credentials (~/.ssh, ~/.aws,
	// ~/.kube, /etc/shadow...), a home directory holding them, the whole
	// /etc, /home or /. In JSON, true allows every one; a list of host
	// paths allows the sources at or below them only. The report lists
	// the sensitive sources a run opened (Isolation.SensitiveSources).
	AllowSensitiveSources SensitiveSources `json:"allow_sensitive_sources,omitzero"`

	// TmpSizeBytes is the size of the jail's /tmp tmpfs; 0 means 64 MiB.
	// The jail's files live in memory: what is written to /tmp, /dev/shm,
	// each tmpfs of Mounts and the 4 MiB root from the workload on is
	// charged to the jail's memory cgroup when it has a MemoryMaxBytes
	// (on cgroup v1 the few files jail writes while it builds the root are
	// charged to its caller), and is otherwise bounded only by their sizes.
	TmpSizeBytes int64 `json:"tmp_size_bytes,omitempty"`

	// ShmSizeBytes is the size of the jail's /dev/shm tmpfs (POSIX shared
	// memory, semaphores); 0 means 64 MiB.
	ShmSizeBytes int64 `json:"shm_size_bytes,omitempty"`

	// PtyMax is how many pseudo-terminals the jail may have open at once
	// (its own devpts instance's max=), so that one jail cannot take the
	// ptys every container on the host shares; 0 means 16, at most 4096.
	PtyMax int `json:"pty_max,omitempty"`

	// Hostname is the jail's hostname; empty means "jail".
	Hostname string `json:"hostname,omitempty"`

	// UID and GID are the workload's ids inside the jail; nil means 1000.
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`

	// HostUID and HostGID are the host ids the jail's ids map to when the
	// caller is root; nil means 65534 (nobody), so that a process breaking
	// out holds nothing. An unprivileged caller always maps its own ids.
	HostUID *uint32 `json:"host_uid,omitempty"`
	HostGID *uint32 `json:"host_gid,omitempty"`

	// Env is the workload's whole environment as KEY=VALUE; nothing is
	// inherited from the caller. Nil means PATH, HOME=/tmp and LANG=C.UTF-8.
	Env []string `json:"env,omitzero"`

	// Cwd is the workload's working directory; empty means /tmp.
	Cwd string `json:"cwd,omitempty"`

	// Timeout is the wall-clock limit of the run, counted from the start of
	// the jail (setup, about a millisecond, included); when it passes, every
	// process in the jail is killed and the status is timed_out. 0 means no
	// limit.
	Timeout Duration `json:"timeout,omitempty"`

	// KillGrace, when not 0, sends SIGTERM to every process in the jail at
	// the timeout and SIGKILL this long after.
	KillGrace Duration `json:"kill_grace,omitempty"`

	// OutputLimitBytes caps the captured stdout and stderr, each: the head
	// and the tail are kept and the rest is counted. 0 means 1 MiB.
	OutputLimitBytes int64 `json:"output_limit_bytes,omitempty"`

	// Rlimits are setrlimit(2) limits for the workload. The resources it
	// does not name get the [DefaultRlimits].
	Rlimits []Rlimit `json:"rlimits,omitempty"`

	// DisableNamespaces lists namespaces not to create: user, pid, mount,
	// net, uts, ipc, cgroup, time. Only for trusted workloads; disabling
	// user requires root, disabling mount requires the default Root and no
	// Mounts.
	DisableNamespaces []string `json:"disable_namespaces,omitempty"`

	// Network is the jail's network: none (the default: its own network
	// namespace, lo only), host, or egress to an allow-list.
	Network Network `json:"network,omitzero"`

	// MemoryMaxBytes caps the memory of every process of the jail together
	// (cgroup memory.max, or memory.limit_in_bytes on v1); an allocation
	// beyond it wakes the OOM killer, which on cgroup v2 kills the whole
	// jail, and the status is oom_killed. At least 1 MiB; 0 means no limit.
	MemoryMaxBytes int64 `json:"memory_max_bytes,omitempty"`

	// SwapMaxBytes is the swap the jail may use beyond MemoryMaxBytes; with
	// a memory limit, 0 means none.
	SwapMaxBytes int64 `json:"swap_max_bytes,omitempty"`

	// PidsMax caps the processes and threads of the jail (pids.max): a
	// fork bomb gets EAGAIN. 0 means no limit.
	PidsMax int64 `json:"pids_max,omitempty"`

	// CPUs is the CPU bandwidth of the jail in CPUs (cpu.max): 0.5 lets it
	// run half of each 100 ms. 0 means no limit.
	CPUs float64 `json:"cpus,omitempty"`

	// CPUWeight and IOWeight are the jail's shares of contended CPU and
	// block I/O, 1 to 10000 (100 is the default), as cgroup v2 counts them.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	IOWeight  uint64 `json:"io_weight,omitempty"`

	// CPUTime is the CPU time all processes of the jail may use together,
	// read from the cgroup (unlike RLIMIT_CPU, which counts each process
	// alone); when it is used up, the jail is killed and the status is
	// cpu_time_exceeded. 0 means no limit.
	CPUTime Duration `json:"cpu_time,omitempty"`

	// CgroupParent is the cgroup to create the jail's cgroup in, instead
	// of the cgroup jail runs in (see the cgroup package's Options.Parent).
	CgroupParent string `json:"cgroup_parent,omitempty"`

	// Seccomp selects the seccomp policy: a built-in one ("default",
	// "strict"), a policy file (a path with a slash, or ending in .yaml,
	// .yml or .json; see the seccomp package), or "none" for no filter
	// (trusted workloads only). Empty means "default".
	Seccomp string `json:"seccomp,omitempty"`

	// SeccompPolicy is a policy given inline, for programs that build one;
	// Seccomp must then be empty.
	SeccompPolicy *seccomp.Policy `json:"seccomp_policy,omitempty"`

	// SeccompLog reports every call the policy denies, not only the
	// calls that kill, in Result.SeccompDenials. Each denied call is then
	// answered by the jail's PID 1 instead of the kernel, which costs a
	// few microseconds per denial.
	SeccompLog bool `json:"seccomp_log,omitempty"`

	// Landlock is the second wall, a Landlock ruleset made from the mount
	// plan (see the landlock package): "auto" (or empty) uses what this
	// kernel's Landlock has and reports what it lacks in
	// Result.Isolation.Landlock; "require" refuses a kernel below Landlock
	// ABI 6 (Linux 6.12: files, truncate, device ioctls, signal and
	// abstract socket scopes), as any missing feature is refused; "off"
	// goes without.
	Landlock string `json:"landlock,omitempty"`

	// Backend is what runs the jail: "native" (or empty: this host's
	// kernel, through [Command]), "docker" (a container of a Docker engine,
	// through package backend/docker), "k8s" (a Pod of a Kubernetes
	// cluster, through package backend/k8s) or "auto" (the CLI picks the
	// first of native, docker, k8s that can run here, and the report says
	// which and why). [Command] runs native jails only and refuses the
	// others.
	Backend string `json:"backend,omitempty"`

	// Image is the image a container backend runs the jail from (its
	// root, read-only); the native backend takes Root instead and refuses
	// an image.
	Image string `json:"image,omitempty"`

	// AllowUnenforced lets the run go ahead when this host or caller cannot
	// provide something the Spec asks for; the Result's isolation lists what
	// was not in force. Otherwise such a run is refused.
	AllowUnenforced bool `json:"allow_unenforced,omitempty"`

	// overlayBytes, set by a session's overlay workspace
	// (Workspace.apply), makes the root's system directories writable
	// overlays whose layers and the workspace share a tmpfs of this size
	// (rootfs.Overlay). Not a Spec field of its own: the session's
	// Workspace says it, and carries it to forks and restores.
	overlayBytes int64
	// overlayTree, for a session made from a snapshot of an overlay
	// workspace, is the snapshot's layer tree: each overlay's second
	// lower layer is its directory for that overlay.
	overlayTree string
}

// SensitiveSources says which sensitive host paths a Spec may bind: all
// of them, or those at or below Paths (absolute, clean).
type SensitiveSources struct {
	All   bool
	Paths []string
}

// AllowAll is SensitiveSources{All: true}.
var AllowAll = SensitiveSources{All: true}

// IsZero reports whether s allows nothing.
func (s SensitiveSources) IsZero() bool { return !s.All && len(s.Paths) == 0 }

// Allows reports whether a bind of hostPath (absolute, without symlinks)
// may expose something sensitive.
func (s SensitiveSources) Allows(hostPath string) bool {
	if s.All {
		return true
	}
	for _, p := range s.Paths {
		if hostPath == p || p == "/" || strings.HasPrefix(hostPath, p+"/") {
			return true
		}
	}
	return false
}

// MarshalJSON writes true for All, else the list of paths.
func (s SensitiveSources) MarshalJSON() ([]byte, error) {
	if s.All {
		return []byte("true"), nil
	}
	if s.Paths == nil {
		return []byte("false"), nil
	}
	return json.Marshal(s.Paths)
}

// UnmarshalJSON reads true, false or a list of host paths.
func (s *SensitiveSources) UnmarshalJSON(b []byte) error {
	var all bool
	if err := json.Unmarshal(b, &all); err == nil {
		*s = SensitiveSources{All: all}
		return nil
	}
	var paths []string
	if err := json.Unmarshal(b, &paths); err != nil {
		return errors.New("want true, false or a list of host paths")
	}
	*s = SensitiveSources{Paths: paths}
	return nil
}

// Rlimit is a setrlimit(2) resource limit.
type Rlimit struct {
	// Name is the resource: as, core, cpu, data, fsize, locks, memlock,
	// msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack.
	Name string `json:"name"`
	// Soft and Hard are the limits; RlimitInfinity means unlimited.
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// RlimitInfinity is an unlimited Rlimit value (RLIM_INFINITY).
const RlimitInfinity = math.MaxUint64

// MarshalJSON writes soft and hard as numbers, RlimitInfinity as
// "unlimited".
func (r Rlimit) MarshalJSON() ([]byte, error) {
	v := func(n uint64) any {
		if n == RlimitInfinity {
			return "unlimited"
		}
		return n
	}
	return json.Marshal(struct {
		Name string `json:"name"`
		Soft any    `json:"soft"`
		Hard any    `json:"hard"`
	}{r.Name, v(r.Soft), v(r.Hard)})
}

// UnmarshalJSON reads soft and hard as numbers or as "unlimited".
func (r *Rlimit) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name       string
		Soft, Hard json.RawMessage
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	r.Name = raw.Name
	for _, v := range []struct {
		raw json.RawMessage
		dst *uint64
	}{{raw.Soft, &r.Soft}, {raw.Hard, &r.Hard}} {
		n, err := ParseRlimitValue(strings.Trim(string(v.raw), `"`))
		if err != nil {
			return fmt.Errorf("rlimit %s: %w", raw.Name, err)
		}
		*v.dst = n
	}
	return nil
}

// ParseRlimitValue parses a limit: a number or "unlimited".
func ParseRlimitValue(s string) (uint64, error) {
	if s == "unlimited" || s == "infinity" {
		return RlimitInfinity, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number or \"unlimited\"", s)
	}
	return n, nil
}

// rlimitResources maps names to RLIMIT_* numbers (the same on every Linux
// architecture jail builds for except mips and sparc).
var rlimitResources = map[string]int{
	"cpu": 0, "fsize": 1, "data": 2, "stack": 3, "core": 4, "rss": 5, "nproc": 6, "nofile": 7,
	"memlock": 8, "as": 9, "locks": 10, "sigpending": 11, "msgqueue": 12, "nice": 13, "rtprio": 14, "rttime": 15,
}

// Namespaces jail can create, in report order.
var Namespaces = []string{"user", "pid", "mount", "net", "uts", "ipc", "cgroup", "time"}

// Defaults applied by [Spec.Validate]'s callers for unset fields.
const (
	DefaultUID              = 1000
	DefaultHostUID          = 65534
	DefaultOutputLimitBytes = 1 << 20
	DefaultHostname         = "jail"
	DefaultCwd              = "/tmp"
	DefaultSeccomp          = "default"
	DefaultPtyMax           = 16
	// MaxMounts bounds Spec.Mounts: each bind source is a descriptor the
	// jail's child inherits.
	MaxMounts           = 256
	maxPtyMax           = 4096
	MaxOutputLimitBytes = 1 << 30
	maxTimeout          = 7 * 24 * time.Hour
)

// Spec.Backend's values.
const (
	BackendNative = "native"
	BackendDocker = "docker"
	BackendK8s    = "k8s"
	BackendAuto   = "auto"
)

// Spec.Landlock modes.
const (
	LandlockAuto    = "auto"
	LandlockRequire = "require"
	LandlockOff     = "off"
	// landlockRequiredABI is what "require" requires: files, refer,
	// truncate, device ioctls, and the signal and abstract socket scopes.
	landlockRequiredABI = 6
)

// DefaultRlimits are set for every jail unless its Spec sets the same
// resource. They bound what the kernel counts per user across user
// namespaces: queued signals (timer_create takes one too), POSIX message
// queue bytes, locked shared memory and processes are charged both to the
// jail's user and, up the chain, to the user that created the jail's user
// namespace: host root for a root caller, the caller otherwise. Without
// them one jail could take all of that user's budget, and the host would
// get EAGAIN from sigqueue and timer_create, and EMFILE from mq_open. No
// process in a jail can raise a hard limit (that needs CAP_SYS_RESOURCE in
// the host's user namespace); a default above the hard limit jail itself
// runs with is lowered to it.
var DefaultRlimits = []Rlimit{
	{Name: "sigpending", Soft: 256, Hard: 256},
	{Name: "msgqueue", Soft: 64 << 10, Hard: 64 << 10},
	{Name: "memlock", Soft: 1 << 20, Hard: 1 << 20},
	{Name: "nproc", Soft: 4096, Hard: 4096},
}

// DefaultEnv is the environment of a Spec whose Env is nil.
var DefaultEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// Duration is a time.Duration that reads and writes JSON as a string such
// as "10s" or "1m30s" (numbers are read as seconds).
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "10s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err := json.Unmarshal(b, &secs); err != nil {
			return errors.New("duration must be a string like \"10s\" or a number of seconds")
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// SpecError is an invalid field of a Spec. It matches [ErrInvalidSpec].
type SpecError struct {
	Field string // the JSON name, with an index where it has one: "mounts[1].target"
	Value string
	Err   error
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("invalid %s %q: %v", e.Field, e.Value, e.Err)
}
func (e *SpecError) Unwrap() error        { return e.Err }
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

// validHostname reports whether h is 1-64 letters, digits, '.' or '-',
// starting and ending with a letter or digit. (A regexp compiled at
// package init cost 0.7 ms of every jail start.)
func validHostname(h string) bool {
	if len(h) == 0 || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '.' && c != '-') || i == 0 || i == len(h)-1) {
			return false
		}
	}
	return true
}

// validImage reports whether ref may be an image reference: what a
// registry name, tag or digest is made of. The engine parses it; this keeps
// control characters and spaces out of an API request and an error line.
func validImage(ref string) bool {
	if len(ref) > 255 {
		return false
	}
	for _, r := range ref {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:@+", r)) {
			return false
		}
	}
	return true
}

// allowSensitive is the test mounts.OpenSource takes: nil when the Spec
// allows no sensitive source.
func (s *Spec) allowSensitive() func(string) bool {
	if s.AllowSensitiveSources.IsZero() {
		return nil
	}
	return s.AllowSensitiveSources.Allows
}

// trustedOnly lists what makes a jail of s no security boundary (see
// Isolation.TrustedOnly); sources are the checked binds and root.
func (s *Spec) trustedOnly(sensitive []string) []string {
	var why []string
	if s.netMode() == NetworkHost {
		why = append(why, "network: the host's")
	}
	for _, ns := range s.DisableNamespaces {
		if ns != "net" { // said by the network
			why = append(why, ns+" namespace: not created")
		}
	}
	if s.Seccomp == "none" && s.SeccompPolicy == nil {
		why = append(why, "seccomp: none")
	}
	for _, src := range sensitive {
		why = append(why, "sensitive source "+src)
	}
	return why
}

// sensitiveSources lists the sensitive sources cs opened, as
// Isolation.SensitiveSources says them.
func (cs *checkedSpec) sensitiveSources() []string {
	var out []string
	if cs.root != nil && cs.root.Sensitive != "" {
		out = append(out, cs.root.Path+": "+cs.root.Sensitive)
	}
	for _, src := range cs.sources {
		if src.Sensitive != "" {
			out = append(out, src.Path+": "+src.Sensitive)
		}
	}
	return out
}

// checkNative refuses what only another backend runs: [Command] is the
// native backend.
func (s *Spec) checkNative() error {
	if s.Backend != "" && s.Backend != BackendNative {
		if s.Backend == BackendAuto {
			return &SpecError{Field: "backend", Value: s.Backend, Err: errors.New("jail.Command runs native jails only: `jail run --backend auto` chooses one")}
		}
		return &SpecError{Field: "backend", Value: s.Backend, Err: fmt.Errorf("jail.Command runs native jails only: use `jail run --backend %s` or package backend/%s", s.Backend, s.Backend)}
	}
	if s.Image != "" {
		return &SpecError{Field: "image", Value: s.Image, Err: errors.New("the native backend runs no images: give a root directory (root), or use --backend docker")}
	}
	return nil
}

// Validate checks every field and returns the first problem as a
// *[SpecError] (which matches [ErrInvalidSpec]). It looks at the host: bind
// sources and Root must exist and have no symlink in their path, and
// sensitive sources are refused.
func (s *Spec) Validate() error {
	cs, err := s.validate()
	if cs != nil {
		cs.close()
	}
	return err
}

// checkedSpec holds what validation resolved on the host, so that the
// planner does not resolve it a second time.
type checkedSpec struct {
	root    *mounts.Source   // Root, opened; nil for the default root
	mounts  []mounts.Mount   // Mounts with bind sources as their real paths
	sources []*mounts.Source // the bind sources, opened
	seccomp *seccomp.Policy  // a policy file's or SeccompPolicy
	// seccompName is the built-in policy ("none" included) when seccomp is nil.
	seccompName string
	// egress is the allow-list of an egress network, parsed.
	egress []netns.Dest
}

// close closes the host descriptors validation opened.
func (cs *checkedSpec) close() {
	if cs.root != nil {
		cs.root.Close()
	}
	for _, src := range cs.sources {
		src.Close()
	}
}

// validateProcess checks the fields that describe the process rather than
// the jail, which a command of a session may set (see
// [Session.Command]).
func (s *Spec) validateProcess() error {
	bad := func(field, value, format string, args ...any) error {
		return &SpecError{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
	}
	for i, e := range s.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsRune(e, 0) {
			return bad(fmt.Sprintf("env[%d]", i), e, "must be KEY=VALUE without NUL bytes")
		}
	}
	if s.Cwd != "" {
		if err := mounts.CheckTarget(s.Cwd); err != nil {
			return bad("cwd", s.Cwd, "%v", err)
		}
	}
	if s.Timeout < 0 || time.Duration(s.Timeout) > maxTimeout {
		return bad("timeout", time.Duration(s.Timeout).String(), "must be between 0 (none) and 168h")
	}
	if s.KillGrace < 0 || time.Duration(s.KillGrace) > maxTimeout {
		return bad("kill_grace", time.Duration(s.KillGrace).String(), "must be between 0 and 168h")
	}
	if s.OutputLimitBytes < 0 || s.OutputLimitBytes > MaxOutputLimitBytes {
		return bad("output_limit_bytes", strconv.FormatInt(s.OutputLimitBytes, 10), "must be between 0 (default) and 1 GiB")
	}
	if err := (cgroup.Limits{CPUTime: time.Duration(s.CPUTime)}).Validate(); err != nil {
		var le *cgroup.LimitError
		if errors.As(err, &le) {
			return bad(limitFields[le.Field], le.Value, "%s", le.Reason)
		}
		return bad("cpu_time", "", "%v", err)
	}
	return nil
}

func (s *Spec) validate() (_ *checkedSpec, retErr error) {
	bad := func(field, value, format string, args ...any) error {
		return &SpecError{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
	}
	cs := &checkedSpec{}
	defer func() {
		if retErr != nil {
			cs.close()
		}
	}()
	var table mounts.Table
	readTable := func() (mounts.Table, error) { // once, and only if a source needs it
		var err error
		if table == nil {
			table, err = mounts.ReadTable()
		}
		return table, err
	}
	switch s.Backend {
	case "", BackendNative, BackendDocker, BackendK8s, BackendAuto:
	default:
		return nil, bad("backend", s.Backend, "must be native, docker, k8s or auto")
	}
	if s.Image != "" && !validImage(s.Image) {
		return nil, bad("image", s.Image, "want an image reference: letters, digits and . _ - / : @ +, at most 255 bytes")
	}
	if s.Image != "" && s.Root != "" {
		return nil, bad("image", s.Image, "cannot be given with root")
	}
	for i, p := range s.AllowSensitiveSources.Paths {
		if err := mounts.CheckTarget(p); err != nil {
			return nil, bad(fmt.Sprintf("allow_sensitive_sources[%d]", i), p, "%v", err)
		}
	}
	if s.Root != "" {
		if err := mounts.CheckTarget(s.Root); err != nil {
			return nil, bad("root", s.Root, "%v", err)
		}
		src, err := mounts.OpenSource(s.Root, s.allowSensitive(), readTable)
		if err != nil {
			var me *mounts.Error
			if errors.As(err, &me) {
				err = me.Err
			}
			return nil, bad("root", s.Root, "%v", err)
		}
		cs.root = src
		if !src.Dir {
			return nil, bad("root", s.Root, "is not a directory")
		}
	}
	if len(s.Mounts) > MaxMounts {
		return nil, bad("mounts", strconv.Itoa(len(s.Mounts)), "more than %d mounts", MaxMounts)
	}
	for i, m := range s.Mounts {
		checked, err := mounts.Check(m)
		if err == nil && m.Type != mounts.Tmpfs {
			var src *mounts.Source
			if src, err = mounts.OpenSource(m.Source, s.allowSensitive(), readTable); err == nil {
				cs.sources = append(cs.sources, src)
				checked.Source = src.Path
			}
		}
		if err != nil {
			var me *mounts.Error
			if errors.As(err, &me) {
				return nil, bad(fmt.Sprintf("mounts[%d].%s", i, me.Field), me.Value, "%v", me.Err)
			}
			return nil, bad(fmt.Sprintf("mounts[%d]", i), m.Target, "%v", err)
		}
		if m.Target == "/" {
			return nil, bad(fmt.Sprintf("mounts[%d].target", i), m.Target, "cannot mount over the root; use root")
		}
		cs.mounts = append(cs.mounts, checked)
	}
	if s.TmpSizeBytes < 0 || s.TmpSizeBytes > mounts.MaxTmpfsBytes {
		return nil, bad("tmp_size_bytes", strconv.FormatInt(s.TmpSizeBytes, 10), "must be between 0 and 1 TiB")
	}
	if s.ShmSizeBytes < 0 || s.ShmSizeBytes > mounts.MaxTmpfsBytes {
		return nil, bad("shm_size_bytes", strconv.FormatInt(s.ShmSizeBytes, 10), "must be between 0 and 1 TiB")
	}
	if s.PtyMax < 0 || s.PtyMax > maxPtyMax {
		return nil, bad("pty_max", strconv.Itoa(s.PtyMax), "must be between 0 (default: 16) and %d", maxPtyMax)
	}
	if s.Hostname != "" && !validHostname(s.Hostname) {
		return nil, bad("hostname", s.Hostname, "must be 1-64 letters, digits, '.' or '-'")
	}
	for _, id := range []struct {
		name string
		v    *uint32
	}{{"uid", s.UID}, {"gid", s.GID}, {"host_uid", s.HostUID}, {"host_gid", s.HostGID}} {
		if id.v != nil && *id.v == math.MaxUint32 {
			return nil, bad(id.name, strconv.FormatUint(uint64(*id.v), 10), "4294967295 is not a valid id")
		}
	}
	if err := s.validateProcess(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, r := range s.Rlimits {
		field := fmt.Sprintf("rlimits[%d]", i)
		if _, ok := rlimitResources[r.Name]; !ok {
			return nil, bad(field+".name", r.Name, "unknown resource")
		}
		if seen[r.Name] {
			return nil, bad(field+".name", r.Name, "given twice")
		}
		seen[r.Name] = true
		if r.Soft > r.Hard {
			return nil, bad(field+".soft", strconv.FormatUint(r.Soft, 10), "is above the hard limit %d", r.Hard)
		}
	}
	disabled := map[string]bool{}
	for i, n := range s.DisableNamespaces {
		known := false
		for _, k := range Namespaces {
			known = known || n == k
		}
		if !known {
			return nil, bad(fmt.Sprintf("disable_namespaces[%d]", i), n, "unknown namespace (want one of %s)", strings.Join(Namespaces, ", "))
		}
		disabled[n] = true
	}
	var err error
	if cs.egress, err = s.validateNetwork(); err != nil {
		return nil, err
	}
	if disabled["mount"] && (s.Root != "" || len(s.Mounts) > 0) {
		return nil, bad("disable_namespaces", "mount", "root and mounts need a mount namespace")
	}
	if err := s.validateLimits(); err != nil {
		return nil, err
	}
	switch {
	case s.SeccompPolicy != nil && s.Seccomp != "":
		return nil, bad("seccomp", s.Seccomp, "cannot be given with seccomp_policy")
	case s.SeccompPolicy != nil:
		if err := s.SeccompPolicy.Validate(); err != nil {
			return nil, bad("seccomp_policy", s.SeccompPolicy.Name, "%v", err)
		}
		cs.seccomp = s.SeccompPolicy
	default:
		cs.seccompName = s.Seccomp
		if cs.seccompName == "" {
			cs.seccompName = DefaultSeccomp
		}
		if seccomp.IsBuiltin(cs.seccompName) {
			break // precompiled: nothing to parse
		}
		p, err := seccomp.Load(cs.seccompName)
		if err != nil {
			return nil, bad("seccomp", cs.seccompName, "%v", err)
		}
		cs.seccomp = p
	}
	switch s.Landlock {
	case "", LandlockAuto, LandlockRequire, LandlockOff:
	default:
		return nil, bad("landlock", s.Landlock, "must be auto, require or off")
	}
	if s.Landlock == LandlockRequire && s.disabled("mount") {
		return nil, bad("landlock", s.Landlock, "needs a mount namespace: the rules are made from the jail's mounts")
	}
	if s.SeccompLog && cs.seccomp == nil && cs.seccompName == seccomp.None {
		return nil, bad("seccomp_log", "true", "needs a seccomp policy, not none")
	}
	return cs, nil
}

// disabled reports whether namespace ns is switched off (net: also by
// network mode host).
func (s *Spec) disabled(ns string) bool {
	if ns == "net" && s.Network.Mode == NetworkHost {
		return true
	}
	for _, n := range s.DisableNamespaces {
		if n == ns {
			return true
		}
	}
	return false
}

func orDefault(id *uint32, def uint32) uint32 {
	if id != nil {
		return *id
	}
	return def
}

// ids are the workload's ids inside the jail.
func (s *Spec) ids() (uid, gid uint32) {
	return orDefault(s.UID, DefaultUID), orDefault(s.GID, DefaultUID)
}

// hostIDs are the host ids a root caller's jail ids map to.
func (s *Spec) hostIDs() (uid, gid uint32) {
	return orDefault(s.HostUID, DefaultHostUID), orDefault(s.HostGID, DefaultHostUID)
}

func (s *Spec) outputLimit() int64 {
	if s.OutputLimitBytes == 0 {
		return DefaultOutputLimitBytes
	}
	return s.OutputLimitBytes
}

func (s *Spec) env() []string {
	if s.Env == nil {
		return DefaultEnv
	}
	return s.Env
}

// searchPath is the workload's PATH, for finding a command without a slash.
func (s *Spec) searchPath() []string {
	for _, e := range s.env() {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			return strings.Split(v, ":")
		}
	}
	return []string{"/usr/local/bin", "/usr/bin", "/bin"} // execvp(3)'s default
}

// rlimits are the Spec's rlimits and, for the resources it does not name,
// the DefaultRlimits, each lowered to hard[name] where that is less.
func (s *Spec) rlimits(hard map[string]uint64) []Rlimit {
	out := append([]Rlimit{}, s.Rlimits...)
	for _, d := range DefaultRlimits {
		named := false
		for _, r := range s.Rlimits {
			named = named || r.Name == d.Name
		}
		if named {
			continue
		}
		// A default is never more than jail's own hard limit: raising it
		// would fail (EPERM) for a limit the caller never asked for, and
		// the lower one bounds the jail already.
		if h, ok := hard[d.Name]; ok && h < d.Hard {
			d.Soft, d.Hard = min(d.Soft, h), h
		}
		out = append(out, d)
	}
	return out
}

// limits are the Spec's cgroup limits.
func (s *Spec) limits() cgroup.Limits {
	return cgroup.Limits{MemoryMaxBytes: s.MemoryMaxBytes, SwapMaxBytes: s.SwapMaxBytes, PidsMax: s.PidsMax,
		CPUs: s.CPUs, CPUWeight: s.CPUWeight, IOWeight: s.IOWeight, CPUTime: time.Duration(s.CPUTime)}
}

// validateLimits checks the Spec's cgroup limits; a *SpecError names the
// field.
func (s *Spec) validateLimits() error {
	err := s.limits().Validate()
	if err == nil {
		return nil
	}
	var le *cgroup.LimitError
	if errors.As(err, &le) {
		return &SpecError{Field: limitFields[le.Field], Value: le.Value, Err: errors.New(le.Reason)}
	}
	return &SpecError{Field: "limits", Err: err}
}

// limitFields maps cgroup.Limits fields to the Spec's JSON names.
var limitFields = map[string]string{
	"MemoryMaxBytes": "memory_max_bytes", "SwapMaxBytes": "swap_max_bytes", "PidsMax": "pids_max",
	"CPUs": "cpus", "CPUWeight": "cpu_weight", "IOWeight": "io_weight", "CPUTime": "cpu_time",
}
