//go:build !linux

package jail

import (
	"context"
	"io"
	"log/slog"
)

// Sessions manages sessions; on this system every operation returns
// ErrNotSupported.
type Sessions struct {
	Dir          string
	SnapshotDir  string
	WorkspaceDir string
	HelperPath   string
	Logger       *slog.Logger
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

// Adopt moves a session of src into m; see the Linux version.
func (m *Sessions) Adopt(*Sessions, string, SessionSpec) (*Session, error) {
	return nil, ErrNotSupported
}

// List returns ErrNotSupported.
func (m *Sessions) List(map[string]string) ([]*Session, error) { return nil, ErrNotSupported }

// GC returns ErrNotSupported.
func (m *Sessions) GC() ([]string, error) { return nil, ErrNotSupported }

// PruneSessionCgroups returns an error wrapping ErrNotSupported.
func PruneSessionCgroups(string) ([]string, error) { return nil, ErrNotSupported }

// Command returns a Cmd whose Start returns ErrNotSupported.
func (s *Session) Command(ctx context.Context, name string, args ...string) *Cmd {
	return Command(ctx, Spec{}, name, args...)
}

// Spec returns the zero Spec.
func (s *Session) Spec() Spec { return Spec{} }

// Inspect returns ErrNotSupported.
func (s *Session) Inspect() (*SessionInfo, error) { return nil, ErrNotSupported }

// Pause returns ErrNotSupported.
func (s *Session) Pause() error { return ErrNotSupported }

// Resume returns ErrNotSupported.
func (s *Session) Resume() error { return ErrNotSupported }

// Remove returns ErrNotSupported.
func (s *Session) Remove() (int, error) { return 0, ErrNotSupported }

// DefaultSnapshotDir returns ErrNotSupported.
func DefaultSnapshotDir() (string, error) { return "", ErrNotSupported }

// Snapshot returns ErrNotSupported.
func (s *Session) Snapshot(context.Context, string) (*SnapshotInfo, error) {
	return nil, ErrNotSupported
}

// Restore returns ErrNotSupported.
func (s *Session) Restore(context.Context, string) error { return ErrNotSupported }

// Fork returns ErrNotSupported.
func (s *Session) Fork(context.Context, int) (*SnapshotInfo, []ForkResult, error) {
	return nil, nil, ErrNotSupported
}

// Snapshots returns ErrNotSupported.
func (m *Sessions) Snapshots() ([]*SnapshotInfo, error) { return nil, ErrNotSupported }

// SnapshotInfo returns ErrNotSupported.
func (m *Sessions) SnapshotInfo(string) (*SnapshotInfo, error) { return nil, ErrNotSupported }

// RemoveSnapshot returns ErrNotSupported.
func (m *Sessions) RemoveSnapshot(string) error { return ErrNotSupported }

// ExportSnapshot returns ErrNotSupported.
func (m *Sessions) ExportSnapshot(string, io.Writer) error { return ErrNotSupported }

// DefaultWorkspaceDir returns ErrNotSupported.
func DefaultWorkspaceDir() (string, error) { return "", ErrNotSupported }

// Touch returns ErrNotSupported.
func (s *Session) Touch() error { return ErrNotSupported }

// Update returns ErrNotSupported.
func (s *Session) Update(SessionUpdate) error { return ErrNotSupported }

// SetAllow returns ErrNotSupported.
func (s *Session) SetAllow([]string) error { return ErrNotSupported }
