// Package runner runs a piece of code in one language in jails, by a
// profile's [profiles.Runner]: the code is placed read-only at
// /code/SOURCE; a compiled language is compiled in a jail of its own, with
// the runner's compile limits, and its artifact is run in a second jail
// with the profile's (and the caller's) limits. The Result of the run
// gains the language and the compile's own Result; a compile that fails
// ends it with status compile_error and exit code 1.
//
// The code and the artifact cross between the two jails in a directory on
// the host that only this process and the jails' user can reach: the
// compile's jail sees the code read-only and may write one file, the
// artifact, whose size its RLIMIT_FSIZE bounds (so that a compile cannot
// fill the host's disk); the run's jail sees both read-only. The directory
// is removed when the job is closed. Nothing of it is ever read or run on
// the host.
package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/jailrt/jail"
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

// Job is one piece of code on its way to a run: placed, and compiled
// when its language is compiled. Close removes what it placed.
type Job struct {
	runner *profiles.Runner
	spec   jail.Spec // the run's
	dir    string    // on the host: dir/code is /code in the jails
	// Compile is the compile's Result, nil for an interpreted language.
	Compile *jail.Result
}

// Prepare places code for p's runner (p must have one) and, for a
// compiled language, compiles it in a jail of its own; spec is the run's
// Spec (p's, with the caller's changes), the compile's is made from it by
// the runner's compile limits. A compile that fails is not an error: see
// [Job.Failed]. An error is a setup failure (no runner, bad code, a jail
// that could not start) and leaves nothing behind.
func Prepare(ctx context.Context, p *profiles.Profile, spec jail.Spec, code []byte) (_ *Job, retErr error) {
	r := p.Runner
	if r == nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, profiles.ErrNoRunner)
	}
	if len(code) > MaxCodeBytes {
		return nil, &jail.SpecError{Field: "code", Value: fmt.Sprintf("%d bytes", len(code)), Err: fmt.Errorf("more than %d bytes", MaxCodeBytes)}
	}
	if len(r.Check) > 0 {
		if err := check(ctx, r, spec); err != nil {
			return nil, err
		}
	}
	j := &Job{runner: r, spec: spec}
	var err error
	if j.dir, err = os.MkdirTemp("", "jail-code-"); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			j.Close()
		}
	}()
	codeDir := filepath.Join(j.dir, "code")
	// The jails' user reaches dir and code (0711/0755): a root caller's
	// jails run as host uid 65534.
	if err := os.Chmod(j.dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Mkdir(codeDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(codeDir, r.Source), code, 0o644); err != nil {
		return nil, err
	}
	if len(r.Compile) == 0 {
		return j, nil
	}
	// The artifact: one empty file the compile's jail may write, owned by
	// its user.
	art := filepath.Join(codeDir, path.Base(r.Artifact))
	if err := os.WriteFile(art, nil, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(art, 0o755); err != nil { // not the umask's
		return nil, err
	}
	if os.Geteuid() == 0 && !disabled(spec, "user") {
		uid, gid := hostIDs(spec)
		if err := os.Chown(art, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	// The compile's command, then a copy of its artifact into the one
	// file of the host it may write: cat's writes end at RLIMIT_FSIZE.
	argv := compileArgv(r, CodeDir)
	c := jail.Command(ctx, j.compileSpec(art), argv[0], argv[1:]...)
	c.Capture = true
	if err := c.Run(); err != nil { // the jail or its /bin/sh did not start: not the code's doing
		return nil, fmt.Errorf("compile (in a jail with the runner's compile_limits; --allow-unenforced runs it without what this host cannot enforce): %w", err)
	}
	j.Compile = c.Result
	return j, nil
}

// compileArgv is the compile's command line: the runner's compile
// command, with /code as codeDir, then a copy of the artifact into
// codeDir (cat: in a one-shot jail, into the one host file it may write)
// and the artifact's removal.
func compileArgv(r *profiles.Runner, codeDir string) []string {
	return append([]string{"/bin/sh", "-c", `a=$1 o=$2; shift 2; "$@" && cat -- "$a" > "$o"; s=$?; rm -f -- "$a"; exit $s`,
		"compile", r.Artifact, path.Join(codeDir, path.Base(r.Artifact))}, inDir(r.Compile, codeDir)...)
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
// place of its limits, /code read-only, the artifact writable, and the
// artifact's size bounded by RLIMIT_FSIZE.
func (j *Job) compileSpec(art string) jail.Spec {
	l := j.runner.CompileLimits
	s := j.spec
	s.Timeout = l.Timeout
	if s.Timeout == 0 {
		s.Timeout = jail.Duration(DefaultCompileTimeout)
	}
	s.CPUTime, s.KillGrace = 0, 0
	s.MemoryMaxBytes, s.PidsMax = l.MemoryMaxBytes, l.PidsMax
	s.SwapMaxBytes = 0
	s.TmpSizeBytes = l.TmpSizeBytes
	if s.TmpSizeBytes == 0 {
		s.TmpSizeBytes = DefaultCompileTmpBytes
	}
	max := l.ArtifactMaxBytes
	if max == 0 {
		max = DefaultArtifactMaxBytes
	}
	s = profiles.Apply(s, jail.Spec{
		Rlimits: []jail.Rlimit{{Name: "fsize", Soft: uint64(max), Hard: uint64(max)}},
		Mounts:  j.mounts(art),
		Cwd:     "/tmp",
	}, []string{"rlimits", "mounts", "cwd"})
	return s
}

// mounts are /code, read-only, and for the compile the artifact, writable.
func (j *Job) mounts(art string) []mounts.Mount {
	m := []mounts.Mount{{Type: mounts.ROBind, Source: filepath.Join(j.dir, "code"), Target: CodeDir}}
	if art != "" {
		m = append(m, mounts.Mount{Type: mounts.Bind, Source: art, Target: path.Join(CodeDir, filepath.Base(art))})
	}
	return m
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
	s := profiles.Apply(j.spec, jail.Spec{Mounts: j.mounts("")}, []string{"mounts"})
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
}

// Run compiles (when it has to) and runs code by p's runner in jails of
// spec, with args after the runner's run command, and returns the Result
// (always, as [jail.Cmd.Run]: a compile that fails is a Result with
// status compile_error, not an error).
func Run(ctx context.Context, p *profiles.Profile, spec jail.Spec, code []byte, o Options, args ...string) (*jail.Result, error) {
	j, err := Prepare(ctx, p, spec, code)
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
func check(ctx context.Context, r *profiles.Runner, spec jail.Spec) error {
	spec.Timeout = jail.Duration(10 * time.Second)
	c := jail.Command(ctx, spec, r.Check[0], r.Check[1:]...)
	c.Capture = true
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
