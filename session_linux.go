package jail

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/jailfs"
	"github.com/jailrt/jail/internal/procfs"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/nsexec"
)

// Sessions manages the sessions of one state directory. Jail has no
// daemon: a session's PID 1 keeps it up, and its state lives in Dir, one
// directory per session (a state file written once, atomically, and a
// lock: exclusive to create, remove, pause and resume, shared while a
// command joins). Sessions of one user are invisible to another: each has
// its own Dir, 0700.
type Sessions struct {
	// Dir is the state directory; empty means [DefaultSessionDir].
	Dir string
	// SnapshotDir is where snapshots are kept; empty means
	// [DefaultSnapshotDir].
	SnapshotDir string
	// WorkspaceDir is where dir workspaces are made; empty means
	// [DefaultWorkspaceDir].
	WorkspaceDir string
	// HelperPath is as in [Cmd].
	HelperPath string
	// Logger receives debug and lifecycle records; nil discards them.
	Logger *slog.Logger
}

// Session is one session. Its methods may be called from several
// goroutines, and from several processes at once.
type Session struct {
	m  *Sessions
	id string
	st sessionState
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// DefaultSessionDir returns where sessions live for this user:
// $JAIL_STATE_DIR, else /run/jail for root, else $XDG_RUNTIME_DIR/jail.
func DefaultSessionDir() (string, error) {
	if d := os.Getenv("JAIL_STATE_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/run/jail", nil
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "jail"), nil
	}
	return "", errors.New("no state directory for sessions: set XDG_RUNTIME_DIR or JAIL_STATE_DIR (or --state-dir)")
}

// dir returns the state directory, made 0700 if missing, and refuses one
// another user could write to or that is a symlink.
func (m *Sessions) dir() (string, error) {
	return ownDir("session state directory", m.Dir, DefaultSessionDir, 0o700)
}

// ownDir returns the directory d (or, if empty, what def says), made with
// mode if missing, and refuses one that is not a directory of this user's
// that no one else can write to (a symlink included): jail keeps its state,
// snapshots and workspaces in it, and trusts what it reads there.
func ownDir(what, d string, def func() (string, error), mode os.FileMode) (string, error) {
	if d == "" {
		var err error
		if d, err = def(); err != nil {
			return "", err
		}
	}
	// Absolute: a session's state records paths in these (its workspace,
	// the snapshot tree it has as a lower layer) that other processes,
	// from another directory, read.
	d, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, mode); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil {
		return "", &os.PathError{Op: "lstat", Path: d, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("%s %s: want a directory of uid %d that no one else can write to", what, d, os.Geteuid())
	}
	return d, nil
}

func (m *Sessions) log() *slog.Logger {
	if m.Logger == nil {
		return discard
	}
	return m.Logger
}

// lockSession opens and locks a session's lock file (flock LOCK_EX or
// LOCK_SH); closing the file releases it.
func lockSession(dir string, how int, wait bool) (*os.File, error) {
	return lockFile(dir, how, wait, false)
}

// lockFile is lockSession that makes the lock file first if create: only
// the maker of a directory does. Anyone else making it would put it back
// into a directory that rm has just emptied, and the directory's removal
// would fail ("directory not empty", as a command racing rm did).
func lockFile(dir string, how int, wait, create bool) (*os.File, error) {
	flags := os.O_RDWR | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), flags, 0o600)
	if err != nil {
		return nil, err
	}
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, ErrBusy
		}
		return nil, os.NewSyscallError("flock", err)
	}
	return f, nil
}

// PruneSessionCgroups removes the groups of this user's sessions, under
// parent (as Spec.CgroupParent; "" for this process's cgroup), that no
// process runs in and that are over a minute old: a session whose PID 1
// is gone and whose state directory went too (removed by hand, or a
// state directory on a tmpfs after a reboot of the host's /run alone),
// which Sessions.GC, going by state, cannot find. It returns the
// directories it removed.
func PruneSessionCgroups(parent string) ([]string, error) {
	return cgroup.PruneEmpty(cgroup.Options{Parent: parent}, fmt.Sprintf("jail-session-%d-", os.Geteuid()), time.Minute)
}

// sessionCgroupName names the group of session id of state directory base
// (Sessions.Dir): never a per-run group's name, which cgroup.Prune would
// take for an orphan once its creator exits, and never another state
// directory's session's of the same id (jail serve keeps one per tenant).
func sessionCgroupName(base, id string) string {
	h := sha256.Sum256([]byte(base))
	return fmt.Sprintf("jail-session-%d-%x-%s", os.Geteuid(), h[:4], id)
}

