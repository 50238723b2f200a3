//go:build linux

package main

// The probe side of `jail selftest`: a hidden subcommand that selftest runs
// inside a jail (and once on the host, as the decoy). It makes the calls it
// is told to and prints one JSON line per call with what the kernel
// answered. It decides nothing: selftest.go judges the answers. A call the
// seccomp policy kills ends the probe; the lines printed before it are
// already out, and the jail's report names the call.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// probeAnswer is one line the probe prints.
type probeAnswer struct {
	// Op is the operation and its argument, e.g. "read /etc/shadow".
	Op string `json:"op"`
	// Err is the errno's name ("ENOENT") when the call failed, or the
	// error's text when it is not an errno.
	Err string `json:"err,omitempty"`
	// Value is what a call that succeeded read or counted.
	Value string `json:"value,omitempty"`
}

// probeOps are the operations, each with one argument. Each runs as the
// jail's workload would: no retries, no fallbacks.
var probeOps = map[string]func(arg string) (string, error){
	"read":              probeRead,
	"open":              func(p string) (string, error) { return "", openClose(p, unix.O_RDONLY) },
	"open-write":        func(p string) (string, error) { return "", openClose(p, unix.O_WRONLY) },
	"create":            probeCreate,
	"rewrite":           probeRewrite,
	"count-pids":        probeCountPids,
	"find-cmdline":      probeFindCmdline,
	"clone-ns":          probeCloneNS,
	"mount-tmpfs":       probeMountTmpfs,
	"ptrace-attach":     probePtraceAttach,
	"connect-lo":        probeConnectLoopback,
	"hog":               probeHog,
	"fork-until-eagain": probeForkUntilEAGAIN,
	"sleep":             probeSleep,
	"spin":              probeSpin,
	"decoy":             probeDecoy,
}

// The probe makes its calls from the main thread. The jail's PID 1 counts
// a seccomp kill as the workload's (status seccomp_killed) when the caller
// is the workload's thread group, but without a mount namespace it sees
// the host's /proc and can recognise only the main thread; from any other
// thread the kill would read as the SIGKILL of a child. LockOSThread in an
// init function runs main on the main thread (see runtime.LockOSThread).
func init() {
	if len(os.Args) > 1 && os.Args[1] == "selftest-probe" {
		runtime.LockOSThread()
	}
}

func newSelftestProbeCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:                "selftest-probe OP ARG [OP ARG]...",
		Short:              "Make the calls of one selftest probe and print the kernel's answers (used by selftest)",
		Hidden:             true,
		DisableFlagParsing: true, // arguments are paths and numbers, never flags
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 || len(args)%2 != 0 {
				return usageError("selftest-probe: want OP ARG pairs")
			}
			for i := 0; i < len(args); i += 2 {
				if probeOps[args[i]] == nil {
					return usageError("selftest-probe: unknown op %q", args[i])
				}
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			for i := 0; i < len(args); i += 2 {
				value, err := probeOps[args[i]](args[i+1])
				a := probeAnswer{Op: args[i] + " " + args[i+1], Value: value, Err: errName(err)}
				b, merr := json.Marshal(a)
				if merr != nil {
					return merr
				}
				// One write per answer: it is out before the next call, which
				// the seccomp policy may kill.
				if _, err := stdout.Write(append(b, '\n')); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// errName returns the errno's name of err, or its text.
func errName(err error) string {
	if err == nil {
		return ""
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return err.Error()
}

// probeRead reads up to 4 KiB of path.
func probeRead(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	buf := make([]byte, 4096)
	n, err := fh.Read(buf)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return string(buf[:n]), nil
}

func openClose(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	return unix.Close(fd)
}

// probeCreate creates a new file in dir and, when that works, removes it
// again at once.
func probeCreate(dir string) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf(".jail-selftest-%d", os.Getpid()))
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	fh.Close()
	return undone("created", os.Remove(path)), nil
}

// undone is the value of an attack that worked and that the probe undid
// (or tried to): the attack's success is the answer, never the undoing's
// error, which would read as a refusal.
func undone(value string, err error) string {
	if err != nil {
		return value + " (undoing it: " + errName(err) + ")"
	}
	return value
}

// probeRewrite writes path's own content back to it (the hostname stays
// what it was, should the write go through).
func probeRewrite(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	if _, err := fh.Write(b); err != nil {
		return "", err
	}
	return "written", nil
}

// probeCountPids counts the processes in procDir.
func probeCountPids(procDir string) (string, error) {
	pids, err := listPids(procDir)
	return strconv.Itoa(len(pids)), err
}

// probeFindCmdline lists the processes other than this one whose command
// line contains marker.
func probeFindCmdline(marker string) (string, error) {
	pids, err := listPids("/proc")
	if err != nil {
		return "", err
	}
	// Our own pid as /proc counts it: without a mount namespace, /proc is
	// the host's, and getpid(2) answers in the jail's PID namespace.
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return "", err
	}
	var found []string
	for _, pid := range pids {
		if pid == self { // the marker is in our own argv
			continue
		}
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			found = append(found, pid)
		}
	}
	return strings.Join(found, ","), nil
}

func listPids(procDir string) ([]string, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, e.Name())
		}
	}
	return pids, nil
}

