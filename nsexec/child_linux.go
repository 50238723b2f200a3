package nsexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Config is how to start a child stage: the role, the jail plan and the
// descriptors it inherits, in the layout protocol.go documents.
type Config struct {
	// Path is the executable re-executed as the stage; it must link this
	// package. Empty means the stage embedded in this package (stage/,
	// started from a sealed memfd) where there is one for the
	// architecture, else /proc/self/exe.
	Path string
	// Arg0 selects the role: [InitArg0] or [ExecArg0].
	Arg0 string
	// Plan is the encoded jail plan ([Plan.Encode]).
	Plan []byte
	// Process, when not nil, is the encoded process plan, known at the
	// start: it follows the plan into the pipe, which is then closed (no
	// SendProcess). With FlagNoGo the stage reads it right after READY.
	Process []byte
	// Files are the descriptors after PlanFD and SyncFD, in order: the
	// cgroup "tasks" files, the host sources, the extra descriptors of the
	// role ([ExtraFD]).
	Files []*os.File
	// Stdin, Stdout and Stderr are as in [os/exec.Cmd]: nil is /dev/null,
	// an *os.File is passed as it is, anything else through a pipe.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// SysProcAttr holds the namespaces (Cloneflags), the id maps, the
	// cgroup (UseCgroupFD), the credentials and ambient capabilities of
	// the stage; Start adds Pdeathsig and refuses the other fields.
	SysProcAttr *syscall.SysProcAttr
	// Detachable keeps the stage from being reaped until [Child.Detach]
	// or [Child.Wait]: a session's PID 1, which outlives the thread that
	// started it once it has cleared its parent-death signal.
	Detachable bool
	// NetNS, when not nil, is a network namespace the stage starts in
	// instead of a new one (SysProcAttr's Cloneflags must not hold
	// CLONE_NEWNET then): the thread that clones the stage enters it with
	// setns(2) for the clone and goes back to its own after. Start does
	// not close it.
	NetNS *os.File
}

// Child is the host half of a re-exec: the started stage, the plan pipe
// (open until the process is sent) and the sync socket. Start, Wait and
// the messages are shared by one-shot runs, sessions and joins.
type Child struct {
	pid     int
	pidfd   *os.File // nonblocking; closed once the stage is reaped
	state   *ExitState
	sync    *os.File
	planW   *os.File
	waitc   chan error
	waitErr error
	// release, for a Detachable child, lets the starting goroutine go on
	// to reap it.
	release     chan struct{}
	releaseOnce sync.Once
}

