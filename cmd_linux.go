package jail

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/landlock"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
	"github.com/jailrt/jail/seccomp"
)

// stageCaps are the capabilities the child stage keeps across its exec as
// ambient capabilities, all of them in the jail's user namespace only: it
// mounts, pivots, names the host, brings lo up and sets ids. The workload
// drops every capability before it runs.
var stageCaps = []uintptr{
	unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP,
	unix.CAP_KILL, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_CHOWN,
}

var discard = slog.New(slog.DiscardHandler)

func (c *Cmd) log() *slog.Logger {
	if c.Logger == nil {
		return discard
	}
	return c.Logger
}

// fail records a run that never started and returns err.
func (c *Cmd) fail(step string, err error) error {
	r := c.newResult()
	r.Status, r.ExitCode = StatusSetupError, ExitSetupError
	r.Error = &ErrorInfo{Step: step, Errno: errnoName(err), Message: err.Error()}
	c.Result = r
	return err
}

var (
	hostOnce  sync.Once
	hostCache hostFacts
)

// Preload does now the work [Cmd.Start] does once per process: it probes
// the host (the file system layout a root is built from, namespaces,
// Landlock, seccomp flags) and makes the embedded C stage's memfd. A
// program that starts jails may call it, for example in a goroutine while
// it parses its input, so that its first Start does not pay for it; Start
// waits for a Preload under way. Safe to call more than once and from
// several goroutines.
func Preload() {
	_ = currentHost()
	nsexec.Preload()
}

// currentHost returns the host facts, probed once per process; the copy
// is the caller's to extend.
func currentHost() hostFacts {
	hostOnce.Do(func() {
		hostCache.namespaces = map[string]bool{}
		for ns, file := range map[string]string{"user": "user", "pid": "pid", "mount": "mnt", "net": "net",
			"uts": "uts", "ipc": "ipc", "cgroup": "cgroup", "time": "time"} {
			if _, err := os.Lstat("/proc/self/ns/" + file); err == nil {
				hostCache.namespaces[ns] = true
			}
		}
		hostCache.fs = rootfs.Probe()
		hostCache.seccompWaitKillable = seccomp.ProbeWaitKillable()
		hostCache.landlockABI = landlock.ProbeABI()
	})
	h := hostCache // the maps are shared: the planner only reads them
	h.euid, h.egid = os.Geteuid(), os.Getegid()
	h.userStack = netns.UserStack
	h.overlay, h.private = overlayKernel, privateEntries
	h.rlimitHard = map[string]uint64{} // per call: a process may lower its limits at any time
	for _, d := range DefaultRlimits {
		var lim unix.Rlimit
		if unix.Getrlimit(rlimitResources[d.Name], &lim) == nil {
			h.rlimitHard[d.Name] = lim.Max
		}
	}
	return h
}

// openSources opens the host paths of the plan that validation did not
// (jail's own: /usr, /dev/null, the attach point...), refusing symlinks as
// for the caller's, and returns every source in number order; the child
// inherits them after the cgroup files. The caller closes them.
func (l *launch) openSources() ([]*os.File, error) {
	files := make([]*os.File, 0, len(l.sources))
	var idmap *os.File // the id map of the trees: made once, for the first
	defer func() {
		if idmap != nil {
			idmap.Close()
		}
	}()
	for i := range l.sources {
		src := &l.sources[i]
		if src.file == nil {
			f, err := hostfs.OpenPath(src.path)
			if err != nil {
				return files, err
			}
			if src.tree {
				if idmap == nil {
					if idmap, err = l.treeIDMap(); err != nil {
						f.Close()
						return files, err
					}
				}
				t, err := idmappedTree(f, idmap, l.plan.Mounts[l.treeOp(i)].Attr)
				f.Close()
				if err != nil {
					return files, fmt.Errorf("the overlay's lower layer %s: %w", src.path, err)
				}
				f = t
			}
			src.file, src.ours = f, true
		}
		files = append(files, src.file)
	}
	return files, nil
}

// treeOp returns the index of the mount op whose source is source i (a
// tree's: it has one op).
func (l *launch) treeOp(i int) int {
	for k, m := range l.plan.Mounts {
		if m.Src == uint32(i+1) && m.Kind == nsexec.OpBind {
			return k
		}
	}
	panic("a tree source without its op")
}

// closeSources closes the launch's host source descriptors, if it has
// been planned.
func (c *Cmd) closeSources() {
	if c.l != nil {
		c.l.closeSources()
	}
}

// closeSources closes every host source descriptor; the child has its own.
func (l *launch) closeSources() {
	for _, src := range l.sources {
		if src.ours {
			src.file.Close()
		}
	}
	l.checked.close()
}

// hostStep is one host-side step of Start, with its undo; Start runs them
// in order and, when one fails, undoes it and the ones before in reverse.
// An undo must cope with its do having failed halfway (or not run).
type hostStep struct {
	name string
	do   func() error
	undo func()
}

// stepError names the step a failure belongs to when it is not the host
// step's own name (the child stage's, or "host" for a missing feature).
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// runSteps runs steps; on failure it undoes what was done and records the
// run as failed at the step. A panic in a step (a bug) undoes them too,
// then goes on: whoever recovers it (jail serve does) finds nothing of
// the jail left behind.
func (c *Cmd) runSteps(steps []hostStep) error {
	at := -1
	defer func() {
		if at < 0 {
			return
		}
		p := recover()
		for j := at; j >= 0; j-- {
			if steps[j].undo != nil {
				steps[j].undo()
			}
		}
		if p != nil { // nil: runtime.Goexit, which goes on by itself
			panic(p)
		}
	}()
	for i, s := range steps {
		t0 := time.Now()
		at = i
		testStep(s.name)
		err := s.do()
		at = -1
		c.log().Debug("host step", "step", s.name, "took", time.Since(t0), "err", err)
		if err == nil {
			continue
		}
		for j := i; j >= 0; j-- {
			if steps[j].undo != nil {
				steps[j].undo()
			}
		}
		step := s.name
		if se, ok := err.(*stepError); ok {
			step, err = se.step, se.err
		}
		var ue *cgroup.UnenforcedError
		if errors.As(err, &ue) {
			// A *FeatureError (ErrNotSupported), as Start says, that still
			// wraps cgroup's list.
			err = &FeatureError{Feature: "cgroup", Reason: strings.TrimPrefix(ue.Error(), "cgroup: "), Err: ue}
		}
		return c.fail(step, err)
	}
	return nil
}

