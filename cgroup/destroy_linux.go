package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of Destroy's waits. A killed process is gone in microseconds to
// milliseconds (more while it frees a lot of memory); a process stuck in
// uninterruptible sleep (D state, e.g. on a dead NFS server) may never go.
const (
	destroyTimeout = 10 * time.Second
	freezeTimeout  = time.Second
	rmdirTimeout   = time.Second
)

// Destroy kills every process in the group, waits until the group is empty
// and removes its directories. It is idempotent, and safe on a group whose
// processes already exited and on one that New created only in part.
//
// Killing uses cgroup.kill on cgroup2 (Linux 5.14; before that cgroup.freeze,
// SIGKILL to each process, thaw), or on v1 the freezer (freeze, SIGKILL to
// each process, thaw), or without a freezer SIGKILL to each process until
// none is left. A process is signalled through a pidfd after checking it is
// still in the group, so a reused pid is never hit. Destroy then waits for
// the group to be empty (cgroup.events populated 0 on v2, empty
// cgroup.procs on v1), which a launcher that exits before its children
// would otherwise race, and removes each directory, retrying EBUSY briefly.
//
// Destroy does not take a context: it must finish even when the run was
// cancelled. It gives up after 10 s (a process in uninterruptible sleep) and
// returns an error naming what is left; [Prune] removes it later.
func (g *Group) Destroy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	g.closeKept()
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
	if g.removeEmpty() {
		g.removed = true
		return nil
	}
	if err := g.killAll(time.Now().Add(destroyTimeout)); err != nil {
		return err
	}
	var errs []error
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if err := removeTree(g.dirs[i].path, time.Now().Add(rmdirTimeout)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	g.removed = true
	return nil
}

// removeEmpty removes the group's directories, the last made first, when
// the group holds no process and no child group: the common case, a jail
// whose PID namespace ended with its PID 1. It costs one rmdir a
// directory, where kill, wait and removal read each directory's
// cgroup.procs and list it for children first (0.13 ms for three
// directories here). It stops at the first directory that stays (EBUSY:
// a process or a child group is left) and reports false; the rest is
// Destroy's kill and removal, which take a directory already gone as
// removed.
func (g *Group) removeEmpty() bool {
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(g.dirs[i].path); err != nil && err != unix.ENOENT {
			return false
		}
	}
	return true
}

// Kill kills every process in the group and waits until it is empty. The
// group stays, for Stats and Destroy.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	return g.killAll(time.Now().Add(destroyTimeout))
}

// killAll kills every process in the group and waits until it is empty.
func (g *Group) killAll(deadline time.Time) error {
	v2 := g.v2Dir()
	killFile := v2 != nil
	var thaw func()
	switch {
	case v2 != nil:
		if err := writeFile(path.Join(v2.path, "cgroup.kill"), "1"); err != nil {
			// Before Linux 5.14 (ENOENT), or not allowed: freeze, kill
			// each, thaw; or, if the directory is gone, nothing to do.
			killFile = false
			if exists(v2.path) {
				thaw = freeze(v2.path, "cgroup.freeze", "1", "0", frozenV2)
			}
		}
	case g.dirServing(ControllerFreezer) != nil:
		thaw = freeze(g.dirServing(ControllerFreezer).path, "freezer.state", "FROZEN", "THAWED", frozenV1)
	}

	backoff := 50 * time.Microsecond
	for {
		// cgroup2's populated covers the whole subtree; on v1, and on
		// cgroup2 without cgroup.kill, the pids are needed to kill them.
		busy := v2 != nil && populated(v2.path)
		var pids []int
		for _, d := range g.dirs {
			if d.hier.V2 && (killFile || !busy) {
				continue
			}
			if err := walkProcs(d.path, &pids); err != nil {
				if thaw != nil {
					thaw()
				}
				return err
			}
		}
		slices.Sort(pids)
		pids = slices.Compact(pids)
		if !busy && len(pids) == 0 {
			if thaw != nil {
				thaw()
			}
			return nil
		}
		for _, pid := range pids {
			g.kill(pid)
		}
		if thaw != nil {
			// Frozen processes cannot fork or exit, so every one of them
			// has been signalled; thawed, they die.
			thaw()
			thaw = nil
		}
		if killFile && busy && backoff > time.Millisecond {
			// Still there after a millisecond: a process attached after
			// the first write (a racing Attach) is killed by another.
			_ = writeFile(path.Join(v2.path, "cgroup.kill"), "1")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: processes still in %s after %v: %v",
				strings.Join(g.pathsLocked(), " "), destroyTimeout, pids)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 10*time.Millisecond)
	}
}

