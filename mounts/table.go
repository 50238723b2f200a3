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
// The mounts of m's file system come from byDev (see [Table.byDev]).
func (t Table) sensitiveMount(m MountInfo, fsPath string, byDev map[[2]int][]MountInfo) (string, bool) {
	if kernelFSTypes[m.FSType] {
		return "a " + m.FSType + " file system", true
	}
	for _, e := range byDev[[2]int{m.Major, m.Minor}] {
		if !within(fsPath, e.Root) {
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

// byDev groups the table's mounts by file system (device number), so that
// judging every mount below a source is not quadratic in the size of the
// table (thousands of mounts on a container host).
func (t Table) byDev() map[[2]int][]MountInfo {
	m := make(map[[2]int][]MountInfo)
	for _, e := range t {
		k := [2]int{e.Major, e.Minor}
		m[k] = append(m[k], e)
	}
	return m
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
	byDev := t.byDev()
	if m, ok := t.byID(mntID, hostPath); ok && within(hostPath, m.Mountpoint) {
		fsPath := path.Join(m.Root, rel(hostPath, m.Mountpoint))
		if what, bad := t.sensitiveMount(m, fsPath, byDev); bad {
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
		if what, bad := t.sensitiveMount(sub, sub.Root, byDev); bad {
			return fmt.Sprintf("carries the mount at %s, which is %s", sub.Mountpoint, what)
		}
	}
	return ""
}
