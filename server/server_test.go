package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/openapitest"
	"github.com/jailrt/jail/mounts"
)

// unixServer serves s on a unix socket, as jail serve does, and returns
// a client for it.
func unixServer(t *testing.T, s *Server) *http.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	hs := &http.Server{Handler: s.Handler(), ConnContext: ConnContext}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return &http.Client{Transport: openapiChecker(t).Transport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}})}
}

var (
	checkerOnce sync.Once
	checker     *openapitest.Checker
)

// openapiChecker checks every answer of a test's client against
// schema/openapi.yaml (read once for the package's tests).
func openapiChecker(t *testing.T) *openapitest.Checker {
	checkerOnce.Do(func() { checker = openapitest.NewChecker(t, "../schema/openapi.yaml") })
	return checker
}

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{StateDir: t.TempDir(), Ready: true, Version: "test"})
	require.NoError(t, err)
	return s
}

func do(t *testing.T, c *http.Client, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://jail"+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func errorOf(t *testing.T, b []byte) *Error {
	t.Helper()
	var eb ErrorBody
	require.NoError(t, json.Unmarshal(b, &eb), "%s", b)
	require.NotNil(t, eb.Error, "%s", b)
	return eb.Error
}

// TestStateDirOneServer: a second Server on a state directory is refused
// while the first has it, naming the first's process, and made once the
// first is closed and its last request has returned; a lock file that is
// a symlink, and a state directory others may write to, are refused.
func TestStateDirOneServer(t *testing.T) {
	dir := t.TempDir()
	first, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	_, err = New(Config{StateDir: dir})
	require.ErrorIs(t, err, ErrStateDirInUse)
	assert.Equal(t, fmt.Sprintf("server: state directory %s: another server has it (pid %d)", dir, os.Getpid()), err.Error())
	first.Close()
	first.Close() // twice: nothing more
	second, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	second.Close()

	other := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "server.lock"), filepath.Join(other, "server.lock")))
	_, err = New(Config{StateDir: other})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrStateDirInUse)
	linked := t.TempDir()
	require.NoError(t, os.Link(filepath.Join(dir, "server.lock"), filepath.Join(linked, "server.lock")))
	_, err = New(Config{StateDir: linked})
	require.ErrorIs(t, err, ErrStateDirUnsafe, "a lock file with another link")
	require.NoError(t, os.Remove(filepath.Join(linked, "server.lock")))

	open := t.TempDir()
	require.NoError(t, os.Chmod(open, 0o777))
	_, err = New(Config{StateDir: open})
	require.ErrorIs(t, err, ErrStateDirUnsafe)
	_, err = os.Lstat(filepath.Join(open, "server.lock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing made in a directory refused")

	// A request under way when the server is closed (an http.Server's
	// Close does not wait for its handlers) keeps the state directory
	// until it returns: here one whose body never comes.
	busy, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	hs := &http.Server{Handler: busy.Handler(), ConnContext: ConnContext}
	go func() { _ = hs.Serve(ln) }()
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	_, err = io.WriteString(c, "POST /v1/run HTTP/1.1\r\nHost: jail\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	require.Eventually(t, func() bool { busy.reqMu.Lock(); defer busy.reqMu.Unlock(); return busy.reqs == 1 }, 5*time.Second, 5*time.Millisecond)
	t.Cleanup(func() { hs.Close() })
	busy.Close()
	_, err = New(Config{StateDir: dir})
	require.ErrorIs(t, err, ErrStateDirInUse, "closed, but a request is under way")
	c.Close() // the handler's read of the body fails
	require.Eventually(t, func() bool {
		s, err := New(Config{StateDir: dir})
		if err == nil {
			s.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the last request returned")
}

// TestBadRequests: malformed and wrong requests get 400 naming the field,
// before anything runs.
func TestBadRequests(t *testing.T) {
	c := unixServer(t, newTestServer(t))
	for _, tc := range []struct {
		body, field, msg string
	}{
		{`{"argv": "id"}`, "argv", "want []string"},
		{`{"argv": ["id"], "bogus": 1}`, "bogus", "unknown field"},
		{`{"argv": ["id"]`, "", "malformed JSON"},
		{`{"argv": ["id"]} {}`, "", "more than one JSON document"},
		{``, "", "empty body"},
		{`{}`, "argv", "no command"},
		{`{"argv": ["id"], "shell": "id"}`, "shell", "not both"},
		{`{"argv": ["id"], "stdin_b64": "!!"}`, "stdin_b64", "base64"},
		{`{"argv": ["id"], "profile": "/etc/jail/mine.yaml"}`, "profile", "built-in"},
		{`{"argv": ["id"], "profile": "strict", "spec": {}}`, "profile", "not both"},
		{`{"argv": ["id"], "timeout": "soon"}`, "", "duration"},
	} {
		code, b := do(t, c, "POST", "/v1/run", tc.body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", tc.body, b)
		e := errorOf(t, b)
		assert.Equal(t, CodeBadRequest, e.Code, tc.body)
		assert.Equal(t, tc.field, e.Field, "%s: %s", tc.body, e.Message)
		assert.Contains(t, e.Message, tc.msg, tc.body)
		assert.False(t, e.Retryable)
	}
	code, b := do(t, c, "POST", "/v1/run", `{"argv": ["`+strings.Repeat("a", DefaultMaxBodyBytes)+`"]}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Equal(t, CodeTooLarge, errorOf(t, b).Code)
	code, b = do(t, c, "GET", "/v1/nothing", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, CodeNotFound, errorOf(t, b).Code)
	code, b = do(t, c, "GET", "/v1/sessions/..%2f..%2fetc", "")
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
}

// TestCheckSpec: a tenant who is not an admin may set no field that uses
// the server's privilege on the host; an admin may.
func TestCheckSpec(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	user, admin := uidTenant(1000, 4242, nil), uidTenant(0, 4242, nil)
	for field, s := range map[string]jail.Spec{
		"spec.root":                    {Root: "/srv/root"},
		"spec.allow_sensitive_sources": {AllowSensitiveSources: jail.AllowAll},
		"spec.host_uid":                {HostUID: u32(0)},
		"spec.host_gid":                {HostGID: u32(0)},
		"spec.disable_namespaces":      {DisableNamespaces: []string{"net"}},
		"spec.network.mode":            {Network: jail.Network{Mode: jail.NetworkHost}},
		"spec.network.pool":            {Network: jail.Network{Mode: jail.NetworkEgress, Pool: "10.50.0.0/16"}},
		"spec.cgroup_parent":           {CgroupParent: "/system.slice"},
		"spec.seccomp":                 {Seccomp: "none"},
		"spec.landlock":                {Landlock: jail.LandlockOff},
		"spec.allow_unenforced":        {AllowUnenforced: true},
		"spec.mounts[1].source":        {Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/scratch"}, {Type: mounts.ROBind, Source: "/etc", Target: "/x"}}},
	} {
		e := checkSpec(user, &s, "spec")
		if assert.NotNil(t, e, field) {
			assert.Equal(t, CodeForbidden, e.Code)
			assert.Equal(t, field, e.Field)
		}
		assert.Nil(t, checkSpec(admin, &s, "spec"), "an admin may: %s", field)
	}
	// A policy file is the server's disk: refused even to a tenant that
	// may set seccomp (to "none"), and so is what only looks like a name.
	allowed := uidTenant(1000, 4242, nil)
	allowed.Policy.AllowFields = []string{"seccomp"}
	for _, name := range []string{"/etc/jail/allow.yaml", "allow.yaml", "../x.json", "permissive"} {
		for _, tn := range []Tenant{user, allowed} {
			s := jail.Spec{Seccomp: name}
			e := checkSpec(tn, &s, "spec")
			if assert.NotNil(t, e, "%s (allow_fields %q)", name, tn.Policy.AllowFields) {
				assert.Equal(t, CodeForbidden, e.Code)
				assert.Equal(t, "spec.seccomp", e.Field)
				assert.Contains(t, e.Message, "reads no policy file")
			}
		}
		s := jail.Spec{Seccomp: name}
		assert.Nil(t, checkSpec(admin, &s, "spec"), "an admin may name a file: %s", name)
	}
	none := jail.Spec{Seccomp: "none"}
	assert.Nil(t, checkSpec(allowed, &none, "spec"), "allow_fields: [seccomp] allows none")
	ok := jail.Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/scratch"}}, MemoryMaxBytes: 64 << 20, Seccomp: "strict",
		Network: jail.Network{Mode: jail.NetworkEgress, Allow: []string{"10.0.0.1:80"}}}
	assert.Nil(t, checkSpec(user, &ok, "spec"), "limits, a tmpfs, a stricter filter, egress")
	assert.NotNil(t, checkWorkspace(user, &jail.Workspace{Type: jail.WorkspaceDir}))
	assert.Nil(t, checkWorkspace(user, &jail.Workspace{Type: jail.WorkspaceTmpfs}))
	assert.Nil(t, checkWorkspace(admin, &jail.Workspace{Type: jail.WorkspaceDir}))
}

// TestUnauthenticated: a connection whose peer is unknown (not a unix
// socket) gets 401 everywhere but health.
func TestUnauthenticated(t *testing.T) {
	ts := httptest.NewServer(newTestServer(t).Handler())
	defer ts.Close()
	resp, err := http.Post(ts.URL+"/v1/run", "application/json", strings.NewReader(`{"argv":["id"]}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, CodeUnauthenticated, errorOf(t, b).Code)
	resp, err = http.Get(ts.URL + "/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestInfoAndReady: the tenant is the peer's uid; ready turns 503 when
// draining, and new work is refused with CAPACITY.
func TestInfoAndReady(t *testing.T) {
	s := newTestServer(t)
	c := unixServer(t, s)
	code, b := do(t, c, "GET", "/v1/info", "")
	require.Equal(t, http.StatusOK, code)
	var info Info
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Contains(t, info.Profiles, "strict")
	assert.Equal(t, "test", info.Version)
	code, _ = do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusOK, code)
	s.Drain()
	code, _ = do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	req, _ := http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(`{"argv":["id"]}`))
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	e := errorOf(t, b)
	assert.Equal(t, CodeCapacity, e.Code)
	assert.True(t, e.Retryable)
}

// TestReadyRechecks: /v1/ready asks the host check again once its answer
// is older than CheckInterval: a host that loses a feature stops taking
// work, and takes it again once the feature is back; /v1/info reports the
// last answer.
func TestReadyRechecks(t *testing.T) {
	var ok atomic.Bool
	var calls atomic.Int32
	ok.Store(true)
	check := func() (any, bool) {
		calls.Add(1)
		return []map[string]any{{"name": "userns", "ok": ok.Load()}}, ok.Load()
	}
	host, ready := check()
	s, err := New(Config{StateDir: t.TempDir(), Version: "test", Host: host, Ready: ready, Check: check, CheckInterval: time.Hour})
	require.NoError(t, err)
	c := unixServer(t, s)
	code, _ := do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusOK, code)
	ok.Store(false)
	code, _ = do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusOK, code, "an answer younger than CheckInterval is kept")
	assert.Equal(t, int32(1), calls.Load())

	s.hostMu.Lock() // read under it
	s.cfg.CheckInterval = time.Nanosecond
	s.hostMu.Unlock()
	code, b := do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusServiceUnavailable, code, "%s", b)
	assert.Contains(t, string(b), "jail check finds a feature")
	_, b = do(t, c, "GET", "/v1/info", "")
	assert.Contains(t, string(b), `"ok": false`, "info reports the last answer")
	ok.Store(true)
	code, _ = do(t, c, "GET", "/v1/ready", "")
	assert.Equal(t, http.StatusOK, code, "the feature is back")
	assert.Equal(t, int32(3), calls.Load())
}

// TestMetricsFormat: /metrics is Prometheus's text format, as its own
// parser reads it.
func TestMetricsFormat(t *testing.T) {
	s := newTestServer(t)
	s.m.requests.inc(`POST /v1/run`, "200")
	s.m.requests.inc(`GET /v1/sessions/{id}`, "404")
	s.m.results.inc("run", "exited")
	s.m.duration.observe(0.005, "run")
	s.m.duration.observe(100, "exec")
	s.m.inflight.add(2)
	rec := httptest.NewRecorder()
	s.m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	assert.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4"))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	require.NoError(t, err, "%s", rec.Body.String())
	require.Contains(t, fams, "jail_runs_total")
	assert.Len(t, fams["jail_http_requests_total"].Metric, 2)
	h := fams["jail_run_duration_seconds"].Metric
	require.Len(t, h, 2)
	for _, m := range h {
		assert.Equal(t, uint64(1), m.GetHistogram().GetSampleCount())
	}
	assert.Equal(t, 2.0, fams["jail_runs_in_flight"].Metric[0].GetGauge().GetValue())
	assert.Contains(t, fams, "process_resident_memory_bytes")
}

// TestOpenAPI ties schema/openapi.yaml to the server: every route is
// documented with its method, every documented operation is a route, and
// the Error schema has the Error struct's fields.
func TestOpenAPI(t *testing.T) {
	doc := openapitest.Load(t, "../schema/openapi.yaml")
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				documented[strings.ToUpper(m)+" "+p] = true
			}
		}
	}
	routes := map[string]bool{}
	for _, r := range Routes() {
		for _, p := range openapitest.Paths(r) {
			routes[p] = true
			assert.True(t, documented[p], "route %s is not in openapi.yaml", p)
		}
	}
	assert.Equal(t, sessionActions, openapitest.SessionActions)
	for op := range documented {
		assert.True(t, routes[op], "openapi.yaml documents %s, which is no route", op)
	}
	props := doc.Components.Schemas["Error"].Properties
	var fields []string
	for f := range props {
		fields = append(fields, f)
	}
	want := []string{}
	typ := reflect.TypeFor[Error]()
	for i := range typ.NumField() {
		want = append(want, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
	}
	assert.ElementsMatch(t, want, fields, "Error's fields")
	codes := doc.Components.Schemas["Error"].Properties["code"].Enum
	for c := range statusOf {
		assert.Contains(t, codes, c, "code %s is documented", c)
	}
	assert.Len(t, codes, len(statusOf))
}

