package jail

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// passThrough reports whether f may be handed to the workload as it is:
// only a pipe or /dev/null. Anything else is relayed through a pipe, so the
// workload never holds the caller's own file description: a regular file
// it could reopen read-write through /proc/self/fd (an unprivileged
// caller's jail runs as the caller, who owns it), a directory it could walk
// the host's tree from with openat, a terminal it could read typed-ahead
// input from, write escape sequences to past capture, and leave changed
// (termios, the line discipline, TIOCEXCL, O_NONBLOCK, the window size), a
// socket it could pass descriptors over.
func passThrough(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return true
	case unix.S_IFCHR:
		return unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3 // /dev/null
	}
	return false
}

// writerOnly hides that a writer is an *os.File, so that os/exec gives the
// workload a pipe and copies from it.
type writerOnly struct{ io.Writer }
