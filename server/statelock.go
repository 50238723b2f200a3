package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrStateDirInUse is New's error when another Server, of this process or
// another, has Config.StateDir.
var ErrStateDirInUse = errors.New("another server has it")

// ErrStateDirUnsafe is New's error when Config.StateDir, or the lock file
// in it, is not this user's alone: another user could then take the lock,
// or swap what a server keeps there.
var ErrStateDirUnsafe = errors.New("not this user's alone")

// checkStateDir requires dir to be a directory of the effective uid that
// no one else can write to, as the session directories below it are.
func checkStateDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%w: want a directory of uid %d that no one else can write to", ErrStateDirUnsafe, os.Geteuid())
	}
	return nil
}

// lockStateDir takes dir/server.lock for a Server until it is closed. Two
// servers on one state directory would take each other's requests under
// way for interrupted ones and each other's pool members for strays. An
// flock: the kernel lets go of it when the process ends, however it ends,
// so a crashed server's never holds up the next.
func lockStateDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "server.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("%w: server.lock: want a regular file of uid %d with one link", ErrStateDirUnsafe, os.Geteuid())
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, os.NewSyscallError("flock", err)
		}
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return nil, fmt.Errorf("%w (pid %d)", ErrStateDirInUse, pid)
		}
		return nil, ErrStateDirInUse
	}
	// Who has it, for the next one's message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
