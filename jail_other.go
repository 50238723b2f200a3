//go:build !linux

package jail

import "os"

// NewNetnsPool reports ErrNotSupported: jails need Linux.
func NewNetnsPool(int) (*NetnsPool, error) {
	return nil, &FeatureError{Feature: "netns pool", Reason: "requires Linux"}
}

// Preload does nothing off Linux.
func Preload() {}

// Start reports ErrNotSupported: jails need Linux.
func (c *Cmd) Start() error { return &FeatureError{Feature: "jail", Reason: "requires Linux"} }

// Wait reports ErrNotSupported.
func (c *Cmd) Wait() error { return c.Start() }

// Prepare reports ErrNotSupported.
func (c *Cmd) Prepare() error { return c.Start() }

// Discard does nothing.
func (c *Cmd) Discard() {}

// WorkloadPID is 0: nothing runs here.
func (c *Cmd) WorkloadPID() int { return 0 }

// Signal reports ErrNotSupported.
func (c *Cmd) Signal(os.Signal) error { return c.Start() }

// Resize reports ErrNotSupported.
func (c *Cmd) Resize(WindowSize) error { return c.Start() }

// Warnings has nothing to say off Linux.
func (s *Spec) Warnings() []string { return nil }
