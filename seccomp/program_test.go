package seccomp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// call is a hand-built seccomp_data: a syscall by name (or raw number) on
// an ABI, with arguments.
type call struct {
	name string
	nr   int32 // used when name is ""
	arch uint32
	args [6]uint64
}

// run returns what filter returns for c, in x/net/bpf's VM.
func (c call) run(t *testing.T, filter []byte) uint32 {
	nr := c.nr
	if c.name != "" {
		var err error
		nr, err = SyscallNumber(c.name)
		require.NoError(t, err)
	}
	arch := c.arch
	if arch == 0 {
		arch = unix.AUDIT_ARCH_X86_64
	}
	ret, err := Eval(filter, arch, nr, c.args[:]...)
	require.NoError(t, err)
	return ret
}

func compileBuiltin(t *testing.T, name string, o Options) *Program {
	t.Helper()
	p, err := Load(name)
	require.NoError(t, err)
	prog, err := Compile(p, o)
	require.NoError(t, err)
	return prog
}

var (
	allow    = RetAllow
	notify   = RetUserNotif // a kill, carried out and reported by PID 1
	eperm    = RetErrno | uint32(unix.EPERM)
	enosys   = RetErrno | uint32(unix.ENOSYS)
	eafnosup = RetErrno | uint32(unix.EAFNOSUPPORT)
)

const (
	sigchld      = uint64(unix.SIGCHLD)
	threadFlags  = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	i386Getpid   = 20 // __NR_getpid in arch/x86/entry/syscalls/syscall_32.tbl
	x32Bit       = 0x40000000
	x86_64Getpid = 39
)

func TestDefaultPolicy(t *testing.T) {
	prog := compileBuiltin(t, "default", Options{})
	require.True(t, prog.Notify)
	tests := []struct {
		what string
		c    call
		want uint32
	}{
		{"read", call{name: "read"}, allow},
		{"execve", call{name: "execve"}, allow},
		{"keyctl", call{name: "keyctl"}, eperm},
		{"add_key", call{name: "add_key"}, eperm},
		{"bpf", call{name: "bpf"}, eperm},
		{"perf_event_open", call{name: "perf_event_open"}, eperm},
		{"userfaultfd", call{name: "userfaultfd"}, eperm},
		{"mount", call{name: "mount"}, eperm},
		{"umount2", call{name: "umount2"}, eperm},
		{"pivot_root", call{name: "pivot_root"}, eperm},
		{"chroot", call{name: "chroot"}, eperm},
		{"ptrace", call{name: "ptrace"}, eperm},
		{"process_vm_readv", call{name: "process_vm_readv"}, eperm},
		{"kcmp", call{name: "kcmp"}, eperm},
		{"open_by_handle_at", call{name: "open_by_handle_at"}, eperm},
		{"init_module", call{name: "init_module"}, eperm},
		{"kexec_load", call{name: "kexec_load"}, eperm},
		{"setns", call{name: "setns"}, eperm},
		{"iopl", call{name: "iopl"}, eperm},
		{"syslog", call{name: "syslog"}, eperm},
		{"clock_settime", call{name: "clock_settime"}, eperm},
		{"fsopen", call{name: "fsopen"}, eperm},
		{"clone3 falls back", call{name: "clone3"}, enosys},
		{"prlimit64 of itself", call{name: "prlimit64", args: [6]uint64{0, unix.RLIMIT_CPU}}, allow},
		{"prlimit64 of PID 1", call{name: "prlimit64", args: [6]uint64{1, unix.RLIMIT_CPU}}, eperm},
		{"prlimit64 of 0 with high bits", call{name: "prlimit64", args: [6]uint64{1 << 32, unix.RLIMIT_CPU}}, eperm},
		{"io_uring_setup", call{name: "io_uring_setup"}, enosys},
		{"clone a thread", call{name: "clone", args: [6]uint64{threadFlags}}, allow},
		{"fork by clone", call{name: "clone", args: [6]uint64{sigchld}}, allow},
		{"clone a user namespace", call{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER | sigchld}}, eperm},
		{"clone a net namespace", call{name: "clone", args: [6]uint64{unix.CLONE_NEWNET}}, eperm},
		{"unshare files", call{name: "unshare", args: [6]uint64{unix.CLONE_FILES}}, allow},
		{"unshare a user namespace", call{name: "unshare", args: [6]uint64{unix.CLONE_NEWUSER}}, eperm},
		{"unshare a time namespace", call{name: "unshare", args: [6]uint64{unix.CLONE_NEWTIME}}, eperm},
		{"socket unix", call{name: "socket", args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}}, allow},
		{"socket inet6", call{name: "socket", args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM}}, allow},
		{"socket vsock", call{name: "socket", args: [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}}, eperm},
		{"socket packet", call{name: "socket", args: [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}}, eperm},
		{"socket netlink route", call{name: "socket", args: [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}}, allow},
		{"socket netlink audit", call{name: "socket", args: [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}}, eperm},
		{"socket unix with high bits", call{name: "socket", args: [6]uint64{1<<32 | unix.AF_UNIX}}, eperm},
		{"ioctl TCGETS", call{name: "ioctl", args: [6]uint64{0, unix.TCGETS}}, allow},
		{"ioctl TIOCSTI", call{name: "ioctl", args: [6]uint64{0, unix.TIOCSTI}}, notify},
		{"ioctl TIOCSTI with high bits", call{name: "ioctl", args: [6]uint64{0, 1<<32 | unix.TIOCSTI}}, notify},
		{"ioctl TIOCLINUX", call{name: "ioctl", args: [6]uint64{0, unix.TIOCLINUX}}, notify},
		{"personality query", call{name: "personality", args: [6]uint64{0xffffffff}}, allow},
		{"personality linux", call{name: "personality", args: [6]uint64{0}}, allow},
		{"personality READ_IMPLIES_EXEC", call{name: "personality", args: [6]uint64{0x0400000}}, eperm},
		{"ia32 getpid by int 0x80", call{nr: i386Getpid, arch: unix.AUDIT_ARCH_I386}, notify},
		{"x32 getpid", call{nr: x32Bit | x86_64Getpid}, notify},
		{"aarch64", call{nr: 172, arch: unix.AUDIT_ARCH_AARCH64}, notify},
		{"unknown syscall number", call{nr: 1000}, eperm},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.c.run(t, prog.Filter), "got %#x, want %#x", tt.c.run(t, prog.Filter), tt.want)
		})
	}
}

