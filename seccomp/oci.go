package seccomp

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

var ociActions = map[Action]specs.LinuxSeccompAction{
	ActAllow: specs.ActAllow, ActErrno: specs.ActErrno, ActKill: specs.ActKillProcess,
	ActTrap: specs.ActTrap, ActLog: specs.ActLog,
}

var ociOps = map[Op]specs.LinuxSeccompOperator{
	OpEq: specs.OpEqualTo, OpNe: specs.OpNotEqual, OpLt: specs.OpLessThan, OpLe: specs.OpLessEqual,
	OpGt: specs.OpGreaterThan, OpGe: specs.OpGreaterEqual, OpMaskedEq: specs.OpMaskedEqual,
}

// OCI returns the policy as a runtime-spec LinuxSeccomp, the form Docker
// (--security-opt seccomp=FILE), Kubernetes (a Localhost seccomp profile)
// and runc take. Kills become SCMP_ACT_KILL_PROCESS: those runtimes report
// them as a SIGSYS death, without the syscall's name.
func (p *Policy) OCI() (*specs.LinuxSeccomp, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s := &specs.LinuxSeccomp{DefaultAction: ociActions[p.DefaultAction]}
	if p.DefaultAction == ActErrno {
		e := uint(errnoOf(p.DefaultErrno))
		s.DefaultErrnoRet = &e
	}
	for _, a := range p.Architectures {
		s.Architectures = append(s.Architectures, specs.Arch("SCMP_ARCH_"+strings.ToUpper(a)))
	}
	for _, r := range p.Rules {
		sc := specs.LinuxSyscall{Names: r.Names, Action: ociActions[r.Action]}
		if r.Action == ActErrno {
			e := uint(errnoOf(r.Errno))
			sc.ErrnoRet = &e
		}
		for _, a := range r.Args {
			arg := specs.LinuxSeccompArg{Index: a.Index, Value: uint64(a.Value), Op: ociOps[a.Op]}
			if a.Op == OpMaskedEq { // runtime-spec: arg & value == valueTwo
				arg.Value, arg.ValueTwo = uint64(a.Mask), uint64(a.Value)
			}
			sc.Args = append(sc.Args, arg)
		}
		s.Syscalls = append(s.Syscalls, sc)
	}
	return s, nil
}

// FromOCI converts a runtime-spec LinuxSeccomp to a policy. It refuses what
// jail does not support: flags, listener paths, and the trace, notify and
// kill-thread actions.
func FromOCI(s *specs.LinuxSeccomp) (*Policy, error) {
	if len(s.Flags) > 0 || s.ListenerPath != "" || s.ListenerMetadata != "" {
		return nil, fmt.Errorf("seccomp: OCI flags and listeners are not supported")
	}
	action := func(a specs.LinuxSeccompAction, errno *uint, field string) (Action, string, error) {
		for k, v := range ociActions {
			if v == a {
				e := ""
				if k == ActErrno && errno != nil {
					e = ErrnoName(unix.Errno(*errno))
				}
				return k, e, nil
			}
		}
		if a == specs.ActKill { // SCMP_ACT_KILL is the older name of kill-thread
			return "", "", fmt.Errorf("seccomp: %s: action %s kills only the thread; use SCMP_ACT_KILL_PROCESS", field, a)
		}
		return "", "", fmt.Errorf("seccomp: %s: action %s is not supported", field, a)
	}
	p := &Policy{}
	var err error
	if p.DefaultAction, p.DefaultErrno, err = action(s.DefaultAction, s.DefaultErrnoRet, "defaultAction"); err != nil {
		return nil, err
	}
	for _, a := range s.Architectures {
		p.Architectures = append(p.Architectures, strings.ToLower(strings.TrimPrefix(string(a), "SCMP_ARCH_")))
	}
	for i, sc := range s.Syscalls {
		r := Rule{Names: sc.Names}
		if r.Action, r.Errno, err = action(sc.Action, sc.ErrnoRet, fmt.Sprintf("syscalls[%d]", i)); err != nil {
			return nil, err
		}
		for _, a := range sc.Args {
			var op Op
			for k, v := range ociOps {
				if v == a.Op {
					op = k
				}
			}
			if op == "" {
				return nil, fmt.Errorf("seccomp: syscalls[%d]: operator %s is not supported", i, a.Op)
			}
			arg := Arg{Index: a.Index, Op: op, Value: Value(a.Value)}
			if op == OpMaskedEq {
				arg.Mask, arg.Value = Value(a.Value), Value(a.ValueTwo)
			}
			r.Args = append(r.Args, arg)
		}
		p.Rules = append(p.Rules, r)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}