// FuzzRequests: whatever a client sends, decoding and the checks before
// anything runs never panic, and what decodes either passes them or is
// refused with a code of the API.
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{`{"argv":["id"]}`, `{"shell":"id","stdin":"x","timeout":"1s"}`, `{"spec":{"mounts":[{"type":"bind","source":"/","target":"/x"}]},"argv":["a"]}`,
		`{"id":"s1","labels":{"a":"b"},"ttl":3,"workspace":{"type":"dir"}}`, `{"argv":["x"],"env":["A=1","B"],"cwd":"/"}`, `{"argv":[""]}`, `[]`, `{"stdin_b64":"AA=="}`,
		`{"language":"python","code":"print(1)","background":true,"detach":true}`, `{"runs":[{"argv":["a"]},{"shell":"b","profile":"nope"}]}`,
		`{"signal":"sigterm"}`, `{"name":"p","kind":"session","profile":"strict","min_ready":2,"max":1,"max_age":"1s"}`,
		`{"ttl":"1h","idle_timeout":"-1s","env":["A=1"],"cwd":"rel"}`, `{"n":-3,"snapshot":"x"}`, `{"name":"a/b"}`} {
		f.Add([]byte(seed))
	}
	user := uidTenant(1000, 4242, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := func() *http.Request {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
		check := func(e *Error) {
			if e != nil {
				if _, ok := statusOf[e.Code]; !ok {
					t.Fatalf("unknown code %q", e.Code)
				}
			}
		}
		var run RunRequest
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &run); e == nil {
			spec, e := specOf(user, run.Profile, run.Spec)
			check(e)
			if e == nil {
				check(checkSpec(user, &spec, "spec"))
			}
			_, e = run.args()
			check(e)
			_, e = run.stdin()
			check(e)
		} else {
			check(e)
		}
		var sr SessionRequest
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &sr); e == nil {
			check(checkWorkspace(user, &sr.Workspace))
		} else {
			check(e)
		}
		var er ExecRequest
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &er); e == nil {
			argv, e := er.check(user)
			check(e)
			if e == nil && er.Language == "" && er.Code == nil && len(argv) == 0 {
				t.Fatalf("an exec request that checks has no command: %s", body)
			}
		} else {
			check(e)
		}
		var batch BatchRequest
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &batch); e == nil {
			for _, run := range batch.Runs {
				if spec, e := specOf(user, run.Profile, run.Spec); e == nil {
					check(checkSpec(user, &spec, "spec"))
				} else {
					check(e)
				}
				_, e := run.args()
				check(e)
				_, e = run.stdin()
				check(e)
			}
		} else {
			check(e)
		}
		var sig SignalRequest
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &sig); e == nil {
			_, e := signalOf(sig.Signal)
			check(e)
		} else {
			check(e)
		}
		var pool PoolConfig
		if e := decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &pool); e == nil {
			_ = pool.check("") // an error is a 400; a panic is the failure
		} else {
			check(e)
		}
		var patch PatchRequest
		check(decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &patch))
		var action ActionRequest
		check(decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &action))
		var snap SnapshotRequest
		check(decode(req(), httptest.NewRecorder(), DefaultMaxBodyBytes, &snap))
	})
}

