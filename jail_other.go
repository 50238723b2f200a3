//go:build !linux

package jail

import (
	"context"
	"io"
	"log/slog"
	"os"
)

// Cmd runs one command in a jail; on this operating system it only
// reports ErrNotSupported.
type Cmd struct {
	Spec           Spec
	Args           []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Capture        bool
	Logger         *slog.Logger
	HelperPath     string
	Result         *Result
}

// Command returns a Cmd; see the Linux documentation.
func Command(ctx context.Context, spec Spec, name string, args ...string) *Cmd {
	return &Cmd{Spec: spec, Args: append([]string{name}, args...)}
}

func (c *Cmd) Run() error             { return c.Start() }
func (c *Cmd) Start() error           { return &FeatureError{Feature: "jail", Reason: "requires Linux"} }
func (c *Cmd) Wait() error            { return c.Start() }
func (c *Cmd) Signal(os.Signal) error { return c.Start() }
