//go:build !linux || !cgo

package sigpipe

import (
	"os"
	"os/signal"
	"syscall"
)

// Catch is os/signal.Notify off Linux and without cgo.
func Catch(sigs ...syscall.Signal) (<-chan os.Signal, error) {
	ch := make(chan os.Signal, 4)
	for _, s := range sigs {
		signal.Notify(ch, s)
	}
	return ch, nil
}