func TestStrictPolicy(t *testing.T) {
	prog := compileBuiltin(t, "strict", Options{})
	tests := []struct {
		what string
		c    call
		want uint32
	}{
		{"read", call{name: "read"}, allow},
		{"mount kills", call{name: "mount"}, notify},
		{"ptrace kills", call{name: "ptrace"}, notify},
		{"keyctl kills", call{name: "keyctl"}, notify},
		{"bpf kills", call{name: "bpf"}, notify},
		{"setns kills", call{name: "setns"}, notify},
		{"unshare kills", call{name: "unshare", args: [6]uint64{unix.CLONE_NEWUSER}}, notify},
		{"clone a user namespace kills", call{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER | sigchld}}, notify},
		{"clone a thread", call{name: "clone", args: [6]uint64{threadFlags}}, allow},
		{"clone3 falls back", call{name: "clone3"}, enosys},
		{"io_uring_setup", call{name: "io_uring_setup"}, enosys},
		{"socket unix", call{name: "socket", args: [6]uint64{unix.AF_UNIX}}, allow},
		{"socket inet", call{name: "socket", args: [6]uint64{unix.AF_INET}}, allow},
		{"socket netlink", call{name: "socket", args: [6]uint64{unix.AF_NETLINK}}, eafnosup},
		{"socket vsock kills", call{name: "socket", args: [6]uint64{unix.AF_VSOCK}}, notify},
		{"ioctl TIOCSTI kills", call{name: "ioctl", args: [6]uint64{0, 1<<32 | unix.TIOCSTI}}, notify},
		{"ioctl TCGETS", call{name: "ioctl", args: [6]uint64{0, unix.TCGETS}}, allow},
		{"setuid", call{name: "setuid"}, eperm},
		{"prlimit64 of itself", call{name: "prlimit64", args: [6]uint64{0, unix.RLIMIT_NOFILE}}, allow},
		{"prlimit64 of PID 1", call{name: "prlimit64", args: [6]uint64{1, unix.RLIMIT_CPU}}, eperm},
		{"prlimit64 of 0 with high bits", call{name: "prlimit64", args: [6]uint64{1 << 32, unix.RLIMIT_CPU}}, eperm},
		{"unknown syscall number kills", call{nr: 1000}, notify},
		{"ia32 kills", call{nr: i386Getpid, arch: unix.AUDIT_ARCH_I386}, notify},
		{"x32 kills", call{nr: x32Bit | x86_64Getpid}, notify},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			got := tt.c.run(t, prog.Filter)
			assert.Equal(t, tt.want, got, "got %#x, want %#x", got, tt.want)
		})
	}
}

