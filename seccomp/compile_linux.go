package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// cache holds compiled programs by policy and options: the hot path of a
// process that starts many jails compiles each policy once.
var cache = struct {
	sync.Mutex
	m map[string]*Program
}{m: map[string]*Program{}}

// Compile checks p against libseccomp's syscall and architecture tables and
// returns its BPF program, compiled once per process for each policy and
// options. Returns an error naming the rule for an unknown syscall or
// architecture, or for rules libseccomp cannot compile.
func Compile(p *Policy, o Options) (*Program, error) {
	key, err := json.Marshal(struct {
		P *Policy
		O Options
	}{p, o})
	if err != nil {
		return nil, err
	}
	cache.Lock()
	defer cache.Unlock()
	if prog, ok := cache.m[string(key)]; ok {
		return prog, nil
	}
	prog, err := compile(p, o, binaryTree)
	if err != nil {
		return nil, err
	}
	cache.m[string(key)] = prog
	return prog, nil
}

// layout is how libseccomp orders a filter's syscall checks: its
// SCMP_FLTATR_CTL_OPTIMIZE level. Both layouts decide every call alike
// (TestBinaryTreeDecidesAlike).
type layout int

const (
	// linear checks the syscalls one after the other (level 1, the
	// default): a call runs past the compares of every syscall before
	// its own, and one no rule names past all of them.
	linear layout = 1
	// binaryTree checks them as a tree sorted by syscall number (level 2,
	// libseccomp 2.5.0): a call runs a few compares per level. So does
	// the kernel for each syscall number when it loads the filter and
	// builds its cache of always-allowed calls (Linux 5.11).
	binaryTree layout = 2
)

func compile(p *Policy, o Options, l layout) (*Program, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	def, err := scmpAction(p.DefaultAction, p.DefaultErrno)
	if err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("seccomp_init: %w", err)
	}
	defer f.Release()
	// The program is loaded by the child stage, which sets no_new_privs
	// itself; and nothing here may touch the calling process.
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, err
	}
	// Any other ABI (ia32 via int 0x80, x32) would reach the kernel with
	// different syscall numbers that this filter never mentions.
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, err
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, err
	}
	if len(p.Architectures) > 0 {
		hasNative := false
		for _, name := range p.Architectures {
			arch, err := libseccomp.GetArchFromString(name)
			if err != nil || arch == libseccomp.ArchNative || arch == libseccomp.ArchInvalid {
				return nil, fmt.Errorf("seccomp policy: architectures: unknown architecture %q", name)
			}
			if arch == native {
				hasNative = true
				continue
			}
			if err := f.AddArch(arch); err != nil {
				return nil, fmt.Errorf("seccomp policy: architectures: %s: %w", name, err)
			}
		}
		if !hasNative {
			return nil, fmt.Errorf("seccomp policy: architectures: must include the native %s", native)
		}
	}
	overrides := p.OverridingRules()
	if len(overrides) > 0 && len(p.Architectures) > 1 {
		return nil, fmt.Errorf("seccomp policy: rules[%d] overrides another rule for %s, which needs a policy for the native architecture only", overrides[0], p.Rules[overrides[0]].Names[0])
	}
	if err := checkLooping(p, overrides); err != nil {
		return nil, err
	}
	for i, r := range p.Rules {
		act, err := scmpAction(r.Action, r.Errno)
		if err != nil {
			return nil, err
		}
		if (act == def && len(r.Args) == 0) || slices.Contains(overrides, i) {
			// libseccomp refuses a rule that repeats the default action;
			// overriding rules go into the prefix.
			continue
		}
		conds := make([]libseccomp.ScmpCondition, 0, len(r.Args))
		for _, a := range r.Args {
			var c libseccomp.ScmpCondition
			if a.Op == OpMaskedEq {
				c, err = libseccomp.MakeCondition(a.Index, libseccomp.CompareMaskedEqual, uint64(a.Mask), uint64(a.Value))
			} else {
				c, err = libseccomp.MakeCondition(a.Index, scmpOps[a.Op], uint64(a.Value))
			}
			if err != nil {
				return nil, fmt.Errorf("seccomp policy: rules[%d]: %w", i, err)
			}
			conds = append(conds, c)
		}
		for _, name := range r.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				return nil, fmt.Errorf("seccomp policy: rules[%d]: unknown syscall %q", i, name)
			}
			if err := f.AddRuleConditional(call, act, conds); err != nil {
				return nil, fmt.Errorf("seccomp policy: rules[%d]: %s: %w", i, name, err)
			}
		}
	}
	if l == binaryTree && treeSafe() {
		// Each architecture gets its own tree after its arch check; the
		// override prefix comes before them all and falls through to the
		// first instruction, whatever the layout. An error leaves the
		// linear layout, which decides alike.
		_ = f.SetOptimize(int(binaryTree))
	}
	rules, err := exportBPF(f)
	if err != nil {
		return nil, err
	}
	prefix, err := overridePrefix(p, overrides)
	if err != nil {
		return nil, err
	}
	prog, err := newProgram(p.Name, append(prefix, rules...), o)
	if err != nil {
		return nil, err
	}
	return prog, checkStartable(prog)
}

