package jail

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/jailfs"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
)

// DefaultSnapshotDir returns where snapshots are kept for this user:
// $JAIL_SNAPSHOT_DIR, else /var/lib/jail/snapshots for root, else
// $XDG_DATA_HOME/jail/snapshots ($HOME/.local/share/jail/snapshots).
// Unlike sessions' state, snapshots outlive a reboot.
func DefaultSnapshotDir() (string, error) {
	if d := os.Getenv("JAIL_SNAPSHOT_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/jail/snapshots", nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "jail", "snapshots"), nil
	}
	if h := os.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "jail", "snapshots"), nil
	}
	return "", errors.New("no directory for snapshots: set XDG_DATA_HOME, HOME or JAIL_SNAPSHOT_DIR (or --snapshot-dir)")
}

// snapDir returns the snapshot directory, made 0700 if missing, refusing
// one another user could write to or that is a symlink.
func (m *Sessions) snapDir() (string, error) {
	return ownDir("snapshot directory", m.SnapshotDir, DefaultSnapshotDir, 0o700)
}

// Snapshot copies the session's workspace while every process of the
// session is stopped (the cgroup freezer), and returns its description.
// The copy is a tar stream of the workspace (modes, times, symlinks), made
// in the jail by a files helper, which is the only process of the session
// that runs meanwhile; FreezeMS says how long the others were stopped. No
// memory is saved: a snapshot is files only.
//
// It needs the session's cgroup (an error wrapping ErrNotSupported
// otherwise) and a running session: a paused one is refused.
func (s *Session) Snapshot(ctx context.Context, name string) (_ *SnapshotInfo, retErr error) {
	store, err := s.m.snapDir()
	if err != nil {
		return nil, err
	}
	dir, st, lock, err := s.lockLive()
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	switch {
	case st.Paused:
		return nil, fmt.Errorf("session %s is paused: resume it (a snapshot freezes it while it copies): %w", s.id, ErrNotRunning)
	case st.Workspace.Type == WorkspaceNone:
		return nil, fmt.Errorf("session %s has no workspace to snapshot: %w", s.id, ErrNotSupported)
	case st.CgroupName == "" || len(st.Cgroup) == 0:
		return nil, fmt.Errorf("session %s: %w: %w", s.id, errNoFreeze, ErrNotSupported)
	}
	info := &SnapshotInfo{Schema: SnapshotSchema, ID: "snap-" + newSessionID(), Name: name, SessionID: s.id, Parent: st.Parent,
		SpecHash: specHash(st.Spec, st.Workspace), Consistency: ConsistencyFrozen, Workspace: st.Workspace}
	sdir := filepath.Join(store, info.ID)
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = jailfs.RemoveTree(sdir)
		}
	}()
	// Held until the snapshot is whole: Snapshots removes a snapshot
	// without its description only when no one holds this (its maker
	// died).
	making, err := lockFile(sdir, unix.LOCK_EX, false, true)
	if err != nil {
		return nil, err
	}
	defer making.Close()
	ws, tree, err := reflinkable(st, sdir)
	if err != nil {
		return nil, err
	}
	if ws != nil {
		defer ws.Close()
		defer tree.Close()
	}
	var out *os.File // the workspace's tar, unless it is reflinked
	defer func() {
		if out != nil {
			out.Close()
		}
	}()
	var layerOut *os.File
	if len(st.Layers) > 0 {
		if layerOut, err = os.OpenFile(filepath.Join(sdir, layerFile), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600); err != nil {
			return nil, err
		}
		defer layerOut.Close()
	}

	g, err := cgroup.Load(st.Cgroup, st.CgroupName)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	// Everything of the session stops: PID 1's group and each command's.
	// The helper's group is made after this, and runs. The mark says so to
	// whoever takes the lock next, should this process die frozen.
	if err := os.WriteFile(filepath.Join(dir, frozenMark), nil, 0o600); err != nil {
		return nil, err
	}
	t0 := time.Now()
	thaw, err := g.FreezeChildren()
	if err != nil {
		_ = os.Remove(filepath.Join(dir, frozenMark)) // FreezeChildren thawed what it froze
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("session %s: %w: %w", s.id, errNoFreeze, ErrNotSupported)
		}
		return nil, fmt.Errorf("session %s: freeze: %w", s.id, err)
	}
	var rep *jailfs.Reply
	if ws != nil {
		var n, b int64
		switch n, b, _, err = jailfs.CloneTree(ws, tree); {
		case err == nil:
			rep, info.Copy = &jailfs.Reply{Bytes: b, Entries: n}, CopyReflink
		case jailfs.NoReflink(err): // ext4, say: copied as on tmpfs
			err = jailfs.RemoveTree(tree.Name())
		}
	}
	if err == nil && rep == nil {
		info.Copy = CopyTar
		if out, err = os.OpenFile(filepath.Join(sdir, "workspace.tar"), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600); err == nil {
			rep, err = s.fileOpHeld(ctx, &heldSession{dir, st}, false, jailfs.Request{Op: jailfs.OpGetTar, Path: WorkspacePath}, nil, out)
		}
	}
	if err == nil && len(st.Layers) > 0 {
		// The overlays' changes, at the same frozen moment.
		var lrep *jailfs.Reply
		if lrep, err = s.fileOpHeld(ctx, &heldSession{dir, st}, false,
			jailfs.Request{Op: jailfs.OpGetTar, Path: rootfs.OverlayDir + "/upper", Layers: st.Layers}, nil, layerOut); err == nil {
			rep.Bytes, rep.Entries = rep.Bytes+lrep.Bytes, rep.Entries+lrep.Entries
			info.Layers = st.Layers
		}
	}
	terr := thaw()
	if terr == nil {
		terr = os.Remove(filepath.Join(dir, frozenMark))
	}
	info.FreezeMS = time.Since(t0).Milliseconds()
	info.CreatedAt = t0.UTC()
	if err != nil {
		return nil, err
	}
	if terr != nil {
		return nil, fmt.Errorf("session %s: thaw: %w", s.id, terr)
	}
	if out != nil {
		if err := out.Sync(); err != nil {
			return nil, err
		}
	} else if err := unix.Syncfs(int(tree.Fd())); err != nil { // the snapshot's file system: its files, not its data, are new
		return nil, err
	}
	if layerOut != nil {
		// The changes, over those of the session's own lower layer, as
		// the tree the sessions made from this one have as theirs.
		if err := buildLayerTree(sdir, st.LowerTree, st.Layers, layerOut); err != nil {
			return nil, err
		}
	}
	info.Bytes, info.Files = rep.Bytes, rep.Entries
	if err := writeJSON(sdir, "snapshot.json", &snapshotMeta{SnapshotInfo: *info, Spec: withoutWorkspace(st.Spec)}); err != nil {
		return nil, err
	}
	s.m.log().Info("snapshot taken", "id", info.ID, "session", s.id, "bytes", info.Bytes, "freeze_ms", info.FreezeMS)
	return info, nil
}

