//go:build !linux

package seccomp

// ProbeWaitKillable reports false off Linux.
func ProbeWaitKillable() bool { return false }
