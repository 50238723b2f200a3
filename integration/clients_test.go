package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/client"
	"github.com/jailrt/jail/internal/openapitest"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/server"
)

// TestGoClient drives a real jail serve with package client.
func TestGoClient(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	c := client.Unix(s.sock)
	// Every answer the client reads is checked against openapi.yaml.
	c.HTTP.Transport = openapitest.NewChecker(t, filepath.Join(schemaDir(), "openapi.yaml")).Transport(t, c.HTTP.Transport)
	ctx := context.Background()

	res, err := c.Run(ctx, client.RunRequest{Command: client.Command{Shell: "echo hi; exit 3"}})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "hi\n", res.Stdout)
	_, err = c.Run(ctx, client.RunRequest{Profile: "nope", Command: client.Command{Argv: []string{"id"}}})
	var ae *server.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.Equal(t, server.CodeBadRequest, ae.Code)
	assert.Equal(t, "profile", ae.Field)

	info, err := c.CreateSession(ctx, client.SessionRequest{ID: "g1", Labels: map[string]string{"k": "v"}})
	require.NoError(t, err)
	assert.Equal(t, jail.SessionRunning, info.State)
	n, err := c.WriteFile(ctx, "g1", "/workspace/in.txt", strings.NewReader("data\n"), 0o600, false)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
	var out, errs bytes.Buffer
	res, err = c.ExecStream(ctx, "g1", client.ExecRequest{Command: client.Command{Shell: "cat in.txt; ls -l in.txt >&2; printf '\\377'"}}, &out, &errs)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "data\n\xff", out.String(), "bytes as they were, base64 or not on the wire")
	assert.Contains(t, errs.String(), "-rw-------")
	files, err := c.ReadDir(ctx, "g1", "/workspace", 1)
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "in.txt", files[0].Name)
	var got bytes.Buffer
	_, err = c.ReadFile(ctx, "g1", "/workspace/in.txt", &got)
	require.NoError(t, err)
	assert.Equal(t, "data\n", got.String())
	list, err := c.Sessions(ctx, map[string]string{"k": "v"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	ttl, idle := time.Hour, 10*time.Minute
	info, err = c.UpdateSession(ctx, "g1", jail.SessionUpdate{Labels: map[string]string{"k": "w"}, TTL: &ttl, IdleTimeout: &idle})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "w"}, info.Labels)
	assert.Equal(t, ttl.Milliseconds(), info.TTLMS)
	assert.Equal(t, idle.Milliseconds(), info.IdleTimeoutMS)
	require.NoError(t, c.RemoveFile(ctx, "g1", "/workspace/in.txt", false))

	// In the background: stdin written later, events followed from 1.
	x, err := c.ExecBackground(ctx, "g1", client.ExecRequest{Command: client.Command{Shell: "read a; echo got $a"}, StdinOpen: true})
	require.NoError(t, err)
	require.NoError(t, c.WriteStdin(ctx, "g1", x.ID, strings.NewReader("bg\n"), true))
	out.Reset()
	res, err = c.Follow(ctx, "g1", x.ID, 1, &out, nil)
	require.NoError(t, err)
	assert.Equal(t, "got bg\n", out.String())
	assert.Equal(t, 0, res.ExitCode)
	x, err = c.ExecBackground(ctx, "g1", client.ExecRequest{Command: client.Command{Argv: []string{"sleep", "30"}}})
	require.NoError(t, err)
	require.NoError(t, c.Signal(ctx, "g1", x.ID, "TERM"))
	res, err = c.Follow(ctx, "g1", x.ID, 2, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, jail.StatusSignaled, res.Status)
	in, err := c.ExecInfo(ctx, "g1", x.ID)
	require.NoError(t, err)
	assert.Equal(t, server.ExecExited, in.State)
	batch, err := c.RunBatch(ctx, []client.RunRequest{{Command: client.Command{Shell: "echo a"}}, {Command: client.Command{Shell: "echo b"}}})
	require.NoError(t, err)
	require.Len(t, batch, 2)
	assert.Equal(t, "b\n", batch[1].Result.Stdout)
	pools, err := c.Pools(ctx)
	require.NoError(t, err)
	assert.Empty(t, pools)

	require.NoError(t, c.RemoveSession(ctx, "g1"))
	_, err = c.Session(ctx, "g1")
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, server.CodeNotFound, ae.Code)

	// Many at once: by label, then all.
	for _, r := range []client.SessionRequest{{ID: "m1", Labels: map[string]string{"k": "a"}}, {ID: "m2", Labels: map[string]string{"k": "b"}}} {
		_, err := c.CreateSession(ctx, r)
		require.NoError(t, err)
	}
	_, err = c.RemoveSessions(ctx, nil, false)
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.Equal(t, "all", ae.Field, "neither labels nor all")
	ids, err := c.RemoveSessions(ctx, map[string]string{"k": "a"}, false)
	require.NoError(t, err)
	assert.Equal(t, []string{"m1"}, ids)
	ids, err = c.RemoveSessions(ctx, nil, true)
	require.NoError(t, err)
	assert.Equal(t, []string{"m2"}, ids)
}

