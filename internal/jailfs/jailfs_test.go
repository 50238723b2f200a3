package jailfs

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"/a/b", "/a/b", ""},
		{"/a/../../b", "/b", ""},
		{"/a/./b/", "/a/b", ""},
		{"/", "/", ""},
		{"", "", "empty"},
		{"a/b", "", "absolute"},
		{"/a\x00b", "", "NUL"},
		{"/" + strings.Repeat("a", MaxPath), "", "longer"},
	} {
		got, err := CleanPath(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		assert.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestTarName(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"a/b", "a/b", ""},
		{"./a/b/", "a/b", ""},
		{"./", "", ""},
		{".", "", ""},
		{"a//b", "a/b", ""},
		{"/etc/passwd", "", "absolute"},
		{"../x", "", `".."`},
		{"a/../../x", "", `".."`},
		{"a/../b", "", `".."`}, // harmless, but never guessed at
		{"", "", "empty"},
		{"a\x00b", "", "not a file name"},
	} {
		got, err := TarName(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		assert.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestLinkStays(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		want         bool
	}{
		{"l", "f", true},
		{"d/l", "../f", true},
		{"d/e/l", "../../f", true},
		{"l", "../f", false},
		{"d/l", "../../f", false},
		{"l", "/etc/passwd", false},
		{"l", "", false},
		{"l", "a/../../b", false},
		{"l", ".", true},
	} {
		assert.Equal(t, tc.want, LinkStays(tc.name, tc.target), "%s -> %s", tc.name, tc.target)
	}
}

// seccompData is struct seccomp_data for x/net/bpf's VM, whose loads are
// big endian: each 32-bit word is stored big endian where the kernel's
// (little-endian) struct has it, the low word of an argument first.
func seccompData(nr uintptr, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], uint32(nr))
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

func TestProgram(t *testing.T) {
	raw, err := Program()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no filter on %s", runtime.GOARCH)
	}
	require.NoError(t, err)
	insns, ok := bpf.Disassemble(raw)
	require.True(t, ok)
	vm, err := bpf.NewVM(insns)
	require.NoError(t, err)
	arch := auditArch[runtime.GOARCH]
	run := func(nr uintptr, arch uint32, args ...uint64) uint32 {
		v, err := vm.Run(seccompData(nr, arch, args...))
		require.NoError(t, err)
		return uint32(v)
	}
	for _, nr := range allowed {
		assert.Equal(t, uint32(retAllow), run(nr, arch), "allowed call %d", nr)
	}
	for name, nr := range map[string]uintptr{"execve": unix.SYS_EXECVE, "socket": unix.SYS_SOCKET, "connect": unix.SYS_CONNECT,
		"ptrace": unix.SYS_PTRACE, "setns": unix.SYS_SETNS, "unshare": unix.SYS_UNSHARE, "mount": unix.SYS_MOUNT,
		"kill": unix.SYS_KILL, "chown": unix.SYS_FCHOWNAT, "mknodat": unix.SYS_MKNODAT, "ioctl": unix.SYS_IOCTL,
		"process_vm_readv": unix.SYS_PROCESS_VM_READV, "bpf": unix.SYS_BPF} {
		assert.Equal(t, uint32(retKill), run(nr, arch), name)
	}
	assert.Equal(t, uint32(retAllow), run(unix.SYS_CLONE, arch, unix.CLONE_VM|unix.CLONE_THREAD|unix.CLONE_SIGHAND), "a thread")
	assert.Equal(t, uint32(retKill), run(unix.SYS_CLONE, arch, uint64(unix.SIGCHLD)), "a fork")
	assert.Equal(t, uint32(retKill), run(unix.SYS_CLONE, arch, unix.CLONE_NEWUSER), "a namespace")
	assert.Equal(t, uint32(retENOSYS), run(unix.SYS_CLONE3, arch), "clone3")
	assert.Equal(t, uint32(retAllow), run(unix.SYS_PRLIMIT64, arch, 0, unix.RLIMIT_NOFILE), "its own limits")
	assert.Equal(t, uint32(retKill), run(unix.SYS_PRLIMIT64, arch, 1), "another's")
	assert.Equal(t, uint32(retKill), run(unix.SYS_PRLIMIT64, arch, 1<<32), "another's, in the high word")
	assert.Equal(t, uint32(retKill), run(unix.SYS_READ, 0x40000003), "another architecture (ia32)")
	if runtime.GOARCH == "amd64" {
		assert.Equal(t, uint32(retKill), run(unix.SYS_READ|x32Bit, arch), "x32")
	}
}