// Start starts the stage from a goroutine locked to its OS thread, which
// stays locked until the stage is reaped: Pdeathsig fires when the thread
// that forked the child exits (go.dev/issue/27505). It writes the jail
// plan and returns; the caller reads READY with [Child.Recv].
//
// The stage is spawned by spawn.c, sharing this process's memory until its
// exec (os/exec would copy all of it: it cannot vfork a child that gets a
// user namespace), or by [syscall.StartProcess] where spawn.c has no
// trampoline for the architecture.
func Start(cfg Config) (_ *Child, retErr error) {
	path, exe := cfg.Path, (*os.File)(nil)
	if path == "" {
		path = "/proc/self/exe"
		exe = embeddedStage()
	}
	attr := cfg.SysProcAttr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	if err := checkAttr(attr); err != nil {
		return nil, err
	}
	if cfg.NetNS != nil && attr.Cloneflags&unix.CLONE_NEWNET != 0 {
		return nil, errors.New("nsexec: a network namespace to join and CLONE_NEWNET")
	}
	attr.Pdeathsig = syscall.SIGKILL
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("plan pipe: %w", err)
	}
	defer planR.Close()
	// The plan waits in the pipe before the clone when it fits: the stage
	// reads it as soon as it runs instead of waiting for this goroutine
	// to hear that the spawn returned (about 0.1 ms, traced). Only a plan
	// larger than the pipe (64 KiB by default) is written after.
	plans := cfg.Plan
	if cfg.Process != nil {
		plans = append(append(make([]byte, 0, len(cfg.Plan)+len(cfg.Process)), cfg.Plan...), cfg.Process...)
	}
	early := false
	if n, err := unix.FcntlInt(planW.Fd(), unix.F_GETPIPE_SZ, 0); err == nil && len(plans) <= n {
		if _, err := planW.Write(plans); err != nil {
			planW.Close()
			return nil, fmt.Errorf("plan pipe: %w", err)
		}
		early = true
	}
	defer func() {
		if retErr != nil {
			planW.Close()
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	// Our end waits in the runtime's poller, not in a blocked thread: a
	// thread blocked in recvmsg holds its P for up to 10 ms, and while
	// one does sysmon wakes every 20 µs (bench/README.md: about 1 ms of
	// CPU a run). The stage's end stays blocking.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, os.NewSyscallError("fcntl", err)
	}
	syncF := os.NewFile(uintptr(fds[0]), "jail-sync")
	childSync := os.NewFile(uintptr(fds[1]), "jail-sync-child")
	defer childSync.Close()
	defer func() {
		if retErr != nil {
			syncF.Close()
		}
	}()
	stdio, err := newStdio(cfg.Stdin, cfg.Stdout, cfg.Stderr)
	if err != nil {
		return nil, err
	}
	files := append(stdio.child[:], planR, childSync)
	files = append(files, cfg.Files...)
	c := &Child{sync: syncF, planW: planW, waitc: make(chan error, 1), release: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back := true // a thread that could not leave the jail's network namespace ends locked, and with it
		defer func() {
			if back {
				runtime.UnlockOSThread()
			}
		}()
		var pid int
		var pidfd *os.File
		var err error
		if cfg.NetNS != nil {
			pid, pidfd, err, back = spawnIn(cfg.NetNS, path, exe, cfg.Arg0, files, attr)
		} else {
			pid, pidfd, err = spawn(path, exe, cfg.Arg0, files, attr)
		}
		if err != nil {
			started <- err
			return
		}
		// The copiers start before anything waits for them (stdio.wait
		// below may come at once: the stage can die at any time).
		stdio.started(nil)
		c.pid, c.pidfd = pid, pidfd
		started <- nil
		if cfg.Detachable {
			<-c.release
			if back {
				runtime.UnlockOSThread()
				back = false // unlocked once: the deferred unlock must not run again
			}
		}
		// In the poller (this goroutine's thread sleeps, its P goes idle)
		// rather than blocked in wait4, for the reason above; then the
		// reap does not wait.
		waitExit(pidfd)
		c.state, err = wait4(pid)
		pidfd.Close() // a Signal from now on gets os.ErrClosed, never another process
		c.waitc <- stdio.wait(err)
	}()
	if err := <-started; err != nil {
		stdio.started(err)
		return nil, err
	}
	if !early {
		// A write error means the child died; its report or EOF follows.
		_, _ = planW.Write(plans)
	}
	if cfg.Process != nil {
		planW.Close()
	}
	return c, nil
}

// Pid returns the stage's pid in this process's PID namespace.
func (c *Child) Pid() int { return c.pid }

// Signal sends sig to the stage (through its pidfd: never a recycled pid).
func (c *Child) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("nsexec: unsupported signal")
	}
	rc, err := c.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) { err = unix.PidfdSendSignal(int(fd), s, nil, 0) }); cerr != nil {
		return cerr
	}
	return err
}

// ExitState is how the stage ended, once Wait returned; else nil.
func (c *Child) ExitState() *ExitState { return c.state }

// ExitState is a reaped process's wait status and resource usage.
type ExitState struct {
	Status syscall.WaitStatus
	Rusage syscall.Rusage
}

