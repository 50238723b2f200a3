//go:build !linux

package nsexec

import "os"

// Child is the host half of a re-exec; there is none off Linux.
type Child struct{}

// Preload does nothing off Linux.
func Preload() {}

// FilesHelper reports false: there is no files helper off Linux.
func FilesHelper() (*os.File, bool) { return nil, false }