// treeSafe reports whether the libseccomp in use (the shared library, not
// the headers) builds trees that decide like its linear programs.
// SCMP_FLTATR_CTL_OPTIMIZE is new in 2.5.0, and up to 2.5.3 an
// architecture with no rule in its tree loses the default action
// (seccomp/libseccomp#370), as in a policy with no rules.
func treeSafe() bool {
	major, minor, micro := libseccomp.GetLibraryVersion()
	return major > 2 || major == 2 && (minor > 5 || minor == 5 && micro >= 4)
}

// checkStartable refuses a program that would stop jail's own last steps:
// the workload hands the listener to PID 1 with sendmsg and then calls
// execve, both under the filter. A notification there would wait for a
// PID 1 that does not have the listener yet.
func checkStartable(prog *Program) error {
	arch, ok := nativeAuditArch[runtime.GOARCH]
	if !ok {
		return nil
	}
	needed := []string{"execve"}
	if prog.Notify {
		needed = append(needed, "sendmsg")
	}
	for _, name := range needed {
		nr, err := SyscallNumber(name)
		if err != nil {
			return err
		}
		v, err := prog.Verdict(arch, nr, 3)
		if err != nil {
			return err
		}
		if v != RetAllow {
			return fmt.Errorf("seccomp policy: must allow %s: jail calls it under the filter to start the command", name)
		}
	}
	return nil
}

// checkLooping refuses two conditional rules for one syscall that make
// the same ne, lt, le, gt or ge comparison and differ in their other
// conditions: libseccomp 2.5.4 never returns from adding the second (an
// endless loop in its rule database), so Compile would hang. The test
// comes from a random search of small policies: every one that hung had
// such a pair, and none without one did. It also refuses some pairs
// libseccomp handles, such as one whose conditions include all of the
// other's. Rules in the override prefix do not reach libseccomp.
func checkLooping(p *Policy, overrides []int) error {
	type comparison struct {
		name string
		arg  Arg
	}
	first := map[comparison]int{}
	for i, r := range p.Rules {
		if slices.Contains(overrides, i) {
			continue
		}
		for _, a := range r.Args {
			if a.Op == OpEq || a.Op == OpMaskedEq {
				continue
			}
			for _, name := range r.Names {
				j, ok := first[comparison{name, a}]
				if !ok {
					first[comparison{name, a}] = i
				} else if j != i && !sameConditions(p.Rules[j].Args, r.Args) {
					return fmt.Errorf("seccomp policy: rules[%d] and rules[%d] both test %s argument %d %s %#x and differ in other conditions, which libseccomp cannot compile (it never returns)", j, i, name, a.Index, a.Op, uint64(a.Value))
				}
			}
		}
	}
	return nil
}

