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
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/procfs"
)

// New creates a per-run group and applies the limits l. The group is a new
// directory, named after this process (see [Prune]), in cgroup2 and/or in
// the v1 hierarchies the limits need, under this process's own cgroup or
// [Options.Parent]. It writes only the controllers the limits use.
//
// If a limit cannot be enforced here by this caller, New returns an
// *[UnenforcedError] (matching [errors.ErrUnsupported]) and creates nothing,
// unless o.AllowUnenforced is set. Invalid limits give the errors of
// [Limits.Validate]. On any error, nothing is left behind.
//
// The caller must call [Group.Destroy].
func New(l Limits, o Options) (*Group, error) {
	return create(l, o, nil)
}

// Begin is New in two parts, for a caller that starts its process in
// between: Begin does New's checks (the limits, the host, what cannot be
// enforced) and makes only the cgroup2 directory, without its limits, for
// [Group.FD]; [Group.Complete] makes the v1 directories and writes every
// limit. Until Complete has returned nil the group limits nothing: a
// process in it must not run anything of the workload's yet.
// [Group.Pending] says how many directories Complete will make.
//
// The caller must call [Group.Destroy], whether Complete was called or not.
func Begin(l Limits, o Options) (*Group, error) {
	return begin(l, o, nil)
}

// create is New; own, if not nil, names the group instead of this process
// (tests of Prune).
func create(l Limits, o Options, own *owner) (*Group, error) {
	g, err := begin(l, o, own)
	if err != nil {
		return nil, err
	}
	if err := g.Complete(); err != nil {
		return nil, err
	}
	return g, nil
}

func begin(l Limits, o Options, own *owner) (_ *Group, retErr error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	f, err := gatherFacts(o, l.controllers())
	if err != nil {
		return nil, fmt.Errorf("probe cgroups: %w", err)
	}
	p := makePlan(l, f)
	if len(p.Unenforced) > 0 && !o.AllowUnenforced {
		return nil, &UnenforcedError{Limits: p.Unenforced}
	}
	if own == nil {
		me, err := newOwner()
		if err != nil {
			return nil, err
		}
		own = &me
	}
	name := own.name()
	if o.Name != "" {
		if strings.ContainsAny(o.Name, "/\x00") || o.Name == "." || o.Name == ".." || strings.HasPrefix(o.Name, namePrefix) && parseNameOK(o.Name) {
			return nil, fmt.Errorf("cgroup: bad group name %q", o.Name)
		}
		name = o.Name
	}

	g := &Group{fd: -1, unenforced: p.Unenforced, allowUnenforced: o.AllowUnenforced}
	defer func() {
		if retErr != nil {
			_ = g.Destroy()
		}
	}()
	dirs := p.V1
	if p.V2 != nil {
		dirs = append([]dirPlan{*p.V2}, dirs...)
	}
	for _, dp := range dirs {
		d := &groupDir{
			hier:   dp.Hierarchy,
			path:   path.Join(dp.Parent, name),
			cgPath: path.Join(f.parentCg(dp.Hierarchy), name),
			serves: dp.Serves,
		}
		g.pending = append(g.pending, pendingDir{d: d, writes: dp.Writes, made: dp.Hierarchy.V2})
	}
	if len(g.pending) > 0 && g.pending[0].made {
		d := g.pending[0].d
		if err := unix.Mkdir(d.path, 0o755); err != nil {
			return nil, &os.PathError{Op: "mkdir", Path: d.path, Err: err}
		}
		g.dirs = append(g.dirs, d)
		fd, err := unix.Open(d.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: d.path, Err: err}
		}
		g.fd = fd
	}
	return g, nil
}

// Pending returns how many directories [Group.Complete] will make: the
// group's v1 directories, until Complete has run.
func (g *Group) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, pd := range g.pending {
		if !pd.made {
			n++
		}
	}
	return n
}

