package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Delegate enables, in g's cgroup2 cgroup.subtree_control, the
// controllers g has (memory, pids, cpu, io), so that groups made with
// [Group.Sub] measure what g limits. The kernel allows it only while g
// holds no process (the no-internal-process rule), so call it before
// anything joins g, and from then on put processes only in sub-groups.
// Equivalent to `echo "+memory +pids" > cgroup.subtree_control`.
//
// It also makes each sub-group, not g, the unit of an OOM kill: g's
// memory.oom.group is cleared and Sub sets its children's, so running out
// of g's memory kills the whole sub-group the OOM killer's victim is in
// (the kernel takes the highest group with oom.group set up to the one
// out of memory) and leaves the others running.
func (g *Group) Delegate() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.v2Dir()
	if d == nil {
		return nil
	}
	if err := enableSubtree(d.path); err != nil {
		return err
	}
	return writeIfExists(path.Join(d.path, "memory.oom.group"), "0")
}

// writeIfExists writes value to file p unless p does not exist (the
// controller is not enabled there).
func writeIfExists(p, value string) error {
	if err := writeFile(p, value); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Sub creates a child group named name in every directory of g, to measure
// and kill one part of what runs in g apart from the rest (a session's
// exec, a session's PID 1). The child has no limits of its own; g's bound
// it. On cgroup2 it measures what [Group.Delegate] enabled.
//
// Destroying g destroys its children.
func (g *Group) Sub(name string) (_ *Group, retErr error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad child group name %q", name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil, errors.New("cgroup: group is destroyed")
	}
	sub := &Group{fd: -1}
	defer func() {
		if retErr != nil {
			_ = sub.Destroy()
		}
	}()
	for _, d := range g.dirs {
		sd := &groupDir{hier: d.hier, path: path.Join(d.path, name), cgPath: path.Join(d.cgPath, name), serves: d.serves}
		if err := unix.Mkdir(sd.path, 0o755); err != nil {
			return nil, &os.PathError{Op: "mkdir", Path: sd.path, Err: err}
		}
		sub.dirs = append(sub.dirs, sd)
	}
	if d := sub.v2Dir(); d != nil {
		if err := writeIfExists(path.Join(d.path, "memory.oom.group"), "1"); err != nil {
			return nil, err
		}
		fd, err := unix.Open(d.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: d.path, Err: err}
		}
		sub.fd = fd
	}
	return sub, nil
}

// ChildName returns a name for a child group ([Group.Sub]) that no child
// made by another process can have, whenever that process ran: prefix,
// then this process's pid, start time and pid namespace, and a number of
// its own ("exec-<pid>-<start time>-<pidns inode>-<seq>"). A pid alone
// comes back (pid_max is 32768 on many hosts), and a child left behind by
// a killed process would make the mkdir of a later one with its pid fail.
func ChildName(prefix string) (string, error) {
	o, err := newOwner()
	if err != nil {
		return "", err
	}
	return o.nameWith(prefix), nil
}

