package jailfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Root is a directory that paths are resolved in: the jail's root in the
// files helper, or a host directory that a jail's tar is unpacked into.
type Root struct {
	fd int
	// resolve is RESOLVE_IN_ROOT (the jail's root: ".." and absolute
	// symlinks stop at it) or RESOLVE_BENEATH (a destination: refuse what
	// leaves it), always with RESOLVE_NO_MAGICLINKS.
	resolve uint64
}

// OpenRoot opens dir as the root of a jail's paths (RESOLVE_IN_ROOT).
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, newError("open", dir, err)
	}
	return &Root{fd: fd, resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}, nil
}

// Close closes the root's descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// openat2 opens rel (relative to the root, "" for the root itself) with
// the root's resolution, retrying EAGAIN (openat2 asks for a retry when a
// rename raced with RESOLVE_IN_ROOT's lookup) and EINTR.
func (r *Root) openat2(rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: r.resolve}
	for {
		fd, err := unix.Openat2(r.fd, rel, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// rel turns a cleaned jail path into one relative to the root.
func rel(clean string) string { return strings.TrimPrefix(clean, "/") }

// openDir opens the directory at clean (following symlinks, in the
// root) as O_PATH; with mkdir it makes what is missing first, mode 0755,
// one element at a time, each resolved as the others are.
func (r *Root) openDir(clean string, mkdir bool) (int, error) {
	fd, err := r.openat2(rel(clean), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != unix.ENOENT || !mkdir {
		if err != nil {
			return -1, newError("open", clean, err)
		}
		return fd, nil
	}
	fd, err = r.openat2("", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, newError("open", "/", err)
	}
	done := ""
	for _, e := range strings.Split(rel(clean), "/") {
		if e == "" {
			continue
		}
		done += "/" + e
		if err := unix.Mkdirat(fd, e, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, newError("mkdir", done, err)
		}
		next, err := r.openat2(rel(done), unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return -1, newError("open", done, err)
		}
		fd = next
	}
	return fd, nil
}

// entry describes the file name in directory dirfd (not following a
// final symlink); jailPath is its path for the answer.
func entry(dirfd int, name, jailPath string) (*Entry, error) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return nil, newError("stat", jailPath, err)
	}
	e := &Entry{Name: name, Path: jailPath, Type: typeName(st.Mode), Size: st.Size, Mode: st.Mode & 0o7777,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(), UID: st.Uid, GID: st.Gid}
	if name == "" {
		_, e.Name = split(jailPath)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		e.Target = readlink(dirfd, name)
	}
	return e, nil
}

func readlink(dirfd int, name string) string {
	b := make([]byte, MaxPath)
	n, err := unix.Readlinkat(dirfd, name, b)
	if err != nil {
		return ""
	}
	return string(b[:n])
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "char"
	case unix.S_IFBLK:
		return "block"
	}
	return "unknown"
}

// Stat describes the file at clean, not following a final symlink.
func (r *Root) Stat(clean string) (*Entry, error) {
	dir, base := split(clean)
	dfd, err := r.openDir(dir, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return entry(dfd, base, clean)
}

// Get copies the regular file at clean (a final symlink is followed, in
// the root) to w. A FIFO or a device is refused, never opened for
// reading: a FIFO the workload planted would block the reader for ever.
func (r *Root) Get(clean string, w io.Writer) (*Entry, int64, error) {
	fd, err := r.openat2(rel(clean), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, newError("open", clean, err)
	}
	f := os.NewFile(uintptr(fd), clean)
	defer f.Close()
	e, err := entry(fd, "", clean)
	if err != nil {
		return nil, 0, err
	}
	if e.Type != "file" {
		errno := unix.EINVAL
		if e.Type == "dir" {
			errno = unix.EISDIR
		}
		return nil, 0, &Error{Op: "get", Path: clean, Errno: errno, Message: "is a " + e.Type + ", not a regular file"}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, 0, newError("fcntl", clean, err)
	}
	n, err := copyData(w, f)
	if err != nil {
		return e, n, newError("read", clean, err)
	}
	return e, n, nil // n, not e.Size, is what was read: /proc says 0, a log grows
}

// onlyReader hides a file's ReadFrom and WriteTo, so that io.Copy reads
// with read(2) into its buffer, in constant memory.
type onlyReader struct{ io.Reader }

// copyBytes is the buffer of a file's data on its way through: 1 MiB
// takes a 100 MiB put through 100 read/write pairs instead of 3,200 of
// io.Copy's 32 KiB, in constant memory (see bench/README.md).
const copyBytes = 1 << 20

// copyBufs holds the buffers of copyData: a tar of a thousand small
// files must not allocate a thousand of them.
var copyBufs = sync.Pool{New: func() any { return new([copyBytes]byte) }}

// copyData copies src to dst through one buffer of copyBytes.
func copyData(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[copyBytes]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, buf[:])
}

