// Package server is `jail serve`: jail's HTTP API for runs, sessions, their
// commands (waited for, streamed as NDJSON or SSE events, or in the
// background with replay, stdin and signals: execs.go) and their files,
// over a unix socket whose peers are told apart by their uid (SO_PEERCRED),
// or over TCP with bearer tokens (tenants.go).
//
// Each tenant (peer uid) has its own sessions, snapshots and workspaces, in
// a directory of its own under Config.StateDir: another tenant's session is
// not found (404), whatever its id. The server makes every jail with its
// own privilege, so a tenant that is neither root nor the server's own
// user may set no field that uses it on the host (checkSpec): host paths,
// host ids, fewer namespaces, the host's network, a weaker filter.
//
// Sessions live in the state directory, not in the server: a restarted
// server finds them (and the CLI sees them with `jail session --state-dir
// DIR/tenants/UID/sessions`). Drain (on SIGTERM) refuses new work with 503
// and lets the requests under way finish.
//
// The API, its errors and its events are described in schema/openapi.yaml.
package server

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/runner"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxRuns      = 16
	DefaultMaxStreams   = 64
	DefaultProfile      = "strict"
	// DefaultKeepalive is how often a quiet event stream gets a
	// keepalive event.
	DefaultKeepalive = 15 * time.Second
	// DefaultStreamWriteTimeout bounds each write of a streamed answer:
	// a client that does not read cannot hold a command for ever.
	DefaultStreamWriteTimeout = 30 * time.Second
	// DefaultBodyIdleTimeout and DefaultBodyTimeout: Config's.
	DefaultBodyIdleTimeout = 30 * time.Second
	DefaultBodyTimeout     = time.Minute
	// MaxHeaderBytes bounds a request's line and headers: more is 413
	// PAYLOAD_TOO_LARGE (field "headers"). The http.Server's own bound
	// (HTTPMaxHeaderBytes, which jail serve sets) is higher, so that the
	// answer is the API's and not net/http's bare 431.
	MaxHeaderBytes     = 64 << 10
	HTTPMaxHeaderBytes = 2 * MaxHeaderBytes
)

// Config configures a Server.
type Config struct {
	// StateDir holds the tenants' directories: StateDir/tenants/UID/
	// {sessions,snapshots,workspaces}. Required.
	StateDir string
	// HelperPath is as in jail.Cmd.
	HelperPath string
	// Logger gets one record per request; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes bounds a JSON request body (DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxRuns bounds the runs and commands one tenant has under way at
	// once (DefaultMaxRuns); one more gets 503 CAPACITY.
	MaxRuns int
	// BodyIdleTimeout bounds how long a request's body may send nothing
	// (DefaultBodyIdleTimeout), and BodyTimeout how long a JSON request's
	// body may take in all (DefaultBodyTimeout; a file's body or an
	// exec's stdin has no such bound): a client that stalls or trickles
	// cannot hold a connection and its goroutine for ever.
	BodyIdleTimeout, BodyTimeout time.Duration
	// MaxStreams bounds the followers of exec events (GET .../events)
	// one tenant has open at once (DefaultMaxStreams); one more gets 503
	// CAPACITY. A streamed exec's own answer counts as its run.
	MaxStreams int
	// Version is reported by /v1/info.
	Version string
	// Host is what /v1/info reports of the host (jail check's features);
	// Ready is false when a feature jail needs is missing.
	Host  any
	Ready bool
	// Check, when set, is jail check's probe, which gave Host and Ready:
	// GET /v1/ready runs it again when its last answer is older than
	// CheckInterval (DefaultCheckInterval), so that a host that loses a
	// feature (a sysctl, a cgroup controller) stops taking work, and one
	// that gets it back takes it again; /v1/info reports its last answer.
	Check         func() (host any, ready bool)
	CheckInterval time.Duration
	// Keepalive and StreamWriteTimeout are DefaultKeepalive and
	// DefaultStreamWriteTimeout when 0.
	Keepalive, StreamWriteTimeout time.Duration
	// Policy is the tenants' policy (--tenants); nil: the built-in one.
	Policy *Policy
	// TCPPorts are the TCP ports the server listens on: no jail's egress
	// allow-list may open this host's addresses on them.
	TCPPorts []uint16
	// Pools are the warm pools (--pools); nil: none.
	Pools *PoolsFile
	// Tokens are the bearer tokens a client that is not a unix socket's
	// peer (TCP) must present; nil: such a client is refused (401).
	Tokens *Tokens
	// NetnsPool is how many network namespaces a root server keeps made
	// ahead for its jails (jail.NetnsPool): 0 is
	// jail.DefaultNetnsPoolSize, a negative number none.
	NetnsPool int
	// Private are host paths of the server's own (its unix sockets, its
	// token, policy, pool and TLS files) that no tenant's bind mount may
	// be, lie under or contain; StateDir is one always.
	Private []string
}

// Server serves the API. Make it with New.
type Server struct {
	cfg Config
	// host and hostOK are the last answer of the host check (cfg.Host and
	// cfg.Ready, then cfg.Check's), made at checked.
	hostMu   sync.Mutex
	host     any
	hostOK   bool
	checked  time.Time
	uid      uint32
	draining atomic.Bool
	mu       sync.Mutex
	running  map[string]int // runs and commands under way, per tenant
	streams  map[string]int // followers of exec events open, per tenant
	creating map[string]int // sessions being made, per tenant (their quota)
	m        *metrics
	idem     *idempotency
	execs    execs
	pools    *pools
	netns    *jail.NetnsPool // nil: none (not root, or turned off)
	// tokens and policy are cfg's, replaced by Reload.
	tokens    atomic.Pointer[Tokens]
	policy    atomic.Pointer[Policy]
	private   []string // cfg.Private and StateDir, absolute, symlinks resolved
	lock      *os.File // StateDir/server.lock, held until Close and the last request
	closeOnce sync.Once
	// Requests and execs under way (an exec writes its record in the
	// state directory at its end); once closed, the last one lets go of
	// the lock.
	reqMu   sync.Mutex
	reqs    int
	closing bool
}

// enter counts a request or exec under way.
func (s *Server) enter() {
	s.reqMu.Lock()
	s.reqs++
	s.reqMu.Unlock()
}

// leave counts it done and, after Close, unlocks the state directory if
// it was the last.
func (s *Server) leave() {
	s.reqMu.Lock()
	s.reqs--
	last := s.closing && s.reqs == 0
	s.reqMu.Unlock()
	if last {
		s.unlock()
	}
}

// unlock lets go of the state directory, for the next server.
func (s *Server) unlock() { s.closeOnce.Do(func() { s.lock.Close() }) }

