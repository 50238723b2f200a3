package integration

import (
	"archive/tar"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
)

// loopXFS makes a loop-mounted xfs (reflink on, as mkfs.xfs makes it by
// default) of size bytes for the test, and returns where it is.
func loopXFS(t *testing.T, size int64) string {
	t.Helper()
	d := hostDir(t)
	img, mnt := filepath.Join(d, "xfs.img"), filepath.Join(d, "xfs")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, size))
	out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", img).CombinedOutput()
	require.NoError(t, err, "mkfs.xfs (xfsprogs): %s", out)
	require.NoError(t, os.Mkdir(mnt, 0o755))
	out, err = exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput()
	require.NoError(t, err, "mount -o loop %s: %s", img, out)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	require.NoError(t, os.Chmod(mnt, 0o755))
	return mnt
}

// usedBytes is what the file system at p uses, once what was written is
// on it (delayed allocation settled).
func usedBytes(t *testing.T, p string) int64 {
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Syncfs(int(f.Fd())))
	var st unix.Statfs_t
	require.NoError(t, unix.Fstatfs(int(f.Fd()), &st))
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestSnapshotReflink: a dir workspace on an xfs beside its snapshots is
// copied with reflinks, from the host, while the session is frozen: the
// snapshot's 100 MiB file takes no new blocks, and the copy holds the
// tree as it was (a symlink out of the workspace copied as a link, never
// followed, a read-only directory, user.* extended attributes); a
// session made from it (cloned the
// same way, before it starts), a restore and the export have the same
// files; removing it leaves nothing. On the
// root's ext4 (TestSessionDirWorkspace) the copy is a tar.
func TestSnapshotReflink(t *testing.T) {
	requireRoot(t)
	fs := loopXFS(t, 512<<20)
	dir, ws, snaps := sessionDir(t), filepath.Join(fs, "workspaces"), filepath.Join(fs, "snapshots")
	s := func(sub string, args ...string) result {
		return sess(t, dir, sub, append([]string{"--workspace-dir", ws, "--snapshot-dir", snaps}, args...)...)
	}
	ok := func(sub string, args ...string) string {
		t.Helper()
		r := s(sub, args...)
		require.Equal(t, 0, r.code, "session %s %v: %s", sub, args, r.stderr)
		return r.stdout
	}
	// No project quota on this kernel's xfs: the size is not enforced.
	id := strings.TrimSpace(ok("create", "--workspace", "dir:400M", "--allow-unenforced", "--rlimit", "fsize=unlimited"))
	defer s("rm", id)
	ok("exec", id, "--", "sh", "-c", "head -c 104857600 /dev/urandom > big && mkdir -p d/e && echo small > d/e/f && ln -s /etc/shadow d/link && "+
		`python3 -c "import os; os.setxattr('d/e/f', 'user.k', b'v'); os.setxattr('d', 'user.d', b'dv')" && chmod 500 d/e && sha256sum big > sum`)
	sum := ok("exec", id, "--", "cat", "sum")
	before := usedBytes(t, fs)
	var snap jail.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(ok("snapshot", "--json", id)), &snap))
	grew := usedBytes(t, fs) - before
	assert.Equal(t, jail.CopyReflink, snap.Copy)
	assert.EqualValues(t, 104857600+len("small\n")+len(sum), snap.Bytes)
	assert.Less(t, grew, int64(8<<20), "the copy shares the 100 MiB file's blocks")
	t.Logf("reflink snapshot of 100 MiB: processes stopped for %d ms; the file system grew by %d KiB", snap.FreezeMS, grew>>10)
	tree := filepath.Join(snaps, snap.ID, "workspace")
	l, err := os.Readlink(filepath.Join(tree, "d", "link"))
	require.NoError(t, err)
	assert.Equal(t, "/etc/shadow", l, "a link, copied as one")
	st, err := os.Stat(filepath.Join(tree, "d", "e"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o500), st.Mode().Perm())

	check := func(id string) {
		t.Helper()
		assert.Equal(t, sum, ok("exec", id, "--", "sh", "-c", "sha256sum big"))
		assert.Equal(t, "small\n/etc/shadow\n", ok("exec", id, "--", "sh", "-c", "cat d/e/f; readlink d/link"))
		assert.Equal(t, "v dv\n", ok("exec", id, "--", "python3", "-c", "import os; print(os.getxattr('d/e/f', 'user.k').decode(), os.getxattr('d', 'user.d').decode())"), "extended attributes kept")
	}
	// A session made from it is cloned too, from the host, before it
	// starts: its 100 MiB take no new blocks either.
	before = usedBytes(t, fs)
	from := strings.TrimSpace(ok("create", "--from", snap.ID))
	defer s("rm", from)
	assert.Less(t, usedBytes(t, fs)-before, int64(8<<20), "the new workspace shares the snapshot's blocks")
	check(from)
	assert.Equal(t, "500\n", ok("exec", from, "--", "stat", "-c", "%a", "d/e"))
	ok("exec", id, "--", "sh", "-c", "rm big; chmod 700 d/e; echo changed > d/e/f")
	ok("restore", id, snap.ID)
	check(id)

	tr := tar.NewReader(strings.NewReader(runOK(t, "snapshot", "export", "--snapshot-dir", snaps, snap.ID)))
	names := map[string]bool{}
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names[h.Name] = true
	}
	for _, n := range []string{"workspace/big", "workspace/d/e/f", "workspace/d/link", "workspace/sum"} {
		assert.True(t, names[n], "the export has %s", n)
	}
	runOK(t, "snapshot", "rm", "--snapshot-dir", snaps, snap.ID)
	_, err = os.Lstat(filepath.Join(snaps, snap.ID))
	assert.ErrorIs(t, err, os.ErrNotExist, "removed, read-only directory and all")
}
