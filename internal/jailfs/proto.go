package jailfs

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"syscall"
	"time"
)

// Op is a file operation of the helper.
type Op string

// The operations.
const (
	OpStat   Op = "stat"    // Entry of Path, not following a final symlink
	OpGet    Op = "get"     // the regular file at Path (following symlinks in the jail) to stdout
	OpPut    Op = "put"     // stdin to the regular file at Path, after a Commit
	OpGetTar Op = "get_tar" // the tree at Path as a tar stream to stdout
	OpPutTar Op = "put_tar" // a tar stream on stdin unpacked into the directory Path, then a Commit
	OpList   Op = "list"    // the entries at Path (Depth levels), one JSON Entry per line to stdout
	OpRemove Op = "remove"  // Path (a directory only when empty, or with Recursive)
	OpRename Op = "rename"  // Path to To
	OpStatfs Op = "statfs"  // the file system at Path
)

// MaxPath is the longest path a request may name, as PATH_MAX.
const MaxPath = 4096

// MaxRequest bounds a request or a reply datagram.
const MaxRequest = 64 << 10

// Request is what the parent asks the helper, one datagram on the socket.
type Request struct {
	Op   Op     `json:"op"`
	Path string `json:"path"`
	// To is where OpRename moves Path.
	To string `json:"to,omitempty"`
	// Mode is the permission bits of a file OpPut writes (0: 0644).
	Mode uint32 `json:"mode,omitempty"`
	// Mkdir makes missing directories above Path (OpPut) or Path itself
	// and above (OpPutTar), mode 0755.
	Mkdir bool `json:"mkdir,omitempty"`
	// Into, for OpPut and OpPutTar: when Path is an existing directory
	// (a symlink to one included), write Path/Into instead, as cp does
	// (one round trip instead of a stat first). A single name.
	Into string `json:"into,omitempty"`
	// Recursive lets OpRemove remove a directory and everything in it.
	Recursive bool `json:"recursive,omitempty"`
	// Clear empties the directory Path before OpPutTar unpacks into it,
	// and KeepLinks makes its symlinks as they are, wherever they point:
	// a snapshot of the jail's own files put back (ExtractOptions).
	Clear     bool `json:"clear,omitempty"`
	KeepLinks bool `json:"keep_links,omitempty"`
	// Depth is how many levels of directories OpList descends below Path:
	// 1 lists Path's own entries; 0 or less, every level.
	Depth int `json:"depth,omitempty"`
	// Layers are the jail paths of an overlay workspace's overlays
	// ("/usr"...). With them, OpGetTar archives the upper layer of each
	// (Path is the directory that holds them, by jail path: Path/usr for
	// /usr) as one OCI image layer ([Root.ArchiveLayers]). OpPutTar
	// refuses them: a snapshot's layer becomes a session's lower layer,
	// from the host ([BuildLayerTree]).
	Layers []string `json:"layers,omitempty"`
}

// Commit is the parent's second datagram of OpPut and OpPutTar, sent once
// it has written all of stdin: Bytes must be what the helper read, or the
// write is undone. Abort undoes it whatever was read.
type Commit struct {
	Bytes int64 `json:"bytes"`
	Abort bool  `json:"abort,omitempty"`
}

// Reply is the helper's answer, one datagram, after the data.
type Reply struct {
	Error *Error `json:"error,omitempty"`
	// Entry is what OpStat found, and the file OpGet read.
	Entry *Entry `json:"entry,omitempty"`
	// Bytes is what the operation read from stdin or wrote to stdout.
	Bytes int64 `json:"bytes"`
	// Entries counts OpList's lines and the tar entries of OpGetTar and
	// OpPutTar.
	Entries int64 `json:"entries,omitempty"`
	// Skipped names what OpGetTar did not archive: FIFOs, sockets and
	// device nodes.
	Skipped []string `json:"skipped,omitempty"`
	// Statfs is OpStatfs's answer.
	Statfs *Statfs `json:"statfs,omitempty"`
}

