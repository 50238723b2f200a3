//go:build !linux

package seccomp

import (
	"errors"
	"fmt"
)

var errNotLinux = errors.New("seccomp: filters need Linux and libseccomp")

// Compile returns an error: seccomp filters exist only on Linux.
func Compile(p *Policy, o Options) (*Program, error) { return nil, errNotLinux }

// SyscallName names syscall nr by number only.
func SyscallName(arch uint32, nr int32) string { return fmt.Sprintf("nr %d", nr) }

// SyscallNumber returns an error: the table is libseccomp's.
func SyscallNumber(name string) (int32, error) { return 0, errNotLinux }