// ChildNames lists g's child groups (made by [Group.Sub], here or in
// another process), by name, from g's first directory.
func (g *Group) ChildNames() ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.dirs) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir(g.dirs[0].path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Child returns g's existing child group name, in every directory of g
// that has it (a child made by [Group.Sub] exists in all of them).
func (g *Group) Child(name string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad child group name %q", name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	sub := &Group{fd: -1}
	for _, d := range g.dirs {
		sd := &groupDir{hier: d.hier, path: path.Join(d.path, name), cgPath: path.Join(d.cgPath, name), serves: d.serves}
		var st unix.Stat_t
		if err := unix.Lstat(sd.path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub.dirs = append(sub.dirs, sd)
	}
	if len(sub.dirs) == 0 {
		return nil, &os.PathError{Op: "open", Path: path.Join(g.dirs[0].path, name), Err: fs.ErrNotExist}
	}
	return sub, nil
}

// FreezeChildren freezes each child group of g but those named in except,
// and returns the function that thaws them: a session's processes stop
// (its PID 1's group and its commands') while a group made afterwards
// (a helper's) runs. On a failure it thaws what it froze.
func (g *Group) FreezeChildren(except ...string) (thaw func() error, retErr error) {
	g.mu.Lock()
	canFreeze := g.v2Dir() != nil || g.dirServing(ControllerFreezer) != nil
	g.mu.Unlock()
	if !canFreeze {
		return nil, fmt.Errorf("cgroup: the group cannot be frozen (no cgroup2 directory and no freezer hierarchy): %w", errors.ErrUnsupported)
	}
	names, err := g.ChildNames()
	if err != nil {
		return nil, err
	}
	var frozen []*Group
	thaw = func() error {
		var errs []error
		for _, c := range frozen {
			errs = append(errs, c.Thaw())
		}
		frozen = nil
		return errors.Join(errs...)
	}
	defer func() {
		if retErr != nil {
			_ = thaw()
		}
	}()
	for _, n := range names {
		if slices.Contains(except, n) {
			continue
		}
		c, err := g.Child(n)
		if err != nil {
			return nil, err
		}
		frozen = append(frozen, c)
		if err := c.Freeze(); err != nil {
			return nil, err
		}
	}
	return thaw, nil
}

// ThawChildren thaws every child group of g (what FreezeChildren froze,
// when the function it returned was never called).
func (g *Group) ThawChildren() error {
	names, err := g.ChildNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		c, err := g.Child(n)
		if err == nil {
			err = c.Thaw()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// enableSubtree enables, in dir's cgroup.subtree_control, the controllers
// of dir's cgroup.controllers that jail measures, so its children get them.
func enableSubtree(dir string) error {
	have, err := readFile(path.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	on, err := readFile(path.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	var add []string
	for _, c := range []string{ControllerMemory, ControllerPids, ControllerCPU, ControllerIO} {
		if slices.Contains(strings.Fields(have), c) && !slices.Contains(strings.Fields(on), c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeFile(path.Join(dir, "cgroup.subtree_control"), strings.Join(add, " "))
}

// DirState is one directory of a group, as [Group.State] saves it.
type DirState struct {
	// Path is the directory.
	Path string `json:"path"`
	// Cgroup is the cgroup path, as /proc/PID/cgroup shows it.
	Cgroup string `json:"cgroup"`
	// V2 is true for the cgroup2 directory.
	V2 bool `json:"v2,omitempty"`
	// Controllers are the v1 hierarchy's controllers.
	Controllers []string `json:"controllers,omitempty"`
	// Serves lists the controllers used here.
	Serves []string `json:"serves,omitempty"`
}

// State describes g's directories, for [Load] in another process (a
// session's group outlives the process that made it).
func (g *Group) State() []DirState {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]DirState, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = DirState{Path: d.path, Cgroup: d.cgPath, V2: d.hier.V2, Controllers: d.hier.Controllers, Serves: d.serves}
	}
	return out
}

// Load returns the group that [Group.State] described. It refuses, and
// touches nothing, unless every directory is a directory of a cgroup file
// system (statfs), is named name, and its cgroup path ends in its path: a
// state file is not trusted to point at any other directory.
func Load(dirs []DirState, name string) (*Group, error) {
	g := &Group{fd: -1}
	for i, ds := range dirs {
		if !path.IsAbs(ds.Path) || path.Clean(ds.Path) != ds.Path || path.Base(ds.Path) != name ||
			!strings.HasSuffix(ds.Path, ds.Cgroup) || ds.V2 != (i == 0 && ds.V2) {
			return nil, fmt.Errorf("cgroup: %q is not a directory of group %q", ds.Path, name)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(ds.Path, &st); err != nil {
			return nil, &os.PathError{Op: "statfs", Path: ds.Path, Err: err}
		}
		if want := map[bool]int64{true: unix.CGROUP2_SUPER_MAGIC, false: unix.CGROUP_SUPER_MAGIC}[ds.V2]; int64(st.Type) != want {
			return nil, fmt.Errorf("cgroup: %s is not on a cgroup%s file system", ds.Path, map[bool]string{true: "2", false: ""}[ds.V2])
		}
		h := hierarchy{mount: mount{V2: ds.V2, Controllers: ds.Controllers}}
		g.dirs = append(g.dirs, &groupDir{hier: h, path: ds.Path, cgPath: ds.Cgroup, serves: ds.Serves})
	}
	if d := g.v2Dir(); d != nil {
		fd, err := unix.Open(d.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: d.path, Err: err}
		}
		g.fd = fd
	}
	return g, nil
}

// Close releases g's descriptors and leaves its directories as they are.
func (g *Group) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closeKept()
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
}

// Freeze stops every process of the group where it is, keeping its
// memory (cgroup.freeze on cgroup2, freezer.state on v1), and waits until
// the kernel says the group is frozen. Equivalent to `echo 1 >
// cgroup.freeze`.
func (g *Group) Freeze() error { return g.setFrozen(true) }

// Thaw lets a frozen group run again.
func (g *Group) Thaw() error { return g.setFrozen(false) }

func (g *Group) setFrozen(on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := g.v2Dir(); d != nil {
		return writeFrozen(d.path, "cgroup.freeze", map[bool]string{true: "1", false: "0"}[on], on, frozenV2)
	}
	if d := g.dirServing(ControllerFreezer); d != nil {
		return writeFrozen(d.path, "freezer.state", map[bool]string{true: "FROZEN", false: "THAWED"}[on], on, frozenV1)
	}
	return fmt.Errorf("cgroup: the group cannot be frozen (no cgroup2 directory and no freezer hierarchy): %w", errors.ErrUnsupported)
}

func writeFrozen(dir, file, value string, on bool, frozen func(string) bool) error {
	if err := writeFile(path.Join(dir, file), value); err != nil {
		return err
	}
	if !on {
		return nil
	}
	deadline := time.Now().Add(freezeTimeout)
	for backoff := 50 * time.Microsecond; !frozen(dir); backoff = min(2*backoff, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s did not freeze within %v", dir, freezeTimeout)
		}
		time.Sleep(backoff)
	}
	return nil
}

// Procs returns the processes in the group and its children.
func (g *Group) Procs() ([]int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var pids []int
	for _, d := range g.dirs {
		if err := walkProcs(d.path, &pids); err != nil {
			return nil, err
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}