// Start validates the Spec, plans the jail, clones the child stage into new
// namespaces, hands it the plan and lets the workload start once the jail
// is built. For a Cmd of a [Session] it joins the session instead. It
// returns a *SpecError (ErrInvalidSpec), a *FeatureError (ErrNotSupported)
// or an *InitError, and then Result says the same.
func (c *Cmd) Start() error {
	if c.prepared && !c.released {
		return c.startPrepared()
	}
	if c.started {
		return errors.New("jail: already started")
	}
	c.started = true
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	if c.session != nil {
		return c.runSteps(c.joinSteps())
	}
	var files []*os.File               // the child's cgroup files and host sources
	defer func() { closeAll(files) }() // the child has its own copies
	defer c.closeSources()
	steps := []hostStep{
		{name: "spec", do: c.plan},
		{name: "open host sources", do: func() error {
			sources, err := c.l.openSources()
			files = append(files, sources...)
			return err
		}},
		{name: "cgroup", do: func() error {
			attach, err := c.makeCgroup(&c.Spec, nil)
			files = append(attach, files...)
			c.l.plan.CgroupFDs = uint32(len(attach))
			return err
		}, undo: c.destroyCgroup},
		{name: "clone", do: func() error { return c.spawn(nsexec.InitArg0, files) }, undo: c.abort},
		// While the child builds its root.
		{name: "cgroup", do: c.completeCgroup}, // its limits and v1 directories
		{name: "network", do: c.setupNetwork, undo: c.closeNetwork},
		{name: "ready", do: c.awaitReady},
		// With the jail's netfilter socket, which READY carries.
		{name: "network", do: c.setupUserNetwork, undo: c.closeNetwork},
		{name: "go", do: c.release},
	}
	if c.prepare {
		steps[len(steps)-1] = hostStep{name: "process template", do: c.sendTemplate}
		if err := c.runSteps(steps); err != nil {
			return err
		}
		c.prepared, c.prepSpec = true, c.Spec
		for i := len(steps) - 1; i >= 0; i-- {
			if steps[i].undo != nil {
				c.prepUndo = append(c.prepUndo, steps[i].undo)
			}
		}
		return nil
	}
	return c.runSteps(steps)
}

// Prepare does Start's work but the release of the workload: the jail is
// built (namespaces, root, cgroup, network, the seccomp program), its
// workload forked and set up (ids, capabilities, Landlock, seccomp), and
// it waits. Start then releases it with the Cmd's Args and the process
// fields of its Spec as they are then (env, cwd, timeout, cpu_time,
// kill_grace, output_limit_bytes), and its memory, swap, pids and cpus
// limits, written into the jail's cgroup when it has one that serves them;
// a change of any other field, or of a limit the cgroup does not serve, is
// refused with a *SpecError naming it, and the jail is discarded. Stdin, Stdout, Stderr, TTY and Capture are taken by Prepare;
// the Spec's timeout runs from Start, and the Result's times too. A
// prepared Cmd that will not be started must be ended with Discard.
// Cancelling the Cmd's context kills a prepared jail as a started one.
//
// It is how a warm pool holds jails ready: the part of a run's cost that
// does not depend on the command is paid before it is known.
func (c *Cmd) Prepare() error {
	if c.session != nil || c.started {
		return errors.New("jail: only a new Cmd of Command can be prepared")
	}
	c.prepare = true
	return c.Start()
}

// Discard ends a prepared Cmd that was not started: its PID 1 is killed
// and what Prepare made (the cgroup, the network) is removed. It does
// nothing to any other Cmd.
func (c *Cmd) Discard() {
	if !c.prepared || c.released {
		return
	}
	c.released = true
	c.undoPrepared()
}

// startPrepared releases a prepared jail's workload: its process plan
// made anew from Args and the Spec's process fields.
func (c *Cmd) startPrepared() error {
	// Besides what a session's command may set, a release may change the
	// memory, swap, pids and CPU limits of a jail that has a cgroup
	// serving them (written into it now), and the output limit.
	base := c.prepSpec
	base.MemoryMaxBytes, base.SwapMaxBytes, base.PidsMax, base.CPUs = c.Spec.MemoryMaxBytes, c.Spec.SwapMaxBytes, c.Spec.PidsMax, c.Spec.CPUs
	spec, err := commandSpec(base, c.Spec)
	was, to := c.prepSpec.limits(), spec.limits()
	was.CPUTime, to.CPUTime = 0, 0
	switch {
	case err != nil:
	case was != to && spec.validateLimits() != nil:
		err = spec.validateLimits()
	case was != to && c.cg == nil:
		err = &SpecError{Field: changedLimit(was, to), Value: "", Err: errors.New("is the prepared jail's: it was made without a cgroup")}
	case was != to:
		if uerr := c.cg.Update(was, to); uerr != nil {
			err = uerr
			if errors.Is(uerr, cgroup.ErrCannotUpdate) {
				err = &SpecError{Field: changedLimit(was, to), Value: "", Err: fmt.Errorf("is the prepared jail's: %w", uerr)}
			}
		}
	}
	switch {
	case err != nil:
	case spec.OutputLimitBytes != c.prepSpec.OutputLimitBytes && c.stdout != nil &&
		!(c.stdout.SetLimit(spec.outputLimit()) && c.stderr.SetLimit(spec.outputLimit())):
		err = &SpecError{Field: "output_limit_bytes", Value: strconv.FormatInt(spec.OutputLimitBytes, 10), Err: errors.New("is the prepared jail's: its output has begun")}
	case spec.CPUTime > 0 && c.cg == nil:
		err = &SpecError{Field: "cpu_time", Value: time.Duration(spec.CPUTime).String(), Err: errors.New("needs a cgroup, and the prepared jail has none")}
	case len(c.Args) == 0 || c.Args[0] == "":
		err = &SpecError{Field: "command", Value: "", Err: errors.New("is empty")}
	}
	if err != nil {
		c.Discard()
		return c.fail("spec", err)
	}
	c.released = true
	c.Spec = spec
	p := &c.l.proc
	p.Argv, p.Env, p.Path = c.Args, spec.env(), spec.searchPath()
	if spec.Cwd != c.prepSpec.Cwd {
		p.Cwd = spec.Cwd
		if p.Cwd == "" {
			p.Cwd = DefaultCwd
		}
	}
	if t := time.Duration(spec.Timeout); t > 0 {
		c.mu.Lock()
		c.timers = append(c.timers, time.AfterFunc(t, func() { c.terminate(StatusTimedOut) }))
		c.mu.Unlock()
	}
	// The step's undo is Prepare's: on an error, or a panic, the jail is
	// ended and what it had on the host removed.
	return c.runSteps([]hostStep{{name: "go", do: c.release, undo: c.undoPrepared}})
}

// changedLimit names the first of the limits a release changes.
func changedLimit(was, to cgroup.Limits) string {
	switch {
	case was.MemoryMaxBytes != to.MemoryMaxBytes:
		return "memory_max_bytes"
	case was.SwapMaxBytes != to.SwapMaxBytes:
		return "swap_max_bytes"
	case was.PidsMax != to.PidsMax:
		return "pids_max"
	}
	return "cpus"
}

// undoPrepared undoes Prepare's steps, the last first.
func (c *Cmd) undoPrepared() {
	for _, u := range c.prepUndo {
		u()
	}
}

