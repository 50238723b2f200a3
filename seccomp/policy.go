package seccomp

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// Action is what the kernel does with a syscall.
type Action string

// Actions a policy may use.
const (
	// ActAllow runs the syscall.
	ActAllow Action = "allow"
	// ActErrno fails the syscall with an errno (Rule.Errno, or EPERM).
	ActErrno Action = "errno"
	// ActKill kills the calling process; the report names the syscall.
	ActKill Action = "kill"
	// ActTrap sends SIGSYS to the calling thread (SECCOMP_RET_TRAP), which
	// may handle it; the syscall does not run.
	ActTrap Action = "trap"
	// ActLog runs the syscall and has the kernel log it to the audit log
	// (SECCOMP_RET_LOG).
	ActLog Action = "log"
)

var actions = []Action{ActAllow, ActErrno, ActKill, ActTrap, ActLog}

// Policy is a seccomp policy: data that loads from YAML or JSON.
type Policy struct {
	// Name is the policy's name ("default", "strict", or the file's).
	Name string `json:"name,omitempty"`
	// Description is one line for `jail seccomp list`.
	Description string `json:"description,omitempty"`
	// DefaultAction applies to every syscall no rule matches.
	DefaultAction Action `json:"default_action"`
	// DefaultErrno is the errno of an "errno" DefaultAction (default EPERM).
	DefaultErrno string `json:"default_errno,omitempty"`
	// Architectures are the syscall ABIs the policy allows, as libseccomp
	// names them ("x86_64", "x86", "x32", "aarch64"); empty means the
	// native one only. Every syscall of any other ABI kills the process.
	Architectures []string `json:"architectures,omitempty"`
	// Rules are checked by libseccomp in the order it chooses; a syscall
	// should appear in rules of one action only, except that rules with
	// argument conditions may refine another action's rule.
	Rules []Rule `json:"rules"`
}

// Rule gives the syscalls in Names an action, when every condition in Args
// holds.
type Rule struct {
	Names  []string `json:"names"`
	Action Action   `json:"action"`
	// Errno is the errno name for ActErrno ("EPERM", "ENOSYS"); default EPERM.
	Errno string `json:"errno,omitempty"`
	// Args are conditions on the syscall's arguments, all of which must hold.
	Args []Arg `json:"args,omitempty"`
	// Comment says why the rule exists.
	Comment string `json:"comment,omitempty"`
}

// Op is a comparison of a syscall argument.
type Op string

// Comparisons, as libseccomp's SCMP_CMP_*. All compare the full 64-bit
// register: an argument the kernel truncates to 32 bits (ioctl's request,
// socket's family) needs MaskedEq with a 0xffffffff mask in a deny rule,
// or a caller sets the high bits to slip past it.
const (
	OpEq       Op = "eq"
	OpNe       Op = "ne"
	OpLt       Op = "lt"
	OpLe       Op = "le"
	OpGt       Op = "gt"
	OpGe       Op = "ge"
	OpMaskedEq Op = "masked_eq" // arg & Mask == Value
)

var ops = []Op{OpEq, OpNe, OpLt, OpLe, OpGt, OpGe, OpMaskedEq}

// Arg is a condition on argument Index (0-5).
type Arg struct {
	Index uint  `json:"index"`
	Op    Op    `json:"op"`
	Value Value `json:"value"`
	// Mask is the mask of a masked_eq condition.
	Mask Value `json:"mask,omitempty"`
}

// Value is a syscall argument value. In YAML and JSON it is a number or a
// string of constants and numbers joined by "|", e.g. "CLONE_NEWUSER|CLONE_NEWNS"
// or "0x5412"; see [Constants].
type Value uint64

// UnmarshalJSON accepts a number or a "|"-joined expression.
func (v *Value) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		x, err := ParseValue(s)
		*v = x
		return err
	}
	var f json.Number
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("value %s: want a number or a string of constants", b)
	}
	x, err := strconv.ParseUint(f.String(), 0, 64)
	if err != nil {
		// YAML turns big numbers into floats; refuse rather than round.
		return fmt.Errorf("value %s: not an unsigned 64-bit integer", b)
	}
	*v = Value(x)
	return nil
}

// ParseValue evaluates "A|B|0x10": constants from [Constants] and numbers
// in Go syntax, ORed together.
func ParseValue(s string) (Value, error) {
	var v uint64
	if strings.TrimSpace(s) == "" {
		return 0, fmt.Errorf("value %q is empty", s)
	}
	for part := range strings.SplitSeq(s, "|") {
		part = strings.TrimSpace(part)
		if c, ok := Constants[part]; ok {
			v |= c
			continue
		}
		n, err := strconv.ParseUint(part, 0, 64)
		if err != nil {
			return 0, fmt.Errorf("value %q: %q is neither a number nor a known constant", s, part)
		}
		v |= n
	}
	return Value(v), nil
}

