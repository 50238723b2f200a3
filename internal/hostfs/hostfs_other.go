//go:build !linux

package hostfs

import (
	"io"
	"os"
)

// OpenInput opens an input file; off Linux it refuses only a symlink at
// the last component.
func OpenInput(unsafePath string) (*os.File, error) { return openInput(unsafePath, true) }

func openInput(unsafePath string, namedFIFO bool) (*os.File, error) {
	fi, err := os.Lstat(unsafePath)
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && (m&os.ModeNamedPipe == 0 || !namedFIFO) {
		return nil, &TypeError{Path: unsafePath, Kind: kind(m), Want: wantInput(namedFIFO)}
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

// WriteFrom writes what r yields to the file.
func (o *Output) WriteFrom(r io.Reader, perm uint32) (int64, error) {
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(perm))
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// Close does nothing.
func (o *Output) Close() error { return nil }
