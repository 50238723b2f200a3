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
