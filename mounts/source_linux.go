package mounts

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/hostfs"
)

// Source is the host side of a bind mount, opened once: an O_PATH
// descriptor and what was learned from it. Everything is checked on the
// descriptor, never again by path; the jail's child stage mounts only the
// object it names (it opens the path again without following symlinks and
// refuses it unless it is the same inode).
type Source struct {
	// File is the O_PATH descriptor.
	File *os.File
	// Path is File's absolute path, as the kernel gives it
	// (/proc/self/fd): free of symlinks, "." and "..".
	Path string
	// Dir says whether File is a directory.
	Dir bool
	// Sensitive, for a sensitive source the caller allowed, says what it
	// exposes; "" for any other.
	Sensitive string
}

// Close closes the descriptor.
func (s *Source) Close() error { return s.File.Close() }

// ReadTable reads this process's mount table.
func ReadTable() (Table, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	t := make(Table, 0, len(infos))
	for _, i := range infos {
		t = append(t, MountInfo{ID: i.ID, Major: i.Major, Minor: i.Minor, Root: i.Root, Mountpoint: i.Mountpoint, FSType: i.FSType})
	}
	return t, nil
}

// OpenSource opens the host path of a bind (or a --rootfs) without
// following symlinks (a symlink anywhere in it is refused: the workload of
// another jail may have planted it), and refuses it when it exposes
// something sensitive (see [Table.Exposes]; a directory that holds one of
// the [Credentials] is a home directory, and sensitive too) unless allow
// (nil: nothing) allows its real path; the Source then says what it
// exposes. That is judged on the opened descriptor, against table.
// Errors are *Error with Field "source".
func OpenSource(unsafePath string, allow func(hostPath string) bool, table func() (Table, error)) (_ *Source, retErr error) {
	bad := func(err error) error { return &Error{Field: "source", Value: unsafePath, Err: err} }
	f, err := hostfs.OpenPath(unsafePath)
	if err != nil {
		var pe *os.PathError
		switch {
		case errors.Is(err, os.ErrNotExist):
			err = errors.New("does not exist")
		case errors.As(err, &pe):
			err = pe.Err
		}
		return nil, bad(err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_MNT_ID, &stx); err != nil {
		return nil, bad(fmt.Errorf("statx: %w", err))
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return nil, bad(fmt.Errorf("its path: %w", err))
	}
	s := &Source{File: f, Path: real, Dir: stx.Mode&unix.S_IFMT == unix.S_IFDIR}
	t, err := table()
	if err != nil {
		return nil, bad(fmt.Errorf("reading the mount table: %w", err))
	}
	mntID := 0
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		mntID = int(stx.Mnt_id)
	}
	what := t.Exposes(mntID, real, s.Dir)
	if what == "" && s.Dir {
		what = holdsCredentials(int(f.Fd()))
	}
	if what == "" && s.Dir {
		what = holdsSensitive(real, sensitiveTrees)
	}
	if what == "" {
		return s, nil
	}
	if real != unsafePath {
		what = "(" + real + ") " + what
	}
	if allow != nil && allow(real) {
		s.Sensitive = what
		return s, nil
	}
	return nil, bad(fmt.Errorf("%s; refused unless allowed as a sensitive source", what))
}

// holdsCredentials says which of the [Credentials] the directory dirfd
// holds, as a phrase for the error message; "" when none.
func holdsCredentials(dirfd int) string {
	for _, c := range Credentials {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return "holds " + c + " (a home directory)"
		}
	}
	return ""
}

// holdsSensitive says which of trees (the sensitive ones) lies below the
// directory hostPath (a bind of /var carries /var/lib/docker), as a
// phrase for the error message; "" when none does.
func holdsSensitive(hostPath string, trees []string) string {
	for _, t := range trees {
		if strings.HasPrefix(t, hostPath+"/") {
			if _, err := os.Lstat(t); err == nil {
				return "holds " + t
			}
		}
	}
	return ""
}