// onlyWriter hides a writer's ReadFrom, for the same reason.
type onlyWriter struct{ io.Writer }

// into returns clean/name when clean is an existing directory (followed
// in the root), else clean. name must be one file name.
func (r *Root) into(clean, name string) (string, error) {
	if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return "", &Error{Op: "put", Path: name, Errno: unix.EINVAL, Message: "not a file name"}
	}
	fd, err := r.openat2(rel(clean), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return clean, nil
	}
	unix.Close(fd)
	return strings.TrimSuffix(clean, "/") + "/" + name, nil
}

// PutOptions shape a write.
type PutOptions struct {
	// Mode is the new file's permission bits (0: 0644); setuid, setgid
	// and sticky are refused.
	Mode uint32
	// Mkdir makes missing directories above the file.
	Mkdir bool
	// Commit is called once all of src is written and synced, with the
	// number of bytes; an error undoes the write.
	Commit func(n int64) error
}

// Put writes src to a new regular file and puts it at clean in one
// rename: a reader sees the old file or the whole new one. An existing
// directory, symlink, FIFO or device at clean is refused (a final symlink
// is never followed), and so is a name whose directory is missing, unless
// Mkdir. Until the rename the new file has no name (O_TMPFILE): a write
// that fails, finds no space or is killed leaves nothing behind.
func (r *Root) Put(clean string, src io.Reader, o PutOptions) (int64, error) {
	dir, base := split(clean)
	if base == "" {
		return 0, &Error{Op: "put", Path: clean, Errno: unix.EISDIR, Message: "is the root"}
	}
	mode := o.Mode
	if mode == 0 {
		mode = 0o644
	}
	if mode&^0o777 != 0 {
		return 0, &Error{Op: "put", Path: clean, Errno: unix.EINVAL, Message: fmt.Sprintf("mode %#o: only permission bits (0777)", mode)}
	}
	dfd, err := r.openDir(dir, o.Mkdir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	if err := replaceable(dfd, base, clean); err != nil {
		return 0, err
	}
	return writeFile(dfd, base, clean, src, fileOpts{mode: mode, commit: o.Commit, sync: true})
}

// replaceable refuses what a write must not replace: anything at name that
// is not a regular file.
func replaceable(dfd int, name, jailPath string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return newError("stat", jailPath, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return &Error{Op: "put", Path: jailPath, Errno: unix.EISDIR, Message: "is a directory"}
	case unix.S_IFLNK:
		return &Error{Op: "put", Path: jailPath, Errno: unix.ELOOP, Message: "is a symlink: a write never follows one (remove it first)"}
	}
	return &Error{Op: "put", Path: jailPath, Errno: unix.EEXIST, Message: "is a " + typeName(st.Mode) + ", not a regular file"}
}

// fileOpts shape writeFile.
type fileOpts struct {
	mode uint32
	// commit, if set, is asked before the file is put in place.
	commit func(int64) error
	// sync: the data is on the file system when writeFile returns (fsync;
	// tar unpacking syncs the file system once at the end instead).
	sync bool
	// mtime, if set, is the file's modification time.
	mtime time.Time
	// xattrs are extended attributes the file gets (keptXattr).
	xattrs map[string]string
}

// writeFile writes src to an unnamed file in dfd and links it in at name,
// replacing a regular file or a symlink there (the name, never what a
// symlink points to).
func writeFile(dfd int, name, jailPath string, src io.Reader, o fileOpts) (int64, error) {
	// Read-write: before Linux 6.10 linkTemp copies it to a named file.
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, o.mode)
	named := ""
	if err == unix.EOPNOTSUPP || err == unix.EISDIR || err == unix.EINVAL {
		// A file system without O_TMPFILE: a hidden name, removed on
		// every failure this process sees.
		named, fd, err = tempFile(dfd, o.mode)
	}
	if err != nil {
		return 0, newError("create", jailPath, err)
	}
	defer unix.Close(fd)
	undo := func() {
		if named != "" {
			_ = unix.Unlinkat(dfd, named, 0)
		}
	}
	n, err := copyData(fdFile(fd), src)
	if err == nil {
		err = wrap("setxattr", jailPath, setXattrs(fd, o.xattrs))
	}
	if err == nil {
		err = wrap("chmod", jailPath, unix.Fchmod(fd, o.mode)) // the umask took bits off
	}
	if err == nil && !o.mtime.IsZero() {
		err = wrap("utimens", jailPath, unix.UtimesNanoAt(fd, "", times(o.mtime), unix.AT_EMPTY_PATH))
	}
	if err == nil && o.sync {
		err = wrap("fsync", jailPath, unix.Fsync(fd))
	}
	if err == nil && o.commit != nil {
		err = wrap("put", jailPath, o.commit(n))
	}
	if err != nil {
		undo()
		return n, newError("write", jailPath, err)
	}
	if named == "" {
		if named, err = linkTemp(dfd, fd); err != nil {
			return n, newError("link", jailPath, err)
		}
	}
	if err := unix.Renameat(dfd, named, dfd, name); err != nil {
		_ = unix.Unlinkat(dfd, named, 0)
		return n, newError("rename", jailPath, err)
	}
	return n, nil
}

