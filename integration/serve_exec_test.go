package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/server"
)

// events GETs path (an exec's events) and returns them, or, with each not
// nil, calls it for each until it returns false.
func (s *served) events(t *testing.T, ctx context.Context, path string, each func(map[string]any) bool) []map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://jail"+path, nil)
	require.NoError(t, err)
	return s.ndjson(t, req, each)
}

// execInfo GETs an exec's document.
func (s *served) execInfo(t *testing.T, session, id string) server.ExecInfo {
	t.Helper()
	code, b := s.do(t, "GET", "/v1/sessions/"+session+"/exec/"+id, "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	var in server.ExecInfo
	require.NoError(t, json.Unmarshal(b, &in))
	return in
}

// background starts a background exec and returns its document.
func (s *served) background(t *testing.T, session, body string) server.ExecInfo {
	t.Helper()
	code, b := s.do(t, "POST", "/v1/sessions/"+session+"/exec", body)
	require.Equal(t, http.StatusAccepted, code, "%s", b)
	var in server.ExecInfo
	require.NoError(t, json.Unmarshal(b, &in))
	require.NotEmpty(t, in.ID)
	return in
}

// TestServeExecs: background execs, their events replayed from a
// sequence number (NDJSON and SSE), their stdin, their signals; a detached
// exec outlives its client.
func TestServeExecs(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "bg"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	ctx := context.Background()

	// Stdin: written by a later request, closed with eof.
	x := s.background(t, "bg", `{"shell": "echo one; echo two >&2; read a; read b; echo got $a $b; exit 4", "background": true, "stdin": "first\n", "stdin_open": true}`)
	assert.Equal(t, server.ExecRunning, x.State)
	assert.True(t, x.Stdin)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+x.ID+"/stdin?eof=1", "second\n")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.JSONEq(t, `{"bytes": 7, "eof": true}`, string(b))
	evs := s.events(t, ctx, "/v1/sessions/bg/exec/"+x.ID+"/events", nil)
	require.NotEmpty(t, evs)
	assert.Equal(t, "start", evs[0]["event"])
	assert.Equal(t, x.ID, evs[0]["exec"])
	pid := s.execInfo(t, "bg", x.ID).PID
	assert.Equal(t, float64(pid), evs[0]["pid"], "the exec's document and its start event name one pid")
	assert.Greater(t, pid, 1, "not the session's PID 1")
	last := evs[len(evs)-1]
	require.Equal(t, "exit", last["event"], "%v", evs)
	res := last["result"].(map[string]any)
	assert.Equal(t, float64(4), res["exit_code"])
	assert.Equal(t, "one\ngot first second\n", res["stdout"])
	for i, e := range evs {
		assert.Equal(t, float64(i+1), e["seq"], "events are numbered from 1 without a gap")
	}
	// A replay from a sequence number starts there.
	replay := s.events(t, ctx, "/v1/sessions/bg/exec/"+x.ID+"/events?from=3", nil)
	require.NotEmpty(t, replay)
	assert.Equal(t, float64(3), replay[0]["seq"])
	assert.Equal(t, evs[len(evs)-1], replay[len(replay)-1])
	in := s.execInfo(t, "bg", x.ID)
	assert.Equal(t, server.ExecExited, in.State)
	require.NotNil(t, in.Result)
	assert.Equal(t, 4, in.Result.ExitCode)
	assert.False(t, in.Stdin)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+x.ID+"/stdin", "late")
	assert.Equal(t, http.StatusConflict, code, "%s", b)
	assert.Equal(t, server.CodeNotRunning, apiError(t, b).Code)

	// SSE, resumed after Last-Event-ID.
	req, _ := http.NewRequest("GET", "http://jail/v1/sessions/bg/exec/"+x.ID+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "1")
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	sb := new(strings.Builder)
	_, _ = bufio.NewReader(resp.Body).WriteTo(sb)
	resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(sb.String(), "id: 2\nevent: "), "%s", sb)
	assert.Contains(t, sb.String(), "\nevent: exit\ndata: {")
	assert.True(t, strings.HasSuffix(sb.String(), "}\n\n"), "each event ends with an empty line")

	// Output beyond what is kept: a replay from 1 says what was lost.
	big := s.background(t, "bg", `{"shell": "head -c 3000000 /dev/zero | od -v | head -c 4000000; echo end", "background": true}`)
	require.Eventually(t, func() bool { return s.execInfo(t, "bg", big.ID).State == server.ExecExited }, time.Minute, 50*time.Millisecond)
	in = s.execInfo(t, "bg", big.ID)
	assert.Greater(t, in.FirstSeq, 1, "the oldest events were dropped")
	evs = s.events(t, ctx, "/v1/sessions/bg/exec/"+big.ID+"/events?from=1", nil)
	assert.Equal(t, map[string]any{"event": "lost", "from": float64(1), "to": float64(in.FirstSeq - 1)}, evs[0])
	assert.Equal(t, float64(in.FirstSeq), evs[1]["seq"])
	assert.Equal(t, "exit", evs[len(evs)-1]["event"])
	kept := 0
	for _, e := range evs {
		if d, ok := e["data"].(string); ok {
			kept += len(d)
		}
	}
	assert.LessOrEqual(t, kept, 256<<10+32<<10, "an ended exec keeps about 256 KiB")
	assert.Equal(t, int64(4000004), in.Result.StdoutBytes, "the result counts every byte")

	// A signal reaches the command's process group.
	sig := s.background(t, "bg", `{"shell": "trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.1; done", "background": true}`)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s.events(t, rctx, "/v1/sessions/bg/exec/"+sig.ID+"/events", func(e map[string]any) bool { return e["data"] != "ready\n" })
	cancel()
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+sig.ID+"/signal", `{"signal": "STOP"}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "signal", apiError(t, b).Field)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+sig.ID+"/signal", `{"signal": "SIGTERM"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.Eventually(t, func() bool { return s.execInfo(t, "bg", sig.ID).State == server.ExecExited }, 30*time.Second, 20*time.Millisecond)
	in = s.execInfo(t, "bg", sig.ID)
	assert.Equal(t, 7, in.Result.ExitCode)
	assert.Equal(t, "ready\nterm\n", in.Result.Stdout)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+sig.ID+"/signal", `{"signal": "TERM"}`)
	assert.Equal(t, http.StatusConflict, code, "an ended exec: %s", b)

	// Detached: its client goes, it runs on.
	dctx, dcancel := context.WithCancel(ctx)
	var id string
	s.stream(t, "/v1/sessions/bg/exec", `{"shell": "sleep 0.5; echo done > /workspace/detached", "detach": true}`, func(e map[string]any) bool {
		id, _ = e["exec"].(string)
		dcancel()
		return false
	}, dctx)
	require.NotEmpty(t, id)
	require.Eventually(t, func() bool { return s.execInfo(t, "bg", id).State == server.ExecExited }, 30*time.Second, 20*time.Millisecond)
	_, b = s.do(t, "GET", "/v1/sessions/bg/files/workspace/detached", "")
	assert.Equal(t, "done\n", string(b), "the detached command finished")

	// The session's execs; nobody else's.
	code, b = s.do(t, "GET", "/v1/sessions/bg/exec", "")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{x.ID, big.ID, sig.ID, id} {
		assert.Contains(t, string(b), want)
	}
	code, b = s.do(t, "GET", "/v1/sessions/bg/exec/xnothing", "")
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, b = s.asUser(t, "GET", "/v1/sessions/bg/exec/"+x.ID, "")
	assert.Equal(t, http.StatusNotFound, code, "another tenant's: %s", b)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec", `{"argv": ["true"], "background": true, "detach": true}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "detach", apiError(t, b).Field)
	nostdin := s.background(t, "bg", `{"argv": ["sleep", "5"], "background": true}`)
	code, b = s.do(t, "POST", "/v1/sessions/bg/exec/"+nostdin.ID+"/stdin", "x")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "stdin", apiError(t, b).Field)
	code, _ = s.do(t, "POST", "/v1/sessions/bg/exec/"+nostdin.ID+"/signal", `{"signal": "KILL"}`)
	assert.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { return s.execInfo(t, "bg", nostdin.ID).State == server.ExecExited }, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, "signaled", string(s.execInfo(t, "bg", nostdin.ID).Result.Status))
}

