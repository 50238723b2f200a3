//go:build !linux

package jail

import (
	"context"
	"log/slog"
)

// Sessions manages sessions; on this system every operation returns
// ErrNotSupported.
type Sessions struct {
	Dir        string
	HelperPath string
	Logger     *slog.Logger
}

// Session is one session.
type Session struct{ id string }

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// DefaultSessionDir returns ErrNotSupported.
func DefaultSessionDir() (string, error) { return "", ErrNotSupported }

// Create returns ErrNotSupported.
func (m *Sessions) Create(context.Context, SessionSpec) (*Session, error) {
	return nil, ErrNotSupported
}

// Get returns ErrNotSupported.
func (m *Sessions) Get(string) (*Session, error) { return nil, ErrNotSupported }

// List returns ErrNotSupported.
func (m *Sessions) List(map[string]string) ([]*Session, error) { return nil, ErrNotSupported }

// GC returns ErrNotSupported.
func (m *Sessions) GC() ([]string, error) { return nil, ErrNotSupported }

// Command returns a Cmd whose Start returns ErrNotSupported.
func (s *Session) Command(ctx context.Context, name string, args ...string) *Cmd {
	return Command(ctx, Spec{}, name, args...)
}

// Inspect returns ErrNotSupported.
func (s *Session) Inspect() (*SessionInfo, error) { return nil, ErrNotSupported }

// Pause returns ErrNotSupported.
func (s *Session) Pause() error { return ErrNotSupported }

// Resume returns ErrNotSupported.
func (s *Session) Resume() error { return ErrNotSupported }

// Remove returns ErrNotSupported.
func (s *Session) Remove() (int, error) { return 0, ErrNotSupported }