// tree makes a directory tree for a Root: paths ending in / are
// directories, "x -> y" symlinks, the rest files holding their own name.
func tree(t *testing.T, dir string, entries ...string) {
	for _, e := range entries {
		if name, target, ok := strings.Cut(e, " -> "); ok {
			require.NoError(t, os.Symlink(target, filepath.Join(dir, name)))
			continue
		}
		p := filepath.Join(dir, e)
		if strings.HasSuffix(e, "/") {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(e), 0o644))
	}
}

// outside makes a canary beside the root, to show it is never reached.
func outside(t *testing.T, base string) string {
	p := filepath.Join(base, "canary")
	require.NoError(t, os.WriteFile(p, []byte("host secret"), 0o644))
	return p
}

func newRoot(t *testing.T) (*Root, string, string) {
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	require.NoError(t, os.Mkdir(dir, 0o755))
	canary := outside(t, base)
	r, err := OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, dir, canary
}

func TestSymlinksStayInTheRoot(t *testing.T) {
	r, dir, canary := newRoot(t)
	tree(t, dir, "etc/passwd", "abs -> /etc/passwd", "up -> ../../../../canary", "updir -> ../..",
		"dirlink -> /etc", "proc/", "magic -> /proc/self/root/etc/passwd")
	for _, p := range []string{"/abs", "/dirlink/passwd", "/updir/etc/passwd"} {
		var out bytes.Buffer
		_, _, err := r.Get(p, &out)
		require.NoError(t, err, p)
		assert.Equal(t, "etc/passwd", out.String(), "%s: the root's own file", p)
	}
	var out bytes.Buffer
	_, _, err := r.Get("/up", &out)
	assert.ErrorIs(t, err, fs.ErrNotExist, "../ stops at the root: /canary is not there")
	_, _, err = r.Get("/magic", &out)
	assert.Error(t, err, "no magic link")
	assert.Empty(t, out.String())

	// A write never goes through a final symlink, nor out of the root.
	_, err = r.Put("/abs", strings.NewReader("x"), PutOptions{})
	assert.ErrorIs(t, err, unix.ELOOP)
	_, err = r.Put("/updir/canary", strings.NewReader("pwned"), PutOptions{})
	require.NoError(t, err, "written in the root, as /canary")
	b, err := os.ReadFile(canary)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(b))
	assert.FileExists(t, filepath.Join(dir, "canary"))

	// Remove takes the symlink, never what it points to.
	require.NoError(t, r.Remove("/dirlink", true))
	assert.FileExists(t, filepath.Join(dir, "etc/passwd"))
	tree(t, dir, "sub/", "sub/escape -> ../../")
	require.NoError(t, r.Remove("/sub", true))
	assert.FileExists(t, canary)
	assert.NoDirExists(t, filepath.Join(dir, "sub"))
}

func TestPutRefuses(t *testing.T) {
	r, dir, _ := newRoot(t)
	tree(t, dir, "d/", "f", "l -> f")
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	for p, want := range map[string]error{"/d": unix.EISDIR, "/l": unix.ELOOP, "/fifo": unix.EEXIST, "/": unix.EISDIR,
		"/missing/f": unix.ENOENT} {
		_, err := r.Put(p, strings.NewReader("x"), PutOptions{})
		assert.ErrorIs(t, err, want, p)
	}
	_, err := r.Put("/f", strings.NewReader("x"), PutOptions{Mode: 0o4755})
	assert.ErrorIs(t, err, unix.EINVAL, "setuid")
	// A FIFO is never opened for reading (it would block for ever).
	done := make(chan error, 1)
	go func() { _, _, err := r.Get("/fifo", io.Discard); done <- err }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, unix.EINVAL)
	case <-time.After(5 * time.Second):
		t.Fatal("Get of a FIFO blocks")
	}
}

