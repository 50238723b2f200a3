package jailfs

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"slices"
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

// ApplyLayer applies an image layer (as ArchiveLayers writes) to the
// directory clean, the jail's root, through the overlays at layers: every
// entry must lie below one of them. Files, directories and links are
// unpacked as Extract with KeepLinks does (a layer is the jail's own
// files); a whiteout removes what it names, and an opaque marker empties
// its directory of what was there before. Like Extract it syncs the file
// system and calls commit with the bytes read.
func (r *Root) ApplyLayer(clean string, src io.Reader, layers []string, commit func(n int64) error) (entries, n int64, err error) {
	var roots []string
	for _, l := range layers {
		name, err := layerName(l)
		if err != nil {
			return 0, 0, &Error{Op: "put_tar", Path: l, Errno: unix.EINVAL, Message: err.Error()}
		}
		roots = append(roots, name+"/")
	}
	dfd, err := r.openDir(clean, false)
	if err != nil {
		return 0, 0, err
	}
	dst := &Root{fd: dfd, resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	defer dst.Close()
	cr := &countReader{r: src}
	entries, err = dst.extractWith(cr, clean, true, func(hdr *tar.Header, name string) (bool, error) { return dst.layerOp(roots, hdr, name) })
	if err != nil {
		return entries, cr.n, err
	}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return entries, cr.n, newError("read", clean, err)
	}
	if err := syncfs(dfd); err != nil {
		return entries, cr.n, newError("syncfs", clean, err)
	}
	if commit != nil {
		if err := commit(cr.n); err != nil {
			return entries, cr.n, newError("put", clean, err)
		}
	}
	return entries, cr.n, nil
}

// layerOp checks that entry name lies in one of the layers' roots and
// carries it out if it is a whiteout or an opaque marker, reporting
// whether it was one. A directory that is the root of a mount below a
// layer's (a mask, a bind or tmpfs of the Spec: the upper layer holds
// the mount point the plan made) is left as the mount has it, and also
// reported done.
func (r *Root) layerOp(roots []string, hdr *tar.Header, name string) (bool, error) {
	in := false
	for _, root := range roots {
		in = in || strings.HasPrefix(name, root)
	}
	if !in {
		return false, &Error{Op: "tar entry", Path: name, Errno: unix.EPERM, Message: "lies outside the overlays (" + strings.Join(roots, ", ") + ")"}
	}
	dir, base := path.Split(name)
	if !strings.HasPrefix(base, whiteoutPrefix) {
		if hdr.Typeflag != tar.TypeDir || slices.Contains(roots, name+"/") {
			return false, nil
		}
		return r.mountRoot(dir, base)
	}
	dfd, err := r.openat2(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == unix.ENOENT {
		return true, nil // nothing there to hide
	}
	if err != nil {
		return true, newError("open", dir, err)
	}
	defer unix.Close(dfd)
	if base == opaqueMarker {
		return true, clearDir(dfd, "/"+dir)
	}
	gone := strings.TrimPrefix(base, whiteoutPrefix)
	if gone == "" || gone == "." || gone == ".." || strings.HasPrefix(gone, whiteoutPrefix) {
		return true, &Error{Op: "tar entry", Path: name, Errno: unix.EINVAL, Message: "not a whiteout of a name"}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, gone, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return true, nil
	} else if err != nil {
		return true, newError("stat", "/"+dir+gone, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, removeAll(dfd, gone, "/"+dir+gone)
	}
	return true, wrap("unlink", "/"+dir+gone, unix.Unlinkat(dfd, gone, 0))
}

// mountRoot reports whether dir/base (dir relative to r, with its
// trailing slash) is the root of a mount; false if it does not exist.
func (r *Root) mountRoot(dir, base string) (bool, error) {
	dfd, err := r.openat2(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, newError("open", dir, err)
	}
	defer unix.Close(dfd)
	var stx unix.Statx_t
	switch err := unix.Statx(dfd, base, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE, &stx); {
	case err == unix.ENOENT:
		return false, nil
	case err != nil:
		return false, newError("statx", dir+base, err)
	case stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0:
		return false, newError("statx", dir+base, unix.ENOSYS) // Linux 5.8; an overlay workspace needs 6.6
	}
	return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}
