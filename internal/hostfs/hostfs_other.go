//go:build !linux

package hostfs

import (
	"fmt"
	"io"
	"os"
)

// ReadFile reads an input file of at most max bytes. Off Linux, where jail
// cannot run jails, it is only used to load profiles and policies, and
// refuses a symlink at the last component only.
func ReadFile(unsafePath string, max int64) ([]byte, error) {
	fi, err := os.Lstat(unsafePath)
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && m&os.ModeNamedPipe == 0 {
		return nil, &TypeError{Path: unsafePath, Kind: kind(m), Want: "a regular file or a pipe"}
	}
	f, err := os.Open(unsafePath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
	}
	return b, nil
}

// OpenInput opens an input file; off Linux it refuses only a symlink at
// the last component.
func OpenInput(unsafePath string) (*os.File, error) {
	fi, err := os.Lstat(unsafePath)
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && m&os.ModeNamedPipe == 0 {
		return nil, &TypeError{Path: unsafePath, Kind: kind(m), Want: "a regular file or a pipe"}
	}
	return os.Open(unsafePath)
}

// Output is a file jail writes once; off Linux, a plain path.
type Output struct{ path string }

// CreateOutput records the path; off Linux nothing is checked.
func CreateOutput(unsafePath string) (*Output, error) { return &Output{path: unsafePath}, nil }

// Write writes the file.
func (o *Output) Write(data []byte, perm uint32) error {
	return os.WriteFile(o.path, data, os.FileMode(perm))
}

// Close does nothing.
func (o *Output) Close() error { return nil }
