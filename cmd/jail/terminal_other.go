//go:build !linux

package main

import (
	"os"
	"syscall"

	"github.com/jailrt/jail"
)

type terminal struct{ fd int }

func openTerminal(int) *terminal          { return nil }
func (t *terminal) size() jail.WindowSize { return jail.WindowSize{Rows: 24, Cols: 80} }
func (t *terminal) makeRaw() error        { return nil }
func (t *terminal) restore()              {}

var winch os.Signal = syscall.Signal(28)