// sameConditions reports whether a and b hold the same conditions, in any
// order.
func sameConditions(a, b []Arg) bool {
	byIndex := func(x, y Arg) int { return int(x.Index) - int(y.Index) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byIndex)
	slices.SortFunc(b, byIndex)
	return slices.Equal(a, b)
}

// overridePrefix is a hand-built program, checked before libseccomp's, for
// the overriding rules: for a native syscall whose arguments match, it
// returns the rule's action; otherwise it falls through to libseccomp's
// program (which starts with its own architecture check). Arguments are
// compared as two 32-bit words, as the kernel's seccomp_data holds them.
func overridePrefix(p *Policy, idx []int) ([]byte, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	arch, ok := nativeAuditArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("seccomp policy: overriding rules are not supported on %s", runtime.GOARCH)
	}
	type insn struct {
		code   uint16
		jt, jf uint8
		k      uint32
		toMain bool // jf (or jt for jge) jumps to the main program; fixed up below
		toNext bool // jf jumps to the next rule
	}
	const (
		ldAbs = 0x20 // BPF_LD|BPF_W|BPF_ABS
		jeqK  = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
		jgeK  = 0x35 // BPF_JMP|BPF_JGE|BPF_K
		andK  = 0x54 // BPF_ALU|BPF_AND|BPF_K
		retK  = 0x06
	)
	prog := []insn{
		{code: ldAbs, k: 4},                          // A = seccomp_data.arch
		{code: jeqK, k: arch, toMain: true},          // another ABI: libseccomp's checks
		{code: ldAbs, k: 0},                          // A = seccomp_data.nr
		{code: jgeK, k: x32SyscallBit, toMain: true}, // x32: libseccomp's checks
	}
	var rules [][]insn
	for _, i := range idx {
		r := p.Rules[i]
		act, err := scmpAction(r.Action, r.Errno)
		if err != nil {
			return nil, err
		}
		ret := retValue(act, r.Errno)
		for _, name := range r.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				return nil, fmt.Errorf("seccomp policy: rules[%d]: unknown syscall %q", i, name)
			}
			if call < 0 { // not a syscall of this architecture
				continue
			}
			rule := []insn{{code: ldAbs, k: 0}, {code: jeqK, k: uint32(call), toNext: true}}
			for _, a := range r.Args {
				mask := ^uint64(0)
				switch a.Op {
				case OpEq:
				case OpMaskedEq:
					mask = uint64(a.Mask)
				default:
					return nil, fmt.Errorf("seccomp policy: rules[%d] overrides another rule for %s and may only use eq and masked_eq, not %s", i, name, a.Op)
				}
				for half, off := range []uint32{16 + 8*uint32(a.Index), 20 + 8*uint32(a.Index)} {
					m, v := uint32(mask>>(32*half)), uint32(uint64(a.Value)>>(32*half))
					if m == 0 {
						continue
					}
					rule = append(rule, insn{code: ldAbs, k: off})
					if m != ^uint32(0) {
						rule = append(rule, insn{code: andK, k: m})
					}
					rule = append(rule, insn{code: jeqK, k: v & m, toNext: true})
				}
			}
			rules = append(rules, append(rule, insn{code: retK, k: ret}))
		}
	}
	for _, r := range rules {
		prog = append(prog, r...)
	}
	if len(prog) > 255 {
		return nil, fmt.Errorf("seccomp policy: overriding rules need %d instructions, more than 255", len(prog))
	}
	// Fix up the jumps: conditional jumps are relative and at most 255.
	out := make([]byte, 0, 8*len(prog))
	pos, next := 0, 0
	for _, r := range append([][]insn{prog[:4]}, rules...) {
		next += len(r)
		for j, in := range r {
			at := pos + j
			switch {
			case in.toMain && in.code == jgeK:
				in.jt = uint8(len(prog) - at - 1)
			case in.toMain:
				in.jf = uint8(len(prog) - at - 1)
			case in.toNext:
				in.jf = uint8(next - at - 1)
			}
			out = binary.NativeEndian.AppendUint16(out, in.code)
			out = append(out, in.jt, in.jf)
			out = binary.NativeEndian.AppendUint32(out, in.k)
		}
		pos = next
	}
	return out, nil
}

