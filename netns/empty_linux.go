package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// NewEmpty makes a network namespace with only a loopback interface, up,
// and returns it as a namespace file: a process joins it with
// setns(2), or a thread before it clones one. Equivalent to `ip netns add
// X && ip -n X link set lo up`, without the bind mount: the namespace
// lives as long as a file or a process holds it.
//
// It runs on a fresh goroutine locked to its OS thread, which unshares
// its network namespace and goes back to the caller's when done; if it
// cannot go back, the goroutine ends locked and the runtime ends the
// thread with it. Requires CAP_SYS_ADMIN in the caller's user namespace
// (root), and CAP_NET_ADMIN for lo.
func NewEmpty() (*os.File, error) {
	type made struct {
		f   *os.File
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		f, err, back := newEmpty()
		ch <- made{f, err}
		if back {
			runtime.UnlockOSThread()
		}
	}()
	m := <-ch
	return m.f, m.err
}

// newEmpty is NewEmpty on the locked thread; back reports whether the
// thread is in its own network namespace again.
func newEmpty() (_ *os.File, _ error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err, true
	}
	defer self.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, os.NewSyscallError("unshare(CLONE_NEWNET)", err), true
	}
	f, err := os.Open("/proc/thread-self/ns/net")
	if err == nil {
		err = loopbackUp()
	}
	if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("back to the thread's network namespace: %w", os.NewSyscallError("setns", serr)), false
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err, true
	}
	return f, nil, true
}

// loopbackUp sets lo up in the calling thread's network namespace, as the
// child stage's loopback_up does: a socket belongs to the namespace its
// maker was in.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("SIOCGIFFLAGS lo", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("SIOCSIFFLAGS lo", err)
	}
	return nil
}
