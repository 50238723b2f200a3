// Package mounts describes the mounts a caller adds to a jail (--bind,
// --ro-bind, --tmpfs), parses them from the command line and checks them
// before anything is mounted: targets must be absolute and clean, sources
// must exist and must not be sensitive host paths (/proc, /sys, /dev, /boot,
// /run, the Docker socket, the host's whole /etc, the host root) unless the
// caller explicitly allows it.
//
// It does not mount anything. The jail's child stage resolves every target
// inside the new root with openat2(RESOLVE_IN_ROOT), so a symlink in a
// --rootfs tree cannot redirect a mount out of the jail, and every mount is
// nosuid, nodev and private.
package mounts