// New makes a Server.
func New(cfg Config) (*Server, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("server: no state directory")
	}
	jail.Preload() // the first request does not pay for the host probes
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.BodyIdleTimeout <= 0 {
		cfg.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := checkStateDir(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("server: state directory %s: %w", cfg.StateDir, err)
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("server: state directory %s: %w", cfg.StateDir, err)
	}
	s := &Server{cfg: cfg, host: cfg.Host, hostOK: cfg.Ready, checked: time.Now(), uid: uint32(os.Geteuid()), running: map[string]int{}, streams: map[string]int{}, creating: map[string]int{}, m: newMetrics(), lock: lock,
		private: privatePaths(append([]string{cfg.StateDir}, cfg.Private...))}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	idem, err := newIdempotency(filepath.Join(cfg.StateDir, "idempotency"), cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("server: idempotency keys: %w", err)
	}
	s.idem = idem
	if err := s.loadExecRecords(); err != nil {
		return nil, fmt.Errorf("server: exec records: %w", err)
	}
	s.tokens.Store(cfg.Tokens)
	s.policy.Store(cfg.Policy)
	s.removeEnded()
	s.m.extra = s.writePoolMetrics
	if cfg.NetnsPool >= 0 && s.uid == 0 {
		var err error
		if s.netns, err = jail.NewNetnsPool(cfg.NetnsPool); err != nil {
			// Not a reason to refuse to serve: each jail makes its own.
			cfg.Logger.Warn("no pool of network namespaces", "err", err)
		}
	}
	s.pools = &pools{byName: map[string]*pool{}}
	if cfg.Pools != nil {
		if err := s.startPools(cfg.Pools); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// removeEnded removes what the sessions that ended while no server ran
// (their TTL, their idle timeout, a kill) left in the state directory:
// their cgroups, state and workspaces, as a tenant's next look at them
// would. Live sessions are left as they are, for their tenants to find.
func (s *Server) removeEnded() {
	tenants, err := os.ReadDir(filepath.Join(s.cfg.StateDir, "tenants"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.cfg.Logger.Warn("ended sessions not removed", "err", err)
		}
		return
	}
	for _, d := range tenants {
		if !d.IsDir() {
			continue
		}
		removed, err := s.sessions(Tenant{Name: d.Name()}).GC()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.cfg.Logger.Warn("ended sessions not all removed", "tenant", d.Name(), "err", err)
		}
		for _, id := range removed {
			s.cfg.Logger.Info("session ended while no server ran: removed", "tenant", d.Name(), "session", id)
		}
	}
}

// Drain makes the server refuse new work (runs, commands, sessions: 503)
// and /v1/ready answer 503; requests under way go on.
func (s *Server) Drain() { s.draining.Store(true) }

// Idle waits until no run or command is under way (background execs
// among them, which no request holds), or ctx ends: a drain's last step.
func (s *Server) Idle(ctx context.Context) error {
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		s.mu.Lock()
		n := len(s.running)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
		}
	}
}

type tenantKey struct{}

// ConnContext records the peer of a unix socket connection in ctx: use it
// as http.Server.ConnContext. A connection whose peer cannot be told is
// refused (401) by every route but health.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	uid, err := peerUID(uc)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, uid)
}

// tenant returns who asks: a unix socket's peer, or the tenant of the
// request's bearer token (Authorization: Bearer TOKEN).
func (s *Server) tenant(r *http.Request) (Tenant, *Error) {
	policy, tokens := s.policy.Load(), s.tokens.Load()
	if uid, ok := r.Context().Value(tenantKey{}).(uint32); ok {
		t := uidTenant(uid, s.uid, policy)
		t.private = s.private
		return t, nil
	}
	if tokens == nil {
		return Tenant{}, apiErr(CodeUnauthenticated, "", "the peer of this connection is unknown: connect to the server's unix socket")
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return Tenant{}, apiErr(CodeUnauthenticated, "", "no bearer token: send Authorization: Bearer TOKEN")
	}
	tok := tokens.lookup(strings.TrimSpace(secret))
	if tok == nil {
		return Tenant{}, apiErr(CodeUnauthenticated, "", "the bearer token is not one of the server's")
	}
	t := tokenTenant(tok, policy)
	t.private = s.private
	return t, nil
}

// sessions is the tenant's session manager.
func (s *Server) sessions(t Tenant) *jail.Sessions {
	dir := filepath.Join(s.cfg.StateDir, "tenants", t.Name)
	return &jail.Sessions{Dir: filepath.Join(dir, "sessions"), SnapshotDir: filepath.Join(dir, "snapshots"),
		WorkspaceDir: filepath.Join(dir, "workspaces"), HelperPath: s.cfg.HelperPath, Logger: s.cfg.Logger}
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, scope string, h func(http.ResponseWriter, *http.Request, Tenant) *Error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			s.enter()
			defer s.leave()
			t0 := time.Now()
			r.Body = s.deadlineBody(w, r)
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			t, e := s.tenant(r)
			switch {
			case headerBytes(r) > MaxHeaderBytes:
				e = apiErr(CodeTooLarge, "headers", "the request line and headers are larger than %d bytes", MaxHeaderBytes)
			case e != nil:
			case scope != "" && !t.has(scope):
				e = apiErr(CodeForbidden, "", "tenant %s has no scope %s, which %s needs", t.Name, scope, pattern)
			default:
				e = s.protect(func() *Error {
					return s.idempotent(rec, r, t, func(w http.ResponseWriter) *Error { return h(w, r, t) })
				})
			}
			if e != nil && !rec.wrote {
				writeError(rec, e)
			}
			s.m.requests.inc(pattern, strconv.Itoa(rec.status))
			attrs := []any{"tenant", t.Name, "method", r.Method, "route", pattern, "status", rec.status, "duration", time.Since(t0)}
			if id := cmp.Or(rec.session, r.PathValue("id")); id != "" {
				attrs = append(attrs, "session", id)
			}
			if id := cmp.Or(rec.exec, r.PathValue("eid")); id != "" {
				attrs = append(attrs, "exec", id)
			}
			if e != nil {
				attrs = append(attrs, "code", e.Code)
			}
			s.cfg.Logger.Info("request", attrs...)
		})
	}
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	for _, rt := range s.routes() {
		route(rt.pattern, rt.scope, rt.h)
	}
	route("GET /metrics", ScopeMetrics, func(w http.ResponseWriter, r *http.Request, _ Tenant) *Error {
		s.m.ServeHTTP(w, r)
		return nil
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(CodeNotFound, "", "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

type routeEntry struct {
	pattern, scope string
	h              func(http.ResponseWriter, *http.Request, Tenant) *Error
}

// routes are the API's routes that need a known peer.
func (s *Server) routes() []routeEntry {
	return []routeEntry{
		{"GET /v1/ready", "", s.ready},
		{"GET /v1/info", "", s.info},
		{"POST /v1/run", ScopeRun, s.run},
		{"POST /v1/runs:batch", ScopeRun, s.runBatch},
		{"GET /v1/pools", ScopeRun, s.listPools},
		{"PUT /v1/pools/{name}", ScopeRun, s.putPool},
		{"DELETE /v1/pools/{name}", ScopeRun, s.deletePool},
		{"POST /v1/sessions", ScopeSessions, s.createSession},
		{"GET /v1/sessions", ScopeSessions, s.listSessions},
		{"DELETE /v1/sessions", ScopeSessions, s.deleteSessions},
		{"GET /v1/sessions/{id}", ScopeSessions, s.getSession},
		{"DELETE /v1/sessions/{id}", ScopeSessions, s.deleteSession},
		{"PATCH /v1/sessions/{id}", ScopeSessions, s.patchSession},
		{"POST /v1/sessions/{action}", ScopeSessions, s.sessionAction},
		{"POST /v1/sessions/{id}/snapshots", ScopeSessions, s.snapshot},
		{"GET /v1/snapshots", ScopeSessions, s.listSnapshots},
		{"GET /v1/snapshots/{sid}", ScopeSessions, s.getSnapshot},
		{"DELETE /v1/snapshots/{sid}", ScopeSessions, s.deleteSnapshot},
		{"GET /v1/snapshots/{sid}/export", ScopeSessions, s.exportSnapshot},
		{"POST /v1/sessions/{id}/exec", ScopeSessions, s.exec},
		{"GET /v1/sessions/{id}/exec", ScopeSessions, s.listExecs},
		{"GET /v1/sessions/{id}/exec/{eid}", ScopeSessions, s.getExec},
		{"GET /v1/sessions/{id}/exec/{eid}/events", ScopeSessions, s.execEvents},
		{"POST /v1/sessions/{id}/exec/{eid}/stdin", ScopeSessions, s.execStdin},
		{"POST /v1/sessions/{id}/exec/{eid}/signal", ScopeSessions, s.execSignal},
		{"PUT /v1/sessions/{id}/files/{path...}", ScopeSessions, s.putFile},
		{"GET /v1/sessions/{id}/files/{path...}", ScopeSessions, s.getFile},
		{"HEAD /v1/sessions/{id}/files/{path...}", ScopeSessions, s.statFile},
		{"DELETE /v1/sessions/{id}/files/{path...}", ScopeSessions, s.deleteFile},
	}
}

// Routes lists every route of the API as "METHOD PATH" (the path as
// net/http's patterns spell it), for the test that ties them to
// schema/openapi.yaml.
func Routes() []string {
	out := []string{"GET /v1/health", "GET /metrics"}
	for _, r := range (&Server{}).routes() {
		out = append(out, r.pattern)
	}
	return out
}

// protect runs h, turning a panic into an INTERNAL error: one request's
// bug does not take the server down.
func (s *Server) protect(h func() *Error) (e *Error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.cfg.Logger.Error("panic", "panic", p)
			e = apiErr(CodeInternal, "", "internal error")
		}
	}()
	return h()
}

// headerBytes is about what r's line and headers took on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 10 // net/http takes Host out of Header
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// deadlineBody wraps r's body so that each read must bring something
// within BodyIdleTimeout; a body read as a JSON request (decode, and an
// Idempotency-Key's copy) must also have come whole within BodyTimeout of
// the request's start (bound), while a file's body or an exec's stdin may
// take as long as it keeps coming. The deadline is the connection's,
// cleared once the body has been read: what the handler does next (wait
// for an exec, stream events) is not bound by it.
func (s *Server) deadlineBody(w http.ResponseWriter, r *http.Request) io.ReadCloser {
	return &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: s.cfg.BodyIdleTimeout,
		start: time.Now(), total: s.cfg.BodyTimeout}
}

