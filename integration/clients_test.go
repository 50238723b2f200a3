package integration

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/client"
	"github.com/jailrt/jail/server"
)

// TestGoClient drives a real jail serve with package client.
func TestGoClient(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	c := client.Unix(s.sock)
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
}

// TestPythonClient runs clients/python's check against a real jail serve.
func TestPythonClient(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	dir, err := filepath.Abs("../clients/python")
	require.NoError(t, err)
	cmd := exec.Command("/usr/bin/python3", "check_jail_client.py", s.sock)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "ok\n", string(out))
}
