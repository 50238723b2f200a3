package seccomp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// assertDecideAlike checks that programs want and got return the same on
// every case; what leads each difference it reports.
func assertDecideAlike(t *testing.T, what string, cases []call, want, got []byte) {
	t.Helper()
	wantVM, err := newVM(want)
	require.NoError(t, err)
	gotVM, err := newVM(got)
	require.NoError(t, err)
	failed := 0
	for _, c := range cases {
		w, err := run(wantVM, c.arch, c.nr, c.args[:]...)
		require.NoError(t, err)
		g, err := run(gotVM, c.arch, c.nr, c.args[:]...)
		require.NoError(t, err)
		if g != w {
			t.Errorf("%s: %s args %#x: got %#x, want %#x", what, SyscallName(c.arch, c.nr), c.args, g, w)
			if failed++; failed == 10 {
				t.Fatal("giving up after 10 differences")
			}
		}
	}
}

// decisionCases are the calls on which two programs of policy p must
// agree: every number from -1 to 1024 of x86_64, x32 and ia32 (the x86
// ABIs a filter on amd64 may meet) and a few of aarch64 and of an unknown
// ABI, all with zero arguments; the argument cases of the built-in
// policies' tests; and for each rule with argument
// conditions, each of its syscalls with arguments that satisfy every
// condition, then with one argument at a time changed to a value at the
// edge of its condition (below, at, above, high half flipped, unmasked
// bits set, all ones). Numbers and arches are resolved (nr, arch set).
func decisionCases(t *testing.T, p *Policy) []call {
	t.Helper()
	var cases []call
	for nr := int32(-1); nr <= 1024; nr++ {
		cases = append(cases,
			call{nr: nr, arch: unix.AUDIT_ARCH_X86_64},
			call{nr: x32Bit | nr, arch: unix.AUDIT_ARCH_X86_64},
			call{nr: nr, arch: unix.AUDIT_ARCH_I386})
	}
	for _, nr := range []int32{-1, 0, 56, 172, 221, 1024} {
		cases = append(cases, call{nr: nr, arch: unix.AUDIT_ARCH_AARCH64}, call{nr: nr, arch: 0})
	}
	// Calls the built-in policies decide on their arguments.
	named := []call{
		{name: "ioctl", args: [6]uint64{0, unix.TIOCSTI}},
		{name: "ioctl", args: [6]uint64{0, 1<<32 | unix.TIOCSTI}},
		{name: "ioctl", args: [6]uint64{0, unix.TIOCLINUX}},
		{name: "ioctl", args: [6]uint64{0, unix.TCGETS}},
		{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER}},
		{name: "clone", args: [6]uint64{threadFlags}},
		{name: "unshare", args: [6]uint64{unix.CLONE_NEWNS}},
		{name: "unshare", args: [6]uint64{unix.CLONE_FILES}},
	}
	for _, fam := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_VSOCK, 1<<32 | unix.AF_UNIX} {
		for _, proto := range []uint64{0, unix.NETLINK_AUDIT} {
			named = append(named, call{name: "socket", args: [6]uint64{fam, unix.SOCK_STREAM, proto}})
		}
	}
	for _, v := range []uint64{0, 8, 0x20000, 0x20008, 0xffffffff, 0x0400000} {
		named = append(named, call{name: "personality", args: [6]uint64{v}})
	}
	for _, c := range named {
		nr, err := SyscallNumber(c.name)
		require.NoError(t, err)
		cases = append(cases, call{nr: nr, arch: unix.AUDIT_ARCH_X86_64, args: c.args})
	}
	for _, r := range p.Rules {
		if len(r.Args) == 0 {
			continue
		}
		var base [6]uint64
		for _, a := range r.Args {
			base[a.Index] = satisfying(a)
		}
		arglists := [][6]uint64{base}
		for _, a := range r.Args {
			for _, v := range edges(a) {
				args := base
				args[a.Index] = v
				arglists = append(arglists, args)
			}
		}
		for _, name := range r.Names {
			nr, err := SyscallNumber(name)
			require.NoError(t, err)
			if nr < 0 { // not a syscall of this ABI
				continue
			}
			for _, args := range arglists {
				cases = append(cases, call{nr: nr, arch: unix.AUDIT_ARCH_X86_64, args: args})
			}
		}
	}
	return cases
}

// satisfying returns a value for which condition a holds, where one exists.
func satisfying(a Arg) uint64 {
	v := uint64(a.Value)
	switch a.Op {
	case OpNe, OpGt:
		return v + 1
	case OpLt:
		return v - 1
	}
	return v
}

// edges are values at the boundary of condition a.
func edges(a Arg) []uint64 {
	v := uint64(a.Value)
	e := []uint64{0, v - 1, v, v + 1, v ^ 1<<32, ^uint64(0)}
	if a.Op == OpMaskedEq {
		m := uint64(a.Mask)
		e = append(e, v|^m, v^(m&-m))
	}
	return e
}