func (g *Group) pathsLocked() []string {
	var paths []string
	for _, d := range g.dirs {
		paths = append(paths, d.path)
	}
	return paths
}

// walkProcs appends the pids of dir/cgroup.procs and of its child cgroups.
// A directory that is gone has no processes.
func walkProcs(dir string, pids *[]int) error {
	text, err := readFile(path.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	if err != nil {
		return err
	}
	for f := range strings.FieldsSeq(text) {
		if pid, err := strconv.Atoi(f); err == nil {
			*pids = append(*pids, pid)
		}
	}
	for _, child := range childCgroups(dir) {
		if err := walkProcs(child, pids); err != nil {
			return err
		}
	}
	return nil
}

// childCgroups lists the cgroups directly below dir. jail never creates
// any, but a delegated workload could. A kernfs directory's link count is 2
// plus its subdirectories, so one stat(2) answers the usual case without
// listing the directory.
func childCgroups(dir string) []string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Nlink <= 2 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var children []string
	for _, e := range entries {
		if e.IsDir() {
			children = append(children, path.Join(dir, e.Name()))
		}
	}
	return children
}

// kill sends SIGKILL to pid if it is in the group. The pidfd pins the
// process, so if pid was reused after cgroup.procs was read, the check sees
// the new process (not ours, left alone) or the pidfd's process is already
// dead (ESRCH).
func (g *Group) kill(pid int) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	current, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return
	}
	entries := parseProcCgroup(string(current))
	if !slices.ContainsFunc(g.dirs, func(d *groupDir) bool { return d.contains(entries) }) {
		return
	}
	_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
}

// frozenV2 and frozenV1 report whether a freezer reached the frozen state.
func frozenV2(dir string) bool {
	text, err := readFile(path.Join(dir, "cgroup.events"))
	return err == nil && keyedValue(text, "frozen") == "1"
}

func frozenV1(dir string) bool {
	text, err := readFile(path.Join(dir, "freezer.state"))
	return err == nil && strings.TrimSpace(text) == "FROZEN"
}

// freeze writes on to file in dir, waits (bounded) until frozen, and
// returns the function that writes off. If freezing cannot be started it
// returns nil and Destroy kills without it.
func freeze(dir, file, on, off string, frozen func(string) bool) func() {
	if err := writeFile(path.Join(dir, file), on); err != nil {
		return nil
	}
	deadline := time.Now().Add(freezeTimeout)
	for backoff := 50 * time.Microsecond; !frozen(dir) && time.Now().Before(deadline); backoff = min(2*backoff, 10*time.Millisecond) {
		time.Sleep(backoff)
	}
	return func() { _ = writeFile(path.Join(dir, file), off) }
}

// populated reads "populated" from a cgroup2 directory's cgroup.events. A
// directory that cannot be read counts as empty: it is gone.
func populated(dir string) bool {
	text, err := readFile(path.Join(dir, "cgroup.events"))
	return err == nil && keyedValue(text, "populated") == "1"
}

// keyedValue returns the value of key in flat keyed text.
func keyedValue(text, key string) string {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func exists(p string) bool { return unix.Access(p, unix.F_OK) == nil }

// removeTree removes the cgroup dir and any cgroup below it, children
// first. EBUSY (a cgroup whose last process is still exiting, or whose
// controllers are going offline) is retried until deadline.
func removeTree(dir string, deadline time.Time) error {
	for _, child := range childCgroups(dir) {
		if err := removeTree(child, deadline); err != nil {
			return err
		}
	}
	backoff := 50 * time.Microsecond
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case err == unix.EINTR:
			continue
		case err == unix.EBUSY && time.Now().Before(deadline):
			time.Sleep(backoff)
			backoff = min(2*backoff, 10*time.Millisecond)
		default:
			return &os.PathError{Op: "rmdir", Path: dir, Err: err}
		}
	}
}
