package seccomp

import "golang.org/x/sys/unix"

// ProbeWaitKillable reports whether the kernel has
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19), without which a
// signal can make a call the policy kills return EINTR before it is killed.
// seccomp(2) checks the flags before it reads the program, so a NULL
// program gives EFAULT when they are known and EINVAL when they are not;
// nothing is loaded.
func ProbeWaitKillable() bool {
	const setModeFilter, newListener, waitKillableRecv = 1, 1 << 3, 1 << 5
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, setModeFilter, newListener|waitKillableRecv, 0)
	return e == unix.EFAULT
}
