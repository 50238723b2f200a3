package jailfs

import (
	"archive/tar"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A snapshot of an overlay workspace keeps its overlays' changes as a
// layer tree: the overlay's own format, so that the tree is a lower layer
// of the sessions made from it as it is, with nothing copied. Below one
// directory per overlay ("usr", "lib"), a whiteout is a character device
// 0/0 and an opaque directory has user.overlay.opaque "y" (the format of
// an overlay mounted with userxattr, in a user namespace). The tree holds
// every change from the host's directories: a snapshot of a session that
// was itself made from one holds its lower tree's changes too (as hard
// links, see BuildLayerTree). Every entry is the host root's, with no
// setuid, setgid or sticky bit; the tree is mounted with the id map of
// the host's directories (0 to the workload's ids), read-only.

// BuildLayerTree makes dst, an empty host directory the caller opened
// (O_PATH will do), the layer tree of the overlays at layers: the tree
// base (another layer tree, or nil) with the changes of src (an image
// layer as ArchiveLayers writes, of overlays over base) on top. base's
// entries are hard links, made in time by their number, not their size:
// a layer tree is never changed once made, and an entry src replaces is
// replaced (a new file renamed over it), never written through. Where a
// link cannot be made (another file system, a file's link count at its
// limit) the entry is copied.
//
// src is what a jail archived, as untrusted on the host as in the jail:
// its names resolve beneath dst with no symlink followed (a name through
// one fails the build), and it may hold nothing outside the layers. It
// returns the entries of src and the bytes it read. The caller removes
// dst on error.
func BuildLayerTree(base, dst *os.File, layers []string, src io.Reader) (entries, n int64, err error) {
	var roots []string
	for _, l := range layers {
		name, err := layerName(l)
		if err != nil {
			return 0, 0, &Error{Op: "layer tree", Path: l, Errno: unix.EINVAL, Message: err.Error()}
		}
		roots = append(roots, name+"/")
	}
	r, err := rootOf(dst, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	if base != nil {
		sfd, err := unix.Openat(int(base.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, 0, newError("open", base.Name(), err)
		}
		dfd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(sfd)
			return 0, 0, newError("open", dst.Name(), err)
		}
		if err := (&cloner{layer: true}).dir(sfd, dfd, base.Name()); err != nil {
			return 0, 0, err
		}
	}
	for _, root := range roots { // one directory per overlay, changed or not
		if err := unix.Mkdirat(r.fd, strings.TrimSuffix(root, "/"), 0o755); err != nil && err != unix.EEXIST {
			return 0, 0, newError("mkdir", root, err)
		}
	}
	cr := &countReader{r: src}
	entries, err = r.extractWith(cr, "/", true, func(hdr *tar.Header, name string) (bool, error) { return r.treeOp(roots, hdr, name) })
	if err != nil {
		return entries, cr.n, err
	}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return entries, cr.n, newError("read", dst.Name(), err)
	}
	return entries, cr.n, nil
}

// treeOp carries out a whiteout or an opaque marker of a layer as the
// overlay's own (reporting true); for another entry, it removes what the
// entry replaces when extractOne would not (a directory by a file, a file
// or whiteout by a directory) and reports false.
func (r *Root) treeOp(roots []string, hdr *tar.Header, name string) (bool, error) {
	if hdr.Typeflag == tar.TypeDir && slices.Contains(roots, name+"/") {
		return true, nil // an overlay's own directory: made already
	}
	if !slices.ContainsFunc(roots, func(root string) bool { return strings.HasPrefix(name, root) }) {
		return false, &Error{Op: "tar entry", Path: name, Errno: unix.EPERM, Message: "lies outside the overlays (" + strings.Join(roots, ", ") + ")"}
	}
	dir, base := path.Split(name)
	pfd, err := r.mkdirAll(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	exists := true
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		exists = false
	} else if err != nil {
		return false, newError("stat", name, err)
	}
	isDir := exists && st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case base == opaqueMarker:
		fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return true, newError("open", dir, err)
		}
		defer unix.Close(fd)
		if err := clearDir(fd, "/"+dir); err != nil {
			return true, err
		}
		return true, wrap("setxattr", dir, unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0))
	case strings.HasPrefix(base, whiteoutPrefix):
		gone := strings.TrimPrefix(base, whiteoutPrefix)
		if gone == "" || gone == "." || gone == ".." || strings.HasPrefix(gone, whiteoutPrefix) {
			return true, &Error{Op: "tar entry", Path: name, Errno: unix.EINVAL, Message: "not a whiteout of a name"}
		}
		var gst unix.Stat_t
		switch err := unix.Fstatat(pfd, gone, &gst, unix.AT_SYMLINK_NOFOLLOW); {
		case err == unix.ENOENT:
		case err != nil:
			return true, newError("stat", dir+gone, err)
		case gst.Mode&unix.S_IFMT == unix.S_IFDIR:
			if err := removeAll(pfd, gone, dir+gone); err != nil {
				return true, err
			}
		default:
			if err := unix.Unlinkat(pfd, gone, 0); err != nil {
				return true, newError("unlink", dir+gone, err)
			}
		}
		return true, wrap("mknod", dir+gone, unix.Mknodat(pfd, gone, unix.S_IFCHR, 0))
	case hdr.Typeflag == tar.TypeDir && exists && !isDir:
		return false, wrap("unlink", name, unix.Unlinkat(pfd, base, 0))
	case hdr.Typeflag != tar.TypeDir && isDir:
		return false, removeAll(pfd, base, name)
	}
	return false, nil
}

// hardLink links the entry n of sfd (not a directory) into dfd, for a
// layer tree; where a link cannot be made (another file system, a file's
// link count at its limit), it copies it.
func hardLink(sfd, dfd int, n, np string, st *unix.Stat_t) error {
	switch err := unix.Linkat(sfd, n, dfd, n, 0); err {
	case nil:
		return nil
	case unix.EXDEV, unix.EMLINK:
		return copyEntry(sfd, dfd, n, np, st)
	default:
		return newError("link", np, err)
	}
}

// copyEntry copies the entry n of sfd (not a directory) into dfd, for
// hardLink where a link cannot be made.
func copyEntry(sfd, dfd int, n, np string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return wrap("symlink", np, unix.Symlinkat(readlink(sfd, n), dfd, n))
	case unix.S_IFCHR:
		return wrap("mknod", np, unix.Mknodat(dfd, n, unix.S_IFCHR, 0))
	}
	in, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return newError("open", np, err)
	}
	defer unix.Close(in)
	out, err := unix.Openat(dfd, n, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return newError("create", np, err)
	}
	defer unix.Close(out)
	if _, err := io.Copy(fdFile(out), fdFile(in)); err != nil {
		return newError("copy", np, err)
	}
	if err := copyXattrs(in, out); err != nil {
		return newError("xattr", np, err)
	}
	return wrap("chmod", np, setMeta(out, "", st, false))
}

// ArchiveLayerTree writes the layer tree dir (a host directory the
// caller opened) of the overlays at layers to w as one image layer, as
// ArchiveLayers writes an overlay's upper layers. Nothing in it is
// followed.
func ArchiveLayerTree(dir *os.File, layers []string, w io.Writer) (entries int64, skipped []string, err error) {
	r, err := rootOf(dir, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	return r.ArchiveLayers("/", layers, w)
}