// Complete makes what [Begin] left: the v1 directories, and every limit
// in every directory. A limit that cannot be enforced is an
// *[UnenforcedError], unless Options.AllowUnenforced was set. On any error
// the group is destroyed, and every later call returns that error; once
// the group is destroyed, an error. The second successful call does
// nothing.
func (g *Group) Complete() (retErr error) {
	g.mu.Lock()
	pending, removed, failed := g.pending, g.removed, g.completeErr
	g.pending = nil
	g.mu.Unlock()
	switch {
	case failed != nil:
		return failed
	case removed:
		return errors.New("cgroup: Complete of a destroyed group")
	}
	defer func() {
		if retErr != nil {
			g.mu.Lock()
			g.completeErr = retErr
			g.mu.Unlock()
			_ = g.Destroy()
		}
	}()
	var unenforced []Unenforced
	for _, pd := range pending {
		if !pd.made {
			if err := unix.Mkdir(pd.d.path, 0o755); err != nil {
				return &os.PathError{Op: "mkdir", Path: pd.d.path, Err: err}
			}
			g.mu.Lock()
			if g.removed { // a Destroy meanwhile: it will not see this one
				g.mu.Unlock()
				_ = unix.Rmdir(pd.d.path)
				return errors.New("cgroup: the group was destroyed during Complete")
			}
			g.dirs = append(g.dirs, pd.d)
			g.mu.Unlock()
		}
		u, err := applyWrites(pd.d.path, pd.writes)
		if err != nil {
			return err
		}
		unenforced = append(unenforced, u...)
	}
	if len(unenforced) > 0 && !g.allowUnenforced {
		return &UnenforcedError{Limits: unenforced}
	}
	g.mu.Lock()
	g.unenforced = append(g.unenforced, unenforced...)
	g.mu.Unlock()
	return nil
}

// applyWrites writes a directory's limits. A limit whose file is missing
// or not writable is returned as unenforced; other write errors (EINVAL:
// a value the kernel refuses) are errors.
func applyWrites(dir string, writes []write) ([]Unenforced, error) {
	var unenforced []Unenforced
	for _, w := range writes {
		if w.Limit != "" && slices.ContainsFunc(unenforced, func(u Unenforced) bool { return u.Limit == w.Limit }) {
			continue // the period of an unenforced quota
		}
		var tried []string
		done := false
		for _, c := range w.Candidates {
			p := path.Join(dir, c.File)
			err := writeFile(p, c.Value)
			if errors.Is(err, fs.ErrNotExist) {
				tried = append(tried, c.File)
				continue
			}
			if err != nil && w.Limit != "" && errors.Is(err, fs.ErrPermission) {
				unenforced = append(unenforced, Unenforced{Limit: w.Limit, Reason: err.Error(),
					Fix: "run as root, or delegate the parent cgroup with its control files"})
				done = true
				break
			}
			if err != nil {
				return nil, fmt.Errorf("set %s: %w", w.limitName(), err)
			}
			done = true
			break
		}
		if !done && !w.Optional {
			unenforced = append(unenforced, Unenforced{Limit: w.Limit,
				Reason: fmt.Sprintf("no %s in %s", strings.Join(tried, " or "), dir),
				Fix:    missingFileFix(w.Limit)})
		}
	}
	return unenforced, nil
}

func (w write) limitName() string {
	if w.Limit == "" {
		return w.Candidates[0].File
	}
	return w.Limit + " limit"
}

// missingFileFix says how to get a control file the kernel did not create.
func missingFileFix(limit string) string {
	switch limit {
	case LimitSwap:
		return "enable swap accounting (boot without swapaccount=0, with CONFIG_MEMCG_SWAP), or turn swap off (swapoff -a)"
	case LimitIOWeight:
		return "use the bfq I/O scheduler (echo bfq > /sys/block/DEV/queue/scheduler) or enable io.cost"
	default:
		return "use a kernel with this cgroup feature"
	}
}

// writeFile writes value to a cgroup control file in one write(2), as the
// kernel parses each write on its own.
func writeFile(p, value string) error {
	fd, err := openRetry(p, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(value))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "write " + strconv.Quote(value) + " to", Path: p, Err: err}
	}
	return nil
}

