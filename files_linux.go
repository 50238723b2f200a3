package jail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/internal/jailfs"
	"github.com/jailrt/jail/nsexec"
)

// The files helper: a re-execution of this program as "jail:files", whose
// C stage joins the session and becomes its workload's user before the Go
// runtime starts; then this init serves the one operation it was started
// for and exits, before the program's main runs. Every program that links
// package jail can therefore serve its own sessions' files, with nothing
// to call (Cmd.HelperPath, when set, must be such a program too).
func init() {
	if sock, ok := nsexec.FilesHelper(); ok {
		os.Exit(jailfs.Serve(sock, os.Stdin, os.Stdout))
	}
}

// filesRlimits are the limits of the workload's that the files helper
// takes: how large a file may grow and how many descriptors it may hold
// apply to what it writes as to what the workload writes. Not the address
// space, data or stack limits, which a Go program's runtime cannot live
// within the way a C workload can, nor nproc (the runtime's threads).
var filesRlimits = map[int]bool{syscall.RLIMIT_FSIZE: true, syscall.RLIMIT_NOFILE: true, syscall.RLIMIT_CORE: true}

// planFiles turns a command's join plan into the files helper's: the
// session's user and mount namespaces only (a thread of a process that
// joined a PID or time namespace for its children could not be made), no
// cgroup namespace, no seccomp filter of the session's (the helper loads
// its own), its Landlock rules, the workload's ids and filesRlimits.
func (l *launch) planFiles() {
	l.plan.JoinNS &= nsexec.CloneNewUser | nsexec.CloneNewNS
	l.plan.Flags &^= nsexec.FlagTimeNS | nsexec.FlagCgroupNS | nsexec.FlagPIDNS | nsexec.FlagSeccompNotify | nsexec.FlagSeccompWaitKillable
	l.plan.Seccomp, l.plan.SeccompRules = nil, nil
	l.proc.Argv, l.proc.Env, l.proc.Path, l.proc.Cwd = []string{nsexec.FilesArg0}, nil, nil, "/"
	l.proc.Flags &^= nsexec.FlagTTY
	var rl []nsexec.Rlimit
	for _, r := range l.proc.Rlimits {
		if filesRlimits[r.Resource] {
			rl = append(rl, r)
		}
	}
	l.proc.Rlimits = rl
}

// releaseFiles is the files helper's GO: its process plan (ids and
// limits), then GO; the request follows on the sync socket.
func (c *Cmd) releaseFiles() error {
	proc, err := c.l.proc.Encode()
	if err != nil {
		return &stepError{"encode plan", err}
	}
	if err := c.child.SendProcess(proc); err != nil {
		return &stepError{"go", c.deathError("before it was told to go", err)}
	}
	if err := c.child.Send(nsexec.Msg{Type: nsexec.MsgGo}); err != nil {
		return &stepError{"go", c.deathError("before it was told to go", err)}
	}
	return nil
}

// fileOp runs one operation of the files helper in the session: in, if
// not nil, is sent as the operation's input (then a Commit), and what the
// helper writes goes to out (discarded if nil).
func (s *Session) fileOp(ctx context.Context, req jailfs.Request, in io.Reader, out io.Writer) (*jailfs.Reply, error) {
	return s.fileOpHeld(ctx, nil, false, req, in, out)
}

