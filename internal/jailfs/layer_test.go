package jailfs

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLayerRoundTrip archives an overlay's upper directory as an image
// layer (a whiteout, an opaque directory, a new file) and makes the
// layer tree of it that a session made from the snapshot has as a lower
// layer: the overlay's own whiteout and opaque directory, and the new
// file. Whiteouts are character devices 0/0, which only root
// makes outside an overlay.
func TestLayerRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a whiteout needs root (CI runs this as root)")
	}
	r, dir, _ := newRoot(t)
	up := filepath.Join(dir, "upper", "usr")
	require.NoError(t, os.MkdirAll(filepath.Join(up, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(up, "bin", "new"), []byte("new"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(up, "bin", "gone"), unix.S_IFCHR, 0))
	require.NoError(t, os.MkdirAll(filepath.Join(up, "opq"), 0o755))
	require.NoError(t, unix.Setxattr(filepath.Join(up, "opq"), opaqueXattr, []byte("y"), 0))
	require.NoError(t, os.WriteFile(filepath.Join(up, "opq", "only"), []byte("only"), 0o644))

	var layer bytes.Buffer
	n, skipped, err := r.ArchiveLayers("/upper", []string{"/usr"}, &layer)
	require.NoError(t, err)
	assert.Empty(t, skipped)
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer.Bytes()))
	for h, err := tr.Next(); err != io.EOF; h, err = tr.Next() {
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	assert.Equal(t, []string{"usr/bin/", "usr/bin/.wh.gone", "usr/bin/new", "usr/opq/", "usr/opq/.wh..wh..opq", "usr/opq/only"}, names)
	assert.EqualValues(t, len(names), n)

	// The snapshot's layer tree, as a session made from it has it as its
	// lower layer: what the whiteout names is the overlay's whiteout, the
	// opaque directory holds only its own entries (and says it is
	// opaque), and the new file is there.
	low := filepath.Join(dir, "tree")
	require.NoError(t, os.Mkdir(low, 0o700))
	lowF, err := os.Open(low)
	require.NoError(t, err)
	defer lowF.Close()
	entries, read, err := BuildLayerTree(nil, lowF, []string{"/usr"}, bytes.NewReader(layer.Bytes()))
	require.NoError(t, err)
	assert.EqualValues(t, len(names), entries)
	assert.EqualValues(t, layer.Len(), read)
	list := func(d string) []string {
		es, err := os.ReadDir(filepath.Join(low, d))
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	assert.Equal(t, []string{"gone", "new"}, list("usr/bin"))
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(low, "usr/bin/gone"), &st))
	assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT, "a whiteout")
	assert.Equal(t, []string{"only"}, list("usr/opq"))
	buf := make([]byte, 2)
	n2, err := unix.Getxattr(filepath.Join(low, "usr/opq"), opaqueXattr, buf)
	require.NoError(t, err)
	assert.Equal(t, "y", string(buf[:n2]))

	// An entry outside the overlays is refused, and a whiteout of
	// nothing is no whiteout.
	for i, e := range []tarEntry{
		{name: "etc/passwd", typ: tar.TypeReg, body: "x"},
		{name: "usr/.wh..", typ: tar.TypeReg},
	} {
		d := filepath.Join(dir, fmt.Sprint("refused", i))
		require.NoError(t, os.Mkdir(d, 0o700))
		f, err := os.Open(d)
		require.NoError(t, err)
		_, _, err = BuildLayerTree(nil, f, []string{"/usr"}, mkTar(t, e))
		f.Close()
		assert.Error(t, err, e.name)
	}
	// A file of the workload's named like a whiteout cannot be kept.
	require.NoError(t, os.WriteFile(filepath.Join(up, ".wh.mine"), nil, 0o644))
	_, _, err = r.ArchiveLayers("/upper", []string{"/usr"}, io.Discard)
	assert.ErrorContains(t, err, "reads as a whiteout")
}