// setupUserNetwork finishes a user-mode egress jail's network: its rules,
// loaded through the netfilter socket its child made in its namespace,
// and pasta's interface, which pasta has been making since the clone.
func (c *Cmd) setupUserNetwork() error {
	if c.l.pasta == "" {
		return nil
	}
	sock := c.nfsock
	c.nfsock = nil
	if sock == nil {
		return errors.New("the jail's child sent no netfilter socket")
	}
	hostNets, jails, err := netns.UserGuards()
	if err != nil {
		sock.Close()
		return err
	}
	u, err := netns.PlanUser(netns.UserConfig{Allow: c.l.egress, HostNets: hostNets, Jails: jails, LogDenied: c.Spec.Network.LogDenied})
	if err != nil {
		sock.Close()
		return err
	}
	// After READY: the child waits for GO, so its own error, if any,
	// would come too late to replace these.
	if err := c.userNet.Load(u, sock); err != nil {
		return err
	}
	if err := c.userNet.Ready(); err != nil {
		return err
	}
	// pasta found the jail by its child's pid: the child still runs (its
	// pidfd says so), so that pid was never another process's meanwhile,
	// and the namespaces pasta joined are the jail's.
	if err := c.child.Signal(syscall.Signal(0)); err != nil {
		return fmt.Errorf("the jail's child ended while pasta started: %w", err)
	}
	return nil
}

// setupNetwork builds an egress jail's network: a lease from the pool,
// the veth pair into the child's network namespace, the host's rules.
// When that fails because the child failed meanwhile (its namespace is
// gone), the child's error is the one to report.
func (c *Cmd) setupNetwork() error {
	if c.l.pasta != "" {
		// pasta makes its interface while the child builds its root.
		link, err := netns.StartUser(c.child.Pid(), c.l.pasta)
		c.userNet = link
		return err
	}
	if c.l.egress == nil {
		return nil
	}
	return c.childErrorOr(c.buildNetwork())
}

// childErrorOr returns err, or when err is not nil and the child has
// failed meanwhile (its setup error is waiting on the sync socket, or it
// died), the child's error: a host step that needs the child (its
// namespaces, its identity) fails because of it, and its own error would
// hide the cause.
func (c *Cmd) childErrorOr(err error) error {
	if err == nil {
		return nil
	}
	if cerr := c.awaitReady(); cerr != nil {
		return cerr
	}
	return err
}

func (c *Cmd) buildNetwork() error {
	hostNets, err := netns.HostNets()
	if err != nil {
		return err
	}
	lease, err := netns.Acquire(netns.PoolSize(c.l.pool))
	if err != nil {
		return err
	}
	var mark [4]byte
	if _, err := rand.Read(mark[:]); err != nil {
		lease.Release()
		return err
	}
	e, err := netns.Plan(netns.Config{Pool: c.l.pool, Index: lease.Index, Allow: c.l.egress, HostNets: hostNets,
		Mark: binary.NativeEndian.Uint32(mark[:]) | 1, LogDenied: c.Spec.Network.LogDenied})
	if err != nil {
		lease.Release()
		return err
	}
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", c.child.Pid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		lease.Release()
		return fmt.Errorf("the jail's network namespace: %w", err)
	}
	defer unix.Close(ns)
	link, err := netns.Setup(e, lease, ns)
	if err != nil {
		lease.Release()
		if errors.Is(err, netns.ErrUnroutable) { // this host, not the setup (the server's 422, not 500)
			return &FeatureError{Feature: "egress network", Reason: err.Error()}
		}
		return err
	}
	c.net = link
	c.l.iso.Network.Address = e.JailAddr.String()
	c.log().Debug("network", "host_if", e.HostIf, "address", e.JailAddr)
	return nil
}

// finishNetwork reads an egress jail's counters and removes its rules
// once nothing of its workload is left: PID 1 has reported it exited,
// after killing and reaping every other process of its PID namespace
// (egress needs one), or PID 1 is reaped. At EXITED this runs while PID 1
// exits, before the kernel tears the namespace and its veth down, which
// holds the nftables lock for an RCU grace period (10 ms here).
func (c *Cmd) finishNetwork() {
	var counters func() (netns.Counters, error)
	switch {
	case c.net != nil:
		counters = c.net.Counters
	case c.userNet != nil:
		counters = c.userNet.Counters
	default:
		return
	}
	if n, err := counters(); err == nil {
		c.netStats = &NetworkStats{BytesOut: int64(n.BytesOut), PacketsOut: int64(n.PacketsOut), BytesIn: int64(n.BytesIn),
			PacketsIn: int64(n.PacketsIn), Denied: int64(n.Denied), DeniedDestinations: []DeniedDestination{}}
		for _, d := range n.DeniedTo {
			proto := strconv.Itoa(int(d.Proto))
			switch d.Proto {
			case unix.IPPROTO_TCP:
				proto = "tcp"
			case unix.IPPROTO_UDP:
				proto = "udp"
			case unix.IPPROTO_ICMP:
				proto = "icmp"
			}
			c.netStats.DeniedDestinations = append(c.netStats.DeniedDestinations, DeniedDestination{Dst: d.Dst.String(), Proto: proto, Port: int(d.Port)})
		}
	} else {
		c.log().Warn("network counters", "err", err)
	}
	if c.userNet != nil {
		c.closeNetwork()
		return
	}
	if err := c.net.CloseAfterExit(); err != nil {
		c.log().Warn("network teardown", "err", err)
	}
	c.net = nil
}

// closeNetwork removes an egress jail's network, if it has one.
func (c *Cmd) closeNetwork() {
	if c.nfsock != nil {
		c.nfsock.Close()
		c.nfsock = nil
	}
	if c.userNet != nil {
		_ = c.userNet.Close()
		c.userNet = nil
	}
	if c.net == nil {
		return
	}
	if err := c.net.Close(); err != nil {
		c.log().Warn("network teardown", "err", err)
	}
	c.net = nil
}

// plan validates the Spec and plans the jail and its process.
func (c *Cmd) plan() error {
	h := currentHost()
	resolved, err := resolveAllow(c.ctx, &c.Spec)
	if err != nil {
		return &stepError{"spec", err}
	}
	h.resolved = resolved
	l, err := newLaunch(&c.Spec, c.Args, h) // validates the Spec
	if err != nil {
		step := "spec"
		if errors.Is(err, ErrNotSupported) {
			step = "host"
		}
		return &stepError{step, err}
	}
	c.l = l
	if c.testHook != nil {
		c.testHook(l)
	}
	if c.TTY != nil {
		l.proc.Flags |= nsexec.FlagTTY
	}
	return nil
}

