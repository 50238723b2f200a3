package jailfs

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// An overlay workspace's changes are its overlays' upper layers. They are
// carried as one OCI image layer (image-spec layer.md): names from the
// jail's root, a file the overlay deleted as an empty ".wh.NAME" beside
// where it was (the overlay's whiteout: a character device 0/0), and a
// directory the overlay made opaque (one whose lower contents it hides)
// with a ".wh..wh..opq" entry in it, right after the directory's own.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	// opaqueXattr marks an opaque directory of an overlay mounted with
	// userxattr (in a user namespace); trusted.overlay.opaque otherwise.
	opaqueXattr = "user.overlay.opaque"
)

// layerName returns the layer name of overlay target l ("/usr" -> "usr").
func layerName(l string) (string, error) {
	c, err := CleanPath(l)
	if err != nil || c == "/" {
		return "", fmt.Errorf("overlay %q: want an absolute path below /", l)
	}
	return rel(c), nil
}

// ArchiveLayers writes the upper layers of the overlays at layers, whose
// upper directories are upper+L for each L, to w as one image layer. The
// directories at the layers' roots are not entries (the plan made them).
// A file whose own name starts with ".wh." cannot be told from a whiteout
// in a layer and fails the archive.
func (r *Root) ArchiveLayers(upper string, layers []string, w io.Writer) (entries int64, skipped []string, err error) {
	tw := tar.NewWriter(w)
	a := &archiver{tw: tw, layer: true}
	for _, l := range layers {
		name, err := layerName(l)
		if err != nil {
			return a.n, a.skipped, &Error{Op: "archive", Path: l, Errno: unix.EINVAL, Message: err.Error()}
		}
		p := path.Join(upper, name)
		fd, err := r.openat2(rel(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return a.n, a.skipped, newError("open", p, err)
		}
		if err := a.dir(fd, name+"/", p); err != nil {
			return a.n, a.skipped, err
		}
	}
	if err := tw.Close(); err != nil {
		return a.n, a.skipped, newError("write", upper, err)
	}
	return a.n, a.skipped, nil
}

// layerEntry archives what only a layer has: a whiteout (the overlay's
// character device 0/0) as ".wh.NAME". It reports whether it did.
func (a *archiver) layerEntry(prefix, n, p string, st *unix.Stat_t) (bool, error) {
	if !a.layer || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		return false, nil
	}
	h := header(prefix+whiteoutPrefix+n, st, tar.TypeReg)
	h.Mode = 0o600
	if err := a.tw.WriteHeader(h); err != nil {
		return true, newError("write", p, err)
	}
	a.n++
	return true, nil
}

// opaque archives, after directory fd's own entry, the marker of an
// opaque directory.
func (a *archiver) opaque(fd int, name, p string, st *unix.Stat_t) error {
	if !a.layer {
		return nil
	}
	buf := make([]byte, 2)
	if n, err := unix.Fgetxattr(fd, opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		return nil // ENODATA: a directory like any other
	}
	if err := a.tw.WriteHeader(header(name+opaqueMarker, st, tar.TypeReg)); err != nil {
		return newError("write", p, err)
	}
	a.n++
	return nil
}

// checkLayerName refuses a name a layer cannot hold.
func (a *archiver) checkLayerName(n, p string) error {
	if a.layer && strings.HasPrefix(n, whiteoutPrefix) {
		return &Error{Op: "archive", Path: p, Errno: unix.EINVAL, Message: "a name starting with .wh. cannot be kept in an image layer (it reads as a whiteout)"}
	}
	return nil
}
