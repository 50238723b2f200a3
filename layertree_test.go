//go:build linux

package jail

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLayerTreeOfOlderSnapshot: a snapshot of an overlay workspace taken
// before snapshots had a layer tree (its layer file only) gets one the
// first time it is used, and its layer file goes.
func TestLayerTreeOfOlderSnapshot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a whiteout needs root (CI runs this as root)")
	}
	sdir := t.TempDir()
	lf, err := os.Create(filepath.Join(sdir, layerFile))
	require.NoError(t, err)
	tw := tar.NewWriter(lf)
	for _, h := range []*tar.Header{
		{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/new", Typeflag: tar.TypeReg, Mode: 0o755, Size: 3},
		{Name: "usr/bin/.wh.gone", Typeflag: tar.TypeReg, Mode: 0o600},
	} {
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte("new"))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, lf.Close())
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "lock"), nil, 0o600))

	tree, err := layerTree(sdir, &snapshotMeta{SnapshotInfo: SnapshotInfo{ID: "snap-1", Layers: []string{"/usr"}}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(sdir, layerTreeDir), tree)
	b, err := os.ReadFile(filepath.Join(tree, "usr/bin/new"))
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(tree, "usr/bin/gone"), &st))
	assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT, "a whiteout, as the overlay has it")
	assert.NoFileExists(t, filepath.Join(sdir, layerFile))
	again, err := layerTree(sdir, nil) // made once
	require.NoError(t, err)
	assert.Equal(t, tree, again)
}

// TestSnapshotUsers: a record of a session whose directory has no state
// yet (being made: the record is written first) keeps the snapshot; one
// whose directory is gone does not, and goes.
func TestSnapshotUsers(t *testing.T) {
	sdir, base := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "snapshot.json"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "lock"), nil, 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(base, "abc123"), 0o700))
	mark, err := useSnapshot(sdir, base, "abc123")
	require.NoError(t, err)
	users, err := snapshotUsers(sdir)
	require.NoError(t, err)
	assert.Equal(t, []string{"abc123"}, users, "being made")
	require.NoError(t, os.Remove(filepath.Join(base, "abc123")))
	users, err = snapshotUsers(sdir)
	require.NoError(t, err)
	assert.Empty(t, users)
	assert.NoFileExists(t, mark, "a gone session's record goes")
}
