package nsexec

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// useSpawn is false where spawn.c has no clone3 trampoline for the
// architecture (it has one for amd64 only, the one CI runs: an untested
// trampoline would be worse than the fallback's fork); tests turn it off
// to check the fallback.
var useSpawn = C.jail_spawn_supported != 0

// checkAttr refuses the fields of attr that neither spawn path carries out
// the same way.
func checkAttr(a *syscall.SysProcAttr) error {
	switch {
	case a.Chroot != "", a.Setsid, a.Setpgid, a.Setctty, a.Noctty, a.Foreground, a.Unshareflags != 0,
		a.PidFD != nil, a.Ptrace:
		return errors.New("nsexec: unsupported SysProcAttr field")
	case a.Credential != nil && len(a.Credential.Groups) > 0:
		return errors.New("nsexec: supplementary groups are not supported")
	case (len(a.UidMappings) > 0 || len(a.GidMappings) > 0) && a.Cloneflags&unix.CLONE_NEWUSER == 0:
		return errors.New("nsexec: id maps without CLONE_NEWUSER")
	}
	for _, c := range a.AmbientCaps {
		if c >= 64 {
			return fmt.Errorf("nsexec: ambient capability %d out of range", c)
		}
	}
	return nil
}

// Preload makes what [Start] makes once per process (the embedded stage's
// sealed memfd) now, so that a caller can do it while it does something
// else. Start waits for it when it is under way.
func Preload() { _ = embeddedStage() }

// embeddedStage returns a sealed memfd holding stageELF, made once per
// process, or nil where none is embedded or the memfd failed (then Start
// re-executes the program). The seals make it immutable: a process of the
// jail that reaches it through /proc/PID/exe can neither write it nor
// shrink it (CVE-2019-5736); it is close-on-exec, so nothing inherits it.
var embeddedStage = sync.OnceValue(func() *os.File {
	if len(stageELF) == 0 {
		return nil
	}
	const mfdExec = 0x10 // MFD_EXEC, Linux 6.3: executable even where vm.memfd_noexec asks otherwise
	fd, err := unix.MemfdCreate("jail-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|mfdExec)
	if err == unix.EINVAL {
		fd, err = unix.MemfdCreate("jail-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "memfd:jail-stage")
	const sealExec = 0x20 // F_SEAL_EXEC, Linux 6.3: the mode cannot change either
	if _, err := f.Write(stageELF); err != nil {
		f.Close()
		return nil
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|sealExec|unix.F_SEAL_SEAL); err != nil {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
			f.Close()
			return nil
		}
	}
	return f
})

// spawnIn is spawn with the calling thread in the network namespace ns for
// the clone, so that the stage starts in it; back reports whether the
// thread is in its own network namespace again (if not, the caller must
// not unlock it: the runtime then ends the thread).
func spawnIn(ns *os.File, path string, exe *os.File, argv0 string, files []*os.File, attr *syscall.SysProcAttr) (pid int, pidfd *os.File, err error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return 0, nil, err, true
	}
	defer self.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return 0, nil, os.NewSyscallError("setns (the jail's network namespace)", err), true
	}
	pid, pidfd, err = spawn(path, exe, argv0, files, attr)
	if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
		if err == nil {
			// The stage started where it should; only this thread is lost.
			return pid, pidfd, nil, false
		}
		return 0, nil, err, false
	}
	return pid, pidfd, err, true
}