// Create creates a session: a jail built as for a run of ss.Spec, whose
// PID 1 stays up with no process of its own until ss.TTL, ss.IdleTimeout
// or [Session.Remove]. It returns errors as [Cmd.Start] does, and an error
// wrapping ErrExists for an id in use. On any error nothing is left: no
// state, cgroup or process.
func (m *Sessions) Create(ctx context.Context, ss SessionSpec) (_ *Session, retErr error) {
	var from *snapshotFiles // the snapshot's files, to put in
	var parent string
	if ss.From != "" {
		var err error
		if from, err = m.fromSnapshot(&ss); err != nil {
			return nil, err
		}
		defer from.close()
		parent = from.id
	}
	base, err := m.newSession(&ss)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, ss.ID)
	if err := unix.Mkdir(dir, 0o700); err != nil {
		if err != unix.EEXIST {
			return nil, &os.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		// A session that ended leaves its directory until someone looks:
		// Get removes it then.
		if _, err := m.Get(ss.ID); !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("session %s: %w", ss.ID, ErrExists)
		}
		if err := unix.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("session %s: %w", ss.ID, ErrExists)
		}
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	lock, err := lockFile(dir, unix.LOCK_EX, true, true)
	if err != nil {
		return nil, err
	}
	defer lock.Close()

	if ss.Workspace.Type == "" {
		ss.Workspace.Type = WorkspaceTmpfs
	}
	if ss.Workspace.Type != WorkspaceNone {
		ss.Workspace.SizeBytes = ss.Workspace.size()
	}
	var wdir string // a dir workspace's host directory
	if ss.Workspace.Type == WorkspaceDir {
		base, err := m.workspaceBase()
		if err != nil {
			return nil, err
		}
		wdir = filepath.Join(base, ss.ID)
		if err := unix.Mkdir(wdir, 0o700); err != nil {
			if err == unix.EEXIST {
				return nil, fmt.Errorf("session %s: its workspace %s exists (left by an earlier session of that id: `jail session gc`, or remove it): %w", ss.ID, wdir, ErrExists)
			}
			return nil, &os.PathError{Op: "mkdir", Path: wdir, Err: err}
		}
		defer func() {
			if retErr != nil {
				_ = jailfs.RemoveTree(wdir)
			}
		}()
	}
	spec, err := ss.Workspace.apply(ss.Spec, wdir)
	if err != nil {
		return nil, err
	}
	if from != nil {
		spec.overlayTree = from.lowerTree
	}
	c := &Cmd{ctx: ctx, Spec: spec, Args: []string{"session"}, HelperPath: m.HelperPath, Logger: m.Logger, started: true}
	st := sessionState{Schema: sessionStateSchema, ID: ss.ID, Labels: ss.Labels, TTL: ss.TTL, IdleTimeout: ss.IdleTimeout,
		Workspace: ss.Workspace, WorkspaceDir: wdir, Parent: parent, Spec: spec}
	if from != nil {
		st.LowerTree = from.lowerTree
	}
	var files []*os.File
	var ctl *os.File
	var handed *netns.Egress // the network handed to PID 1
	steps := []hostStep{
		{name: "spec", do: func() error {
			if err := c.plan(); err != nil {
				return err
			}
			if c.l.pasta != "" {
				// pasta would outlive the CLI that made the session only
				// as an orphan nobody stops when the session ends.
				return &FeatureError{Feature: "egress network", Reason: "a session of an unprivileged caller cannot have one yet (its pasta would outlive the session): run the session as root, or egress in `jail run`"}
			}
			c.l.plan.Flags |= nsexec.FlagSession
			// PID 1's timers count whole milliseconds: round up, never end early.
			c.l.plan.TTL, c.l.plan.IdleTimeout = ss.TTL.Round(time.Millisecond), ss.IdleTimeout.Round(time.Millisecond)
			if c.l.plan.TTL < ss.TTL {
				c.l.plan.TTL += time.Millisecond
			}
			if c.l.plan.IdleTimeout < ss.IdleTimeout {
				c.l.plan.IdleTimeout += time.Millisecond
			}
			return nil
		}},
		{name: "workspace", do: func() error { return c.prepareWorkspace(&st) }, undo: func() { dropQuota(&st) }},
		{name: "workspace files", do: func() error {
			// A reflinked snapshot's files, cloned from the host into
			// the new dir workspace before anything runs in it.
			if from == nil {
				return nil
			}
			cloned, err := from.cloneInto(wdir)
			if cloned {
				from.ws.Close()
				from.ws = nil
			}
			return err
		}},
		{name: "snapshot's layer tree", do: func() (err error) {
			// Recorded in the snapshot first: it is not removed while
			// the session has its tree as a lower layer.
			if st.LowerTree != "" {
				st.LowerMark, err = useSnapshot(from.sdir, base, st.ID)
			}
			return err
		}, undo: func() {
			if st.LowerMark != "" {
				_ = os.Remove(st.LowerMark)
			}
		}},
		{name: "open host sources", do: func() error {
			sources, err := c.l.openSources()
			files = append(files, sources...)
			return err
		}},
		{name: "cgroup", do: func() error {
			attach, err := c.makeSessionCgroup(&st, filepath.Dir(dir))
			files = append(attach, files...)
			c.l.plan.CgroupFDs = uint32(len(attach))
			return err
		}, undo: c.destroyCgroup},
		{name: "control socket", do: func() (err error) {
			if ctl, err = listenControl(filepath.Join(dir, "ctl.sock")); err != nil {
				return err
			}
			var sb unix.Stat_t
			if err := unix.Stat(filepath.Join(dir, "ctl.sock"), &sb); err != nil {
				return &os.PathError{Op: "stat", Path: filepath.Join(dir, "ctl.sock"), Err: err}
			}
			st.Control = [2]uint64{sb.Dev, sb.Ino}
			return nil
		}},
		{name: "clone", do: func() error { return c.spawnDetached(append(files, ctl)) }, undo: c.abort},
		{name: "network", do: c.setupNetwork, undo: c.closeNetwork},
		{name: "network lease", do: func() error {
			if c.net == nil {
				return nil
			}
			// The network stays with PID 1, which holds the lease from
			// now on, before the session runs anything: Remove, or
			// whoever finds PID 1 gone, takes it away.
			pid := c.child.Pid()
			start, _, err := processIdentity(pid)
			if err != nil {
				return c.childErrorOr(err)
			}
			e, err := c.net.Detach(pid, start)
			c.net = nil
			handed = e
			if err != nil {
				return err
			}
			st.NetLease, st.NetMark = &e.Index, e.Mark
			return nil
		}, undo: func() {
			// A later step failed: the clone's undo kills PID 1 next.
			if handed != nil {
				if err := netns.Abandon(handed); err != nil {
					c.log().Warn("network teardown", "err", err)
				}
			}
		}},
		{name: "ready", do: c.awaitReady},
		{name: "go", do: func() error {
			c.child.ClosePlan()
			if err := c.child.Send(nsexec.Msg{Type: nsexec.MsgGo}); err != nil {
				return c.deathError("before it was told to go", err)
			}
			var msg nsexec.Msg
			if _, err := c.child.Recv(&msg); err != nil || msg.Type != nsexec.MsgStarted {
				if err == nil && msg.Type == nsexec.MsgSetupError {
					return &stepError{msg.Step, c.childError(msg)}
				}
				return c.deathError("before the session was up", errOrEOF(err))
			}
			return nil
		}},
		{name: "state", do: func() error {
			pid := c.child.Pid()
			caller, err := procfs.SelfPIDNS()
			if err != nil {
				return err
			}
			start, pidns, err := processIdentity(pid)
			if err != nil {
				return err
			}
			st.PID, st.StartTime, st.PIDNS, st.CallerPIDNS, st.CreatedAt = pid, start, pidns, caller, time.Now().UTC()
			// PID 1 holds the session up and uses next to no memory: the
			// OOM killer is to take a command (a whole one: cgroup.Delegate)
			// when the session runs out. Lowering it needs CAP_SYS_RESOURCE
			// (root); an unprivileged session has no memory limit anyway.
			// Our child, not yet waited for: the pid is still PID 1's.
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte("-1000"), 0); err != nil {
				c.log().Debug("oom_score_adj of the session's PID 1", "err", err)
			}
			st.Join, st.Process, st.Isolation = joinTemplate(c.l), c.l.proc, c.l.iso
			for _, m := range c.l.plan.Mounts {
				if m.Kind == nsexec.OpFS && m.FSType == "overlay" {
					st.Layers = append(st.Layers, m.Target)
					st.LowerSlots = true
				}
			}
			if from != nil {
				for _, l := range from.layers {
					if !slices.Contains(st.Layers, l) {
						return fmt.Errorf("snapshot %s holds changes of %s, which is no overlay here now", from.id, l)
					}
				}
			}
			st.Creating = from != nil // until the snapshot's files are all in
			return writeState(dir, &st)
		}},
	}
	defer func() { closeAll(append(files, ctl)) }() // the child has its own copies
	defer c.closeSources()
	if err := c.runSteps(steps); err != nil {
		return nil, err
	}
	// The Spec's timeout is each command's, and ctx bounded the creation
	// only: neither may end the session now.
	c.stopTimers()
	if c.cg != nil { // the groups stay, for the session; this process is done with them
		c.sessionInit.Close()
		c.cg.Close()
	}
	c.child.Close()  // PID 1 has closed its end of the sync socket: it is on its own
	c.child.Detach() // the session outlives this process; its exit is reaped here meanwhile
	s := &Session{m: m, id: st.ID, st: st}
	if from != nil {
		// The snapshot's files, put in the jail as its workload's user;
		// no one else joins meanwhile (the lock is ours).
		var err error
		if from.ws != nil {
			_, err = s.fileOpHeld(ctx, &heldSession{dir, &st}, false, jailfs.Request{Op: jailfs.OpPutTar, Path: WorkspacePath, KeepLinks: true}, from.ws, nil)
		}
		if err == nil {
			st.Creating = false
			s.st.Creating = false
			err = writeState(dir, &st)
		}
		if err != nil {
			lock.Close()
			_, _ = s.Remove()
			return nil, fmt.Errorf("session %s from snapshot %s: %w", st.ID, parent, err)
		}
	}
	m.log().Info("session created", "id", st.ID, "pid", st.PID)
	return s, nil
}

