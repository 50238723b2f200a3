package jailfs

import "golang.org/x/sys/unix"

// auditArch is the AUDIT_ARCH_* value of each architecture the files
// helper has a filter for.
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}
