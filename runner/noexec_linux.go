package runner

import "golang.org/x/sys/unix"

// noexec reports whether dir is on a file system mounted noexec.
func noexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
