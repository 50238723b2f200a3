package jailfs

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// allowed are the system calls the files helper makes once its filter is
// loaded: the Go runtime's (memory, threads, signals, the poller, time)
// and the file operations'. Everything else kills the helper: it runs
// nothing, connects nowhere, forks nothing, and a call it lacks shows up
// as a failed operation that says so, never as a quiet refusal (the
// integration tests run every operation under this filter).
var allowed = []uintptr{
	// The runtime, and glibc's threads in a cgo program.
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MPROTECT,
	unix.SYS_MADVISE, unix.SYS_BRK, unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN,
	unix.SYS_SIGALTSTACK, unix.SYS_FUTEX, unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_SCHED_YIELD,
	unix.SYS_SCHED_GETAFFINITY, unix.SYS_GETPID, unix.SYS_GETTID, unix.SYS_TGKILL, unix.SYS_EXIT,
	unix.SYS_EXIT_GROUP, unix.SYS_RSEQ, unix.SYS_SET_ROBUST_LIST, unix.SYS_GETRANDOM, unix.SYS_RESTART_SYSCALL,
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2, unix.SYS_EVENTFD2,
	unix.SYS_PIPE2, unix.SYS_FCNTL, unix.SYS_CLOCK_GETTIME,
	// The file operations.
	unix.SYS_OPENAT, unix.SYS_OPENAT2, unix.SYS_NEWFSTATAT, unix.SYS_FSTAT, unix.SYS_STATX, unix.SYS_LSEEK,
	unix.SYS_PREAD64, unix.SYS_PWRITE64, unix.SYS_READV, unix.SYS_WRITEV, unix.SYS_GETDENTS64,
	unix.SYS_MKDIRAT, unix.SYS_UNLINKAT, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_LINKAT,
	unix.SYS_SYMLINKAT, unix.SYS_READLINKAT, unix.SYS_FCHMOD, unix.SYS_UTIMENSAT, unix.SYS_FSYNC,
	unix.SYS_FDATASYNC, unix.SYS_SYNCFS, unix.SYS_FSTATFS, unix.SYS_COPY_FILE_RANGE, unix.SYS_SPLICE,
	unix.SYS_SENDFILE,
	unix.SYS_FGETXATTR, unix.SYS_FLISTXATTR, unix.SYS_FSETXATTR, // user.* attributes kept in a copy; an overlay's opaque directories
}

// Return values of the filter (seccomp(2)).
const (
	retKill   = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	retAllow  = 0x7fff0000 // SECCOMP_RET_ALLOW
	retENOSYS = 0x00050000 | uint32(unix.ENOSYS)
	// x32 system calls have this bit set in their number (amd64).
	x32Bit = 0x40000000
)

// Program returns the files helper's seccomp filter for this
// architecture: other architectures' calls (ia32, x32) are killed;
// clone(2) only makes threads (CLONE_THREAD), never a process; clone3(2)
// answers ENOSYS, whose flags a filter cannot read (glibc then makes its
// threads with clone); prlimit64 only on the helper itself; the calls in
// allowed are allowed; every other call kills the helper.
func Program() ([]bpf.RawInstruction, error) {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for the files helper on %s: %w", runtime.GOARCH, errors.ErrUnsupported)
	}
	// Layout: the checks, one jeq per allowed call, then the returns and
	// the two argument checks: labels, reached by forward jumps that are
	// filled in once the labels are placed.
	var p []bpf.Instruction
	const (
		lKill = iota
		lAllow
		lENOSYS
		lClone
		lPrlimit
	)
	type fix struct {
		at     int
		target int
		onTrue bool
	}
	var fixes []fix
	p = append(p, bpf.LoadAbsolute{Off: 4, Size: 4})
	fixes = append(fixes, fix{len(p), lKill, false})
	p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch})
	p = append(p, bpf.LoadAbsolute{Off: 0, Size: 4})
	if runtime.GOARCH == "amd64" {
		fixes = append(fixes, fix{len(p), lKill, true})
		p = append(p, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit})
	}
	special := []struct {
		nr     uintptr
		target int
	}{{unix.SYS_CLONE, lClone}, {unix.SYS_CLONE3, lENOSYS}, {unix.SYS_PRLIMIT64, lPrlimit}}
	for _, s := range special {
		fixes = append(fixes, fix{len(p), s.target, true})
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(s.nr)})
	}
	for _, nr := range allowed {
		fixes = append(fixes, fix{len(p), lAllow, true})
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr)})
	}
	labels := map[int]int{}
	labels[lKill] = len(p)
	p = append(p, bpf.RetConstant{Val: retKill})
	labels[lAllow] = len(p)
	p = append(p, bpf.RetConstant{Val: retAllow})
	labels[lENOSYS] = len(p)
	p = append(p, bpf.RetConstant{Val: retENOSYS})
	// clone's flags, the low word of args[0] (both architectures are
	// little-endian; CLONE_THREAD is in the low word).
	labels[lClone] = len(p)
	p = append(p, bpf.LoadAbsolute{Off: 16, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_THREAD, SkipTrue: 2},
		bpf.RetConstant{Val: retKill}, bpf.RetConstant{Val: retKill}, bpf.RetConstant{Val: retAllow})
	// prlimit64's pid, args[0]: 0 (itself), both words.
	labels[lPrlimit] = len(p)
	p = append(p, bpf.LoadAbsolute{Off: 16, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 2},
		bpf.LoadAbsolute{Off: 20, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
		bpf.RetConstant{Val: retKill}, bpf.RetConstant{Val: retAllow})
	for _, f := range fixes {
		skip := labels[f.target] - f.at - 1
		if skip < 0 || skip > 255 {
			return nil, fmt.Errorf("files helper filter: jump of %d", skip)
		}
		j := p[f.at].(bpf.JumpIf)
		if f.onTrue {
			j.SkipTrue = uint8(skip)
		} else {
			j.SkipFalse = uint8(skip)
		}
		p[f.at] = j
	}
	return bpf.Assemble(p)
}
