package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// Options change how a policy is compiled.
type Options struct {
	// Log sends every denied call (errno actions too) to the jail's PID 1,
	// which records it and answers with the policy's errno; without it,
	// only kills reach PID 1 and errnos are returned by the kernel alone.
	Log bool `json:"log,omitempty"`
}

// Return values of a seccomp program (SECCOMP_RET_* in linux/seccomp.h).
const (
	RetKillProcess uint32 = 0x80000000
	RetKillThread  uint32 = 0x00000000
	RetTrap        uint32 = 0x00030000
	RetErrno       uint32 = 0x00050000
	RetUserNotif   uint32 = 0x7fc00000
	RetTrace       uint32 = 0x7ff00000
	RetLog         uint32 = 0x7ffc0000
	RetAllow       uint32 = 0x7fff0000
	RetActionFull  uint32 = 0xffff0000
	RetData        uint32 = 0x0000ffff
)

// Classic BPF opcodes that matter here.
const (
	bpfRetK  = 0x06 // BPF_RET | BPF_K
	insnSize = 8    // struct sock_filter
	maxInsns = 4096 // BPF_MAXINSNS
)

// Program is a compiled policy, ready for the child stage.
type Program struct {
	// Policy is the policy's name.
	Policy string
	// Filter is the program the workload loads (struct sock_filter[],
	// native endian): the policy's own, with every kill (and, with
	// Options.Log, every errno) turned into SECCOMP_RET_USER_NOTIF.
	Filter []byte
	// Rules is the policy's program as libseccomp built it. With
	// Options.Log the jail's PID 1 runs it on each notification to find
	// the errno to answer with; it is nil otherwise.
	Rules []byte
	// Notify says whether Filter can return SECCOMP_RET_USER_NOTIF, so the
	// workload must load it with a listener for PID 1.
	Notify bool
}

// Instructions is the length of the filter in BPF instructions.
func (p *Program) Instructions() int { return len(p.Filter) / insnSize }

// newProgram derives the loaded filter from the policy's program.
func newProgram(name string, rules []byte, o Options) (*Program, error) {
	if len(rules) == 0 || len(rules)%insnSize != 0 || len(rules)/insnSize > maxInsns {
		return nil, fmt.Errorf("seccomp: libseccomp returned a program of %d bytes", len(rules))
	}
	filter := append([]byte(nil), rules...)
	notify := false
	for off := 0; off < len(filter); off += insnSize {
		code := binary.NativeEndian.Uint16(filter[off:])
		if code&0x07 != 0x06 { // BPF_CLASS(code) != BPF_RET
			continue
		}
		if code != bpfRetK {
			return nil, fmt.Errorf("seccomp: instruction %d returns the accumulator; cannot rewrite its action", off/insnSize)
		}
		k := binary.NativeEndian.Uint32(filter[off+4:])
		switch action := k & RetActionFull; {
		case action == RetKillProcess || action == RetKillThread,
			o.Log && action == RetErrno:
			binary.NativeEndian.PutUint32(filter[off+4:], RetUserNotif)
			notify = true
		}
	}
	p := &Program{Policy: name, Filter: filter, Notify: notify}
	if o.Log {
		p.Rules = rules
	}
	return p, nil
}

// Verdict runs the loaded filter on a native syscall nr with args, as the
// kernel would, and returns its SECCOMP_RET_* value.
func (p *Program) Verdict(arch uint32, nr int32, args ...uint64) (uint32, error) {
	return Eval(p.Filter, arch, nr, args...)
}

// Eval interprets a seccomp program (struct sock_filter[], native endian)
// with x/net/bpf, as the kernel would run it on a syscall nr of ABI arch
// (an AUDIT_ARCH_* value) with args. x/net/bpf's loads are big
// endian, so each 32-bit word of seccomp_data is stored big endian at the
// offset where the kernel's native-endian struct has it.
func Eval(prog []byte, arch uint32, nr int32, args ...uint64) (uint32, error) {
	vm, err := newVM(prog)
	if err != nil {
		return 0, err
	}
	return run(vm, arch, nr, args...)
}

// newVM loads a seccomp program into x/net/bpf's VM.
func newVM(prog []byte) (*bpf.VM, error) {
	raw := make([]bpf.RawInstruction, len(prog)/insnSize)
	for i := range raw {
		b := prog[insnSize*i:]
		raw[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, fmt.Errorf("seccomp: program has instructions x/net/bpf does not know")
	}
	return bpf.NewVM(insns)
}

// run runs vm on a seccomp_data built as [Eval] describes.
func run(vm *bpf.VM, arch uint32, nr int32, args ...uint64) (uint32, error) {
	data := make([]byte, 64) // struct seccomp_data
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	ret, err := vm.Run(data)
	return uint32(ret), err
}
