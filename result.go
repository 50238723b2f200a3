package jail

// Schema is the value of [Result.Schema] for this version of the format.
const Schema = "jail.result/v1"

// Status is how a run ended.
type Status string

// Statuses. Later versions of jail.result/v1 may add values (the cgroup
// limits add oom_killed and cpu_time_exceeded); consumers should treat an
// unknown status as a failure.
const (
	// StatusExited: the workload exited by itself; ExitCode is its code.
	StatusExited Status = "exited"
	// StatusSignaled: the workload was killed by Signal.
	StatusSignaled Status = "signaled"
	// StatusTimedOut: the timeout passed and the jail was killed.
	StatusTimedOut Status = "timed_out"
	// StatusCanceled: the caller canceled the run (context, signal to
	// jail) and the jail was killed.
	StatusCanceled Status = "canceled"
	// StatusSeccompKilled: the seccomp policy killed the workload for a
	// syscall; SeccompDenials names it. The signal is KILL.
	StatusSeccompKilled Status = "seccomp_killed"
	// StatusOOMKilled: the jail ran out of its memory limit and the
	// kernel's OOM killer killed the workload (on cgroup v2, the whole
	// jail).
	StatusOOMKilled Status = "oom_killed"
	// StatusCPUTimeExceeded: the jail used up its CPU time limit and was
	// killed.
	StatusCPUTimeExceeded Status = "cpu_time_exceeded"
	// StatusSetupError: the workload never ran: jail could not set up the
	// jail, or could not execute the command; Error says where.
	StatusSetupError Status = "setup_error"
	// StatusCompileError: a language runner's compile failed (package
	// runner); ExitCode is 1 and Compile holds the compile's own Result,
	// the compiler's output kept. The code never ran.
	StatusCompileError Status = "compile_error"
)

