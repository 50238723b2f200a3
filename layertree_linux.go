package jail

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/jailfs"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
)

// A snapshot of an overlay workspace keeps its overlays' changes as a
// layer tree (jailfs.BuildLayerTree) in layerTreeDir: one directory per
// overlay, in the overlay's own format. A session made from the snapshot
// (create --from, fork) and one restored to it have that tree as a lower
// layer of their overlays, as it is, above the host's directory: nothing
// is copied, whatever its size; their upper layers start empty. A
// snapshot of such a session holds its tree's changes and its own (the
// tree's entries hard-linked, not copied), so no snapshot needs another.
//
// The tree is mounted read-only, id-mapped as the host's directories are
// (its entries are the host root's, so the workload's), at the overlay's
// lower mount point, rootfs.OverlayDir/lower/D. A snapshot some session
// has as a lower layer is not removed (usersDir).
const layerTreeDir = "layers"

// usersDir, in a snapshot with a layer tree, holds a record per session
// that has the tree as a lower layer: RemoveSnapshot refuses while one of
// them is up.
const usersDir = "users"

// snapshotUser is such a record: the session, by its state directory
// and id.
type snapshotUser struct {
	StateDir string `json:"state_dir"`
	ID       string `json:"id"`
}

// buildLayerTree makes the layer tree of snapshot sdir from layer (an
// image layer of overlays at layers, read from its start) over the tree
// base (the session's own lower tree; "" for none), syncs it and removes
// the layer file.
func buildLayerTree(sdir, base string, layers []string, layer *os.File) (retErr error) {
	dst := filepath.Join(sdir, layerTreeDir)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = jailfs.RemoveTree(dst)
		}
	}()
	d, err := openDirNoFollow(dst)
	if err != nil {
		return err
	}
	defer d.Close()
	var b *os.File
	if base != "" {
		if b, err = openDirNoFollow(base); err != nil {
			return fmt.Errorf("the lower layer tree %s: %w", base, err)
		}
		defer b.Close()
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, _, err := jailfs.BuildLayerTree(b, d, layers, bufio.NewReaderSize(layer, 1<<16)); err != nil {
		return fmt.Errorf("the snapshot's layer tree: %w", err)
	}
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return os.NewSyscallError("syncfs", err)
	}
	return os.Remove(layer.Name())
}

func openDirNoFollow(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// layerTree returns the layer tree of overlay snapshot sdir. A snapshot
// taken before snapshots had one (its layer file only) gets it first,
// under the snapshot's lock.
func layerTree(sdir string, meta *snapshotMeta) (string, error) {
	dst := filepath.Join(sdir, layerTreeDir)
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil
	}
	lock, err := lockFile(sdir, unix.LOCK_EX, true, false)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil // made meanwhile
	}
	lf, err := os.Open(filepath.Join(sdir, layerFile))
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", meta.ID, err)
	}
	defer lf.Close()
	if err := buildLayerTree(sdir, "", meta.Layers, lf); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", meta.ID, err)
	}
	return dst, nil
}

// useSnapshot records that session id of state directory base has the
// tree of snapshot sdir as a lower layer, and returns the record's path
// (the session's LowerMark, which removeWorkspace removes). It fails with
// ErrNotFound once the snapshot is being removed.
func useSnapshot(sdir, base, id string) (string, error) {
	lock, err := lockFile(sdir, unix.LOCK_SH, true, false)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("snapshot %s: %w", filepath.Base(sdir), ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if _, err := os.Lstat(filepath.Join(sdir, "snapshot.json")); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", filepath.Base(sdir), ErrNotFound)
	}
	users := filepath.Join(sdir, usersDir)
	if err := os.Mkdir(users, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if base, err = filepath.Abs(base); err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(base))
	mark := filepath.Join(users, fmt.Sprintf("%s-%x", id, h[:6]))
	b, err := json.Marshal(snapshotUser{StateDir: base, ID: id})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(mark, b, 0o600); err != nil {
		return "", err
	}
	return mark, nil
}

// snapshotUsers returns the sessions that have, or may have, snapshot
// sdir's tree as a lower layer, removing the records of those that are
// gone. A session is gone once its state directory is, or its state says
// its PID 1 is; one whose directory has no state yet is being made (its
// record is written before its state) and counts.
// The caller holds the snapshot's lock.
func snapshotUsers(sdir string) ([]string, error) {
	users := filepath.Join(sdir, usersDir)
	entries, err := os.ReadDir(users)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var up []string
	for _, e := range entries {
		mark := filepath.Join(users, e.Name())
		b, err := os.ReadFile(mark)
		if err != nil {
			return nil, err
		}
		var u snapshotUser
		if err := json.Unmarshal(b, &u); err == nil && validSessionID(u.ID) && filepath.IsAbs(u.StateDir) {
			dir := filepath.Join(u.StateDir, u.ID)
			st, err := readState(dir, u.ID)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if _, derr := os.Lstat(dir); derr == nil {
					up = append(up, u.ID) // being made
					continue
				}
			case err != nil:
				up = append(up, u.ID) // unreadable: never removed on a guess
				continue
			default:
				if fd, err := st.pidfdOf(); err == nil {
					unix.Close(fd)
					up = append(up, u.ID)
					continue
				}
				if st.seen(dir) != nil {
					up = append(up, u.ID) // in another PID namespace: never removed on a guess
					continue
				}
			}
		}
		if err := os.Remove(mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return up, nil
}

// lowerTrees opens the layer tree's directory of each overlay of layers
// (a session's, in the order of its plan) as the detached, read-only
// mount rootfs.Build makes of it for a new session, id-mapped to the
// session's workload: what a restore hands its PID 1
// (nsexec.ResetLayers). A directory the tree lacks (an overlay the
// snapshot's session had not, an older jail's snapshot) is made in it,
// empty: no changes.
func lowerTrees(tree string, layers []string, st *sessionState) (_ []*os.File, retErr error) {
	if len(layers) > nsexec.MaxLayerTrees {
		return nil, fmt.Errorf("%d overlays: a restore hands PID 1 at most %d layer trees", len(layers), nsexec.MaxLayerTrees)
	}
	idmap, err := idMapUserns(uint32(hostID(st.Isolation.UIDMap, st.Process.UID)), uint32(hostID(st.Isolation.GIDMap, st.Process.GID)))
	if err != nil {
		return nil, err
	}
	defer idmap.Close()
	var out []*os.File
	defer func() {
		if retErr != nil {
			closeAll(out)
		}
	}()
	for _, l := range layers {
		p := filepath.Join(tree, strings.TrimPrefix(filepath.Clean(l), "/"))
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		d, err := openDirNoFollow(p)
		if err != nil {
			return nil, err
		}
		t, err := idmappedTree(d, idmap, uint64(rootfs.LowerAttr))
		d.Close()
		if err != nil {
			return nil, fmt.Errorf("the snapshot's layer tree %s: %w", p, err)
		}
		out = append(out, t)
	}
	return out, nil
}
