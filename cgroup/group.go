package cgroup

import (
	"slices"
	"sync"
)

// Options says where and how [New] creates a group.
type Options struct {
	// Parent is the cgroup to create the per-run group in, instead of the
	// cgroup this process runs in. It is a path relative to this process's
	// cgroup in each hierarchy ("jail"), an absolute cgroup path ("/jail",
	// the same in every hierarchy), or a directory under a cgroup mount
	// ("/sys/fs/cgroup/jail", "/sys/fs/cgroup/memory/jail": cgroup "/jail").
	// It must exist; New never creates or changes it. On cgroup v2 its
	// cgroup.subtree_control must already enable the controllers the
	// limits need.
	Parent string `json:"parent,omitempty"`
	// AllowUnenforced makes New create the group with the limits it can
	// enforce instead of failing; [Group.Unenforced] lists the others.
	AllowUnenforced bool `json:"allow_unenforced,omitempty"`
	// Name, when not empty, is the group's directory name instead of one
	// named after this process, which [Prune] removes once this process is
	// gone: a session's group outlives the process that made it, and
	// whoever names it removes it.
	Name string `json:"name,omitempty"`

	// noV2 makes New ignore cgroup2, so tests on a hybrid host reach the
	// v1-only paths (cpuacct, freezer).
	noV2 bool
}

// Group is one run's cgroup: a directory in cgroup2 and/or in each v1
// hierarchy it needs. Its methods are safe for concurrent use.
type Group struct {
	mu sync.Mutex
	// dirs are the directories created, cgroup2 first.
	dirs []*groupDir
	// fd is an O_PATH fd of the cgroup2 directory, or -1.
	fd int
	// kept are the files Stats and CPUUsage read, open from their first
	// read (-1: the file does not exist); see readKept.
	kept       map[string]int
	unenforced []Unenforced
	// removed is set once every directory is gone.
	removed bool
	// pending is what Complete makes and writes (Begin), in order: the
	// cgroup2 directory (made) first.
	pending         []pendingDir
	allowUnenforced bool
	completeErr     error // Complete's failure, returned again
}

// pendingDir is a directory of the group and its limits, before Complete.
type pendingDir struct {
	d      *groupDir
	writes []write
	made   bool // Begin made the directory; its writes are left
}

// groupDir is the group's directory in one hierarchy.
type groupDir struct {
	hier hierarchy
	// path is the directory.
	path string
	// cgPath is the cgroup path, as /proc/PID/cgroup shows it.
	cgPath string
	// serves lists the controllers (of controllerNames) used here.
	serves []string
}

func (d *groupDir) serving(controller string) bool { return slices.Contains(d.serves, controller) }

// dirServing returns the group's directory for controller, or nil.
func (g *Group) dirServing(controller string) *groupDir {
	for _, d := range g.dirs {
		if d.serving(controller) {
			return d
		}
	}
	return nil
}

// v2Dir returns the group's cgroup2 directory, or nil.
func (g *Group) v2Dir() *groupDir {
	if len(g.dirs) > 0 && g.dirs[0].hier.V2 {
		return g.dirs[0]
	}
	return nil
}

// Version returns 2 if the group lives on cgroup v2 only, 1 if any of its
// limits or accounting uses a v1 hierarchy (on hybrid hosts the group may
// also have a cgroup2 directory, for killing and CPU accounting), and 0 if
// it has no directory at all (nothing could be created and
// AllowUnenforced was set). A group [Begin] made answers for the
// directories [Group.Complete] is to make as well.
func (g *Group) Version() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	dirs := slices.Clone(g.dirs)
	for _, pd := range g.pending {
		if !pd.made {
			dirs = append(dirs, pd.d)
		}
	}
	switch {
	case len(dirs) == 0:
		return 0
	case slices.ContainsFunc(dirs, func(d *groupDir) bool { return !d.hier.V2 }):
		return 1
	default:
		return 2
	}
}

// Paths returns the group's directories, cgroup2 first.
func (g *Group) Paths() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	paths := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		paths[i] = d.path
	}
	return paths
}

// Unenforced lists the limits that were asked for but are not enforced.
// It is empty unless [Options.AllowUnenforced] was set.
func (g *Group) Unenforced() []Unenforced {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.unenforced)
}