// fdFile reads and writes a descriptor it does not own (an *os.File
// would close it when collected).
type fdFile int

func (f fdFile) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), p)
		if err == unix.EINTR {
			continue
		}
		if n == 0 && err == nil && len(p) > 0 {
			return 0, io.EOF
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

func (f fdFile) Write(p []byte) (int, error) {
	total := 0
	for total < len(p) {
		n, err := unix.Write(int(f), p[total:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// linkTemp gives the unnamed file fd a hidden name in dfd, for the rename
// that puts it in place (linkat cannot replace a name). linkat with
// AT_EMPTY_PATH needs no capability since Linux 6.10 when the caller
// opened the file; before that, the file is copied to a named one.
func linkTemp(dfd, fd int) (string, error) {
	for i := 0; ; i++ {
		name := ".jail-put-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		err := linkat(fd, "", dfd, name, unix.AT_EMPTY_PATH)
		switch {
		case err == nil:
			return name, nil
		case err == unix.EEXIST:
			continue
		case err == unix.ENOENT || err == unix.EPERM || err == unix.EACCES:
			return copyTemp(dfd, fd)
		}
		return "", err
	}
}

// linkat is unix.Linkat; a test makes it fail as a kernel before 6.10
// does.
var linkat = unix.Linkat

// copyTemp copies the unnamed file fd to a new hidden file in dfd.
func copyTemp(dfd, fd int) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	name, tfd, err := tempFile(dfd, st.Mode&0o777)
	if err != nil {
		return "", err
	}
	defer unix.Close(tfd)
	_, err = unix.Seek(fd, 0, io.SeekStart)
	if err == nil {
		_, err = copyData(fdFile(tfd), io.LimitReader(fdFile(fd), st.Size))
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, name, 0)
		return "", err
	}
	if err := unix.Fsync(tfd); err != nil {
		_ = unix.Unlinkat(dfd, name, 0)
		return "", err
	}
	return name, nil
}

func tempFile(dfd int, mode uint32) (string, int, error) {
	for i := 0; ; i++ {
		name := ".jail-put-" + strconv.Itoa(os.Getpid()) + "-t" + strconv.Itoa(i)
		fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == unix.EEXIST {
			continue
		}
		return name, fd, err
	}
}

// List writes one JSON Entry per line to w for each file below the
// directory at clean (a final symlink is followed, as ls does), depth
// levels deep (0 or less: every level), never following a symlink below
// it. A path that is not a directory lists itself. It returns the number
// of entries.
func (r *Root) List(clean string, depth int, w io.Writer) (int64, error) {
	enc := json.NewEncoder(w)
	fd, err := r.openat2(rel(clean), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == unix.ENOTDIR {
		e, err := r.Stat(clean)
		if err != nil {
			return 0, err
		}
		return 1, enc.Encode(e)
	}
	if err != nil {
		return 0, newError("open", clean, err)
	}
	var n int64
	err = listDir(fd, clean, depth, enc, &n)
	return n, err
}

// listDir lists the directory fd (closing it), descending depth-1 more
// levels.
func listDir(fd int, jailPath string, depth int, enc *json.Encoder, n *int64) error {
	d := os.NewFile(uintptr(fd), jailPath)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return newError("readdir", jailPath, err)
	}
	slices.Sort(names)
	for _, name := range names {
		p := strings.TrimSuffix(jailPath, "/") + "/" + name
		e, err := entry(fd, name, p)
		if errors.Is(err, unix.ENOENT) {
			continue // gone since the readdir
		}
		if err != nil {
			return err
		}
		if err := enc.Encode(e); err != nil {
			return newError("write", p, err)
		}
		*n++
		if e.Type == "dir" && depth != 1 {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
				continue // replaced since
			}
			if err != nil {
				return newError("open", p, err)
			}
			if err := listDir(sub, p, depth-1, enc, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove removes the file at clean (a final symlink itself, never what it
// points to); a directory only when it is empty, unless recursive.
func (r *Root) Remove(clean string, recursive bool) error {
	dir, base := split(clean)
	if base == "" {
		return &Error{Op: "remove", Path: clean, Errno: unix.EBUSY, Message: "is the root"}
	}
	dfd, err := r.openDir(dir, false)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return newError("stat", clean, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return wrap("unlink", clean, unix.Unlinkat(dfd, base, 0))
	}
	if recursive {
		return removeAll(dfd, base, clean)
	}
	return wrap("rmdir", clean, unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR))
}

// RemoveTree removes the host directory dir and everything below it, as
// the caller: a symlink is removed, never walked, and a directory its
// owner made read-only (the caller's jail's user, for an unprivileged
// caller) is made writable first. A missing dir is no error.
func RemoveTree(dir string) error {
	parent, name := filepath.Split(filepath.Clean(dir))
	dfd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return newError("open", parent, err)
	}
	defer unix.Close(dfd)
	err = removeAllForce(dfd, name, dir, true)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// removeAll removes the directory name in dfd and everything below it,
// opening each level with O_NOFOLLOW: a symlink is removed, never walked.
func removeAll(dfd int, name, jailPath string) error {
	return removeAllForce(dfd, name, jailPath, false)
}

func removeAllForce(dfd int, name, jailPath string, force bool) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP {
		return wrap("unlink", jailPath, unix.Unlinkat(dfd, name, 0))
	}
	if err == unix.EACCES && force {
		_ = unix.Fchmodat(dfd, name, 0o700, 0)
		fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return newError("open", jailPath, err)
	}
	if force {
		_ = unix.Fchmod(fd, 0o700)
	}
	d := os.NewFile(uintptr(fd), jailPath)
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			p := jailPath + "/" + n
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
				continue
			} else if err != nil {
				d.Close()
				return newError("stat", p, err)
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = removeAllForce(fd, n, p, force)
			} else if err = unix.Unlinkat(fd, n, 0); err == unix.ENOENT {
				err = nil
			} else {
				err = wrap("unlink", p, err)
			}
			if err != nil {
				d.Close()
				return err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			break
		}
		if err != nil {
			d.Close()
			return newError("readdir", jailPath, err)
		}
	}
	d.Close()
	return wrap("rmdir", jailPath, unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR))
}

// Rename moves from to to, as rename(2) does (replacing a file at to, or
// an empty directory by a directory); when to is a directory, from goes
// into it, as mv does. Neither final element is followed if it is a
// symlink.
func (r *Root) Rename(from, to string) error {
	fdir, fbase := split(from)
	if fbase == "" {
		return &Error{Op: "rename", Path: from, Errno: unix.EBUSY, Message: "is the root"}
	}
	if fd, err := r.openat2(rel(to), unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
		unix.Close(fd)
		to = strings.TrimSuffix(to, "/") + "/" + fbase
	}
	tdir, tbase := split(to)
	if tbase == "" {
		return &Error{Op: "rename", Path: to, Errno: unix.EBUSY, Message: "is the root"}
	}
	ffd, err := r.openDir(fdir, false)
	if err != nil {
		return err
	}
	defer unix.Close(ffd)
	tfd, err := r.openDir(tdir, false)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	return wrap("rename", from+" to "+to, unix.Renameat(ffd, fbase, tfd, tbase))
}

// Statfs says how full the file system holding clean is.
func (r *Root) Statfs(clean string) (*Statfs, error) {
	fd, err := r.openat2(rel(clean), unix.O_PATH, 0)
	if err != nil {
		return nil, newError("open", clean, err)
	}
	defer unix.Close(fd)
	var s unix.Statfs_t
	if err := unix.Fstatfs(fd, &s); err != nil {
		return nil, newError("statfs", clean, err)
	}
	bs := s.Bsize
	return &Statfs{TotalBytes: int64(s.Blocks) * bs, FreeBytes: int64(s.Bavail) * bs,
		UsedBytes: int64(s.Blocks-s.Bfree) * bs, Files: int64(s.Files), FreeFiles: int64(s.Ffree)}, nil
}

func wrap(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return newError(op, p, err)
}
