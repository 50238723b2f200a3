//go:build linux

package nsexec

// #cgo CFLAGS: -Wall -Wextra -Werror -std=gnu11 -O2
import "C"
