package jail

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/nsexec"
)

// Cmd runs one command in a jail. It is shaped like os/exec.Cmd:
//
//	c := jail.Command(ctx, spec, "/bin/sh", "-c", "id")
//	c.Stdout = os.Stdout
//	err := c.Run()
//
// Wait returns nil when the workload ran, whatever its exit status; the
// outcome is in c.Result.
type Cmd struct {
	// Spec is what to isolate.
	Spec Spec
	// Args is the command and its arguments; Args[0] without a slash is
	// searched in the jail's PATH.
	Args []string
	// Stdin, Stdout and Stderr are the workload's standard streams; nil
	// means /dev/null. An *os.File that is a pipe or /dev/null is passed
	// to the workload as it is; any other file (a terminal, a regular
	// file, a socket, a device) and any other reader or writer is copied
	// through a pipe, so that the workload never holds the caller's own
	// file: it could reopen it through /proc/self/fd, or reconfigure a
	// terminal. A file given as Stdin is read only while the workload
	// runs.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY, when not nil, gives the workload a terminal of its own, of
	// this size: a new pseudo-terminal of the jail's own devpts as its
	// stdin, stdout, stderr and controlling terminal. Stdin is copied into
	// it, and everything the workload prints comes out on Stdout (a
	// terminal has one output stream; Stderr stays empty). The caller's
	// own terminal is never handed over: for an interactive session, put
	// it into raw mode and call Resize when it changes size (`jail run
	// --tty` does both).
	TTY *WindowSize
	// Capture collects stdout and stderr into the Result (head and tail up
	// to Spec.OutputLimitBytes each) besides writing them to Stdout and
	// Stderr when those are set.
	Capture bool
	// Logger receives debug and lifecycle records; nil discards them.
	Logger *slog.Logger
	// HelperPath is the executable re-executed as the jail's child stage; it
	// must link package jail (or nsexec). Empty means the stage embedded in
	// package nsexec where there is one (amd64), else /proc/self/exe.
	HelperPath string
	// NetnsPool, when not nil, gives a jail whose Spec has a network
	// namespace of its own with only lo (network mode none, the default) a
	// namespace made ahead instead of one made at its clone (see
	// [NetnsPool]); with none ready, the jail makes its own.
	NetnsPool *NetnsPool
	// Result is the report of the run, set by Wait (and by Start when it
	// fails).
	Result *Result

	ctx     context.Context
	started bool
	// prepare: Start stops before the release (Prepare); prepared: it
	// did, with prepSpec, and prepUndo undoes its steps, in order;
	// released: the workload was released, or the jail discarded.
	prepare, prepared, released bool
	prepSpec                    Spec
	prepUndo                    []func()
	// testHook, when set (by tests of this package only), changes the
	// launch after planning: how a test makes the mount plan wrong on
	// purpose, to show the second wall holds.
	testHook func(*launch)
	l        *launch
	// session is the session a Cmd of Session.Command joins.
	session *Session
	// extraEnv is set over the command's environment when it starts
	// (Session.Exec's ExecOptions.Env).
	extraEnv []string
	// sessionInit is a session's init/ group, its PID 1's (Create).
	sessionInit *cgroup.Group
	// ctl is the connection to a session's control socket, held while
	// the command runs: the session is not idle meanwhile.
	ctl *os.File
	// execID names a command of a session in its Result.
	execID string
	// files: this is a session's files helper (fileOp), not a command.
	files bool
	// passive: the helper does not count as the session's activity (it
	// holds no connection to PID 1's control socket): Inspect's measure
	// of the workspace, which must not keep an idle session up.
	passive bool
	// held is the session's state when the caller holds its lock
	// exclusively (a snapshot): the join takes no lock of its own.
	held    *heldSession
	child   *nsexec.Child
	stdout  *capture.Buffer
	stderr  *capture.Buffer
	monitor chan struct{}
	// stdinRelay copies a Stdin file that is not passed through.
	stdinRelay *relay
	pty        *os.File      // the master of the workload's terminal (TTY)
	ptyDone    chan struct{} // closed when the terminal's output ended
	begin      time.Time
	// letGo: the workload was let go to run (GO, or its process, was sent
	// to PID 1, or it starts at READY).
	letGo bool

	mu              sync.Mutex
	end             time.Time
	exited          *nsexec.Msg   // MsgExited
	workloadStarted bool          // MsgStarted: the workload's execve succeeded
	workloadPID     int           // its pid in the jail's PID namespace (WorkloadPID)
	startedCh       chan struct{} // closed at MsgStarted
	pidOnce         sync.Once     // a session's command's pid, read once (WorkloadPID)
	joinedPID       int
	lateErr         *nsexec.Msg     // MsgSetupError from PID 1 after MsgStarted
	execErr         *nsexec.Msg     // MsgExecError
	seccomp         []nsexec.Msg    // MsgSeccomp events
	cg              *cgroup.Group   // the run's cgroup, when the Spec has limits
	cgBegun         bool            // cg was begun (cgroup.Begin); completeCgroup makes the rest
	cgNoted         int             // how many of cg's unenforced limits the report lists (noteCgroup)
	net             *netns.Link     // an egress jail's veth, addresses and rules
	userNet         *netns.UserLink // a user-mode egress jail's pasta and rules
	nfsock          *os.File        // the jail's netfilter socket (nsexec.FlagNetfilter), until userNet takes it
	mntns           *os.File        // the jail's mount namespace, held from READY (see holdMountNS)
	noGo            bool            // the stage went on after READY (FlagNoGo): release sends nothing
	prefork         bool            // a prepared jail whose workload waits, set up, for its process (FlagPrefork)
	netStats        *NetworkStats   // its counters, read as it ended
	killReason      Status          // timed_out or canceled, once the jail is being killed
	group           int             // the workload's process group, when the jail shares our PID namespace
	killSent        bool            // the caller sent SIGKILL with Signal
	timers          []*time.Timer
	done            chan struct{}
}

// WindowSize is the size of a terminal, in characters.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Command returns a Cmd that runs name with args in a jail described by
// spec. Cancelling ctx kills the whole jail.
func Command(ctx context.Context, spec Spec, name string, args ...string) *Cmd {
	return &Cmd{ctx: ctx, Spec: spec, Args: append([]string{name}, args...)}
}

// Run starts the jail and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// newResult starts the Result of this run.
func (c *Cmd) newResult() *Result {
	r := &Result{Schema: Schema, Output: "streamed", StdoutEncoding: "utf-8", StderrEncoding: "utf-8"}
	if c.l != nil {
		r.Isolation = c.l.iso
	} else {
		r.Isolation = Isolation{Namespaces: []string{}, UIDMap: []IDMap{}, GIDMap: []IDMap{}, NotEnforced: []string{},
			Landlock: LandlockInfo{Enforced: []string{}, Missing: []string{}}, Network: NetworkInfo{Mode: c.Spec.netMode(), Allow: []AllowInfo{}}}
	}
	if c.Capture {
		r.Output = "captured"
	}
	if c.session != nil {
		r.SessionID, r.ExecID = c.session.id, c.execID
	}
	r.SeccompDenials = []SeccompDenial{}
	r.LimitsHit = []string{}
	if r.Isolation.Cgroup == "" {
		r.Isolation.Cgroup = "none"
	}
	r.Isolation.Backend = BackendNative
	return r
}
