// Package hostcheck reports what this host and this caller can do, for
// `jail check`.
//
// [Run] returns one [Feature] per check, in a fixed order: kernel version,
// user namespaces, the other namespaces, the time namespace, cgroups,
// seccomp, landlock, nftables, the new mount API and the caller's ids. Each
// has a verdict ([OK], [Warn] or [Missing]), a one-line detail and, when not
// OK, a one-line fix.
//
// The checks need no privileges and read only /proc, /sys and uname. They
// change nothing on the host: no cgroup is created, nothing is mounted and no
// sysctl is written. The user namespace check forks one short-lived probe
// (/bin/true in a new user and mount namespace, with the caller's euid mapped
// to 0 and the map written by the parent, as jail starts its child) and reaps
// it before returning, because reading sysctls
// alone cannot tell whether an LSM such as Ubuntu's AppArmor userns
// restriction will refuse the caller. All of Run takes a few milliseconds.
//
// The package deliberately does not try the other namespaces, cgroup
// delegation or nftables rule sets for real: that would leave state behind or
// take too long. Those checks report what the kernel offers; the cgroups
// check reports cgroup.Probe: which controllers are usable, on which
// version, by this caller, and whether attaching would be slow
// (favordynmods).
//
// Parsing and verdicts are plain code tested from fixture strings; the probes
// live in hostcheck_linux.go. On other systems Run returns a single Missing
// "linux" feature.
package hostcheck