// Parse loads a policy from YAML or JSON, refusing unknown fields, and
// checks its structure (see [Policy.Validate]).
func Parse(data []byte) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks what can be checked without libseccomp: actions,
// errnos, operators, argument indexes. [Compile] also checks syscall and
// architecture names against libseccomp's tables.
func (p *Policy) Validate() error {
	if err := checkAction("default_action", p.DefaultAction, p.DefaultErrno); err != nil {
		return err
	}
	if len(p.Rules) > 4096 {
		return fmt.Errorf("seccomp policy: %d rules, more than 4096", len(p.Rules))
	}
	for i, r := range p.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if len(r.Names) == 0 {
			return fmt.Errorf("seccomp policy: %s: no syscall names", field)
		}
		for _, n := range r.Names {
			if n == "" || strings.ContainsFunc(n, func(c rune) bool { return !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') }) {
				return fmt.Errorf("seccomp policy: %s: syscall name %q is not a syscall name", field, n)
			}
		}
		if err := checkAction(field+".action", r.Action, r.Errno); err != nil {
			return err
		}
		if len(r.Args) > 6 {
			return fmt.Errorf("seccomp policy: %s: %d argument conditions, at most 6", field, len(r.Args))
		}
		seen := map[uint]bool{}
		for j, a := range r.Args {
			af := fmt.Sprintf("%s.args[%d]", field, j)
			if a.Index > 5 {
				return fmt.Errorf("seccomp policy: %s: index %d, want 0-5", af, a.Index)
			}
			if seen[a.Index] {
				// libseccomp cannot AND two comparisons of one argument.
				return fmt.Errorf("seccomp policy: %s: a second condition on argument %d (write another rule)", af, a.Index)
			}
			seen[a.Index] = true
			if !slices.Contains(ops, a.Op) {
				return fmt.Errorf("seccomp policy: %s: unknown op %q (want one of %s)", af, a.Op, joinOps())
			}
			if a.Op != OpMaskedEq && a.Mask != 0 {
				return fmt.Errorf("seccomp policy: %s: mask is only for masked_eq", af)
			}
		}
	}
	return nil
}

func checkAction(field string, a Action, errno string) error {
	if !slices.Contains(actions, a) {
		names := make([]string, len(actions))
		for i, a := range actions {
			names[i] = string(a)
		}
		return fmt.Errorf("seccomp policy: %s: unknown action %q (want one of %s)", field, a, strings.Join(names, ", "))
	}
	if errno != "" && a != ActErrno {
		return fmt.Errorf("seccomp policy: %s: errno %s given for action %q", field, errno, a)
	}
	if errno != "" {
		if _, err := ParseErrno(errno); err != nil {
			return fmt.Errorf("seccomp policy: %s: %w", field, err)
		}
	}
	return nil
}

func joinOps() string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// ParseErrno returns the number of an errno name ("EPERM") or decimal
// number (1-4095).
func ParseErrno(s string) (unix.Errno, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 4095 {
			return 0, fmt.Errorf("errno %d is out of range 1-4095", n)
		}
		return unix.Errno(n), nil
	}
	if e, ok := errnoByName()[s]; ok {
		return e, nil
	}
	return 0, fmt.Errorf("unknown errno %q", s)
}

// errnoByName maps "EPERM" to its number, from x/sys's table.
var errnoByName = sync.OnceValue(func() map[string]unix.Errno {
	m := map[string]unix.Errno{}
	for e := unix.Errno(1); e < 4096; e++ {
		if n := unix.ErrnoName(e); n != "" {
			m[n] = e
		}
	}
	return m
})

// errnoOf is the errno an errno action returns: EPERM unless named.
func errnoOf(s string) unix.Errno {
	if s == "" {
		return unix.EPERM
	}
	e, _ := ParseErrno(s)
	return e
}

// ErrnoName names an errno ("EPERM"), or gives its number.
func ErrnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}

// MaxUint32 is the mask for an argument the kernel reads as 32 bits.
const MaxUint32 = math.MaxUint32

// OverridingRules returns the indexes of conditional rules that libseccomp
// cannot express, so that jail compiles them into a prefix of its own and
// an OCI runtime (which hands the policy to libseccomp) does not have them: those whose syscall also has an unconditional rule with
// another action (libseccomp lets the unconditional rule win, so "allow
// ioctl, but not TIOCSTI" would allow TIOCSTI), and those whose action is
// the default action (libseccomp refuses them).
func (p *Policy) OverridingRules() []int {
	unconditional := map[string]Action{}
	for _, r := range p.Rules {
		if len(r.Args) == 0 {
			for _, n := range r.Names {
				unconditional[n] = r.Action
			}
		}
	}
	var idx []int
	for i, r := range p.Rules {
		if len(r.Args) == 0 {
			continue
		}
		if r.Action == p.DefaultAction && r.Errno == p.DefaultErrno {
			idx = append(idx, i)
			continue
		}
		for _, n := range r.Names {
			if a, ok := unconditional[n]; ok && a != r.Action {
				idx = append(idx, i)
				break
			}
		}
	}
	return idx
}