// TestIdempotencyKey: a POST with a key is answered once; a retry gets the
// first answer, marked; the key with another request is refused.
func TestIdempotencyKey(t *testing.T) {
	c := unixServer(t, newTestServer(t))
	post := func(body, key string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	r1, b1 := post(`{"argv": []}`, "k-1")
	assert.Equal(t, http.StatusBadRequest, r1.StatusCode)
	assert.Empty(t, r1.Header.Get("Idempotent-Replayed"))
	r2, b2 := post(`{"argv": []}`, "k-1")
	assert.Equal(t, http.StatusBadRequest, r2.StatusCode)
	assert.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, b1, b2)
	r3, b3 := post(`{"argv": [""]}`, "k-1")
	assert.Equal(t, http.StatusBadRequest, r3.StatusCode)
	assert.Equal(t, "Idempotency-Key", errorOf(t, b3).Field)
	assert.Contains(t, errorOf(t, b3).Message, "another request")
	r4, b4 := post(`{"argv": []}`, strings.Repeat("k", 300))
	assert.Equal(t, http.StatusBadRequest, r4.StatusCode)
	assert.Equal(t, "Idempotency-Key", errorOf(t, b4).Field)
	r5, _ := post(`{"argv": []}`, "k-2") // another key: done again
	assert.Empty(t, r5.Header.Get("Idempotent-Replayed"))
}

