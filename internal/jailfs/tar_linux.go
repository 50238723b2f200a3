package jailfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ExtractOptions shape [Root.Extract].
type ExtractOptions struct {
	// Mkdir makes the destination (and what is missing above it).
	Mkdir bool
	// Clear removes everything in the destination first (never following
	// a symlink).
	Clear bool
	// KeepLinks makes symlinks as they are, wherever they point: for a
	// snapshot of the jail's own workspace put back (restore), where a
	// link to /etc/hostname is the workload's, not an escape. A link is
	// still never followed: every entry is resolved beneath the
	// destination, and hard links must stay in it.
	KeepLinks bool
	// Commit is called once the whole archive is unpacked and synced, with
	// the bytes read; an error fails the operation (what was unpacked
	// stays).
	Commit func(n int64) error
}

// Extract unpacks the tar stream src into the directory at clean.
//
// Every entry is resolved beneath the destination (RESOLVE_BENEATH): a
// symlink, the archive's own or one that was there, that leads out of it
// fails the entry. Names are checked by [TarName], symlink contents by
// [LinkStays], a hard link's target like a name; device nodes, FIFOs and
// every other kind of entry are refused. The first refused entry ends the
// extraction with an error naming it; the entries before it stay. Files
// get their permission bits (no setuid, setgid or sticky) and times, and
// the caller's ids; each is written as [Root.Put] writes, so a reader
// never sees half of one.
func (r *Root) Extract(clean string, src io.Reader, o ExtractOptions) (entries, n int64, err error) {
	dfd, err := r.openDir(clean, o.Mkdir)
	if err != nil {
		return 0, 0, err
	}
	dst := &Root{fd: dfd, resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	defer dst.Close()
	if o.Clear {
		if err := clearDir(dfd, clean); err != nil {
			return 0, 0, err
		}
	}
	cr := &countReader{r: src}
	entries, err = dst.extractWith(cr, clean, o.KeepLinks, nil)
	if err != nil {
		return entries, cr.n, err
	}
	// The stream past the archive's end, for the count the commit checks.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return entries, cr.n, newError("read", clean, err)
	}
	if err := syncfs(dfd); err != nil {
		return entries, cr.n, newError("syncfs", clean, err)
	}
	if o.Commit != nil {
		if err := o.Commit(cr.n); err != nil {
			return entries, cr.n, newError("put", clean, err)
		}
	}
	return entries, cr.n, nil
}

