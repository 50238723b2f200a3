package hostfs

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Unreachable says why uid:gid (no other groups, no capabilities) cannot
// search every directory above path and read (or write) path; "" when it
// can, or when a path cannot be looked at (validation says why).
func Unreachable(path string, uid, gid uint32, write bool) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	dirs := []string{"/"}
	for i := 1; i < len(abs); i++ {
		if abs[i] == '/' {
			dirs = append(dirs, abs[:i])
		}
	}
	if abs != "/" {
		dirs = append(dirs, abs)
	}
	for i, d := range dirs {
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil {
			return ""
		}
		need, what := uint32(1), "x"
		if i == len(dirs)-1 {
			need, what = 4, "r"
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				need, what = 5, "rx"
			}
			if write {
				need, what = need|2, what+"w"
			}
		}
		if !permits(&st, uid, gid, need) {
			kind := "it"
			if d != abs {
				kind = d
			}
			return fmt.Sprintf("%s is mode %04o, owned by %d:%d (needs %s)", kind, st.Mode&0o7777, st.Uid, st.Gid, strings.TrimSpace(what))
		}
	}
	return ""
}

// permits reports whether the mode bits of st grant need (r=4, w=2, x=1)
// to uid:gid, as the kernel checks them without ACLs.
func permits(st *unix.Stat_t, uid, gid uint32, need uint32) bool {
	bits := st.Mode & 7
	switch {
	case st.Uid == uid:
		bits = st.Mode >> 6 & 7
	case st.Gid == gid:
		bits = st.Mode >> 3 & 7
	}
	return bits&need == need
}
