package cgroup

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// defaultMountPoint is where systemd and most distributions mount cgroups.
const defaultMountPoint = "/sys/fs/cgroup"

// mount is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mount struct {
	// Root is the cgroup mounted (field 4): "/" unless the mount was made in
	// a cgroup namespace or bind-mounted from a subtree.
	Root string
	// MountPoint is where it is mounted (field 5), unescaped.
	MountPoint string
	// V2 is true for cgroup2.
	V2 bool
	// Controllers are the v1 controllers bound to the hierarchy (from the
	// super options); empty for cgroup2 and for named hierarchies.
	Controllers []string
	// FavorDynMods is true if the super options include favordynmods.
	FavorDynMods bool
	// Flags are cgroup2's super options other than rw/ro (nsdelegate,
	// memory_recursiveprot, ...), which a remount must repeat.
	Flags []string
}

// v1MountOptions are cgroup v1 super options that are not controllers.
var v1MountOptions = map[string]bool{
	"rw": true, "ro": true, "nosuid": true, "nodev": true, "noexec": true,
	"relatime": true, "noatime": true, "strictatime": true, "nodiratime": true,
	"xattr": true, "noprefix": true, "clone_children": true, "cpuset_v2_mode": true,
	"favordynmods": true, "nofavordynmods": true, "none": true, "all": true,
}

// parseMountinfo returns the cgroup and cgroup2 mounts in mountinfo text, in
// file order, skipping other and malformed lines. See proc_pid_mountinfo(5):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountinfo(text string) []mount {
	var mounts []mount
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		// Six fixed fields before the optional ones, three after the separator.
		if sep < 6 || len(fields) < sep+4 {
			continue
		}
		fsType := fields[sep+1]
		if fsType != "cgroup" && fsType != "cgroup2" {
			continue
		}
		m := mount{
			Root:       unescapeMountinfo(fields[3]),
			MountPoint: unescapeMountinfo(fields[4]),
			V2:         fsType == "cgroup2",
		}
		for opt := range strings.SplitSeq(fields[sep+3], ",") {
			switch {
			case opt == "favordynmods":
				m.FavorDynMods = true
			case m.V2 && opt != "rw" && opt != "ro" && opt != "":
				m.Flags = append(m.Flags, opt)
			case m.V2 || opt == "" || strings.Contains(opt, "=") || v1MountOptions[opt]:
			default:
				m.Controllers = append(m.Controllers, opt)
			}
		}
		mounts = append(mounts, m)
	}
	return mounts
}

// unescapeMountinfo undoes the octal escapes (\040 for space, \011, \012,
// \134) the kernel writes in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procCgroup is one line of /proc/PID/cgroup: "hierarchy-ID:controllers:path".
type procCgroup struct {
	// ID is the hierarchy id; 0 for cgroup2.
	ID int
	// Controllers lists the v1 controllers (and "name=..." entries); empty
	// for cgroup2.
	Controllers []string
	// Path is the cgroup, relative to the hierarchy root as the reader's
	// cgroup namespace sees it.
	Path string
}

// parseProcCgroup parses /proc/PID/cgroup (see cgroups(7)), skipping
// malformed lines.
func parseProcCgroup(text string) []procCgroup {
	var entries []procCgroup
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		// The path may itself contain ':', so split only twice.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			continue
		}
		e := procCgroup{ID: id, Path: parts[2]}
		if parts[1] != "" {
			e.Controllers = strings.Split(parts[1], ",")
		}
		entries = append(entries, e)
	}
	return entries
}

// Mode is how cgroups are set up on the host.
type Mode int

const (
	// ModeNone means no cgroup filesystem is mounted.
	ModeNone Mode = iota
	// ModeV1 means only cgroup v1 hierarchies hold controllers.
	ModeV1
	// ModeHybrid means v1 hierarchies and a cgroup2 mount (systemd's
	// /sys/fs/cgroup/unified) coexist.
	ModeHybrid
	// ModeUnified means cgroup v2 only.
	ModeUnified
)

// String returns "none", "v1", "hybrid" or "v2".
func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "v1"
	case ModeHybrid:
		return "hybrid"
	case ModeUnified:
		return "v2"
	default:
		return "none"
	}
}

// MarshalText returns [Mode.String].
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// hierarchy is a mounted hierarchy and this process's place in it.
type hierarchy struct {
	mount
	// Self is this process's cgroup in the hierarchy, from /proc/self/cgroup.
	Self string
}

// Name names the hierarchy: "unified" for cgroup2, else its controllers
// joined by commas, e.g. "cpu,cpuacct".
func (h hierarchy) Name() string {
	if h.V2 {
		return "unified"
	}
	return strings.Join(h.Controllers, ",")
}

// Dir returns the directory of cgroup cgPath in this mount, or "" if the
// cgroup is outside the mounted subtree (a path with ".." from a cgroup
// namespace, or another subtree).
func (h hierarchy) Dir(cgPath string) string {
	if !strings.HasPrefix(cgPath, "/") || slices.Contains(strings.Split(cgPath, "/"), "..") {
		return ""
	}
	rel := cgPath
	if h.Root != "/" {
		if cgPath != h.Root && !strings.HasPrefix(cgPath, h.Root+"/") {
			return ""
		}
		rel = strings.TrimPrefix(cgPath, h.Root)
	}
	return path.Join(h.MountPoint, rel)
}