// String describes the status as os.ProcessState does: "exit status 1",
// "signal: killed".
func (s *ExitState) String() string {
	switch {
	case s.Status.Exited():
		return "exit status " + strconv.Itoa(s.Status.ExitStatus())
	case s.Status.Signaled():
		return "signal: " + s.Status.Signal().String()
	}
	return "wait status " + strconv.Itoa(int(s.Status))
}

// wait4 reaps pid, a child of ours: until it is reaped its pid cannot be
// reused, so waiting by pid is exact.
func wait4(pid int) (*ExitState, error) {
	var s ExitState
	for {
		_, err := syscall.Wait4(pid, &s.Status, 0, &s.Rusage)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("wait4", err)
		}
		return &s, nil
	}
}

// Wait waits for the stage to exit and for the copying of its output to
// end; it may be called more than once.
func (c *Child) Wait() error {
	c.Detach()
	if c.waitc != nil {
		c.waitErr = <-c.waitc
		c.waitc = nil
	}
	return c.waitErr
}

// Detach lets a Detachable child outlive the thread that started it; it is
// reaped when it exits, without a thread waiting for it.
func (c *Child) Detach() { c.releaseOnce.Do(func() { close(c.release) }) }

// waitExit waits, in the runtime's poller rather than in a blocked
// thread, until the process behind pidfd (a child of ours) has exited: a
// pidfd polls readable then.
func waitExit(pidfd *os.File) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		return err != nil || n > 0
	})
}

// SendProcess writes the process plan and closes the plan pipe; the stage
// reads it after GO.
func (c *Child) SendProcess(p []byte) error {
	_, err := c.planW.Write(p)
	if cerr := c.planW.Close(); err == nil {
		err = cerr
	}
	return err
}

// SendTemplate writes the process plan a preforked workload is set up from
// (FlagPrefork), and leaves the pipe open for SendProcess.
func (c *Child) SendTemplate(p []byte) error {
	_, err := c.planW.Write(p)
	return err
}

// ClosePlan closes the plan pipe without a process (a session).
func (c *Child) ClosePlan() { c.planW.Close() }

// Close closes the parent's ends; the stage reads EOF and ends.
func (c *Child) Close() {
	c.planW.Close()
	c.sync.Close()
}

// Send sends one sync message.
func (c *Child) Send(m Msg) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = c.sync.Write(b)
	return err
}

// SendFiles sends one sync message with files attached (SCM_RIGHTS): the
// child has its own copies once it returns.
func (c *Child) SendFiles(m Msg, files []*os.File) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	rc, err := c.sync.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	for _, f := range files {
		runtime.KeepAlive(f)
	}
	return os.NewSyscallError("sendmsg", serr)
}

// SendBytes sends one datagram of a role's own protocol on the sync
// socket, after GO (the files helper's request).
func (c *Child) SendBytes(b []byte) error {
	_, err := c.sync.Write(b)
	return err
}

// RecvBytes reads one datagram of a role's own protocol, of at most max
// bytes (a longer one is an error). It returns io.EOF once the stage is
// gone.
func (c *Child) RecvBytes(max int) ([]byte, error) {
	b := make([]byte, max+1)
	n, err := c.sync.Read(b)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, io.EOF
	}
	if n > max {
		return nil, fmt.Errorf("sync datagram longer than %d bytes", max)
	}
	return b[:n], nil
}

// Recv reads one sync message and the descriptor attached to it, which
// only MsgPTY carries, and MsgReady with FlagNetfilter; the caller owns
// the file. It returns io.EOF once
// the stage is gone.
func (c *Child) Recv(m *Msg) (*os.File, error) {
	rc, err := c.sync.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := make([]byte, MsgSize)
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
	if err != nil || (m.Type != MsgPTY && m.Type != MsgReady) {
		if file != nil {
			file.Close() // only MsgPTY and MsgReady carry a descriptor
		}
		return nil, err
	}
	return file, nil
}