// TestPythonClient runs clients/python's check against a real jail serve,
// on its unix socket and over TCP with TLS and a bearer token.
func TestPythonClient(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	cert, key, _ := selfSigned(t, dir)
	tokens := filepath.Join(dir, "tokens.yaml")
	token := newToken(t, tokens, "py", "run,sessions")
	port := strconv.Itoa(freePort(t))
	s := serve(t, openDir(t), "--listen", "tcp://127.0.0.1:"+port, "--tokens", tokens, "--tls-cert", cert, "--tls-key", key)
	py, err := filepath.Abs("../clients/python")
	require.NoError(t, err)
	for name, args := range map[string][]string{"unix": {s.sock}, "tcp": {"https://127.0.0.1:" + port, token, cert}} {
		cmd := exec.Command("/usr/bin/python3", append([]string{"check_jail_client.py"}, args...)...)
		cmd.Dir = py
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", name, out)
		assert.Equal(t, "ok\n", string(out), name)
	}
}

// TestSandbox: the same code, written against jail.Sandbox, gives the same
// outcomes in a session of this host (*jail.Session) and in a session of a
// real jail serve (client.Session): commands with env, cwd, stdin and a
// timeout, a program that cannot be run, files in and out, their
// descriptions and listings, a snapshot restored, pause and resume, an
// update, removal.
func TestSandbox(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	prof, err := profiles.Load("strict")
	require.NoError(t, err)
	local, err := (&jail.Sessions{Dir: sessionDir(t)}).Create(ctx, jail.SessionSpec{Spec: prof.Spec})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = local.Remove() })
	s := serve(t, openDir(t))
	c := client.Unix(s.sock)
	info, err := c.CreateSession(ctx, client.SessionRequest{Profile: "strict"})
	require.NoError(t, err)
	remote := c.Sandbox(ctx, info.ID)
	assert.Equal(t, info.ID, remote.ID())

	type outcome struct {
		Out, Env, Cwd, In, Timeout, Missing string
		File, Listed                        string
		Stat, Link                          jail.FileInfo
		Recent, IntoOut, Setuid, BadEnv     bool
		Restored, Gone, Paused, Resumed     string
		Removed                             bool
	}
	use := func(sb jail.Sandbox) outcome {
		t.Helper()
		var o outcome
		exec := func(argv []string, opt jail.ExecOptions) *jail.Result {
			t.Helper()
			res, err := sb.Exec(ctx, argv, opt)
			require.NoError(t, err)
			return res
		}
		res := exec([]string{"sh", "-c", "echo out; echo err >&2; exit 3"}, jail.ExecOptions{})
		o.Out = fmt.Sprintf("%s %d %q %q", res.Status, res.ExitCode, res.Stdout, res.Stderr)
		res = exec([]string{"sh", "-c", "echo $GREETING $HOME"}, jail.ExecOptions{Env: []string{"GREETING=hi", "HOME=/home/x"}})
		o.Env = res.Stdout
		o.Cwd = exec([]string{"pwd"}, jail.ExecOptions{Cwd: "/tmp"}).Stdout
		res = exec([]string{"cat"}, jail.ExecOptions{Stdin: strings.NewReader("in\xffput")})
		o.In = res.Stdout + " " + res.StdoutEncoding // not text: base64
		res = exec([]string{"sleep", "10"}, jail.ExecOptions{Timeout: 300 * time.Millisecond})
		o.Timeout = fmt.Sprintf("%s %v", res.Status, res.LimitsHit)
		res = exec([]string{"/no/such/program"}, jail.ExecOptions{})
		require.NotNil(t, res.Error)
		o.Missing = fmt.Sprintf("%s %s", res.Status, res.Error.Step)

		n, err := sb.WriteFile(ctx, "/workspace/d/f.txt", strings.NewReader("contents\n"), jail.WriteOptions{Mode: 0o640, Mkdir: true})
		require.NoError(t, err)
		require.Equal(t, int64(9), n)
		_, err = sb.WriteFile(ctx, "/workspace/d", strings.NewReader("two\n"), jail.WriteOptions{Into: "g.txt"})
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = sb.ReadFile(ctx, "/workspace/d/f.txt", &buf)
		require.NoError(t, err)
		o.File = buf.String()
		fi, err := sb.Stat(ctx, "/workspace/d/f.txt")
		require.NoError(t, err)
		o.Stat = *fi
		o.Recent = time.Since(fi.ModTime).Abs() < time.Minute
		o.Stat.ModTime = time.Time{} // two files, two times
		exec([]string{"ln", "-s", "/workspace/d/f.txt", "/workspace/link"}, jail.ExecOptions{})
		fi, err = sb.Stat(ctx, "/workspace/link")
		require.NoError(t, err)
		o.Link = *fi
		o.Link.ModTime, o.Link.Mode = time.Time{}, 0 // a symlink's mode is the system's
		_, err = sb.WriteFile(ctx, "/workspace/d", strings.NewReader("x"), jail.WriteOptions{Into: "../escape"})
		o.IntoOut = err != nil
		_, err = sb.WriteFile(ctx, "/workspace/s", strings.NewReader("x"), jail.WriteOptions{Mode: 0o755 | os.ModeSetuid})
		o.Setuid = err != nil
		list, err := sb.ReadDir(ctx, "/workspace/d", 1)
		require.NoError(t, err)
		for _, f := range list {
			o.Listed += fmt.Sprintf("%s %s %d %v;", f.Path, f.Type, f.Size, f.Mode)
		}

		snap, err := sb.Snapshot(ctx, "")
		require.NoError(t, err)
		require.NoError(t, sb.RemoveFile(ctx, "/workspace/d", true))
		_, err = sb.Stat(ctx, "/workspace/d")
		o.Gone = fmt.Sprint(errors.Is(err, fs.ErrNotExist))
		require.NoError(t, sb.Restore(ctx, snap.ID))
		buf.Reset()
		_, err = sb.ReadFile(ctx, "/workspace/d/g.txt", &buf)
		require.NoError(t, err)
		o.Restored = buf.String()

		require.NoError(t, sb.Pause())
		in, err := sb.Inspect()
		require.NoError(t, err)
		o.Paused = string(in.State)
		require.NoError(t, sb.Resume())
		require.NoError(t, sb.Touch())
		tmp := "/tmp"
		require.NoError(t, sb.Update(jail.SessionUpdate{Env: []string{"PATH=/usr/bin:/bin", "FROM=update"}, Cwd: &tmp}))
		o.Resumed = exec([]string{"sh", "-c", "echo $FROM; pwd"}, jail.ExecOptions{}).Stdout
		o.Resumed += exec([]string{"pwd"}, jail.ExecOptions{Cwd: "/workspace"}).Stdout // the default it had: still the caller's
		_, err = sb.Exec(ctx, []string{"true"}, jail.ExecOptions{Env: []string{"NOEQUALS"}})
		o.BadEnv = err != nil
		_, err = sb.Remove()
		require.NoError(t, err)
		_, err = sb.Inspect()
		o.Removed = err != nil
		return o
	}
	here, there := use(local), use(remote)
	assert.Equal(t, here, there)
	assert.Equal(t, outcome{
		Out: `exited 3 "out\n" "err\n"`, Env: "hi /home/x\n", Cwd: "/tmp\n", In: "aW7/cHV0 base64", Timeout: "timed_out [timeout]",
		Missing: "setup_error execve", File: "contents\n",
		Stat:   jail.FileInfo{Name: "f.txt", Path: "/workspace/d/f.txt", Type: "file", Size: 9, Mode: 0o640, UID: 1000, GID: 1000},
		Link:   jail.FileInfo{Name: "link", Path: "/workspace/link", Type: "symlink", Size: 18, UID: 1000, GID: 1000, Target: "/workspace/d/f.txt"},
		Recent: true, IntoOut: true, Setuid: true,
		Listed: "/workspace/d/f.txt file 9 -rw-r-----;/workspace/d/g.txt file 4 -rw-r--r--;", Gone: "true", Restored: "two\n",
		Paused: "paused", Resumed: "update\n/tmp\n/workspace\n", BadEnv: true, Removed: true,
	}, here)
}
