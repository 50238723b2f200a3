//go:build !linux

package mounts

import (
	"os"
	"path/filepath"
)

// Source is the host side of a bind mount. Off Linux, where no jail can
// run, it only carries the path.
type Source struct {
	File      *os.File
	Path      string
	Dir       bool
	Sensitive string
}

// Close does nothing off Linux.
func (s *Source) Close() error { return nil }

// OpenSource checks nothing off Linux: a Spec can be built and validated
// there, but only a Linux host can judge its host paths.
func OpenSource(unsafePath string, allow func(hostPath string) bool, table func() (Table, error)) (*Source, error) {
	abs, err := filepath.Abs(unsafePath)
	if err != nil {
		return nil, &Error{Field: "source", Value: unsafePath, Err: err}
	}
	return &Source{Path: abs, Dir: true}, nil
}

// ReadTable returns an empty table off Linux.
func ReadTable() (Table, error) { return nil, nil }
