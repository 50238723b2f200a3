package rootfs

import (
	"bufio"
	"os"
	"strings"
)

// Probe looks at the host paths a plan needs (see [HostPaths]) plus extra
// paths, such as bind sources, with lstat only.
func Probe(extra ...string) Host {
	h := Host{Links: map[string]string{}, Exists: map[string]bool{}, Files: map[string]bool{}}
	h.Add(append(HostPaths(), extra...)...)
	h.Initramfs = RootIsInitramfs()
	for _, d := range []string{"/tmp", "/mnt", "/var/tmp"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			h.Attach = d
			break
		}
	}
	return h
}

// Add records paths in h.
func (h *Host) Add(paths ...string) {
	if h.Links == nil {
		h.Links, h.Exists, h.Files = map[string]string{}, map[string]bool{}, map[string]bool{}
	}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if l, err := os.Readlink(p); err == nil {
				h.Links[p] = l
			}
		default:
			h.Exists[p] = true
			if !fi.IsDir() {
				h.Files[p] = true
			}
		}
	}
}

// RootIsInitramfs reports whether / is the initramfs: its mountinfo line
// has the file system type "rootfs" (proc_pid_mountinfo(5): the type is the
// first field after the " - " separator). Equivalent to
// `findmnt -n -o FSTYPE /` printing rootfs.
func RootIsInitramfs() bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != "/" {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				return fields[i+1] == "rootfs"
			}
		}
	}
	return false
}