// ExtractInto unpacks src into the directory dir (a host directory the
// caller opened; O_PATH will do) as Extract does: what a jail archived is
// as untrusted on the host as in the jail.
func ExtractInto(dir *os.File, src io.Reader) (int64, error) {
	dst, err := rootOf(dir, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	// No syncfs here: on the host that would flush every dirty page of
	// the file system, everyone's; a copy out is as durable as cp's.
	return dst.extractWith(src, dir.Name(), false, nil)
}

// ArchiveDir writes the host directory dir (opened by the caller) to w as
// Archive does.
func ArchiveDir(dir *os.File, w io.Writer) (entries int64, skipped []string, err error) {
	r, err := rootOf(dir, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	return r.Archive("/", w)
}

// rootOf makes a Root of a duplicate of dir's descriptor.
func rootOf(dir *os.File, resolve uint64) (*Root, error) {
	fd, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, newError("dup", dir.Name(), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return nil, &Error{Op: "open", Path: dir.Name(), Errno: unix.ENOTDIR, Message: "not a directory"}
	}
	return &Root{fd: fd, resolve: resolve}, nil
}

// syncfs syncs the file system of the directory dfd (an O_PATH
// descriptor, which syncfs(2) does not take).
func syncfs(dfd int) error {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// dirTimes is a directory whose mode and times are set once everything
// in it is unpacked: a read-only directory would refuse its own entries.
type dirTimes struct {
	name   string
	mode   uint32
	mtime  time.Time
	xattrs map[string]string
}

// extractWith unpacks src beneath r; special, when not nil, sees each
// entry first (its header and cleaned name) and may carry it out itself
// (reporting true) or refuse it.
func (r *Root) extractWith(src io.Reader, dest string, keepLinks bool, special func(hdr *tar.Header, name string) (bool, error)) (int64, error) {
	tr := tar.NewReader(src)
	var dirs []dirTimes
	var n int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, newError("tar", dest, err)
		}
		name, err := TarName(hdr.Name)
		if err != nil {
			return n, &Error{Op: "tar entry", Path: hdr.Name, Errno: unix.EINVAL, Message: err.Error()}
		}
		if special != nil {
			if done, err := special(hdr, name); err != nil {
				return n, err
			} else if done {
				n++
				continue
			}
		}
		if err := r.extractOne(tr, hdr, name, keepLinks, &dirs); err != nil {
			return n, err
		}
		n++
	}
	// Deepest first: a directory's time changes with each entry made in it.
	slices.SortFunc(dirs, func(a, b dirTimes) int { return strings.Count(b.name, "/") - strings.Count(a.name, "/") })
	for _, d := range dirs {
		fd, err := r.openat2(d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return n, newError("open", d.name, err)
		}
		err = setXattrs(fd, d.xattrs)
		if err == nil {
			err = unix.Fchmod(fd, d.mode)
		}
		if err == nil && !d.mtime.IsZero() {
			err = unix.UtimesNanoAt(fd, "", times(d.mtime), unix.AT_EMPTY_PATH)
		}
		unix.Close(fd)
		if err != nil {
			return n, newError("chmod", d.name, err)
		}
	}
	return n, nil
}

func times(t time.Time) []unix.Timespec {
	ts := unix.NsecToTimespec(t.UnixNano())
	return []unix.Timespec{ts, ts}
}

// extractOne unpacks one entry; name is its cleaned name ("" for the
// destination itself).
func (r *Root) extractOne(tr *tar.Reader, hdr *tar.Header, name string, keepLinks bool, dirs *[]dirTimes) error {
	perm := uint32(hdr.Mode) & 0o777
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			*dirs = append(*dirs, dirTimes{"", perm | 0o700, hdr.ModTime, tarXattrs(hdr)})
			return nil
		}
		return &Error{Op: "tar entry", Path: hdr.Name, Errno: unix.EINVAL, Message: "names the destination itself"}
	}
	// What the entry is and where it points is checked before anything
	// is made for it.
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA:
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return &Error{Op: "tar entry", Path: name, Errno: unix.EINVAL, Message: "a symlink to nothing"}
		}
		if !keepLinks && !LinkStays(name, hdr.Linkname) {
			return &Error{Op: "tar entry", Path: name, Errno: unix.EXDEV, Message: fmt.Sprintf("a symlink to %q, which leaves the destination", hdr.Linkname)}
		}
	case tar.TypeLink:
		if target, err := TarName(hdr.Linkname); err != nil || target == "" {
			return &Error{Op: "tar entry", Path: name, Errno: unix.EXDEV, Message: fmt.Sprintf("a hard link to %q, which is not in the destination", hdr.Linkname)}
		}
	default:
		return &Error{Op: "tar entry", Path: name, Errno: unix.EPERM, Message: "is a " + tarKind(hdr.Typeflag) + ": refused"}
	}
	dir, base := path.Split(name)
	pfd, err := r.mkdirAll(strings.TrimSuffix(dir, "/"))
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Errno == unix.EXDEV {
			return &Error{Op: "tar entry", Path: name, Errno: unix.EXDEV, Message: "a symlink on the way to it leaves the destination"}
		}
		return err
	}
	defer unix.Close(pfd)
	switch hdr.Typeflag {
	case tar.TypeDir:
		// Owner rwx while it fills; its own mode at the end.
		err := unix.Mkdirat(pfd, base, 0o700)
		if err == unix.EEXIST {
			var st unix.Stat_t
			if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return &Error{Op: "tar entry", Path: name, Errno: unix.EEXIST, Message: "exists and is not a directory"}
			}
		} else if err != nil {
			return newError("mkdir", name, err)
		}
		*dirs = append(*dirs, dirTimes{name, perm, hdr.ModTime, tarXattrs(hdr)})
	case tar.TypeReg, tar.TypeRegA:
		if err := replaceableByTar(pfd, base, name); err != nil {
			return err
		}
		w, err := writeFile(pfd, base, name, tr, fileOpts{mode: perm, mtime: hdr.ModTime, xattrs: tarXattrs(hdr)})
		if err != nil {
			return err
		}
		if w != hdr.Size {
			return &Error{Op: "tar entry", Path: name, Message: fmt.Sprintf("%d bytes, the header says %d", w, hdr.Size)}
		}
	case tar.TypeSymlink:
		if err := replaceableByTar(pfd, base, name); err != nil {
			return err
		}
		return placeNew(pfd, base, name, func(tmp string) error { return unix.Symlinkat(hdr.Linkname, pfd, tmp) })
	case tar.TypeLink:
		target, _ := TarName(hdr.Linkname)
		tdir, tbase := path.Split(target)
		tfd, err := r.openat2(strings.TrimSuffix(tdir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return newError("open", target, err)
		}
		defer unix.Close(tfd)
		if err := replaceableByTar(pfd, base, name); err != nil {
			return err
		}
		return placeNew(pfd, base, name, func(tmp string) error { return unix.Linkat(tfd, tbase, pfd, tmp, 0) })
	}
	return nil
}

