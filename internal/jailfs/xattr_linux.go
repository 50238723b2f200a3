package jailfs

import (
	"archive/tar"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A copy of a file keeps its extended attributes of the user namespace
// (user.*): security.* and trusted.* mean something to the host (file
// capabilities, an LSM's labels) and are neither read nor made, and an
// overlay's own (user.overlay.*, with userxattr) describe its layers, not
// the file. In a tar they are PAX records, as GNU tar and bsdtar write
// them ("SCHILY.xattr.NAME").
const (
	xattrPrefix   = "user."
	overlayXattrs = "user.overlay."
	paxXattr      = "SCHILY.xattr."
)

// keptXattr says whether a copy keeps the extended attribute name.
func keptXattr(name string) bool {
	return strings.HasPrefix(name, xattrPrefix) && !strings.HasPrefix(name, overlayXattrs)
}

// userXattrs returns the extended attributes a copy keeps of the file fd.
func userXattrs(fd int) (map[string]string, error) {
	var names []byte
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Flistxattr(fd, buf)
		if err == unix.ERANGE && size < 1<<20 {
			continue
		}
		if err == unix.ENOTSUP {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		names = buf[:n]
		break
	}
	var x map[string]string
	for _, name := range strings.Split(string(names), "\x00") {
		if !keptXattr(name) {
			continue
		}
		var v []byte
		for size := 256; ; size *= 2 {
			buf := make([]byte, size)
			n, err := unix.Fgetxattr(fd, name, buf)
			if err == unix.ERANGE && size < 1<<20 {
				continue
			}
			if err == unix.ENODATA {
				break // removed since it was listed
			}
			if err != nil {
				return nil, err
			}
			v = buf[:n]
			break
		}
		if v == nil {
			continue
		}
		if x == nil {
			x = map[string]string{}
		}
		x[name] = string(v)
	}
	return x, nil
}

// setXattrs gives the file fd the extended attributes x, in name order.
func setXattrs(fd int, x map[string]string) error {
	names := make([]string, 0, len(x))
	for n := range x {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !keptXattr(n) {
			continue
		}
		if err := unix.Fsetxattr(fd, n, []byte(x[n]), 0); err != nil {
			return err
		}
	}
	return nil
}

// addXattrs records the extended attributes a copy keeps of fd in h.
func addXattrs(h *tar.Header, fd int) error {
	x, err := userXattrs(fd)
	if err != nil || len(x) == 0 {
		return err
	}
	if h.PAXRecords == nil {
		h.PAXRecords = map[string]string{}
	}
	for n, v := range x {
		h.PAXRecords[paxXattr+n] = v
	}
	return nil
}

// tarXattrs returns the extended attributes of entry h that a copy keeps.
func tarXattrs(h *tar.Header) map[string]string {
	var x map[string]string
	for k, v := range h.PAXRecords {
		if n, ok := strings.CutPrefix(k, paxXattr); ok && keptXattr(n) {
			if x == nil {
				x = map[string]string{}
			}
			x[n] = v
		}
	}
	return x
}