// TestLogMode: with Options.Log, errnos reach PID 1 too, and the policy's
// own program, which PID 1 runs to answer, still says which errno.
func TestLogMode(t *testing.T) {
	prog := compileBuiltin(t, "default", Options{Log: true})
	require.NotNil(t, prog.Rules)
	assert.Equal(t, notify, call{name: "keyctl"}.run(t, prog.Filter))
	assert.Equal(t, eperm, call{name: "keyctl"}.run(t, prog.Rules))
	assert.Equal(t, enosys, call{name: "clone3"}.run(t, prog.Rules))
	assert.Equal(t, allow, call{name: "read"}.run(t, prog.Filter))
	assert.Equal(t, RetKillProcess, call{nr: i386Getpid, arch: unix.AUDIT_ARCH_I386}.run(t, prog.Rules))
	assert.Nil(t, compileBuiltin(t, "default", Options{}).Rules)
}

func TestCompileCaches(t *testing.T) {
	a := compileBuiltin(t, "default", Options{})
	b := compileBuiltin(t, "default", Options{})
	assert.Same(t, a, b)
	assert.NotSame(t, a, compileBuiltin(t, "default", Options{Log: true}))
}

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		what, policy, want string
	}{
		{"unknown syscall", "default_action: errno\nrules: [{names: [read, no_such_call], action: allow}]", `unknown syscall "no_such_call"`},
		{"unknown arch", "default_action: errno\narchitectures: [pdp11]\nrules: []", `unknown architecture "pdp11"`},
		{"native missing", "default_action: errno\narchitectures: [x86]\nrules: []", "must include the native"},
		{"no execve", "default_action: errno\nrules: [{names: [sendmsg], action: allow}]", "must allow execve"},
		{"no sendmsg for the listener", "default_action: kill\nrules: [{names: [execve], action: allow}]", "must allow sendmsg"},
		{"a shared gt, then other conditions", "default_action: allow\nrules: [{names: [read], action: errno, args: [{index: 0, op: gt, value: 5}, {index: 1, op: eq, value: 1}]}, {names: [read], action: kill, args: [{index: 2, op: eq, value: 7}, {index: 0, op: gt, value: 5}]}]", "rules[0] and rules[1] both test read argument 0 gt 0x5"},
		{"a shared ne, on two ABIs", "default_action: allow\narchitectures: [x86_64, x86]\nrules: [{names: [write, read], action: errno, args: [{index: 0, op: ne, value: 5}, {index: 1, op: eq, value: 1}]}, {names: [read], action: errno, args: [{index: 2, op: eq, value: 7}, {index: 0, op: ne, value: 5}]}]", "rules[0] and rules[1] both test read argument 0 ne 0x5"},
		{"override with lt", "default_action: errno\nrules: [{names: [execve, sendmsg, ioctl], action: allow}, {names: [ioctl], action: kill, args: [{index: 1, op: lt, value: 9}]}]", "may only use eq and masked_eq"},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			p, err := Parse([]byte(tt.policy))
			require.NoError(t, err)
			_, err = Compile(p, Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestOtherArchitectures(t *testing.T) {
	p, err := Parse([]byte("default_action: errno\narchitectures: [x86_64, x86]\nrules: [{names: [getpid, execve, sendmsg], action: allow}]"))
	require.NoError(t, err)
	prog, err := Compile(p, Options{})
	require.NoError(t, err)
	assert.Equal(t, allow, call{nr: i386Getpid, arch: unix.AUDIT_ARCH_I386}.run(t, prog.Filter))
	assert.Equal(t, allow, call{nr: x86_64Getpid}.run(t, prog.Filter))
	assert.Equal(t, notify, call{nr: x32Bit | x86_64Getpid}.run(t, prog.Filter), "x32 is not in the list")
}

func TestSyscallName(t *testing.T) {
	assert.Equal(t, "ptrace", SyscallName(unix.AUDIT_ARCH_X86_64, unix.SYS_PTRACE))
	assert.Equal(t, "x86:getpid", SyscallName(unix.AUDIT_ARCH_I386, i386Getpid))
	assert.Equal(t, "x32:getpid", SyscallName(unix.AUDIT_ARCH_X86_64, x32Bit|x86_64Getpid))
	assert.Equal(t, "nr 9999", SyscallName(unix.AUDIT_ARCH_X86_64, 9999))
}
