package rootfs

import (
	"os"

	"github.com/jailrt/jail/mounts"
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

// RootIsInitramfs reports whether / is the initramfs: the mount on top of
// / (the last with that mount point in /proc/self/mountinfo) has the file
// system type "rootfs". Equivalent to `findmnt -n -o FSTYPE /` printing
// rootfs.
//
// An initramfs is a ramfs or a tmpfs, so mountinfo is read only when
// statfs(2) of / says it is one of those: on any other root, one system
// call answers. Reading and parsing mountinfo in a cold process, as every
// `jail run` is, took 0.28-0.46 ms, and the plan waits for it.
func RootIsInitramfs() bool {
	if !mayBeInitramfs("/") {
		return false
	}
	fs, err := RootFSType()
	return err == nil && fs == "rootfs"
}

// RootFSType is the file system type of the mount on top of / by
// /proc/self/mountinfo alone: what RootIsInitramfs decides by when statfs
// cannot.
func RootFSType() (string, error) {
	t, err := mounts.ReadTable()
	if err != nil {
		return "", err
	}
	return rootFSType(t), nil
}

// rootFSType is the file system type of the mount on top of / in t.
func rootFSType(t mounts.Table) string {
	fs := ""
	for _, m := range t {
		if m.Mountpoint == "/" {
			fs = m.FSType
		}
	}
	return fs
}
