package landlock

import "golang.org/x/sys/unix"

// ProbeABI returns the Landlock ABI version of the running kernel, or 0
// when it has no Landlock (or it is not enabled: lsm=landlock).
// Equivalent to landlock_create_ruleset(NULL, 0,
// LANDLOCK_CREATE_RULESET_VERSION).
func ProbeABI() int {
	abi, _ := Probe()
	return abi
}

// Probe is ProbeABI with the kernel's error when it has no Landlock
// (ENOSYS: not built; EOPNOTSUPP: not enabled), for `jail check`.
func Probe() (int, error) {
	const createRulesetVersion = 1 << 0
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}