// makeCgroup makes the run's cgroup when the Spec has limits (under
// parent, a session's group, when not nil: then always, for its
// accounting) and returns the cgroup v1 "tasks" files the child joins
// through.
func (c *Cmd) makeCgroup(s *Spec, parent *cgroup.Group) ([]*os.File, error) {
	var g *cgroup.Group
	var err error
	switch lim := s.limits(); {
	case parent != nil:
		var name string
		if name, err = cgroup.ChildName("exec-"); err == nil {
			g, err = parent.Sub(name)
		}
	case lim != (cgroup.Limits{}) && c.cgroupLate():
		// The rest while the child builds its root (completeCgroup).
		if g, err = cgroup.Begin(lim, cgroup.Options{Parent: s.CgroupParent, AllowUnenforced: s.AllowUnenforced}); err != nil {
			return nil, err
		}
		c.cg, c.cgBegun = g, true
		// In the report from now on, should the run fail before
		// Complete; what Complete finds unenforced is added then.
		c.noteCgroup()
		if g.Pending() > 0 {
			c.l.plan.Flags |= nsexec.FlagCgroupLate
		}
		return nil, nil
	case lim != (cgroup.Limits{}):
		g, err = cgroup.New(lim, cgroup.Options{Parent: s.CgroupParent, AllowUnenforced: s.AllowUnenforced})
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.cg = g
	if parent == nil {
		c.noteCgroup()
	}
	return g.AttachFiles()
}

// noteCgroup puts what the run's cgroup enforces in the report: its
// version, and the limits it does not enforce that are not noted yet (a
// begun group is noted at Begin and again after Complete).
func (c *Cmd) noteCgroup() {
	u := c.cg.Unenforced()
	for _, u := range u[min(c.cgNoted, len(u)):] {
		c.l.iso.NotEnforced = append(c.l.iso.NotEnforced, u.String())
	}
	c.cgNoted = max(c.cgNoted, len(u))
	c.l.iso.Cgroup = map[int]string{0: "none", 1: "v1", 2: "v2"}[c.cg.Version()]
}

// cgroupLate says whether the run's cgroup can be made in two parts, the
// second while the child builds its root (cgroup.Begin): 0.15-0.6 ms of
// mkdirs, limit writes and opens off a run's critical path. Only the
// cgroup2 directory, which the clone starts the child in, is made before
// it; the child joins the v1 directories at the end of its mount plan
// (nsexec.FlagCgroupLate), and READY is checked as before. Not for a
// mount plan with a cgroup file system: its root is the cgroup namespace's
// at the mount, which must already be the jail's.
func (c *Cmd) cgroupLate() bool {
	if c.l.plan.Flags&(nsexec.FlagSession|nsexec.FlagJoin) != 0 || c.sessionInit != nil {
		return false
	}
	return !c.l.plan.Root.IsCgroupFS() && !slices.ContainsFunc(c.l.plan.Mounts, nsexec.Mount.IsCgroupFS)
}

// completeCgroup makes the rest of a cgroup that makeCgroup began (the v1
// directories, every limit) while the child builds its root, and sends
// the child the v1 "tasks" files it joins before READY.
func (c *Cmd) completeCgroup() error {
	if !c.cgBegun {
		return nil
	}
	c.cgBegun = false
	if err := c.cg.Complete(); err != nil {
		return err // the undo of the clone ends the child, waiting for its files
	}
	c.noteCgroup()
	if c.l.plan.Flags&nsexec.FlagCgroupLate == 0 {
		return nil // cgroup2 only: the child is in it from its clone
	}
	files, err := c.cg.AttachFiles()
	if err != nil {
		return err
	}
	defer closeAll(files)
	if err := c.child.SendFiles(nsexec.Msg{Type: nsexec.MsgCgroup}, files); err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			// The child is gone: its own report says why.
			return c.childErrorOr(&stepError{"cgroup", c.deathError("before it took its cgroup files", err)})
		}
		// The child is alive and waits for these files: the clone's undo
		// ends it.
		return &stepError{"cgroup", err}
	}
	return nil
}