// matches reports whether the /proc/PID/cgroup line e is for this hierarchy.
func (h hierarchy) matches(e procCgroup) bool {
	if h.V2 {
		return e.ID == 0 && len(e.Controllers) == 0
	}
	if len(e.Controllers) != len(h.Controllers) {
		return false
	}
	for _, c := range h.Controllers {
		if !slices.Contains(e.Controllers, c) {
			return false
		}
	}
	return true
}

// layout is where the cgroup hierarchies are and where this process is in
// them, worked out from mountinfo and /proc/self/cgroup without touching the
// filesystem.
type layout struct {
	Mode Mode
	// V2 is the cgroup2 mount used, nil if there is none or this process's
	// cgroup is not visible in it.
	V2 *hierarchy
	// V1 are the v1 hierarchies that bind controllers, one per hierarchy, in
	// mount order. Hierarchies whose mounts do not show this process's
	// cgroup are left out.
	V1 []hierarchy
	// FavorDynMods is true if any cgroup mount has favordynmods. The option
	// switches the kernel's global cgroup_threadgroup_rwsem, so one mount
	// is enough.
	FavorDynMods bool
}

// planLayout works out the layout from the parsed mounts and the parsed
// /proc/self/cgroup.
func planLayout(mounts []mount, self []procCgroup) layout {
	var l layout
	var v2 *hierarchy
	hasV1 := false
	for _, m := range mounts {
		l.FavorDynMods = l.FavorDynMods || m.FavorDynMods
		if !m.V2 && len(m.Controllers) == 0 {
			continue // a named hierarchy such as name=systemd
		}
		h := hierarchy{mount: m}
		found := false
		for _, e := range self {
			if h.matches(e) {
				h.Self, found = e.Path, true
				break
			}
		}
		if !m.V2 {
			hasV1 = true
		}
		if !found || h.Dir(h.Self) == "" {
			continue
		}
		if m.V2 {
			// Prefer /sys/fs/cgroup, then systemd's hybrid
			// /sys/fs/cgroup/unified, then the first one.
			if v2 == nil || mountRank(m.MountPoint) < mountRank(v2.MountPoint) {
				v2 = &h
			}
			continue
		}
		// The same hierarchy may be mounted more than once (bind mounts,
		// containers); keep the first, or the one under /sys/fs/cgroup.
		i := slices.IndexFunc(l.V1, func(o hierarchy) bool { return slices.Equal(o.Controllers, h.Controllers) })
		switch {
		case i < 0:
			l.V1 = append(l.V1, h)
		case !strings.HasPrefix(l.V1[i].MountPoint, defaultMountPoint+"/") && strings.HasPrefix(h.MountPoint, defaultMountPoint+"/"):
			l.V1[i] = h
		}
	}
	hasV2 := slices.ContainsFunc(mounts, func(m mount) bool { return m.V2 })
	switch {
	case hasV1 && hasV2:
		l.Mode = ModeHybrid
	case hasV1:
		l.Mode = ModeV1
	case hasV2:
		l.Mode = ModeUnified
	}
	l.V2 = v2
	return l
}

// mountRank orders cgroup2 mount points by preference.
func mountRank(mountPoint string) int {
	switch mountPoint {
	case defaultMountPoint:
		return 0
	case defaultMountPoint + "/unified":
		return 1
	default:
		return 2
	}
}

// v1Hierarchy returns the v1 hierarchy that binds controller, or nil.
func (l layout) v1Hierarchy(controller string) *hierarchy {
	for i := range l.V1 {
		if slices.Contains(l.V1[i].Controllers, controller) {
			return &l.V1[i]
		}
	}
	return nil
}

// commonAncestor returns the longest common path prefix of two cgroup paths.
func commonAncestor(a, b string) string {
	as, bs := strings.Split(path.Clean(a), "/"), strings.Split(path.Clean(b), "/")
	n := 0
	for n < len(as) && n < len(bs) && as[n] == bs[n] {
		n++
	}
	if p := strings.Join(as[:n], "/"); p != "" {
		return p
	}
	return "/"
}

// parentCgroup turns [Options.Parent] into a cgroup path. unsafeParent may
// be a path relative to this process's cgroup in each hierarchy ("jail",
// relative is true), an absolute cgroup path ("/jail", the same in every
// hierarchy), or a directory under a cgroup mount
// ("/sys/fs/cgroup/memory/jail", which names cgroup "/jail").
func parentCgroup(unsafeParent string, mounts []mount) (cg string, relative bool, err error) {
	if slices.Contains(strings.Split(unsafeParent, "/"), "..") {
		return "", false, fmt.Errorf("cgroup parent %q: must not contain ..", unsafeParent)
	}
	if !strings.HasPrefix(unsafeParent, "/") {
		return path.Clean(unsafeParent), true, nil
	}
	p := path.Clean(unsafeParent)
	// The longest mount point wins: /sys/fs/cgroup/memory over a cgroup2
	// mount at /sys/fs/cgroup.
	best := -1
	for i, m := range mounts {
		if (p == m.MountPoint || strings.HasPrefix(p, m.MountPoint+"/")) &&
			(best < 0 || len(m.MountPoint) > len(mounts[best].MountPoint)) {
			best = i
		}
	}
	if best < 0 {
		if p == defaultMountPoint || strings.HasPrefix(p, defaultMountPoint+"/") {
			return "", false, fmt.Errorf("cgroup parent %q: not under a mounted cgroup hierarchy", unsafeParent)
		}
		return p, false, nil
	}
	m := mounts[best]
	return path.Join(m.Root, strings.TrimPrefix(p, m.MountPoint)), false, nil
}
