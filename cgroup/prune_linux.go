package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"

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
	f, err := gatherFacts(o, []string{})
	if err != nil {
		return nil, fmt.Errorf("probe cgroups: %w", err)
	}
	me, err := newOwner()
	if err != nil {
		return nil, err
	}
	var hierarchies []hierarchy
	if f.Layout.V2 != nil && !f.NoV2 {
		hierarchies = append(hierarchies, *f.Layout.V2)
	}
	for _, h := range f.Layout.V1 {
		if _, ok := f.V1[h.Name()]; ok {
			hierarchies = append(hierarchies, h)
		}
	}

	var errs []error
	stale := map[string]*Group{}
	for _, h := range hierarchies {
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
			own, ok := parseName(e.Name())
			if !e.IsDir() || !ok || own.PIDNS != me.PIDNS || alive(own) {
				continue
			}
			g := stale[e.Name()]
			if g == nil {
				g = &Group{fd: -1, cpuFD: -1}
				stale[e.Name()] = g
			}
			d := &groupDir{hier: h, path: path.Join(parent, e.Name()), cgPath: path.Join(parentCg, e.Name()), serves: serves(h)}
			if h.V2 {
				g.dirs = append([]*groupDir{d}, g.dirs...)
			} else {
				g.dirs = append(g.dirs, d)
			}
		}
	}
	var removed []string
	for _, g := range stale {
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