func (c *Cmd) destroyCgroup() {
	if c.cg != nil {
		_ = c.cg.Destroy()
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// spawn encodes the jail plan and starts the child stage in role arg0
// with files after its plan and sync descriptors.
func (c *Cmd) spawn(arg0 string, files []*os.File) error {
	l := c.l
	cloneflags, jp := l.cloneflags, &l.plan
	var netNS *os.File
	if l.cloneflags&unix.CLONE_NEWNET != 0 && l.iso.Network.Mode == NetworkNone && l.plan.Flags&nsexec.FlagLoopback != 0 {
		if netNS = c.NetnsPool.take(); netNS != nil {
			// Its lo is up already, and the stage could not set it: the
			// namespace is the host user namespace's.
			defer netNS.Close() // the stage holds it from its clone on
			p := l.plan
			p.Flags &^= nsexec.FlagLoopback
			cloneflags &^= unix.CLONE_NEWNET
			jp = &p
			c.log().Debug("network namespace from the pool")
		}
	}
	// Nothing to do between READY and GO (no cgroup to verify, no network
	// to build, no terminal, not a prepared jail, a session or a files
	// helper): the
	// process plan goes with the jail plan and the stage does not wait.
	var proc []byte
	if c.prepare && !c.files && c.TTY == nil && c.sessionInit == nil && l.plan.Flags&nsexec.FlagSession == 0 {
		// A prepared jail forks and sets up its workload now; its release
		// sends only what it runs.
		if jp == &l.plan {
			p := l.plan
			jp = &p
		}
		jp.Flags |= nsexec.FlagPrefork
		c.prefork = true
	}
	if !c.prepare && !c.files && c.cg == nil && c.TTY == nil && c.sessionInit == nil && l.plan.Flags&nsexec.FlagSession == 0 &&
		l.iso.Network.Mode != NetworkEgress {
		if b, err := l.proc.Encode(); err == nil {
			proc = b
			if jp == &l.plan {
				p := l.plan
				jp = &p
			}
			jp.Flags |= nsexec.FlagNoGo
			c.noGo = true
		}
	}
	plan, err := jp.Encode()
	if err != nil {
		return &stepError{"encode plan", err}
	}
	if err := c.ctx.Err(); err != nil {
		return &stepError{"start", err}
	}
	cfg := nsexec.Config{
		Path:    c.HelperPath,
		Arg0:    arg0,
		Plan:    plan,
		Process: proc,
		Files:   files,
		Stdin:   c.Stdin,
		Stdout:  c.Stdout,
		Stderr:  c.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: cloneflags,
		},
		NetNS: netNS,
	}
	cg := c.cg
	if c.sessionInit != nil {
		cg = c.sessionInit
		cfg.Detachable = true
	}
	if cg != nil && cg.FD() >= 0 {
		// clone3(CLONE_INTO_CGROUP): in the group from its first instruction.
		cfg.SysProcAttr.UseCgroupFD, cfg.SysProcAttr.CgroupFD = true, cg.FD()
	}
	if c.Capture {
		c.stdout, c.stderr = capture.New(c.Spec.outputLimit()), capture.New(c.Spec.outputLimit())
		cfg.Stdout, cfg.Stderr = tee(c.stdout, c.Stdout), tee(c.stderr, c.Stderr)
	}
	for _, w := range []*io.Writer{&cfg.Stdout, &cfg.Stderr} {
		if f, ok := (*w).(*os.File); ok && !passThrough(f) {
			*w = writerOnly{f} // os/exec pipes and copies it
		}
	}
	if c.TTY != nil {
		// The stage keeps /dev/null; the workload gets the jail's
		// terminal, which startTerminal relays.
		cfg.Stdin, cfg.Stdout, cfg.Stderr = nil, nil, nil
	} else if f, ok := c.Stdin.(*os.File); ok && !passThrough(f) {
		pr, pw, err := os.Pipe()
		if err != nil {
			return &stepError{"stdin pipe", err}
		}
		defer pr.Close() // the child has its own
		if c.stdinRelay, err = newRelay(f, pw, true); err != nil {
			pw.Close()
			return &stepError{"stdin pipe", err}
		}
		cfg.Stdin = pr
	}
	if l.userns {
		a := cfg.SysProcAttr
		for _, m := range l.uidMap {
			a.UidMappings = append(a.UidMappings, syscall.SysProcIDMap{ContainerID: int(m.InsideID), HostID: int(m.OutsideID), Size: int(m.Count)})
		}
		for _, m := range l.gidMap {
			a.GidMappings = append(a.GidMappings, syscall.SysProcIDMap{ContainerID: int(m.InsideID), HostID: int(m.OutsideID), Size: int(m.Count)})
		}
		a.GidMappingsEnableSetgroups = l.setgroups
		// As root, setuid to the jail's id (a host nobody) before exec;
		// setgroups drops root's supplementary groups.
		a.Credential = &syscall.Credential{Uid: l.proc.UID, Gid: l.proc.GID, NoSetGroups: !l.setgroups}
		a.AmbientCaps = stageCaps
		if l.plan.Flags&nsexec.FlagInitramfs != 0 {
			a.AmbientCaps = append(append([]uintptr{}, stageCaps...), unix.CAP_SYS_CHROOT) // to enter the copy of the initramfs
		}
	}
	child, err := nsexec.Start(cfg)
	if err != nil {
		if c.stdinRelay != nil { // never started: nothing was read
			c.stdinRelay.drop()
			c.stdinRelay = nil
		}
		return cloneError(err)
	}
	c.child = child
	c.log().Debug("child started", "pid", child.Pid())
	c.done = make(chan struct{})
	c.armKillers()
	return nil
}

// awaitReady waits for the child's READY and checks what it joined.
func (c *Cmd) awaitReady() error {
	var m nsexec.Msg
	f, err := c.child.Recv(&m)
	if f != nil {
		if c.l.plan.Flags&nsexec.FlagNetfilter != 0 && c.nfsock == nil {
			c.nfsock = f
		} else {
			f.Close()
		}
	}
	if err != nil || m.Type != nsexec.MsgReady {
		if err == nil && m.Type == nsexec.MsgSetupError {
			return &stepError{m.Step, c.childError(m)}
		}
		if err == nil {
			err = fmt.Errorf("unexpected sync message %d", m.Type)
		}
		return &stepError{"init", c.deathError("before it was ready", err)}
	}
	if c.cg != nil {
		// Fail closed: the child joined its v1 hierarchies itself.
		if err := c.cg.Verify(c.child.Pid()); err != nil {
			return err
		}
	}
	c.holdMountNS()
	return nil
}

// holdMountNS opens the jail's mount namespace, for a one-shot jail (not a
// session's PID 1, which outlives this Cmd). Then PID 1's exit does not
// tear down the jail's mounts (an RCU grace period and the file systems'
// ends: about 0.25 ms of its exit, measured) while Wait waits for it:
// Wait closes the namespace on another goroutine once the jail is gone.
// Nothing can enter it meanwhile: no process is left in it. Best effort:
// without it, PID 1's exit does the teardown.
func (c *Cmd) holdMountNS() {
	if c.sessionInit != nil || c.l.plan.Flags&nsexec.FlagMountNS == 0 {
		return
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", c.child.Pid()))
	if err != nil {
		return
	}
	// With FlagNoGo PID 1 may have ended, been reaped and its pid reused
	// before the open: only a pidfd that still reaches it says the
	// namespace opened is the jail's.
	if c.child.Signal(syscall.Signal(0)) != nil {
		f.Close()
		return
	}
	c.mntns = f
}

// releaseMountNS closes the held mount namespace, which tears down the
// jail's mounts: on a goroutine of its own when async, after a run.
func (c *Cmd) releaseMountNS(async bool) {
	f := c.mntns
	c.mntns = nil
	switch {
	case f == nil:
	case async:
		go f.Close()
	default:
		f.Close()
	}
}

// sendTemplate sends a preforked workload the process it sets itself up
// from: all but what it runs, which its release sends.
func (c *Cmd) sendTemplate() error {
	if !c.prefork {
		return nil
	}
	proc, err := c.l.proc.Encode()
	if err != nil {
		return &stepError{"encode plan", err}
	}
	if err := c.child.SendTemplate(proc); err != nil {
		return &stepError{"process template", c.deathError("before it took its process's template", err)}
	}
	return nil
}

// release sends the process and GO, and starts watching the workload.
func (c *Cmd) release() error {
	if c.prefork {
		proc, err := c.l.proc.Encode()
		if err != nil {
			return &stepError{"encode plan", err}
		}
		c.begin = time.Now()
		if err := c.child.SendProcess(proc); err != nil {
			c.log().Debug("send process", "err", err) // the workload died; its report or EOF follows
		} else {
			c.letGo = true
		}
	} else if c.noGo {
		c.begin = time.Now() // the workload starts at READY: about when it came
		c.letGo = true
	} else {
		proc, err := c.l.proc.Encode()
		if err != nil {
			return &stepError{"encode plan", err}
		}
		if err := c.child.SendProcess(proc); err != nil {
			c.log().Debug("send process", "err", err) // the child died; its report or EOF follows
		}
		c.begin = time.Now()
		if err := c.child.Send(nsexec.Msg{Type: nsexec.MsgGo}); err != nil {
			c.log().Debug("send go", "err", err)
		} else {
			c.letGo = true
		}
	}
	if c.TTY != nil {
		if err := c.awaitTerminal(); err != nil {
			return &stepError{"terminal", err} // the clone step's undo ends the child
		}
	}
	if c.stdinRelay != nil {
		go c.stdinRelay.run() // only now: no input is taken from the caller for a jail that never ran
	}
	c.monitor, c.startedCh = make(chan struct{}), make(chan struct{})
	go c.watch()
	if t := time.Duration(c.Spec.CPUTime); t > 0 && c.cg != nil {
		go c.watchCPUTime(t)
	}
	c.log().Info("jail started", "pid", c.child.Pid(), "namespaces", strings.Join(c.l.iso.Namespaces, ","))
	return nil
}

// awaitTerminal receives the workload's terminal, which the stage makes
// after GO, and starts relaying it.
func (c *Cmd) awaitTerminal() error {
	var m nsexec.Msg
	f, err := c.child.Recv(&m)
	if err == nil && m.Type == nsexec.MsgSetupError {
		return c.childError(m)
	}
	if err != nil || f == nil {
		if f != nil {
			f.Close()
		}
		return c.deathError("before it sent the terminal", errOrEOF(err))
	}
	c.mu.Lock()
	c.pty = f
	c.mu.Unlock()
	if err := c.Resize(*c.TTY); err != nil {
		return err
	}
	return c.startTerminal()
}

// abort ends a child that has not been told to go, and reaps it; Start's
// caller then gets the error (the undo of earlier steps removes the cgroup).
func (c *Cmd) abort() {
	if c.child == nil {
		return
	}
	c.kill(syscall.SIGKILL)
	_ = c.child.Wait()
	c.releaseMountNS(false)
	c.stopTimers()
	c.child.Close()
	c.mu.Lock()
	if c.pty != nil {
		c.pty.Close()
		c.pty = nil
	}
	c.mu.Unlock()
	if c.stdinRelay != nil {
		c.stdinRelay.drop()
		c.stdinRelay = nil
	}
}

// startTerminal relays the workload's terminal: what it prints to Stdout
// (and the capture), and Stdin into it (the relay starts with the
// workload, as for a jail without a terminal).
func (c *Cmd) startTerminal() error {
	out := io.Discard
	switch {
	case c.Capture:
		out = tee(c.stdout, c.Stdout)
	case c.Stdout != nil:
		out = c.Stdout
	}
	c.ptyDone = make(chan struct{})
	go func() {
		defer close(c.ptyDone)
		_, _ = io.Copy(out, c.pty) // until EIO: every descriptor of the terminal's other side is closed
	}()
	if f, ok := c.Stdin.(*os.File); ok {
		r, err := newRelay(f, c.pty, false)
		if err != nil {
			return err
		}
		c.stdinRelay = r
	} else if c.Stdin != nil {
		go func() { _, _ = io.Copy(c.pty, c.Stdin) }() // ends with Stdin, or at the first write after the jail
	}
	return nil
}

// Resize sets the size of the workload's terminal (Cmd.TTY); the kernel
// sends SIGWINCH to its foreground process group. Equivalent to
// ioctl(TIOCSWINSZ) on the terminal.
func (c *Cmd) Resize(ws WindowSize) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pty == nil {
		return errors.New("jail: no terminal to resize (Cmd.TTY is nil, or the jail has not started or has ended)")
	}
	return unix.IoctlSetWinsize(int(c.pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
}

func tee(buf *capture.Buffer, w io.Writer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(buf, w)
}

// cloneError explains the usual reasons clone(2) of a user namespace fails.
func cloneError(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) {
		return &InitError{Step: "clone", Detail: "creating namespaces; `jail check` says what this host allows", Err: err}
	}
	return &InitError{Step: "clone", Err: err}
}

// Step names of nsexec.c's run_init that childError explains.
const (
	stepOpenSources = "open mount sources"
	stepBuildRoot   = "build root"
)

// childError rebuilds a child stage failure as an *InitError.
func (c *Cmd) childError(m nsexec.Msg) *InitError {
	e := &InitError{Step: m.Step, Err: syscall.Errno(m.Errno)}
	e.Detail = c.l.failedItem(m.Step, m.Index)
	if errno := syscall.Errno(m.Errno); (m.Step == stepOpenSources || m.Step == stepBuildRoot) && (errno == unix.ELOOP || errno == unix.ESTALE) {
		// The child found another file at the path jail opened and checked
		// (see nsexec/mount.c open_host): someone swapped it in between.
		e.Detail = strings.TrimPrefix(e.Detail+"; ", "; ") + "the source changed after jail checked it"
	}
	return e
}

// deathError explains a child stage that ended without a report.
func (c *Cmd) deathError(when string, err error) error {
	state := "exited"
	if es := c.child.ExitState(); es != nil {
		state = es.String()
	}
	return fmt.Errorf("jail init ended %s (%s): %w", when, state, err)
}

// killedBy says the reaped stage ended by signal sig.
func (c *Cmd) killedBy(sig syscall.Signal) bool {
	es := c.child.ExitState()
	return es != nil && es.Status.Signaled() && es.Status.Signal() == sig
}

// watch reads the child's reports until the child is gone.
func (c *Cmd) watch() {
	defer close(c.monitor)
	defer c.endStragglers()
	for {
		var m nsexec.Msg
		f, err := c.child.Recv(&m)
		if f != nil {
			f.Close() // only set-up sends a descriptor (the terminal)
		}
		if err != nil {
			return
		}
		c.mu.Lock()
		switch m.Type {
		case nsexec.MsgExited:
			c.exited, c.end = &m, time.Now()
			c.mu.Unlock()
			c.finishNetwork()
			c.mu.Lock()
			c.log().Debug("exited", "after_go", c.end.Sub(c.begin))
		case nsexec.MsgExecError:
			c.execErr, c.end = &m, time.Now()
		case nsexec.MsgSeccomp:
			// PID 1 sends the first MaxSeccompEvents, then only what ends
			// the workload; keep no more than that, whatever it sends.
			if len(c.seccomp) < 2*nsexec.MaxSeccompEvents {
				c.seccomp = append(c.seccomp, m)
			}
		case nsexec.MsgSetupError: // PID 1 failed after the workload started
			c.lateErr = &m
		case nsexec.MsgStarted:
			if c.workloadStarted {
				break
			}
			c.workloadStarted = true
			pid := int(m.Status) // in the stage's PID namespace
			if c.l.cloneflags&cloneNewPID == 0 {
				c.group = pid
			}
			c.workloadPID = pid // a session's command's: WorkloadPID translates it, if asked
			close(c.startedCh)
		}
		c.mu.Unlock()
	}
}

// testStepPanic, when a test sets it, names a host step (or "report",
// Wait's) that panics as it begins: the tests of what a bug leaves behind.
var testStepPanic atomic.Pointer[string]

func testStep(name string) {
	if p := testStepPanic.Load(); p != nil && *p == name {
		panic("test: a panic in step " + name)
	}
}

// WorkloadPID waits until the workload has started (its execve
// succeeded) or the jail has ended without it, and returns the workload's
// pid as the jail's processes see it: in the jail's PID namespace, for a
// session's command the session's. It is 0 when the workload never
// started, and when a session's command ended and was reaped before its
// pid was first asked for (call it right after Start). Before Start it is
// 0 at once.
func (c *Cmd) WorkloadPID() int {
	if c.monitor == nil {
		return 0
	}
	select {
	case <-c.startedCh:
	case <-c.monitor:
	}
	c.mu.Lock()
	pid := c.workloadPID
	c.mu.Unlock()
	if pid > 0 && c.l.plan.Flags&nsexec.FlagJoin != 0 {
		// A session's command: the joining stage is in our PID
		// namespace, its workload in the session's. Read here, when
		// asked, not by every command's monitor.
		c.pidOnce.Do(func() { c.joinedPID = innermostPID(pid, c.child.Pid()) })
		return c.joinedPID
	}
	return pid
}

// innermostPID is the pid in its own PID namespace of the process pid (in
// ours), when it is still parent's child: read from its NSpid after the
// fact, it may be gone, and its pid another's.
func innermostPID(pid, parent int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	var ppid, inner int
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		} else if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				inner, _ = strconv.Atoi(f[len(f)-1])
			}
		}
	}
	if ppid != parent {
		return 0
	}
	return inner
}

