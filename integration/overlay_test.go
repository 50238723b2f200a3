package integration

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
)

// kernelAtLeast reports whether this kernel's release is major.minor or
// later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	var ma, mi int
	_, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	require.NoError(t, err)
	return ma > major || ma == major && mi >= minor
}

// usrCanary is a directory of root's in the host's /usr, which an
// overlay session's /usr shows, and an inotify watch on it for every
// change (not reads: the overlay's copy-up reads what it copies).
type usrCanary struct {
	dir string
	fd  int
}

// usrCanaryFiles are the canary's world-readable files of root's, by
// name, and what they hold.
var usrCanaryFiles = map[string]string{"canary": "host file\n", "gone": "to be deleted\n", "mv": "to be renamed\n", "sub/old": "hidden by an opaque directory\n"}

func newUsrCanary(t *testing.T) *usrCanary {
	d, err := os.MkdirTemp("/usr/local/share", "jail-it-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	for name, data := range usrCanaryFiles {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, name), []byte(data), 0o644))
	}
	// What the host's root keeps to itself: a 0600 file, and a 0700
	// directory of a world-readable one.
	require.NoError(t, os.WriteFile(filepath.Join(d, "secret"), []byte("root's secret\n"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(d, "private"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(d, "private", "inner"), []byte("root's inner secret\n"), 0o644))
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	for _, w := range []string{d, filepath.Join(d, "sub"), "/usr/bin"} {
		_, err = unix.InotifyAddWatch(fd, w, unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVE|unix.IN_CLOSE_WRITE)
		require.NoError(t, err)
	}
	return &usrCanary{dir: d, fd: fd}
}

// unchanged checks nothing changed the canary's files, or made one in
// the host's /usr/bin, since it was made.
func (c *usrCanary) unchanged(t *testing.T) {
	t.Helper()
	assert.Empty(t, inotifyEvents(t, c.fd), "the host's /usr was changed")
	for name, data := range usrCanaryFiles {
		b, err := os.ReadFile(filepath.Join(c.dir, name))
		require.NoError(t, err)
		assert.Equal(t, data, string(b), name)
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(c.dir, name), &st))
		assert.EqualValues(t, 0o644, st.Mode&0o7777, name)
		assert.EqualValues(t, 0, st.Uid, name)
	}
	_, err := os.Lstat("/usr/bin/jail-it-new")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestSessionOverlayWorkspace: an overlay session's /usr is writable by
// its workload, which owns the host's root-owned files there (but for
// those root keeps from others: masked), and every
// change (write, chmod, delete, rename, an opaque directory, a new file)
// stays in the session's tmpfs: the host's /usr is never changed. The
// layers cannot be written but through the overlays, the size holds,
// snapshots carry the changes (with whiteouts) into new sessions and into
// an exported layer, and back into the session (restore). Unprivileged, or before Linux
// 6.6, the session is refused, naming why.
func TestSessionOverlayWorkspace(t *testing.T) {
	dir, snaps := sessionDir(t), snapDir(t)
	s := func(sub string, args ...string) result {
		return sess(t, dir, sub, append([]string{"--snapshot-dir", snaps}, args...)...)
	}
	ok := func(sub string, args ...string) string {
		t.Helper()
		r := s(sub, args...)
		require.Equal(t, 0, r.code, "session %s %v: %s", sub, args, r.stderr)
		return r.stdout
	}
	r := s("create", "--workspace", "overlay:32M")
	switch {
	case unprivileged:
		assert.Equal(t, 125, r.code)
		assert.Contains(t, r.stderr, "overlay workspace: needs root")
		return
	case !kernelAtLeast(t, 6, 6):
		assert.Equal(t, 125, r.code)
		assert.Contains(t, r.stderr, "overlay workspace: needs Linux 6.6")
		return
	}
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	defer sess(t, dir, "rm", id)
	c := newUsrCanary(t)
	cd := c.dir
	// The canary is made after the session, so a new one sees its
	// private files: the id map makes the host's root-owned files the
	// workload's, and what root keeps from others is masked.
	sess(t, dir, "rm", id)
	// And a bind of the Spec's below an overlay, which every overlay of
	// this session, new or made again, has.
	bsrc := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(bsrc), 0o755)) // the test's own directory, 0700
	require.NoError(t, os.Chmod(bsrc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bsrc, "b"), []byte("bound\n"), 0o644))
	const bound = "/usr/local/lib/jail-it-bind"
	r = s("create", "--workspace", "overlay:32M", "--ro-bind", bsrc+":"+bound)
	require.Equal(t, 0, r.code, r.stderr)
	id = strings.TrimSpace(r.stdout)
	defer sess(t, dir, "rm", id)
	r = s("exec", id, "--", "sh", "-c", fmt.Sprintf("cat %[1]s/secret %[1]s/private/inner; ls %[1]s/private; cat /etc/ssl/private/*", cd))
	assert.NotEqual(t, 0, r.code)
	assert.NotContains(t, r.stdout, "secret", "a file the host's root keeps to itself stays its own")
	assert.Contains(t, r.stderr, "Permission denied")
	r = s("exec", id, "--", "sh", "-c", fmt.Sprintf("rm -rf %[1]s/private %[1]s/secret; echo x > %[1]s/secret", cd))
	assert.NotEqual(t, 0, r.code, "a mask cannot be removed or written through")

	// The kernel's view: overlays on /usr, the layers read-only at
	// /.overlay, the host's root-owned files the workload's own.
	mi := ok("exec", id, "--", "cat", "/proc/self/mountinfo")
	var usr, layers string
	for _, l := range strings.Split(mi, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == "/usr" {
			usr = l
		} else if len(f) > 5 && f[4] == "/.overlay" {
			layers = l
		}
	}
	assert.Contains(t, usr, " - overlay ")
	assert.Contains(t, usr, "userxattr")
	assert.Contains(t, usr, "nosuid")
	assert.Regexp(t, `^\S+ \S+ \S+ \S+ /.overlay ro,`, layers)
	assert.Equal(t, "1000 1000\n", ok("exec", id, "--", "stat", "-c", "%u %g", cd+"/canary"))

	// Changes of every kind, seen by the next command.
	ok("exec", id, "--", "sh", "-c", fmt.Sprintf(`set -e; cd %s
echo changed >> canary; chmod 600 canary; rm gone; mv mv mv2; echo new > new
rm -r sub; mkdir sub; echo only > sub/only
echo '#!/bin/sh' > /usr/bin/jail-it-new; chmod +x /usr/bin/jail-it-new
echo 'svc:x:1001:1001::/home/svc:/bin/sh' >> /etc/passwd; mkdir -p /opt/tool /home/svc; echo v1 > /opt/tool/version
echo ws > /workspace/w`, cd))
	want := "host file\nchanged\n600\ncanary\nmv2\nnew\nprivate\nsecret\nsub\nonly\nws\nsvc\nv1\n"
	tree := func(id string) string {
		return ok("exec", id, "--", "sh", "-c", fmt.Sprintf("cd %s; cat canary; stat -c %%a canary; ls; ls sub; cat /workspace/w; test -x /usr/bin/jail-it-new; "+
			"grep -o '^svc' /etc/passwd; cat /opt/tool/version; test -d /home/svc", cd))
	}
	// /etc is jail's own, writable like the rest; the host's files it
	// binds stay read-only, and the root's own directory too.
	for _, try := range []string{"touch /etc/ssl/jail-it", "echo x > /etc/ld.so.cache", "mkdir /jail-it"} {
		r := s("exec", id, "--", "sh", "-c", try)
		assert.NotEqual(t, 0, r.code, try)
		assert.Contains(t, r.stderr, "Read-only file system", try)
	}
	assert.Equal(t, want, tree(id))
	c.unchanged(t)

	// The layers are written only through the overlays; the jail cannot
	// remount or unmount them; the size holds for layers and workspace
	// together.
	r = s("exec", id, "--", "sh", "-c", "echo x > /.overlay/upper/usr/x")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "Read-only file system")
	r = s("exec", id, "--", "sh", "-c", "umount /usr || umount -l /usr")
	assert.NotEqual(t, 0, r.code)
	// Nor can it reach PID 1's control socket, which would have it
	// make the overlays again (CTL_RESET_LAYERS): not through PID 1's
	// descriptors, not at its path in the host's state directory.
	r = s("exec", id, "--", "sh", "-c", "ls /proc/1/fd")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "Permission denied")
	ctl := filepath.Join(dir, id, "ctl.sock")
	_, err := os.Stat(ctl)
	require.NoError(t, err, "the control socket, on the host")
	r = s("exec", id, "--", "sh", "-c", "ls "+ctl)
	assert.NotEqual(t, 0, r.code, "the host's state directory is not in the jail")
	r = s("exec", id, "--", "sh", "-c", "head -c 40000000 /dev/zero > /usr/big")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "No space left on device")
	ok("exec", id, "--", "rm", "-f", "/usr/big")
	info := inspect(t, dir, id)
	require.NotNil(t, info.Workspace)
	assert.Equal(t, jail.WorkspaceOverlay, info.Workspace.Type)
	assert.EqualValues(t, 32<<20, info.Workspace.SizeBytes)
	require.NotNil(t, info.Workspace.UsedBytes)
	assert.Positive(t, *info.Workspace.UsedBytes)
	c.unchanged(t)

	// A snapshot holds the changes; a session made from it (and a fork)
	// has the same tree; the export is an image layer with whiteouts.
	var snap jail.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(ok("snapshot", "--json", id)), &snap))
	assert.Contains(t, snap.Layers, "/usr")
	from := strings.TrimSpace(ok("create", "--from", snap.ID))
	defer sess(t, dir, "rm", from)
	assert.Equal(t, want, tree(from))
	assert.Equal(t, "bound\n", ok("exec", from, "--", "cat", bound+"/b"))
	// Nothing was copied: the snapshot's layer tree is the overlay's
	// lower layer as it is, read-only and id-mapped, and the new upper
	// layer is empty.
	lowerMount := func(id string) string {
		t.Helper()
		for _, l := range strings.Split(ok("exec", id, "--", "cat", "/proc/self/mountinfo"), "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == "/.overlay/lower/usr" {
				return l
			}
		}
		return ""
	}
	treeOf := func(snap string) string { return filepath.Join(snaps, snap, "layers", "usr") }
	assert.Regexp(t, `^\S+ \S+ \S+ `+regexp.QuoteMeta(treeOf(snap.ID))+` /.overlay/lower/usr ro,nosuid,nodev,.*idmapped`, lowerMount(from))
	assert.Equal(t, "0\n", ok("exec", from, "--", "sh", "-c", "find /.overlay/upper/usr -mindepth 1 | wc -l"))
	// A snapshot of that session holds the tree's changes and its own,
	// the former as hard links into the first tree: the first one can
	// go once no session has it as a lower layer.
	ok("exec", from, "--", "sh", "-c", fmt.Sprintf("echo second > %s/second", cd))
	var snap2 jail.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(ok("snapshot", "--json", from)), &snap2))
	var st1, st2 unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(treeOf(snap.ID), strings.TrimPrefix(cd, "/usr/"), "canary"), &st1))
	require.NoError(t, unix.Lstat(filepath.Join(treeOf(snap2.ID), strings.TrimPrefix(cd, "/usr/"), "canary"), &st2))
	assert.Equal(t, st1.Ino, st2.Ino, "an unchanged entry is a hard link")
	r = runJail(t, "snapshot", "rm", "--snapshot-dir", snaps, snap.ID)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "is the lower layer of the overlays of session "+from)
	relRm := jailCmd(t.Context(), "snapshot", "rm", "--snapshot-dir", filepath.Base(snaps), snap.ID)
	relRm.Dir = filepath.Dir(snaps)
	out, err := relRm.CombinedOutput()
	assert.Error(t, err, "refused whatever directory names the snapshots: %s", out)
	assert.Contains(t, string(out), "is the lower layer of the overlays of session "+from)
	from2 := strings.TrimSpace(ok("create", "--from", snap2.ID))
	defer sess(t, dir, "rm", from2)
	assert.Equal(t, "second\n", ok("exec", from2, "--", "cat", cd+"/second"))
	assert.Equal(t, want, strings.Replace(tree(from2), "new\nprivate\nsecond\n", "new\nprivate\n", 1))
	var fork struct {
		Forks []struct{ ID, Error string } `json:"forks"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("fork", "--json", "-n", "1", id)), &fork))
	require.Len(t, fork.Forks, 1)
	require.Empty(t, fork.Forks[0].Error)
	defer sess(t, dir, "rm", fork.Forks[0].ID)
	assert.Equal(t, want, tree(fork.Forks[0].ID))
	rel := strings.TrimPrefix(cd, "/")
	tr := tar.NewReader(strings.NewReader(runOK(t, "snapshot", "export", "--snapshot-dir", snaps, snap.ID)))
	names := map[string]bool{}
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names[h.Name] = true
		if h.Name == "usr/bin/jail-it-new" {
			assert.Equal(t, [2]int{1000, 1000}, [2]int{h.Uid, h.Gid}, "the workload's in the jail, as in workspace/")
		}
	}
	for _, n := range []string{rel + "/canary", rel + "/.wh.gone", rel + "/.wh.mv", rel + "/mv2", rel + "/sub/", rel + "/sub/.wh..wh..opq", rel + "/sub/only", "usr/bin/jail-it-new", "workspace/w", "etc/passwd", "opt/tool/version"} {
		assert.True(t, names[n], "the export has %s", n)
	}

	// Restore: changes since the snapshot are undone, those of the
	// host's files too (the file is the host's again), and the
	// snapshot's are back; a command that was running is gone.
	ok("exec", id, "--", "sh", "-c", fmt.Sprintf(`set -e; cd %s
echo after >> mv2; rm new; echo later > later; rm -r /usr/share/common-licenses; rm /usr/bin/jail-it-new; rm /workspace/w
echo v2 > /opt/tool/version; sed -i /^svc:/d /etc/passwd; rm -r /home/svc
for d in $(seq 40); do mkdir -p /usr/local/deep/$d/a/b/c; for f in $(seq 30); do echo $f > /usr/local/deep/$d/a/b/c/$f; done; done
mkdir -p /usr/local/deepest/$(seq -s / 300)`, cd))
	marker, script := sleepMarker(60)
	bg := jailCmd(context.Background(), "session", "exec", "--state-dir", dir, id, "--", "sh", "-c", script)
	require.NoError(t, bg.Start())
	requireRunning(t, marker, 1)
	ok("restore", id, snap.ID)
	_ = bg.Wait()
	requireGone(t, marker)
	assert.Equal(t, want, tree(id))
	assert.Equal(t, "to be renamed\n", ok("exec", id, "--", "cat", cd+"/mv2"))
	assert.Equal(t, "gone\n", ok("exec", id, "--", "sh", "-c", "test -e /usr/local/deep || test -e /usr/local/deepest || echo gone"),
		"1,200 files in 160 directories, and 300 nested directories, of the upper layer gone")
	// The upper layer was moved aside in one rename: what could not be
	// removed after (nested deeper than PID 1 goes) stays there, in the
	// session's own space, and the restore went on.
	assert.Contains(t, ok("exec", id, "--", "ls", "/.overlay/upper"), "usr.old0")
	host, err := os.ReadFile("/usr/share/common-licenses/GPL-3")
	require.NoError(t, err)
	assert.Equal(t, string(host), ok("exec", id, "--", "cat", "/usr/share/common-licenses/GPL-3"), "a host directory removed after the snapshot is back")
	mi = ok("exec", id, "--", "cat", "/proc/self/mountinfo")
	assert.Equal(t, 1, strings.Count(mi, " /usr rw,"), "one overlay on /usr, the new one: %s", mi)
	// What the plan mounted below /usr is on the new overlay as on the
	// old: the masks (without them, the id map would show the host's
	// private files) and the Spec's bind.
	r = s("exec", id, "--", "sh", "-c", fmt.Sprintf("cat %[1]s/secret; ls %[1]s/private", cd))
	assert.NotEqual(t, 0, r.code)
	assert.NotContains(t, r.stdout, "secret", "a restore keeps what the host's root keeps to itself masked")
	assert.Equal(t, 2, strings.Count(r.stderr, "Permission denied"), r.stderr)
	assert.Equal(t, "bound\n", ok("exec", id, "--", "cat", bound+"/b"))
	ok("exec", id, "--", "sh", "-c", "echo again > /usr/bin/jail-it-again")
	r = s("exec", id, "--", "sh", "-c", "echo x > /.overlay/upper/usr/x")
	assert.Contains(t, r.stderr, "Read-only file system", "the layers are read-only again")
	// The snapshot's tree is the lower layer now, nothing copied; and
	// then another's, of another lineage, in its place.
	assert.Contains(t, lowerMount(id), treeOf(snap.ID)+" /.overlay/lower/usr ro,")
	ok("restore", id, snap2.ID)
	assert.Equal(t, "second\n", ok("exec", id, "--", "cat", cd+"/second"))
	assert.Contains(t, lowerMount(id), treeOf(snap2.ID)+" /.overlay/lower/usr ro,")
	assert.Equal(t, 1, strings.Count(ok("exec", id, "--", "cat", "/proc/self/mountinfo"), " /.overlay/lower/usr "), "the first tree's mount is gone")
	r = s("exec", id, "--", "sh", "-c", fmt.Sprintf("cat %[1]s/secret; ls %[1]s/private", cd))
	assert.Equal(t, 2, strings.Count(r.stderr, "Permission denied"), r.stderr)
	sess(t, dir, "rm", from)
	runOK(t, "snapshot", "rm", "--snapshot-dir", snaps, snap.ID) // no session has its tree now

	// A session made before overlays had a mount point for a tree (its
	// state says so) has a PID 1 that dropped an overlay's masks when it
	// made it again: its restore is refused, and it stays as it was.
	old := strings.TrimSpace(ok("create", "--workspace", "overlay:32M", "--ro-bind", bsrc+":"+bound))
	defer sess(t, dir, "rm", old)
	stateFile := filepath.Join(dir, old, "state.json")
	b, err := os.ReadFile(stateFile)
	require.NoError(t, err)
	slots := regexp.MustCompile(`,\s*"lower_slots": true`)
	require.True(t, slots.Match(b), "the state says the overlays have mount points for a tree")
	require.NoError(t, os.WriteFile(stateFile, slots.ReplaceAll(b, nil), 0o600))
	r = s("restore", old, snap2.ID)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "was made by an older jail")
	assert.Equal(t, "running", inspect(t, dir, old).State)

	ok("rm", id)
	c.unchanged(t)
}

// TestOverlayMasks tries what the id map could open: the workload owns
// the host's root-owned files in an overlay session, and an owner may
// chmod, so whatever root keeps from others is masked whatever its
// owner's bits (a mode-000 file, a 0200 one, a 0711 directory), and so
// is a file of another user whose ACL names uid or gid 0. A mount below
// /usr refuses the session: the overlay would show what it covers.
func TestOverlayMasks(t *testing.T) {
	if unprivileged || !kernelAtLeast(t, 6, 6) {
		t.Skip("an overlay workspace needs root and Linux 6.6 (TestSessionOverlayWorkspace checks the refusal)")
	}
	dir := sessionDir(t)
	d, err := os.MkdirTemp("/usr/local/share", "jail-it-masks-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	write := func(name string, mode os.FileMode) {
		p := filepath.Join(d, name)
		require.NoError(t, os.WriteFile(p, []byte("SECRET "+name+"\n"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
	}
	write("mode000", 0)
	write("mode200", 0o200)
	write("xonly", 0o711)
	require.NoError(t, os.Mkdir(filepath.Join(d, "d711"), 0o711))
	write("d711/inner", 0o644)
	require.NoError(t, os.Mkdir(filepath.Join(d, "d000"), 0o755))
	write("d000/inner", 0o644)
	require.NoError(t, os.Chmod(filepath.Join(d, "d000"), 0))
	// Another user's file, 0640, with an ACL giving group 0 read.
	write("acl", 0o640)
	require.NoError(t, os.Chown(filepath.Join(d, "acl"), 4321, 4321))
	acl := []byte{2, 0, 0, 0}
	for _, e := range [][3]uint32{{0x01, 6, 0xffffffff}, {0x04, 0, 0xffffffff}, {0x08, 4, 0}, {0x10, 4, 0xffffffff}, {0x20, 0, 0xffffffff}} {
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[0]))
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[1]))
		acl = binary.LittleEndian.AppendUint32(acl, e[2])
	}
	require.NoError(t, unix.Setxattr(filepath.Join(d, "acl"), "system.posix_acl_access", acl, 0))
	write("open", 0o644) // and one that is everyone's to read

	r := sess(t, dir, "create", "--workspace", "overlay:16M")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	defer sess(t, dir, "rm", id)
	exec := func(script string) result {
		return sess(t, dir, "exec", id, "--", "sh", "-c", "cd "+d+"; "+script)
	}
	r = exec("cat open")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "SECRET open\n", r.stdout, "the canary is seen, and so would the others be")
	for _, try := range []string{
		"cat mode000", "chmod 600 mode000 && cat mode000",
		"chmod 600 mode200 && cat mode200",
		"chmod 755 xonly && cat xonly",
		"ls d711", "chmod 755 d711 && ls d711", "cat d711/inner",
		"chmod 755 d000 && cat d000/inner",
		"cat acl",
		"ln mode000 /usr/local/l && cat /usr/local/l",
		"mv mode000 /usr/local/m && cat /usr/local/m",
		"cp -a d000 /usr/local/c && cat /usr/local/c/inner",
	} {
		r := exec(try)
		assert.NotEqual(t, 0, r.code, "%s: %s", try, r.stdout)
		assert.NotContains(t, r.stdout, "SECRET", try)
	}

	// A mount below /usr: refused, naming it.
	mnt := filepath.Join(d, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"))
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	r = sess(t, dir, "create", "--workspace", "overlay:16M")
	if r.code == 0 {
		sess(t, dir, "rm", strings.TrimSpace(r.stdout))
	}
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, mnt+" is a mount of its own")
}

// TestOverlayRestoreMasksAgain: a mask the plan skipped because the
// session's snapshot tree shadowed its target (a symlink the workload
// made where the host later made a private directory) is mounted when a
// restore to another tree shows the target; a Spec mount on one of the
// overlaid directories does not make the restore fail.
func TestOverlayRestoreMasksAgain(t *testing.T) {
	if unprivileged || !kernelAtLeast(t, 6, 6) {
		t.Skip("an overlay workspace needs root and Linux 6.6 (TestSessionOverlayWorkspace checks the refusal)")
	}
	dir, snaps := sessionDir(t), snapDir(t)
	ok := func(sub string, args ...string) string {
		t.Helper()
		r := sess(t, dir, sub, append([]string{"--snapshot-dir", snaps}, args...)...)
		require.Equal(t, 0, r.code, "session %s %v: %s", sub, args, r.stderr)
		return strings.TrimSpace(r.stdout)
	}
	late, err := os.MkdirTemp("/usr/local/share", "jail-it-late-")
	require.NoError(t, err)
	require.NoError(t, os.Remove(late)) // a name only, for now
	t.Cleanup(func() { os.RemoveAll(late) })

	a := ok("create", "--workspace", "overlay:16M", "--tmpfs", "/mnt:size=1M")
	defer sess(t, dir, "rm", a)
	s0 := ok("snapshot", a)
	ok("exec", a, "--", "ln", "-s", "/nonexistent", late)
	s1 := ok("snapshot", a)
	ok("exec", a, "--", "sh", "-c", "rm "+late+" && mkdir /usr/local/jail-it-decoy && ln -s /usr/local/jail-it-decoy "+late)
	s2 := ok("snapshot", a)
	// The host's root makes it a private directory since.
	require.NoError(t, os.Mkdir(late, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(late, "key"), []byte("LATE SECRET\n"), 0o600))

	b := ok("create", "--from", s1)
	defer sess(t, dir, "rm", b)
	r := sess(t, dir, "exec", b, "--", "cat", late+"/key")
	assert.NotEqual(t, 0, r.code, "the snapshot's symlink shadows it")
	ok("restore", b, s0)
	r = sess(t, dir, "exec", b, "--", "sh", "-c", "cat "+late+"/key; ls "+late)
	assert.NotEqual(t, 0, r.code)
	assert.NotContains(t, r.stdout, "SECRET", "the host's private directory, shown by the restore, is masked")
	assert.Contains(t, r.stderr, "Permission denied")
	ok("exec", b, "--", "sh", "-c", "echo still > /mnt/x && cat /mnt/x")

	// A mask that went through the tree's symlink (onto its decoy), the
	// symlink then pointed at /: the restore keeps no mount through it
	// (it would have cloned the jail's whole tree there), and masks the
	// host's directory the new tree shows.
	c := ok("create", "--from", s2)
	defer sess(t, dir, "rm", c)
	ok("exec", c, "--", "sh", "-c", "rm "+late+" && ln -s / "+late)
	ok("restore", c, s0)
	r = sess(t, dir, "exec", c, "--", "sh", "-c", "cat "+late+"/key; ls "+late)
	assert.NotEqual(t, 0, r.code)
	assert.NotContains(t, r.stdout, "SECRET")
	mi := ok("exec", c, "--", "cat", "/proc/self/mountinfo")
	assert.Equal(t, 1, strings.Count(mi, " "+late+" "), "one mask there")
	assert.False(t, strings.Contains(mi, " "+late+"/"), "nothing of the jail's tree cloned below it")

	// A Spec tmpfs over a parent of the masks: they are hidden, and a
	// restore finds them so, without ending the session.
	d := ok("create", "--workspace", "overlay:16M", "--tmpfs", "/usr/local/share:size=1M")
	defer sess(t, dir, "rm", d)
	ok("restore", d, ok("snapshot", d))
	ok("exec", d, "--", "sh", "-c", "echo ok > /usr/local/share/x")
}
