// Package hostfs opens the host paths that jail reads or writes itself: a
// profile, a seccomp policy file, --stdin, --env-file, --report, and the
// sources of bind mounts. A jailed workload may write into a directory it
// has bound read-write (the natural home of input.txt, job.env and
// report.json) and plant a symlink, a FIFO or a hard link there for the
// next run to trip over: jail running as root would then overwrite a
// root-only file with its report, or read one into a jail's stdin.
//
// So every path is opened with openat2(2) RESOLVE_NO_SYMLINKS (Linux 5.6):
// a symlink (or magic link) anywhere in it is refused, not followed, with an
// error that names the link. What is opened is then checked on the
// descriptor (fstat), never again by path. Inputs must be regular files or
// pipes; the report is written to a fresh file (O_EXCL) in the directory
// opened before the run, and renamed over the name, so that nothing that
// was at the name (a symlink, a hard link to another file) is written
// through.
//
// The package does not resolve paths inside a jail; see the C stage's
// RESOLVE_IN_ROOT for that.
package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// SymlinkError is a host path with a symlink in it. It unwraps to ELOOP.
type SymlinkError struct {
	// Path is the path as given.
	Path string
	// Link is the component of Path that is a symlink (or Path itself).
	Link string
	// Target is Link's contents, as a hint ("usr/lib"); jail resolves
	// nothing further, so the message tells nothing about the host that the
	// link's author did not write.
	Target string
	Err    error
}

func (e *SymlinkError) Error() string {
	msg := fmt.Sprintf("%s is a symlink: jail does not follow symlinks in the host paths it opens", e.Link)
	if e.Link != e.Path {
		msg = e.Path + ": " + msg
	}
	if e.Target != "" {
		msg += " (it points to " + e.Target + "; give a path without symlinks)"
	}
	return msg
}

func (e *SymlinkError) Unwrap() error { return e.Err }

// TypeError is a host path of the wrong kind, e.g. a directory given as
// --stdin.
type TypeError struct {
	Path string
	// Kind is what the path is: "a directory", "a character device"...
	Kind string
	// Want is what it must be.
	Want string
}

func (e *TypeError) Error() string { return fmt.Sprintf("is %s; want %s", e.Kind, e.Want) }

// kind names a file type for an error message.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symlink"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m.IsRegular():
		return "a regular file"
	}
	return "an unknown kind of file"
}

// explainLoop turns the ELOOP of a RESOLVE_NO_SYMLINKS open into a
// *SymlinkError naming the first component of unsafePath that is a symlink.
// The walk is only for the message: the open already failed.
func explainLoop(unsafePath string, err error) error {
	link := unsafePath
	p := ""
	if filepath.IsAbs(unsafePath) {
		p = "/"
	}
	for _, c := range strings.Split(unsafePath, "/") {
		if c == "" {
			continue
		}
		p = filepath.Join(p, c)
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			link = p
			break
		}
	}
	target, _ := os.Readlink(link)
	return &SymlinkError{Path: unsafePath, Link: link, Target: target, Err: err}
}

// ErrTooLarge is returned by ReadFile for a file over its size limit.
var ErrTooLarge = errors.New("too large")

// ReadFile reads an input file (see [OpenInput]) of at most max bytes;
// more is an error wrapping [ErrTooLarge]. A FIFO is refused unless it is
// an inherited descriptor (/dev/fd/N): a whole-file input is never waited
// for. Off Linux, where jail cannot
// run jails, it only loads profiles and policies.
func ReadFile(unsafePath string, max int64) ([]byte, error) {
	f, err := openInput(unsafePath, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
	}
	return b, nil
}

// wantInput says what an input may be, for a *TypeError.
func wantInput(namedFIFO bool) string {
	if namedFIFO {
		return "a regular file or a pipe"
	}
	return "a regular file (a pipe only as /dev/fd/N)"
}
