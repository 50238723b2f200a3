package seccomp

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// cacheNRs is about NR_syscalls of x86_64 (listns is 470): when a filter
// is loaded, the kernel emulates it once for each number below its own
// NR_syscalls, and once more for each ia32 number, to find the calls it
// always allows (seccomp_cache_prepare, Linux 5.11).
const cacheNRs = 471

// trace is what a program did on one syscall with zero arguments.
type trace struct {
	// insns is how many instructions ran, the return included.
	insns int
	// cached is how many of them the kernel's load-time emulation
	// (seccomp_is_const_allow) runs: it stops at the return or at the
	// first load of an argument, which it cannot know.
	cached int
	// ret is the SECCOMP_RET_* value returned.
	ret uint32
}

// traceOf runs prog on syscall nr of ABI arch with zero arguments, counting
// instructions. It knows the instructions libseccomp and overridePrefix
// emit, the ones the kernel's emulation knows.
func traceOf(t testing.TB, prog []byte, arch uint32, nr int32) trace {
	var tr trace
	var a uint32
	argLoaded := false
	for pc := 0; pc < len(prog)/insnSize; pc++ {
		b := prog[insnSize*pc:]
		code, jt, jf, k := binary.NativeEndian.Uint16(b), int(b[2]), int(b[3]), binary.NativeEndian.Uint32(b[4:])
		tr.insns++
		if !argLoaded {
			tr.cached++
		}
		cond := func(ok bool) {
			if ok {
				pc += jt
			} else {
				pc += jf
			}
		}
		switch code {
		case 0x20: // BPF_LD|BPF_W|BPF_ABS
			switch k {
			case 0:
				a = uint32(nr)
			case 4:
				a = arch
			default:
				a, argLoaded = 0, true
			}
		case 0x06: // BPF_RET|BPF_K
			tr.ret = k
			return tr
		case 0x05: // BPF_JMP|BPF_JA
			pc += int(k)
		case 0x15: // BPF_JMP|BPF_JEQ|BPF_K
			cond(a == k)
		case 0x35: // BPF_JMP|BPF_JGE|BPF_K
			cond(a >= k)
		case 0x25: // BPF_JMP|BPF_JGT|BPF_K
			cond(a > k)
		case 0x45: // BPF_JMP|BPF_JSET|BPF_K
			cond(a&k != 0)
		case 0x54: // BPF_ALU|BPF_AND|BPF_K
			a &= k
		default:
			t.Fatalf("instruction %d: opcode %#x not traced", pc, code)
		}
	}
	t.Fatal("program falls off its end")
	return tr
}

// cost sums up traceOf over the numbers the kernel emulates at load.
type cost struct {
	// cached is how many instructions the kernel's emulation runs at
	// load, over x86_64 and ia32 numbers below cacheNRs.
	cached int
	// perCall is the mean of instructions run per x86_64 number below
	// cacheNRs, with zero arguments: what a call the cache does not
	// cover pays.
	perCall float64
}

func costOf(t testing.TB, prog []byte) cost {
	var c cost
	for nr := int32(0); nr < cacheNRs; nr++ {
		for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386} {
			tr := traceOf(t, prog, arch, nr)
			want, err := Eval(prog, arch, nr)
			require.NoError(t, err)
			require.Equal(t, want, tr.ret, "traceOf disagrees with Eval on %s", SyscallName(arch, nr))
			c.cached += tr.cached
			if arch == unix.AUDIT_ARCH_X86_64 {
				c.perCall += float64(tr.insns) / cacheNRs
			}
		}
	}
	return c
}

// BenchmarkLoad loads each built-in policy's filter in both layouts with
// seccomp(2), each time into a new thread that then exits, and reports
// the time seccomp(2) took (load-ns/op), the filter's length (insns), the
// instructions the kernel emulates at load (cached-insns) and the mean
// instructions a call runs (insns/call; see [cost]). The kernel also
// checks and JIT-compiles the filter, in time linear in its length.
func BenchmarkLoad(b *testing.B) {
	if runtime.GOARCH != "amd64" {
		b.Skip("the instruction counts are of x86_64 numbers")
	}
	for _, name := range []string{"default", "strict"} {
		p, err := Load(name)
		require.NoError(b, err)
		for _, l := range []struct {
			name string
			layout
		}{{"linear", linear}, {"tree", binaryTree}} {
			prog, err := compile(p, Options{}, l.layout)
			require.NoError(b, err)
			b.Run(name+"/"+l.name, func(b *testing.B) {
				c := costOf(b, prog.Filter)
				var ns int64
				for b.Loop() {
					d, err := loadOnThread(prog.Filter)
					if err != nil {
						b.Skipf("cannot load a filter here: %v", err)
					}
					ns += d.Nanoseconds()
				}
				b.ReportMetric(float64(ns)/float64(b.N), "load-ns/op")
				b.ReportMetric(float64(prog.Instructions()), "insns")
				b.ReportMetric(float64(c.cached), "cached-insns")
				b.ReportMetric(c.perCall, "insns/call")
			})
		}
	}
}