// readFile reads a cgroup control file.
func readFile(p string) (string, error) {
	fd, err := openRetry(p, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var buf [4096]byte
	var out []byte
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: p, Err: err}
		}
		if n == 0 {
			return string(out), nil
		}
		out = append(out, buf[:n]...)
	}
}

// readKept reads file p of the group through a descriptor kept open from
// its first read (a missing file is remembered as missing): from then on
// a read is one or two pread(2) calls, not an open, two reads and a close
// (13-18 µs less a file here). kernfs regenerates a file's text at each
// read from offset 0. The descriptors are closed by Close and Destroy.
// The caller holds g.mu.
func (g *Group) readKept(p string) (string, error) {
	fd, ok := g.kept[p]
	if !ok {
		var err error
		if fd, err = openRetry(p, unix.O_RDONLY|unix.O_CLOEXEC); err != nil && err != unix.ENOENT {
			return "", &os.PathError{Op: "open", Path: p, Err: err}
		}
		if g.kept == nil {
			g.kept = map[string]int{}
		}
		g.kept[p] = fd
	}
	if fd < 0 {
		return "", &os.PathError{Op: "open", Path: p, Err: unix.ENOENT}
	}
	var buf [4096]byte
	var out []byte
	for {
		n, err := unix.Pread(fd, buf[:], int64(len(out)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: p, Err: err}
		}
		out = append(out, buf[:n]...)
		if n < len(buf) { // a seq_file fills the buffer unless it is at its end
			return string(out), nil
		}
	}
}

