package jail

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"
	"time"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
)

// SessionSchema is the value of [SessionInfo.Schema].
const SessionSchema = "jail.session/v1"

// SessionSpec describes a session to create: a jail that stays up, with
// no process of its own, that commands join ([Session.Command]).
type SessionSpec struct {
	// ID names the session: 1 to 63 of [A-Za-z0-9_.-], starting with a
	// letter or digit. Empty: one is generated.
	ID string `json:"id,omitempty"`
	// Labels are the caller's, listed and matched by [Sessions.List].
	Labels map[string]string `json:"labels,omitempty"`
	// TTL ends the session this long after it started, whatever runs in
	// it; 0: never.
	TTL time.Duration `json:"ttl,omitempty"`
	// IdleTimeout ends the session once no command has run in it for
	// this long; 0: never.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Workspace is where the session's files live; the zero value is a
	// tmpfs of DefaultWorkspaceBytes at /workspace.
	Workspace Workspace `json:"workspace,omitzero"`
	// From makes the session from a snapshot (its id, or its name): the
	// snapshot's Spec and Workspace (leave both zero), and a copy of its
	// files in the workspace.
	From string `json:"from,omitempty"`
	// Spec is the jail. Its limits bound every command together; its
	// Timeout, CPUTime, Env and Cwd are each command's defaults (Cwd
	// defaults to the workspace).
	Spec Spec `json:"spec"`
}

// Workspace types.
const (
	// WorkspaceTmpfs is a tmpfs at /workspace, owned by the workload's
	// user. Its pages are memory: with a memory limit they count against
	// the session's, files and processes together.
	WorkspaceTmpfs = "tmpfs"
	// WorkspaceDir is a directory of the host's, made for the session in
	// the workspace directory (Sessions.WorkspaceDir), bound read-write
	// at /workspace and owned by the workload's user. Its size is
	// enforced with a project quota where the file system has them
	// (ext4 and xfs mounted with prjquota), else the session is refused
	// unless the Spec allows what cannot be enforced. It is removed with
	// the session.
	WorkspaceDir = "dir"
	// WorkspaceOverlay is a writable root, as far as the host's files
	// go: the system directories the default root binds read-only from
	// the host (/usr; see rootfs.OverlayDirs) become overlays whose changes (the upper
	// layers) and the workspace share one tmpfs, which counts against the
	// memory limit as a tmpfs workspace does. The host's root-owned files
	// show in them as the workload's own, so it can change any of them;
	// files of other host users it can read but not change. The rest of
	// the root (/etc's own files) stays read-only, and the layers can be
	// read at /.overlay. It needs root (only the host's root can make the
	// id-mapped mounts the lower layers are) and Linux 6.6 (an overlay
	// upper layer on tmpfs in a user namespace), and not a Spec.Root.
	// Entries the host's root keeps from others (a 0600 file, a 0700
	// directory) would be the workload's through the id map: they are
	// masked. /etc's binds stay read-only. A snapshot holds the
	// overlays' changes besides the workspace.
	WorkspaceOverlay = "overlay"
	// WorkspaceNone is no workspace: the session has the Spec's mounts
	// only.
	WorkspaceNone = "none"
)

// WorkspacePath is where a session's workspace is mounted.
const WorkspacePath = "/workspace"

// DefaultWorkspaceBytes is the size of a tmpfs workspace whose SizeBytes
// is 0; DefaultDirWorkspaceBytes that of a dir one: a workspace on the
// host's disk is never without a bound.
const (
	DefaultWorkspaceBytes    = 256 << 20
	DefaultDirWorkspaceBytes = 1 << 30
)

// Workspace is a session's writable place for files, mounted at
// /workspace, the default working directory of its commands.
type Workspace struct {
	// Type is "tmpfs" (the default), "dir" or "none".
	Type string `json:"type,omitempty"`
	// SizeBytes bounds the workspace; 0 means DefaultWorkspaceBytes
	// (tmpfs) or DefaultDirWorkspaceBytes (dir).
	SizeBytes int64 `json:"size_bytes,omitempty"`
}

// size returns the workspace's bound.
func (w Workspace) size() int64 {
	switch {
	case w.SizeBytes != 0:
		return w.SizeBytes
	case w.Type == WorkspaceDir:
		return DefaultDirWorkspaceBytes
	}
	return DefaultWorkspaceBytes
}