// TestServeBatch: a batch's runs all run, each reported in order; one bad
// run refuses the batch, naming it.
func TestServeBatch(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	var runs []string
	for i := range 6 {
		runs = append(runs, `{"shell": "echo run`+string(rune('0'+i))+`; exit `+string(rune('0'+i))+`"}`)
	}
	code, b := s.do(t, "POST", "/v1/runs:batch", `{"runs": [`+strings.Join(runs, ",")+`]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var ans struct {
		Runs []struct {
			Result *struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			} `json:"result"`
			Error *server.Error `json:"error"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(b, &ans))
	require.Len(t, ans.Runs, 6)
	for i, r := range ans.Runs {
		require.NotNil(t, r.Result, "run %d: %+v", i, r.Error)
		assert.Equal(t, i, r.Result.ExitCode)
		assert.Equal(t, "run"+string(rune('0'+i))+"\n", r.Result.Stdout)
	}
	code, b = s.do(t, "POST", "/v1/runs:batch", `{"runs": [{"argv": ["true"]}, {"argv": []}]}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "runs[1].argv", apiError(t, b).Field)
	code, b = s.do(t, "POST", "/v1/runs:batch", `{"runs": []}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "runs", apiError(t, b).Field)
}

// TestServeSessionPatch: PATCH changes labels, the commands' default env
// and cwd, and the deadlines; :touch keeps an idle session up.
func TestServeSessionPatch(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "p1", "labels": {"team": "a"}, "idle_timeout": "1500ms"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	var before jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &before))
	assert.Equal(t, jail.CommandDefaults{Env: jail.DefaultEnv, Cwd: "/workspace"}, before.Defaults, "a session with a workspace starts its commands there")
	code, b = s.do(t, "PATCH", "/v1/sessions/p1", `{"labels": {"team": "b"}, "env": ["PATH=/usr/bin:/bin", "A=2"], "cwd": "/tmp"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"team": "b"`)
	var after jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &after))
	assert.Equal(t, jail.CommandDefaults{Env: []string{"PATH=/usr/bin:/bin", "A=2"}, Cwd: "/tmp"}, after.Defaults, "the session's document shows its commands' defaults")
	code, b = s.do(t, "GET", "/v1/sessions?label=team=b", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"id": "p1"`)
	code, b = s.do(t, "POST", "/v1/sessions/p1/exec", `{"shell": "echo $A; pwd"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": "2\n/tmp\n"`)
	// A TTL that has passed is refused, naming it; a negative one too.
	code, b = s.do(t, "PATCH", "/v1/sessions/p1", `{"ttl": "1ms"}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	assert.Equal(t, "ttl", apiError(t, b).Field)
	code, b = s.do(t, "PATCH", "/v1/sessions/p1", `{"idle_timeout": "-1s"}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	assert.Equal(t, "idle_timeout", apiError(t, b).Field)
	code, b = s.do(t, "PATCH", "/v1/sessions/p1", `{"cwd": "tmp"}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	code, b = s.do(t, "PATCH", "/v1/sessions/p1", `{"labels": {"": "x"}}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)

	// Touched every 0.5 s for 3 s, twice its idle timeout: still up.
	for range 6 {
		time.Sleep(500 * time.Millisecond)
		code, b = s.do(t, "POST", "/v1/sessions/p1:touch", "")
		require.Equal(t, http.StatusOK, code, "%s", b)
	}
	code, b = s.do(t, "GET", "/v1/sessions/p1", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"state": "running"`)
	// Left alone, it ends, however often it is looked at: GET (whose
	// helper measures the workspace in the jail) is not activity.
	require.Eventually(t, func() bool {
		code, b := s.do(t, "GET", "/v1/sessions/p1", "")
		return code == http.StatusNotFound || strings.Contains(string(b), `"state": "exited"`)
	}, 12*time.Second, 100*time.Millisecond)
	code, b = s.do(t, "POST", "/v1/sessions/p1:touch", "")
	assert.Contains(t, []int{http.StatusNotFound, http.StatusConflict}, code, "%s", b)

	// The deadlines change in PID 1: an idle timeout removed and a TTL of
	// 6 s set keep it up past its old idle timeout and end it at the TTL;
	// a shortened idle timeout ends it sooner than its creation said.
	// (Both count from the session's start, after t0: the margins leave
	// room for a slow machine's create, PATCH and GET.)
	t0 := time.Now()
	code, b = s.do(t, "POST", "/v1/sessions", `{"id": "p2", "idle_timeout": "3s"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "PATCH", "/v1/sessions/p2", `{"idle_timeout": 0, "ttl": "6s"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"ttl_ms": 6000`)
	assert.Contains(t, string(b), `"idle_timeout_ms": 0`)
	time.Sleep(time.Until(t0.Add(3500 * time.Millisecond)))
	code, b = s.do(t, "GET", "/v1/sessions/p2", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"state": "running"`, "the idle timeout it was made with was removed")
	require.Eventually(t, func() bool {
		code, b := s.do(t, "GET", "/v1/sessions/p2", "")
		return code == http.StatusNotFound || strings.Contains(string(b), `"state": "exited"`)
	}, 10*time.Second, 50*time.Millisecond, "the new TTL ends it")

	code, b = s.do(t, "POST", "/v1/sessions", `{"id": "p3", "idle_timeout": "1h"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "PATCH", "/v1/sessions/p3", `{"idle_timeout": "500ms"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.Eventually(t, func() bool {
		code, b := s.do(t, "GET", "/v1/sessions/p3", "")
		return code == http.StatusNotFound || strings.Contains(string(b), `"state": "exited"`)
	}, 5*time.Second, 50*time.Millisecond, "the shorter idle timeout ends it")
}

// TestServeSessionLanguageExec: a language exec in a session: the code
// beside the session's files, compiled by a command of the session, run
// as the exec (waited for, streamed, in the background), and removed; a
// compile error is an exec that ended with compile_error.
func TestServeSessionLanguageExec(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "code"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "PUT", "/v1/sessions/code/files/workspace/data.txt", "from a file of the session\n")
	require.Equal(t, http.StatusCreated, code, "%s", b)

	// Waited for: the program reads the session's file, beside its code.
	code, b = s.do(t, "POST", "/v1/sessions/code/exec", `{"language": "python", "code": "import sys, os\nprint(open('data.txt').read().strip(), sys.argv[1:], os.getcwd())", "argv": ["x"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var res jail.Result
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, "from a file of the session ['x'] /workspace\n", res.Stdout)
	assert.Equal(t, "python", res.Language)
	assert.Equal(t, "code", res.SessionID)

	// Compiled in the session, streamed.
	evs := s.stream(t, "/v1/sessions/code/exec", `{"language": "c", "code": "#include <stdio.h>\nint main(void){ puts(\"compiled in a session\"); return 5; }\n"}`, nil)
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, "exit", last["event"], "%v", evs)
	r := last["result"].(map[string]any)
	assert.Equal(t, "compiled in a session\n", r["stdout"])
	assert.Equal(t, float64(5), r["exit_code"])
	assert.Equal(t, "c", r["language"])
	assert.Equal(t, float64(0), r["compile"].(map[string]any)["exit_code"])

	// A compile error, in the background: an exec that ended.
	x := s.background(t, "code", `{"language": "c", "code": "int main(void){ return nope; }", "background": true}`)
	in := s.execInfo(t, "code", x.ID)
	assert.Equal(t, server.ExecExited, in.State)
	require.NotNil(t, in.Result)
	assert.Equal(t, jail.StatusCompileError, in.Result.Status)
	require.NotNil(t, in.Result.Compile)
	assert.Contains(t, in.Result.Compile.Stderr, "nope")

	// Nothing of the code is left in the session.
	require.Eventually(t, func() bool {
		code, b := s.do(t, "GET", "/v1/sessions/code/files/workspace?list", "")
		return code == http.StatusOK && !strings.Contains(string(b), ".jail-code/") && strings.Contains(string(b), "data.txt")
	}, 10*time.Second, 50*time.Millisecond)
	code, b = s.do(t, "GET", "/v1/sessions/code/files/workspace/.jail-code?list", "")
	if code == http.StatusOK {
		assert.NotContains(t, string(b), `"type":"file"`, "no code left: %s", b)
	}

	for _, tc := range []struct{ body, field string }{
		{`{"language": "cobol", "code": "x"}`, "language"},
		{`{"language": "python"}`, "code"},
		{`{"language": "python", "code": "print(1)", "shell": "true"}`, "shell"},
	} {
		code, b := s.do(t, "POST", "/v1/sessions/code/exec", tc.body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", tc.body, b)
		assert.Equal(t, tc.field, apiError(t, b).Field, tc.body)
	}
}

// TestServeExecsAcrossRestart: a background exec's document outlives its
// server. One that ended is answered by the next server as before (its
// events a lost range, then its exit); one running when the server was
// killed ended with it (nothing of it left in the session) and is
// answered as interrupted; a drain waits for one under way, whose result
// the next server then has.
func TestServeExecsAcrossRestart(t *testing.T) {
	requireRoot(t)
	state := openDir(t)
	s := serve(t, state)
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "rs"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)

	done := s.background(t, "rs", `{"shell": "echo hi; echo there >&2; exit 3", "background": true}`)
	require.Eventually(t, func() bool { return s.execInfo(t, "rs", done.ID).State == server.ExecExited }, 10*time.Second, 20*time.Millisecond)
	before := s.execInfo(t, "rs", done.ID)
	marker, script := sleepMarker(13)
	running := s.background(t, "rs", `{"shell": "`+script+`", "background": true}`)
	requireRunning(t, marker, 1)

	require.NoError(t, s.cmd.Process.Kill()) // a crash
	_ = s.cmd.Wait()
	require.Eventually(t, func() bool { return len(processesMatching(marker)) == 0 }, 5*time.Second, 20*time.Millisecond,
		"the command of an exec outlived its server")

	s2 := serve(t, state)
	after := s2.execInfo(t, "rs", done.ID)
	assert.Equal(t, server.ExecExited, after.State)
	require.NotNil(t, after.Result)
	assert.Equal(t, 3, after.Result.ExitCode)
	assert.Equal(t, "hi\n", after.Result.Stdout)
	assert.Equal(t, "there\n", after.Result.Stderr)
	assert.Equal(t, before.NextSeq, after.NextSeq)
	assert.True(t, before.EndedAt.Equal(*after.EndedAt), "ended at %v, now said %v", before.EndedAt, after.EndedAt)
	evs := s2.events(t, t.Context(), "/v1/sessions/rs/exec/"+done.ID+"/events", nil)
	require.Len(t, evs, 2, "%v", evs)
	assert.Equal(t, "lost", evs[0]["event"])
	assert.Equal(t, "exit", evs[1]["event"])
	assert.EqualValues(t, after.NextSeq-1, evs[1]["seq"])

	cut := s2.execInfo(t, "rs", running.ID)
	assert.Equal(t, server.ExecInterrupted, cut.State)
	require.NotNil(t, cut.Error)
	assert.Equal(t, server.CodeInterrupted, cut.Error.Code)
	assert.Nil(t, cut.Result)
	assert.NotNil(t, cut.EndedAt)
	assert.Equal(t, []string{"/bin/sh", "-c", script}, cut.Argv)
	evs = s2.events(t, t.Context(), "/v1/sessions/rs/exec/"+running.ID+"/events?from=1", nil)
	require.Len(t, evs, 2, "%v", evs)
	assert.Equal(t, "lost", evs[0]["event"])
	assert.Equal(t, "error", evs[1]["event"])
	code, b = s2.do(t, "POST", "/v1/sessions/rs/exec/"+running.ID+"/signal", `{"signal": "TERM"}`)
	assert.Equal(t, http.StatusConflict, code, "%s", b)
	code, b = s2.do(t, "GET", "/v1/sessions/rs/exec", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), done.ID)
	assert.Contains(t, string(b), running.ID)
	// Another tenant, in its own session of the same id, sees none of them.
	code, b = s2.asUser(t, "POST", "/v1/sessions", `{"id": "rs"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s2.asUser(t, "GET", "/v1/sessions/rs/exec/"+done.ID, "")
	assert.Equal(t, http.StatusNotFound, code, "another tenant's: %s", b)
	code, b = s2.asUser(t, "GET", "/v1/sessions/rs/exec", "")
	assert.Equal(t, http.StatusOK, code, "%s", b)
	assert.NotContains(t, string(b), done.ID)
	code, b = s2.asUser(t, "DELETE", "/v1/sessions/rs", "")
	require.Equal(t, http.StatusOK, code, "%s", b)

	// A drain lets a background exec finish.
	late := s2.background(t, "rs", `{"shell": "sleep 1; echo late", "background": true}`)
	s2.stop(t)
	s3 := serve(t, state)
	fin := s3.execInfo(t, "rs", late.ID)
	assert.Equal(t, server.ExecExited, fin.State, "%+v", fin.Error)
	require.NotNil(t, fin.Result)
	assert.Equal(t, "late\n", fin.Result.Stdout)
	cut2 := s3.execInfo(t, "rs", running.ID)
	assert.True(t, cut.EndedAt.Equal(*cut2.EndedAt), "an interrupted exec's end moved at the next restart: %v, then %v", cut.EndedAt, cut2.EndedAt)
	code, b = s3.do(t, "DELETE", "/v1/sessions/rs", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
}

// TestServeExecIdempotent: a retried exec with its Idempotency-Key gets
// the first one's outcome and never runs the command again: a stream
// replays the exec's events from the first, and a waited exec whose client
// went away answers the result of the exec it started (killed with that
// client).
func TestServeExecIdempotent(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "idem"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	ctx := context.Background()
	lines := func(path string) string {
		t.Helper()
		code, b := s.do(t, "POST", "/v1/sessions/idem/exec", `{"argv": ["cat", "`+path+`"]}`)
		require.Equal(t, http.StatusOK, code, "%s", b)
		var res jail.Result
		require.NoError(t, json.Unmarshal(b, &res))
		return res.Stdout
	}

	streamed := func() []map[string]any {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://jail/v1/sessions/idem/exec",
			strings.NewReader(`{"shell": "echo run >> /tmp/streamed; head -c 8 /dev/urandom | od -An -tx1"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/x-ndjson")
		req.Header.Set("Idempotency-Key", "stream-1")
		return s.ndjson(t, req, nil)
	}
	first, again := streamed(), streamed()
	require.NotEmpty(t, first)
	require.Equal(t, "exit", first[len(first)-1]["event"], "%v", first)
	assert.Equal(t, first, again, "the same events, the same random bytes")
	assert.Equal(t, "run\n", lines("/tmp/streamed"), "the command ran once")

	// A waited exec whose client goes away is killed; its retry gets that.
	// The client goes once the command has run (however slow the
	// machine), and the command ran once.
	body := `{"shell": "echo run >> /tmp/waited; sleep 30"}`
	cctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(cctx, "POST", "http://jail/v1/sessions/idem/exec", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "wait-1")
	answered := make(chan error, 1)
	go func() {
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the exec answered %d before its client went", resp.StatusCode)
		}
		answered <- err
	}()
	require.Eventually(t, func() bool {
		code, b := s.do(t, "POST", "/v1/sessions/idem/exec", `{"shell": "cat /tmp/waited 2>/dev/null; exit 0"}`)
		return code == http.StatusOK && strings.Contains(string(b), `"stdout": "run\n"`)
	}, 30*time.Second, 50*time.Millisecond, "the waited exec's command runs")
	cancel()
	require.ErrorIs(t, <-answered, context.Canceled)
	var res jail.Result
	require.Eventually(t, func() bool {
		code, b = s.do(t, "POST", "/v1/sessions/idem/exec", body, "Idempotency-Key", "wait-1")
		if code == http.StatusConflict && apiError(t, b).Code == server.CodeBusy {
			return false // the first is still ending
		}
		require.Equal(t, http.StatusOK, code, "%s", b)
		require.NoError(t, json.Unmarshal(b, &res), "%q", b)
		return true
	}, 20*time.Second, 50*time.Millisecond)
	assert.Equal(t, jail.StatusCanceled, res.Status, "%s", b)
	assert.Equal(t, "run\n", lines("/tmp/waited"), "the command ran once")
}

// TestServeExecLimits: a command's own limits in a session: its CPU time
// (measured in its own cgroup) ends it as cpu_time_exceeded, its output
// limit cuts what its result keeps; a limit that is none is refused, and
// a tenant that is not an admin may not loosen the session's defaults.
func TestServeExecLimits(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "lim"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	var res jail.Result
	code, b = s.do(t, "POST", "/v1/sessions/lim/exec", `{"shell": "while :; do :; done", "timeout": "20s", "limits": {"cpu_time": "300ms"}}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusCPUTimeExceeded, res.Status, "%s", b)
	assert.Less(t, res.WallTimeMS, int64(10000))
	code, b = s.do(t, "POST", "/v1/sessions/lim/exec", `{"shell": "head -c 1000 /dev/zero | tr '\\0' a", "limits": {"output_limit_bytes": 100}}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, int64(1000), res.StdoutBytes)
	assert.True(t, res.StdoutTruncated)
	assert.LessOrEqual(t, len(res.Stdout), 200, "head and tail of at most the limit, with the cut marked")
	for body, field := range map[string]string{
		`{"argv": ["true"], "limits": {"cpu_time": -1}}`:           "limits.cpu_time",
		`{"argv": ["true"], "limits": {"output_limit_bytes": 0}}`:  "limits.output_limit_bytes",
		`{"argv": ["true"], "limits": {"memory_max_bytes": 1000}}`: "limits.memory_max_bytes",
	} {
		code, b = s.do(t, "POST", "/v1/sessions/lim/exec", body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", body, b)
		assert.Equal(t, field, apiError(t, b).Field, body)
	}
	// Another tenant, in its own session: tighten, yes; loosen, no.
	code, b = s.asUser(t, "POST", "/v1/sessions", `{"id": "ulim"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.asUser(t, "DELETE", "/v1/sessions/ulim", "")
	code, b = s.asUser(t, "POST", "/v1/sessions/ulim/exec", `{"argv": ["echo", "hi"], "limits": {"output_limit_bytes": 1}}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	code, b = s.asUser(t, "POST", "/v1/sessions/ulim/exec", fmt.Sprintf(`{"argv": ["true"], "limits": {"output_limit_bytes": %d}}`, jail.DefaultOutputLimitBytes+1))
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "limits.output_limit_bytes", apiError(t, b).Field)
}

// TestServeAllowPatchPolicy: a tenant that is not an admin changes an
// allow-list by PATCH only as it could have made the session: not when it
// may name profiles only, and not in a session of a pool whose spec has
// what only an admin may set (the pool is the tenant's to use, not to
// widen). The refusal changes nothing.
func TestServeAllowPatchPolicy(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	pools := filepath.Join(dir, "pools.yaml")
	require.NoError(t, os.WriteFile(pools, []byte("pools:\n- {name: wide, kind: session, spec: {disable_namespaces: [uts]}, min_ready: 1}\n"), 0o644))
	policy := filepath.Join(dir, "tenants.yaml")
	id := strconv.Itoa(unprivUID)
	require.NoError(t, os.WriteFile(policy, []byte("tenants:\n  \""+id+"\": {pools: [wide]}\n"), 0o644))
	s := serve(t, openDir(t), "--pools", pools, "--tenants", policy)
	require.Eventually(t, func() bool { return s.pools(t)["wide"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)

	code, b := s.asUser(t, "POST", "/v1/sessions", `{"id": "w", "pool": "wide"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.asUser(t, "DELETE", "/v1/sessions/w", "")
	code, b = s.asUser(t, "PATCH", "/v1/sessions/w", `{"allow": ["0.0.0.0/0"], "labels": {"x": "1"}}`)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "allow", apiError(t, b).Field)
	assert.Contains(t, apiError(t, b).Message, "disable_namespaces")
	code, b = s.asUser(t, "GET", "/v1/sessions/w", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.NotContains(t, string(b), `"x": "1"`, "a refused PATCH changes nothing")

	// Its own session passes the tenant's checks; it has no egress to change.
	code, b = s.asUser(t, "POST", "/v1/sessions", `{"id": "own"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.asUser(t, "DELETE", "/v1/sessions/own", "")
	code, b = s.asUser(t, "PATCH", "/v1/sessions/own", `{"allow": ["10.9.9.9:80"], "labels": {"x": "1"}}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	assert.Equal(t, "allow", apiError(t, b).Field)
	code, b = s.asUser(t, "GET", "/v1/sessions/own", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.NotContains(t, string(b), `"x": "1"`, "a refused PATCH changes nothing")

	// A tenant of profiles only (spec: false) may not choose a list at all.
	require.NoError(t, os.WriteFile(policy, []byte("tenants:\n  \""+id+"\": {profiles: [strict], spec: false}\n"), 0o644))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(s.log.String(), "reloaded") }, 10*time.Second, 20*time.Millisecond, "%s", s.log)
	code, b = s.asUser(t, "PATCH", "/v1/sessions/own", `{"allow": ["10.9.9.9:80"]}`)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "allow", apiError(t, b).Field)
}