// reflinkable opens, for a dir workspace on the file system of the
// snapshot directory sdir, the workspace and a new directory for its
// reflinked copy; nil, nil for any other. Whether the file system shares
// blocks is learnt from the first file (jailfs.NoReflink).
func reflinkable(st *sessionState, sdir string) (ws, tree *os.File, err error) {
	if st.Workspace.Type != WorkspaceDir || !isWorkspace(st.WorkspaceDir, st.ID) {
		return nil, nil, nil
	}
	var a, b unix.Stat_t
	if unix.Stat(st.WorkspaceDir, &a) != nil || unix.Stat(sdir, &b) != nil || a.Dev != b.Dev {
		return nil, nil, nil
	}
	if ws, err = os.OpenFile(st.WorkspaceDir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err != nil {
		return nil, nil, err
	}
	p := filepath.Join(sdir, "workspace")
	if err = os.Mkdir(p, 0o700); err == nil {
		tree, err = os.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		ws.Close()
		return nil, nil, err
	}
	return ws, tree, nil
}

// workspaceArchive returns snapshot sdir's workspace as a tar stream: its
// tar, or its reflinked tree archived as a files helper archives (never
// following a symlink).
func workspaceArchive(sdir string, meta *snapshotMeta) (io.ReadCloser, error) {
	if meta.Copy != CopyReflink {
		return os.Open(filepath.Join(sdir, "workspace.tar"))
	}
	tree, err := os.OpenFile(filepath.Join(sdir, "workspace"), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, _, err := jailfs.ArchiveDir(tree, pw)
		tree.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// snapshot reads snapshot id (or, failing that, the one snapshot named
// id).
func (m *Sessions) snapshot(id string) (string, *snapshotMeta, error) {
	store, err := m.snapDir()
	if err != nil {
		return "", nil, err
	}
	if !validSnapshotID(id) {
		list, err := m.Snapshots()
		if err != nil {
			return "", nil, err
		}
		var found []string
		for _, s := range list {
			if s.Name == id {
				found = append(found, s.ID)
			}
		}
		switch len(found) {
		case 0:
			return "", nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
		case 1:
			id = found[0]
		default:
			return "", nil, fmt.Errorf("snapshot %q: %d snapshots have that name (%s): give an id", id, len(found), strings.Join(found, ", "))
		}
	}
	sdir := filepath.Join(store, id)
	b, err := os.ReadFile(filepath.Join(sdir, "snapshot.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", nil, err
	}
	var meta snapshotMeta
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil || meta.Schema != SnapshotSchema || meta.ID != id {
		return "", nil, fmt.Errorf("snapshot %s: not a snapshot's description (%v)", id, err)
	}
	return sdir, &meta, nil
}

// Snapshots lists the snapshots, oldest first.
func (m *Sessions) Snapshots() ([]*SnapshotInfo, error) {
	store, err := m.snapDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		return nil, err
	}
	out := []*SnapshotInfo{}
	for _, e := range entries {
		if !validSnapshotID(e.Name()) {
			continue
		}
		_, meta, err := m.snapshot(e.Name())
		if err == nil {
			out = append(out, &meta.SnapshotInfo)
			continue
		}
		// No description: one being made, or one whose maker died
		// (SIGKILL) before it was whole, which no one holds.
		sdir := filepath.Join(store, e.Name())
		if _, serr := os.Lstat(filepath.Join(sdir, "snapshot.json")); errors.Is(serr, fs.ErrNotExist) {
			if l, lerr := lockFile(sdir, unix.LOCK_EX, false, true); lerr == nil {
				_ = jailfs.RemoveTree(sdir)
				l.Close()
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// SnapshotInfo returns the description of snapshot id (an id, or the name
// of exactly one snapshot).
func (m *Sessions) SnapshotInfo(id string) (*SnapshotInfo, error) {
	_, meta, err := m.snapshot(id)
	if err != nil {
		return nil, err
	}
	return &meta.SnapshotInfo, nil
}

// RemoveSnapshot removes snapshot id. Sessions made from it are not
// touched: they have their own copy of its workspace. A snapshot of an
// overlay workspace whose layer tree a session that is up has as its
// overlays' lower layer (made from it, or restored to it) is refused,
// with an error wrapping ErrBusy that names the sessions.
func (m *Sessions) RemoveSnapshot(id string) error {
	sdir, meta, err := m.snapshot(id)
	if err != nil {
		return err
	}
	lock, err := lockFile(sdir, unix.LOCK_EX, true, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if lock != nil {
		defer lock.Close()
	}
	users, err := snapshotUsers(sdir)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("snapshot %s is the lower layer of the overlays of session %s: remove it, or restore it to another snapshot, first: %w",
			meta.ID, strings.Join(users, ", "), ErrBusy)
	}
	return jailfs.RemoveTree(sdir) // a reflinked tree may hold read-only directories
}

// ExportSnapshot writes snapshot id to w as an OCI image layer: a tar
// stream whose entries are the workspace's under workspace/, which
// `docker import` takes (a workspace file named .wh.* fails it: it would
// read as a whiteout; setuid and setgid bits are dropped), and, for an
// overlay workspace, first its overlays' changes from the root, with their
// whiteouts (.wh. entries).
func (m *Sessions) ExportSnapshot(id string, w io.Writer) error {
	sdir, meta, err := m.snapshot(id)
	if err != nil {
		return err
	}
	f, err := workspaceArchive(sdir, meta)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(w)
	if len(meta.Layers) > 0 {
		if err := exportLayers(tw, sdir, meta); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "workspace/", Mode: 0o755, ModTime: time.Now(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := copyTar(tw, tar.NewReader(f), "workspace/", id, nil); err != nil {
		return err
	}
	return tw.Close()
}

// exportLayers writes the overlays' changes of snapshot sdir to tw as
// image layer entries: its layer tree read as one, or, for a snapshot
// taken before snapshots had one, its layer file.
func exportLayers(tw *tar.Writer, sdir string, meta *snapshotMeta) error {
	t, err := openDirNoFollow(filepath.Join(sdir, layerTreeDir))
	if errors.Is(err, fs.ErrNotExist) {
		lf, err := os.Open(filepath.Join(sdir, layerFile))
		if err != nil {
			return err
		}
		defer lf.Close()
		return copyTar(tw, tar.NewReader(lf), "", meta.ID, nil)
	}
	if err != nil {
		return err
	}
	defer t.Close()
	pr, pw := io.Pipe()
	go func() {
		_, _, err := jailfs.ArchiveLayerTree(t, meta.Layers, pw)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	// The tree's entries are the host root's; in the jail they are its
	// workload's, and so in the image, as in its workspace/.
	uid, gid := 1000, 1000
	if meta.Spec.UID != nil {
		uid = int(*meta.Spec.UID)
	}
	if meta.Spec.GID != nil {
		gid = int(*meta.Spec.GID)
	}
	return copyTar(tw, tar.NewReader(pr), "", meta.ID, &[2]int{uid, gid})
}

// copyTar copies the entries of tr to tw, their names (and hard links'
// targets) under prefix, without setuid or setgid bits (jail mounts
// everything nosuid; an image would not). An image layer reads a name
// starting with ".wh." as a whiteout: a file of the workspace (prefix
// set) named so cannot be exported as what it is, and fails the export.
// With owner, every entry is given its uid and gid.
func copyTar(tw *tar.Writer, tr *tar.Reader, prefix, id string, owner *[2]int) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		if prefix != "" && strings.HasPrefix(path.Base(h.Name), ".wh.") {
			return fmt.Errorf("snapshot %s: %s%s: a name starting with .wh. cannot be kept in an image layer (it reads as a whiteout)", id, prefix, h.Name)
		}
		h.Mode &^= 0o6000
		if owner != nil {
			h.Uid, h.Gid, h.Uname, h.Gname = owner[0], owner[1], "", ""
		}
		h.Name = prefix + h.Name
		if h.Typeflag == tar.TypeLink {
			h.Linkname = prefix + h.Linkname
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// Restore brings the session's workspace back to snapshot id: every
// command running in the session is killed (with everything it started;
// PID 1 stays), the workspace is emptied and the snapshot's files are put
// back, in the jail, as its workload's user. The snapshot must have been
// taken of a session of the same Spec. An overlay workspace's overlays
// are made again by PID 1 with empty upper layers and the snapshot's
// layer tree as their lower layer (restoreLayers); one made by an older
// jail is refused.
func (s *Session) Restore(ctx context.Context, id string) error {
	sdir, meta, err := s.m.snapshot(id)
	if err != nil {
		return err
	}
	dir, st, lock, err := s.lockLive()
	if err != nil {
		return err
	}
	defer lock.Close()
	if st.Paused {
		return fmt.Errorf("session %s is paused: resume it first: %w", s.id, ErrNotRunning)
	}
	if st.Workspace.Type == WorkspaceNone {
		return fmt.Errorf("session %s has no workspace to restore: %w", s.id, ErrNotSupported)
	}
	if h := specHash(st.Spec, st.Workspace); h != meta.SpecHash {
		return &SpecError{Field: "snapshot", Value: meta.ID, Err: fmt.Errorf("was taken of a session of another Spec (session %s): restore it into a session made from it (create --from)", meta.SessionID)}
	}
	for _, l := range meta.Layers {
		if !slices.Contains(st.Layers, l) {
			return &SpecError{Field: "snapshot", Value: meta.ID, Err: fmt.Errorf("holds the changes of overlays %v, and session %s has %v: make a session from it (create --from)", meta.Layers, s.id, st.Layers)}
		}
	}
	if len(st.Layers) > 0 && !st.LowerSlots {
		// Its PID 1 is of a jail from before restores kept an overlay's
		// masks: made again by it, the overlays would show the host's
		// private files.
		return fmt.Errorf("session %s was made by an older jail, whose PID 1 cannot make its overlays again safely: make a new session from the snapshot (create --from): %w", s.id, ErrNotSupported)
	}
	if st.CgroupName != "" {
		g, err := cgroup.Load(st.Cgroup, st.CgroupName)
		if err != nil {
			return err
		}
		names, err := g.ChildNames()
		for _, n := range names {
			if n == "init" {
				continue
			}
			if c, cerr := g.Child(n); cerr == nil {
				err = errors.Join(err, c.Kill())
			}
		}
		g.Close()
		if err != nil {
			return fmt.Errorf("session %s: ending its commands: %w", s.id, err)
		}
	}
	if len(st.Layers) > 0 && st.CgroupName == "" {
		// Its commands could not all be killed first.
		return fmt.Errorf("session %s has an overlay workspace and no cgroup to end its commands with: %w", s.id, ErrNotSupported)
	}
	if len(st.Layers) > 0 {
		if err := s.restoreLayers(dir, st, sdir, meta); err != nil {
			return err
		}
		if err := writeState(dir, st); err != nil { // the lower layer it has now
			return err
		}
	}
	f, err := workspaceArchive(sdir, meta)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := s.fileOpHeld(ctx, &heldSession{dir, st}, false, jailfs.Request{Op: jailfs.OpPutTar, Path: WorkspacePath, Clear: true, KeepLinks: true}, f, nil); err != nil {
		return err
	}
	st.Parent = meta.ID
	if err := writeState(dir, st); err != nil {
		return err
	}
	s.st.Parent = meta.ID
	s.m.log().Info("session restored", "id", s.id, "snapshot", meta.ID)
	return nil
}

// restoreLayers brings the overlays of session st back to snapshot sdir:
// undoing a change to a host file takes its copy out of the upper layer,
// which an overlay does not allow while mounted, so PID 1 makes the
// overlays again with empty upper layers, and the snapshot's layer tree
// as their lower layer: nothing is copied. The caller holds the lock and
// has ended every command; st is updated, not written.
func (s *Session) restoreLayers(dir string, st *sessionState, sdir string, meta *snapshotMeta) error {
	tree, err := layerTree(sdir, meta)
	if err != nil {
		return err
	}
	mark, err := useSnapshot(sdir, filepath.Dir(dir), s.id)
	if err != nil {
		return err
	}
	trees, err := lowerTrees(tree, st.Layers, st)
	if err != nil {
		if mark != st.LowerMark {
			_ = os.Remove(mark)
		}
		return err
	}
	err = s.resetLayers(dir, trees)
	closeAll(trees)
	if err != nil {
		// PID 1 may have the tree now, or have ended the session: the
		// record stays, and goes with the session (snapshotUsers).
		return err
	}
	if st.LowerMark != "" && st.LowerMark != mark {
		if err := os.Remove(st.LowerMark); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.m.log().Warn("restore: the record in the snapshot restored from", "err", err)
		}
	}
	st.LowerTree, st.LowerMark = tree, mark
	return nil
}

// resetLayers has the session's PID 1 make its overlays again with empty
// upper layers, and trees (one per overlay, or none) as their snapshot
// lower layers (nsexec.ResetLayers). The caller holds the lock and has
// ended every command.
func (s *Session) resetLayers(dir string, trees []*os.File) error {
	ctl, err := dialControl(filepath.Join(dir, "ctl.sock"))
	if err != nil {
		return fmt.Errorf("session %s: %w", s.id, err)
	}
	defer ctl.Close()
	// Emptying the upper layers takes as long as their files: more than
	// dialControl's 5 s for a big tree.
	_ = unix.SetsockoptTimeval(int(ctl.Fd()), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 120})
	var oob []byte
	if len(trees) > 0 {
		fds := make([]int, len(trees))
		for i, t := range trees {
			fds[i] = int(t.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(int(ctl.Fd()), nsexec.ResetLayers(), oob, nil, 0); err != nil {
		return fmt.Errorf("session %s: control socket: %w", s.id, err)
	}
	var b [1]byte // dialControl set a receive timeout
	n, err := ctl.Read(b[:])
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, unix.EAGAIN):
		return fmt.Errorf("session %s: its PID 1 did not answer in 120 s (a session made by a jail older than this, or a PID 1 that is stuck): the session may be unusable: remove it: %w", s.id, ErrNotSupported)
	case err != nil || n != 1:
		return fmt.Errorf("session %s: control socket: no answer (%v): %w", s.id, err, ErrNotRunning)
	case b[0] != '1':
		return fmt.Errorf("session %s: its PID 1 could not make its overlays again (with every mount the plan put on them), and ended the session: %w", s.id, ErrNotRunning)
	}
	return nil
}

// Fork takes a snapshot of the session now and makes n sessions from it,
// each with the session's Spec, labels and deadlines and a copy of its
// workspace. It returns the snapshot and one result per fork: a session,
// or why that one could not be made. The snapshot is never older than the
// call.
func (s *Session) Fork(ctx context.Context, n int) (*SnapshotInfo, []ForkResult, error) {
	if n < 1 || n > 1000 {
		return nil, nil, &SpecError{Field: "n", Value: fmt.Sprint(n), Err: errors.New("want 1 to 1000 forks")}
	}
	snap, err := s.Snapshot(ctx, "fork of "+s.id)
	if err != nil {
		return nil, nil, err
	}
	out := make([]ForkResult, n)
	for i := range out {
		ns, err := s.m.Create(ctx, SessionSpec{From: snap.ID, Labels: s.st.Labels, TTL: s.st.TTL, IdleTimeout: s.st.IdleTimeout})
		out[i] = ForkResult{Session: ns, Err: err}
	}
	return snap, out, nil
}

// snapshotFiles is what a session made from a snapshot is given: its
// workspace as a tar stream, the directory of its reflinked copy (for a
// clone into a new dir workspace, "" when it has none), and its
// overlays' layer tree ("" when it has none), with the overlays it is of.
type snapshotFiles struct {
	ws        io.ReadCloser
	tree      string
	lowerTree string
	layers    []string
	sdir, id  string
}

func (f *snapshotFiles) close() {
	if f.ws != nil {
		f.ws.Close()
	}
}

// fromSnapshot fills a SessionSpec that names a snapshot (From) with the
// snapshot's Spec and workspace, and returns its files.
func (m *Sessions) fromSnapshot(ss *SessionSpec) (*snapshotFiles, error) {
	sdir, meta, err := m.snapshot(ss.From)
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(ss.Spec, Spec{}) || ss.Workspace != (Workspace{}) {
		return nil, &SpecError{Field: "from", Value: ss.From, Err: errors.New("a session made from a snapshot has the snapshot's spec and workspace: give neither")}
	}
	ss.Spec, ss.Workspace = meta.Spec, meta.Workspace
	f := &snapshotFiles{id: meta.ID, sdir: sdir, layers: meta.Layers}
	if len(meta.Layers) > 0 {
		if f.lowerTree, err = layerTree(sdir, meta); err != nil {
			return nil, err
		}
	}
	if f.ws, err = workspaceArchive(sdir, meta); err != nil {
		return nil, err
	}
	if meta.Copy == CopyReflink {
		f.tree = filepath.Join(sdir, "workspace")
	}
	return f, nil
}

// cloneInto copies a reflinked snapshot's tree into the new dir
// workspace wdir, from the host, before the session starts, after its
// quota (its files inherit the project). It reports whether it did: on
// a file system that cannot share those blocks, the files are put in
// through the jail as from a tar.
func (f *snapshotFiles) cloneInto(wdir string) (bool, error) {
	if f.tree == "" || wdir == "" {
		return false, nil
	}
	src, err := os.OpenFile(f.tree, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer src.Close()
	dst, err := os.OpenFile(wdir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer dst.Close()
	switch _, _, _, err := jailfs.CloneTree(src, dst); {
	case err == nil:
		return true, nil
	case jailfs.NoReflink(err):
		return false, jailfs.ClearDir(dst) // what it made before it knew
	default:
		return false, err
	}
}

// layerFile, in a snapshot of an overlay workspace, is its overlays'
// changes as one OCI image layer (jailfs.Root.ArchiveLayers).
const layerFile = "layer.tar"

// frozenMark, in a session's state directory, says a snapshot froze the
// session's groups; it is removed once they are thawed.
const frozenMark = "frozen-by-snapshot"

// thawAfterSnapshot thaws a session that a snapshot froze and did not
// thaw: its process died (SIGKILL) between the two. Whoever takes the
// session's lock next finds the mark (the lock is free, so no snapshot
// runs) and thaws every child group: the session runs again, as it was.
func thawAfterSnapshot(dir string, st *sessionState) error {
	mark := filepath.Join(dir, frozenMark)
	if _, err := os.Lstat(mark); err != nil {
		return nil
	}
	if st.CgroupName != "" {
		g, err := cgroup.Load(st.Cgroup, st.CgroupName)
		if err != nil {
			return err
		}
		defer g.Close()
		if err := g.ThawChildren(); err != nil {
			return fmt.Errorf("session %s: thawing what a dead snapshot froze: %w", st.ID, err)
		}
	}
	if err := os.Remove(mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
