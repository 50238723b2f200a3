package hostcheck

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// cgroupRoot is where systemd and most distributions mount cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMount is one cgroup or cgroup2 line of /proc/self/mountinfo.
type cgroupMount struct {
	// Root is the cgroup path mounted (field 4), "/" unless the mount was
	// made inside a cgroup namespace or bind-mounted from a subtree.
	Root string
	// MountPoint is where it is mounted (field 5), unescaped.
	MountPoint string
	// V2 is true for cgroup2, false for a cgroup v1 hierarchy.
	V2 bool
	// Controllers lists the v1 controllers bound to the hierarchy, taken
	// from the super options; empty for cgroup2 and for named hierarchies
	// such as name=systemd.
	Controllers []string
}

// v1MountOptions are cgroup v1 super options that are not controllers.
var v1MountOptions = map[string]bool{
	"rw": true, "ro": true, "nosuid": true, "nodev": true, "noexec": true,
	"relatime": true, "noatime": true, "strictatime": true, "nodiratime": true,
	"xattr": true, "noprefix": true, "clone_children": true, "cpuset_v2_mode": true,
	"favordynmods": true, "none": true, "all": true,
}

// parseCgroupMounts returns the cgroup and cgroup2 mounts in mountinfo text,
// in file order. Lines that are not cgroup mounts, and malformed lines, are
// skipped. See proc_pid_mountinfo(5) for the format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseCgroupMounts(mountinfo string) []cgroupMount {
	var mounts []cgroupMount
	for line := range strings.Lines(mountinfo) {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		// Five fixed fields before the optional ones, three after the separator.
		if sep < 6 || len(fields) < sep+4 {
			continue
		}
		fsType := fields[sep+1]
		if fsType != "cgroup" && fsType != "cgroup2" {
			continue
		}
		m := cgroupMount{
			Root:       unescapeMountinfo(fields[3]),
			MountPoint: unescapeMountinfo(fields[4]),
			V2:         fsType == "cgroup2",
		}
		if !m.V2 {
			for opt := range strings.SplitSeq(fields[sep+3], ",") {
				if opt == "" || strings.Contains(opt, "=") || v1MountOptions[opt] {
					continue
				}
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

// procCgroup is one line of /proc/self/cgroup: "hierarchy-ID:controllers:path".
type procCgroup struct {
	// ID is the hierarchy id; 0 for cgroup2.
	ID int
	// Controllers lists the v1 controllers (and "name=..." entries) of the
	// hierarchy; empty for cgroup2.
	Controllers []string
	// Path is the process's cgroup, relative to the hierarchy root (or to the
	// cgroup namespace root).
	Path string
}

// parseProcCgroup parses /proc/self/cgroup (see cgroups(7)). Malformed lines
// are skipped.
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

// cgroupMode is how cgroups are set up on the host.
type cgroupMode int

const (
	cgroupNone cgroupMode = iota
	cgroupV1
	cgroupHybrid
	cgroupUnified
)

// String returns the mode as the detail line names it.
func (m cgroupMode) String() string {
	switch m {
	case cgroupV1:
		return "v1"
	case cgroupHybrid:
		return "hybrid"
	case cgroupUnified:
		return "v2 unified"
	default:
		return "none"
	}
}

// cgroupLayout is where the caller's cgroups are, worked out from mountinfo
// and /proc/self/cgroup without touching the filesystem.
type cgroupLayout struct {
	Mode cgroupMode
	// V1Controllers lists the v1 controllers mounted, sorted.
	V1Controllers []string
	// V2Dir is the caller's own cgroup2 directory, "" without cgroup2 or if
	// the caller's cgroup is outside the mount.
	V2Dir string
	// DelegationDir is the directory whose writability hints at delegation:
	// V2Dir in unified mode, else the caller's v1 memory cgroup directory.
	DelegationDir string
}

// planCgroupLayout works out the layout. rootIsCgroup2 is true if
// /sys/fs/cgroup itself is a cgroup2 mount (statfs magic CGROUP2_SUPER_MAGIC).
func planCgroupLayout(rootIsCgroup2 bool, mounts []cgroupMount, self []procCgroup) cgroupLayout {
	var l cgroupLayout
	var v2 *cgroupMount
	for i := range mounts {
		m := &mounts[i]
		if !m.V2 {
			l.V1Controllers = append(l.V1Controllers, m.Controllers...)
			continue
		}
		// Prefer the mount at /sys/fs/cgroup, then /sys/fs/cgroup/unified
		// (systemd's hybrid layout), then the first one found.
		if v2 == nil || rank(m.MountPoint) < rank(v2.MountPoint) {
			v2 = m
		}
	}
	slices.Sort(l.V1Controllers)
	l.V1Controllers = slices.Compact(l.V1Controllers)

	switch {
	case rootIsCgroup2:
		l.Mode = cgroupUnified
		if v2 == nil || v2.MountPoint != cgroupRoot {
			v2 = &cgroupMount{Root: "/", MountPoint: cgroupRoot, V2: true}
		}
	case len(l.V1Controllers) > 0 && v2 != nil:
		l.Mode = cgroupHybrid
	case len(l.V1Controllers) > 0:
		l.Mode = cgroupV1
	case v2 != nil:
		// cgroup2 holds every controller even if mounted elsewhere, perhaps
		// beside a controller-less name=systemd hierarchy.
		l.Mode = cgroupUnified
	default:
		return l
	}

	if v2 != nil {
		for _, e := range self {
			if e.ID == 0 && len(e.Controllers) == 0 {
				l.V2Dir = cgroupDir(*v2, e.Path)
				break
			}
		}
	}
	if l.Mode == cgroupUnified {
		l.DelegationDir = l.V2Dir
		return l
	}
	for _, m := range mounts {
		if m.V2 || !slices.Contains(m.Controllers, "memory") {
			continue
		}
		for _, e := range self {
			if slices.Contains(e.Controllers, "memory") {
				l.DelegationDir = cgroupDir(m, e.Path)
				break
			}
		}
		break
	}
	return l
}

// rank orders cgroup2 mount points by preference.
func rank(mountPoint string) int {
	switch mountPoint {
	case cgroupRoot:
		return 0
	case cgroupRoot + "/unified":
		return 1
	default:
		return 2
	}
}

// cgroupDir joins the caller's cgroup path to the mount point, minus the
// mount's root. It returns "" if the cgroup is outside the mounted subtree
// (a path with ".." from a cgroup namespace, or a different subtree).
func cgroupDir(m cgroupMount, cgPath string) string {
	if !strings.HasPrefix(cgPath, "/") || slices.Contains(strings.Split(cgPath, "/"), "..") {
		return ""
	}
	rel := cgPath
	if m.Root != "/" {
		if cgPath != m.Root && !strings.HasPrefix(cgPath, m.Root+"/") {
			return ""
		}
		rel = strings.TrimPrefix(cgPath, m.Root)
	}
	return path.Join(m.MountPoint, rel)
}

// requiredV2Controllers are the cgroup2 controllers jail sets limits with.
var requiredV2Controllers = []string{"cpu", "memory", "pids"}

// cgroupFacts is what the cgroup probe found.
type cgroupFacts struct {
	// ReadErr is non-nil if /proc/self/mountinfo or /proc/self/cgroup could
	// not be read; the rest is then empty.
	ReadErr error
	Layout  cgroupLayout
	// V2Controllers is the content of cgroup.controllers in Layout.V2Dir,
	// split; valid if V2Err is nil.
	V2Controllers []string
	V2Err         error
	// WritableErr is the result of access(Layout.DelegationDir, W_OK).
	WritableErr error
}

// cgroupFeature judges the cgroup setup.
func cgroupFeature(c cgroupFacts) Feature {
	f := Feature{Name: nameCgroups}
	l := c.Layout
	if c.ReadErr != nil {
		f.Verdict = Missing
		f.Detail = c.ReadErr.Error()
		f.Fix = "mount procfs at /proc"
		return f
	}
	if l.Mode == cgroupNone {
		f.Verdict = Missing
		f.Detail = "no cgroup or cgroup2 mount in /proc/self/mountinfo"
		f.Fix = "mount cgroup2: `mount -t cgroup2 none /sys/fs/cgroup`"
		return f
	}

	var parts []string
	parts = append(parts, l.Mode.String())
	if l.Mode != cgroupUnified {
		parts = append(parts, "v1 controllers "+listOrNone(l.V1Controllers))
	}
	switch {
	case l.V2Dir == "" && l.Mode != cgroupV1:
		parts = append(parts, "own cgroup2 directory not visible")
	case l.V2Dir != "" && c.V2Err != nil:
		parts = append(parts, fmt.Sprintf("v2 controllers unknown (%v)", c.V2Err))
	case l.V2Dir != "":
		parts = append(parts, fmt.Sprintf("v2 controllers %s at %s", listOrNone(c.V2Controllers), l.V2Dir))
	}
	if l.Mode != cgroupUnified {
		parts = append(parts, "limits use cgroup v1")
	}
	switch {
	case l.DelegationDir == "":
		parts = append(parts, "own cgroup directory not found")
	case c.WritableErr == nil:
		parts = append(parts, "own cgroup "+l.DelegationDir+" writable")
	default:
		parts = append(parts, fmt.Sprintf("own cgroup %s not writable (%v)", l.DelegationDir, c.WritableErr))
	}
	f.Detail = strings.Join(parts, "; ")

	if l.Mode != cgroupUnified {
		f.Verdict = Warn
		f.Fix = "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2"
		return f
	}
	var missing []string
	for _, want := range requiredV2Controllers {
		if c.V2Err != nil || !slices.Contains(c.V2Controllers, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		f.Verdict = Warn
		f.Fix = "enable " + strings.Join(missing, " ") + " in the parent's cgroup.subtree_control " +
			"(systemd: `systemd-run --user --scope -p Delegate=yes jail ...`)"
		return f
	}
	f.Verdict = OK
	return f
}

// listOrNone joins a list with commas, or says "none".
func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}