// fileOpHeld is fileOp for a caller that holds the session's lock
// exclusively (held), or not (nil); a passive one does not count as the
// session's activity.
func (s *Session) fileOpHeld(ctx context.Context, held *heldSession, passive bool, req jailfs.Request, in io.Reader, out io.Writer) (_ *jailfs.Reply, retErr error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c := s.Command(ctx, nsexec.FilesArg0)
	c.files, c.held, c.passive = true, held, passive
	// The command defaults of the session are for commands; ctx bounds a
	// file operation.
	c.Spec.Timeout, c.Spec.CPUTime, c.Spec.KillGrace = 0, 0, 0
	if c.HelperPath == "" {
		c.HelperPath = "/proc/self/exe" // a Go program: the embedded stage is C only
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return nil, err
	}
	defer outR.Close()
	// 1 MiB pipes (the most an unprivileged caller may ask by default,
	// fs.pipe-max-size): a large file crosses in a sixteenth of the
	// wake-ups of the default 64 KiB. Best effort.
	for _, p := range []*os.File{inW, outW} {
		_, _ = unix.FcntlInt(p.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	}
	// What the helper prints (a Go panic), for the error that explains
	// its death: its first and last lines.
	stderr := capture.New(4096)
	c.Stdin, c.Stdout, c.Stderr = inR, outW, stderr
	err = c.Start()
	inR.Close() // the helper has its own
	outW.Close()
	if err != nil {
		return nil, err
	}
	defer c.endFiles()

	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := c.child.SendBytes(b); err != nil {
		return nil, c.filesDied(err, stderr)
	}
	var outErr error
	inDone, outDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(inDone)
		if in == nil {
			inW.Close()
			return
		}
		n, err := io.CopyBuffer(onlyWriter{inW}, onlyReader{in}, make([]byte, 1<<20))
		inW.Close()
		// The helper commits only what it is told it got all of.
		cb, _ := json.Marshal(jailfs.Commit{Bytes: n, Abort: err != nil})
		_ = c.child.SendBytes(cb)
	}()
	go func() {
		defer close(outDone)
		w := out
		if w == nil {
			w = io.Discard
		}
		if _, err := io.CopyBuffer(onlyWriter{w}, onlyReader{outR}, make([]byte, 1<<20)); err != nil {
			outErr = err
			c.kill(syscall.SIGKILL) // it would block on a pipe no one reads
			_, _ = io.Copy(io.Discard, outR)
		}
	}()
	rb, recvErr := c.child.RecvBytes(jailfs.MaxRequest)
	if recvErr != nil {
		c.kill(syscall.SIGKILL)
	}
	// The helper has answered and waits for the socket to close (or is
	// dead); its output ends with it.
	c.child.Close()
	<-outDone
	var rep jailfs.Reply
	if recvErr == nil {
		recvErr = json.Unmarshal(rb, &rep)
	}
	if recvErr != nil || rep.Error != nil {
		// Refused, or dead: nothing more of in is read. A write it was
		// blocked in fails now; a read of in that never returns (a
		// terminal no one types into) is left to end on its own, never
		// waited for.
		inW.Close()
	} else {
		<-inDone // done already: the helper answers only after the Commit
	}
	switch {
	case recvErr != nil && rb == nil:
		return nil, c.filesDied(recvErr, stderr)
	case recvErr != nil:
		return nil, fmt.Errorf("session %s: the files helper's reply: %w", s.id, recvErr)
	case outErr != nil:
		return nil, fmt.Errorf("session %s: %s %s: writing the output: %w", s.id, req.Op, req.Path, outErr)
	case rep.Error != nil:
		return &rep, fileError(rep.Error)
	}
	return &rep, nil
}

// filesDied explains a files helper that ended without answering.
func (c *Cmd) filesDied(err error, stderr *capture.Buffer) error {
	_ = c.child.Wait()
	c.mu.Lock()
	reason := c.killReason
	c.mu.Unlock()
	if reason == StatusCanceled || reason == StatusTimedOut {
		return fmt.Errorf("session %s: file operation %s: %w", c.session.id, reason, context.Cause(c.ctx))
	}
	err = c.deathError("before it answered", err)
	if msg := stderr.String(); msg != "" {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace([]byte(msg)))
	}
	return &InitError{Step: "files helper", Err: err}
}

// endFiles reaps the files helper and removes its cgroup.
func (c *Cmd) endFiles() {
	_ = c.child.Wait()
	c.child.Close()
	c.stopTimers()
	if c.ctl != nil {
		c.ctl.Close()
	}
	if c.cg != nil {
		_ = c.cg.Destroy()
	}
}

// Stat describes the file at path in the session, not following a final
// symlink. Errors are a *FileError (errors.Is(err, fs.ErrNotExist)), or
// as [Cmd.Start]'s when the helper cannot join the session.
func (s *Session) Stat(ctx context.Context, path string) (*FileInfo, error) {
	rep, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpStat, Path: path}, nil, nil)
	if err != nil {
		return nil, err
	}
	return fileInfo(rep.Entry), nil
}

func fileInfo(e *jailfs.Entry) *FileInfo {
	if e == nil {
		return nil
	}
	return &FileInfo{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: unixMode(e.Mode), ModTime: e.ModTime,
		UID: e.UID, GID: e.GID, Target: e.Target}
}

// unixMode turns permission bits with setuid, setgid and sticky into an
// os.FileMode.
func unixMode(m uint32) os.FileMode {
	fm := os.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// ReadFile copies the regular file at path in the session to w, as the
// session's workload would read it: a symlink on the way is followed in
// the jail, to the jail's own files; a FIFO or a device is refused. It
// streams (constant memory) and returns the bytes copied.
func (s *Session) ReadFile(ctx context.Context, path string, w io.Writer) (int64, error) {
	rep, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpGet, Path: path}, nil, w)
	if err != nil {
		return 0, err
	}
	return rep.Bytes, nil
}