type deadlineBody struct {
	io.ReadCloser
	rc           *http.ResponseController
	idle, total  time.Duration
	start, until time.Time // until: zero, or start+total once bound
	ended        bool
}

// boundBody bounds r's body, if deadlineBody made it, to the time a JSON
// request's body may take in all.
func boundBody(r *http.Request) {
	if b, ok := r.Body.(*deadlineBody); ok {
		b.until = b.start.Add(b.total)
	}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.ended {
		return b.ReadCloser.Read(p)
	}
	d := time.Now().Add(b.idle)
	if !b.until.IsZero() && b.until.Before(d) {
		d = b.until
	}
	_ = b.rc.SetReadDeadline(d) // an error (a writer that cannot): the server's own timeouts only
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		// The deadline is left as it is: net/http reads what is left
		// of a body before it answers, and must not wait for it
		// either. The connection is closed after the answer.
		b.ended = true
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = errBodyStalled
		}
	}
	return n, err
}

// errBodyStalled is the error of a read of a body that stalled, or took
// longer in all than a JSON body may.
var errBodyStalled = errors.New("the request body stalled (nothing came in time) or took too long")

// survive, deferred in a goroutine of the server's own (an exec's wait, a
// batch's run, a pool's filler), recovers a panic there: logged with its
// stack, then handled by then (may be nil). Without it one request's bug
// would end the server, and with it every tenant's execs and streams (the
// sessions live on, and the next server re-adopts them). It must be the
// deferred function itself: recover works only there.
func (s *Server) survive(what string, then func()) {
	p := recover()
	if p == nil {
		return
	}
	s.cfg.Logger.Error("panic", "in", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if then != nil {
		then()
	}
}

// testPanic, when a test sets it, is called where the server's own
// goroutines begin their work (testHook; what: "exec", "batch", "pool"),
// to make them panic.
var testPanic atomic.Pointer[func(what string)]

func testHook(what string) {
	if f := testPanic.Load(); f != nil {
		(*f)(what)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// session and exec are the ids a handler made or took (noteIDs),
	// for the request's log line.
	session, exec string
}

// noteIDs tells the request's log line the session and the exec (either
// may be "") a handler made or took, where the path does not name them
// (a session just created, an exec just started). w is the handler's
// ResponseWriter.
func noteIDs(w http.ResponseWriter, session, exec string) {
	for {
		switch r := w.(type) {
		case *statusRecorder:
			if session != "" {
				r.session = session
			}
			if exec != "" {
				r.exec = exec
			}
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = r.Unwrap()
		default:
			return
		}
	}
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// DefaultCheckInterval is how old the host check's answer may be when
// /v1/ready is asked (Config.CheckInterval).
const DefaultCheckInterval = 30 * time.Second

// hostState returns the host check's last answer; with fresh, one no
// older than CheckInterval (Check is run again if it is older; the
// requests that come meanwhile wait for it).
func (s *Server) hostState(fresh bool) (any, bool) {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	if fresh && s.cfg.Check != nil && time.Since(s.checked) >= s.cfg.CheckInterval {
		host, ready := s.cfg.Check()
		if ready != s.hostOK {
			s.cfg.Logger.Warn("host check", "ready", ready)
		}
		s.host, s.hostOK, s.checked = host, ready, time.Now()
	}
	return s.host, s.hostOK
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	_, ready := s.hostState(true)
	switch {
	case s.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "draining"})
	case !ready:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "jail check finds a feature jail needs missing on this host (GET /v1/info)"})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
	}
	return nil
}

// Info is the answer of GET /v1/info.
type Info struct {
	Version  string   `json:"version"`
	Tenant   Tenant   `json:"tenant"`
	Profiles []string `json:"profiles"`
	// Languages are the language runners a run's language may name (the
	// lang-* profiles); `jail languages` says which this host's
	// toolchains serve.
	Languages []string `json:"languages"`
	Host      any      `json:"host"`
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	langs := []string{}
	for _, name := range profiles.Names() {
		if l, ok := strings.CutPrefix(name, "lang-"); ok {
			langs = append(langs, l)
		}
	}
	host, _ := s.hostState(false)
	if host == nil {
		host = []map[string]any{} // an array, as documented, when no check ran (a Server of tests)
	}
	writeJSON(w, http.StatusOK, Info{Version: s.cfg.Version, Tenant: t, Profiles: profiles.Names(), Languages: langs, Host: host})
	return nil
}

// acquire takes one of the tenant's run slots, or answers CAPACITY; the
// caller calls the release it returns.
func (s *Server) acquire(t Tenant) (func(), *Error) {
	if s.draining.Load() {
		return nil, apiErr(CodeCapacity, "", "the server is draining: it takes no new work")
	}
	limit := s.cfg.MaxRuns
	if q := t.Policy.Quotas.Execs; q > 0 {
		limit = q
	}
	return s.take(s.running, t.Name, limit, "runs and commands under way", func(d int) { s.m.inflight.add(float64(d)) })
}

// acquireStream takes one of the tenant's followers of exec events, or
// answers CAPACITY: each holds a connection and a goroutine for as long as
// its client reads, so they are bounded as runs are.
func (s *Server) acquireStream(t Tenant) (func(), *Error) {
	limit := s.cfg.MaxStreams
	if q := t.Policy.Quotas.Streams; q > 0 {
		limit = q
	}
	return s.take(s.streams, t.Name, limit, "event streams open", nil)
}

