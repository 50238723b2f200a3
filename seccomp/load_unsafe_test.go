package seccomp

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// loadOnThread loads filter with seccomp(2) into a new locked OS thread
// and returns how long the call took. A filter cannot be removed, so the
// goroutine never unlocks: the runtime ends the thread with it (or parks
// it for good if it is the main thread), and no thread is cloned from it
// meanwhile (newm hands a locked thread's requests to its template
// thread). The filter's kills
// are notifications, which without a listener fail the call with ENOSYS,
// so the thread's last calls cannot kill the test.
func loadOnThread(filter []byte) (time.Duration, error) {
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			done <- result{err: err}
			return
		}
		prog := unix.SockFprog{Len: uint16(len(filter) / insnSize), Filter: (*unix.SockFilter)(unsafe.Pointer(&filter[0]))}
		const setModeFilter = 1 // SECCOMP_SET_MODE_FILTER
		start := time.Now()
		_, _, e := unix.Syscall(unix.SYS_SECCOMP, setModeFilter, 0, uintptr(unsafe.Pointer(&prog)))
		d := time.Since(start)
		runtime.KeepAlive(filter)
		if e != 0 {
			done <- result{err: e}
			return
		}
		done <- result{d: d}
	}()
	r := <-done
	return r.d, r.err
}
