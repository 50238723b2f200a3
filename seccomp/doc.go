// Package seccomp turns a seccomp policy, which is data, into the classic
// BPF program that jail's child stage loads with seccomp(2) as the last step
// before execve.
//
// A [Policy] is a default action, per-syscall rules with optional argument
// conditions, and the architectures it allows; it loads from YAML or JSON
// ([Parse]) and the built-in ones are files in policies/ ([Load]).
// [Compile] checks every syscall name against libseccomp's table and builds
// the program with libseccomp in the calling (parent) process, once per
// policy per process, as a binary tree of syscall numbers (libseccomp
// 2.5.4 or later; with an older one, as a linear program that decides
// alike). No libseccomp code runs inside the jail: the child
// stage only hands the bytes to the kernel.
//
// Kills are reported. A rule whose action is kill, and every syscall of an
// architecture the policy does not allow (ia32 through int 0x80, x32), is
// compiled to SECCOMP_RET_USER_NOTIF instead of SECCOMP_RET_KILL_PROCESS:
// the jail's PID 1 receives the notification, kills the calling process
// with SIGKILL and reports the syscall by name. The call never runs. With
// [Options.Log], calls that get an errno are also sent to PID 1, which
// records them and answers with the policy's own errno, so a policy can be
// sized against a real program.
//
// [Policy.OCI] exports a policy as the runtime-spec LinuxSeccomp that
// Docker, Kubernetes and runc accept.
//
// Requires Linux 5.0 (user notification) and libseccomp 2.5 at build time;
// SECCOMP_FILTER_FLAG_TSYNC_ESRCH needs Linux 5.7. The package does not
// load filters into the calling process and does not support
// SECCOMP_RET_TRACE (it needs a ptracer) or policies that hand notification
// to the workload's own supervisor.
package seccomp