// take counts one more of a tenant's in counts (runs, streams), under
// s.mu, or answers CAPACITY at limit; then calls on(1), and its release
// on(-1) (nil: nothing).
func (s *Server) take(counts map[string]int, tenant string, limit int, what string, on func(int)) (func(), *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if counts[tenant] >= limit {
		return nil, apiErr(CodeCapacity, "", "tenant %s has %d %s, its limit", tenant, limit, what)
	}
	counts[tenant]++
	if on != nil {
		on(1)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if counts[tenant]--; counts[tenant] == 0 {
			delete(counts, tenant)
		}
		if on != nil {
			on(-1)
		}
	}, nil
}

// reserveSessions takes n of the tenant's sessions quota for sessions
// about to be made, or answers CAPACITY; the caller calls the release it
// returns once they are made (or not).
func (s *Server) reserveSessions(t Tenant, n int) (func(), *Error) {
	if s.draining.Load() {
		return nil, apiErr(CodeCapacity, "", "the server is draining: it takes no new work")
	}
	q := t.Policy.Quotas.Sessions
	if q <= 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.sessions(t).List(nil)
	if err != nil {
		return nil, asAPIError(err, "")
	}
	if have := len(list) + s.creating[t.Name]; have+n > q {
		return nil, apiErr(CodeCapacity, "", "tenant %s has %d sessions, its quota is %d: remove one first", t.Name, have, q)
	}
	s.creating[t.Name] += n
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.creating[t.Name] -= n; s.creating[t.Name] == 0 {
			delete(s.creating, t.Name)
		}
	}, nil
}

// checkSnapshotQuota removes the snapshot id just taken and answers
// INSUFFICIENT_STORAGE when the tenant's snapshots together are now above
// its quota: measured after the fact, since a snapshot's size is known
// only once it is taken. With id "" (before a fork) it answers so when
// they are at the quota already.
func (s *Server) checkSnapshotQuota(t Tenant, id string) *Error {
	q := t.Policy.Quotas.SnapshotBytes
	if q <= 0 {
		return nil
	}
	m := s.sessions(t)
	list, err := m.Snapshots()
	if err != nil {
		return asAPIError(err, "")
	}
	var total int64
	for _, sn := range list {
		total += sn.Bytes
	}
	switch {
	case id == "" && total >= q:
		return apiErr(CodeNoStorage, "", "tenant %s's snapshots take %d bytes, its quota is %d: remove some first", t.Name, total, q)
	case id == "" || total <= q:
		return nil
	}
	if err := m.RemoveSnapshot(id); err != nil {
		s.cfg.Logger.Warn("snapshot above the quota not removed", "tenant", t.Name, "snapshot", id, "err", err)
	}
	return apiErr(CodeNoStorage, "", "tenant %s's snapshots would take %d bytes, its quota is %d: the snapshot is not kept; remove some first", t.Name, total, q)
}

// Command is what a run or a session command runs: argv, or shell (run by
// /bin/sh -c), with stdin as text or base64.
type Command struct {
	Argv     []string      `json:"argv,omitempty"`
	Shell    string        `json:"shell,omitempty"`
	Stdin    *string       `json:"stdin,omitempty"`
	StdinB64 string        `json:"stdin_b64,omitempty"`
	Timeout  jail.Duration `json:"timeout,omitempty"`
}

func (c *Command) args() ([]string, *Error) {
	switch {
	case len(c.Argv) > 0 && c.Shell != "":
		return nil, apiErr(CodeBadRequest, "shell", "give argv or shell, not both")
	case c.Shell != "":
		return []string{"/bin/sh", "-c", c.Shell}, nil
	case len(c.Argv) == 0 || c.Argv[0] == "":
		return nil, apiErr(CodeBadRequest, "argv", "no command: give argv (a non-empty list) or shell")
	}
	return c.Argv, nil
}

func (c *Command) stdin() (io.Reader, *Error) {
	switch {
	case c.Stdin != nil && c.StdinB64 != "":
		return nil, apiErr(CodeBadRequest, "stdin_b64", "give stdin or stdin_b64, not both")
	case c.Stdin != nil:
		return strings.NewReader(*c.Stdin), nil
	case c.StdinB64 != "":
		b, err := base64.StdEncoding.DecodeString(c.StdinB64)
		if err != nil {
			return nil, apiErr(CodeBadRequest, "stdin_b64", "not standard base64: %v", err)
		}
		return strings.NewReader(string(b)), nil
	}
	return nil, nil
}

// RunRequest is the body of POST /v1/run.
type RunRequest struct {
	// Profile is a built-in profile (DefaultProfile when neither it nor
	// Spec is given); Spec a whole Spec instead.
	Profile string     `json:"profile,omitempty"`
	Spec    *jail.Spec `json:"spec,omitempty"`
	// Pool names a warm pool (GET /v1/pools) to run in: its spec, and a
	// member built ahead when one is ready.
	Pool string `json:"pool,omitempty"`
	Command
	// Env entries replace or add to the spec's (KEY=VALUE); Cwd replaces
	// its working directory.
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	// Limits replace the spec's: a run in a warm pool keeps its member
	// when the member's cgroup serves them (they are written into it).
	Limits *RunLimits `json:"limits,omitempty"`
	// Language and Code run a piece of code by a language runner (the
	// profile lang-LANGUAGE, package runner): compiled first in a jail of
	// its own when the language is compiled; argv, when given, are the
	// program's arguments.
	Language string  `json:"language,omitempty"`
	Code     *string `json:"code,omitempty"`
}

// RunLimits are a run's own limits, the Spec's fields of these names; one
// left out keeps the spec's, 0 means none (as in a Spec).
type RunLimits struct {
	MemoryMaxBytes   *int64         `json:"memory_max_bytes,omitempty"`
	SwapMaxBytes     *int64         `json:"swap_max_bytes,omitempty"`
	PidsMax          *int64         `json:"pids_max,omitempty"`
	CPUs             *float64       `json:"cpus,omitempty"`
	CPUTime          *jail.Duration `json:"cpu_time,omitempty"`
	OutputLimitBytes *int64         `json:"output_limit_bytes,omitempty"`
}

// checkLimits refuses, to a tenant that is not an admin, limits that
// loosen base's: a limit base sets may only be lowered (to more than 0,
// which is none), swap only lowered, and the output limit only lowered
// from base's (its default when unset). A limit base does not set may be
// set to anything: that tightens it.
func (r *RunRequest) checkLimits(t Tenant, base jail.Spec) *Error {
	l := r.Limits
	if l == nil || t.Admin {
		return nil
	}
	deny := func(field string, v any, why string) *Error {
		return apiErr(CodeForbidden, "limits."+field, "limits.%s %v: %s; a tenant may only tighten the spec's limits", field, v, why)
	}
	for _, c := range []struct {
		field string
		v     *int64
		base  int64
	}{{"memory_max_bytes", l.MemoryMaxBytes, base.MemoryMaxBytes}, {"pids_max", l.PidsMax, base.PidsMax},
		{"cpu_time", (*int64)(l.CPUTime), int64(base.CPUTime)}} {
		switch {
		case c.v == nil || c.base == 0:
		case *c.v <= 0:
			return deny(c.field, *c.v, "removes the spec's limit")
		case *c.v > c.base:
			return deny(c.field, *c.v, fmt.Sprintf("above the spec's %d", c.base))
		}
	}
	if l.CPUs != nil && base.CPUs > 0 && (*l.CPUs <= 0 || *l.CPUs > base.CPUs) {
		return deny("cpus", *l.CPUs, fmt.Sprintf("want more than 0 and at most the spec's %g", base.CPUs))
	}
	if l.SwapMaxBytes != nil && *l.SwapMaxBytes > base.SwapMaxBytes {
		return deny("swap_max_bytes", *l.SwapMaxBytes, fmt.Sprintf("above the spec's %d", base.SwapMaxBytes))
	}
	if l.OutputLimitBytes != nil {
		max := base.OutputLimitBytes
		if max == 0 {
			max = jail.DefaultOutputLimitBytes
		}
		if *l.OutputLimitBytes <= 0 || *l.OutputLimitBytes > max {
			return deny("output_limit_bytes", *l.OutputLimitBytes, fmt.Sprintf("want more than 0 and at most the spec's %d", max))
		}
	}
	return nil
}

