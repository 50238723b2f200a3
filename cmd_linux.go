package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/landlock"
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
	for i := range l.sources {
		src := &l.sources[i]
		if src.file == nil {
			f, err := hostfs.OpenPath(src.path)
			if err != nil {
				return files, err
			}
			src.file, src.ours = f, true
		}
		files = append(files, src.file)
	}
	return files, nil
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

// Start validates the Spec, plans the jail, clones the child stage into new
// namespaces, hands it the plan and lets the workload start once the jail
// is built. It returns a *SpecError (ErrInvalidSpec), a *FeatureError
// (ErrNotSupported) or an *InitError, and then Result says the same.
func (c *Cmd) Start() (retErr error) {
	if c.started {
		return errors.New("jail: already started")
	}
	c.started = true
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	l, err := newLaunch(&c.Spec, c.Args, currentHost()) // validates the Spec
	if err != nil {
		step := "spec"
		if errors.Is(err, ErrNotSupported) {
			step = "host"
		}
		return c.fail(step, err)
	}
	c.l = l
	if c.testHook != nil {
		c.testHook(l)
	}
	if c.TTY != nil {
		l.plan.Flags |= nsexec.FlagTTY
	}
	defer l.closeSources() // the child inherits its own copies
	sources, err := l.openSources()
	if err != nil {
		return c.fail("open host sources", err)
	}
	var attach []*os.File // cgroup v1 tasks files the child writes "0" to
	if lim := c.Spec.limits(); lim != (cgroup.Limits{}) {
		g, err := cgroup.New(lim, cgroup.Options{Parent: c.Spec.CgroupParent, AllowUnenforced: c.Spec.AllowUnenforced})
		if err != nil {
			return c.fail("cgroup", err)
		}
		c.cg = g
		defer func() {
			if retErr != nil {
				_ = g.Destroy()
			}
		}()
		for _, u := range g.Unenforced() {
			l.iso.NotEnforced = append(l.iso.NotEnforced, u.String())
		}
		l.iso.Cgroup = map[int]string{0: "none", 1: "v1", 2: "v2"}[g.Version()]
		if attach, err = g.AttachFiles(); err != nil {
			return c.fail("cgroup", err)
		}
		defer func() {
			for _, f := range attach {
				f.Close()
			}
		}()
		l.plan.CgroupFDs = uint32(len(attach))
	}
	plan, err := l.plan.Encode()
	if err != nil {
		return c.fail("encode plan", err)
	}
	if err := c.ctx.Err(); err != nil {
		return c.fail("start", err)
	}

	helper := c.HelperPath
	if helper == "" {
		helper = "/proc/self/exe"
	}
	planR, planW, err := os.Pipe()
	if err != nil {
		return c.fail("plan pipe", err)
	}
	defer planR.Close()
	defer planW.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return c.fail("sync socket", os.NewSyscallError("socketpair", err))
	}
	c.sync = os.NewFile(uintptr(fds[0]), "jail-sync")
	childSync := os.NewFile(uintptr(fds[1]), "jail-sync-child")
	defer childSync.Close()
	defer func() {
		if retErr != nil {
			c.sync.Close()
		}
	}()

	ec := &exec.Cmd{
		Path:       helper,
		Args:       []string{nsexec.InitArg0},
		Env:        []string{},                                                          // the child builds the workload's environment from the plan
		ExtraFiles: append(append([]*os.File{planR, childSync}, attach...), sources...), // fds 3, 4, nsexec.CgroupFD..., nsexec.SourceFD...
		Stdin:      c.Stdin,
		Stdout:     c.Stdout,
		Stderr:     c.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: l.cloneflags,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if c.cg != nil && c.cg.FD() >= 0 {
		// clone3(CLONE_INTO_CGROUP): in the group from its first instruction.
		ec.SysProcAttr.UseCgroupFD, ec.SysProcAttr.CgroupFD = true, c.cg.FD()
	}
	if c.Capture {
		c.stdout, c.stderr = capture.New(c.Spec.outputLimit()), capture.New(c.Spec.outputLimit())
		ec.Stdout, ec.Stderr = tee(c.stdout, c.Stdout), tee(c.stderr, c.Stderr)
	}
	for _, w := range []*io.Writer{&ec.Stdout, &ec.Stderr} {
		if f, ok := (*w).(*os.File); ok && !passThrough(f) {
			*w = writerOnly{f} // os/exec pipes and copies it
		}
	}
	if c.TTY != nil {
		// PID 1 keeps /dev/null; the workload gets the jail's terminal,
		// which startTerminal relays.
		ec.Stdin, ec.Stdout, ec.Stderr = nil, nil, nil
	} else if f, ok := c.Stdin.(*os.File); ok && !passThrough(f) {
		pr, pw, err := os.Pipe()
		if err != nil {
			return c.fail("stdin pipe", err)
		}
		defer pr.Close() // the child has its own
		if c.stdinRelay, err = newRelay(f, pw, true); err != nil {
			pw.Close()
			return c.fail("stdin pipe", err)
		}
		defer func() {
			if retErr != nil { // never started: nothing was read
				c.stdinRelay.stopR.Close()
				c.stdinRelay.stopW.Close()
				pw.Close()
				c.stdinRelay = nil
			}
		}()
		ec.Stdin = pr
	}
	if l.userns {
		a := ec.SysProcAttr
		for _, m := range l.uidMap {
			a.UidMappings = append(a.UidMappings, syscall.SysProcIDMap{ContainerID: int(m.InsideID), HostID: int(m.OutsideID), Size: int(m.Count)})
		}
		for _, m := range l.gidMap {
			a.GidMappings = append(a.GidMappings, syscall.SysProcIDMap{ContainerID: int(m.InsideID), HostID: int(m.OutsideID), Size: int(m.Count)})
		}
		a.GidMappingsEnableSetgroups = l.setgroups
		// As root, setuid to the jail's id (a host nobody) before exec;
		// setgroups drops root's supplementary groups.
		a.Credential = &syscall.Credential{Uid: l.plan.UID, Gid: l.plan.GID, NoSetGroups: !l.setgroups}
		a.AmbientCaps = stageCaps
		if l.plan.Flags&nsexec.FlagInitramfs != 0 {
			a.AmbientCaps = append(append([]uintptr{}, stageCaps...), unix.CAP_SYS_CHROOT) // to enter the copy of the initramfs
		}
	}
	c.ec = ec

	// Pdeathsig fires when the thread that forked the child exits
	// (go.dev/issue/27505), so the child is started and reaped on one
	// locked thread.
	started := make(chan error, 1)
	c.waitc = make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := ec.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitc <- ec.Wait()
	}()
	if err := <-started; err != nil {
		return c.fail("clone", cloneError(err))
	}
	c.log().Debug("child started", "pid", ec.Process.Pid)
	c.done = make(chan struct{})
	c.armKillers()
	planR.Close()
	childSync.Close()

	if _, err := planW.Write(plan); err != nil {
		c.log().Debug("plan write", "err", err) // the child died; its report or EOF follows
	}
	planW.Close()

	var m nsexec.Msg
	err = c.recv1(&m)
	if err == nil && m.Type == nsexec.MsgPTY { // the terminal comes before READY
		err = c.recv1(&m)
	}
	if err != nil || m.Type != nsexec.MsgReady {
		c.abort()
		if err == nil && m.Type == nsexec.MsgSetupError {
			err = c.childError(m)
			return c.fail(m.Step, err)
		}
		if err == nil {
			err = fmt.Errorf("unexpected sync message %d", m.Type)
		}
		return c.fail("init", c.deathError("before it was ready", err))
	}
	if c.cg != nil {
		// Fail closed: the child joined its v1 hierarchies itself.
		if err := c.cg.Verify(ec.Process.Pid); err != nil {
			c.abort()
			return c.fail("cgroup", err)
		}
	}
	if c.TTY != nil {
		if c.pty == nil {
			c.abort()
			return c.fail("terminal", c.deathError("before it sent the terminal", io.EOF))
		}
		if err := c.Resize(*c.TTY); err != nil {
			c.abort()
			return c.fail("terminal", err)
		}
		if err := c.startTerminal(); err != nil {
			c.abort()
			return c.fail("terminal", err)
		}
	}
	c.begin = time.Now()
	if err := c.send(nsexec.Msg{Type: nsexec.MsgGo}); err != nil {
		c.log().Debug("send go", "err", err)
	}
	if c.stdinRelay != nil {
		go c.stdinRelay.run() // only now: no input is taken from the caller for a jail that never ran
	}
	c.monitor = make(chan struct{})
	go c.watch()
	if t := time.Duration(c.Spec.CPUTime); t > 0 {
		go c.watchCPUTime(t)
	}
	c.log().Info("jail started", "pid", ec.Process.Pid, "namespaces", strings.Join(l.iso.Namespaces, ","))
	return nil
}