// nativeAuditArch is seccomp_data.arch of the native ABI.
var nativeAuditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64,
	"riscv64": unix.AUDIT_ARCH_RISCV64, "ppc64le": unix.AUDIT_ARCH_PPC64LE, "s390x": unix.AUDIT_ARCH_S390X,
}

// retValue is the SECCOMP_RET_* value of a libseccomp action.
func retValue(a libseccomp.ScmpAction, errno string) uint32 {
	switch a & 0xffff {
	case libseccomp.ActAllow:
		return RetAllow
	case libseccomp.ActKillProcess:
		return RetKillProcess
	case libseccomp.ActTrap:
		return RetTrap
	case libseccomp.ActLog:
		return RetLog
	}
	return RetErrno | uint32(errnoOf(errno))
}

var scmpOps = map[Op]libseccomp.ScmpCompareOp{
	OpEq: libseccomp.CompareEqual, OpNe: libseccomp.CompareNotEqual,
	OpLt: libseccomp.CompareLess, OpLe: libseccomp.CompareLessOrEqual,
	OpGt: libseccomp.CompareGreater, OpGe: libseccomp.CompareGreaterEqual,
}

func scmpAction(a Action, errno string) (libseccomp.ScmpAction, error) {
	switch a {
	case ActAllow:
		return libseccomp.ActAllow, nil
	case ActErrno:
		return libseccomp.ActErrno.SetReturnCode(int16(errnoOf(errno))), nil
	case ActKill:
		return libseccomp.ActKillProcess, nil
	case ActTrap:
		return libseccomp.ActTrap, nil
	case ActLog:
		return libseccomp.ActLog, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("seccomp policy: unknown action %q", a)
}

// exportBPF returns the filter's program (seccomp_export_bpf into a memfd:
// libseccomp 2.5 has no export to memory).
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("jail-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "jail-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("seccomp_export_bpf: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(file)
}

// SyscallName names syscall nr of the ABI with audit arch value arch (as
// in seccomp_data), e.g. "ptrace" or "x86:ptrace" for another ABI than
// the native one; "nr 1234" when libseccomp does not know it.
func SyscallName(arch uint32, nr int32) string {
	a, x32 := auditArch(arch, nr)
	if x32 {
		nr &^= x32SyscallBit
	}
	name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(a)
	if err != nil || name == "" {
		name = fmt.Sprintf("nr %d", nr)
	}
	if native, _ := libseccomp.GetNativeArch(); a != native {
		name = a.String() + ":" + name
	}
	return name
}

// x32SyscallBit marks x32 syscalls, which carry AUDIT_ARCH_X86_64.
const x32SyscallBit = 0x40000000

func auditArch(arch uint32, nr int32) (libseccomp.ScmpArch, bool) {
	switch arch {
	case unix.AUDIT_ARCH_X86_64:
		if nr&x32SyscallBit != 0 {
			return libseccomp.ArchX32, true
		}
		return libseccomp.ArchAMD64, false
	case unix.AUDIT_ARCH_I386:
		return libseccomp.ArchX86, false
	case unix.AUDIT_ARCH_AARCH64:
		return libseccomp.ArchARM64, false
	case unix.AUDIT_ARCH_ARM:
		return libseccomp.ArchARM, false
	}
	return libseccomp.ArchInvalid, false
}

// SyscallNumber returns the native number of syscall name.
func SyscallNumber(name string) (int32, error) {
	call, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		return 0, fmt.Errorf("unknown syscall %q", name)
	}
	return int32(call), nil
}
