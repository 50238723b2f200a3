package jail

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jailrt/jail/mounts"
)

// SnapshotSchema is the value of [SnapshotInfo.Schema].
const SnapshotSchema = "jail.snapshot/v1"

// ConsistencyFrozen: every process of the session was stopped (cgroup
// freezer) while its files were copied, so each file is as it was between
// two system calls of the session's processes, never half written by one.
const ConsistencyFrozen = "frozen"

// How a snapshot's workspace was copied (SnapshotInfo.Copy).
const (
	// CopyTar: a files helper archived it in the jail, as a tar stream.
	CopyTar = "tar"
	// CopyReflink: a dir workspace on a file system that shares blocks
	// between files (xfs, btrfs) was copied from the host as a directory
	// tree whose files share their blocks with the workspace's (FICLONE):
	// the time the session is stopped goes by its number of files, not
	// their size.
	CopyReflink = "reflink"
)

// SnapshotInfo describes a snapshot of a session's files: what `jail
// session snapshot --json` and `jail snapshot inspect --json` print. A
// snapshot holds files only, never memory or processes: restoring one
// brings the workspace back, and starts no process.
type SnapshotInfo struct {
	// Schema is "jail.snapshot/v1".
	Schema string `json:"schema"`
	// ID names the snapshot: "snap-" and 12 hex digits.
	ID string `json:"id"`
	// Name is the caller's, or empty.
	Name string `json:"name"`
	// SessionID is the session it was taken of.
	SessionID string `json:"session_id"`
	// Parent is the snapshot that session was created from (create
	// --from, fork) or last restored to, or empty.
	Parent string `json:"parent"`
	// SpecHash is the SHA-256 of the session's Spec as JSON: a snapshot
	// is restored only into a session of the same Spec.
	SpecHash  string    `json:"spec_hash"`
	CreatedAt time.Time `json:"created_at"`
	// Bytes is the size of the copy (a tar stream of the workspace);
	// Files the number of its entries.
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
	// Consistency is "frozen" (ConsistencyFrozen).
	Consistency string `json:"consistency"`
	// FreezeMS is how long the session's processes were stopped.
	FreezeMS int64 `json:"freeze_ms"`
	// Workspace is the session's workspace.
	Workspace Workspace `json:"workspace"`
	// Copy is how the workspace was copied: CopyTar or CopyReflink.
	Copy string `json:"copy,omitempty"`
	// Layers, for an overlay workspace, are its overlays ("/usr"...),
	// whose changes the snapshot holds besides the workspace, as one OCI
	// image layer.
	Layers []string `json:"layers,omitempty"`
}

// snapshotMeta is a snapshot's file: its info, and the Spec a session
// made from it gets.
type snapshotMeta struct {
	SnapshotInfo
	Spec Spec `json:"spec"`
}

// specHash is the SHA-256, as JSON, of a session's Spec less its
// workspace mount (a dir workspace's source differs from session to
// session) and of its workspace's description.
func specHash(spec Spec, w Workspace) string {
	b, err := json.Marshal(struct {
		Spec      Spec      `json:"spec"`
		Workspace Workspace `json:"workspace"`
	}{withoutWorkspace(spec), w})
	if err != nil {
		panic(fmt.Sprintf("jail: a Spec that does not marshal: %v", err)) // plain data: never
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// validSnapshotID reports whether id names a snapshot: "snap-" and 12 hex
// digits.
func validSnapshotID(id string) bool {
	if len(id) != 17 || id[:5] != "snap-" {
		return false
	}
	_, err := hex.DecodeString(id[5:])
	return err == nil
}

// ForkResult is one session of [Sessions.Fork]: the session, or why it
// could not be made.
type ForkResult struct {
	Session *Session
	Err     error
}

// errNoFreeze explains a session that cannot be snapshotted consistently.
var errNoFreeze = errors.New("a snapshot freezes the session's processes, and this session has no cgroup to freeze (an unprivileged caller without cgroup delegation)")

// heldSession is a session whose lock the caller holds exclusively, for
// the files helper it starts meanwhile (Cmd.held).
type heldSession struct {
	dir string
	st  *sessionState
}

// withoutWorkspace returns a session's Spec less the workspace mount that
// Workspace.apply added (its last mount): what apply makes the same Spec
// of again, for a session made from a snapshot.
func withoutWorkspace(spec Spec) Spec {
	if n := len(spec.Mounts); n > 0 && spec.Mounts[n-1].Target == WorkspacePath &&
		(spec.Mounts[n-1].Type == mounts.Tmpfs || spec.Mounts[n-1].Type == mounts.Bind) {
		spec.Mounts = spec.Mounts[:n-1]
		if len(spec.Mounts) == 0 {
			spec.Mounts = nil
		}
	}
	return spec
}
