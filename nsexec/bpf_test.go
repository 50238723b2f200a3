package nsexec

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/seccomp"
)

func seccompData(nr int32, arch uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.NativeEndian.PutUint32(b[0:], uint32(nr))
	binary.NativeEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

func builtinPrograms(t testing.TB) [][]byte {
	var progs [][]byte
	for _, name := range []string{"default", "strict"} {
		p, err := seccomp.Load(name)
		require.NoError(t, err)
		prog, err := seccomp.Compile(p, seccomp.Options{Log: true})
		require.NoError(t, err)
		progs = append(progs, prog.Rules, prog.Filter)
	}
	return progs
}

// FuzzBPFInterpreter: PID 1's interpreter agrees with x/net/bpf
// (seccomp.Eval) on the
// built-in policies' programs for any seccomp_data.
func FuzzBPFInterpreter(f *testing.F) {
	progs := builtinPrograms(f)
	f.Add(int32(unix.SYS_IOCTL), uint32(unix.AUDIT_ARCH_X86_64), uint64(0), uint64(unix.TIOCSTI), uint64(0))
	f.Add(int32(unix.SYS_CLONE), uint32(unix.AUDIT_ARCH_X86_64), uint64(unix.CLONE_NEWUSER), uint64(0), uint64(0))
	f.Add(int32(unix.SYS_SOCKET), uint32(unix.AUDIT_ARCH_X86_64), uint64(unix.AF_NETLINK), uint64(3), uint64(9))
	f.Add(int32(20), uint32(unix.AUDIT_ARCH_I386), uint64(0), uint64(0), uint64(0))
	f.Add(int32(0x40000027), uint32(unix.AUDIT_ARCH_X86_64), uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, nr int32, arch uint32, a0, a1, a2 uint64) {
		data := seccompData(nr, arch, [6]uint64{a0, a1, a2})
		for _, prog := range progs {
			want, err := seccomp.Eval(prog, arch, nr, a0, a1, a2)
			require.NoError(t, err)
			if got := cBPFRun(prog, data); got != want {
				t.Fatalf("nr %d arch %#x args %#x %#x %#x: C interpreter says %#x, x/net/bpf %#x", nr, arch, a0, a1, a2, got, want)
			}
		}
	})
}

// TestBPFInterpreterEveryNumber checks every syscall number of the native
// ABI with zero arguments.
func TestBPFInterpreterEveryNumber(t *testing.T) {
	for _, prog := range builtinPrograms(t) {
		for nr := int32(-1); nr < 600; nr++ {
			want, err := seccomp.Eval(prog, unix.AUDIT_ARCH_X86_64, nr)
			require.NoError(t, err)
			require.Equal(t, want, cBPFRun(prog, seccompData(nr, unix.AUDIT_ARCH_X86_64, [6]uint64{})), "nr %d", nr)
		}
	}
}

// TestBPFInterpreterFailsClosed: malformed programs are a kill, never an allow.
func TestBPFInterpreterFailsClosed(t *testing.T) {
	data := seccompData(0, unix.AUDIT_ARCH_X86_64, [6]uint64{})
	kill := uint32(0x80000000)
	for what, prog := range map[string][]byte{
		"empty":              {},
		"falls off the end":  {0x20, 0, 0, 0, 0, 0, 0, 0},                                // ld [0]
		"load out of bounds": {0x20, 0, 0, 0, 64, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f}, // ld [64]; ret allow
		"jump out":           {0x15, 0, 9, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f},  // jeq #0, 0, 9
		"unknown opcode":     {0xff, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f},
		"division by zero":   {0x34, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f}, // div #0
	} {
		require.Equal(t, kill, cBPFRun(prog, data), what)
	}
}
