package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
)

// SessionJob is a piece of code placed in a session: in a directory of
// its workspace (/tmp without one), .jail-code-ID, which /code stands for
// in the runner's commands; the compile makes its artifact there. The compile and the run are commands of the
// session: they join its namespaces and live under its limits, each in a
// cgroup of its own. A session has no memory or pids limits per command,
// so the compile has the runner's compile timeout and the session's
// limits, not its compile_limits' others. Close removes the directory.
type SessionJob struct {
	sess   *jail.Session
	runner *profiles.Runner
	env    []string // the runner profile's environment, laid over the session's
	dir    string
	// Compile is the compile's Result, nil for an interpreted language.
	Compile *jail.Result
}

// PrepareIn places code in session sess for p's runner and compiles it
// there when the language is compiled. As for [Prepare], a compile that
// fails is not an error.
func PrepareIn(ctx context.Context, sess *jail.Session, p *profiles.Profile, code []byte) (_ *SessionJob, retErr error) {
	r := p.Runner
	if r == nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, profiles.ErrNoRunner)
	}
	if len(code) > MaxCodeBytes {
		return nil, &jail.SpecError{Field: "code", Value: fmt.Sprintf("%d bytes", len(code)), Err: fmt.Errorf("more than %d bytes", MaxCodeBytes)}
	}
	info, err := sess.Inspect()
	if err != nil {
		return nil, err
	}
	base := "/tmp"
	if w := info.Workspace; w != nil && w.Type != jail.WorkspaceNone && w.Path != "" {
		base = w.Path
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	j := &SessionJob{sess: sess, runner: r, env: p.Spec.Env, dir: path.Join(base, ".jail-code-"+hex.EncodeToString(id))}
	if len(r.Check) > 0 {
		c := j.command(ctx, r.Check)
		c.Capture = true
		if err := c.Run(); err != nil {
			return nil, fmt.Errorf("the %s runner's check: %w", r.Language, err)
		}
		if err := checkFailed(r, c.Result); err != nil {
			return nil, err
		}
	}
	defer func() {
		if retErr != nil {
			j.Close()
		}
	}()
	if _, err := sess.WriteFile(ctx, path.Join(j.dir, r.Source), bytes.NewReader(code), jail.WriteOptions{Mkdir: true, Mode: 0o644}); err != nil {
		return nil, err
	}
	if len(r.Compile) == 0 {
		return j, nil
	}
	// The compile makes the artifact in the job's directory itself (its
	// path, an argument of the compile, moved there): no other job's
	// compile of the session shares it.
	c := j.command(ctx, replace(r.Compile, r.Artifact, path.Join(CodeDir, path.Base(r.Artifact))))
	c.Spec.Cwd = "/tmp"
	c.Spec.Timeout = r.CompileLimits.Timeout
	if c.Spec.Timeout == 0 {
		c.Spec.Timeout = jail.Duration(DefaultCompileTimeout)
	}
	c.Spec.CPUTime = 0
	c.Capture = true
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	j.Compile = c.Result
	return j, nil
}

// command is argv (/code as the job's directory) as a command of the
// session, with the runner's environment over the session's.
func (j *SessionJob) command(ctx context.Context, argv []string) *jail.Cmd {
	argv = inDir(argv, j.dir)
	c := j.sess.Command(ctx, argv[0], argv[1:]...)
	if len(j.env) > 0 {
		c.Spec = profiles.Apply(c.Spec, jail.Spec{Env: j.env}, []string{"env"})
	}
	return c
}

// Dir is where the code is in the session.
func (j *SessionJob) Dir() string { return j.dir }

// Failed reports whether the compile failed; the Result is then
// [SessionJob.FailedResult].
func (j *SessionJob) Failed() bool { return failed(j.Compile) }

// FailedResult is the Result of a job whose compile failed, as
// [Job.FailedResult].
func (j *SessionJob) FailedResult() *jail.Result { return failedResult(j.runner, j.Compile) }

// Command is the run: the runner's run command and args as a command of
// the session, in the session's working directory (its workspace), where
// the caller's files are.
func (j *SessionJob) Command(ctx context.Context, args ...string) *jail.Cmd {
	return j.command(ctx, append(append([]string{}, j.runner.Run...), args...))
}

// Argv is the run's command line, for a caller that makes the command
// itself (jail serve's execs): with Env, what [SessionJob.Command] runs.
func (j *SessionJob) Argv(args ...string) []string {
	return inDir(append(append([]string{}, j.runner.Run...), args...), j.dir)
}

// Env is the environment the job's commands add to the session's.
func (j *SessionJob) Env() []string { return j.env }

// Annotate sets the run's Result's language and compile.
func (j *SessionJob) Annotate(r *jail.Result) {
	if r != nil {
		r.Language, r.Compile = j.runner.Language, j.Compile
	}
}

// Close removes the code (and the artifact) from the session. It takes a
// context of its own: the request's may be gone.
func (j *SessionJob) Close() error {
	if j.dir == "" {
		return nil
	}
	err := j.sess.RemoveFile(context.Background(), j.dir, true)
	j.dir = ""
	return err
}

// replace is argv with each argument equal to old made new.
func replace(argv []string, old, new string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == old {
			a = new
		}
		out[i] = a
	}
	return out
}
