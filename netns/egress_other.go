//go:build !linux

package netns

import (
	"errors"
	"net/netip"
)

var errNotLinux = errors.New("egress networks need Linux")

// Lease is a lease index held by this process (Linux only).
type Lease struct{ Index int }

// Acquire reports that leases need Linux.
func Acquire(int) (*Lease, error) { return nil, errNotLinux }

// Release does nothing.
func (*Lease) Release() {}

// Link is an egress jail's network as built (Linux only).
type Link struct{}

// Setup reports that egress networks need Linux.
func Setup(*Egress, *Lease, int) (*Link, error) { return nil, errNotLinux }

// Counters reports that egress networks need Linux.
func (*Link) Counters() (Counters, error) { return Counters{}, errNotLinux }

// Close does nothing.
func (*Link) Close() error { return nil }

// Prune does nothing.
func Prune() ([]string, error) { return nil, nil }

// HostNets reports that egress networks need Linux.
func HostNets() ([]netip.Prefix, error) { return nil, errNotLinux }

// CloseAfterExit does nothing.
func (*Link) CloseAfterExit() error { return nil }

// Detach reports that egress networks need Linux.
func (*Link) Detach(int, uint64) (*Egress, error) { return nil, errNotLinux }

// Replace reports that egress networks need Linux.
func Replace(*Egress, int, uint64) error { return errNotLinux }

// ReleaseSession does nothing.
func ReleaseSession(int, int, uint64) error { return nil }

// Abandon does nothing.
func Abandon(*Egress) error { return nil }

// UserStack reports that egress networks need Linux.
func UserStack() (string, error) { return "", errNotLinux }

// UserLink is a user-mode egress jail's network as built (Linux only).
type UserLink struct{}

// Counters reports that egress networks need Linux.
func (*UserLink) Counters() (Counters, error) { return Counters{}, errNotLinux }

// Close does nothing.
func (*UserLink) Close() error { return nil }

// PruneUser does nothing.
func PruneUser() []string { return nil }

// UserGuards reports that egress networks need Linux.
func UserGuards() (host, jails []netip.Prefix, err error) { return nil, nil, errNotLinux }