// failingReader fails after n bytes.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("the source failed")
	}
	k := min(f.n, len(p))
	f.n -= k
	return k, nil
}

func TestPutLeavesNoPartialFile(t *testing.T) {
	r, dir, _ := newRoot(t)
	tree(t, dir, "f")
	names := func() []string {
		e, err := os.ReadDir(dir)
		require.NoError(t, err)
		var n []string
		for _, x := range e {
			n = append(n, x.Name())
		}
		return n
	}
	_, err := r.Put("/g", &failingReader{n: 100000}, PutOptions{})
	assert.Error(t, err)
	_, err = r.Put("/f", &failingReader{n: 100000}, PutOptions{})
	assert.Error(t, err)
	_, err = r.Put("/f", strings.NewReader("new"), PutOptions{Commit: func(int64) error { return errors.New("no commit") }})
	assert.Error(t, err)
	assert.Equal(t, []string{"f"}, names(), "no new file, no temporary one")
	b, _ := os.ReadFile(filepath.Join(dir, "f"))
	assert.Equal(t, "f", string(b), "the old file is untouched")

	var committed int64
	n, err := r.Put("/f", strings.NewReader("new contents"), PutOptions{Mode: 0o600, Commit: func(n int64) error { committed = n; return nil }})
	require.NoError(t, err)
	assert.EqualValues(t, 12, n)
	assert.EqualValues(t, 12, committed)
	st, err := os.Stat(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Equal(t, []string{"f"}, names())
}

func TestListRemoveRename(t *testing.T) {
	r, dir, _ := newRoot(t)
	tree(t, dir, "a/b/c", "a/x", "a/l -> b", "top")
	var out bytes.Buffer
	n, err := r.List("/a", 0, &out)
	require.NoError(t, err)
	assert.EqualValues(t, 4, n)
	var paths []string
	dec := json.NewDecoder(&out)
	for dec.More() {
		var e Entry
		require.NoError(t, dec.Decode(&e))
		paths = append(paths, e.Path+":"+e.Type+":"+e.Target)
	}
	assert.Equal(t, []string{"/a/b:dir:", "/a/b/c:file:", "/a/l:symlink:b", "/a/x:file:"}, paths)
	out.Reset()
	n, err = r.List("/a", 1, &out)
	require.NoError(t, err)
	assert.EqualValues(t, 3, n, "one level")

	require.NoError(t, r.Rename("/top", "/a/b"))
	assert.FileExists(t, filepath.Join(dir, "a/b/top"), "into a directory, as mv")
	assert.ErrorIs(t, r.Remove("/a", false), unix.ENOTEMPTY)
	require.NoError(t, r.Remove("/a", true))
	assert.NoDirExists(t, filepath.Join(dir, "a"))
	assert.ErrorIs(t, r.Remove("/", true), unix.EBUSY)
	s, err := r.Statfs("/")
	require.NoError(t, err)
	assert.Positive(t, s.TotalBytes)
}

type tarEntry struct {
	name, link string
	typ        byte
	body       string
	mode       int64
}

func mkTar(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0)}
		require.NoError(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return &b
}

