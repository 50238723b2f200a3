package seccomp

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite policies/*.bpf from policies/*.yaml")

// TestPrecompiled checks that each built-in policy's embedded program
// decides like a fresh compile of its YAML, on every native syscall number
// and the argument cases the policies test, on other ABIs too. It compares
// verdicts rather than bytes, so that another libseccomp version, which may
// order its checks differently, still passes. -update rewrites the files.
func TestPrecompiled(t *testing.T) {
	for _, name := range []string{"default", "strict"} {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			require.NoError(t, err)
			fresh, err := compile(p, Options{})
			require.NoError(t, err)
			if *update {
				require.NoError(t, os.WriteFile("policies/"+name+".bpf", rulesOf(t, p), 0o644))
			}
			embedded, err := CompileBuiltin(name, Options{})
			require.NoError(t, err, "run: go test ./seccomp -run TestPrecompiled -args -update")
			cases := []call{
				{name: "ioctl", args: [6]uint64{0, unix.TIOCSTI}},
				{name: "ioctl", args: [6]uint64{0, 1<<32 | unix.TIOCSTI}},
				{name: "ioctl", args: [6]uint64{0, unix.TIOCLINUX}},
				{name: "ioctl", args: [6]uint64{0, unix.TCGETS}},
				{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER}},
				{name: "clone", args: [6]uint64{threadFlags}},
				{name: "unshare", args: [6]uint64{unix.CLONE_NEWNS}},
				{name: "unshare", args: [6]uint64{unix.CLONE_FILES}},
				{nr: i386Getpid, arch: unix.AUDIT_ARCH_I386},
				{nr: x32Bit | x86_64Getpid},
			}
			for _, fam := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_VSOCK, 1<<32 | unix.AF_UNIX} {
				for _, proto := range []uint64{0, unix.NETLINK_AUDIT} {
					cases = append(cases, call{name: "socket", args: [6]uint64{fam, unix.SOCK_STREAM, proto}})
				}
			}
			for _, v := range []uint64{0, 8, 0x20000, 0x20008, 0xffffffff, 0x0400000} {
				cases = append(cases, call{name: "personality", args: [6]uint64{v}})
			}
			for nr := int32(-1); nr < 600; nr++ {
				cases = append(cases, call{nr: nr})
			}
			for _, c := range cases {
				assert.Equal(t, c.run(t, fresh.Filter), c.run(t, embedded.Filter), "%+v: policies/%s.bpf is out of date: run go test ./seccomp -run TestPrecompiled -args -update", c, name)
			}
		})
	}
}

// rulesOf is the policy's program before the notify rewrite.
func rulesOf(t *testing.T, p *Policy) []byte {
	prog, err := compile(p, Options{Log: true})
	require.NoError(t, err)
	return bytes.Clone(prog.Rules)
}