// WriteFile writes r to the file at path in the session, owned by the
// session's workload user, and returns the bytes written. The new file
// replaces the old one in one rename once all of r is written and synced:
// a reader never sees half of it, and a write that fails (no space left:
// errors.Is(err, unix.ENOSPC)), or is cancelled, leaves the old file, or
// none, and no partial one. A directory, symlink, FIFO or device at path
// is refused: a write never follows a final symlink.
func (s *Session) WriteFile(ctx context.Context, path string, r io.Reader, o WriteOptions) (int64, error) {
	mode, err := permBits(o.Mode)
	if err != nil {
		return 0, err
	}
	rep, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpPut, Path: path, Mode: mode, Mkdir: o.Mkdir, Into: o.Into}, r, nil)
	if err != nil {
		return 0, err
	}
	return rep.Bytes, nil
}

func permBits(m os.FileMode) (uint32, error) {
	if m&^os.ModePerm != 0 {
		return 0, &SpecError{Field: "mode", Value: m.String(), Err: errors.New("only permission bits (0777) may be set")}
	}
	return uint32(m), nil
}

// ReadDir lists the directory at path in the session (a symlink is
// followed there, not below), depth levels deep (1: its own entries; 0
// or less: every level). A path that is not a directory lists itself.
func (s *Session) ReadDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	if depth <= 0 {
		depth = 0
	}
	var buf bytes.Buffer
	if _, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpList, Path: path, Depth: depth}, nil, &buf); err != nil {
		return nil, err
	}
	var out []FileInfo
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var e jailfs.Entry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("session %s: the files helper's listing: %w", s.id, err)
		}
		out = append(out, *fileInfo(&e))
	}
	return out, nil
}

// RemoveFile removes the file at path in the session (a symlink itself,
// never what it points to); a directory only when it is empty, unless
// recursive.
func (s *Session) RemoveFile(ctx context.Context, path string, recursive bool) error {
	_, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpRemove, Path: path, Recursive: recursive}, nil, nil)
	return err
}

// Rename moves from to to in the session, as rename(2) does; when to is
// a directory, from moves into it, as mv does.
func (s *Session) Rename(ctx context.Context, from, to string) error {
	_, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpRename, Path: from, To: to}, nil, nil)
	return err
}

// PutTar unpacks the tar stream r into the directory dir of the session,
// as its workload user. Absolute names, "..", device nodes, FIFOs and
// links that leave dir are refused: the first such entry fails the call,
// with a *FileError naming it, and the entries before it stay. Each file
// appears whole or not at all.
func (s *Session) PutTar(ctx context.Context, dir string, r io.Reader, o WriteOptions) (*TarInfo, error) {
	rep, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpPutTar, Path: dir, Mkdir: o.Mkdir, Into: o.Into}, r, nil)
	if err != nil {
		return nil, err
	}
	return &TarInfo{Entries: rep.Entries, Bytes: rep.Bytes}, nil
}

// GetTar writes the tree at path in the session to w as a tar stream:
// directories, regular files and symlinks (as symlinks), named relative
// to path; FIFOs, sockets and devices are left out and listed in the
// TarInfo.
func (s *Session) GetTar(ctx context.Context, path string, w io.Writer) (*TarInfo, error) {
	rep, err := s.fileOp(ctx, jailfs.Request{Op: jailfs.OpGetTar, Path: path}, nil, w)
	if err != nil {
		return nil, err
	}
	return &TarInfo{Entries: rep.Entries, Bytes: rep.Bytes, Skipped: rep.Skipped}, nil
}

// ExtractTar unpacks a tar stream that a session made (GetTar) into the
// host directory dir, which must exist, with the same refusals as PutTar:
// what a jail archived is as untrusted on the host as in the jail. Files
// get the caller's ids. dir is opened as jail's other host paths are,
// without following a symlink.
func ExtractTar(dir string, r io.Reader) (int64, error) {
	d, err := hostfs.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n, err := jailfs.ExtractInto(d, r)
	return n, fileError(err)
}

// ArchiveDir writes the host directory dir to w as a tar stream, as
// GetTar does a session's (symlinks stay symlinks; FIFOs, sockets and
// devices are left out), for PutTar. dir is opened without following a
// symlink.
func ArchiveDir(dir string, w io.Writer) (*TarInfo, error) {
	d, err := hostfs.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	cw := &countingWriter{w: w}
	n, skipped, err := jailfs.ArchiveDir(d, cw)
	if err != nil {
		return nil, fileError(err)
	}
	return &TarInfo{Entries: n, Bytes: cw.n, Skipped: skipped}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// fileError turns a *jailfs.Error into a *FileError.
func fileError(err error) error {
	var e *jailfs.Error
	if errors.As(err, &e) {
		return &FileError{Op: e.Op, Path: e.Path, Errno: e.Errno, Message: e.Message}
	}
	return err
}

// onlyReader and onlyWriter hide ReadFrom and WriteTo, so that
// io.CopyBuffer uses its buffer: 1 MiB, not io.Copy's 32 KiB.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }
