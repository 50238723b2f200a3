package jailfs

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLayerRoundTrip archives an overlay's upper directory as an image
// layer (a whiteout, an opaque directory, a new file) and applies it to
// a tree that stands for the lower layer: what the whiteout names is
// gone, the opaque directory holds only its own entries, and the new
// file is there. Whiteouts are character devices 0/0, which only root
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

	// The lower layer, as a session made from the snapshot sees it.
	low := filepath.Join(dir, "merged")
	require.NoError(t, os.MkdirAll(filepath.Join(low, "usr", "bin"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(low, "usr", "opq", "d"), 0o755))
	for _, f := range []string{"usr/bin/gone", "usr/bin/kept", "usr/opq/old", "usr/opq/d/f"} {
		require.NoError(t, os.WriteFile(filepath.Join(low, f), []byte(f), 0o644))
	}
	var committed int64
	entries, read, err := r.ApplyLayer("/merged", bytes.NewReader(layer.Bytes()), []string{"/usr"}, func(n int64) error { committed = n; return nil })
	require.NoError(t, err)
	assert.EqualValues(t, len(names), entries)
	assert.Equal(t, read, committed)
	list := func(d string) []string {
		es, err := os.ReadDir(filepath.Join(low, d))
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	assert.Equal(t, []string{"kept", "new"}, list("usr/bin"))
	assert.Equal(t, []string{"only"}, list("usr/opq"))

	// An entry outside the overlays is refused, and a whiteout of
	// nothing is no whiteout.
	for _, e := range []tarEntry{
		{name: "etc/passwd", typ: tar.TypeReg, body: "x"},
		{name: "usr/.wh..", typ: tar.TypeReg},
	} {
		_, _, err = r.ApplyLayer("/merged", mkTar(t, e), []string{"/usr"}, nil)
		assert.Error(t, err, e.name)
	}
	// A file of the workload's named like a whiteout cannot be kept.
	require.NoError(t, os.WriteFile(filepath.Join(up, ".wh.mine"), nil, 0o644))
	_, _, err = r.ArchiveLayers("/upper", []string{"/usr"}, io.Discard)
	assert.ErrorContains(t, err, "reads as a whiteout")
}
