package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/openapitest"
	"github.com/jailrt/jail/server"
)

// served is a real `jail serve` on a unix socket, and a client for it.
type served struct {
	cmd    *exec.Cmd
	sock   string
	state  string
	log    *syncBuffer
	client *http.Client
}

// syncBuffer is a bytes.Buffer that a test may read while a process
// writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serve starts `jail serve` on a socket every user may connect to, with
// its state in state (made the server's alone: jail serve refuses a state
// directory others may write to).
func serve(t *testing.T, state string, flags ...string) *served {
	t.Helper()
	return serveIn(t, nil, state, flags...)
}

// serveIn is serve with jail serve run by wrap (nsenter into a network
// namespace of the test's, say); its socket is a path: reached from here.
func serveIn(t *testing.T, wrap []string, state string, flags ...string) *served {
	t.Helper()
	require.NoError(t, os.Chmod(state, 0o755))
	dir := openDir(t)
	s := &served{sock: filepath.Join(dir, "jail.sock"), state: state, log: &syncBuffer{}}
	argv := append(append(slices.Clone(wrap), jailBin, "serve", "--listen", "unix:"+s.sock, "--state-dir", state, "--socket-mode", "0666", "--grace", "10s"), flags...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	require.NoError(t, s.cmd.Start())
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			_ = s.cmd.Wait()
		}
		// Sessions outlive the server: a failed test's must not.
		dirs, _ := filepath.Glob(filepath.Join(state, "tenants", "*", "sessions"))
		pooled, _ := filepath.Glob(filepath.Join(state, "pools", "*", "sessions"))
		dirs = append(dirs, pooled...)
		for _, d := range dirs {
			list, _ := (&jail.Sessions{Dir: d}).List(nil)
			for _, sess := range list {
				_, _ = sess.Remove()
			}
		}
	})
	// Every answer is checked against what schema/openapi.yaml documents.
	s.client = &http.Client{Transport: openapitest.NewChecker(t, filepath.Join(schemaDir(), "openapi.yaml")).Transport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.sock)
	}})}
	require.Eventually(t, func() bool {
		resp, err := s.client.Get("http://jail/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "jail serve answers: %s", s.log)
	return s
}

// do sends a request with a JSON body (or none) and returns the status and body.
func (s *served) do(t *testing.T, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://jail"+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		// A file's or an exec's stdin bytes; JSON elsewhere.
		ct := "application/json"
		if p, _, _ := strings.Cut(path, "?"); strings.Contains(p, "/files/") || strings.HasSuffix(p, "/stdin") {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// asUser sends a request as the unprivileged user unprivUID, through a
// small Python client on the socket (the tenant is the peer's uid).
func (s *served) asUser(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	script := `
import socket, sys, http.client
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])
c = C("jail"); c.request(sys.argv[2], sys.argv[3], body=sys.argv[4] or None, headers={"Content-Type": "application/json"} if sys.argv[4] else {})
r = c.getresponse(); sys.stdout.write(str(r.status) + "\n"); sys.stdout.flush(); sys.stdout.buffer.write(r.read())`
	id := strconv.Itoa(unprivUID)
	py := "/usr/bin/python3" // Debian's, which every user may run (not a shim in root's home)
	out, err := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", py, "-c", script, s.sock, method, path, body).CombinedOutput()
	require.NoError(t, err, "%s", out)
	code, rest, _ := strings.Cut(string(out), "\n")
	n, err := strconv.Atoi(code)
	require.NoError(t, err, "%s", out)
	return n, []byte(rest)
}

func apiError(t *testing.T, b []byte) *server.Error {
	t.Helper()
	var eb server.ErrorBody
	require.NoError(t, json.Unmarshal(b, &eb), "%s", b)
	require.NotNil(t, eb.Error, "%s", b)
	return eb.Error
}

func TestServeRunsAndSessions(t *testing.T) {
	requireRoot(t)
	state := openDir(t)
	s := serve(t, state)

	// A run: the result document, whatever the exit status.
	code, b := s.do(t, "POST", "/v1/run", `{"shell": "read x; echo got $x; echo oops >&2; exit 3", "stdin": "hi\n"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var res jail.Result
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "got hi\n", res.Stdout)
	assert.Equal(t, "oops\n", res.Stderr)
	code, b = s.do(t, "POST", "/v1/run", `{"argv": ["sleep", "5"], "timeout": "200ms"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusTimedOut, res.Status, "a timeout is a result")
	// A retried run with its Idempotency-Key gets the first result; it
	// does not run again.
	code, first := s.do(t, "POST", "/v1/run", `{"shell": "head -c 16 /dev/urandom | od -An -tx1"}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusOK, code, "%s", first)
	code, again := s.do(t, "POST", "/v1/run", `{"shell": "head -c 16 /dev/urandom | od -An -tx1"}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, string(first), string(again), "the first outcome, not a second run")
	code, other := s.do(t, "POST", "/v1/run", `{"shell": "head -c 16 /dev/urandom | od -An -tx1"}`, "Idempotency-Key", "run-2")
	require.Equal(t, http.StatusOK, code)
	assert.NotEqual(t, string(first), string(other), "another key runs again")
	code, b = s.do(t, "POST", "/v1/run", `{"argv": ["/no/such/program"]}`)
	require.Equal(t, http.StatusOK, code, "a program that cannot be run is a result: %s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusSetupError, res.Status)
	require.NotNil(t, res.Error)
	assert.Equal(t, "execve", res.Error.Step)
	code, b = s.do(t, "POST", "/v1/run", `{"argv": ["id"], "spec": {"memory_max_bytes": -1}}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "spec.memory_max_bytes", apiError(t, b).Field)

	// A session: create, exec (waited for, then streamed), files, list, remove.
	code, b = s.do(t, "POST", "/v1/sessions", `{"id": "s1", "labels": {"team": "a"}, "profile": "strict"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	var info jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, "s1", info.ID)
	assert.Equal(t, jail.SessionRunning, info.State)
	code, b = s.do(t, "POST", "/v1/sessions", `{"id": "s1"}`)
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, server.CodeAlreadyExists, apiError(t, b).Code)

	code, b = s.do(t, "PUT", "/v1/sessions/s1/files/workspace/app/main.sh?mkdir=1&mode=0755", "#!/bin/sh\necho from a file\n")
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/sessions/s1/exec", `{"argv": ["/workspace/app/main.sh"], "env": ["A=1"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, "from a file\n", res.Stdout)
	assert.Equal(t, "s1", res.SessionID)
	code, b = s.do(t, "GET", "/v1/sessions/s1/files/workspace/app/main.sh", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "#!/bin/sh\necho from a file\n", string(b))
	code, b = s.do(t, "GET", "/v1/sessions/s1/files/workspace?list", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"path": "/workspace/app"`)
	code, b = s.do(t, "GET", "/v1/sessions/s1/files/workspace/nope", "")
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, _ = s.do(t, "DELETE", "/v1/sessions/s1/files/workspace/app?recursive=1", "")
	assert.Equal(t, http.StatusOK, code)
	code, _ = s.do(t, "HEAD", "/v1/sessions/s1/files/workspace/app", "")
	assert.Equal(t, http.StatusNotFound, code)

	// Streamed: ordered events, the exit event last with the result.
	events := s.stream(t, "/v1/sessions/s1/exec", `{"shell": "echo one; echo two >&2; printf '\\377'; exit 4"}`, nil)
	require.NotEmpty(t, events)
	assert.Equal(t, "start", events[0]["event"])
	last := events[len(events)-1]
	require.Equal(t, "exit", last["event"], "the last event is exit: %v", events)
	assert.Equal(t, float64(4), last["result"].(map[string]any)["exit_code"])
	var out, errs string
	base64Seen := false
	for i, e := range events {
		assert.Equal(t, float64(i+1), e["seq"], "events in order")
		data, _ := e["data"].(string)
		if e["encoding"] == "base64" {
			b, err := base64.StdEncoding.DecodeString(data)
			require.NoError(t, err)
			data, base64Seen = string(b), true
		}
		switch e["event"] {
		case "stdout":
			out += data
		case "stderr":
			errs += data
		}
	}
	assert.Equal(t, "one\n\xff", out)
	assert.True(t, base64Seen, "bytes that are not UTF-8 come as base64")
	assert.Equal(t, "two\n", errs)
	// The start event's pid is the command's in the session, as it sees
	// its own.
	events = s.stream(t, "/v1/sessions/s1/exec", `{"shell": "echo $$; sleep 0.1"}`, nil)
	require.NotEmpty(t, events)
	require.Equal(t, "start", events[0]["event"])
	require.Contains(t, events[0], "pid", "%v", events[0])
	assert.Equal(t, fmt.Sprintf("%v\n", events[0]["pid"]), events[len(events)-1]["result"].(map[string]any)["stdout"])

	// A client that goes away ends its command: nothing is left running.
	ctx, cancel := context.WithCancel(context.Background())
	s.stream(t, "/v1/sessions/s1/exec", `{"argv": ["sleep", "60"]}`, func(e map[string]any) bool {
		if e["event"] == "start" {
			cancel()
			return false
		}
		return true
	}, ctx)
	require.Eventually(t, func() bool {
		_, b := s.do(t, "GET", "/metrics", "")
		return strings.Contains(string(b), "jail_runs_in_flight 0")
	}, 10*time.Second, 50*time.Millisecond, "the abandoned command ends")
	code, b = s.do(t, "POST", "/v1/sessions/s1/exec", `{"shell": "ps -e -o pid,comm; ps -e -o comm= | grep -c sleep || true"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.True(t, strings.HasSuffix(res.Stdout, "\n0\n"), "no sleep left in the session: %s", res.Stdout)

	// Snapshot, change, restore; fork; pause refuses commands until resume.
	code, b = s.do(t, "PUT", "/v1/sessions/s1/files/workspace/state.txt", "before\n")
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/sessions/s1/snapshots", `{"name": "base"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, _ = s.do(t, "PUT", "/v1/sessions/s1/files/workspace/state.txt", "after\n")
	require.Equal(t, http.StatusCreated, code)
	code, b = s.do(t, "POST", "/v1/sessions/s1:restore", `{"snapshot": "base"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	_, b = s.do(t, "GET", "/v1/sessions/s1/files/workspace/state.txt", "")
	assert.Equal(t, "before\n", string(b), "restored")
	code, b = s.do(t, "POST", "/v1/sessions/s1:fork", `{"n": 2}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var forks server.ForkAnswer
	require.NoError(t, json.Unmarshal(b, &forks))
	require.Len(t, forks.Forks, 2)
	for _, f := range forks.Forks {
		require.NotNil(t, f.Session, "fork: %+v", f.Error)
		_, fb := s.do(t, "GET", "/v1/sessions/"+f.Session.ID+"/files/workspace/state.txt", "")
		assert.Equal(t, "before\n", string(fb), "a fork has the session's files")
		code, _ = s.do(t, "DELETE", "/v1/sessions/"+f.Session.ID, "")
		assert.Equal(t, http.StatusOK, code)
	}
	code, b = s.do(t, "POST", "/v1/sessions/s1:fork", `{"n": 1000}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "n", apiError(t, b).Field)
	code, b = s.do(t, "POST", "/v1/sessions/s1:jump", "")
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/sessions/s1:pause", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"state": "paused"`)
	code, b = s.do(t, "POST", "/v1/sessions/s1/exec", `{"argv": ["true"]}`)
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, server.CodeNotRunning, apiError(t, b).Code)
	code, _ = s.do(t, "POST", "/v1/sessions/s1:resume", "")
	require.Equal(t, http.StatusOK, code)
	code, b = s.do(t, "GET", "/v1/snapshots", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"name": "base"`)
	code, b = s.do(t, "GET", "/v1/snapshots/base/export", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), "workspace/state.txt", "a tar with the workspace's files")
	code, _ = s.do(t, "GET", "/v1/snapshots/nope", "")
	assert.Equal(t, http.StatusNotFound, code)
	code, b = s.asUser(t, "GET", "/v1/snapshots/base", "")
	assert.Equal(t, http.StatusNotFound, code, "another tenant's snapshot: %s", b)

	code, b = s.do(t, "GET", "/v1/sessions?label=team=a", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"id": "s1"`)
	code, b = s.do(t, "GET", "/v1/sessions?label=team=b", "")
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, string(b), `"id": "s1"`)

	// Another tenant sees nothing of it, and may not use the server's
	// privilege.
	code, b = s.asUser(t, "GET", "/v1/sessions/s1", "")
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, b = s.asUser(t, "POST", "/v1/sessions/s1/exec", `{"argv": ["id"]}`)
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, b = s.asUser(t, "GET", "/v1/sessions", "")
	assert.Equal(t, http.StatusOK, code)
	assert.NotContains(t, string(b), "s1")
	for field, spec := range map[string]string{
		"spec.mounts[0].source":   `{"mounts": [{"type": "ro-bind", "source": "/root", "target": "/x"}]}`,
		"spec.seccomp":            `{"seccomp": "none"}`,
		"spec.disable_namespaces": `{"disable_namespaces": ["user"]}`,
	} {
		code, b = s.asUser(t, "POST", "/v1/run", `{"argv": ["id"], "spec": `+spec+`}`)
		assert.Equal(t, http.StatusForbidden, code, "%s: %s", field, b)
		assert.Equal(t, field, apiError(t, b).Field)
	}
	// Nor a seccomp policy file of the server's disk: read as root, it
	// would be any file, and any filter. This one allows what the
	// default policy refuses (a namespace): the server's own user may
	// use it, another tenant may not.
	allow := filepath.Join(openDir(t), "allow.yaml")
	require.NoError(t, os.WriteFile(allow, []byte("description: allows everything\ndefault_action: allow\n"), 0o644))
	unshare := `{"argv": ["unshare", "-U", "true"], "spec": {"seccomp": "` + allow + `"}}`
	code, b = s.do(t, "POST", "/v1/run", unshare)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, 0, res.ExitCode, "the file's policy is in force for the server's own user: %s", b)
	code, b = s.asUser(t, "POST", "/v1/run", unshare)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "spec.seccomp", apiError(t, b).Field)
	assert.Contains(t, apiError(t, b).Message, "reads no policy file")
	// Its own session of the same id is its own.
	code, b = s.asUser(t, "POST", "/v1/sessions", `{"id": "s1"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.asUser(t, "DELETE", "/v1/sessions/s1", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	code, _ = s.do(t, "GET", "/v1/sessions/s1", "")
	require.Equal(t, http.StatusOK, code, "the other tenant's s1 is untouched")
	code, b = s.asUser(t, "POST", "/v1/run", `{"argv": ["id", "-u"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": "1000\n"`)
	code, b = s.do(t, "GET", "/v1/info", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"admin": true`)

	code, b = s.do(t, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `jail_runs_total{kind="exec",status="exited"}`)
	// Every answer this test got, route and status, is in openapi.yaml.
	doc := openapitest.Load(t, filepath.Join(schemaDir(), "openapi.yaml"))
	answers := regexp.MustCompile(`(?m)^jail_http_requests_total\{route="([^"]+)",code="(\d+)"\} `).FindAllStringSubmatch(string(b), -1)
	require.NotEmpty(t, answers)
	for _, a := range answers {
		assert.True(t, doc.Documents(a[1], a[2]), "openapi.yaml does not document %s answering %s", a[1], a[2])
	}
	assert.Contains(t, string(b), `jail_http_requests_total{route="POST /v1/run",code="403"} 4`)

	// Sessions outlive the server: a new one finds s1 and its files.
	code, _ = s.do(t, "PUT", "/v1/sessions/s1/files/workspace/keep.txt", "kept\n")
	require.Equal(t, http.StatusCreated, code)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait(), "a drained server exits 0: %s", s.log)
	s2 := serve(t, state)
	code, b = s2.do(t, "GET", "/v1/sessions/s1/files/workspace/keep.txt", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "kept\n", string(b))
	// So do the Idempotency-Keys: a retry after the restart gets the
	// first result, not a second run.
	code, again = s2.do(t, "POST", "/v1/run", `{"shell": "head -c 16 /dev/urandom | od -An -tx1"}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, string(first), string(again), "the restarted server ran a retried request again")
	code, b = s2.do(t, "DELETE", "/v1/sessions/s1", "")
	assert.Equal(t, http.StatusOK, code, "%s", b)
	code, _ = s2.do(t, "GET", "/v1/sessions/s1", "")
	assert.Equal(t, http.StatusNotFound, code)
}

// stream posts body to path with Accept: application/x-ndjson and returns
// the events, or, with each not nil, calls it for each event until it
// returns false.
func (s *served) stream(t *testing.T, path, body string, each func(map[string]any) bool, ctx ...context.Context) []map[string]any {
	t.Helper()
	c := context.Background()
	if len(ctx) > 0 {
		c = ctx[0]
	}
	req, err := http.NewRequestWithContext(c, "POST", "http://jail"+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	return s.ndjson(t, req, each)
}

// ndjson sends req and reads its NDJSON events, or, with each not nil,
// calls it for each until it returns false.
func (s *served) ndjson(t *testing.T, req *http.Request, each func(map[string]any) bool) []map[string]any {
	t.Helper()
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	var events []map[string]any
	sc := bufio.NewScanner(resp.Body)
	// An output event carries at most 32 KiB; the exit event, the whole
	// result, with its captured head and tail.
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "%s", sc.Bytes())
		events = append(events, e)
		if each != nil && !each(e) {
			return events
		}
	}
	require.NoError(t, sc.Err())
	return events
}

// TestServeStateDirOneServer: a second jail serve on the state directory
// of a running one refuses to start (125, one line naming the first's
// pid), makes no socket, and leaves the first answering; once the first
// is gone, even killed, the next starts on it. A state directory others
// may write to is refused.
func TestServeStateDirOneServer(t *testing.T) {
	state := openDir(t)
	s := serve(t, state)
	other := filepath.Join(openDir(t), "other.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // were it to serve
	defer cancel()
	out, err := exec.CommandContext(ctx, jailBin, "serve", "--listen", "unix:"+other, "--state-dir", state).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, jail.ExitSetupError, ee.ExitCode())
	assert.Contains(t, string(out), fmt.Sprintf("--state-dir: state directory %s: another server has it (pid %d)", state, s.cmd.Process.Pid))
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
	assert.NoFileExists(t, other, "a socket of the refused server")
	code, _ := s.do(t, "GET", "/v1/health", "")
	assert.Equal(t, http.StatusOK, code)

	require.NoError(t, s.cmd.Process.Kill())
	_ = s.cmd.Wait()
	s = serve(t, state)
	code, _ = s.do(t, "GET", "/v1/health", "")
	assert.Equal(t, http.StatusOK, code)

	open := openDir(t) // 0777
	out, err = exec.CommandContext(ctx, jailBin, "serve", "--listen", "unix:"+other, "--state-dir", open).CombinedOutput()
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, jail.ExitSetupError, ee.ExitCode())
	assert.Contains(t, string(out), fmt.Sprintf("--state-dir: state directory %s: not this user's alone: want a directory of uid %d that no one else can write to", open, os.Geteuid()))
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
	assert.NoFileExists(t, other)
	assert.NoFileExists(t, filepath.Join(open, "server.lock"))
}

// TestServeDrain: SIGTERM lets a run under way finish and refuses new work.
func TestServeDrain(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(`{"shell": "sleep 1; echo finished"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.client.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	require.Eventually(t, func() bool {
		_, b := s.do(t, "GET", "/metrics", "")
		return strings.Contains(string(b), "jail_runs_in_flight 1")
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	got := <-done
	assert.True(t, strings.HasPrefix(got, "200 "), "the run under way finishes: %s", got)
	assert.Contains(t, got, `"stdout": "finished\n"`)
	require.NoError(t, s.cmd.Wait(), "%s", s.log)
	_, err := os.Stat(s.sock)
	assert.True(t, os.IsNotExist(err), "the socket is removed")
	assert.Contains(t, s.log.String(), "draining")
}

// TestServeStreamLargeOutput: 1 GiB of a command's output (128 MiB under
// -race) streams through
// the server with its memory bounded (nothing is held but the capture's
// head and tail).
func TestServeStreamLargeOutput(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "big"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	rss := func() int64 { // the server's resident set high-water mark, KiB
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
		require.NoError(t, err)
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				return n
			}
		}
		return -1
	}
	before := rss()
	total := 1 << 30
	if raceEnabled {
		total = 128 << 20 // the same path; the -race pass decodes 8 times slower
	}
	var got int64
	t0 := time.Now()
	events := s.stream(t, "/v1/sessions/big/exec", fmt.Sprintf(`{"shell": "yes 0123456789abcdef0123456789abcde | head -c %d", "timeout": "300s"}`, total), func(e map[string]any) bool {
		if e["event"] == "stdout" {
			got += int64(len(e["data"].(string)))
		}
		return true
	})
	elapsed := time.Since(t0)
	last := events[len(events)-1]
	require.Equal(t, "exit", last["event"], "%v", last)
	assert.Equal(t, int64(total), got, "every byte came")
	res := last["result"].(map[string]any)
	assert.Equal(t, "exited", res["status"])
	assert.Equal(t, float64(total), res["stdout_bytes"])
	assert.Equal(t, true, res["stdout_truncated"], "the result keeps a head and a tail")
	after := rss()
	t.Logf("%d MiB in %v (%.0f MiB/s); server peak RSS %d -> %d KiB", total>>20, elapsed, float64(total)/(1<<20)/elapsed.Seconds(), before, after)
	assert.Less(t, after-before, int64(64<<10), "the server's memory grew by more than 64 MiB for %d MiB streamed", total>>20)
}

// TestServeLoad: 200 commands at once across 20 sessions all run, and
// nothing is left after.
func TestServeLoad(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t), "--max-runs", "200")
	const sessions, execs = 20, 200
	for i := range sessions {
		code, b := s.do(t, "POST", "/v1/sessions", fmt.Sprintf(`{"id": "load%d"}`, i))
		require.Equal(t, http.StatusCreated, code, "%s", b)
	}
	type outcome struct {
		code int
		body string
		took time.Duration
	}
	out := make([]outcome, execs)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range execs {
		wg.Go(func() {
			start := time.Now()
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://jail/v1/sessions/load%d/exec", i%sessions),
				strings.NewReader(fmt.Sprintf(`{"shell": "echo %d", "timeout": "120s"}`, i)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := s.client.Do(req)
			if err != nil {
				out[i] = outcome{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = outcome{resp.StatusCode, string(b), time.Since(start)}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	var took []time.Duration
	for i, o := range out {
		if assert.Equal(t, http.StatusOK, o.code, "exec %d: %s", i, o.body) {
			var res jail.Result
			require.NoError(t, json.Unmarshal([]byte(o.body), &res))
			assert.Equal(t, fmt.Sprintf("%d\n", i), res.Stdout, "exec %d", i)
			assert.Equal(t, jail.StatusExited, res.Status)
		}
		took = append(took, o.took)
	}
	slices.Sort(took)
	t.Logf("%d execs across %d sessions at once: %v in all; latency p50 %v, p99 %v, max %v",
		execs, sessions, wall.Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond),
		took[len(took)*99/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	_, b := s.do(t, "GET", "/metrics", "")
	assert.Contains(t, string(b), "jail_runs_in_flight 0")
	for i := range sessions {
		code, _ := s.do(t, "DELETE", fmt.Sprintf("/v1/sessions/load%d", i), "")
		assert.Equal(t, http.StatusOK, code)
	}
	// Nothing of theirs is left in the state directory either: no
	// session's state or workspace.
	dirs, err := filepath.Glob(filepath.Join(s.state, "tenants", "*", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "the tenant's sessions and workspaces directories")
	left, err := filepath.Glob(filepath.Join(s.state, "tenants", "*", "*", "*"))
	require.NoError(t, err)
	assert.Empty(t, left, "the state directory after the sessions' removal")
	// The suite's host check (TestMain) then finds no process, mount or
	// cgroup of theirs left.
}

// TestServeLanguageRuns: POST /v1/run with a language and code, as an
// agent framework sends a snippet: run (compiled first for C), a compile
// error as a result, bad requests naming their field.
func TestServeLanguageRuns(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))

	code, b := s.do(t, "GET", "/v1/info", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	var info server.Info
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Contains(t, info.Languages, "python")
	assert.Contains(t, info.Languages, "c")

	code, b = s.do(t, "POST", "/v1/run", `{"language": "python", "code": "import sys\nprint('got', sys.stdin.read(), sys.argv[1:])", "stdin": "hi", "argv": ["a"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var res jail.Result
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, "got hi ['a']\n", res.Stdout)
	assert.Equal(t, "python", res.Language)
	assert.Equal(t, "strict", res.Isolation.Seccomp)

	code, b = s.do(t, "POST", "/v1/run", `{"language": "c", "code": "#include <stdio.h>\nint main(void){ puts(\"c ok\"); return 4; }\n"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	res = jail.Result{}
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, "c ok\n", res.Stdout)
	assert.Equal(t, 4, res.ExitCode)
	require.NotNil(t, res.Compile)
	assert.Equal(t, 0, res.Compile.ExitCode)

	code, b = s.do(t, "POST", "/v1/run", `{"language": "c", "code": "int main(void){ return nope; }"}`)
	require.Equal(t, http.StatusOK, code, "a compile error is a result: %s", b)
	res = jail.Result{}
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusCompileError, res.Status)
	assert.Equal(t, 1, res.ExitCode)
	require.NotNil(t, res.Compile)
	assert.Contains(t, res.Compile.Stderr, "nope")

	for _, tc := range []struct{ body, field string }{
		{`{"language": "cobol", "code": "x"}`, "language"},
		{`{"language": "python"}`, "code"},
		{`{"code": "print(1)"}`, "language"},
		{`{"language": "python", "code": "print(1)", "shell": "true"}`, "shell"},
		{`{"language": "python", "code": "print(1)", "spec": {}}`, "language"},
		{`{"runs": [{"language": "python", "code": "print(1)"}]}`, ""},
	} {
		path := "/v1/run"
		if strings.Contains(tc.body, `"runs"`) {
			path, tc.field = "/v1/runs:batch", "runs[0].language"
		}
		code, b := s.do(t, "POST", path, tc.body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", tc.body, b)
		assert.Equal(t, tc.field, apiError(t, b).Field, tc.body)
	}
	assert.Empty(t, codeDirs(t))
}

// TestServeRemovesEnded: what a session that ended while no server ran
// left (its TTL passed: its state directory, its cgroup) is removed by the
// next server's start, before any tenant asks; a live session is left as
// it is.
func TestServeRemovesEnded(t *testing.T) {
	requireRoot(t)
	state := openDir(t)
	s := serve(t, state)
	var ends jail.SessionInfo
	for _, body := range []string{`{"id": "ends", "ttl": "1s"}`, `{"id": "lives"}`} {
		code, b := s.do(t, "POST", "/v1/sessions", body)
		require.Equal(t, http.StatusCreated, code, "%s", b)
		if ends.PID == 0 {
			require.NoError(t, json.Unmarshal(b, &ends))
		}
	}
	require.Positive(t, ends.PID)
	groups := func(id string) []string {
		var out []string
		for _, g := range allJailCgroups() {
			if strings.HasPrefix(filepath.Base(g), "jail-session-") && strings.HasSuffix(g, "-"+id) {
				out = append(out, g)
			}
		}
		return out
	}
	require.NotEmpty(t, groups("ends"))
	dirs, err := filepath.Glob(filepath.Join(state, "tenants", "*", "sessions", "ends"))
	require.NoError(t, err)
	require.Len(t, dirs, 1)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait())
	requirePidGoneWithin(t, ends.PID, 10*time.Second) // the TTL passes while no server runs
	require.DirExists(t, dirs[0], "nothing else removes it")
	require.NotEmpty(t, groups("ends"), "nor its group")

	s = serve(t, state)
	assert.NoDirExists(t, dirs[0])
	assert.Empty(t, groups("ends"))
	assert.Contains(t, s.log.String(), "session ended while no server ran: removed")
	code, b := s.do(t, "GET", "/v1/sessions/lives", "")
	assert.Equal(t, http.StatusOK, code, "%s", b)
}

// TestServeLogs: with --log-format json, one JSON line per request with
// the tenant, method, route, status and duration, and the session and
// exec ids a request made (a session just created, an exec just started)
// or named; never anything of a workload's output.
func TestServeLogs(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t), "--log-format", "json")
	code, b := s.do(t, "POST", "/v1/sessions", `{}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	var info jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &info))
	code, b = s.do(t, "POST", "/v1/sessions/"+info.ID+"/exec", `{"argv": ["echo", "SECRET-OUTPUT-7"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	bg := s.background(t, info.ID, `{"argv": ["echo", "SECRET-OUTPUT-8"], "background": true}`)
	_ = s.events(t, context.Background(), "/v1/sessions/"+info.ID+"/exec/"+bg.ID+"/events", nil)

	type line struct {
		Msg, Tenant, Method, Route, Session, Exec string
		Status                                    int
		Duration                                  any
	}
	var lines []line
	require.Eventually(t, func() bool {
		lines = nil
		for _, l := range strings.Split(s.log.String(), "\n") {
			var v line
			if l != "" && json.Unmarshal([]byte(l), &v) == nil && v.Msg == "request" {
				lines = append(lines, v)
			}
		}
		return len(lines) >= 4
	}, 5*time.Second, 20*time.Millisecond)
	byRoute := map[string][]line{}
	for _, l := range lines {
		assert.NotEmpty(t, l.Tenant, "%+v", l)
		assert.NotEmpty(t, l.Method, "%+v", l)
		assert.NotZero(t, l.Status, "%+v", l)
		assert.NotNil(t, l.Duration, "%+v", l)
		byRoute[l.Route] = append(byRoute[l.Route], l)
	}
	require.Len(t, byRoute["POST /v1/sessions"], 1, "%+v", lines)
	assert.Equal(t, info.ID, byRoute["POST /v1/sessions"][0].Session, "the session it made")
	execs := byRoute["POST /v1/sessions/{id}/exec"]
	require.Len(t, execs, 2, "%+v", lines)
	for _, l := range execs {
		assert.Equal(t, info.ID, l.Session)
		assert.Regexp(t, `^x[0-9a-f]{12}$`, l.Exec, "the exec it started")
	}
	assert.Equal(t, bg.ID, execs[1].Exec)
	events := byRoute["GET /v1/sessions/{id}/exec/{eid}/events"]
	require.Len(t, events, 1, "%+v", lines)
	assert.Equal(t, bg.ID, events[0].Exec)
	assert.NotContains(t, s.log.String(), "SECRET-OUTPUT", "a workload's output is never logged")
}

// TestServeEndpoints: answers the other tests do not reach, against a real
// jail serve: a directory put and got as tar, a HEAD of a file and of a
// missing one, stdin_b64, sessions by state, 409 BUSY for a key whose
// request is under way, 507 for a snapshot past the tenant's quota.
func TestServeEndpoints(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	policy := filepath.Join(dir, "tenants.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default:\n  quotas: {snapshot_bytes: 4096}\n"), 0o644))
	s := serve(t, openDir(t), "--tenants", policy)
	for _, id := range []string{"e1", "e2"} {
		code, b := s.do(t, "POST", "/v1/sessions", `{"id": "`+id+`"}`)
		require.Equal(t, http.StatusCreated, code, "%s", b)
	}

	// A tar in, the same files out.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	code, b := s.do(t, "PUT", "/v1/sessions/e1/files/tmp/tree?mkdir=1", tb.String(), "Content-Type", "application/x-tar")
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "GET", "/v1/sessions/e1/files/tmp/tree", "", "Accept", "application/x-tar")
	require.Equal(t, http.StatusOK, code, "%s", b)
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			body, err := io.ReadAll(tr)
			require.NoError(t, err)
			got[strings.TrimPrefix(h.Name, "./")] = string(body)
		}
	}
	assert.Equal(t, map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"}, got)

	// HEAD: headers only, an error's code in one.
	head := func(path string) *http.Response {
		req, err := http.NewRequest("HEAD", "http://jail"+path, nil)
		require.NoError(t, err)
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := head("/v1/sessions/e1/files/tmp/tree/a.txt")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "file", resp.Header.Get("X-Jail-File-Type"))
	assert.Equal(t, "6", resp.Header.Get("X-Jail-File-Size"))
	assert.Equal(t, "0644", resp.Header.Get("X-Jail-File-Mode"))
	resp = head("/v1/sessions/e1/files/tmp/none")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, server.CodeNotFound, resp.Header.Get("X-Jail-Error-Code"))
	assert.Equal(t, "path", resp.Header.Get("X-Jail-Error-Field"))
	resp = head("/v1/sessions/none/files/tmp")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, server.CodeNotFound, resp.Header.Get("X-Jail-Error-Code"))

	// stdin_b64: bytes that are not text.
	code, b = s.do(t, "POST", "/v1/sessions/e1/exec", `{"argv": ["od", "-An", "-tx1"], "stdin_b64": "AP8KgA=="}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": " 00 ff 0a 80\n"`)

	// Sessions by state.
	code, b = s.do(t, "POST", "/v1/sessions/e2:pause", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	code, b = s.do(t, "GET", "/v1/sessions?state=paused", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"id": "e2"`)
	assert.NotContains(t, string(b), `"id": "e1"`)
	code, b = s.do(t, "GET", "/v1/sessions?state=running", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"id": "e1"`)
	assert.NotContains(t, string(b), `"id": "e2"`)

	// A retry while the first is under way: 409 BUSY, retryable.
	// The first runs the command; once its exec runs (the key was taken
	// before), the same request is BUSY; after it, the first's answer.
	busy := `{"shell": "echo run >> /workspace/busy; sleep 3"}`
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, b := s.do(t, "POST", "/v1/sessions/e1/exec", busy, "Idempotency-Key", "busy-1")
		assert.Equal(t, http.StatusOK, code, "%s", b)
	}()
	require.Eventually(t, func() bool {
		_, b := s.do(t, "GET", "/v1/sessions/e1/exec", "")
		return strings.Contains(string(b), `"state": "running"`)
	}, 10*time.Second, 20*time.Millisecond, "the first exec runs")
	code, b = s.do(t, "POST", "/v1/sessions/e1/exec", busy, "Idempotency-Key", "busy-1")
	require.Equal(t, http.StatusConflict, code, "%s", b)
	e := apiError(t, b)
	assert.Equal(t, server.CodeBusy, e.Code)
	assert.True(t, e.Retryable)
	<-done
	code, b = s.do(t, "POST", "/v1/sessions/e1/exec", busy, "Idempotency-Key", "busy-1")
	assert.Equal(t, http.StatusOK, code, "after it, its answer: %s", b)
	code, b = s.do(t, "GET", "/v1/sessions/e1/files/workspace/busy", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Equal(t, "run\n", string(b), "the command ran once")

	// A snapshot past the tenant's snapshot_bytes: 507, and not kept.
	code, b = s.do(t, "PUT", "/v1/sessions/e1/files/workspace/big", strings.Repeat("x", 64<<10))
	require.Equal(t, http.StatusCreated, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/sessions/e1/snapshots", `{"name": "big"}`)
	assert.Equal(t, http.StatusInsufficientStorage, code, "%s", b)
	assert.Equal(t, server.CodeNoStorage, apiError(t, b).Code)
	code, b = s.do(t, "GET", "/v1/snapshots", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.NotContains(t, string(b), `"name": "big"`)
}

// TestServeUnenforceable: a limit the server's user cannot enforce (an
// unprivileged server, no cgroup delegated) is 422 UNENFORCEABLE, listing
// the limit with why and the fix; nothing runs. As root the same run has
// its limit.
func TestServeUnenforceable(t *testing.T) {
	s := serve(t, openDir(t))
	code, b := s.do(t, "POST", "/v1/run", `{"argv": ["true"], "spec": {"memory_max_bytes": 67108864}}`)
	if !unprivileged {
		require.Equal(t, http.StatusOK, code, "%s", b)
		var res jail.Result
		require.NoError(t, json.Unmarshal(b, &res))
		assert.Equal(t, jail.StatusExited, res.Status)
		assert.Empty(t, res.Isolation.NotEnforced)
		return
	}
	require.Equal(t, http.StatusUnprocessableEntity, code, "%s", b)
	e := apiError(t, b)
	assert.Equal(t, server.CodeUnenforceable, e.Code)
	require.Len(t, e.Unenforceable, 1, "%s", b)
	assert.Equal(t, "memory", e.Unenforceable[0].What)
	assert.NotEmpty(t, e.Unenforceable[0].Reason)
	assert.NotEmpty(t, e.Unenforceable[0].Fix)
}

// TestServeDeleteSessions: DELETE /v1/sessions removes the tenant's
// sessions of some labels, or all of them with ?all=1 (one or the other:
// neither is refused), and never another tenant's.
func TestServeDeleteSessions(t *testing.T) {
	requireRoot(t)
	s := serve(t, openDir(t))
	for _, body := range []string{`{"id": "a1", "labels": {"team": "a"}}`, `{"id": "a2", "labels": {"team": "a"}}`, `{"id": "b1", "labels": {"team": "b"}}`} {
		code, b := s.do(t, "POST", "/v1/sessions", body)
		require.Equal(t, http.StatusCreated, code, "%s", b)
	}
	code, b := s.asUser(t, "POST", "/v1/sessions", `{"id": "u1", "labels": {"team": "a"}}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.asUser(t, "DELETE", "/v1/sessions/u1", "")
	_, b = s.do(t, "POST", "/v1/sessions/a1/exec", `{"argv": ["sleep", "60"], "background": true}`)

	for path, field := range map[string]string{"/v1/sessions": "all", "/v1/sessions?all=yes": "all",
		"/v1/sessions?all=1&label=team=a": "all", "/v1/sessions?label=team": "label"} {
		code, b = s.do(t, "DELETE", path, "")
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", path, b)
		assert.Equal(t, field, apiError(t, b).Field, path)
	}
	var out struct {
		Removed []struct {
			ID     string `json:"id"`
			Killed int    `json:"killed"`
		} `json:"removed"`
		Failed []any `json:"failed"`
	}
	// A label's empty value selects the sessions that have it empty, not
	// those without it.
	code, b = s.do(t, "DELETE", "/v1/sessions?label=owner=", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Empty(t, out.Removed, "no session has the label owner")
	code, b = s.do(t, "DELETE", "/v1/sessions?label=team=a", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Empty(t, out.Failed)
	var ids []string
	for _, r := range out.Removed {
		ids = append(ids, r.ID)
	}
	assert.ElementsMatch(t, []string{"a1", "a2"}, ids, "team a's, not the other tenant's u1")
	code, _ = s.do(t, "GET", "/v1/sessions/b1", "")
	assert.Equal(t, http.StatusOK, code, "team b's stays")

	code, b = s.do(t, "DELETE", "/v1/sessions?all=1", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &out))
	require.Len(t, out.Removed, 1)
	assert.Equal(t, "b1", out.Removed[0].ID)
	code, b = s.do(t, "GET", "/v1/sessions", "")
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"sessions": []}`, string(b))
	code, b = s.asUser(t, "GET", "/v1/sessions/u1", "")
	assert.Equal(t, http.StatusOK, code, "another tenant's session is untouched: %s", b)
}