// override applies the request's env, cwd and limits to spec.
func (r *RunRequest) override(spec *jail.Spec) {
	var over jail.Spec
	var set []string
	if len(r.Env) > 0 {
		over.Env, set = r.Env, append(set, "env")
	}
	if r.Cwd != "" {
		over.Cwd, set = r.Cwd, append(set, "cwd")
	}
	if l := r.Limits; l != nil {
		for _, v := range []struct {
			key string
			src *int64
			dst *int64
		}{{"memory_max_bytes", l.MemoryMaxBytes, &over.MemoryMaxBytes}, {"swap_max_bytes", l.SwapMaxBytes, &over.SwapMaxBytes},
			{"pids_max", l.PidsMax, &over.PidsMax}, {"output_limit_bytes", l.OutputLimitBytes, &over.OutputLimitBytes}} {
			if v.src != nil {
				*v.dst, set = *v.src, append(set, v.key)
			}
		}
		if l.CPUs != nil {
			over.CPUs, set = *l.CPUs, append(set, "cpus")
		}
		if l.CPUTime != nil {
			over.CPUTime, set = *l.CPUTime, append(set, "cpu_time")
		}
	}
	*spec = profiles.Apply(*spec, over, set) // the merge rules of profiles and the CLI's flags
}

// specOf returns the Spec a request names: its own, or its profile's (the
// tenant's first allowed one by default, else DefaultProfile).
func specOf(t Tenant, profile string, spec *jail.Spec) (jail.Spec, *Error) {
	if spec != nil {
		if profile != "" {
			return jail.Spec{}, apiErr(CodeBadRequest, "profile", "give profile or spec, not both")
		}
		if !t.Admin && !t.Policy.specAllowed() {
			return jail.Spec{}, apiErr(CodeForbidden, "spec", "tenant %s may name a profile (%s), not send a spec", t.Name, strings.Join(t.Policy.Profiles, ", "))
		}
		return *spec, nil
	}
	if profile == "" {
		profile = DefaultProfile
		if !t.Admin && len(t.Policy.Profiles) > 0 {
			profile = t.Policy.Profiles[0]
		}
	}
	if e := checkProfile(t, profile, "profile"); e != nil {
		return jail.Spec{}, e
	}
	p, err := profiles.Load(profile)
	if err != nil {
		return jail.Spec{}, apiErr(CodeInternal, "", "%v", err)
	}
	return p.Spec, nil
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req RunRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	if req.Pool != "" {
		if req.Profile != "" || req.Spec != nil {
			return apiErr(CodeBadRequest, "pool", "a run in a pool has the pool's spec: give no profile or spec")
		}
		p, spec, e := s.poolFor(t, req.Pool, PoolRun)
		if e != nil {
			return e
		}
		res, e := s.runPooled(r, t, p, spec, &req)
		if e != nil {
			return e
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	if req.Language != "" || req.Code != nil {
		res, e := s.runCode(r.Context(), t, &req)
		if e != nil {
			return e
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	c, e := s.prepareRun(r.Context(), t, &req, "")
	if e != nil {
		return e
	}
	release, e := s.acquire(t)
	if e != nil {
		return e
	}
	defer release()
	res, e := s.runCmd("run", c)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// prepareRun checks a run request and makes its Cmd, with ctx: a client
// that goes away ends the run. at prefixes the fields it names.
func (s *Server) prepareRun(ctx context.Context, t Tenant, req *RunRequest, at string) (*jail.Cmd, *Error) {
	prefix := func(e *Error) *Error {
		if e != nil && at != "" && e.Field != "" {
			e.Field = at + "." + e.Field
		}
		return e
	}
	if req.Pool != "" && at != "" {
		return nil, prefix(apiErr(CodeBadRequest, "pool", "a batch's runs are cold starts: no pool"))
	}
	if req.Language != "" || req.Code != nil {
		return nil, prefix(apiErr(CodeBadRequest, "language", "a language run is POST /v1/run's, not a batch's"))
	}
	spec, e := specOf(t, req.Profile, req.Spec)
	if e != nil {
		return nil, prefix(e)
	}
	if e := req.checkLimits(t, spec); e != nil {
		return nil, prefix(e)
	}
	req.override(&spec)
	if e := checkSpec(t, &spec, "spec"); e != nil {
		return nil, prefix(e)
	}
	if e := s.checkReach(&spec, "spec"); e != nil {
		return nil, prefix(e)
	}
	argv, e := req.args()
	if e != nil {
		return nil, prefix(e)
	}
	stdin, e := req.stdin()
	if e != nil {
		return nil, prefix(e)
	}
	if req.Timeout != 0 {
		spec.Timeout = req.Timeout
	}
	c := jail.Command(ctx, spec, argv[0], argv[1:]...)
	c.Stdin, c.Capture, c.HelperPath, c.Logger, c.NetnsPool = stdin, true, s.cfg.HelperPath, s.cfg.Logger, s.netns
	return c, nil
}

// runCode runs a request's code by its language's runner: the profile
// lang-LANGUAGE with the request's overrides, checked as any run's spec;
// a compile that fails is a result (compile_error), not an error.
func (s *Server) runCode(ctx context.Context, t Tenant, req *RunRequest) (*jail.Result, *Error) {
	switch {
	case req.Language == "":
		return nil, apiErr(CodeBadRequest, "language", "code needs a language (GET /v1/info lists them)")
	case req.Code == nil:
		return nil, apiErr(CodeBadRequest, "code", "missing: the code to run, as text")
	case len(*req.Code) > runner.MaxCodeBytes:
		return nil, apiErr(CodeBadRequest, "code", "%d bytes: at most %d", len(*req.Code), runner.MaxCodeBytes)
	case req.Spec != nil || req.Pool != "":
		return nil, apiErr(CodeBadRequest, "language", "a language run has its runner's profile: give no spec or pool")
	case req.Shell != "":
		return nil, apiErr(CodeBadRequest, "shell", "a language run takes argv (the program's arguments), not shell")
	}
	name := "lang-" + req.Language
	if !slices.Contains(profiles.Names(), name) {
		return nil, apiErr(CodeBadRequest, "language", "no runner %q (GET /v1/info lists them)", req.Language)
	}
	if req.Profile != "" && req.Profile != name {
		return nil, apiErr(CodeBadRequest, "profile", "a language run's profile is %s", name)
	}
	if e := checkProfile(t, name, "language"); e != nil {
		return nil, e
	}
	p, err := profiles.Load(name)
	if err != nil {
		return nil, apiErr(CodeInternal, "", "%v", err)
	}
	spec := p.Spec
	if e := req.checkLimits(t, spec); e != nil {
		return nil, e
	}
	req.override(&spec)
	if e := checkSpec(t, &spec, "spec"); e != nil {
		return nil, e
	}
	if e := s.checkReach(&spec, "spec"); e != nil {
		return nil, e
	}
	stdin, e := req.stdin()
	if e != nil {
		return nil, e
	}
	if req.Timeout != 0 {
		spec.Timeout = req.Timeout
	}
	release, e := s.acquire(t)
	if e != nil {
		return nil, e
	}
	defer release()
	setup := runner.Setup{
		Configure:        func(c *jail.Cmd) { c.HelperPath, c.Logger, c.NetnsPool = s.cfg.HelperPath, s.cfg.Logger, s.netns },
		CompileMemoryMax: t.Policy.Quotas.MemoryMaxBytes, // a tenant's quota bounds its compiles too
	}
	if t.Admin {
		setup.CompileMemoryMax = 0
	}
	job, err := runner.Prepare(ctx, p, spec, []byte(*req.Code), setup)
	if err != nil {
		return nil, asAPIError(err, "spec")
	}
	defer job.Close()
	if job.Failed() {
		res := job.FailedResult()
		s.m.results.inc("run", string(res.Status))
		return res, nil
	}
	c := job.Command(ctx, req.Argv...)
	c.Stdin, c.Capture, c.HelperPath, c.Logger, c.NetnsPool = stdin, true, s.cfg.HelperPath, s.cfg.Logger, s.netns
	res, e := s.runCmd("run", c)
	job.Annotate(res)
	return res, e
}

// BatchRequest is the body of POST /v1/runs:batch.
type BatchRequest struct {
	Runs []RunRequest `json:"runs"`
}

// BatchEntry is one run of a batch: its Result, or its Error.
type BatchEntry struct {
	Result *jail.Result `json:"result,omitempty"`
	Error  *Error       `json:"error,omitempty"`
}

// MaxBatch bounds the runs of one batch.
const MaxBatch = 256

// runBatch serves POST /v1/runs:batch: each run as POST /v1/run would do
// it, several at once (up to half the tenant's runs under way, at least
// one), and one entry per run in order, its result or its error. A run
// that finds no free slot of the tenant's is an entry with CAPACITY.
func (s *Server) runBatch(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req BatchRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	if len(req.Runs) == 0 || len(req.Runs) > MaxBatch {
		return apiErr(CodeBadRequest, "runs", "%d runs: want 1 to %d", len(req.Runs), MaxBatch)
	}
	cmds := make([]*jail.Cmd, len(req.Runs))
	for i := range req.Runs {
		c, e := s.prepareRun(r.Context(), t, &req.Runs[i], "runs["+strconv.Itoa(i)+"]")
		if e != nil {
			return e // nothing has run: the whole batch is refused, naming the run
		}
		cmds[i] = c
	}
	limit := s.cfg.MaxRuns
	if q := t.Policy.Quotas.Execs; q > 0 {
		limit = q
	}
	out := make([]BatchEntry, len(cmds))
	sem := make(chan struct{}, max(1, limit/2))
	var wg sync.WaitGroup
	for i, c := range cmds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			defer s.survive("batch run", func() { out[i].Error = apiErr(CodeInternal, "", "internal error") })
			testHook("batch")
			release, e := s.acquire(t)
			if e != nil {
				out[i].Error = e
				return
			}
			defer release()
			out[i].Result, out[i].Error = s.runCmd("run", c)
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
	return nil
}

// runCmd runs c and returns its Result, or the error that kept it from
// running.
func (s *Server) runCmd(kind string, c *jail.Cmd) (*jail.Result, *Error) {
	t0 := time.Now()
	err := c.Run()
	s.m.duration.observe(time.Since(t0).Seconds(), kind)
	var ie *jail.InitError
	if errors.As(err, &ie) && ie.Step == "execve" && c.Result != nil {
		// The jail was built; the caller's program could not be run (not
		// found, not executable): a result, as a shell's 127 is.
		err = nil
	}
	if err != nil {
		s.m.results.inc(kind, "error")
		return nil, asAPIError(err, "spec")
	}
	s.m.results.inc(kind, string(c.Result.Status))
	return c.Result, nil
}

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	ID          string            `json:"id,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	TTL         jail.Duration     `json:"ttl,omitempty"`
	IdleTimeout jail.Duration     `json:"idle_timeout,omitempty"`
	Workspace   jail.Workspace    `json:"workspace,omitzero"`
	// From makes the session from one of the tenant's snapshots.
	From    string     `json:"from,omitempty"`
	Profile string     `json:"profile,omitempty"`
	Spec    *jail.Spec `json:"spec,omitempty"`
	// Pool names a warm pool of sessions (GET /v1/pools, kind session)
	// to take the session from: its spec and workspace.
	Pool string `json:"pool,omitempty"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req SessionRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	ss := jail.SessionSpec{ID: req.ID, Labels: req.Labels, TTL: time.Duration(req.TTL), IdleTimeout: time.Duration(req.IdleTimeout),
		Workspace: req.Workspace, From: req.From}
	var p *pool
	if req.Pool != "" {
		switch {
		case req.Profile != "" || req.Spec != nil || req.From != "":
			return apiErr(CodeBadRequest, "pool", "a session from a pool has the pool's spec: give no profile, spec or from")
		case req.Workspace != (jail.Workspace{}):
			return apiErr(CodeBadRequest, "workspace", "a session from a pool has the pool's workspace: give none")
		}
		var e *Error
		if p, ss.Spec, e = s.poolFor(t, req.Pool, PoolSession); e != nil {
			return e
		}
		ss.Workspace = p.cfg.Workspace
		if e := s.checkReach(&ss.Spec, "pool"); e != nil {
			return e
		}
	} else if req.From == "" {
		spec, e := specOf(t, req.Profile, req.Spec)
		if e != nil {
			return e
		}
		if req.Spec == nil && req.Workspace.Type != jail.WorkspaceNone {
			spec.Cwd = "" // the workspace, not the profile's /tmp (as jail session create)
		}
		ss.Spec = spec
		if e := checkSpec(t, &ss.Spec, "spec"); e != nil {
			return e
		}
		if e := s.checkReach(&ss.Spec, "spec"); e != nil {
			return e
		}
	} else if req.Profile != "" || req.Spec != nil {
		return apiErr(CodeBadRequest, "from", "a session from a snapshot has the snapshot's spec: give no profile or spec")
	}
	if e := checkWorkspace(t, &ss.Workspace); e != nil {
		return e
	}
	release, e := s.reserveSessions(t, 1)
	if e != nil {
		return e
	}
	defer release()
	if p != nil {
		return s.createPooled(w, r, t, p, ss)
	}
	sess, err := s.sessions(t).Create(r.Context(), ss)
	if err != nil {
		return asAPIError(err, "spec")
	}
	return writeSession(w, http.StatusCreated, sess)
}

// labelsOf reads a request's ?label=KEY=VALUE selectors.
func labelsOf(r *http.Request) (map[string]string, *Error) {
	labels := map[string]string{}
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, apiErr(CodeBadRequest, "label", "label %q: want KEY=VALUE", l)
		}
		labels[k] = v
	}
	return labels, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	labels, e := labelsOf(r)
	if e != nil {
		return e
	}
	state := r.URL.Query().Get("state")
	list, err := s.sessions(t).List(labels)
	if err != nil {
		return asAPIError(err, "")
	}
	out := []*jail.SessionInfo{}
	for _, sess := range list {
		info, err := sess.Inspect()
		if err != nil {
			continue // removed meanwhile
		}
		if state == "" || info.State == state {
			out = append(out, info)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
	return nil
}

// writeSession answers with the session's document.
func writeSession(w http.ResponseWriter, status int, sess *jail.Session) *Error {
	info, err := sess.Inspect()
	if err != nil {
		return asAPIError(err, "")
	}
	noteIDs(w, info.ID, "")
	writeJSON(w, status, info)
	return nil
}

// session finds the tenant's session named by the path.
func (s *Server) session(r *http.Request, t Tenant) (*jail.Session, *Error) {
	id := r.PathValue("id")
	if !jail.ValidSessionID(id) {
		return nil, apiErr(CodeNotFound, "id", "no session %q", id)
	}
	sess, err := s.sessions(t).Get(id)
	if err != nil {
		return nil, asAPIError(err, "")
	}
	return sess, nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	return writeSession(w, http.StatusOK, sess)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	killed, err := sess.Remove()
	if err != nil {
		return asAPIError(err, "")
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": sess.ID(), "removed": true, "killed": killed})
	return nil
}

// deleteSessions removes the tenant's sessions that have the labels
// asked (?label=KEY=VALUE, repeatable), or every one of them with ?all=1:
// one or the other, so that a DELETE with neither wipes nothing. It
// answers each session removed, and each that could not be.
func (s *Server) deleteSessions(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	labels, e := labelsOf(r)
	if e != nil {
		return e
	}
	switch all := r.URL.Query().Get("all"); {
	case all != "" && all != "1":
		return apiErr(CodeBadRequest, "all", "all %q: want 1", all)
	case all == "1" && len(labels) > 0:
		return apiErr(CodeBadRequest, "all", "give all=1 or label selectors, not both")
	case all == "" && len(labels) == 0:
		return apiErr(CodeBadRequest, "all", "DELETE /v1/sessions removes the sessions of ?label=KEY=VALUE, or every session of the tenant with ?all=1")
	}
	list, err := s.sessions(t).List(labels)
	if err != nil {
		return asAPIError(err, "")
	}
	removed, failed := []map[string]any{}, []map[string]any{}
	for _, sess := range list {
		killed, err := sess.Remove()
		switch {
		case errors.Is(err, jail.ErrNotFound): // removed meanwhile
		case err != nil:
			failed = append(failed, map[string]any{"id": sess.ID(), "error": asAPIError(err, "")})
		default:
			removed = append(removed, map[string]any{"id": sess.ID(), "killed": killed})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": removed, "failed": failed})
	return nil
}

// PatchRequest is the body of PATCH /v1/sessions/{id}: labels (replaced),
// the default env and cwd of its commands, and its deadlines: ttl (from
// when it started; 0 removes it) and idle_timeout (from now; 0: none), as
// [jail.SessionUpdate] has them.
type PatchRequest struct {
	jail.SessionUpdate
	TTL         *jail.Duration `json:"ttl,omitempty"`
	IdleTimeout *jail.Duration `json:"idle_timeout,omitempty"`
	// Allow replaces an egress session's allow-list, live (its rules in
	// the kernel are replaced at once; connections open stay): entries as
	// the spec's network.allow, a host name only one the session was made
	// with (it is pinned in its /etc/hosts).
	Allow *[]string `json:"allow,omitempty"`
}

func (s *Server) patchSession(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req PatchRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	if req.TTL != nil {
		d := time.Duration(*req.TTL)
		req.SessionUpdate.TTL = &d
	}
	if req.IdleTimeout != nil {
		d := time.Duration(*req.IdleTimeout)
		req.SessionUpdate.IdleTimeout = &d
	}
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	if req.Allow == nil {
		if err := sess.Update(req.SessionUpdate); err != nil {
			return asAPIError(err, "")
		}
		return writeSession(w, http.StatusOK, sess)
	}
	// As at create: no entry may open the server's own ports, and a tenant
	// that is not an admin sets only a list it could have made the
	// session with (not one of a pool's spec with admin fields, say).
	if e := s.checkAllow(*req.Allow, "allow"); e != nil {
		return e
	}
	spec := sess.Spec() // the session's, as it is now
	was := spec.Network.Allow
	if !t.Admin {
		if !t.Policy.specAllowed() {
			return apiErr(CodeForbidden, "allow", "tenant %s may name a profile (%s), not choose an allow-list", t.Name, strings.Join(t.Policy.Profiles, ", "))
		}
		spec.Network.Allow = slices.Clone(*req.Allow)
		if e := checkSpec(t, &spec, "spec"); e != nil {
			return apiErr(CodeForbidden, "allow", "tenant %s may not make this session's spec (%s), so not change its allow-list", t.Name, e.Message)
		}
	}
	// The list first (it refuses most); the rest after, the list put back
	// if that is refused: a refused PATCH changes nothing.
	if err := sess.SetAllow(*req.Allow); err != nil {
		e := asAPIError(err, "")
		if f, ok := strings.CutPrefix(e.Field, "network.allow"); ok {
			e.Field = "allow" + f // the request's name for it
		}
		return e
	}
	if err := sess.Update(req.SessionUpdate); err != nil {
		if rerr := sess.SetAllow(was); rerr != nil {
			s.cfg.Logger.Error("allow-list not put back after a refused PATCH", "session", sess.ID(), "err", rerr)
		}
		return asAPIError(err, "")
	}
	return writeSession(w, http.StatusOK, sess)
}

// ActionRequest is the body of POST /v1/sessions/{id}:fork (N, default 1)
// and :restore (Snapshot); :pause and :resume take none.
type ActionRequest struct {
	N        int    `json:"n,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

// sessionActions are what POST /v1/sessions/{id}:ACTION does.
var sessionActions = []string{"pause", "resume", "touch", "fork", "restore"}

// MaxForks bounds one :fork.
const MaxForks = 64

// ForkAnswer is the answer of :fork: the snapshot the forks were made
// from, and one entry per fork, its session or its error.
type ForkAnswer struct {
	Snapshot *jail.SnapshotInfo `json:"snapshot"`
	Forks    []ForkEntry        `json:"forks"`
}

// ForkEntry is one fork: Session, or Error.
type ForkEntry struct {
	Session *jail.SessionInfo `json:"session,omitempty"`
	Error   *Error            `json:"error,omitempty"`
}

// sessionAction serves POST /v1/sessions/{id}:pause, :resume, :fork and
// :restore (net/http's patterns take a wildcard only as a whole segment).
func (s *Server) sessionAction(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	id, action, ok := strings.Cut(r.PathValue("action"), ":")
	if !ok {
		return apiErr(CodeNotFound, "", "no route POST %s: a session's actions are :pause, :resume, :touch, :fork and :restore", r.URL.Path)
	}
	r.SetPathValue("id", id)
	var req ActionRequest
	if r.ContentLength != 0 {
		if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
			return e
		}
	}
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	var err error
	switch action {
	case "pause":
		err = sess.Pause()
	case "resume":
		err = sess.Resume()
	case "touch":
		err = sess.Touch()
	case "restore":
		if req.Snapshot == "" {
			return apiErr(CodeBadRequest, "snapshot", "no snapshot to restore")
		}
		err = sess.Restore(r.Context(), req.Snapshot)
	case "fork":
		n := req.N
		if n == 0 {
			n = 1
		}
		if n < 0 || n > MaxForks {
			return apiErr(CodeBadRequest, "n", "n %d: want 1 to %d forks", n, MaxForks)
		}
		release, e := s.reserveSessions(t, n)
		if e != nil {
			return e
		}
		defer release()
		// A fork's snapshot is checked before it is taken, not after:
		// the forks made from it are not undone. It may pass the quota
		// by one snapshot.
		if e := s.checkSnapshotQuota(t, ""); e != nil {
			return e
		}
		snap, forks, err := sess.Fork(r.Context(), n)
		if err != nil {
			return asAPIError(err, "")
		}
		ans := ForkAnswer{Snapshot: snap, Forks: []ForkEntry{}}
		for _, f := range forks {
			if f.Err != nil {
				ans.Forks = append(ans.Forks, ForkEntry{Error: asAPIError(f.Err, "")})
				continue
			}
			info, err := f.Session.Inspect()
			if err != nil {
				ans.Forks = append(ans.Forks, ForkEntry{Error: asAPIError(err, "")})
				continue
			}
			ans.Forks = append(ans.Forks, ForkEntry{Session: info})
		}
		writeJSON(w, http.StatusOK, ans)
		return nil
	default:
		return apiErr(CodeNotFound, "", "no action %q: a session's actions are :pause, :resume, :touch, :fork and :restore", action)
	}
	if err != nil {
		return asAPIError(err, "")
	}
	return writeSession(w, http.StatusOK, sess)
}

// SnapshotRequest is the body of POST /v1/sessions/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req SnapshotRequest
	if r.ContentLength != 0 {
		if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
			return e
		}
	}
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	info, err := sess.Snapshot(r.Context(), req.Name)
	if err != nil {
		return asAPIError(err, "")
	}
	if e := s.checkSnapshotQuota(t, info.ID); e != nil {
		return e
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	list, err := s.sessions(t).Snapshots()
	if err != nil {
		return asAPIError(err, "")
	}
	if list == nil {
		list = []*jail.SnapshotInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshots": list})
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	info, err := s.sessions(t).SnapshotInfo(r.PathValue("sid"))
	if err != nil {
		return asAPIError(err, "")
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	if err := s.sessions(t).RemoveSnapshot(r.PathValue("sid")); err != nil {
		return asAPIError(err, "")
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("sid"), "removed": true})
	return nil
}

func (s *Server) exportSnapshot(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	m := s.sessions(t)
	if _, err := m.SnapshotInfo(r.PathValue("sid")); err != nil {
		return asAPIError(err, "")
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if err := m.ExportSnapshot(r.PathValue("sid"), w); err != nil {
		return asAPIError(err, "") // written only if nothing was: else the stream ends short
	}
	return nil
}

// maxEventData bounds the output one event carries.
const maxEventData = 32 << 10

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// file is the session and the jail path a files route names.
func (s *Server) file(r *http.Request, t Tenant) (string, *jail.Session, *Error) {
	path, e := filePath(r)
	if e != nil {
		return "", nil, e
	}
	sess, e := s.session(r, t)
	return path, sess, e
}

// boolParam: the query parameter name is 1 or true.
func boolParam(q url.Values, name string) bool {
	return q.Get(name) == "1" || q.Get(name) == "true"
}

// filePath is the jail path a files route names.
func filePath(r *http.Request) (string, *Error) {
	p := "/" + r.PathValue("path")
	if strings.Contains(p, "\x00") {
		return "", apiErr(CodeBadRequest, "path", "a path with a NUL byte")
	}
	return p, nil
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	q := r.URL.Query()
	var o jail.WriteOptions
	o.Mkdir, o.Into = boolParam(q, "mkdir"), q.Get("into")
	if m := q.Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o777 {
			return apiErr(CodeBadRequest, "mode", "mode %q: want octal permission bits such as 0644", m)
		}
		o.Mode = os.FileMode(mode)
	}
	path, sess, e := s.file(r, t)
	if e != nil {
		return e
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-tar") {
		info, err := sess.PutTar(r.Context(), path, r.Body, o)
		if err != nil {
			return asAPIError(err, "")
		}
		writeJSON(w, http.StatusCreated, info)
		return nil
	}
	n, err := sess.WriteFile(r.Context(), path, r.Body, o)
	if err != nil {
		return asAPIError(err, "")
	}
	writeJSON(w, http.StatusCreated, map[string]any{"path": path, "bytes": n})
	return nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	path, sess, e := s.file(r, t)
	if e != nil {
		return e
	}
	q := r.URL.Query()
	if q.Has("list") {
		depth := 1
		if d := q.Get("depth"); d != "" {
			n, err := strconv.Atoi(d)
			if err != nil || n < 0 {
				return apiErr(CodeBadRequest, "depth", "depth %q: want a number of levels, 0 for all", d)
			}
			depth = n
		}
		list, err := sess.ReadDir(r.Context(), path, depth)
		if err != nil {
			return asAPIError(err, "")
		}
		writeJSON(w, http.StatusOK, map[string]any{"files": list})
		return nil
	}
	// The stat first, so that a missing file is a 404, not a cut stream.
	fi, err := sess.Stat(r.Context(), path)
	if err != nil {
		return asAPIError(err, "")
	}
	if strings.Contains(r.Header.Get("Accept"), "application/x-tar") {
		w.Header().Set("Content-Type", "application/x-tar")
		if _, err := sess.GetTar(r.Context(), path, w); err != nil {
			return asAPIError(err, "") // written only if nothing was: else the stream ends short
		}
		return nil
	}
	if fi.Type == "dir" {
		return apiErr(CodeBadRequest, "path", "%s is a directory: ask with ?list, or for a tar with Accept: application/x-tar", path)
	}
	if fi.Type != "file" {
		return apiErr(CodeBadRequest, "path", "%s is a %s, not a regular file", path, fi.Type)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	if _, err := sess.ReadFile(r.Context(), path, w); err != nil {
		return asAPIError(err, "")
	}
	return nil
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	path, sess, e := s.file(r, t)
	if e != nil {
		return e
	}
	fi, err := sess.Stat(r.Context(), path)
	if err != nil {
		ae := asAPIError(err, "")
		w.Header().Set("X-Jail-Error-Code", ae.Code) // a HEAD's answer has no body to carry it
		if ae.Field != "" {
			w.Header().Set("X-Jail-Error-Field", ae.Field)
		}
		w.WriteHeader(statusOf[ae.Code])
		return nil
	}
	w.Header().Set("X-Jail-File-Type", fi.Type)
	w.Header().Set("X-Jail-File-Mode", fmt.Sprintf("%04o", jail.UnixMode(fi.Mode)))
	w.Header().Set("X-Jail-File-Uid", strconv.FormatUint(uint64(fi.UID), 10))
	w.Header().Set("X-Jail-File-Gid", strconv.FormatUint(uint64(fi.GID), 10))
	w.Header().Set("X-Jail-File-Mtime", fi.ModTime.UTC().Format(time.RFC3339Nano))
	w.Header().Set("X-Jail-File-Size", strconv.FormatInt(fi.Size, 10)) // Content-Length is a file's only
	if fi.Type == "symlink" {
		w.Header().Set("X-Jail-File-Target", url.PathEscape(fi.Target)) // any bytes: escaped
	}
	w.Header().Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
	if fi.Type == "file" {
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	path, sess, e := s.file(r, t)
	if e != nil {
		return e
	}
	recursive := boolParam(r.URL.Query(), "recursive")
	if err := sess.RemoveFile(r.Context(), path, recursive); err != nil {
		return asAPIError(err, "")
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": path, "removed": true})
	return nil
}
