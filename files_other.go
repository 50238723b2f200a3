//go:build !linux

package jail

import (
	"context"
	"io"
)

// Stat returns ErrNotSupported.
func (s *Session) Stat(context.Context, string) (*FileInfo, error) { return nil, ErrNotSupported }

// ReadFile returns ErrNotSupported.
func (s *Session) ReadFile(context.Context, string, io.Writer) (int64, error) {
	return 0, ErrNotSupported
}

// WriteFile returns ErrNotSupported.
func (s *Session) WriteFile(context.Context, string, io.Reader, WriteOptions) (int64, error) {
	return 0, ErrNotSupported
}

// ReadDir returns ErrNotSupported.
func (s *Session) ReadDir(context.Context, string, int) ([]FileInfo, error) {
	return nil, ErrNotSupported
}

// RemoveFile returns ErrNotSupported.
func (s *Session) RemoveFile(context.Context, string, bool) error { return ErrNotSupported }

// Rename returns ErrNotSupported.
func (s *Session) Rename(context.Context, string, string) error { return ErrNotSupported }

// PutTar returns ErrNotSupported.
func (s *Session) PutTar(context.Context, string, io.Reader, WriteOptions) (*TarInfo, error) {
	return nil, ErrNotSupported
}

// GetTar returns ErrNotSupported.
func (s *Session) GetTar(context.Context, string, io.Writer) (*TarInfo, error) {
	return nil, ErrNotSupported
}

// ExtractTar returns ErrNotSupported.
func ExtractTar(string, io.Reader) (int64, error) { return 0, ErrNotSupported }

// ArchiveDir returns ErrNotSupported.
func ArchiveDir(string, io.Writer) (*TarInfo, error) { return nil, ErrNotSupported }
