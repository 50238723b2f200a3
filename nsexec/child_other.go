//go:build !linux

package nsexec

// Child is the host half of a re-exec; there is none off Linux.
type Child struct{}
