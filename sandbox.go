package jail

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sandbox is what a session offers the program that uses it, the same
// here and far: a [*Session] of this host, and a client.Session of a jail
// serve reached over its HTTP API (package client). Code written against
// it runs commands and moves files in a local session or a remote one
// alike; what only one side has (Session.Command's streaming Cmd, Fork's
// handles, the server's background execs) stays with that side's type.
type Sandbox interface {
	// ID is the session's id.
	ID() string
	// Exec runs argv in the session and waits for it: its Result, output
	// captured, whatever its exit status (a program that cannot be
	// executed included: status setup_error, step execve). An error means
	// it did not run, or its end is not known.
	Exec(ctx context.Context, argv []string, o ExecOptions) (*Result, error)
	// Inspect describes the session.
	Inspect() (*SessionInfo, error)
	// Touch restarts its idle timeout; Pause freezes it, Resume thaws
	// it; Update changes its deadlines, default env and cwd.
	Touch() error
	Pause() error
	Resume() error
	Update(SessionUpdate) error
	// Snapshot keeps the session's files under a new snapshot; Restore
	// puts a snapshot's files back in it.
	Snapshot(ctx context.Context, name string) (*SnapshotInfo, error)
	Restore(ctx context.Context, snapshot string) error
	// Stat, ReadFile, WriteFile, ReadDir and RemoveFile are its files, by
	// their absolute paths in the jail.
	Stat(ctx context.Context, path string) (*FileInfo, error)
	ReadFile(ctx context.Context, path string, w io.Writer) (int64, error)
	WriteFile(ctx context.Context, path string, r io.Reader, o WriteOptions) (int64, error)
	ReadDir(ctx context.Context, path string, depth int) ([]FileInfo, error)
	RemoveFile(ctx context.Context, path string, recursive bool) error
	// Remove ends the session and removes what it has; it returns how
	// many of its processes were killed.
	Remove() (int, error)
}

var _ Sandbox = (*Session)(nil)

// ExecOptions are a command's own settings in a [Sandbox]: what jail
// serve's exec request takes besides the command.
type ExecOptions struct {
	// Env is set over the session's environment, KEY=VALUE each (a key it
	// has already is replaced).
	Env []string
	// Cwd is the working directory; empty: the session's.
	Cwd string
	// Stdin is the command's input; nil: none.
	Stdin io.Reader
	// Timeout bounds the command's wall time; 0: the session's.
	Timeout time.Duration
}

// Exec runs argv in the session as [Sandbox] says: [Session.Command], its
// output captured, the options applied as jail serve applies an exec's.
func (s *Session) Exec(ctx context.Context, argv []string, o ExecOptions) (*Result, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &SpecError{Field: "command", Value: "", Err: errors.New("is empty")}
	}
	for i, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, &SpecError{Field: "env[" + strconv.Itoa(i) + "]", Value: kv, Err: errors.New("want KEY=VALUE")}
		}
	}
	c := s.Command(ctx, argv[0], argv[1:]...)
	c.Capture, c.Stdin = true, o.Stdin
	c.extraEnv = o.Env // over the session's defaults as they are when it starts
	if o.Cwd != "" {
		c.Spec.Cwd = o.Cwd
	}
	if o.Timeout != 0 {
		c.Spec.Timeout = Duration(o.Timeout)
	}
	err := c.Run()
	if ie, ok := errors.AsType[*InitError](err); ok && ie.Step == "execve" && c.Result != nil {
		err = nil // a program that cannot be run is a result, as a shell's 127 is
	}
	return c.Result, err
}

// setEnv sets each KEY=VALUE of kvs in env, replacing a key it has.
func setEnv(env, kvs []string) []string {
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		if i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }); i >= 0 {
			env[i] = kv
		} else {
			env = append(env, kv)
		}
	}
	return env
}
