package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Prune removes the per-run groups left behind by jail processes that died
// without destroying them (killed with SIGKILL), under this process's own
// cgroups or o.Parent, in every hierarchy jail uses. It kills whatever
// still runs in them. A group is stale when the pid its name encodes is
// gone or now belongs to a process with another start time; groups whose
// owner lives in another pid namespace are left alone, as this process
// cannot tell whether their owner lives. It returns the directories it
// removed, sorted.
func Prune(o Options) ([]string, error) {
	me, err := newOwner()
	if err != nil {
		return nil, err
	}
	stale, err := groupsUnder(o, func(name, _ string) (bool, error) {
		own, ok := parseName(name)
		return ok && own.PIDNS == me.PIDNS && !alive(own), nil
	})
	removed, derr := destroyAll(stale)
	return removed, errors.Join(err, derr)
}

// groupsUnder gathers, by name, the directories under this process's own
// cgroups or o.Parent, in every hierarchy jail uses, that pick takes
// (given the name and the directory's path). An error of pick's is
// returned with the others, and its directory not taken.
func groupsUnder(o Options, pick func(name, dir string) (bool, error)) (map[string]*Group, error) {
	f, err := gatherFacts(o, []string{})
	if err != nil {
		return nil, fmt.Errorf("probe cgroups: %w", err)
	}
	var errs []error
	groups := map[string]*Group{}
	for _, h := range f.used() {
		parentCg := f.parentCg(h)
		parent := h.Dir(parentCg)
		if parent == "" {
			continue
		}
		entries, err := os.ReadDir(parent)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			take, err := pick(e.Name(), path.Join(parent, e.Name()))
			if err != nil {
				errs = append(errs, err)
			}
			if take && err == nil {
				addDir(groups, e.Name(), h, parent, parentCg)
			}
		}
	}
	return groups, errors.Join(errs...)
}

// used lists the hierarchies jail makes groups in on this host.
func (f *facts) used() []hierarchy {
	var hierarchies []hierarchy
	if f.Layout.V2 != nil && !f.NoV2 {
		hierarchies = append(hierarchies, *f.Layout.V2)
	}
	for _, h := range f.Layout.V1 {
		if _, ok := f.V1[h.Name()]; ok {
			hierarchies = append(hierarchies, h)
		}
	}
	return hierarchies
}

// addDir adds the directory name of hierarchy h (under parent, cgroup
// parentCg) to the group of that name in groups.
func addDir(groups map[string]*Group, name string, h hierarchy, parent, parentCg string) {
	g := groups[name]
	if g == nil {
		g = &Group{fd: -1}
		groups[name] = g
	}
	d := &groupDir{hier: h, path: path.Join(parent, name), cgPath: path.Join(parentCg, name), serves: serves(h)}
	if h.V2 {
		g.dirs = append([]*groupDir{d}, g.dirs...)
	} else {
		g.dirs = append(g.dirs, d)
	}
}

// destroyAll destroys groups and returns the directories removed, sorted.
func destroyAll(groups map[string]*Group) ([]string, error) {
	var errs []error
	var removed []string
	for _, g := range groups {
		paths := g.Paths()
		if err := g.Destroy(); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, paths...)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// PruneEmpty removes the groups whose names start with prefix, under this
// process's own cgroups or o.Parent in every hierarchy jail uses, in which
// no process runs (nor below them, in any hierarchy) and whose directories
// are all older than minAge: a session's whose PID 1 is gone and whose
// state, which names the group, went too (the sessions' own gc removes
// the others). A younger one may be a session's being made, and an empty
// group of a live session never lasts: its PID 1 is in it from its clone.
// It returns the directories it removed, sorted.
func PruneEmpty(o Options, prefix string, minAge time.Duration) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("cgroup: PruneEmpty needs a name prefix")
	}
	busy := map[string]bool{} // in one hierarchy: left in all
	groups, err := groupsUnder(o, func(name, dir string) (bool, error) {
		if !strings.HasPrefix(name, prefix) {
			return false, nil
		}
		empty, err := quiet(dir, minAge)
		if err != nil || !empty {
			busy[name] = true
		}
		return empty, err
	})
	for name := range busy {
		delete(groups, name)
	}
	removed, derr := destroyAll(groups)
	return removed, errors.Join(err, derr)
}

// DestroyNamed destroys the group named name under this process's own
// cgroups or o.Parent, in every hierarchy jail uses, killing what runs
// in it, and returns the directories it removed: a session's whose
// creator died before it wrote the state that names it.
func DestroyNamed(o Options, name string) ([]string, error) {
	if name == "" || name != path.Base(name) || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: DestroyNamed: %q is not a group's name", name)
	}
	groups, err := groupsUnder(o, func(n, _ string) (bool, error) { return n == name, nil })
	if err != nil {
		return nil, err
	}
	return destroyAll(groups)
}

// quiet reports whether no process is in the cgroup directory dir or
// below it, and dir is older than minAge.
func quiet(dir string, minAge time.Duration) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if time.Since(time.Unix(st.Mtim.Unix())) < minAge {
		return false, nil
	}
	empty := true
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			empty = false
			return filepath.SkipAll
		}
		return nil
	})
	return empty, err
}

// serves lists the controllers a stale group's directory in h can be used
// for (only the freezer matters to Destroy).
func serves(h hierarchy) []string {
	if h.V2 {
		return []string{ControllerCPUAcct, ControllerFreezer}
	}
	var s []string
	for _, c := range controllerNames {
		if slices.Contains(h.Controllers, v1Name(c)) {
			s = append(s, c)
		}
	}
	return s
}

// alive reports whether the owner of a group still runs: its pid exists
// and has the same start time. If /proc cannot say, it counts as alive, so
// that nothing is removed on a guess.
func alive(o owner) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.PID))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return false
	}
	if err != nil {
		return true
	}
	start, err := parseStatStartTime(string(stat))
	return err != nil || start == o.StartTime
}