// replaceableByTar refuses to replace a directory with a file; a file or
// a symlink at the name is replaced (renamed over: nothing is written
// through it).
func replaceableByTar(dfd int, name, jailPath string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return &Error{Op: "tar entry", Path: jailPath, Errno: unix.EISDIR, Message: "is a directory"}
	}
	return nil
}

// placeNew makes a file with make under a hidden name and renames it to
// name.
func placeNew(dfd int, name, jailPath string, make func(tmp string) error) error {
	for i := 0; ; i++ {
		tmp := ".jail-tar-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		err := make(tmp)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return newError("create", jailPath, err)
		}
		if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
			_ = unix.Unlinkat(dfd, tmp, 0)
			return newError("rename", jailPath, err)
		}
		return nil
	}
}

func tarKind(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	}
	return "tar entry of type " + strconv.Quote(string(t))
}

// mkdirAll opens the directory rel (relative to the root, "" for the root
// itself), making what is missing, each element resolved beneath.
func (r *Root) mkdirAll(rel string) (int, error) {
	fd, err := r.openat2(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != unix.ENOENT {
		if err != nil {
			return -1, newError("open", rel, err)
		}
		return fd, nil
	}
	done := ""
	for _, e := range strings.Split(rel, "/") {
		if e == "" {
			continue
		}
		pfd, err := r.openat2(done, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, newError("open", done, err)
		}
		err = unix.Mkdirat(pfd, e, 0o755)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return -1, newError("mkdir", path.Join(done, e), err)
		}
		done = path.Join(done, e)
	}
	fd, err = r.openat2(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, newError("open", rel, err)
	}
	return fd, nil
}

// Archive writes the tree at clean (a final symlink is followed, in the
// root) to w as a tar stream: directories, regular files and symlinks,
// named relative to clean (a file alone is named by its last element).
// Nothing below clean is followed: a symlink is archived as one. FIFOs,
// sockets and devices are left out and returned. A file that changes size
// while it is read fails the archive rather than give a torn entry.
func (r *Root) Archive(clean string, w io.Writer) (entries int64, skipped []string, err error) {
	tw := tar.NewWriter(w)
	fd, err := r.openat2(rel(clean), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return 0, nil, newError("open", clean, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return 0, nil, newError("stat", clean, err)
	}
	a := &archiver{tw: tw}
	_, base := split(clean)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err = a.dir(fd, "", clean)
	case unix.S_IFREG:
		err = a.file(fd, base, clean, &st)
		unix.Close(fd)
	default:
		unix.Close(fd)
		return 0, nil, &Error{Op: "archive", Path: clean, Errno: unix.EINVAL, Message: "is a " + typeName(st.Mode)}
	}
	if err != nil {
		return a.n, a.skipped, err
	}
	if err := tw.Close(); err != nil {
		return a.n, a.skipped, newError("write", clean, err)
	}
	return a.n, a.skipped, nil
}