// spawn starts path (or, with exe set, the executable open at exe) as
// argv0 with files as its descriptors 0, 1, ... and returns its pid and
// its pidfd. Called on a locked thread: that thread is the child's parent
// for Pdeathsig.
func spawn(path string, exe *os.File, argv0 string, files []*os.File, attr *syscall.SysProcAttr) (int, *os.File, error) {
	if !useSpawn {
		// No embedded stage here: /proc/self/fd/N would be resolved after
		// the descriptors are laid out, which may have put another file at N.
		fds := make([]uintptr, len(files))
		for i, f := range files {
			fds[i] = f.Fd()
		}
		pid, _, err := syscall.StartProcess(path, []string{argv0}, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: attr})
		if err != nil {
			return 0, nil, &os.PathError{Op: "fork/exec", Path: path, Err: err}
		}
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK) // our child, not yet reaped: exact
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
			unix.Wait4(pid, nil, 0, nil)
			return 0, nil, os.NewSyscallError("pidfd_open", err)
		}
		return pid, os.NewFile(uintptr(fd), "pidfd"), nil
	}
	var r C.struct_spawn_req
	var allocs []unsafe.Pointer
	cstr := func(s string) *C.char {
		p := C.CString(s)
		allocs = append(allocs, unsafe.Pointer(p))
		return p
	}
	defer func() {
		for _, p := range allocs {
			C.free(p)
		}
	}()
	r.path = cstr(path)
	r.exec_fd = -1
	if exe != nil {
		r.exec_fd = C.int(exe.Fd())
	}
	argv := (*[2]*C.char)(C.calloc(2, C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	allocs = append(allocs, unsafe.Pointer(argv))
	argv[0] = cstr(argv0)
	r.argv = &argv[0]
	r.envp = &argv[1] // empty: the stage builds the process's environment from the plan
	fds := (*[1 << 16]C.int)(C.calloc(C.size_t(len(files)+1), C.size_t(unsafe.Sizeof(C.int(0)))))[:len(files):len(files)]
	allocs = append(allocs, unsafe.Pointer(&fds[:1][0]))
	for i, f := range files {
		fds[i] = C.int(f.Fd())
	}
	if len(files) > 0 {
		r.fds = &fds[0]
	}
	r.nfds = C.int(len(files))
	r.clone_flags = C.uint64_t(attr.Cloneflags)
	r.cgroup_fd = -1
	if attr.UseCgroupFD {
		r.cgroup_fd = C.int(attr.CgroupFD)
	}
	if len(attr.UidMappings) > 0 {
		r.uid_map = cstr(idMap(attr.UidMappings))
	}
	if len(attr.GidMappings) > 0 {
		r.gid_map = cstr(idMap(attr.GidMappings))
	}
	if attr.GidMappingsEnableSetgroups {
		r.setgroups_allow = 1
	}
	if cred := attr.Credential; cred != nil {
		r.set_cred = 1
		r.uid, r.gid = C.uid_t(cred.Uid), C.gid_t(cred.Gid)
		// As os/exec: no setgroups where the gid map denies it.
		if cred.NoSetGroups || (len(attr.GidMappings) > 0 && !attr.GidMappingsEnableSetgroups) {
			r.no_setgroups = 1
		}
	}
	for _, c := range attr.AmbientCaps {
		r.ambient |= 1 << c
	}
	r.pdeathsig = C.int(attr.Pdeathsig)
	var pidfd, childErr C.int
	ret := C.jail_spawn(&r, &pidfd, &childErr)
	// The files must stay open until the child has its copies.
	runtime.KeepAlive(files)
	runtime.KeepAlive(exe)
	if ret < 0 {
		errno := syscall.Errno(-ret)
		if childErr != 0 {
			if exe != nil {
				path = exe.Name()
			}
			return 0, nil, &os.PathError{Op: "fork/exec", Path: path, Err: errno}
		}
		return 0, nil, os.NewSyscallError("spawn", errno)
	}
	// Nonblocking, so that waitExit waits in the poller; should this fail,
	// it returns at once and wait4 blocks a thread instead.
	_ = unix.SetNonblock(int(pidfd), true)
	return int(ret), os.NewFile(uintptr(pidfd), "pidfd"), nil
}

// idMap formats an id map as /proc/PID/uid_map takes it.
func idMap(m []syscall.SysProcIDMap) string {
	var b strings.Builder
	for _, e := range m {
		b.WriteString(strconv.Itoa(e.ContainerID) + " " + strconv.Itoa(e.HostID) + " " + strconv.Itoa(e.Size) + "\n")
	}
	return b.String()
}

// stdio gives the child descriptors 0, 1 and 2 as os/exec does: nil is
// /dev/null, an *os.File is passed as it is, any other reader or writer
// gets a pipe that a goroutine copies.
type stdio struct {
	child [3]*os.File
	// closeAfterStart are the child's ends, ours to close once it has
	// its copies; copiers run once it started.
	closeAfterStart []*os.File
	// closeIfFailed are our ends of the pipes.
	closeIfFailed []*os.File
	copiers       []func() error
	errc          chan error
}

func newStdio(stdin io.Reader, stdout, stderr io.Writer) (_ *stdio, retErr error) {
	s := &stdio{}
	defer func() {
		if retErr != nil {
			s.started(retErr)
		}
	}()
	switch r := stdin.(type) {
	case nil:
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		s.child[0] = f
		s.closeAfterStart = append(s.closeAfterStart, f)
	case *os.File:
		s.child[0] = r
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.child[0] = pr
		s.closeAfterStart = append(s.closeAfterStart, pr)
		s.closeIfFailed = append(s.closeIfFailed, pw)
		s.copiers = append(s.copiers, func() error {
			_, err := io.Copy(pw, r)
			if cerr := pw.Close(); err == nil {
				err = cerr
			}
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
				err = nil // the child need not read all of its input
			}
			return err
		})
	}
	for i, w := range []io.Writer{stdout, stderr} {
		fd := i + 1
		if i == 1 && interfaceEqual(stderr, stdout) {
			s.child[2] = s.child[1]
			continue
		}
		switch w := w.(type) {
		case nil:
			f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return nil, err
			}
			s.child[fd] = f
			s.closeAfterStart = append(s.closeAfterStart, f)
		case *os.File:
			s.child[fd] = w
		default:
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			s.child[fd] = pw
			s.closeAfterStart = append(s.closeAfterStart, pw)
			s.closeIfFailed = append(s.closeIfFailed, pr)
			s.copiers = append(s.copiers, func() error {
				_, err := io.Copy(w, pr)
				pr.Close()
				return err
			})
		}
	}
	return s, nil
}

// interfaceEqual is a == b, false where the types are not comparable.
func interfaceEqual(a, b any) (eq bool) {
	defer func() { _ = recover() }()
	return a == b
}

// started closes the child's ends and, if the child started, runs the
// copiers.
func (s *stdio) started(err error) {
	for _, f := range s.closeAfterStart {
		f.Close()
	}
	s.closeAfterStart = nil
	if err != nil {
		for _, f := range s.closeIfFailed {
			f.Close()
		}
		s.copiers = nil
		return
	}
	s.errc = make(chan error, len(s.copiers))
	for _, fn := range s.copiers {
		go func() { s.errc <- fn() }()
	}
}

// wait waits for the copiers, once the child exited with waitErr; it
// returns the first error.
func (s *stdio) wait(waitErr error) error {
	err := waitErr
	for range s.copiers {
		if cerr := <-s.errc; err == nil {
			err = cerr
		}
	}
	return err
}

// nofileAtStart is RLIMIT_NOFILE's soft limit before the Go runtime raised
// it, for the tests.
func nofileAtStart() uint64 { return uint64(C.jail_nofile_at_start.rlim_cur) }

// killAfterClone makes this process SIGKILL itself in spawn right after
// the clone, for TestSpawnParentKilled.
func killAfterClone() { C.jail_spawn_test_kill_after_clone = 1 }
