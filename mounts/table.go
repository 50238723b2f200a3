package mounts

import (
	"fmt"
	"path"
	"strings"
)

// MountInfo is one line of /proc/self/mountinfo (proc_pid_mountinfo(5)):
// the fields the sensitive-source check needs.
type MountInfo struct {
	ID           int
	Major, Minor int
	// Root is the path inside its file system that is mounted: "/" for
	// a whole file system, "/run/user" for a bind mount of that directory.
	Root string
	// Mountpoint is where it is mounted, in this process's view.
	Mountpoint string
	FSType     string
}

// Table is a mount table, in /proc/self/mountinfo order.
type Table []MountInfo

// kernelFSTypes are file systems that are kernel interfaces rather than
// storage: a bind of any part of one is sensitive wherever it is mounted.
var kernelFSTypes = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "cgroup": true, "cgroup2": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "bpf": true, "configfs": true, "fusectl": true,
	"pstore": true, "efivarfs": true, "binfmt_misc": true, "nsfs": true, "mqueue": true, "rpc_pipefs": true,
	"nfsd": true, "selinuxfs": true,
}

// byID returns the mount with id, or the one whose mount point is the
// longest prefix of hostPath when id is unknown (a kernel without
// STATX_MNT_ID).
func (t Table) byID(id int, hostPath string) (MountInfo, bool) {
	best, found := MountInfo{}, false
	for _, m := range t {
		if id > 0 && m.ID == id {
			return m, true
		}
		if id <= 0 && within(hostPath, m.Mountpoint) && len(m.Mountpoint) >= len(best.Mountpoint) {
			best, found = m, true
		}
	}
	return best, found
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// rel returns p relative to dir ("" when they are equal), given within(p, dir).
func rel(p, dir string) string {
	if p == dir {
		return ""
	}
	if dir == "/" {
		return p[1:]
	}
	return p[len(dir)+1:]
}

// sensitiveMount says what makes the part fsPath of mount m sensitive: its
// file system type, or the same directory being reachable at a sensitive
// host path through any mount of the same file system (a bind mount of
// /run/user at /srv/x is the host's /run/user, whatever its path says).
func (t Table) sensitiveMount(m MountInfo, fsPath string) (string, bool) {
	if kernelFSTypes[m.FSType] {
		return "a " + m.FSType + " file system", true
	}
	for _, e := range t {
		if e.Major != m.Major || e.Minor != m.Minor || !within(fsPath, e.Root) {
			continue
		}
		same := path.Join(e.Mountpoint, rel(fsPath, e.Root))
		if rule, bad := IsSensitive(same); bad {
			if same == rule {
				return "the host's " + same, true
			}
			return fmt.Sprintf("the host's %s (below %s)", same, rule), true
		}
	}
	return "", false
}

// Exposes says whether a bind of hostPath (absolute, without symlinks, on
// the mount with id mntID) would show the jail something sensitive: the
// path itself (see [IsSensitive]), the same directory reached through a
// bind mount, a kernel file system, or, for a directory, any mount below it
// that a recursive bind carries along (open_tree AT_RECURSIVE). It returns
// "" when nothing is, else a phrase for the error message.
func (t Table) Exposes(mntID int, hostPath string, dir bool) string {
	if rule, bad := IsSensitive(hostPath); bad {
		if rule == hostPath {
			return "is sensitive (" + rule + ")"
		}
		return "is sensitive (below " + rule + ")"
	}
	if m, ok := t.byID(mntID, hostPath); ok && within(hostPath, m.Mountpoint) {
		fsPath := path.Join(m.Root, rel(hostPath, m.Mountpoint))
		if what, bad := t.sensitiveMount(m, fsPath); bad {
			return "is " + what
		}
	}
	if !dir {
		return ""
	}
	for _, sub := range t {
		if sub.Mountpoint == hostPath || !within(sub.Mountpoint, hostPath) {
			continue
		}
		if what, bad := t.sensitiveMount(sub, sub.Root); bad {
			return fmt.Sprintf("carries the mount at %s, which is %s", sub.Mountpoint, what)
		}
	}
	return ""
}