// ParseWorkspace parses the command line's "tmpfs[:SIZE]", "dir[:SIZE]"
// or "none".
func ParseWorkspace(unsafeArg string) (Workspace, error) {
	typ, size, hasSize := strings.Cut(unsafeArg, ":")
	w := Workspace{Type: typ}
	if hasSize {
		n, err := mounts.ParseSize(size)
		if err != nil {
			return Workspace{}, &SpecError{Field: "workspace", Value: unsafeArg, Err: err}
		}
		w.SizeBytes = n
	}
	return w, w.validate()
}

func (w Workspace) validate() error {
	switch w.Type {
	case "", WorkspaceTmpfs, WorkspaceDir, WorkspaceOverlay:
		if w.SizeBytes < 0 || w.SizeBytes > mounts.MaxTmpfsBytes {
			return &SpecError{Field: "workspace.size_bytes", Value: fmt.Sprint(w.SizeBytes), Err: fmt.Errorf("want 0 (the default) to %d", int64(mounts.MaxTmpfsBytes))}
		}
	case WorkspaceNone:
		if w.SizeBytes != 0 {
			return &SpecError{Field: "workspace.size_bytes", Value: fmt.Sprint(w.SizeBytes), Err: errors.New("a size needs a workspace")}
		}
	default:
		return &SpecError{Field: "workspace.type", Value: w.Type, Err: errors.New("want tmpfs, dir, overlay or none")}
	}
	return nil
}

// apply returns the Spec of a session with workspace w: a tmpfs at
// WorkspacePath, or a bind of the host directory hostDir there (dir),
// and the default working directory there.
func (w Workspace) apply(spec Spec, hostDir string) (Spec, error) {
	if w.Type == WorkspaceNone {
		return spec, nil
	}
	for _, m := range spec.Mounts {
		if path.Clean(m.Target) == WorkspacePath || strings.HasPrefix(m.Target, WorkspacePath+"/") {
			return Spec{}, &SpecError{Field: "mounts", Value: m.Target, Err: errors.New("is the session's workspace (use workspace none to mount your own there)")}
		}
	}
	switch w.Type {
	case WorkspaceOverlay:
		if spec.Root != "" {
			return Spec{}, &SpecError{Field: "workspace.type", Value: w.Type, Err: errors.New("is an overlay over the default root's system directories, and a root directory has none")}
		}
		spec.overlayBytes = w.size()
	case WorkspaceDir:
		spec.Mounts = append(append([]mounts.Mount{}, spec.Mounts...), mounts.Mount{Type: mounts.Bind, Source: hostDir, Target: WorkspacePath})
	default:
		spec.Mounts = append(append([]mounts.Mount{}, spec.Mounts...), mounts.Mount{Type: mounts.Tmpfs, Target: WorkspacePath, SizeBytes: w.size()})
	}
	if spec.Cwd == "" {
		spec.Cwd = WorkspacePath
	}
	return spec, nil
}

// SessionUpdate is what [Session.Update] changes of a session: each field
// that is not nil.
type SessionUpdate struct {
	// Labels replace the session's.
	Labels map[string]string `json:"labels,omitempty"`
	// Env and Cwd replace the defaults of its commands.
	Env []string `json:"env,omitempty"`
	Cwd *string  `json:"cwd,omitempty"`
	// TTL replaces the session's TTL, counted as at create from when the
	// session started (so it may lengthen or shorten it; one that has
	// already passed is refused); 0 removes it. IdleTimeout replaces the
	// idle timeout (0: none), counted from the end of this update, which
	// is activity. Both are its PID 1's kernel timers, changed through its
	// control socket: a session made by a jail older than this field
	// answers ErrNotSupported.
	TTL         *time.Duration `json:"ttl,omitempty"`
	IdleTimeout *time.Duration `json:"idle_timeout,omitempty"`
}

// ValidSessionID reports whether id can name a session: 1 to 63 of
// [A-Za-z0-9_.-], starting with a letter or digit.
func ValidSessionID(id string) bool { return validSessionID(id) }