// Error is a failed operation: the system call's errno and the jail path
// it was about.
type Error struct {
	// Op is the system call or step, e.g. "open", "tar entry".
	Op string `json:"op"`
	// Path is the jail path (or tar entry name) it was about.
	Path string `json:"path"`
	// Errno is the error number, 0 when the failure is not one.
	Errno syscall.Errno `json:"errno"`
	// Message says what happened.
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Op + ": " + e.Message
	}
	return e.Op + " " + e.Path + ": " + e.Message
}

// Unwrap returns the errno, so that errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, unix.ENOSPC) work.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// newError makes an *Error of err (an errno, or any error) for op on p.
func newError(op, p string, err error) *Error {
	var je *Error
	if errors.As(err, &je) {
		return je
	}
	e := &Error{Op: op, Path: p, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = errno
	}
	return e
}

// Entry describes one file of the jail, as `ls -l` would.
type Entry struct {
	// Name is the last element of Path.
	Name string `json:"name"`
	// Path is the file's path in the jail.
	Path string `json:"path"`
	// Type is file, dir, symlink, fifo, socket, char or block.
	Type string `json:"type"`
	// Size is in bytes.
	Size int64 `json:"size"`
	// Mode is the permission bits, with setuid, setgid and sticky.
	Mode uint32 `json:"mode"`
	// ModTime is the last modification.
	ModTime time.Time `json:"mtime"`
	// UID and GID are the owner's ids in the jail.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Target is a symlink's contents.
	Target string `json:"target,omitempty"`
}

// Statfs is what statfs(2) says of the file system holding a path.
type Statfs struct {
	TotalBytes int64 `json:"total_bytes"`
	FreeBytes  int64 `json:"free_bytes"`
	UsedBytes  int64 `json:"used_bytes"`
	Files      int64 `json:"files"`
	FreeFiles  int64 `json:"free_files"`
}

// CleanPath checks a path of the jail from a request and returns it
// cleaned: absolute, at most MaxPath bytes, no NUL. ".." is resolved
// lexically from "/" and cannot climb above it; what a symlink on the
// way means is the kernel's to decide, in the jail.
func CleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("empty path")
	case !strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%q: a path in the jail must be absolute", p)
	case len(p) > MaxPath:
		return "", fmt.Errorf("path longer than %d bytes", MaxPath)
	case strings.IndexByte(p, 0) >= 0:
		return "", errors.New("path with a NUL byte")
	}
	return path.Clean(p), nil
}

// split returns the parent directory and the last element of a cleaned
// path; the last element of "/" is "".
func split(clean string) (dir, base string) {
	if clean == "/" {
		return "/", ""
	}
	i := strings.LastIndexByte(clean, '/')
	if i == 0 {
		return "/", clean[1:]
	}
	return clean[:i], clean[i+1:]
}

// TarName checks the name of a tar entry and returns it cleaned and
// relative to the destination ("" for the destination itself). It refuses
// absolute names and any ".." element: an archive that needs one to say
// where a file goes is refused whole, never guessed at.
func TarName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%q: absolute name", name)
	}
	if strings.IndexByte(name, 0) >= 0 || len(name) > MaxPath {
		return "", fmt.Errorf("%q: not a file name", name)
	}
	for _, e := range strings.Split(name, "/") {
		if e == ".." {
			return "", fmt.Errorf("%q: a \"..\" element", name)
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// LinkStays reports whether a symlink at name (a cleaned TarName) with
// contents target resolves, lexically, beneath the destination: relative,
// and never above it. Whatever the link points to, it is refused unless it
// stays: a later entry written through it could not leave the destination
// anyway (RESOLVE_BENEATH), but a link out would still be left behind for
// the next reader.
func LinkStays(name, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 {
		return false
	}
	c := path.Clean(path.Join(path.Dir(name), target))
	return c != ".." && !strings.HasPrefix(c, "../")
}
