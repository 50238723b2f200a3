// Package rootfs plans the jail's root filesystem: the list of mount steps
// the child stage carries out before pivot_root.
//
// The default root is a fresh tmpfs holding read-only binds of the host's
// /usr (and /bin, /sbin, /lib, /lib64 as the host has them: usr-merge
// symlinks or binds), a minimal /etc written for the jail's ids (never
// shadow, never the host's whole /etc), a fresh /proc for the jail's PID
// namespace with runc's masked and read-only paths, a minimal /dev (null,
// zero, full, random, urandom, tty, a private devpts, /dev/shm) and a sized
// tmpfs /tmp. There is no /sys. With [Config.Dir] the root is instead a
// read-only recursive bind of a directory tree (a debootstrap, an unpacked
// image) with the same /proc, /dev and /tmp; its mount points must exist.
//
// Every mount is nosuid and nodev (device binds in /dev excepted from
// nodev), private, and the root is made read-only after pivot_root. The
// package only plans; nsexec carries the plan out.
package rootfs