// TestSurvivePanic: a panic in the server's own goroutine of an exec or of
// a batch's run ends that exec or run with 500 INTERNAL (logged with its
// stack), not the server: the next exec in the same session runs.
func TestSurvivePanic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs jails: needs root")
	}
	var log syncBuf
	s, err := New(Config{StateDir: t.TempDir(), Ready: true, Version: "test", Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	c := unixServer(t, s)
	code, b := do(t, c, "POST", "/v1/sessions", `{"id": "p"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	t.Cleanup(func() { do(t, c, "DELETE", "/v1/sessions/p", "") })
	setPanic := func(f func(string)) { testPanic.Store(&f) }
	setPanic(func(what string) { panic("test panic in " + what) })
	t.Cleanup(func() { testPanic.Store(nil) })

	code, b = do(t, c, "POST", "/v1/sessions/p/exec", `{"argv": ["sleep", "60"]}`)
	assert.Equal(t, http.StatusInternalServerError, code, "%s", b)
	assert.Equal(t, CodeInternal, errorOf(t, b).Code)
	code, b = do(t, c, "POST", "/v1/runs:batch", `{"runs": [{"argv": ["true"]}, {"argv": ["true"]}]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var batch struct{ Runs []BatchEntry }
	require.NoError(t, json.Unmarshal(b, &batch))
	require.Len(t, batch.Runs, 2, "%s", b)
	for _, r := range batch.Runs {
		if assert.NotNil(t, r.Error, "%s", b) {
			assert.Equal(t, CodeInternal, r.Error.Code)
		}
	}
	assert.Contains(t, log.String(), "test panic in exec")
	assert.Contains(t, log.String(), "test panic in batch")
	assert.Contains(t, log.String(), "goroutine ", "the stack")

	// A pool whose first member's making panics: one failure, then the
	// filler goes on and the pool fills.
	var panicked atomic.Bool
	setPanic(func(what string) {
		if what == "pool" && panicked.CompareAndSwap(false, true) {
			panic("test panic in pool")
		}
	})
	pf, err := ParsePools([]byte("pools: [{name: p1, profile: strict, min_ready: 1, max: 2}]"))
	require.NoError(t, err)
	require.NoError(t, s.Reload(nil, nil, pf))
	t.Cleanup(func() { _ = s.Reload(nil, nil, &PoolsFile{}) })
	require.Eventually(t, func() bool {
		code, b := do(t, c, "GET", "/v1/pools", "")
		require.Equal(t, http.StatusOK, code, "%s", b)
		var ans struct{ Pools []PoolInfo }
		require.NoError(t, json.Unmarshal(b, &ans))
		return len(ans.Pools) == 1 && ans.Pools[0].Ready == 1 && ans.Pools[0].Making == 0
	}, 30*time.Second, 50*time.Millisecond, "the pool filled after the panic")
	assert.Contains(t, log.String(), "test panic in pool")

	testPanic.Store(nil)
	code, b = do(t, c, "POST", "/v1/sessions/p/exec", `{"argv": ["echo", "alive"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": "alive\n"`)
	code, b = do(t, c, "GET", "/v1/sessions/p/exec", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.NotContains(t, string(b), `"state": "running"`, "the panicked exec's command was ended")
}

// syncBuf is a bytes.Buffer for a logger written from several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestStreamLimit: a tenant's followers of exec events are bounded
// (MaxStreams, or its policy's quota): one more is 503 CAPACITY with
// Retry-After, and a follower that ends gives its place back.
func TestStreamLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs jails: needs root")
	}
	s, err := New(Config{StateDir: t.TempDir(), Ready: true, Version: "test", MaxStreams: 1})
	require.NoError(t, err)
	c := unixServer(t, s)
	code, b := do(t, c, "POST", "/v1/sessions", `{"id": "st"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	t.Cleanup(func() { do(t, c, "DELETE", "/v1/sessions/st", "") })
	code, b = do(t, c, "POST", "/v1/sessions/st/exec", `{"argv": ["sleep", "60"], "background": true}`)
	require.Equal(t, http.StatusAccepted, code, "%s", b)
	var x ExecInfo
	require.NoError(t, json.Unmarshal(b, &x))
	events := "/v1/sessions/st/exec/" + x.ID + "/events"

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://jail"+events, nil)
	first, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, first.StatusCode)
	resp, err := c.Get("http://jail" + events)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
	assert.Equal(t, CodeCapacity, errorOf(t, b).Code)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	cancel()
	first.Body.Close()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://jail"+events, nil)
		resp, err := c.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the first follower's place")
	code, b = do(t, c, "POST", "/v1/sessions/st/exec/"+x.ID+"/signal", `{"signal": "KILL"}`)
	assert.Equal(t, http.StatusOK, code, "%s", b)
}

// TestSlowBody: a body that stalls for BodyIdleTimeout, or a JSON body
// that trickles for longer than BodyTimeout in all, ends its request with
// 400 naming why, not holding the connection; a waited exec after its
// body (here a run's jail, which would outlive the deadline) is not cut.
func TestSlowBody(t *testing.T) {
	s, err := New(Config{StateDir: t.TempDir(), Ready: true, Version: "test", BodyIdleTimeout: 600 * time.Millisecond, BodyTimeout: 2 * time.Second})
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	hs := &http.Server{Handler: s.Handler(), ConnContext: ConnContext}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	post := func(body string, gap time.Duration) (time.Duration, string) {
		t.Helper()
		conn, err := net.Dial("unix", sock)
		require.NoError(t, err)
		defer conn.Close()
		t0 := time.Now()
		_, err = fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: jail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)+100)
		require.NoError(t, err)
		go func() {
			for i := range len(body) {
				if _, err := conn.Write([]byte{body[i]}); err != nil {
					return
				}
				time.Sleep(gap)
			}
		}()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(conn)
		return time.Since(t0), string(b)
	}
	took, answer := post(`{"argv"`, 0) // then nothing
	assert.Less(t, took, 3*time.Second)
	assert.Contains(t, answer, "HTTP/1.1 400 ")
	assert.Contains(t, answer, "stalled")
	took, answer = post(strings.Repeat(" ", 200), 100*time.Millisecond) // a byte each 0.1 s: never idle (a loaded machine's 0.5 s stall would do)
	assert.Less(t, took, 7*time.Second, "cut at BodyTimeout, not after the 20 s the body would take")
	assert.GreaterOrEqual(t, took, 2*time.Second)
	assert.Contains(t, answer, "HTTP/1.1 400 ")
	assert.Contains(t, answer, "took too long")

	if os.Geteuid() != 0 {
		t.Skip("the rest runs jails: needs root")
	}
	// A run that outlasts both bounds once its body is in; a file that
	// keeps coming for longer than BodyTimeout.
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	code, b := do(t, c, "POST", "/v1/run", `{"argv": ["sleep", "2.5"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"status": "exited"`)
	code, b = do(t, c, "POST", "/v1/sessions", `{"id": "slow"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	t.Cleanup(func() { do(t, c, "DELETE", "/v1/sessions/slow", "") })
	pr, pw := io.Pipe()
	go func() {
		for range 30 {
			_, _ = pw.Write([]byte("x"))
			time.Sleep(100 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", "http://jail/v1/sessions/slow/files/tmp/slow.txt", pr)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode, "3 s of a file that keeps coming: %s", b)
	assert.Contains(t, string(b), `"bytes": 30`)
}

// TestHeadersTooLarge: a request whose headers pass MaxHeaderBytes is
// answered 413 PAYLOAD_TOO_LARGE naming the headers, in the API's error
// shape (net/http alone would answer a bare 431).
func TestHeadersTooLarge(t *testing.T) {
	c := unixServer(t, newTestServer(t))
	req, _ := http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(`{"argv": ["true"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Big", strings.Repeat("a", MaxHeaderBytes))
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", b)
	e := errorOf(t, b)
	assert.Equal(t, CodeTooLarge, e.Code)
	assert.Equal(t, "headers", e.Field)

	// Host counts too (net/http takes it out of the Header map).
	req, _ = http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(`{"argv": ["true"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Host = strings.Repeat("h", MaxHeaderBytes)
	resp, err = c.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", b)
}
