package hostfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags refuse every symlink and magic link on the way.
const resolveFlags = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Open opens unsafePath with flags (O_CLOEXEC, and O_NOCTTY unless O_PATH,
// are added) and mode for a new file, refusing a symlink anywhere in the path
// with a *SymlinkError. A relative path starts at the working directory.
// Requires Linux 5.6 (openat2).
func Open(unsafePath string, flags int, mode uint32) (*os.File, error) {
	return openAt(unix.AT_FDCWD, unsafePath, flags, mode)
}

func openAt(dirfd int, unsafePath string, flags int, mode uint32) (*os.File, error) {
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 refuses O_PATH with other flags
	}
	how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags}
	for {
		fd, err := unix.Openat2(dirfd, unsafePath, how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), unsafePath), nil
		case err == unix.EINTR || err == unix.EAGAIN: // EAGAIN: a concurrent rename; try again
			continue
		case err == unix.ELOOP:
			return nil, explainLoop(unsafePath, err)
		case err == unix.ENOSYS:
			return nil, &os.PathError{Op: "openat2", Path: unsafePath, Err: fmt.Errorf("%w (jail needs Linux 5.6 or later)", err)}
		}
		return nil, &os.PathError{Op: "open", Path: unsafePath, Err: err}
	}
}

// OpenPath returns an O_PATH descriptor of unsafePath (refusing symlinks,
// as Open does): it names the file without opening it for I/O, and fstat,
// openat and open_tree work on it.
func OpenPath(unsafePath string) (*os.File, error) {
	return Open(unsafePath, unix.O_PATH, 0)
}

// inheritedFD parses "/dev/fd/N" and "/proc/self/fd/N", the names a shell
// gives process substitution (<(cmd)).
func inheritedFD(unsafePath string) (int, bool) {
	for _, prefix := range []string{"/dev/fd/", "/proc/self/fd/"} {
		if s, ok := strings.CutPrefix(unsafePath, prefix); ok {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// OpenInput opens a file that jail reads as an input (--stdin, --env-file,
// a profile or a seccomp policy file). It must be a regular file or a pipe:
// a directory, a device or a socket is refused with a *TypeError (a
// directory descriptor handed to a workload as its stdin would let it walk
// the host's tree). The type is checked on an O_PATH descriptor before the
// file is opened for reading, so that opening a device has no side effect,
// and the file is then reopened through that descriptor: a FIFO waits for
// its writer as open(2) does (as the shell's < does: --stdin is a stream).
// "/dev/fd/N" and "/proc/self/fd/N" name jail's own inherited descriptor N,
// as `<(cmd)` gives it; that descriptor is duplicated and checked the same
// way.
func OpenInput(unsafePath string) (*os.File, error) { return openInput(unsafePath, true) }

// openInput is OpenInput; namedFIFO false refuses a FIFO named by a path
// (a pipe is then taken only as an inherited /dev/fd/N), so that a FIFO a
// workload planted where a whole-file input was expected cannot make jail
// wait for ever before any timeout runs.
func openInput(unsafePath string, namedFIFO bool) (*os.File, error) {
	if n, ok := inheritedFD(unsafePath); ok {
		fd, err := unix.FcntlInt(uintptr(n), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, &os.PathError{Op: "dup", Path: unsafePath, Err: err}
		}
		f := os.NewFile(uintptr(fd), unsafePath)
		if err := checkInput(f, unsafePath, true); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	p, err := OpenPath(unsafePath)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := checkInput(p, unsafePath, namedFIFO); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", p.Fd()), os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: unsafePath, Err: errors.Unwrap(err)}
	}
	return f, nil
}

// checkInput refuses what is neither a regular file nor (if pipe) a pipe.
func checkInput(f *os.File, unsafePath string, pipe bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: unsafePath, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFIFO:
		if pipe {
			return nil
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return &TypeError{Path: unsafePath, Kind: kind(fi.Mode()), Want: wantInput(pipe)}
}

// Output is a host file jail writes once, replacing what was at its name
// (the report). Create it before the workload runs.
type Output struct {
	dir  *os.File // the directory, O_PATH
	name string
	path string
}

// CreateOutput opens the directory that will hold unsafePath now (refusing
// symlinks in it, as Open does), so that nothing the workload does later
// can redirect the write, and refuses a name that is an existing directory.
// Nothing is written until [Output.Write].
func CreateOutput(unsafePath string) (*Output, error) {
	dir, name := filepath.Split(unsafePath)
	if name == "" || name == "." || name == ".." {
		return nil, &os.PathError{Op: "create", Path: unsafePath, Err: errors.New("not a file name")}
	}
	if dir == "" {
		dir = "."
	}
	d, err := Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		var se *SymlinkError
		if errors.As(err, &se) {
			se.Path = unsafePath
			return nil, se
		}
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		d.Close()
		return nil, &TypeError{Path: unsafePath, Kind: "a directory", Want: "a file name"}
	}
	return &Output{dir: d, name: name, path: unsafePath}, nil
}

// Write writes data to a new file in the directory (O_CREAT|O_EXCL, mode
// perm less the umask) and renames it over the name: whatever was at the
// name — a symlink, a hard link to someone else's file, a FIFO — is
// replaced, never written through, and a reader never sees half a file.
func (o *Output) Write(data []byte, perm uint32) error {
	_, err := o.WriteFrom(bytes.NewReader(data), perm)
	return err
}

// WriteFrom is Write of what r yields, streamed: the file appears under
// its name only once all of r is written; on any error it does not appear.
func (o *Output) WriteFrom(r io.Reader, perm uint32) (_ int64, retErr error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmp := ".jail-" + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := openAt(int(o.dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return 0, &os.PathError{Op: "create", Path: o.path, Err: errors.Unwrap(err)}
	}
	defer func() {
		if retErr != nil {
			_ = unix.Unlinkat(int(o.dir.Fd()), tmp, 0)
		}
	}()
	n, werr := io.Copy(f, r)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return n, &os.PathError{Op: "write", Path: o.path, Err: werr}
	}
	if err := unix.Renameat(int(o.dir.Fd()), tmp, int(o.dir.Fd()), o.name); err != nil {
		return n, &os.PathError{Op: "rename", Path: o.path, Err: err}
	}
	return n, nil
}

// Close releases the directory.
func (o *Output) Close() error { return o.dir.Close() }
