package jail

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// relay copies the caller's src into a pipe whose read end the workload
// gets (for stdin, or the terminal input of a TTY), until src ends, the
// workload stops reading, or stop is called: it waits with poll(2) on src
// and on a stop pipe, so a terminal nobody types into never keeps jail
// waiting, and it never reads a byte after the jail is over.
type relay struct {
	src            *os.File
	dst            io.WriteCloser
	stopR, stopW   *os.File
	done           chan struct{}
	closeDstOnDone bool
}

// newRelay returns a relay from src into dst; start it with run.
func newRelay(src *os.File, dst io.WriteCloser, closeDst bool) (*relay, error) {
	stopR, stopW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &relay{src: src, dst: dst, stopR: stopR, stopW: stopW, done: make(chan struct{}), closeDstOnDone: closeDst}, nil
}

// drop releases a relay that never ran.
func (r *relay) drop() {
	r.stopR.Close()
	r.stopW.Close()
	if r.closeDstOnDone {
		r.dst.Close()
	}
}

func (r *relay) run() {
	defer close(r.done)
	if r.closeDstOnDone {
		defer r.dst.Close()
	}
	rc, err := r.src.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		fds := []unix.PollFd{{Fd: -1, Events: unix.POLLIN}, {Fd: int32(r.stopR.Fd()), Events: unix.POLLIN}}
		_ = rc.Control(func(fd uintptr) { fds[0].Fd = int32(fd) })
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return // the jail is over
		}
		if fds[0].Revents == 0 {
			continue
		}
		var n int
		var rerr error
		// A raw read: the caller's descriptor keeps its blocking mode
		// (os.File.Fd would change it), and poll said it is ready.
		_ = rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), buf) })
		if errors.Is(rerr, unix.EINTR) || errors.Is(rerr, unix.EAGAIN) {
			continue
		}
		if n <= 0 || rerr != nil {
			return // EOF, or the terminal hung up (EIO)
		}
		if _, err := r.dst.Write(buf[:n]); err != nil {
			return // the workload closed its end
		}
	}
}

// stop ends the relay and waits for it. A relay blocked writing into a
// full pipe nobody reads (a process that kept the pipe and never reads)
// is woken by closing that pipe.
func (r *relay) stop() {
	_, _ = r.stopW.Write([]byte{0})
	if r.closeDstOnDone {
		_ = r.dst.Close()
	}
	<-r.done
	r.stopR.Close()
	r.stopW.Close()
}