// endStragglers ends what is left of a jail without a PID namespace once
// its PID 1 is gone (the sync socket closed): its processes would run on,
// holding the pipes of the output os/exec copies, and Wait, which waits
// for that output, would wait for them. Only its cgroup can name them
// safely: the workload's process group may be empty by now and its id
// another's. With a PID namespace the kernel has killed them already.
func (c *Cmd) endStragglers() {
	if c.l.cloneflags&cloneNewPID != 0 {
		return
	}
	if c.cg != nil {
		t0 := time.Now()
		if err := c.cg.Kill(); err != nil {
			c.log().Warn("cgroup kill", "err", err)
		}
		c.log().Debug("stragglers killed", "took", time.Since(t0))
	}
}

// cpuPoll is how often the CPU time limit is checked; a jail overshoots
// it by at most its number of running threads times this.
const cpuPoll = 10 * time.Millisecond

// watchCPUTime kills the jail once its cgroup has used limit of CPU time.
func (c *Cmd) watchCPUTime(limit time.Duration) {
	t := time.NewTicker(cpuPoll)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.monitor: // PID 1 is gone, and nothing more can run up CPU time
			return
		case <-t.C:
			used, err := c.cg.CPUUsage()
			if err != nil || used < limit {
				continue
			}
			c.terminate(StatusCPUTimeExceeded)
			return
		}
	}
}

