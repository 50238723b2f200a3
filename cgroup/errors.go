package cgroup

import (
	"errors"
	"strings"
)

// Unenforced is a limit that was asked for but cannot be enforced on this
// host by this caller.
type Unenforced struct {
	// Limit names the limit: [LimitMemory], [LimitSwap], [LimitPids],
	// [LimitCPUs], [LimitCPUWeight], [LimitIOWeight] or [LimitCPUTime].
	Limit string `json:"limit"`
	// Reason says what is missing, e.g. "cgroup v1 memory directory
	// /sys/fs/cgroup/memory/a is not writable by uid 1000".
	Reason string `json:"reason"`
	// Fix says how to get the limit, e.g. "run as root, or delegate it:
	// chown 1000 /sys/fs/cgroup/memory/a".
	Fix string `json:"fix"`
}

// String returns "limit: reason (fix: ...)".
func (u Unenforced) String() string {
	s := u.Limit + ": " + u.Reason
	if u.Fix != "" {
		s += " (fix: " + u.Fix + ")"
	}
	return s
}

// UnenforcedError is returned by [New] when limits cannot be enforced and
// [Options.AllowUnenforced] is false. Nothing is left behind.
//
// It matches [errors.ErrUnsupported].
type UnenforcedError struct {
	Limits []Unenforced
}

// Error returns one line naming every unenforced limit, why, and how to get it.
func (e *UnenforcedError) Error() string {
	parts := make([]string, len(e.Limits))
	for i, u := range e.Limits {
		parts[i] = u.String()
	}
	return "cgroup: cannot enforce " + strings.Join(parts, "; ")
}

// Is reports whether target is [errors.ErrUnsupported].
func (e *UnenforcedError) Is(target error) bool { return target == errors.ErrUnsupported }

// ErrCannotUpdate is wrapped by Update's error when the group was made
// without a controller the new limits need: a limit can be changed, not
// added to a group whose processes already run.
var ErrCannotUpdate = errors.New("the group was made without this limit's controller")