// closeKept closes readKept's descriptors. The caller holds g.mu.
func (g *Group) closeKept() {
	for _, fd := range g.kept {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	g.kept = nil
}

func openRetry(p string, flags int) (int, error) {
	for {
		fd, err := unix.Open(p, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// self is this process, as group names encode it.
var self struct {
	once sync.Once
	own  owner
	err  error
	seq  atomic.Uint64
}

// newOwner returns this process's owner record with a fresh sequence number.
func newOwner() (owner, error) {
	self.once.Do(func() {
		id, err := procfs.ReadIdentity("self")
		if err != nil {
			self.err = err
			return
		}
		self.own = owner{PID: os.Getpid(), StartTime: id.StartTime, PIDNS: id.PIDNS}
	})
	if self.err != nil {
		return owner{}, self.err
	}
	o := self.own
	o.Seq = self.seq.Add(1)
	return o, nil
}

// FD returns an O_PATH fd of the group's cgroup2 directory, for
// [syscall.SysProcAttr] UseCgroupFD and CgroupFD: clone3 with
// CLONE_INTO_CGROUP (Linux 5.7) starts the child inside the group, without
// the cost of moving it. It returns -1 if the group has no cgroup2
// directory. The fd stays open until [Group.Destroy]; do not close it.
func (g *Group) FD() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fd
}

// Attach moves process pid into the group in every hierarchy it is not in
// yet (a child started with [Group.FD] is already in the cgroup2
// directory), by writing pid to cgroup.procs. The process should be a
// just-started child that cannot fork yet: its children started before the
// move would stay outside.
//
// On cgroup v1, moving by pid write-locks the kernel's
// cgroup_threadgroup_rwsem, which waits for an RCU grace period unless
// another move happened moments before or favordynmods is set: 5 to 15 ms
// after a quiet spell on 6.18. [Group.AttachFiles] avoids that.
func (g *Group) Attach(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	current, _ := readFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	entries := parseProcCgroup(current)
	for _, d := range g.dirs {
		if d.contains(entries) {
			continue
		}
		if err := writeFile(path.Join(d.path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("attach pid %d: %w", pid, err)
		}
	}
	return nil
}

// AttachFiles opens, for each v1 directory of the group, its "tasks" file
// for writing. A single-threaded child that writes "0" to each of them
// moves itself: writing "0" to tasks moves only the calling thread, and the
// kernel then skips the global cgroup_threadgroup_rwsem and its RCU grace
// period (kernel/cgroup/cgroup.c, cgroup_procs_write_start), so the move
// costs tens of microseconds instead of milliseconds. The permission check
// uses the credentials of whoever opened the file (this process), so the
// child may already be in its own user namespace.
//
// Pass the files to the child (ExtraFiles) and close them once it has
// started; the cgroup2 part, if any, goes through [Group.FD]. Check the
// result with [Group.Verify]. The result is empty if the group has no v1
// directory.
//
// Preconditions: the child writes before it creates a thread, or the other
// threads stay behind.
func (g *Group) AttachFiles() ([]*os.File, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var files []*os.File
	for _, d := range g.dirs {
		if d.hier.V2 {
			continue
		}
		p := path.Join(d.path, "tasks")
		fd, err := openRetry(p, unix.O_WRONLY|unix.O_CLOEXEC)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		files = append(files, os.NewFile(uintptr(fd), p))
	}
	return files, nil
}

// KillFile opens the group's cgroup2 cgroup.kill for writing, for a
// process that must be able to end the group after this one is gone (a
// session command's helper, when its parent dies): writing "1" to it
// SIGKILLs every process in the group and its children, the writer too if
// it is one of them. The permission check is this process's, at the open.
// It returns nil, nil if the group has no cgroup2 directory, or on a
// kernel without cgroup.kill (before Linux 5.14).
func (g *Group) KillFile() (*os.File, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.v2Dir()
	if d == nil {
		return nil, nil
	}
	p := path.Join(d.path, "cgroup.kill")
	fd, err := openRetry(p, unix.O_WRONLY|unix.O_CLOEXEC)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Verify returns nil if process pid is in the group in every hierarchy,
// and otherwise an error naming the first directory it is not in.
func (g *Group) Verify(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := fmt.Sprintf("/proc/%d/cgroup", pid)
	current, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	entries := parseProcCgroup(string(current))
	for _, d := range g.dirs {
		if !d.contains(entries) {
			return fmt.Errorf("pid %d is not in %s (%s)", pid, d.path, strings.TrimSpace(string(current)))
		}
	}
	return nil
}

// contains reports whether the /proc/PID/cgroup entries put the process in
// d or below it.
func (d *groupDir) contains(entries []procCgroup) bool {
	for _, e := range entries {
		if d.hier.matches(e) {
			return e.Path == d.cgPath || strings.HasPrefix(e.Path, d.cgPath+"/")
		}
	}
	return false
}

// errNoCPUAccounting is returned by CPUUsage when the group cannot measure.
var errNoCPUAccounting = errors.New("cgroup: the group has no CPU accounting (no cgroup2 and no cpuacct hierarchy)")

// CPUUsage returns the total CPU time the group's processes used, dead or
// alive: usage_usec of cgroup2 cpu.stat, or v1 cpuacct.usage. The file is
// kept open from the first call and re-read with pread(2) afterwards (a
// few microseconds), so a caller enforcing a CPU-time limit can poll it
// every few milliseconds.
func (g *Group) CPUUsage() (time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.dirServing(ControllerCPUAcct)
	if d == nil {
		return 0, errNoCPUAccounting
	}
	file := path.Join(d.path, "cpuacct.usage")
	if d.hier.V2 {
		file = path.Join(d.path, "cpu.stat")
	}
	text, err := g.readKept(file)
	if err != nil {
		return 0, err
	}
	if !d.hier.V2 {
		ns, err := parseSingle(text)
		return time.Duration(ns), err
	}
	// usage_usec is the first line.
	line, _, _ := strings.Cut(text, "\n")
	v, ok := strings.CutPrefix(line, "usage_usec ")
	if !ok {
		return 0, fmt.Errorf("parse %s: first line %q, want usage_usec", file, line)
	}
	us, err := parseSingle(v)
	return time.Duration(us) * time.Microsecond, err
}

// OpenStats reads what [Group.Stats] reads, once, for its descriptors:
// Stats keeps them open, so that later it only reads. A caller that has
// time while its process runs saves the opens (seven on a hybrid host, of
// 20-60 µs each on a VM) from the end of the run.
func (g *Group) OpenStats() { _, _ = g.Stats() }

// Stats reads what the group used so far. It can be called until
// [Group.Destroy]; after the processes exited, it reports their totals.
func (g *Group) Stats() (Stats, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s Stats
	var errs []error
	read := func(d *groupDir, file string) (string, bool) {
		text, err := g.readKept(path.Join(d.path, file))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false
		}
		if err != nil {
			errs = append(errs, err)
			return "", false
		}
		return text, true
	}
	keyed := func(d *groupDir, file string) (map[string]int64, bool) {
		text, ok := read(d, file)
		if !ok {
			return nil, false
		}
		m, err := parseFlatKeyed(text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", d.path, file, err))
			return nil, false
		}
		return m, true
	}
	single := func(d *groupDir, file string) (*int64, bool) {
		text, ok := read(d, file)
		if !ok {
			return nil, false
		}
		n, err := parseSingle(text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", d.path, file, err))
			return nil, false
		}
		return &n, true
	}

	// CPU.
	if d := g.dirServing(ControllerCPUAcct); d != nil && d.hier.V2 {
		if m, ok := keyed(d, "cpu.stat"); ok {
			c := cpuStatsV2(m)
			s.CPU = &c
		}
	} else if d != nil {
		usage, okUsage := single(d, "cpuacct.usage")
		user, okUser := single(d, "cpuacct.usage_user")
		sys, okSys := single(d, "cpuacct.usage_sys")
		if okUsage {
			var acct map[string]int64
			u, sy := int64(-1), int64(-1)
			if okUser && okSys {
				u, sy = *user, *sys
			} else {
				acct, _ = keyed(d, "cpuacct.stat")
			}
			c := cpuStatsV1(*usage, u, sy, acct)
			s.CPU = &c
		}
	}
	// Throttling is the cpu controller's, wherever the usage came from.
	if d := g.dirServing(ControllerCPU); s.CPU != nil && d != nil && !d.hier.V2 {
		if m, ok := keyed(d, "cpu.stat"); ok {
			cpuThrottlingV1(s.CPU, m)
		}
	}

	// Memory: on cgroup2 whenever the controller is enabled in the group,
	// on v1 where the group has a memory directory.
	if d := g.memoryDir(); d != nil && d.hier.V2 {
		if events, ok := keyed(d, "memory.events"); ok {
			m := &MemoryStats{OOMKills: events["oom_kill"], MaxHits: events["max"]}
			m.PeakBytes, _ = single(d, "memory.peak")
			s.Memory = m
		}
	} else if d != nil {
		m := &MemoryStats{}
		m.PeakBytes, _ = single(d, "memory.max_usage_in_bytes")
		if oom, ok := keyed(d, "memory.oom_control"); ok {
			m.OOMKills = oom["oom_kill"]
		}
		// A charge fails on memsw (memory+swap, checked first) or on
		// memory, never both: the sum counts the hits.
		for _, file := range []string{"memory.failcnt", "memory.memsw.failcnt"} {
			if n, ok := single(d, file); ok {
				m.MaxHits += *n
			}
		}
		s.Memory = m
	}

	// Pids.
	if d := g.pidsDir(); d != nil {
		if events, ok := keyed(d, "pids.events"); ok {
			p := &PidsStats{MaxHits: events["max"]}
			p.Peak, _ = single(d, "pids.peak")
			s.Pids = p
		}
	}
	return s, errors.Join(errs...)
}

// memoryDir returns the directory with the memory controller: the v1 one,
// or the cgroup2 one (where memory may be enabled without a limit).
func (g *Group) memoryDir() *groupDir {
	if d := g.dirServing(ControllerMemory); d != nil {
		return d
	}
	return g.v2Dir()
}

// pidsDir is like memoryDir for pids.
func (g *Group) pidsDir() *groupDir {
	if d := g.dirServing(ControllerPids); d != nil {
		return d
	}
	return g.v2Dir()
}