// TestBuildLayerTree makes a layer tree from an image layer, then a
// second one from that tree and a layer of changes over it, as a
// snapshot of a session made from a snapshot does: what the second
// layer leaves alone is a hard link into the first tree, what it
// changes is new in the second only (the first tree is never written
// through), and whiteouts and opaque directories are the overlay's own.
// A name through a symlink, or outside the overlays, is refused with
// nothing made outside the tree.
func TestBuildLayerTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a whiteout needs root (CI runs this as root)")
	}
	dir := t.TempDir()
	open := func(p string) *os.File {
		require.NoError(t, os.MkdirAll(p, 0o700))
		f, err := os.Open(p)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	layers := []string{"/usr", "/lib"}
	first := filepath.Join(dir, "first")
	_, _, err := BuildLayerTree(nil, open(first), layers, mkTar(t,
		tarEntry{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "usr/keep", typ: tar.TypeReg, body: "keep"},
		tarEntry{name: "usr/change", typ: tar.TypeReg, body: "old"},
		tarEntry{name: "usr/.wh.gone", typ: tar.TypeReg},
		tarEntry{name: "usr/d/", typ: tar.TypeDir, mode: 0o750},
		tarEntry{name: "usr/d/f", typ: tar.TypeReg, body: "f"},
		tarEntry{name: "usr/link", typ: tar.TypeSymlink, link: "/etc/passwd"},
		tarEntry{name: "usr/setuid", typ: tar.TypeReg, body: "s", mode: 0o4755},
	))
	require.NoError(t, err)
	whiteout := func(p string) {
		t.Helper()
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT, p)
		assert.Zero(t, st.Rdev, p)
	}
	whiteout(filepath.Join(first, "usr/gone"))
	assert.DirExists(t, filepath.Join(first, "lib"), "a directory for every overlay")
	fi, err := os.Stat(filepath.Join(first, "usr", "setuid"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode(), "no setuid bit")

	second := filepath.Join(dir, "second")
	_, _, err = BuildLayerTree(open(first), open(second), layers, mkTar(t,
		tarEntry{name: "usr/change", typ: tar.TypeReg, body: "new"},
		tarEntry{name: "usr/gone", typ: tar.TypeDir, mode: 0o755}, // a directory where a whiteout was
		tarEntry{name: "usr/gone/.wh..wh..opq", typ: tar.TypeReg},
		tarEntry{name: "usr/d/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "usr/d/.wh..wh..opq", typ: tar.TypeReg},
		tarEntry{name: "usr/d/only", typ: tar.TypeReg, body: "only"},
		tarEntry{name: "usr/.wh.keep2", typ: tar.TypeReg},
		tarEntry{name: "lib/new", typ: tar.TypeReg, body: "lib"},
	))
	require.NoError(t, err)
	ino := func(p string) uint64 {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		return st.Ino
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, ino(filepath.Join(first, "usr/keep")), ino(filepath.Join(second, "usr/keep")), "a hard link")
	assert.Equal(t, ino(filepath.Join(first, "usr/link")), ino(filepath.Join(second, "usr/link")), "a symlink linked as itself")
	assert.Equal(t, "old", read(filepath.Join(first, "usr/change")), "the first tree is not written through")
	assert.Equal(t, "new", read(filepath.Join(second, "usr/change")))
	whiteout(filepath.Join(first, "usr/gone"))
	whiteout(filepath.Join(second, "usr/keep2"))
	buf := make([]byte, 2)
	for _, d := range []string{"usr/gone", "usr/d"} {
		n, err := unix.Getxattr(filepath.Join(second, d), opaqueXattr, buf)
		require.NoError(t, err, d)
		assert.Equal(t, "y", string(buf[:n]), d)
	}
	es, err := os.ReadDir(filepath.Join(second, "usr/d"))
	require.NoError(t, err)
	require.Len(t, es, 1)
	assert.Equal(t, "only", es[0].Name())
	assert.FileExists(t, filepath.Join(first, "usr/d/f"), "the first tree's directory is its own")
	assert.Equal(t, "lib", read(filepath.Join(second, "lib/new")))

	// What the tree reads back as: the same image layer.
	r, err := rootOf(open(second), unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	require.NoError(t, err)
	defer r.Close()
	var layer bytes.Buffer
	_, _, err = r.ArchiveLayers("/", layers, &layer)
	require.NoError(t, err)
	var names []string
	tr := tar.NewReader(&layer)
	for h, err := tr.Next(); err != io.EOF; h, err = tr.Next() {
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	assert.ElementsMatch(t, []string{"usr/.wh.keep2", "usr/change", "usr/d/", "usr/d/.wh..wh..opq", "usr/d/only", "usr/gone/", "usr/gone/.wh..wh..opq",
		"usr/keep", "usr/link", "usr/setuid", "lib/new"}, names)

	// Refused: through a symlink of the tree, and outside the overlays.
	outside := filepath.Join(dir, "outside")
	require.NoError(t, os.Mkdir(outside, 0o755))
	_, _, err = BuildLayerTree(nil, open(filepath.Join(dir, "t1")), layers, mkTar(t,
		tarEntry{name: "usr/out", typ: tar.TypeSymlink, link: outside}, tarEntry{name: "usr/out/x", typ: tar.TypeReg, body: "x"}))
	assert.Error(t, err)
	_, _, err = BuildLayerTree(nil, open(filepath.Join(dir, "t2")), layers, mkTar(t, tarEntry{name: "etc/passwd", typ: tar.TypeReg, body: "x"}))
	assert.ErrorContains(t, err, "outside the overlays")
	_, _, err = BuildLayerTree(nil, open(filepath.Join(dir, "t3")), layers, mkTar(t,
		tarEntry{name: "usr/out", typ: tar.TypeSymlink, link: outside}, tarEntry{name: "usr/out/.wh.x", typ: tar.TypeReg}))
	assert.Error(t, err)
	es, err = os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, es, "nothing made through a symlink")
}
