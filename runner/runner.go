// Package runner runs a piece of code in one language in jails, by a
// profile's [profiles.Runner]: the code is placed read-only at
// /code/SOURCE; a compiled language is compiled in a jail of its own, with
// the runner's compile limits, and its artifact is run in a second jail
// with the profile's (and the caller's) limits. The Result of the run
// gains the language and the compile's own Result; a compile that fails
// ends it with status compile_error and exit code 1.
//
// The code and the artifact live in a directory of the host's temp
// directory that only this process and the jails' user can reach (for a
// root caller: root's, and readable by the jails' host group only), and
// that no jail may write: the compile's jail sees the code read-only, and
// its artifact comes out on its stdout, which this process writes into a
// file of its own making, up to compile_limits.artifact_max_bytes (a
// compile past that is killed). So a hostile toolchain can put nothing on
// the host but those bytes, in a file it does not own. The run's jail sees
// the directory read-only. The directory is removed when the job is
// closed; `jail check --clean` removes those whose process died. Nothing
// of it is ever read or run on the host.
package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/procfs"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/profiles"
)

// Defaults of a compile's limits.
const (
	DefaultCompileTimeout   = 60 * time.Second
	DefaultCompileTmpBytes  = 512 << 20
	DefaultArtifactMaxBytes = 256 << 20
	// MaxCodeBytes bounds a piece of code.
	MaxCodeBytes = 16 << 20
)

// CodeDir is where a job's code (and artifact) is in its jails.
const CodeDir = "/code"

// DirPrefix starts the name of a job's directory in the host's temp
// directory: jail-code-OWNER-, OWNER the procfs.OwnerTag of the process
// that made it.
const DirPrefix = "jail-code-"

// Setup is how a caller's jails are made: Configure, when set, is called
// on every Cmd a job makes itself (the compile, the check), as a server
// sets its helper and logger; CompileMemoryMax, when not 0, caps the
// compile's memory below the runner's compile limit (a tenant's quota).
type Setup struct {
	Configure        func(*jail.Cmd)
	CompileMemoryMax int64
}

// Job is one piece of code on its way to a run: placed, and compiled
// when its language is compiled. Close removes what it placed.
type Job struct {
	runner *profiles.Runner
	spec   jail.Spec // the run's
	setup  Setup
	dir    string // on the host: dir/code is /code in the jails
	// Compile is the compile's Result, nil for an interpreted language.
	Compile *jail.Result
}

// Prepare places code for p's runner (p must have one) and, for a
// compiled language, compiles it in a jail of its own; spec is the run's
// Spec (p's, with the caller's changes), the compile's is made from it by
// the runner's compile limits. A compile that fails is not an error: see
// [Job.Failed]. An error is a setup failure (no runner, bad code, a jail
// that could not start) and leaves nothing behind.
func Prepare(ctx context.Context, p *profiles.Profile, spec jail.Spec, code []byte, setup Setup) (_ *Job, retErr error) {
	r := p.Runner
	if r == nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, profiles.ErrNoRunner)
	}
	if len(code) > MaxCodeBytes {
		return nil, &jail.SpecError{Field: "code", Value: fmt.Sprintf("%d bytes", len(code)), Err: fmt.Errorf("more than %d bytes", MaxCodeBytes)}
	}
	if len(r.Check) > 0 {
		if err := check(ctx, r, spec, setup); err != nil {
			return nil, err
		}
	}
	j := &Job{runner: r, spec: spec, setup: setup}
	var err error
	if j.dir, err = os.MkdirTemp("", DirPrefix+procfs.OwnerTag()+"-"); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			j.Close()
		}
	}()
	codeDir := filepath.Join(j.dir, "code")
	if err := os.Mkdir(codeDir, 0o700); err != nil {
		return nil, err
	}
	src := filepath.Join(codeDir, r.Source)
	if err := os.WriteFile(src, code, 0o600); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{j.dir, 0o710}, {codeDir, 0o750}, {src, 0o640}} {
		if err := j.share(f.path, f.mode); err != nil {
			return nil, err
		}
	}
	if len(r.Compile) == 0 {
		return j, nil
	}
	if noexec(j.dir) {
		return nil, &jail.FeatureError{Feature: "language " + r.Language, Reason: fmt.Sprintf("%s is on a noexec file system, where no artifact can run: set TMPDIR to a directory that allows exec", os.TempDir())}
	}
	return j, j.compile(ctx, codeDir)
}