// validSessionID reports whether id is 1 to 63 of [A-Za-z0-9_.-], starting
// with a letter or digit: a session id, or a label key. (Not a regexp: the
// {0,62} repeat made compiling one cost 0.15 ms of every jail process's
// start.)
func validSessionID(id string) bool {
	if len(id) == 0 || len(id) > 63 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validate checks the parts of a SessionSpec that are not its Spec.
func (s *SessionSpec) validate() error {
	if s.ID != "" && !validSessionID(s.ID) {
		return &SpecError{Field: "id", Value: s.ID, Err: fmt.Errorf("want 1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit")}
	}
	for k := range s.Labels {
		if k == "" || len(k) > 63 || !validSessionID(k) {
			return &SpecError{Field: "labels", Value: k, Err: fmt.Errorf("a label key is 1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit")}
		}
	}
	if s.TTL < 0 {
		return &SpecError{Field: "ttl", Value: s.TTL.String(), Err: fmt.Errorf("is negative")}
	}
	if s.IdleTimeout < 0 {
		return &SpecError{Field: "idle_timeout", Value: s.IdleTimeout.String(), Err: fmt.Errorf("is negative")}
	}
	return s.Workspace.validate()
}

// commandSpec returns the Spec of a command of a session: the session's,
// with the fields a command may set (Env, Cwd, Timeout, CPUTime,
// KillGrace, OutputLimitBytes) taken from cmd, checked. A command that
// changes any other field is refused, naming it: the jail is built, and
// a change would silently not happen.
func commandSpec(session, cmd Spec) (Spec, error) {
	spec := session
	spec.Env, spec.Cwd, spec.Timeout, spec.CPUTime, spec.KillGrace, spec.OutputLimitBytes =
		cmd.Env, cmd.Cwd, cmd.Timeout, cmd.CPUTime, cmd.KillGrace, cmd.OutputLimitBytes
	// What no caller can set is the session's: the overlay's fields,
	// which the state file does not hold (a Spec read from it has them
	// zero; one of a session being made has them set).
	cmd.overlayBytes, cmd.overlayTree = session.overlayBytes, session.overlayTree
	if !reflect.DeepEqual(spec, cmd) {
		field := "spec"
		t := reflect.TypeFor[Spec]()
		a, b := reflect.ValueOf(spec), reflect.ValueOf(cmd)
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				field, _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
				break
			}
		}
		return Spec{}, &SpecError{Field: field, Value: "", Err: errors.New("is the session's: a command may set only env, cwd, timeout, cpu_time, kill_grace and output_limit_bytes")}
	}
	return spec, spec.validateProcess()
}

// newSessionID returns a random id.
func newSessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Session states, as [SessionInfo.State] reports them.
const (
	SessionRunning = "running"
	SessionPaused  = "paused"
	// SessionExited: its PID 1 is gone (a deadline passed, or it was
	// killed); the next operation on it, or `jail session gc`, removes
	// what it left.
	SessionExited = "exited"
)

// SessionInfo is the document `jail session inspect --json` prints.
type SessionInfo struct {
	// Schema is "jail.session/v1".
	Schema string `json:"schema"`
	ID     string `json:"id"`
	// State is running, paused or exited.
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
	// PID is the session's PID 1, in the host's PID namespace.
	PID       int       `json:"pid"`
	CreatedAt time.Time `json:"created_at"`
	// TTLMS and IdleTimeoutMS are the deadlines, 0 for none.
	TTLMS         int64 `json:"ttl_ms"`
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
	// ExpiresAt is when the TTL ends the session, or null.
	ExpiresAt *time.Time `json:"expires_at"`
	// Usage is what the session's cgroup measured, or null without one.
	Usage *SessionUsage `json:"usage"`
	// Workspace is the session's workspace, or null without one.
	Workspace *WorkspaceInfo `json:"workspace"`
	// Isolation says what is in force, as in a run's report.
	Isolation Isolation `json:"isolation"`
	// Defaults are what a command of the session starts with unless it
	// says otherwise (SessionUpdate changes them).
	Defaults CommandDefaults `json:"defaults"`
	// Pool is set only in jail serve's answer to a create that named a
	// warm pool: "hit" (the session was a ready member) or "miss" (it was
	// made cold).
	Pool string `json:"pool,omitempty"`
}

// CommandDefaults are a session's commands' environment and working
// directory.
type CommandDefaults struct {
	Env []string `json:"env"`
	Cwd string   `json:"cwd"`
}

// WorkspaceInfo describes a session's workspace.
type WorkspaceInfo struct {
	// Type is "tmpfs" or "dir".
	Type string `json:"type"`
	// Path is where commands see it.
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	// HostDir is a dir workspace's directory on the host.
	HostDir string `json:"host_dir,omitempty"`
	// UsedBytes is what its files take: for tmpfs as statfs(2) counts it
	// inside the jail, for dir as its project quota does; null when it
	// could not be asked (a paused or ended session, a dir workspace
	// without a quota).
	UsedBytes *int64 `json:"used_bytes"`
}

// SessionUsage is what a session used so far, every command and orphan
// together, from its cgroup.
type SessionUsage struct {
	CPUUserMS   int64 `json:"cpu_user_ms"`
	CPUSystemMS int64 `json:"cpu_system_ms"`
	// MemoryPeakBytes and PidsPeak are null where the kernel does not say.
	MemoryPeakBytes *int64 `json:"memory_peak_bytes"`
	PidsPeak        *int64 `json:"pids_peak"`
	OOMKills        int64  `json:"oom_kills"`
}

// sessionState is a session's state file: what its creator knew and what
// a command needs to join it. It is written once, atomically, by Create
// (Paused changes with Pause and Resume).
type sessionState struct {
	Schema      string            `json:"schema"`
	ID          string            `json:"id"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	TTL         time.Duration     `json:"ttl"`
	IdleTimeout time.Duration     `json:"idle_timeout"`
	Workspace   Workspace         `json:"workspace"`
	// WorkspaceDir is a dir workspace's host directory, and
	// WorkspaceProject its project id when a quota bounds it (0: none).
	WorkspaceDir     string `json:"workspace_dir,omitempty"`
	WorkspaceProject uint32 `json:"workspace_project,omitempty"`
	// Parent is the snapshot the session was made from or last restored
	// to.
	Parent string `json:"parent,omitempty"`
	Paused bool   `json:"paused,omitempty"`
	// Creating: the session's files are still being put in (create
	// --from); one whose maker died meanwhile is removed, not used.
	Creating bool `json:"creating,omitempty"`
	// PID, StartTime and PIDNS identify the session's PID 1: a pid alone
	// could be another process by now (firejail CVE-2022-31214).
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	PIDNS     uint64 `json:"pidns"`
	// CallerPIDNS is the PID namespace PID is numbered in, its creator's:
	// a caller in another one sees another process, or none, by that pid,
	// and must not take the session for ended. 0: not known (an older
	// state).
	CallerPIDNS uint64 `json:"caller_pidns,omitempty"`
	// Control is the device and inode of the session's control socket
	// (ctl.sock) as its creator made it: a caller that finds another file
	// there (the directory seen through an overlay's upper layer, a network
	// file system) cannot take a refused connection for PID 1's end.
	Control [2]uint64 `json:"control,omitzero"`
	// Spec is the session's, for each command's defaults.
	Spec Spec `json:"spec"`
	// Join and Process are the templates of each command's plans.
	Join    nsexec.Plan    `json:"join"`
	Process nsexec.Process `json:"process"`
	// Isolation is the session's report.
	Isolation Isolation `json:"isolation"`
	// CgroupName and Cgroup are the session's group, none when empty.
	CgroupName string            `json:"cgroup_name,omitempty"`
	Cgroup     []cgroup.DirState `json:"cgroup,omitempty"`
	// NetLease is an egress session's lease index: its veth, chains and
	// lease, handed to its PID 1, are removed once that is gone; NetMark
	// its conntrack mark.
	NetLease *int   `json:"net_lease,omitempty"`
	NetMark  uint32 `json:"net_mark,omitempty"`
	// Layers are an overlay workspace's overlays, by target ("/usr").
	Layers []string `json:"layers,omitempty"`
	// LowerSlots: each overlay has a mount point for a snapshot's layer
	// tree (rootfs.Overlay), where a restore puts one; a session made
	// before there were any has not, and is restored by copy.
	LowerSlots bool `json:"lower_slots,omitempty"`
	// LowerTree is the layer tree of the snapshot the overlays have as a
	// lower layer (made from, or restored to), and LowerMark the record
	// in that snapshot that says so (see useSnapshot).
	LowerTree string `json:"lower_tree,omitempty"`
	LowerMark string `json:"lower_mark,omitempty"`
}

const sessionStateSchema = "jail.session-state/v1"
