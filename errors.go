package jail

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrNotSupported is returned when this host, kernel or caller cannot
	// provide something a Spec asks for (and AllowUnenforced is not set), or
	// on operating systems other than Linux.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalidSpec is matched by every *[SpecError].
	ErrInvalidSpec = errors.New("invalid spec")
)

// FeatureError says which feature is missing and why. It matches
// [ErrNotSupported].
type FeatureError struct {
	Feature string // e.g. "time namespace"
	Reason  string // e.g. "the kernel has no /proc/self/ns/time"
	// Err is the error it stands for, if any: a *cgroup.UnenforcedError,
	// whose Limits say each limit, why and how to get it.
	Err error
}

func (e *FeatureError) Error() string        { return e.Feature + ": " + e.Reason }
func (e *FeatureError) Is(target error) bool { return target == ErrNotSupported }
func (e *FeatureError) Unwrap() error        { return e.Err }

// InitError is a failure of one step of the jail's setup (in the parent or
// in the child stage) or of executing the workload. errors.Is(err,
// unix.EACCES) and the like work through it.
type InitError struct {
	// Step names the step, e.g. "pivot_root", "mount plan", "execve".
	Step string
	// Detail says what the step was working on, e.g. "bind /src on /work".
	Detail string
	Err    error
}

func (e *InitError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (%s): %v", e.Step, e.Detail, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Step, e.Err)
}
func (e *InitError) Unwrap() error { return e.Err }

// errnoName returns the symbolic name of an errno, e.g. "ENOENT".
func errnoName(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	if n, ok := errnoNames[errno]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(errno))
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EINTR: "EINTR", syscall.EIO: "EIO",
	syscall.E2BIG: "E2BIG", syscall.ENOEXEC: "ENOEXEC", syscall.EBADF: "EBADF", syscall.EAGAIN: "EAGAIN",
	syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES", syscall.EFAULT: "EFAULT", syscall.EBUSY: "EBUSY",
	syscall.EEXIST: "EEXIST", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.EINVAL: "EINVAL",
	syscall.EMFILE: "EMFILE", syscall.ETXTBSY: "ETXTBSY", syscall.ENOSPC: "ENOSPC", syscall.EROFS: "EROFS",
	syscall.EPIPE: "EPIPE", syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ENOSYS: "ENOSYS", syscall.ELOOP: "ELOOP",
	syscall.EXDEV: "EXDEV", syscall.EPROTO: "EPROTO", syscall.ENODEV: "ENODEV", syscall.ENXIO: "ENXIO",
}

// Session errors, usable with errors.Is.
var (
	// ErrNotFound: no session has that id (for this user).
	ErrNotFound = errors.New("session not found")
	// ErrExists: a session with that id exists already.
	ErrExists = errors.New("session exists")
	// ErrNotRunning: the session has ended (its deadline passed, or its
	// PID 1 died), or is paused.
	ErrNotRunning = errors.New("session not running")
	// ErrBusy: the session is taking part in another operation that
	// excludes this one, or cannot take one more process.
	ErrBusy = errors.New("session busy")
)