// share gives a file of the job's directory to the jails' user, and to no
// one else: a root caller's jails reach it through their host group (the
// file stays root's), an unprivileged caller's are the caller.
func (j *Job) share(path string, mode os.FileMode) error {
	if os.Geteuid() != 0 {
		return os.Chmod(path, mode&0o700)
	}
	_, gid := hostIDs(j.spec)
	if err := os.Chown(path, 0, int(gid)); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// compile runs the compile in a jail of its own: the artifact comes out on
// its stdout (the compiler's own stdout goes to stderr) into a file this
// process makes, bounded.
func (j *Job) compile(ctx context.Context, codeDir string) error {
	r := j.runner
	art := filepath.Join(codeDir, path.Base(r.Artifact))
	f, err := os.OpenFile(art, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := j.share(art, 0o750); err != nil {
		return err
	}
	max := r.CompileLimits.ArtifactMaxBytes
	if max == 0 {
		max = DefaultArtifactMaxBytes
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &capped{w: f, left: max, over: cancel}
	argv := append([]string{"/bin/sh", "-c", `a=$1; shift; "$@" >&2 && exec cat -- "$a"`, "compile", r.Artifact}, inDir(r.Compile, CodeDir)...)
	c := jail.Command(cctx, j.compileSpec(), argv[0], argv[1:]...)
	c.Capture, c.Stdout = true, w
	if j.setup.Configure != nil {
		j.setup.Configure(c)
	}
	err = c.Run()
	res := c.Result
	if w.exceeded {
		res.Status, res.ExitCode, res.Signal = jail.StatusCanceled, jail.ExitSetupError, ""
		res.Error = &jail.ErrorInfo{Step: "artifact", Message: fmt.Sprintf("the artifact is over %d bytes (compile_limits.artifact_max_bytes): the compile was killed", max)}
		err = nil
	}
	if err != nil { // the jail or its /bin/sh did not start: not the code's doing
		return fmt.Errorf("compile (in a jail with the runner's compile_limits; --allow-unenforced runs it without what this host cannot enforce): %w", err)
	}
	// Its stdout was the artifact: bytes, not output (stdout_bytes says
	// how many).
	res.Stdout, res.StdoutEncoding, res.StdoutTruncated = "", "utf-8", false
	j.Compile = res
	return nil
}

// capped writes up to left bytes to w, then calls over once and refuses
// the rest.
type capped struct {
	w        io.Writer
	left     int64
	over     func()
	exceeded bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.exceeded {
		return 0, fmt.Errorf("over the artifact's bound")
	}
	if int64(len(p)) > c.left {
		if !c.exceeded {
			c.exceeded = true
			c.over()
		}
		return 0, fmt.Errorf("over the artifact's bound")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// inDir is argv with /code (and what is below it) as dir.
func inDir(argv []string, dir string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == CodeDir || strings.HasPrefix(a, CodeDir+"/") {
			a = dir + a[len(CodeDir):]
		}
		out[i] = a
	}
	return out
}

// compileSpec is the compile's Spec: the run's, with the compile limits in
// place of its limits (the memory capped by Setup.CompileMemoryMax), /code
// read-only, and files up to the artifact's bound.
func (j *Job) compileSpec() jail.Spec {
	l := j.runner.CompileLimits
	s := j.spec
	s.Timeout = l.Timeout
	if s.Timeout == 0 {
		s.Timeout = jail.Duration(DefaultCompileTimeout)
	}
	s.CPUTime, s.KillGrace = 0, 0
	s.MemoryMaxBytes, s.PidsMax = l.MemoryMaxBytes, l.PidsMax
	if m := j.setup.CompileMemoryMax; m > 0 && (s.MemoryMaxBytes == 0 || s.MemoryMaxBytes > m) {
		s.MemoryMaxBytes = m
	}
	s.SwapMaxBytes = 0
	s.TmpSizeBytes = l.TmpSizeBytes
	if s.TmpSizeBytes == 0 {
		s.TmpSizeBytes = DefaultCompileTmpBytes
	}
	max := l.ArtifactMaxBytes
	if max == 0 {
		max = DefaultArtifactMaxBytes
	}
	return profiles.Apply(s, jail.Spec{
		Rlimits: []jail.Rlimit{{Name: "fsize", Soft: uint64(max), Hard: uint64(max)}},
		Mounts:  j.mounts(),
		Cwd:     "/tmp",
	}, []string{"rlimits", "mounts", "cwd"})
}

// mounts are /code, read-only.
func (j *Job) mounts() []mounts.Mount {
	return []mounts.Mount{{Type: mounts.ROBind, Source: filepath.Join(j.dir, "code"), Target: CodeDir}}
}

// Failed reports whether the compile failed; the job's Result is then
// [Job.FailedResult].
func (j *Job) Failed() bool { return failed(j.Compile) }

// FailedResult is the Result of a job whose compile failed: status
// compile_error, exit code 1, the compile's Result (the compiler's output
// kept) nested, its isolation and times.
func (j *Job) FailedResult() *jail.Result { return failedResult(j.runner, j.Compile) }

func failed(compile *jail.Result) bool {
	return compile != nil && (compile.Status != jail.StatusExited || compile.ExitCode != 0)
}

func failedResult(r *profiles.Runner, compile *jail.Result) *jail.Result {
	res := *compile
	res.Status, res.ExitCode, res.Signal = jail.StatusCompileError, 1, ""
	res.Stdout, res.Stderr, res.StdoutBytes, res.StderrBytes = "", "", 0, 0
	res.StdoutEncoding, res.StderrEncoding = "utf-8", "utf-8"
	res.StdoutTruncated, res.StderrTruncated = false, false
	res.Error = nil
	res.Language, res.Compile = r.Language, compile
	return &res
}

// Command is the run: the runner's run command and args, in the run's
// Spec with /code (the code, and the artifact) read-only, in /tmp.
func (j *Job) Command(ctx context.Context, args ...string) *jail.Cmd {
	s := profiles.Apply(j.spec, jail.Spec{Mounts: j.mounts()}, []string{"mounts"})
	if s.Cwd == "" {
		s.Cwd = "/tmp"
	}
	argv := append(append([]string{}, j.runner.Run...), args...)
	return jail.Command(ctx, s, argv[0], argv[1:]...)
}

// Annotate sets the run's Result's language and compile.
func (j *Job) Annotate(r *jail.Result) {
	if r != nil {
		r.Language, r.Compile = j.runner.Language, j.Compile
	}
}

// Close removes the code and the artifact from the host.
func (j *Job) Close() error {
	if j.dir == "" {
		return nil
	}
	err := os.RemoveAll(j.dir)
	j.dir = ""
	return err
}

// Options are a run's streams: nil Stdin is none; with Capture the output
// is also kept in the Result.
type Options struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Capture        bool
	Setup          Setup
}

// Run compiles (when it has to) and runs code by p's runner in jails of
// spec, with args after the runner's run command, and returns the Result
// (always, as [jail.Cmd.Run]: a compile that fails is a Result with
// status compile_error, not an error).
func Run(ctx context.Context, p *profiles.Profile, spec jail.Spec, code []byte, o Options, args ...string) (*jail.Result, error) {
	j, err := Prepare(ctx, p, spec, code, o.Setup)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	if j.Failed() {
		return j.FailedResult(), nil
	}
	c := j.Command(ctx, args...)
	c.Stdin, c.Stdout, c.Stderr, c.Capture = o.Stdin, o.Stdout, o.Stderr, o.Capture
	err = c.Run()
	j.Annotate(c.Result)
	return c.Result, err
}

// check runs r's check command in a jail of spec; a failure refuses the
// run with what the command printed.
func check(ctx context.Context, r *profiles.Runner, spec jail.Spec, setup Setup) error {
	spec.Timeout = jail.Duration(10 * time.Second)
	c := jail.Command(ctx, spec, r.Check[0], r.Check[1:]...)
	c.Capture = true
	if setup.Configure != nil {
		setup.Configure(c)
	}
	if err := c.Run(); err != nil {
		return fmt.Errorf("the %s runner's check: %w", r.Language, err)
	}
	return checkFailed(r, c.Result)
}

// checkFailed says why the check's result refuses the run; nil when it
// passed.
func checkFailed(r *profiles.Runner, res *jail.Result) error {
	if res.Status == jail.StatusExited && res.ExitCode == 0 {
		return nil
	}
	why := strings.TrimSpace(res.Stderr + " " + res.Stdout)
	if i := strings.IndexByte(why, '\n'); i >= 0 {
		why = why[:i]
	}
	return &jail.FeatureError{Feature: "language " + r.Language, Reason: fmt.Sprintf("this host's toolchain fails the runner's check %q: %s", r.Check, why)}
}

func disabled(s jail.Spec, ns string) bool {
	for _, d := range s.DisableNamespaces {
		if d == ns {
			return true
		}
	}
	return false
}

func hostIDs(s jail.Spec) (uint32, uint32) {
	uid, gid := uint32(jail.DefaultHostUID), uint32(jail.DefaultHostUID)
	if s.HostUID != nil {
		uid = *s.HostUID
	}
	if s.HostGID != nil {
		gid = *s.HostGID
	}
	return uid, gid
}

// Prune removes the job directories of the host's temp directory whose
// process is gone (killed before it could close its jobs), and returns
// them. A directory whose owner cannot be told is kept.
func Prune() ([]string, error) {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), DirPrefix)
		i := strings.LastIndexByte(rest, '-')
		if !ok || !e.IsDir() || i <= 0 {
			continue
		}
		if info, err := e.Info(); err != nil || (os.Geteuid() != 0 && info.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid())) {
			continue // another user's
		}
		if !procfs.OwnerGone(rest[:i], true) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		if err := os.RemoveAll(dir); err != nil {
			return removed, err
		}
		removed = append(removed, dir)
	}
	return removed, nil
}