// prepareWorkspace gives a dir workspace to the workload's user (the host
// ids its ids map to; an unprivileged caller's are its own already) and
// bounds it with a project quota, or, where the file system has none,
// refuses the session unless the Spec allows what cannot be enforced.
func (c *Cmd) prepareWorkspace(st *sessionState) error {
	if st.WorkspaceDir == "" {
		return nil
	}
	fd, err := unix.Open(st.WorkspaceDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: st.WorkspaceDir, Err: err}
	}
	defer unix.Close(fd)
	if os.Geteuid() == 0 {
		uid, gid := hostID(c.l.uidMap, c.l.proc.UID), hostID(c.l.gidMap, c.l.proc.GID)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return &os.PathError{Op: "chown", Path: st.WorkspaceDir, Err: err}
		}
	}
	id, err := setQuota(fd, st.Workspace.SizeBytes)
	if err == nil {
		st.WorkspaceProject = id
		return nil
	}
	fe := &FeatureError{Feature: "workspace size",
		Reason: fmt.Sprintf("%d bytes at %s cannot be enforced: %v; it needs a file system with project quotas (ext4: tune2fs -O quota,project, mounted -o prjquota; xfs: -o pquota) and root, or --workspace tmpfs", st.Workspace.SizeBytes, st.WorkspaceDir, err)}
	if !c.Spec.AllowUnenforced {
		return &stepError{"host", fe}
	}
	c.l.iso.NotEnforced = append(c.l.iso.NotEnforced, fe.Error())
	return nil
}

// hostID returns the host id that id maps to, or id itself without a
// mapping (no user namespace).
func hostID(maps []IDMap, id uint32) int {
	for _, m := range maps {
		if id >= m.InsideID && id-m.InsideID < m.Count {
			return int(m.OutsideID + id - m.InsideID)
		}
	}
	return int(id)
}

// makeSessionCgroup makes the session's group (always, where this host
// and caller can: it measures and kills each command apart) and its init/
// leaf for PID 1: cgroup v2 allows processes only in leaves of a group
// that hands controllers down.
func (c *Cmd) makeSessionCgroup(st *sessionState, base string) ([]*os.File, error) {
	name := sessionCgroupName(base, st.ID)
	g, err := cgroup.New(st.Spec.limits(), cgroup.Options{Parent: st.Spec.CgroupParent, AllowUnenforced: st.Spec.AllowUnenforced, Name: name})
	if err != nil {
		if st.Spec.limits() != (cgroup.Limits{}) {
			return nil, err
		}
		// No limits asked for, and no cgroup to be had (an unprivileged
		// caller without delegation): the session runs without one, and
		// says what that costs.
		c.l.iso.NotEnforced = append(c.l.iso.NotEnforced, "per-command cgroups: "+err.Error()+
			"; a command's timeout and end reach only its process group, and its usage is from getrusage")
		c.l.iso.Cgroup = "none"
		return nil, nil
	}
	for _, u := range g.Unenforced() {
		c.l.iso.NotEnforced = append(c.l.iso.NotEnforced, u.String())
	}
	c.l.iso.Cgroup = map[int]string{0: "none", 1: "v1", 2: "v2"}[g.Version()]
	st.CgroupName, st.Cgroup = name, g.State()
	err = g.Delegate()
	var init *cgroup.Group
	if err == nil {
		init, err = g.Sub("init")
	}
	if err != nil {
		_ = g.Destroy()
		return nil, err
	}
	c.cg = g // Destroy removes init/ with it
	files, err := init.AttachFiles()
	if err != nil {
		init.Close()
		return nil, err
	}
	c.sessionInit = init
	return files, nil
}

// joinTemplate is the plan a command joins the session with, less its
// cgroup files.
func joinTemplate(l *launch) nsexec.Plan {
	p := l.plan
	var ns uint32
	for _, f := range []uintptr{cloneNewUser, cloneNewNS, cloneNewPID, cloneNewNet, cloneNewUTS, cloneNewIPC} {
		if l.cloneflags&f != 0 {
			ns |= uint32(f)
		}
	}
	return nsexec.Plan{
		Flags: p.Flags&(nsexec.FlagPIDNS|nsexec.FlagTimeNS|nsexec.FlagCgroupNS|nsexec.FlagSeccompNotify|nsexec.FlagSeccompWaitKillable) |
			nsexec.FlagJoin,
		JoinNS:         ns,
		Seccomp:        p.Seccomp,
		SeccompRules:   p.SeccompRules,
		LandlockFS:     p.LandlockFS,
		LandlockScoped: p.LandlockScoped,
		LandlockRules:  p.LandlockRules,
	}
}

// listenControl makes the session's control socket: PID 1 accepts on it,
// and counts each connection, held by a command while it runs, as
// activity. It is a path in the state directory, which no process of the
// jail can reach.
func listenControl(path string) (*os.File, error) {
	f, fd, err := seqpacket(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "bind", Path: path, Err: err}
	}
	if err := unix.Listen(fd, 64); err != nil {
		f.Close()
		return nil, os.NewSyscallError("listen", err)
	}
	return f, nil
}

// dialControl connects to a session's control socket and waits for its
// PID 1 to take the connection.
func dialControl(path string) (*os.File, error) {
	f, fd, err := seqpacket(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		if err == unix.ECONNREFUSED || err == unix.ENOENT {
			return nil, ErrNotRunning
		}
		return nil, &os.PathError{Op: "connect", Path: path, Err: err}
	}
	var b [1]byte
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	n, err := f.Read(b[:])
	if err != nil || n != 1 {
		f.Close()
		return nil, fmt.Errorf("session control socket: no answer (%v): %w", err, ErrBusy)
	}
	return f, nil
}

// seqpacket makes a unix SOCK_SEQPACKET socket, named path in errors.
func seqpacket(path string) (*os.File, int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, os.NewSyscallError("socket", err)
	}
	return os.NewFile(uintptr(fd), path), fd, nil
}

// spawnDetached starts a session's PID 1: no stdio of the caller's, and
// reaped by this process only when it ends.
func (c *Cmd) spawnDetached(files []*os.File) error {
	c.Stdin, c.Stdout, c.Stderr = nil, nil, nil
	return c.spawn(nsexec.InitArg0, files)
}

// processIdentity returns what tells a process apart from a later one
// with the same pid (procfs.Identity); a dead process not yet reaped is
// not running.
func processIdentity(pid int) (start, pidns uint64, err error) {
	id, err := procfs.ReadIdentity(strconv.Itoa(pid))
	if err != nil || id.State == 'Z' || id.State == 'X' {
		return 0, 0, fmt.Errorf("process %d: %w", pid, ErrNotRunning)
	}
	return id.StartTime, id.PIDNS, nil
}

func writeState(dir string, st *sessionState) error { return writeJSON(dir, "state.json", st) }

// writeJSON writes v as JSON to name in dir, a directory of jail's own:
// to a temporary file, synced, then renamed over name, so a reader sees
// the old document or the whole new one, and a crash leaves one of them.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

func readState(dir, id string) (*sessionState, error) {
	return readStateMemo(dir, id, false)
}

// readSharedState is readState for a reader that changes nothing of what
// it gets (a command's join): the state may be one decoded before, shared
// with other such readers. A state file is never written in place
// (writeJSON renames a new file over it), so the same device, inode,
// size and change time mean the same contents; decoding it again cost a
// command 0.13 ms (BenchmarkReadState).
func readSharedState(dir, id string) (*sessionState, error) {
	return readStateMemo(dir, id, true)
}

// stateMemo holds decoded state files by device and inode, for
// readSharedState; at most stateMemoMax, an arbitrary one dropped first.
var stateMemo struct {
	sync.Mutex
	m map[[2]uint64]memoState
}

const stateMemoMax = 1024

type memoState struct {
	size         int64
	ctime, mtime unix.Timespec
	id           string
	st           *sessionState
}

func readStateMemo(dir, id string, shared bool) (*sessionState, error) {
	p := filepath.Join(dir, "state.json")
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("session state %s: not a regular file of uid %d that only it can write", p, os.Geteuid())
	}
	key := [2]uint64{st.Dev, st.Ino}
	if shared {
		stateMemo.Lock()
		m, ok := stateMemo.m[key]
		stateMemo.Unlock()
		if ok && m.size == st.Size && m.ctime == st.Ctim && m.mtime == st.Mtim && m.id == id {
			return m.st, nil
		}
	}
	var s sessionState
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("session state %s: %w", p, err)
	}
	if s.Schema != sessionStateSchema || s.ID != id || s.PID <= 0 {
		return nil, fmt.Errorf("session state %s: not the state of session %s", p, id)
	}
	if shared {
		stateMemo.Lock()
		if stateMemo.m == nil {
			stateMemo.m = map[[2]uint64]memoState{}
		}
		if len(stateMemo.m) >= stateMemoMax {
			for k := range stateMemo.m {
				delete(stateMemo.m, k)
				break
			}
		}
		stateMemo.m[key] = memoState{size: st.Size, ctime: st.Ctim, mtime: st.Mtim, id: id, st: &s}
		stateMemo.Unlock()
	}
	return &s, nil
}

// pidfdOf returns a pidfd of the session's PID 1 if it is alive and is
// the very process the state names: same start time, same PID namespace,
// named jail:init. A state file pointing at any other process (forged, or
// stale after the pid was reused) gives ErrNotRunning.
func (st *sessionState) pidfdOf() (int, error) {
	fd, err := unix.PidfdOpen(st.PID, 0)
	if err != nil {
		return -1, ErrNotRunning
	}
	start, pidns, err := processIdentity(st.PID)
	comm, cerr := os.ReadFile(fmt.Sprintf("/proc/%d/comm", st.PID))
	// Checked after the reads: the pidfd pins the process the reads were about.
	alive := unix.PidfdSendSignal(fd, 0, nil, 0) == nil
	if err != nil || cerr != nil || !alive || start != st.StartTime || pidns != st.PIDNS || strings.TrimSpace(string(comm)) != nsexec.InitArg0 {
		unix.Close(fd)
		return -1, ErrNotRunning
	}
	return fd, nil
}

// seen returns nil if this process can tell that the session in dir has
// ended when pidfdOf finds no PID 1: it sees the pids the state's are
// numbered in, or the session's control socket, which only its PID 1
// listens on, refuses connections. To a caller in another PID namespace
// (a container sharing the state directory, unshare -p) a live session is
// not found, and it is never cleaned up on its word; one whose PID 1 is
// gone (its namespace, too, after a container's restart) is.
func (st *sessionState) seen(dir string) error {
	caller, err := procfs.SelfPIDNS()
	if err == nil && (st.CallerPIDNS == 0 || caller == st.CallerPIDNS) {
		return nil
	}
	if err == nil {
		err = errors.New("it was made in another PID namespace than this process's")
	}
	if controlRefuses(dir, st.Control) {
		return nil
	}
	return err
}

// controlRefuses reports whether the control socket in dir is the one
// the session's creator made (id: device and inode) and refuses a
// connection: then no process listens on it, and its PID 1 is gone. The
// connection is made without blocking (a frozen PID 1 accepts nothing,
// and its backlog fills), through the directory's descriptor (a socket
// path is at most 107 bytes), and says it only probes (nsexec.Probe):
// PID 1's idle timeout runs on.
func controlRefuses(dir string, id [2]uint64) bool {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(d)
	var sb unix.Stat_t
	if id == [2]uint64{} || unix.Fstatat(d, "ctl.sock", &sb, unix.AT_SYMLINK_NOFOLLOW) != nil || sb.Dev != id[0] || sb.Ino != id[1] {
		return false
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(s)
	err = unix.Connect(s, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/ctl.sock", d)})
	if err == nil {
		_, _ = unix.Write(s, nsexec.Probe())
	}
	return err == unix.ECONNREFUSED
}

// Get returns the session id. It returns an error wrapping ErrNotFound if
// there is none, and cleans up (and returns ErrNotFound for) a session
// that has ended.
func (m *Sessions) Get(id string) (*Session, error) {
	if !validSessionID(id) {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	base, err := m.dir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, id)
	st, err := readState(dir, id)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(dir); serr == nil {
			_ = m.cleanup(dir, nil) // a create that died before its state
		}
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	s := &Session{m: m, id: id, st: *st}
	if st.Creating {
		// Made from a snapshot whose files are still being put in, or
		// whose maker died doing so: then no one holds the lock, and the
		// half-made session is removed.
		l, err := lockSession(dir, unix.LOCK_EX, false)
		if err != nil {
			return nil, fmt.Errorf("session %s is being created: %w", id, ErrBusy)
		}
		l.Close()
		_, _ = s.Remove()
		return nil, fmt.Errorf("session %s: its creation did not finish: %w", id, ErrNotFound)
	}
	if fd, err := st.pidfdOf(); err == nil {
		unix.Close(fd)
		return s, nil
	}
	if err := st.seen(dir); err != nil {
		return nil, fmt.Errorf("session %s: %w: %w", id, err, ErrNotFound)
	}
	if err := m.cleanup(dir, st); err != nil {
		return nil, fmt.Errorf("session %s has ended, and what it left could not be removed: %w", id, err)
	}
	return nil, fmt.Errorf("session %s has ended: %w", id, ErrNotFound)
}

// cleanup removes what an ended session left: its cgroup and its state.
// It does nothing if someone holds the session's lock.
func (m *Sessions) cleanup(dir string, st *sessionState) error {
	// Never made here: a directory without its lock is being made (its
	// maker locks it right after mkdir) or being removed (rm has taken
	// the lock file already), and a lock put back would make rm's
	// removal of the directory fail.
	lock, err := lockSession(dir, unix.LOCK_EX, false)
	if err != nil {
		return nil // busy: whoever holds it goes on
	}
	defer lock.Close()
	if st != nil {
		if fd, err := st.pidfdOf(); err == nil {
			unix.Close(fd)
			return nil // it is alive after all
		}
		if st.seen(dir) != nil {
			return nil // it may be alive: not ours to judge
		}
		if err := releaseNetwork(st); err != nil {
			return err
		}
		if err := destroyStateCgroup(st); err != nil {
			return err
		}
		if err := removeWorkspace(st); err != nil {
			return err
		}
	} else {
		// A create killed before it wrote its state may have cloned the
		// session's PID 1 (its lock is free: the creator is gone): its
		// group, named after the session, ends it, and whatever it
		// started, as Remove would. One made with another cgroup parent
		// is not found here.
		if _, err := cgroup.DestroyNamed(cgroup.Options{}, sessionCgroupName(filepath.Dir(dir), filepath.Base(dir))); err != nil {
			m.log().Warn("a session whose creation was killed: its cgroup", "dir", dir, "err", err)
		}
		// It may have made a dir
		// workspace: the one of that id in this manager's directory, if
		// there is one jail made.
		base := m.WorkspaceDir
		if base == "" {
			base, _ = DefaultWorkspaceDir()
		}
		if ws := filepath.Join(base, filepath.Base(dir)); base != "" && isWorkspace(ws, filepath.Base(dir)) {
			if err := jailfs.RemoveTree(ws); err != nil {
				return err
			}
		}
	}
	return os.RemoveAll(dir)
}

// releaseNetwork removes an egress session's network once its PID 1 is
// gone.
func releaseNetwork(st *sessionState) error {
	if st.NetLease == nil {
		return nil
	}
	return netns.ReleaseSession(*st.NetLease, st.PID, st.StartTime)
}

func destroyStateCgroup(st *sessionState) error {
	if st.CgroupName == "" {
		return nil
	}
	g, err := cgroup.Load(st.Cgroup, st.CgroupName)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return g.Destroy()
}

// List returns the running sessions, sorted by id, that have every label
// of labels; ended sessions are cleaned up on the way.
func (m *Sessions) List(labels map[string]string) ([]*Session, error) {
	base, err := m.dir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	var out []*Session
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		s, err := m.Get(e.Name())
		if err != nil {
			continue
		}
		match := true
		for k, v := range labels {
			got, ok := s.st.Labels[k] // a label it does not have is not one of value ""
			match = match && ok && got == v
		}
		if match {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

// GC removes what ended sessions left (cgroups, state) and returns their
// ids.
func (m *Sessions) GC() ([]string, error) {
	base, err := m.dir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		_, err := m.Get(e.Name())
		if _, serr := os.Lstat(filepath.Join(base, e.Name())); serr != nil {
			removed = append(removed, e.Name())
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// Command returns a Cmd that runs name with args in the session, with the
// session's Spec as its Spec: change its Env, Cwd, Timeout, CPUTime,
// KillGrace or OutputLimitBytes before Start; the other fields are the
// session's and a change to them is ignored. Its Result is a run's, with
// SessionID and ExecID set. The command is killed with everything it
// started when it ends or times out; the session goes on.
func (s *Session) Command(ctx context.Context, name string, args ...string) *Cmd {
	c := Command(ctx, s.Spec(), name, args...)
	c.session = s
	c.execID = newSessionID()
	c.HelperPath = s.m.HelperPath
	c.Logger = s.m.Logger
	return c
}

// Spec returns the session's Spec as it is now, its commands' template:
// Update (from this Session, or another process) may have changed its
// default env and cwd, and SetAllow its allow-list, since s was loaded.
// One read of the memoized state (readSharedState).
func (s *Session) Spec() Spec {
	spec := s.st.Spec
	if base, err := s.m.dir(); err == nil {
		if st, err := readSharedState(filepath.Join(base, s.id), s.id); err == nil {
			spec = st.Spec
		}
	}
	return spec
}

// joinSteps are Start's host-side steps for a command of a session.
func (c *Cmd) joinSteps() []hostStep {
	s := c.session
	var files []*os.File
	var lock *os.File
	var st *sessionState
	var dir string
	pidfd := -1
	closeJoin := func() {
		closeAll(files)
		if pidfd >= 0 {
			unix.Close(pidfd)
			pidfd = -1
		}
	}
	return []hostStep{
		{name: "session", do: func() (err error) {
			if c.held != nil { // the caller holds the lock (a snapshot, a restore)
				dir, st = c.held.dir, c.held.st
			} else if dir, st, lock, err = s.lockShared(); err != nil { // st is read-only from here
				return err
			}
			if st.Paused {
				return fmt.Errorf("session %s is paused (resume it first): %w", s.id, ErrNotRunning)
			}
			if pidfd, err = st.pidfdOf(); err != nil {
				return fmt.Errorf("session %s: %w", s.id, err)
			}
			return nil
		}, undo: func() { closeJoin(); lock.Close() }},
		{name: "spec", do: func() error { return c.planJoin(st) }},
		{name: "cgroup", do: func() error {
			if st.CgroupName == "" {
				return nil
			}
			g, err := cgroup.Load(st.Cgroup, st.CgroupName)
			if err != nil {
				return err
			}
			defer g.Close()
			attach, err := c.makeCgroup(&c.Spec, g)
			files = append(attach, files...)
			c.l.plan.CgroupFDs = uint32(len(attach))
			return err
		}, undo: c.destroyCgroup},
		{name: "session control", do: func() error {
			if c.held != nil || c.passive {
				// A snapshot's helper: PID 1 is frozen and could not
				// answer; it cannot go idle meanwhile either. A passive
				// one may be ended by the session's end (then it fails).
				return nil
			}
			ctl, err := dialControl(filepath.Join(dir, "ctl.sock"))
			c.ctl = ctl
			return err
		}, undo: func() { c.ctl.Close() }},
		{name: "clone", do: func() error {
			defer closeJoin()
			defer lock.Close() // joined, or failed: rm may go on
			if c.l.plan.Flags&nsexec.FlagTimeNS != 0 {
				// Opened by pid: checked against the pidfd afterwards, while
				// the pidfd pins the pid, so it is PID 1's and no later
				// process's.
				f, err := os.OpenFile(fmt.Sprintf("/proc/%d/ns/time_for_children", st.PID), os.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("session %s: %w", s.id, ErrNotRunning)
				}
				if unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
					f.Close()
					return fmt.Errorf("session %s: %w", s.id, ErrNotRunning)
				}
				files = append(files, os.NewFile(uintptr(pidfd), "pidfd"), f)
			} else {
				files = append(files, os.NewFile(uintptr(pidfd), "pidfd"))
			}
			pidfd = -1
			if c.files {
				return c.spawn(nsexec.FilesArg0, files)
			}
			if c.cg != nil {
				// For the helper, should this process die while the
				// command runs: then it ends the command's cgroup, not
				// only its process group.
				f, err := c.cg.KillFile()
				if err != nil {
					return err
				}
				if f != nil {
					files = append(files, f)
					c.l.plan.Flags |= nsexec.FlagJoinKill
				}
			}
			return c.spawn(nsexec.ExecArg0, files)
		}, undo: c.abort},
		{name: "ready", do: c.awaitReady},
		{name: "go", do: func() error {
			if c.files {
				return c.releaseFiles()
			}
			return c.release()
		}},
	}
}

// planJoin makes the launch of a command of session st: the session's
// join plan, and a process from its template with this Cmd's command,
// environment and working directory.
func (c *Cmd) planJoin(st *sessionState) error {
	if len(c.extraEnv) > 0 {
		c.Spec.Env = setEnv(slices.Clone(c.Spec.env()), c.extraEnv)
	}
	spec, err := commandSpec(st.Spec, c.Spec)
	if err != nil {
		return &stepError{"spec", err}
	}
	c.Spec = spec
	if len(c.Args) == 0 || c.Args[0] == "" {
		return &stepError{"spec", &SpecError{Field: "command", Value: "", Err: errors.New("is empty")}}
	}
	if spec.CPUTime > 0 && st.CgroupName == "" {
		return &stepError{"host", &FeatureError{Feature: "cpu_time", Reason: "a command's CPU time is measured in the session's cgroup, and this session has none"}}
	}
	l := &launch{plan: st.Join, proc: st.Process, iso: st.Isolation, checked: &checkedSpec{}}
	l.proc.Argv, l.proc.Env, l.proc.Path = c.Args, spec.env(), spec.searchPath()
	if spec.Cwd != "" {
		l.proc.Cwd = spec.Cwd
	}
	if c.TTY != nil {
		l.proc.Flags |= nsexec.FlagTTY
	}
	l.iso.NotEnforced = append([]string{}, l.iso.NotEnforced...)
	if c.files {
		l.planFiles()
	}
	c.l = l
	return nil
}

// Inspect returns the session's document (jail.session/v1): state,
// deadlines, usage, and the workspace's used bytes (asked in the jail, by
// a files helper, when the session is running).
func (s *Session) Inspect() (*SessionInfo, error) {
	base, err := s.m.dir()
	if err != nil {
		return nil, err
	}
	st, err := readState(filepath.Join(base, s.id), s.id)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	info := &SessionInfo{Schema: SessionSchema, ID: st.ID, State: SessionRunning, Labels: st.Labels, PID: st.PID,
		CreatedAt: st.CreatedAt, TTLMS: st.TTL.Milliseconds(), IdleTimeoutMS: st.IdleTimeout.Milliseconds(), Isolation: st.Isolation,
		Defaults: CommandDefaults{Env: slices.Clone(st.Spec.env()), Cwd: cmp.Or(st.Spec.Cwd, DefaultCwd)}}
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	if info.Isolation.Backend == "" { // a session made before the backends
		info.Isolation.Backend = BackendNative
	}
	if st.TTL > 0 {
		t := st.CreatedAt.Add(st.TTL)
		info.ExpiresAt = &t
	}
	fd, err := st.pidfdOf()
	switch {
	case err != nil:
		info.State = SessionExited
	case st.Paused:
		info.State = SessionPaused
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	if st.Workspace.Type == WorkspaceDir {
		info.Workspace = &WorkspaceInfo{Type: st.Workspace.Type, Path: WorkspacePath, SizeBytes: st.Workspace.SizeBytes, HostDir: st.WorkspaceDir}
		if st.WorkspaceProject != 0 && isWorkspace(st.WorkspaceDir, st.ID) {
			// What the project quota counts: the statfs of the jail would
			// be the whole host file system's.
			if fd, err := unix.Open(filepath.Dir(st.WorkspaceDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
				if n, err := quotaUsage(fd, st.WorkspaceProject); err == nil {
					info.Workspace.UsedBytes = &n
				}
				unix.Close(fd)
			}
		}
	}
	if st.Workspace.Type == WorkspaceTmpfs || st.Workspace.Type == WorkspaceOverlay {
		info.Workspace = &WorkspaceInfo{Type: st.Workspace.Type, Path: WorkspacePath, SizeBytes: st.Workspace.SizeBytes}
		if info.State == SessionRunning {
			// Asked in the jail: the host resolves no path of it.
			// Passive: asking how a session is must not keep it up.
			rep, err := s.fileOpHeld(context.Background(), nil, true, jailfs.Request{Op: jailfs.OpStatfs, Path: WorkspacePath}, nil, nil)
			if err == nil && rep.Statfs != nil {
				info.Workspace.UsedBytes = &rep.Statfs.UsedBytes
			} else {
				s.m.log().Debug("workspace usage", "id", s.id, "err", err)
			}
		}
	}
	if st.CgroupName != "" {
		if g, err := cgroup.Load(st.Cgroup, st.CgroupName); err == nil {
			if stats, err := g.Stats(); err == nil {
				u := &SessionUsage{}
				if stats.CPU != nil {
					u.CPUUserMS, u.CPUSystemMS = stats.CPU.User.Milliseconds(), stats.CPU.System.Milliseconds()
				}
				if stats.Memory != nil {
					u.MemoryPeakBytes, u.OOMKills = stats.Memory.PeakBytes, stats.Memory.OOMKills
				}
				if stats.Pids != nil {
					u.PidsPeak = stats.Pids.Peak
				}
				info.Usage = u
			}
			g.Close()
		}
	}
	return info, nil
}

// Pause freezes every process of the session where it is, keeping its
// memory (the cgroup freezer); commands cannot join until Resume. It
// needs the session's cgroup.
func (s *Session) Pause() error { return s.setPaused(true) }

// Resume lets a paused session run again.
func (s *Session) Resume() error { return s.setPaused(false) }

func (s *Session) setPaused(on bool) error {
	dir, st, lock, err := s.lockLive()
	if err != nil {
		return err
	}
	defer lock.Close()
	if st.CgroupName == "" {
		return fmt.Errorf("session %s has no cgroup to freeze: %w", s.id, ErrNotSupported)
	}
	g, err := cgroup.Load(st.Cgroup, st.CgroupName)
	if err != nil {
		return err
	}
	defer g.Close()
	if on {
		err = g.Freeze()
	} else {
		err = g.Thaw()
	}
	if err != nil {
		return err
	}
	st.Paused = on
	return writeState(dir, st)
}

// Touch counts as activity of the session: its idle timeout starts again.
// (Its PID 1 restarts the timer when the last connection to its control
// socket ends; Touch makes one and ends it.) It returns an error wrapping
// ErrNotRunning for a session that ended or is paused.
func (s *Session) Touch() error {
	dir, st, lock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer lock.Close()
	if st.Paused {
		return fmt.Errorf("session %s is paused (resume it first): %w", s.id, ErrNotRunning)
	}
	ctl, err := dialControl(filepath.Join(dir, "ctl.sock"))
	if err != nil {
		return fmt.Errorf("session %s: %w", s.id, err)
	}
	return ctl.Close()
}

// Update changes a session's labels and its commands' default environment
// and working directory, checked as a SessionSpec's and a command's are
// (a *SpecError naming the field).
func (s *Session) Update(u SessionUpdate) error {
	spec := SessionSpec{Labels: u.Labels}
	if u.TTL != nil {
		spec.TTL = *u.TTL
	}
	if u.IdleTimeout != nil {
		spec.IdleTimeout = *u.IdleTimeout
	}
	if err := spec.validate(); err != nil {
		return err
	}
	dir, st, lock, err := s.lockLive()
	if err != nil {
		return err
	}
	defer lock.Close()
	if u.TTL != nil || u.IdleTimeout != nil {
		if err := s.setDeadlines(dir, st, u.TTL, u.IdleTimeout); err != nil {
			return err
		}
	}
	next := st.Spec
	if u.Env != nil {
		next.Env = u.Env
	}
	if u.Cwd != nil {
		next.Cwd = *u.Cwd
	}
	if err := next.validateProcess(); err != nil {
		return err
	}
	if u.Labels != nil {
		st.Labels = u.Labels
	}
	st.Spec = next
	st.Process.Env, st.Process.Path = next.env(), next.searchPath()
	if u.Cwd != nil {
		st.Process.Cwd = next.Cwd
		if st.Process.Cwd == "" {
			st.Process.Cwd = DefaultCwd
		}
	}
	return writeState(dir, st)
}

// newSession checks ss, gives it an id when it has none, and returns the
// state directory its session goes in: what Create and Adopt begin with.
func (m *Sessions) newSession(ss *SessionSpec) (string, error) {
	if err := ss.validate(); err != nil {
		return "", err
	}
	if ss.ID == "" {
		ss.ID = newSessionID()
	}
	return m.dir()
}

// Adopt moves the running session id of src into m, as a session made
// now: under ss.ID (a new id when empty), with ss.Labels, and ss.TTL and
// ss.IdleTimeout counted from now; the rest of ss is not used (the
// session keeps its spec and workspace). It is how a warm pool of
// sessions hands one out: a claim costs a rename and one message to PID 1.
// Both directories must be on one file system. It returns an error
// wrapping ErrExists for an id in use in m, ErrNotFound or ErrNotRunning
// for a session of src that is gone; then the session is left in src.
func (m *Sessions) Adopt(src *Sessions, id string, ss SessionSpec) (*Session, error) {
	ss.Spec, ss.Workspace, ss.From = Spec{}, Workspace{}, ""
	base, err := m.newSession(&ss)
	if err != nil {
		return nil, err
	}
	from := &Session{m: src, id: id}
	dir, st, lock, err := from.lockLive()
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	now := time.Now().UTC()
	st.CreatedAt = now
	ttl, idle := ss.TTL, ss.IdleTimeout
	if err := from.setDeadlines(dir, st, &ttl, &idle); err != nil {
		return nil, err
	}
	to := filepath.Join(base, ss.ID)
	err = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if err == unix.EEXIST {
		// An ended session of that id leaves its directory until someone
		// looks: Get removes it then.
		if _, gerr := m.Get(ss.ID); !errors.Is(gerr, ErrNotFound) {
			return nil, fmt.Errorf("session %s: %w", ss.ID, ErrExists)
		}
		err = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		if err == unix.EEXIST {
			return nil, fmt.Errorf("session %s: %w", ss.ID, ErrExists)
		}
		return nil, &os.LinkError{Op: "rename", Old: dir, New: to, Err: err}
	}
	st.ID, st.Labels = ss.ID, ss.Labels
	if err := writeState(to, st); err != nil {
		// Not a session of m without its state: back where it was, for
		// its owner to remove.
		_ = unix.Renameat2(unix.AT_FDCWD, to, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
		return nil, err
	}
	return &Session{m: m, id: ss.ID, st: *st}, nil
}

// setDeadlines has the session's PID 1 re-arm its timers (see
// SessionUpdate), and records them in st. The caller holds the lock.
func (s *Session) setDeadlines(dir string, st *sessionState, ttl, idle *time.Duration) error {
	if st.Paused {
		return fmt.Errorf("session %s is paused (resume it first): %w", s.id, ErrNotRunning)
	}
	var left *time.Duration // the TTL from now
	if ttl != nil {
		d := *ttl
		if d > 0 {
			if d = time.Until(st.CreatedAt.Add(*ttl)); d <= 0 {
				return &SpecError{Field: "ttl", Value: ttl.String(), Err: fmt.Errorf("has passed: the session started %s ago", time.Since(st.CreatedAt).Round(time.Millisecond))}
			}
		}
		left = &d
	}
	ctl, err := dialControl(filepath.Join(dir, "ctl.sock"))
	if err != nil {
		return fmt.Errorf("session %s: %w", s.id, err)
	}
	defer ctl.Close()
	if _, err := ctl.Write(nsexec.Deadlines(left, idle)); err != nil {
		return fmt.Errorf("session %s: control socket: %w", s.id, err)
	}
	var b [1]byte // dialControl set a receive timeout
	if n, err := ctl.Read(b[:]); err != nil || n != 1 {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("session %s: its PID 1 does not change deadlines (the session was made by an older jail): %w", s.id, ErrNotSupported)
		}
		return fmt.Errorf("session %s: control socket: no answer (%v): %w", s.id, err, ErrNotRunning)
	}
	if ttl != nil {
		st.TTL = *ttl
	}
	if idle != nil {
		st.IdleTimeout = *idle
	}
	return nil
}

// SetAllow replaces an egress session's allow-list while it runs, in one
// transaction of its rules: its commands reach what allow lists from
// then on, and a connection to a destination no longer listed is refused
// at its next packet. Host names cannot be changed (they were pinned in
// the session's /etc/hosts, which is read-only): give addresses.
func (s *Session) SetAllow(allow []string) error {
	dir, st, lock, err := s.lockLive()
	if err != nil {
		return err
	}
	defer lock.Close()
	if st.NetLease == nil || st.Spec.Network.Mode != NetworkEgress {
		return &SpecError{Field: "network.allow", Value: strings.Join(allow, ","), Err: fmt.Errorf("session %s has no egress network", s.id)}
	}
	spec := st.Spec
	spec.Network.Allow = allow
	dests, err := spec.validateNetwork()
	if err != nil {
		return err
	}
	// The names the session was made with keep the addresses pinned in
	// its /etc/hosts then; no other name can be added.
	pinned := map[string][]netip.Addr{}
	for _, a := range st.Isolation.Network.Allow {
		d, err := netns.ParseDest(a.Dest)
		if err != nil || d.Host == "" {
			continue
		}
		for _, r := range a.Resolved {
			if rd, err := netns.ParseDest(r); err == nil && rd.Host == "" && !slices.Contains(pinned[d.Host], rd.Prefix.Addr()) {
				pinned[d.Host] = append(pinned[d.Host], rd.Prefix.Addr())
			}
		}
	}
	for i, d := range dests {
		if d.Host != "" && len(pinned[d.Host]) == 0 {
			return &SpecError{Field: fmt.Sprintf("network.allow[%d]", i), Value: d.Raw,
				Err: errors.New("a host name is pinned in the session's /etc/hosts when it is made, and one it was not made with cannot be added: give its addresses")}
		}
	}
	dests, info := egressDests(dests, pinned)
	hostNets, err := netns.HostNets()
	if err != nil {
		return err
	}
	e, err := netns.Plan(netns.Config{Pool: spec.Network.pool(), Index: *st.NetLease, Allow: dests, HostNets: hostNets,
		Mark: st.NetMark, LogDenied: spec.Network.LogDenied})
	if err != nil {
		return err
	}
	if err := netns.Replace(e, st.PID, st.StartTime); err != nil {
		return err
	}
	st.Spec = spec
	st.Isolation.Network.Allow = info
	return writeState(dir, st)
}

// lock takes the session's lock (LOCK_EX or LOCK_SH) and reads its state;
// the caller closes the lock.
func (s *Session) lock(how int) (string, *sessionState, *os.File, error) {
	return s.lockMemo(how, false)
}

// lockShared is lock(LOCK_SH) for a command's join, whose state is
// read-only and may be shared (readSharedState).
func (s *Session) lockShared() (string, *sessionState, *os.File, error) {
	return s.lockMemo(unix.LOCK_SH, true)
}

func (s *Session) lockMemo(how int, shared bool) (string, *sessionState, *os.File, error) {
	base, err := s.m.dir()
	if err != nil {
		return "", nil, nil, err
	}
	dir := filepath.Join(base, s.id)
	lock, err := lockSession(dir, how, true)
	if err == nil {
		var st *sessionState
		if st, err = readStateMemo(dir, s.id, shared); err == nil {
			if err = thawAfterSnapshot(dir, st); err == nil {
				return dir, st, lock, nil
			}
		}
		lock.Close()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil, fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	return "", nil, nil, err
}

// lockLive takes the session's lock exclusively and checks it is alive.
func (s *Session) lockLive() (string, *sessionState, *os.File, error) {
	dir, st, lock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return "", nil, nil, err
	}
	fd, err := st.pidfdOf()
	if err != nil {
		lock.Close()
		return "", nil, nil, fmt.Errorf("session %s: %w", s.id, err)
	}
	unix.Close(fd)
	return dir, st, lock, nil
}

// Remove ends the session: it kills its PID 1, with which the kernel ends
// every process of the jail (running commands report a KILL), removes its
// cgroup and its state. It returns how many processes it ended.
func (s *Session) Remove() (int, error) {
	dir, st, lock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	killed := 0
	if st.CgroupName != "" {
		if g, err := cgroup.Load(st.Cgroup, st.CgroupName); err == nil {
			if n, err := g.Procs(); err == nil {
				killed = len(n)
			}
			g.Close()
		}
	}
	if fd, err := st.pidfdOf(); err == nil {
		if st.Paused && st.CgroupName != "" { // a frozen PID 1 cannot die
			if g, err := cgroup.Load(st.Cgroup, st.CgroupName); err == nil {
				_ = g.Thaw()
				g.Close()
			}
		}
		err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		if err == nil {
			waitPidfd(fd, 5*time.Second)
		}
		unix.Close(fd)
		if err != nil && err != unix.ESRCH {
			return 0, os.NewSyscallError("pidfd_send_signal", err)
		}
	}
	if err := releaseNetwork(st); err != nil {
		return killed, err
	}
	if err := destroyStateCgroup(st); err != nil {
		return killed, err
	}
	if err := removeWorkspace(st); err != nil {
		return killed, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return killed, err
	}
	s.m.log().Info("session removed", "id", s.id)
	return killed, nil
}

// waitPidfd waits until the process of pidfd has exited (the pidfd polls
// readable), at most d.
func waitPidfd(fd int, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n > 0 {
			return
		}
	}
}