// abort ends a child that has not been told to go, and reaps it; Start's
// caller then gets the error (the deferred cleanups remove the cgroup).
func (c *Cmd) abort() {
	c.kill(syscall.SIGKILL)
	<-c.waitc
	c.stopTimers()
	c.sync.Close()
	c.mu.Lock()
	if c.pty != nil {
		c.pty.Close()
		c.pty = nil
	}
	c.mu.Unlock()
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

// recv reads one sync message and the descriptor attached to it, if any
// (MsgPTY carries one); the caller owns the file.
func (c *Cmd) recv(m *nsexec.Msg) (*os.File, error) {
	rc, err := c.sync.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := make([]byte, nsexec.MsgSize)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b, oob, unix.MSG_CMSG_CLOEXEC)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	}); err != nil {
		return nil, err
	}
	var file *os.File
	if oobn > 0 {
		if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cmsgs {
				fds, _ := unix.ParseUnixRights(&cm)
				for _, fd := range fds {
					if file == nil {
						file = os.NewFile(uintptr(fd), "jail-fd")
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	switch {
	case rerr != nil:
		err = os.NewSyscallError("recvmsg", rerr)
	case n == 0:
		err = io.EOF
	default:
		err = m.UnmarshalBinary(b[:n])
	}
	if err != nil || m.Type != nsexec.MsgPTY {
		if file != nil {
			file.Close() // only MsgPTY carries a descriptor
		}
		return nil, err
	}
	return file, nil
}

// recv1 receives a message during setup: a terminal's master is kept as
// c.pty.
func (c *Cmd) recv1(m *nsexec.Msg) error {
	f, err := c.recv(m)
	if f != nil {
		if c.pty != nil || c.TTY == nil {
			f.Close()
			return errors.New("jail init sent a terminal twice, or unasked")
		}
		c.pty = f
	}
	return err
}

func (c *Cmd) send(m nsexec.Msg) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = c.sync.Write(b)
	return err
}

// Step names of nsexec.c's run_child that childError explains.
const (
	stepOpenSources = "open mount sources"
	stepBuildRoot   = "build root"
)

// childError rebuilds a child stage failure as an *InitError.
func (c *Cmd) childError(m nsexec.Msg) error {
	e := &InitError{Step: m.Step, Err: syscall.Errno(m.Errno)}
	if m.Index >= 0 && int(m.Index) < len(c.l.opNames) {
		e.Detail = c.l.opNames[m.Index]
	}
	if errno := syscall.Errno(m.Errno); (m.Step == stepOpenSources || m.Step == stepBuildRoot) && (errno == unix.ELOOP || errno == unix.ESTALE) {
		// The child found another file at the path jail opened and checked
		// (see nsexec.c open_host): someone swapped it in between.
		e.Detail = strings.TrimPrefix(e.Detail+"; ", "; ") + "the source changed after jail checked it"
	}
	return e
}

// deathError explains a child stage that ended without a report.
func (c *Cmd) deathError(when string, err error) error {
	state := "exited"
	if c.ec.ProcessState != nil {
		state = c.ec.ProcessState.String()
	}
	return fmt.Errorf("jail init ended %s (%s): %w", when, state, err)
}

// watch reads the child's reports until the child is gone.
func (c *Cmd) watch() {
	defer close(c.monitor)
	defer c.endStragglers()
	for {
		var m nsexec.Msg
		f, err := c.recv(&m)
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
			c.workloadStarted = true
			if c.l.cloneflags&cloneNewPID == 0 {
				c.group = int(m.Status)
			}
		}
		c.mu.Unlock()
	}
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
		if err := c.cg.Kill(); err != nil {
			c.log().Warn("cgroup kill", "err", err)
		}
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
	if t := time.Duration(c.Spec.Timeout); t > 0 {
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
func (c *Cmd) kill(sig syscall.Signal) {
	c.mu.Lock()
	group := c.group
	c.mu.Unlock()
	if group > 0 {
		_ = unix.Kill(-group, sig)
	}
	if c.ec != nil && c.ec.Process != nil {
		_ = c.ec.Process.Signal(sig) // pidfd-backed: never a recycled pid
	}
}

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

// Signal sends sig to every process in the jail (to the workload's process
// group when the jail has no PID namespace).
func (c *Cmd) Signal(sig os.Signal) error {
	if c.ec == nil || c.ec.Process == nil {
		return errors.New("jail: not started")
	}
	if sig == syscall.SIGKILL {
		// SIGKILL ends PID 1 before it can report; Wait reports it.
		c.mu.Lock()
		c.killSent = true
		c.mu.Unlock()
	}
	return c.ec.Process.Signal(sig)
}

// Wait waits for the jail to end and sets Result. It returns nil when the
// workload ran, whatever its status, and an *InitError when it could not be
// executed.
func (c *Cmd) Wait() error {
	if c.ec == nil || c.monitor == nil {
		return errors.New("jail: not started")
	}
	waitErr := <-c.waitc
	<-c.monitor
	c.sync.Close()
	c.stopTimers()
	if c.ptyDone != nil {
		<-c.ptyDone // the jail is gone: the terminal's output ends
	}
	if c.stdinRelay != nil {
		c.stdinRelay.stop()
	}
	c.mu.Lock()
	if c.pty != nil {
		c.pty.Close()
		c.pty = nil
	}
	c.mu.Unlock()

	r := c.newResult()
	c.Result = r
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.end
	if end.IsZero() {
		end = time.Now()
	}
	r.WallTimeMS = end.Sub(c.begin).Milliseconds()
	if ps := c.ec.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.CPUUserMS = time.Duration(ru.Utime.Nano()).Milliseconds()
			r.CPUSystemMS = time.Duration(ru.Stime.Nano()).Milliseconds()
			r.MaxRSSBytes = ru.Maxrss * 1024
		}
	}
	oomKilled := false
	if c.cg != nil {
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
		r.Stdout, r.StdoutEncoding = encodeOutput(c.stdout)
		r.Stderr, r.StderrEncoding = encodeOutput(c.stderr)
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
	switch {
	// The kill was decided before the workload's end was known: PID 1 may
	// still report the SIGKILL that the kill caused.
	case c.killReason != "":
		r.Status = c.killReason
		r.ExitCode = ExitTimedOut
		if c.killReason == StatusCanceled {
			r.ExitCode = ExitSetupError
			r.Error = &ErrorInfo{Step: "run", Message: "canceled: " + fmt.Sprint(context.Cause(c.ctx))}
		}
	case c.exited != nil:
		ws := syscall.WaitStatus(c.exited.Status)
		if ws.Signaled() {
			r.Status, r.ExitCode, r.Signal = StatusSignaled, 128+int(ws.Signal()), signalName(ws.Signal())
			switch {
			case seccompKilled && ws.Signal() == syscall.SIGKILL:
				r.Status = StatusSeccompKilled
			case oomKilled && ws.Signal() == syscall.SIGKILL:
				r.Status = StatusOOMKilled
			}
		} else {
			r.Status, r.ExitCode = StatusExited, ws.ExitStatus()
		}
	case c.execErr != nil:
		err := &InitError{Step: c.execErr.Step, Detail: c.Args[0], Err: syscall.Errno(c.execErr.Errno)}
		r.Status, r.ExitCode = StatusSetupError, ExitNotExecutable
		if c.execErr.Errno == int32(syscall.ENOENT) {
			r.ExitCode = ExitNotFound
		}
		r.Error = &ErrorInfo{Step: err.Step, Errno: errnoName(err.Err), Message: err.Error()}
		return err
	case oomKilled:
		// memory.oom.group took PID 1 with the workload, before its report.
		r.Status, r.ExitCode, r.Signal = StatusOOMKilled, 128+int(syscall.SIGKILL), signalName(syscall.SIGKILL)
	case c.killSent:
		r.Status, r.ExitCode, r.Signal = StatusSignaled, 128+int(syscall.SIGKILL), signalName(syscall.SIGKILL)
	case c.workloadStarted:
		// PID 1 died under the workload, which the kernel killed with it
		// (the PID namespace, or its parent-death signal): what is known
		// of the workload is that it ran and was killed.
		r.Status, r.ExitCode, r.Signal = StatusSignaled, 128+int(syscall.SIGKILL), signalName(syscall.SIGKILL)
		r.SupervisorLost = true
		msg := c.deathError("after the workload started", errOrEOF(waitErr)).Error()
		if c.lateErr != nil {
			msg = fmt.Sprintf("jail init failed at %s after the workload started: %v", c.lateErr.Step, syscall.Errno(c.lateErr.Errno))
		}
		r.Error = &ErrorInfo{Step: "supervisor", Message: msg + "; the workload was killed with it"}
	default:
		err := &InitError{Step: "init", Err: c.deathError("before the workload's report", errOrEOF(waitErr))}
		r.Status, r.ExitCode = StatusSetupError, ExitSetupError
		r.Error = &ErrorInfo{Step: "init", Message: err.Error()}
		return err
	}
	c.log().Info("jail ended", "status", string(r.Status), "exit_code", r.ExitCode)
	return nil
}

// encodeOutput returns captured output as text when it is valid UTF-8,
// and as base64 of the exact kept bytes otherwise: encoding/json would
// replace every invalid byte with U+FFFD, and the report would lie.
func encodeOutput(b *capture.Buffer) (string, string) {
	if s := b.String(); utf8.ValidString(s) {
		return s, "utf-8"
	}
	return b.Base64(), "base64"
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// signalName returns "KILL" for SIGKILL.
func signalName(s syscall.Signal) string {
	return strings.TrimPrefix(unix.SignalName(s), "SIG")
}
