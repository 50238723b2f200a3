package rootfs

import "golang.org/x/sys/unix"

// mayBeInitramfs reports whether the file system of path is a ramfs or a
// tmpfs, the two an initramfs can be (statfs reports the type under the
// name "rootfs"), or cannot be told (then mountinfo decides).
func mayBeInitramfs(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return true
	}
	return st.Type == unix.RAMFS_MAGIC || st.Type == unix.TMPFS_MAGIC
}