func TestExtractRefuses(t *testing.T) {
	for what, tc := range map[string]struct {
		entries []tarEntry
		errno   error
	}{
		"absolute name":          {[]tarEntry{{name: "/canary", typ: tar.TypeReg, body: "x"}}, unix.EINVAL},
		"dot-dot":                {[]tarEntry{{name: "../canary", typ: tar.TypeReg, body: "x"}}, unix.EINVAL},
		"symlink out":            {[]tarEntry{{name: "l", link: "../canary", typ: tar.TypeSymlink}}, unix.EXDEV},
		"absolute symlink":       {[]tarEntry{{name: "l", link: "/etc/passwd", typ: tar.TypeSymlink}}, unix.EXDEV},
		"hard link out":          {[]tarEntry{{name: "h", link: "../canary", typ: tar.TypeLink}}, unix.EXDEV},
		"absolute hard link":     {[]tarEntry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}, unix.EXDEV},
		"character device":       {[]tarEntry{{name: "null", typ: tar.TypeChar}}, unix.EPERM},
		"block device":           {[]tarEntry{{name: "sda", typ: tar.TypeBlock}}, unix.EPERM},
		"FIFO":                   {[]tarEntry{{name: "p", typ: tar.TypeFifo}}, unix.EPERM},
		"through a planted link": {[]tarEntry{{name: "planted/canary", typ: tar.TypeReg, body: "pwned"}}, unix.EXDEV},
	} {
		t.Run(what, func(t *testing.T) {
			r, dir, canary := newRoot(t)
			tree(t, dir, "dest/", "dest/planted -> ../..")
			_, _, err := r.Extract("/dest", mkTar(t, tc.entries...), ExtractOptions{})
			assert.ErrorIs(t, err, tc.errno)
			b, _ := os.ReadFile(canary)
			assert.Equal(t, "host secret", string(b))
			e, _ := os.ReadDir(filepath.Join(dir, "dest"))
			assert.Len(t, e, 1, "nothing but the planted link")
		})
	}
}

func TestExtractAndArchive(t *testing.T) {
	r, dir, _ := newRoot(t)
	src := mkTar(t,
		tarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		tarEntry{name: "ro/f", typ: tar.TypeReg, body: "in a read-only directory", mode: 0o444},
		tarEntry{name: "implicit/dir/f", typ: tar.TypeReg, body: "parents made"},
		tarEntry{name: "x", typ: tar.TypeReg, body: "exec", mode: 0o4755},
		tarEntry{name: "l", link: "ro/f", typ: tar.TypeSymlink},
		tarEntry{name: "h", link: "x", typ: tar.TypeLink},
	)
	size := int64(src.Len())
	var committed int64
	n, read, err := r.Extract("/dest", src, ExtractOptions{Mkdir: true, Commit: func(n int64) error { committed = n; return nil }})
	require.NoError(t, err)
	assert.EqualValues(t, 7, n)
	assert.Equal(t, size, read)
	assert.Equal(t, size, committed)
	st, err := os.Stat(filepath.Join(dir, "dest/x"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode()&(os.ModePerm|os.ModeSetuid), "no setuid")
	assert.Equal(t, time.Unix(1e9, 0), st.ModTime())
	st, err = os.Stat(filepath.Join(dir, "dest/ro"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o555), st.Mode().Perm(), "the directory's own mode, at the end")
	l, err := os.Readlink(filepath.Join(dir, "dest/l"))
	require.NoError(t, err)
	assert.Equal(t, "ro/f", l)
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "dest/fifo"), 0o644))

	var out bytes.Buffer
	entries, skipped, err := r.Archive("/dest", &out)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dest/fifo"}, skipped)
	assert.EqualValues(t, 8, entries) // h is archived as a file of its own
	var names []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"h", "implicit/", "implicit/dir/", "implicit/dir/f", "l", "ro/", "ro/f", "x"}, names)
	require.NoError(t, os.Chmod(filepath.Join(dir, "dest/ro"), 0o755)) // for t.TempDir's cleanup
}

// TestPutBeforeLinux610 writes as on a kernel that refuses linkat of an
// unnamed file without CAP_DAC_READ_SEARCH (before 6.10): the file is
// copied to a named one, and the result is the same.
func TestPutBeforeLinux610(t *testing.T) {
	r, dir, _ := newRoot(t)
	defer func(l func(int, string, int, string, int) error) { linkat = l }(linkat)
	linkat = func(int, string, int, string, int) error { return unix.ENOENT }
	data := bytes.Repeat([]byte("0123456789"), 100000)
	n, err := r.Put("/f", bytes.NewReader(data), PutOptions{Mode: 0o640})
	require.NoError(t, err)
	assert.EqualValues(t, len(data), n)
	b, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, data, b)
	st, err := os.Stat(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	e, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, e, 1, "no hidden file left")
}