// probeCloneNS creates a child in a new namespace, "user" (clone with
// CLONE_NEWUSER), which exits at once. unshare(CLONE_NEWUSER) would not
// do: the kernel refuses it to every multithreaded process (EINVAL), and a
// Go program always is one, whatever the jail allows.
func probeCloneNS(ns string) (string, error) {
	if ns != "user" {
		return "", fmt.Errorf("clone-ns %s: only user is probed", ns)
	}
	pid, errno := cloneExit(unix.CLONE_NEWUSER)
	if errno != 0 {
		return "", os.NewSyscallError("clone", errno)
	}
	if _, err := unix.Wait4(int(pid), nil, 0, nil); err != nil {
		return "", os.NewSyscallError("wait4", err)
	}
	return "created", nil
}

// cloneExit clones a child with flags that exits at once, and returns its
// pid. After a fork the child's Go runtime is not usable: the child makes
// only raw system calls, as syscall.forkAndExecInChild does.
//
//go:nosplit
//go:norace
func cloneExit(flags uintptr) (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno == 0 && pid == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return pid, errno
}

// probeMountTmpfs mounts a tmpfs on target and, when that works, detaches
// it again at once.
func probeMountTmpfs(target string) (string, error) {
	if err := unix.Mount("none", target, "tmpfs", 0, ""); err != nil {
		return "", os.NewSyscallError("mount", err)
	}
	return undone("mounted", unix.Unmount(target, unix.MNT_DETACH)), nil
}

// probePtraceAttach attaches to pid and, when that works, detaches again.
func probePtraceAttach(arg string) (string, error) {
	pid, err := strconv.Atoi(arg)
	if err != nil {
		return "", err
	}
	runtime.LockOSThread() // a tracer is a thread: attach and detach from the same one
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		return "", os.NewSyscallError("ptrace", err)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, unix.WALL, nil) // PTRACE_DETACH needs the tracee stopped
	return undone("attached", unix.PtraceDetach(pid)), nil
}

// probeConnectLoopback connects to TCP port on 127.0.0.1; it never
// connects anywhere else.
func probeConnectLoopback(arg string) (string, error) {
	port, err := strconv.ParseUint(arg, 10, 16)
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	// connect(2) gives up after SO_SNDTIMEO, should something drop the SYN.
	tv := unix.NsecToTimeval(time.Second.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return "", os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "", os.NewSyscallError("connect", err)
	}
	return "connected", nil
}

// probeHog maps and touches n bytes of anonymous memory, page by page.
func probeHog(arg string) (string, error) {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return "", err
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return "", os.NewSyscallError("mmap", err)
	}
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	return fmt.Sprintf("touched %d bytes", n), unix.Munmap(b)
}

// probeForkUntilEAGAIN forks children that wait, until fork fails or
// limit children run, then kills and reaps them. Its value is
// "forked=N threads=T", T being this process's threads.
//
// The loop runs on a locked thread with the garbage collector off and only
// raw system calls, until every child is reaped: under a full pids.max the
// Go runtime could not start a thread, and would abort instead of
// returning EAGAIN.
func probeForkUntilEAGAIN(arg string) (string, error) {
	limit, err := strconv.Atoi(arg)
	if err != nil {
		return "", err
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	threads := statusField(string(status), "Threads")
	children := make([]uintptr, 0, limit)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	ppid := uintptr(os.Getpid())
	var forkErr syscall.Errno
	for len(children) < limit {
		pid, errno := forkWaiter(ppid)
		if errno != 0 {
			forkErr = errno
			break
		}
		children = append(children, pid)
	}
	for _, pid := range children {
		syscall.RawSyscall(syscall.SYS_KILL, pid, uintptr(syscall.SIGKILL), 0)
	}
	for range children {
		syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), 0, 0, 0, 0, 0) // wait4(-1, NULL, 0, NULL)
	}
	value := fmt.Sprintf("forked=%d threads=%s", len(children), threads)
	if forkErr != 0 {
		return value, os.NewSyscallError("clone", forkErr)
	}
	return value, nil
}

// forkWaiter forks a child that waits until it is killed, or until this
// process dies. It returns the child's pid.
//
// After a fork the child's Go runtime is not usable: the child makes only
// raw system calls, as syscall.forkAndExecInChild does.
//
//go:nosplit
//go:norace
func forkWaiter(ppid uintptr) (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		return pid, errno
	}
	syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	if p, _, _ := syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); p == ppid { // else the parent is already gone
		syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0) // blocks until a signal
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	return 0, 0
}

// statusField returns the value of a "Name:\tvalue" line of
// /proc/PID/status.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func probeSleep(arg string) (string, error) {
	d, err := time.ParseDuration(arg)
	if err != nil {
		return "", err
	}
	time.Sleep(d)
	return "slept", nil
}

// probeSpin burns CPU until this process has used arg of CPU time, as
// its clock counts it.
func probeSpin(arg string) (string, error) {
	d, err := time.ParseDuration(arg)
	if err != nil {
		return "", err
	}
	for {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
			return "", os.NewSyscallError("clock_gettime", err)
		}
		if time.Duration(ts.Nano()) >= d {
			return "spun " + time.Duration(ts.Nano()).Round(time.Millisecond).String(), nil
		}
		for i := 0; i < 1e6; i++ { // some work between two looks at the clock
		}
	}
}

// probeDecoy runs on the host, not in a jail: a process with marker in
// its command line that the jail must not see. It waits until its stdin
// closes.
func probeDecoy(string) (string, error) {
	_, err := io.Copy(io.Discard, os.Stdin)
	return "", err
}
