package jail

import (
	"os"
	"syscall"
	"time"
)

// FileInfo describes a file of a session, as `jail session ls --json`
// prints it: what lstat(2) says inside the jail.
type FileInfo struct {
	// Name is the last element of Path.
	Name string `json:"name"`
	// Path is the file's path in the jail.
	Path string `json:"path"`
	// Type is file, dir, symlink, fifo, socket, char or block.
	Type string `json:"type"`
	// Size is in bytes.
	Size int64 `json:"size"`
	// Mode is the permission bits, with setuid, setgid and sticky.
	Mode os.FileMode `json:"mode"`
	// ModTime is the last modification.
	ModTime time.Time `json:"mtime"`
	// UID and GID are the owner's ids in the jail.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Target is a symlink's contents.
	Target string `json:"target,omitempty"`
}

// WriteOptions shape [Session.WriteFile] and [Session.PutTar].
type WriteOptions struct {
	// Mode is a written file's permission bits (0: 0644); setuid, setgid
	// and sticky are refused.
	Mode os.FileMode
	// Mkdir makes the missing directories above the file (WriteFile), or
	// the destination and above (PutTar), mode 0755.
	Mkdir bool
	// Into, when the path is an existing directory of the session, writes
	// there under this name instead, as cp does: WriteFile of
	// "/workspace" with Into "main.py" writes /workspace/main.py. Empty:
	// the path is the file (WriteFile) or the directory (PutTar) itself.
	Into string
}

// TarInfo is what [Session.PutTar] and [Session.GetTar] moved.
type TarInfo struct {
	// Entries is the number of tar entries.
	Entries int64 `json:"entries"`
	// Bytes is the size of the tar stream.
	Bytes int64 `json:"bytes"`
	// Skipped names what GetTar did not archive: FIFOs, sockets and
	// device nodes.
	Skipped []string `json:"skipped,omitempty"`
}

// FileError is a file operation of a session that the jail refused or
// that failed there. It unwraps to its errno, so errors.Is(err,
// fs.ErrNotExist), errors.Is(err, unix.ENOSPC) and the like work.
type FileError struct {
	// Op is the operation or system call, e.g. "open", "put", "tar entry".
	Op string
	// Path is the path in the jail (or the tar entry's name).
	Path string
	// Errno is the error number; 0 when the failure is not a system
	// call's.
	Errno syscall.Errno
	// Message says what happened.
	Message string
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return e.Op + ": " + e.Message
	}
	return e.Op + " " + e.Path + ": " + e.Message
}

// Unwrap returns the errno, or nil.
func (e *FileError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// UnixMode is m's permission bits with setuid (04000), setgid (02000) and
// sticky (01000), as chmod(1) spells them; [FileModeOf] is its inverse.
func UnixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	for _, b := range specialBits {
		if m&b.flag != 0 {
			u |= b.bit
		}
	}
	return u
}

// FileModeOf is the os.FileMode of the permission bits u (with 04000,
// 02000, 01000 as setuid, setgid, sticky).
func FileModeOf(u uint32) os.FileMode {
	m := os.FileMode(u).Perm()
	for _, b := range specialBits {
		if u&b.bit != 0 {
			m |= b.flag
		}
	}
	return m
}

var specialBits = []struct {
	bit  uint32
	flag os.FileMode
}{{0o4000, os.ModeSetuid}, {0o2000, os.ModeSetgid}, {0o1000, os.ModeSticky}}