type archiver struct {
	tw      *tar.Writer
	n       int64
	skipped []string
	layer   bool // an image layer of an overlay's upper directory (ArchiveLayers)
}

func header(name string, st *unix.Stat_t, typ byte) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Format: tar.FormatPAX}
}

// dir archives the entries of directory fd (closing it), named below
// prefix ("" for the top).
func (a *archiver) dir(fd int, prefix, jailPath string) error {
	d := os.NewFile(uintptr(fd), jailPath)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return newError("readdir", jailPath, err)
	}
	slices.Sort(names)
	for _, n := range names {
		name, p := prefix+n, strings.TrimSuffix(jailPath, "/")+"/"+n
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			continue
		} else if err != nil {
			return newError("stat", p, err)
		}
		if done, err := a.layerEntry(prefix, n, p, &st); done || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err := a.checkLayerName(n, p); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return newError("open", p, err)
			}
			h := header(name+"/", &st, tar.TypeDir)
			if err := addXattrs(h, sub); err != nil {
				unix.Close(sub)
				return newError("listxattr", p, err)
			}
			if err := a.tw.WriteHeader(h); err != nil {
				unix.Close(sub)
				return newError("write", p, err)
			}
			a.n++
			if err := a.opaque(sub, name+"/", p, &st); err != nil {
				unix.Close(sub)
				return err
			}
			if err := a.dir(sub, name+"/", p); err != nil {
				return err
			}
		case unix.S_IFREG:
			ffd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return newError("open", p, err)
			}
			var fst unix.Stat_t
			err = unix.Fstat(ffd, &fst)
			if err == nil && fst.Mode&unix.S_IFMT != unix.S_IFREG {
				err = errors.New("replaced while archived")
			}
			if err == nil {
				err = a.file(ffd, name, p, &fst)
			}
			unix.Close(ffd)
			if err != nil {
				return newError("archive", p, err)
			}
		case unix.S_IFLNK:
			h := header(name, &st, tar.TypeSymlink)
			h.Linkname = readlink(fd, n)
			if err := a.tw.WriteHeader(h); err != nil {
				return newError("write", p, err)
			}
			a.n++
		default:
			a.skipped = append(a.skipped, p)
		}
	}
	return nil
}

// file archives the regular file fd (whose stat is st) as name.
func (a *archiver) file(fd int, name, jailPath string, st *unix.Stat_t) error {
	h := header(name, st, tar.TypeReg)
	h.Size = st.Size
	if err := addXattrs(h, fd); err != nil {
		return newError("listxattr", jailPath, err)
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return newError("write", jailPath, err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return newError("fcntl", jailPath, err)
	}
	n, err := io.CopyN(a.tw, fdFile(fd), st.Size)
	if err == io.EOF {
		return &Error{Op: "archive", Path: jailPath, Message: fmt.Sprintf("shrank to %d bytes while archived (was %d)", n, st.Size)}
	}
	if err != nil {
		return newError("read", jailPath, err)
	}
	a.n++
	return nil
}

// clearDir removes everything in the directory dfd (an O_PATH descriptor),
// as removeAll does below it.
func clearDir(dfd int, jailPath string) error {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return newError("open", jailPath, err)
	}
	d := os.NewFile(uintptr(fd), jailPath)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return newError("readdir", jailPath, err)
	}
	for _, n := range names {
		p := strings.TrimSuffix(jailPath, "/") + "/" + n
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			continue
		} else if err != nil {
			return newError("stat", p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAll(fd, n, p)
		} else {
			err = wrap("unlink", p, unix.Unlinkat(fd, n, 0))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