// armKillers starts the timeout and the context watch.
func (c *Cmd) armKillers() {
	// A session's Spec.Timeout is each of its commands', not its
	// creation's: armed here, it killed a session whose creation took
	// longer (a loaded machine, -race), after Create had returned.
	// A prepared jail's runs from its release (startPrepared).
	if t := time.Duration(c.Spec.Timeout); t > 0 && c.l.plan.Flags&nsexec.FlagSession == 0 && !c.prepare {
		c.timers = append(c.timers, time.AfterFunc(t, func() { c.terminate(StatusTimedOut) }))
	}
	if c.ctx.Done() != nil {
		go func() {
			select {
			case <-c.ctx.Done():
				reason := StatusCanceled
				if errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
					reason = StatusTimedOut
				}
				c.terminate(reason)
			case <-c.done:
			}
		}()
	}
}

// terminate ends the jail for reason: SIGTERM to every process first when
// the Spec has a kill grace, then SIGKILL to PID 1, which takes the whole
// PID namespace with it.
func (c *Cmd) terminate(reason Status) {
	c.mu.Lock()
	if c.killReason != "" || c.exited != nil {
		c.mu.Unlock()
		return
	}
	c.killReason = reason
	grace := time.Duration(c.Spec.KillGrace)
	if grace > 0 {
		c.timers = append(c.timers, time.AfterFunc(grace, func() { c.kill(syscall.SIGKILL) }))
	}
	c.mu.Unlock()
	c.log().Info("killing jail", "reason", string(reason))
	if grace > 0 {
		c.kill(syscall.SIGTERM)
		return
	}
	c.kill(syscall.SIGKILL)
}

// kill signals the jail's PID 1, whose death ends a PID namespace. Without
// one, the workload's process group is signaled first: PID 1's death alone
// would leave it running (processes that left the group with setsid are
// out of reach until cgroups, issue #3).
//
// A session's command has no PID namespace of its own: its helper is not
// an init whose death takes the command's processes along, and a SIGKILL
// to it would leave them running, and its children to the host's init.
// So the helper is asked to SIGKILL its process's process group
// (nsexec.KillJoinedSignal), reaps it and reports its end as for any
// exit; what left the group (setsid) is in the command's cgroup, which
// the end of the command kills and removes. A leader that cannot be
// reaped (a process of its cgroup traces it and does not wait for it) is
// reaped by the helper once it has killed the tracer (nsexec's
// kill_tracers, 100 ms after the kill); should no report come within
// joinedKillGrace all the same, the cgroup is killed, the helper with it,
// and the report says killed.
func (c *Cmd) kill(sig syscall.Signal) {
	c.mu.Lock()
	group := c.group
	c.mu.Unlock()
	if c.session != nil && sig == syscall.SIGKILL {
		if c.child != nil {
			_ = c.child.Signal(nsexec.KillJoinedSignal)
		}
		if cg := c.cg; cg != nil {
			c.mu.Lock()
			c.timers = append(c.timers, time.AfterFunc(joinedKillGrace, func() {
				c.mu.Lock()
				reported := c.exited != nil
				c.killSent = c.killSent || !reported
				c.mu.Unlock()
				if !reported {
					c.log().Warn("the command's end was not reported after its kill: killing its cgroup")
					_ = cg.Kill()
				}
			}))
			c.mu.Unlock()
		}
		return
	}
	if group > 0 {
		_ = unix.Kill(-group, sig)
	}
	if c.child != nil {
		_ = c.child.Signal(sig) // pidfd-backed: never a recycled pid
	}
}

// joinedKillGrace is how long a session command's helper has to report
// the end of a command it was told to kill before the command's cgroup is
// killed with the helper in it. The helper reaps an untraced command in
// microseconds and a traced one about 100 ms after the kill (its tracers
// die first); the rest is room for a loaded machine, since a cgroup kill
// ends the helper too and leaves the report without the command's own
// status and resident set.
const joinedKillGrace = time.Second

func (c *Cmd) stopTimers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		t.Stop()
	}
	if c.done != nil {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
}

// teardown releases what the ended jail held on the host but its cgroup
// and network, which the report reads first: the mount namespace, the
// stage's and the control socket's descriptors, the timers, the stdin
// relay and the terminal. After a panic (panicked) it waits for nothing
// (not the namespace's release, not the terminal's output), and it
// leaves the terminal to the end of the process if the panic left c.mu
// held.
func (c *Cmd) teardown(panicked bool) {
	c.releaseMountNS(!panicked)
	c.child.Close()
	if c.ctl != nil {
		c.ctl.Close() // the session may count its idle time from now
	}
	c.stopTimers()
	if c.ptyDone != nil && !panicked {
		<-c.ptyDone // the jail is gone: the terminal's output ends
	}
	if c.stdinRelay != nil {
		c.stdinRelay.stop()
	}
	if panicked {
		if !c.mu.TryLock() {
			return
		}
	} else {
		c.mu.Lock()
	}
	if c.pty != nil {
		c.pty.Close()
		c.pty = nil
	}
	c.mu.Unlock()
}

// Signal sends sig to every process in the jail (to the workload's process
// group when the jail has no PID namespace).
func (c *Cmd) Signal(sig os.Signal) error {
	if c.child == nil {
		return errors.New("jail: not started")
	}
	if sig == syscall.SIGKILL && c.session != nil {
		// A session's command: its helper kills it and reports (kill).
		c.kill(syscall.SIGKILL)
		return nil
	}
	if sig == syscall.SIGKILL {
		// SIGKILL ends PID 1 before it can report; Wait reports it.
		c.mu.Lock()
		c.killSent = true
		c.mu.Unlock()
	}
	return c.child.Signal(sig)
}

