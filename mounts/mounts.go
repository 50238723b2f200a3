package mounts

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Type is the kind of a caller-requested mount.
type Type string

// Mount types.
const (
	Bind   Type = "bind"    // read-write bind of a host path
	ROBind Type = "ro-bind" // read-only bind of a host path
	Tmpfs  Type = "tmpfs"   // a fresh tmpfs
)

// Mount is one mount a caller adds to the jail.
type Mount struct {
	// Type is bind, ro-bind or tmpfs.
	Type Type `json:"type"`
	// Source is the host path of a bind; empty for tmpfs.
	Source string `json:"source,omitempty"`
	// Target is the absolute path inside the jail.
	Target string `json:"target"`
	// SizeBytes limits a tmpfs; 0 means the default of 64 MiB.
	SizeBytes int64 `json:"size_bytes,omitempty"`
}

// DefaultTmpfsBytes is the size of a tmpfs whose SizeBytes is 0.
const DefaultTmpfsBytes = 64 << 20

// MaxTmpfsBytes bounds a tmpfs size; more is taken for a typo.
const MaxTmpfsBytes = 1 << 40

// Parse parses a command-line mount: "SRC[:DST]" for binds (DST defaults to
// SRC) and "DST[:size=SIZE]" for tmpfs. It checks syntax only; see [Check].
func Parse(t Type, unsafeArg string) (Mount, error) {
	if unsafeArg == "" {
		return Mount{}, errors.New("empty mount")
	}
	switch t {
	case Bind, ROBind:
		src, dst, ok := strings.Cut(unsafeArg, ":")
		if !ok {
			dst = src
		}
		return Mount{Type: t, Source: src, Target: dst}, nil
	case Tmpfs:
		dst, opts, ok := strings.Cut(unsafeArg, ":")
		m := Mount{Type: Tmpfs, Target: dst}
		if !ok {
			return m, nil
		}
		for _, o := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(o, "=")
			if k != "size" {
				return Mount{}, fmt.Errorf("tmpfs option %q: only size=SIZE is supported", o)
			}
			n, err := ParseSize(v)
			if err != nil {
				return Mount{}, fmt.Errorf("tmpfs size %q: %w", v, err)
			}
			m.SizeBytes = n
		}
		return m, nil
	}
	return Mount{}, fmt.Errorf("unknown mount type %q", t)
}

// ParseSize parses a byte size: a number with an optional K, M, G or T
// suffix (powers of 1024, an optional trailing "i" or "iB" or "B").
func ParseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimSuffix(strings.TrimSuffix(u, "B"), "I")
	shift := 0
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			u = u[:n-1]
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a size: want a number with an optional K, M, G or T suffix")
	}
	if n > (1<<62)>>shift {
		return 0, errors.New("size too large")
	}
	return n << shift, nil
}

// CheckTarget checks that a jail path is absolute and clean: no "..", no
// ".", no repeated or trailing slashes.
func CheckTarget(unsafePath string) error {
	if !strings.HasPrefix(unsafePath, "/") {
		return errors.New("must be an absolute path")
	}
	for _, c := range strings.Split(unsafePath[1:], "/") {
		if c == ".." {
			return errors.New("must not contain \"..\"")
		}
	}
	if strings.IndexByte(unsafePath, 0) >= 0 {
		return errors.New("must not contain a NUL byte")
	}
	if filepath.Clean(unsafePath) != unsafePath {
		return fmt.Errorf("must be clean (%s)", filepath.Clean(unsafePath))
	}
	return nil
}

// sensitive are host paths a jail must not see unless the caller says so.
// A source is refused if it is one of them or lies below one; the host's
// /etc, /home and / are refused only as a whole (a single file of /etc is
// fine).
var (
	sensitiveTrees = []string{"/proc", "/sys", "/dev", "/boot", "/run", "/var/run/docker.sock",
		"/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/kubernetes", "/etc/sudoers", "/etc/sudoers.d",
		"/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet"}
	sensitiveExact = []string{"/", "/etc", "/home"}
)

// Credentials are the names of a user's secrets in a home directory: a
// source is sensitive when one of them is in its path (~/.ssh/id_ed25519,
// /home/a/.aws) or, for a directory, right inside it (a home directory:
// see [Table.Exposes]'s callers).
var Credentials = []string{".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc",
	".git-credentials", ".pgpass", ".password-store", ".config/gcloud", ".config/gh"}

// IsSensitive reports whether hostPath (absolute, symlinks resolved) is a
// sensitive source, and names the rule.
func IsSensitive(hostPath string) (string, bool) {
	for _, e := range sensitiveExact {
		if hostPath == e {
			return e, true
		}
	}
	for _, t := range sensitiveTrees {
		if hostPath == t || strings.HasPrefix(hostPath, t+"/") {
			return t, true
		}
	}
	for _, c := range Credentials {
		i := strings.Index(hostPath+"/", "/"+c+"/")
		if i >= 0 {
			return hostPath[:i+1+len(c)], true
		}
	}
	return "", false
}

// Error is a problem with one field of one mount.
type Error struct {
	Field string // "source", "target" or "size_bytes"
	Value string
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %q: %v", e.Field, e.Value, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Check validates m without looking at the host: a known type, a clean
// absolute target, a size only for a tmpfs, a source only for a bind. The
// source is opened and checked on the host by [OpenSource].
func Check(m Mount) (Mount, error) {
	if err := CheckTarget(m.Target); err != nil {
		return m, &Error{"target", m.Target, err}
	}
	switch m.Type {
	case Tmpfs:
		if m.Source != "" {
			return m, &Error{"source", m.Source, errors.New("a tmpfs has no source")}
		}
		if m.SizeBytes < 0 || m.SizeBytes > MaxTmpfsBytes {
			return m, &Error{"size_bytes", strconv.FormatInt(m.SizeBytes, 10), errors.New("must be between 0 and 1 TiB")}
		}
		return m, nil
	case Bind, ROBind:
	default:
		return m, &Error{"type", string(m.Type), errors.New("must be bind, ro-bind or tmpfs")}
	}
	if m.SizeBytes != 0 {
		return m, &Error{"size_bytes", strconv.FormatInt(m.SizeBytes, 10), errors.New("only a tmpfs has a size")}
	}
	if m.Source == "" {
		return m, &Error{"source", m.Source, errors.New("a bind needs a source")}
	}
	if strings.IndexByte(m.Source, 0) >= 0 {
		return m, &Error{"source", m.Source, errors.New("must not contain a NUL byte")}
	}
	return m, nil
}
