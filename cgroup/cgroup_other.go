//go:build !linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
)

// errNotLinux is returned by everything on other systems.
var errNotLinux = fmt.Errorf("cgroup: %s has no cgroups: %w", runtime.GOOS, errors.ErrUnsupported)

// Probe reports that there are no cgroups.
func Probe() Support { return Support{Err: errNotLinux} }

// New returns an error matching [errors.ErrUnsupported].
func New(Limits, Options) (*Group, error) { return nil, errNotLinux }

// Prune returns an error matching [errors.ErrUnsupported].
func Prune(Options) ([]string, error) { return nil, errNotLinux }

// DestroyNamed returns an error matching [errors.ErrUnsupported].
func DestroyNamed(Options, string) ([]string, error) { return nil, errNotLinux }

// PruneEmpty returns an error matching [errors.ErrUnsupported].
func PruneEmpty(Options, string, time.Duration) ([]string, error) { return nil, errNotLinux }

// FD returns -1.
func (g *Group) FD() int { return -1 }

// KillFile returns an error matching [errors.ErrUnsupported].
func (g *Group) KillFile() (*os.File, error) { return nil, errNotLinux }

// Attach returns an error matching [errors.ErrUnsupported].
func (g *Group) Attach(int) error { return errNotLinux }

// AttachFiles returns an error matching [errors.ErrUnsupported].
func (g *Group) AttachFiles() ([]*os.File, error) { return nil, errNotLinux }

// Update returns an error matching [errors.ErrUnsupported].
func (g *Group) Update(Limits, Limits) error { return errNotLinux }

// Verify returns an error matching [errors.ErrUnsupported].
func (g *Group) Verify(int) error { return errNotLinux }

// CPUUsage returns an error matching [errors.ErrUnsupported].
func (g *Group) CPUUsage() (time.Duration, error) { return 0, errNotLinux }

// Stats returns an error matching [errors.ErrUnsupported].
func (g *Group) Stats() (Stats, error) { return Stats{}, errNotLinux }

// Destroy does nothing.
func (g *Group) Destroy() error { return nil }

// Kill does nothing off Linux.
func (g *Group) Kill() error { return nil }

// Delegate returns an error matching [errors.ErrUnsupported].
func (g *Group) Delegate() error { return errNotLinux }

// Sub returns an error matching [errors.ErrUnsupported].
func (g *Group) Sub(string) (*Group, error) { return nil, errNotLinux }

// DirState is one directory of a group.
type DirState struct{}

// State returns nil.
func (g *Group) State() []DirState { return nil }

// Load returns an error matching [errors.ErrUnsupported].
func Load([]DirState, string) (*Group, error) { return nil, errNotLinux }

// Close does nothing.
func (g *Group) Close() {}

// Freeze returns an error matching [errors.ErrUnsupported].
func (g *Group) Freeze() error { return errNotLinux }

// Thaw returns an error matching [errors.ErrUnsupported].
func (g *Group) Thaw() error { return errNotLinux }

// Procs returns an error matching [errors.ErrUnsupported].
func (g *Group) Procs() ([]int, error) { return nil, errNotLinux }

// ChildName returns an error matching [errors.ErrUnsupported].
func ChildName(string) (string, error) { return "", errNotLinux }

// ChildNames returns an error off Linux.
func (g *Group) ChildNames() ([]string, error) { return nil, errNotLinux }

// Child returns an error off Linux.
func (g *Group) Child(string) (*Group, error) { return nil, errNotLinux }

// FreezeChildren returns an error off Linux.
func (g *Group) FreezeChildren(...string) (func() error, error) { return nil, errNotLinux }

// ThawChildren returns an error off Linux.
func (g *Group) ThawChildren() error { return errNotLinux }

// Begin returns an error matching [errors.ErrUnsupported].
func Begin(Limits, Options) (*Group, error) { return nil, errNotLinux }

// Pending returns 0.
func (g *Group) Pending() int { return 0 }

// Complete returns an error matching [errors.ErrUnsupported].
func (g *Group) Complete() error { return errNotLinux }

// OpenStats does nothing.
func (g *Group) OpenStats() {}