// Wait waits for the jail to end and sets Result. It returns nil when the
// workload ran, whatever its status, and an *InitError when it could not be
// executed.
func (c *Cmd) Wait() error {
	if c.child == nil || c.monitor == nil {
		return errors.New("jail: not started")
	}
	if c.cg != nil {
		c.cg.OpenStats() // while the workload runs
	}
	waitErr := c.child.Wait()
	<-c.monitor
	c.log().Debug("stage reaped", "after_go", time.Since(c.begin))
	// The jail is gone; what it had on the host goes too, even if the
	// report below panics (a bug; jail serve recovers it).
	reported := false
	defer func() {
		if !reported {
			p := recover()
			c.teardown(true)
			c.destroyCgroup()
			c.closeNetwork()
			if p != nil {
				panic(p)
			}
		}
	}()
	testStep("report")
	c.teardown(false)

	r := c.newResult()
	c.Result = r
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.end
	if end.IsZero() {
		end = time.Now()
	}
	r.WallTimeMS = end.Sub(c.begin).Milliseconds()
	if es := c.child.ExitState(); es != nil {
		r.CPUUserMS = time.Duration(es.Rusage.Utime.Nano()).Milliseconds()
		r.CPUSystemMS = time.Duration(es.Rusage.Stime.Nano()).Milliseconds()
	}
	if c.exited != nil && c.exited.Index > 0 {
		// Not the stage's own rusage: see nsexec.Msg.Index.
		r.MaxRSSBytes = int64(c.exited.Index) * 1024
	}
	c.finishNetwork() // if EXITED did not come: PID 1 is reaped now
	r.Network = c.netStats
	oomKilled := false
	if c.cg != nil {
		t0 := time.Now()
		defer func() { c.log().Debug("cgroup read and removed", "took", time.Since(t0)) }()
		if st, err := c.cg.Stats(); err == nil {
			if st.CPU != nil {
				r.CPUUserMS, r.CPUSystemMS = st.CPU.User.Milliseconds(), st.CPU.System.Milliseconds()
			}
			if st.Memory != nil {
				r.MemoryPeakBytes, r.OOMKills = st.Memory.PeakBytes, st.Memory.OOMKills
				oomKilled = st.Memory.OOMKills > 0
				if oomKilled || st.Memory.MaxHits > 0 {
					r.LimitsHit = append(r.LimitsHit, "memory")
				}
			}
			if st.Pids != nil {
				r.PidsPeak = st.Pids.Peak
				if st.Pids.MaxHits > 0 {
					r.LimitsHit = append(r.LimitsHit, "pids")
				}
			}
		} else {
			c.log().Warn("cgroup stats", "err", err)
		}
		if err := c.cg.Destroy(); err != nil {
			c.log().Warn("cgroup destroy", "err", err)
		}
	}
	switch c.killReason {
	case StatusTimedOut:
		r.LimitsHit = append([]string{"timeout"}, r.LimitsHit...)
	case StatusCPUTimeExceeded:
		r.LimitsHit = append([]string{"cpu_time"}, r.LimitsHit...)
	}
	if c.Capture {
		r.Stdout, r.StdoutEncoding = c.stdout.Encoded()
		r.Stderr, r.StderrEncoding = c.stderr.Encoded()
		r.StdoutBytes, r.StdoutTruncated = c.stdout.Total(), c.stdout.Truncated()
		r.StderrBytes, r.StderrTruncated = c.stderr.Total(), c.stderr.Truncated()
	}
	seccompKilled := false
	for _, m := range c.seccomp {
		d := SeccompDenial{Syscall: seccomp.SyscallName(uint32(m.Index), m.Status), Action: "kill", PID: int(m.PID),
			Workload: m.Aux&nsexec.SeccompWorkload != 0, Interrupted: m.Aux&nsexec.SeccompInterrupted != 0}
		if d.Interrupted {
			d.Syscall = "unknown"
		}
		if m.Aux&nsexec.SeccompKilled == 0 {
			d.Action = seccomp.ErrnoName(syscall.Errno(m.Errno))
		}
		seccompKilled = seccompKilled || (d.Workload || d.Interrupted) && d.Action == "kill"
		r.SeccompDenials = append(r.SeccompDenials, d)
	}
	r.SeccompDenialsTotal = len(r.SeccompDenials)
	if c.exited != nil && int(c.exited.Aux) > r.SeccompDenialsTotal {
		r.SeccompDenialsTotal = int(c.exited.Aux)
	}
	o := outcome{KillReason: c.killReason, SeccompKilled: seccompKilled, OOMKilled: oomKilled, KillSent: c.killSent,
		Command: c.Args[0]}
	if c.killReason == StatusCanceled {
		o.Cause = context.Cause(c.ctx)
	}
	if c.exited != nil {
		ws := syscall.WaitStatus(c.exited.Status)
		o.Exited = &ws
	}
	if c.execErr != nil {
		o.ExecFailed, o.ExecStep, o.ExecErrno = true, c.execErr.Step, syscall.Errno(c.execErr.Errno)
	}
	switch {
	case c.lateErr != nil && c.workloadStarted:
		o.Lost = fmt.Sprintf("jail init failed at %s after the workload started: %v", c.lateErr.Step, syscall.Errno(c.lateErr.Errno))
	case c.lateErr != nil: // after GO, before the fork or the execve: the workload never ran
		o.Failed = c.childError(*c.lateErr)
	case c.workloadStarted:
		o.Lost = c.deathError("after the workload started", errOrEOF(waitErr)).Error()
	case c.letGo && c.execErr == nil && c.session == nil && c.killedBy(syscall.SIGKILL):
		// PID 1 was SIGKILLed after the workload was let go, before its
		// word of the workload's start came. The workload may already run,
		// and it can take PID 1 down at once (it shares its ids: an
		// RLIMIT_CPU of 0 by prlimit64, where the policy allows it). The
		// caller's kill, a timeout and an OOM kill are judged before this;
		// a crash of PID 1's own is another signal. Either way the kernel
		// killed the workload with it: not a setup error. (A session
		// command's helper is outside the workload's reach.)
		o.Lost = c.deathError("after the workload was let go, before it confirmed the workload's start", errOrEOF(waitErr)).Error()
	default:
		o.Died = c.deathError("before the workload's report", errOrEOF(waitErr))
	}
	v := judge(o)
	reported = true
	r.Status, r.ExitCode, r.Signal, r.SupervisorLost, r.Error = v.Status, v.ExitCode, v.Signal, v.SupervisorLost, v.Error
	if v.Err != nil {
		return v.Err
	}
	c.log().Info("jail ended", "status", string(r.Status), "exit_code", r.ExitCode)
	return nil
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}