// Exit codes of `jail run` besides the workload's own.
const (
	ExitTimedOut      = 124 // as timeout(1); also when the CPU time limit is used up
	ExitSetupError    = 125 // jail itself failed, or bad input
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// Result is the report of one run: `jail run --json` prints it, and
// [Cmd.Wait] sets [Cmd.Result]. schema/result.schema.json describes it.
type Result struct {
	// Schema is "jail.result/v1".
	Schema string `json:"schema"`
	// Status is how the run ended.
	Status Status `json:"status"`
	// ExitCode is what `jail run` exits with: the workload's exit code,
	// 128+N after signal N, 124 on timeout, 125 when jail failed, 126 or 127
	// when the command could not be executed or found.
	ExitCode int `json:"exit_code"`
	// Signal is the name of the signal that killed the workload ("KILL"),
	// or "".
	Signal string `json:"signal"`
	// WallTimeMS is the wall time from the workload's start to its end.
	WallTimeMS int64 `json:"wall_time_ms"`
	// CPUUserMS and CPUSystemMS are the CPU time of every process of the
	// jail, the child stage included: from the jail's cgroup when it has
	// one, else getrusage of the jail's PID 1 and all it reaped.
	CPUUserMS   int64 `json:"cpu_user_ms"`
	CPUSystemMS int64 `json:"cpu_system_ms"`
	// MaxRSSBytes is the largest resident set of any single process of
	// the jail but its PID 1 (jail's own stage): of the command and of
	// every process it started. 0 when PID 1 could not report it.
	MaxRSSBytes int64 `json:"max_rss_bytes"`
	// Output is "captured" when Stdout and Stderr hold the output,
	// "streamed" when it went to the caller's descriptors.
	Output string `json:"output"`
	// Stdout and Stderr are the captured output: the head and the tail
	// when it was longer than the limit, with a marker of what was dropped.
	// Output that is not valid UTF-8 is given in base64 (see
	// StdoutEncoding), so that no byte is lost: a JSON string cannot hold
	// it as it is.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutEncoding and StderrEncoding say how Stdout and Stderr hold the
	// output: "utf-8" (as text) or "base64" (the exact bytes kept, cut at
	// the limit rather than at characters, the marker included).
	StdoutEncoding string `json:"stdout_encoding"`
	StderrEncoding string `json:"stderr_encoding"`
	// StdoutBytes and StderrBytes count everything written.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// StdoutTruncated and StderrTruncated say whether bytes were dropped.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// MemoryPeakBytes is the most memory the jail's processes used at
	// once, from its cgroup; null without a cgroup memory controller or
	// where the kernel does not say.
	MemoryPeakBytes *int64 `json:"memory_peak_bytes"`
	// PidsPeak is the most processes and threads the jail had at once,
	// from its cgroup; null without a pids controller or where the kernel
	// does not say.
	PidsPeak *int64 `json:"pids_peak"`
	// OOMKills counts the processes the OOM killer killed in the jail.
	OOMKills int64 `json:"oom_kills"`
	// LimitsHit names each limit the jail ran into, the one that ended the
	// run first: "timeout", "cpu_time", "memory" (an OOM kill; or only
	// refused allocations) and "pids" (refused forks).
	LimitsHit []string `json:"limits_hit"`
	// SeccompDenials are the calls the seccomp policy killed (and, with
	// Spec.SeccompLog, denied), in order, the first 32 of them, and always
	// the kill that ended the command when it came later.
	SeccompDenials []SeccompDenial `json:"seccomp_denials"`
	// SeccompDenialsTotal counts them all.
	SeccompDenialsTotal int `json:"seccomp_denials_total"`
	// Network is what an egress jail sent and received through the host,
	// and how many of its packets the rules refused; null in the other
	// network modes.
	Network *NetworkStats `json:"network"`
	// SupervisorLost says the jail's PID 1 died after the workload had
	// started, or had been let go to start and may have (the workload may
	// take PID 1 down, at once: it shares its ids), and the kernel killed
	// the workload with it: Status is signaled (KILL), and
	// Error says how PID 1 ended. Never a setup error.
	SupervisorLost bool `json:"supervisor_lost"`
	// Error explains a setup_error (and a canceled run, or a lost
	// supervisor), else it is null.
	Error *ErrorInfo `json:"error"`
	// Isolation says what was in force.
	Isolation Isolation `json:"isolation"`
	// SessionID and ExecID name the session and the command, for a
	// command run in a session ([Session.Command]); absent otherwise.
	SessionID string `json:"session_id,omitempty"`
	ExecID    string `json:"exec_id,omitempty"`
	// Language, for a run of a language runner (package runner), is its
	// language; absent otherwise.
	Language string `json:"language,omitempty"`
	// Compile, for a runner that compiles, is the compile's own Result
	// (its jail, limits, status and the compiler's output); absent
	// otherwise.
	Compile *Result `json:"compile,omitempty"`
	// Pool says, for a run of jail serve that named a warm pool, whether
	// it had a member of it (PoolHit) or was a cold start (PoolMiss);
	// absent otherwise.
	Pool string `json:"pool,omitempty"`
}

// Result.Pool's values.
const (
	PoolHit  = "hit"
	PoolMiss = "miss"
)

// SeccompDenial is one call the seccomp policy refused.
type SeccompDenial struct {
	// Syscall is its name, prefixed by the ABI when that is not the
	// native one ("x86:getpid" for int 0x80).
	Syscall string `json:"syscall"`
	// Action is "kill", or the errno the call got ("EPERM").
	Action string `json:"action"`
	// PID is the calling thread, in the jail's PID namespace.
	PID int `json:"pid"`
	// Workload says the caller was the command itself rather than one of
	// its children.
	Workload bool `json:"workload"`
	// Interrupted says a signal made the caller take a call the policy
	// kills back before jail could read it: Syscall is "unknown", PID 0,
	// and jail killed every process of the jail instead (fail closed).
	Interrupted bool `json:"interrupted,omitempty"`
}

// ErrorInfo is the reason a run failed.
type ErrorInfo struct {
	// Step is the step that failed, e.g. "mount plan", "execve", "spec".
	Step string `json:"step"`
	// Errno is the symbolic errno ("ENOENT") when there is one.
	Errno string `json:"errno,omitempty"`
	// Message is one line for a person.
	Message string `json:"message"`
}

// Isolation is what a run actually had.
type Isolation struct {
	// Backend is what ran the jail: "native" (this host's kernel, by
	// jail itself), "docker" (a container of a Docker engine) or "k8s" (a
	// Pod of a Kubernetes cluster).
	Backend string `json:"backend"`
	// BackendReason says why, when the Spec's backend was "auto".
	BackendReason string `json:"backend_reason,omitempty"`
	// Namespaces are the namespaces the jail ran in.
	Namespaces []string `json:"namespaces"`
	// Root is "tmpfs" (the default root), "directory" (Spec.Root),
	// "host" (no mount namespace) or "image" (Spec.Image, for a container
	// backend).
	Root string `json:"root"`
	// RootPath is Spec.Root for a "directory" root, Spec.Image for an
	// "image" one.
	RootPath string `json:"root_path,omitempty"`
	// UID and GID are the workload's ids inside the jail.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// UIDMap and GIDMap are the user namespace's id maps.
	UIDMap []IDMap `json:"uid_map"`
	GIDMap []IDMap `json:"gid_map"`
	// Cgroup is "v2", "v1" (some limit uses a cgroup v1 hierarchy),
	// "runtime" (a Pod's limits, in cgroups its node's runtime makes, of a
	// version jail does not see) or "none" (the Spec has no cgroup
	// limits).
	Cgroup string `json:"cgroup"`
	// Seccomp is the seccomp policy in force, "runtime/default" (a Pod's
	// runtime's own profile, not jail's), "localhost/PATH" (the file a
	// Pod's nodes hold at PATH, meant to be the Spec's policy), or "none".
	Seccomp string `json:"seccomp"`
	// Landlock is the second wall as it was in force.
	Landlock LandlockInfo `json:"landlock"`
	// Network is the jail's network: its mode and, for egress, the
	// allow-list as resolved and the jail's address.
	Network NetworkInfo `json:"network"`
	// NotEnforced lists what the Spec asked for but the run did not have,
	// each as "what: why" (only with AllowUnenforced, or for the time
	// namespace on kernels without it).
	NotEnforced []string `json:"not_enforced"`
	// SensitiveSources lists the sensitive host paths the run bound
	// because the Spec allowed them (AllowSensitiveSources), each as
	// "PATH: what it exposes".
	SensitiveSources []string `json:"sensitive_sources,omitempty"`
	// TrustedOnly, when not empty, says that this jail is no security
	// boundary, and why: the host's network, a namespace not created,
	// no seccomp filter, sensitive host paths bound. Such a Spec is for
	// code you trust (the dev profile); strict and default have none.
	TrustedOnly []string `json:"trusted_only,omitempty"`
}

// LandlockInfo is the Landlock ruleset a run had.
type LandlockInfo struct {
	// ABI is the kernel's Landlock ABI the rules were made for; 0 when no
	// ruleset was in force.
	ABI int `json:"abi"`
	// Enforced names what the rules restricted: "fs" (reads, writes and
	// executes outside the mount plan), "refer", "truncate", "ioctl_dev",
	// "signal", "abstract_unix_socket", "unix_socket_path".
	Enforced []string `json:"enforced"`
	// Missing lists, as "what: why", what jail's rules would restrict
	// but this kernel, or the Spec (landlock: off), did not let them.
	Missing []string `json:"missing"`
}

// IDMap is one line of /proc/PID/uid_map.
type IDMap struct {
	InsideID  uint32 `json:"inside_id"`
	OutsideID uint32 `json:"outside_id"`
	Count     uint32 `json:"count"`
}
