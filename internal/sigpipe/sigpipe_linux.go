//go:build linux && cgo

package sigpipe

/*
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int sigpipe_fd = -1;
static pid_t sigpipe_owner;

// The handler: async-signal-safe, errno kept. A full pipe drops the
// signal, as os/signal drops one for a full channel. It does nothing in
// another process that shares this one's memory before its execve (a
// clone(CLONE_VM) child, whose copy of the pipe is still open): that
// child resets its handlers first (nsexec's spawn.c), this is the second
// guard.
static void sigpipe_handler(int sig)
{
	if (getpid() != sigpipe_owner) return;
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t n = write(sigpipe_fd, &b, 1);
	(void)n;
	errno = saved;
}

static int sigpipe_catch(int fd, int sig)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sigpipe_handler;
	sa.sa_flags = SA_ONSTACK | SA_RESTART;
	sigfillset(&sa.sa_mask);
	sigpipe_fd = fd;
	sigpipe_owner = getpid();
	return sigaction(sig, &sa, NULL) == 0 ? 0 : errno;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	mu  sync.Mutex
	wfd = -1 // the pipe's write end, non-blocking, kept for the life of the process
	ch  chan os.Signal
)

// Catch makes sigs arrive on the returned channel (buffered, 4) instead of
// taking their default action, for the rest of the process's life: there
// is no Stop. A second call adds signals to the same channel.
func Catch(sigs ...syscall.Signal) (<-chan os.Signal, error) {
	mu.Lock()
	defer mu.Unlock()
	if wfd < 0 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			return nil, os.NewSyscallError("pipe2", err)
		}
		// The read end goes to the poller; the write end stays a bare
		// descriptor (os.File's Fd would make it blocking, and a handler
		// must never block).
		wfd = p[1]
		ch = make(chan os.Signal, 4)
		go forward(os.NewFile(uintptr(p[0]), "sigpipe"), ch)
	}
	for _, s := range sigs {
		if s <= 0 || s > 255 || s == syscall.SIGKILL || s == syscall.SIGSTOP {
			return nil, fmt.Errorf("sigpipe: cannot catch %v", s)
		}
		if e := C.sigpipe_catch(C.int(wfd), C.int(s)); e != 0 {
			return nil, os.NewSyscallError("sigaction", syscall.Errno(e))
		}
	}
	return ch, nil
}

// forward turns the pipe's bytes into signals on ch, never blocking the
// handler: a full channel drops one, as os/signal does.
func forward(r *os.File, ch chan<- os.Signal) {
	var buf [16]byte
	for {
		n, err := r.Read(buf[:])
		for _, b := range buf[:n] {
			select {
			case ch <- syscall.Signal(b):
			default:
			}
		}
		if err != nil {
			return
		}
	}
}
