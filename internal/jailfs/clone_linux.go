package jailfs

import (
	"errors"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// CloneTree copies the tree of the host directory src into the empty host
// directory dst (both opened by the caller) with reflinks: each regular
// file's blocks are shared (FICLONE), not copied, so the copy takes time
// by the number of files, not their size. Directories, regular files and
// symlinks are copied with their modes, owners and times (and the first
// two with their user.* extended attributes, see keptXattr); FIFOs, sockets
// and devices are left out and returned. Nothing is followed: every name
// is opened beneath its directory with O_NOFOLLOW, symlinks are copied as
// links, and a file that is not one by the time it is opened fails the
// copy. A tree a jail wrote is as untrusted on the host as in the jail.
//
// Where the file system cannot share blocks between them (ext4, tmpfs,
// two file systems), it fails with an error wrapping EOPNOTSUPP, EXDEV or
// EINVAL (see [NoReflink]) at the first regular file; what it made stays
// for the caller to remove.
func CloneTree(src, dst *os.File) (entries, bytes int64, skipped []string, err error) {
	sfd, err := unix.Openat(int(src.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, nil, newError("open", src.Name(), err)
	}
	dfd, err := unix.Openat(int(dst.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(sfd)
		return 0, 0, nil, newError("open", dst.Name(), err)
	}
	c := &cloner{}
	err = c.dir(sfd, dfd, src.Name())
	return c.n, c.bytes, c.skipped, err
}

// ClearDir removes everything in the host directory dir (opened by the
// caller), never following a symlink.
func ClearDir(dir *os.File) error { return clearDir(int(dir.Fd()), dir.Name()) }

// NoReflink reports whether err says the file system cannot share blocks
// (CloneTree's copy must be made another way), rather than a failure.
func NoReflink(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY)
}

type cloner struct {
	n, bytes int64
	skipped  []string
	// layer: the tree is a layer tree (BuildLayerTree's base):
	// directories keep the overlay's opaque mark, everything else is a
	// hard link (or a copy, see hardLink), and what a layer tree cannot
	// hold is refused, not skipped.
	layer bool
}

// dir copies the entries of directory sfd into dfd, closing both.
func (c *cloner) dir(sfd, dfd int, p string) error {
	defer unix.Close(dfd)
	d := os.NewFile(uintptr(sfd), p)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return newError("readdir", p, err)
	}
	slices.Sort(names)
	for _, n := range names {
		np := strings.TrimSuffix(p, "/") + "/" + n
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			continue
		} else if err != nil {
			return newError("stat", np, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := unix.Mkdirat(dfd, n, 0o700); err != nil {
				return newError("mkdir", np, err)
			}
			ss, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return newError("open", np, err)
			}
			ds, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(ss)
				return newError("open", np, err)
			}
			err = copyXattrs(ss, ds)
			if buf := make([]byte, 2); err == nil && c.layer {
				if k, gerr := unix.Fgetxattr(ss, opaqueXattr, buf); gerr == nil && string(buf[:k]) == "y" {
					err = unix.Fsetxattr(ds, opaqueXattr, []byte("y"), 0)
				}
			}
			if err != nil {
				unix.Close(ss)
				unix.Close(ds)
				return newError("xattr", np, err)
			}
			if err := c.dir(ss, ds, np); err != nil {
				return err
			}
			// Its own mode, owner and times once it is full.
			if err := setMeta(dfd, n, &st, true); err != nil {
				return newError("chmod", np, err)
			}
		case unix.S_IFREG, unix.S_IFLNK, unix.S_IFCHR:
			var err error
			switch {
			case c.layer && (st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev == 0):
				err = hardLink(sfd, dfd, n, np, &st)
			case c.layer:
				err = &Error{Op: "layer tree", Path: np, Errno: unix.EPERM, Message: "a device, not a whiteout"}
			case st.Mode&unix.S_IFMT == unix.S_IFREG:
				err = c.file(sfd, dfd, n, np)
			case st.Mode&unix.S_IFMT == unix.S_IFLNK:
				err = c.link(sfd, dfd, n, np, &st)
			default:
				c.skipped = append(c.skipped, np)
				continue
			}
			if err != nil {
				return err
			}
		default:
			if c.layer {
				return &Error{Op: "layer tree", Path: np, Errno: unix.EPERM, Message: "not a file, directory, symlink or whiteout"}
			}
			c.skipped = append(c.skipped, np)
			continue
		}
		c.n++
	}
	return nil
}

// link copies the symlink n of sfd to dfd. Its owner and times are set
// through a descriptor of the link made, checked to be one: dst may be a
// directory another host user can write to (a new dir workspace, the
// workload's host id's), who could put a hard link to a file of root's
// in its place between the two calls, and a chown by name would change
// that file.
func (c *cloner) link(sfd, dfd int, n, np string, st *unix.Stat_t) error {
	if err := unix.Symlinkat(readlink(sfd, n), dfd, n); err != nil {
		return newError("symlink", np, err)
	}
	fd, err := unix.Openat(dfd, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return newError("open", np, err)
	}
	defer unix.Close(fd)
	var made unix.Stat_t
	if err := unix.Fstat(fd, &made); err != nil || made.Mode&unix.S_IFMT != unix.S_IFLNK {
		return &Error{Op: "symlink", Path: np, Errno: unix.EEXIST, Message: "replaced while copied"}
	}
	if err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH); err != nil {
		return newError("chown", np, err)
	}
	_ = unix.UtimesNanoAt(fd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_EMPTY_PATH) // a link's times, where the kernel sets them this way
	return nil
}

// file reflinks the regular file n of sfd to n in dfd.
func (c *cloner) file(sfd, dfd int, n, np string) error {
	in, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return newError("open", np, err)
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return newError("stat", np, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &Error{Op: "open", Path: np, Errno: unix.EINVAL, Message: "replaced while copied"}
	}
	out, err := unix.Openat(dfd, n, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return newError("create", np, err)
	}
	defer unix.Close(out)
	if err := unix.IoctlFileClone(out, in); err != nil {
		return newError("reflink", np, err)
	}
	if err := copyXattrs(in, out); err != nil {
		return newError("xattr", np, err)
	}
	if err := setMeta(out, "", &st, false); err != nil {
		return newError("chmod", np, err)
	}
	c.bytes += st.Size
	return nil
}

// copyXattrs gives the file to the extended attributes of from that a
// copy keeps.
func copyXattrs(from, to int) error {
	x, err := userXattrs(from)
	if err == nil {
		err = setXattrs(to, x)
	}
	return err
}

// setMeta gives the file fd (or the directory name in fd, with dir) the
// owner, mode and times of st.
func setMeta(fd int, name string, st *unix.Stat_t, dir bool) error {
	if dir {
		var err error
		if fd, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o777); err != nil { // no setuid, setgid or sticky, as Extract
		return err
	}
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_EMPTY_PATH)
}
