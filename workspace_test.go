package jail

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/internal/jailfs"
)

// TestIsWorkspace: a state names a workspace jail removes only if it is
// one jail made, so a forged state cannot make rm remove another tree.
func TestIsWorkspace(t *testing.T) {
	m := &Sessions{WorkspaceDir: filepath.Join(t.TempDir(), "ws")}
	base, err := m.workspaceBase()
	require.NoError(t, err)
	st, err := os.Stat(base)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o711), st.Mode().Perm())
	ws := filepath.Join(base, "s1")
	require.NoError(t, os.Mkdir(ws, 0o700))
	assert.True(t, isWorkspace(ws, "s1"))
	assert.False(t, isWorkspace(ws, "s2"), "another session's name")
	assert.False(t, isWorkspace(base+"/../ws/s1", "s1"), "not clean")
	other := filepath.Join(t.TempDir(), "s1") // no marker beside it
	require.NoError(t, os.Mkdir(other, 0o700))
	assert.False(t, isWorkspace(other, "s1"))
	assert.False(t, isWorkspace("/etc", "etc"))
	require.Error(t, removeWorkspace(&sessionState{ID: "s1", WorkspaceDir: other}))
	assert.DirExists(t, other, "a forged state's directory is left alone")
	require.NoError(t, removeWorkspace(&sessionState{ID: "s1", WorkspaceDir: ws}))
	assert.NoDirExists(t, ws)
}

// TestRemoveTree removes what a workload may leave: read-only
// directories, and symlinks out, which are removed, never followed.
func TestRemoveTree(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "keep")
	require.NoError(t, os.WriteFile(outside, []byte("x"), 0o644))
	dir := filepath.Join(t.TempDir(), "w")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ro", "deep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ro", "deep", "f"), []byte("x"), 0o444))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "ro", "out")))
	require.NoError(t, os.Chmod(filepath.Join(dir, "ro", "deep"), 0o555))
	require.NoError(t, os.Chmod(filepath.Join(dir, "ro"), 0o555))
	require.NoError(t, jailfs.RemoveTree(dir))
	assert.NoDirExists(t, dir)
	assert.FileExists(t, outside)
	require.NoError(t, jailfs.RemoveTree(dir), "gone already")
}

// TestQuotaStructs: the quota interface's structs as linux/quota.h and
// linux/dqblk_xfs.h lay them out (x/sys carries neither).
func TestQuotaStructs(t *testing.T) {
	assert.EqualValues(t, 160, unsafe.Sizeof(fsQuotaStatV{}), "struct fs_quota_statv")
	assert.EqualValues(t, 72, unsafe.Sizeof(ifDqblk{}), "struct if_dqblk")
	assert.EqualValues(t, 28, unsafe.Sizeof(fsxattr{}), "struct fsxattr")
}