func TestInto(t *testing.T) {
	r, dir, _ := newRoot(t)
	tree(t, dir, "d/", "l -> d", "f")
	for in, want := range map[string]string{"/d": "/d/x", "/l": "/l/x", "/f": "/f", "/new": "/new"} {
		got, err := r.into(in, "x")
		require.NoError(t, err)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"..", ".", "a/b", "a\x00"} {
		_, err := r.into("/d", bad)
		assert.ErrorIs(t, err, unix.EINVAL, bad)
	}
}

// TestExtractKeepLinks: a snapshot put back keeps its symlinks wherever
// they point, and still never writes through one, nor links out.
func TestExtractKeepLinks(t *testing.T) {
	r, dir, canary := newRoot(t)
	_, _, err := r.Extract("/dest", mkTar(t,
		tarEntry{name: "abs", link: "/etc", typ: tar.TypeSymlink},
		tarEntry{name: "up", link: "../../..", typ: tar.TypeSymlink},
	), ExtractOptions{Mkdir: true, KeepLinks: true})
	require.NoError(t, err)
	l, err := os.Readlink(filepath.Join(dir, "dest/abs"))
	require.NoError(t, err)
	assert.Equal(t, "/etc", l)
	for what, e := range map[string]tarEntry{
		"through a kept link": {name: "up/canary", typ: tar.TypeReg, body: "pwned"},
		"a hard link out":     {name: "h", link: "../canary", typ: tar.TypeLink},
		"an empty link":       {name: "e", typ: tar.TypeSymlink},
	} {
		_, _, err := r.Extract("/dest", mkTar(t, e), ExtractOptions{KeepLinks: true})
		assert.Error(t, err, what)
	}
	b, _ := os.ReadFile(canary)
	assert.Equal(t, "host secret", string(b))
}

// TestXattrsKept: an archive keeps a file's and a directory's user.*
// extended attributes as PAX records, and unpacking gives them back; an
// overlay's own (user.overlay.*) are not carried.
func TestXattrsKept(t *testing.T) {
	r, dir, _ := newRoot(t)
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o644))
	if err := unix.Setxattr(filepath.Join(src, "d", "f"), "user.k", []byte("file value"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", dir, err) // tmpfs before Linux 6.6
	}
	require.NoError(t, unix.Setxattr(filepath.Join(src, "d"), "user.dir", []byte("dir value"), 0))
	require.NoError(t, unix.Setxattr(filepath.Join(src, "d", "f"), "user.overlay.origin", []byte("layer"), 0))

	var out bytes.Buffer
	_, _, err := r.Archive("/src", &out)
	require.NoError(t, err)
	recs := map[string]map[string]string{}
	tr := tar.NewReader(bytes.NewReader(out.Bytes()))
	for h, err := tr.Next(); err != io.EOF; h, err = tr.Next() {
		require.NoError(t, err)
		recs[h.Name] = h.PAXRecords
	}
	assert.Equal(t, "file value", recs["d/f"]["SCHILY.xattr.user.k"])
	assert.Equal(t, "dir value", recs["d/"]["SCHILY.xattr.user.dir"])
	assert.NotContains(t, recs["d/f"], "SCHILY.xattr.user.overlay.origin")

	_, _, err = r.Extract("/dst", bytes.NewReader(out.Bytes()), ExtractOptions{Mkdir: true})
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dir, "dst", "d", "f"), "user.k", buf)
	require.NoError(t, err)
	assert.Equal(t, "file value", string(buf[:n]))
	n, err = unix.Getxattr(filepath.Join(dir, "dst", "d"), "user.dir", buf)
	require.NoError(t, err)
	assert.Equal(t, "dir value", string(buf[:n]))
	_, err = unix.Getxattr(filepath.Join(dir, "dst", "d", "f"), "user.overlay.origin", buf)
	assert.ErrorIs(t, err, unix.ENODATA)
}
