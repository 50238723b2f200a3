package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

// TestParsePolicy: a policy file is read strictly; each mistake is named.
func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`
default:
  quotas: {sessions: 2, execs: 3}
tenants:
  "1000":
    profiles: [strict]
    spec: false
  ci:
    bind_roots: [{path: /srv/data, writable: true}]
    allow_fields: [network.mode, seccomp]
    scopes: [run]
`))
	require.NoError(t, err)
	assert.Equal(t, 2, p.policyOf("1001").Quotas.Sessions, "the default")
	assert.Equal(t, []string{"strict"}, p.policyOf("1000").Profiles)
	assert.Zero(t, p.policyOf("1000").Quotas.Sessions, "a named tenant does not inherit the default")
	assert.Equal(t, []string{ScopeRun}, uidTenant(1000, 0, &Policy{Tenants: map[string]TenantPolicy{"1000": {Scopes: []string{ScopeRun}}}}).Scopes)
	assert.Equal(t, allScopes, uidTenant(1000, 0, p).Scopes)
	for bad, want := range map[string]string{
		`tenants: {"1000": {quota: {}}}`:                    `unknown field "quota"`,
		`tenants: {"Bob": {}}`:                              "tenants.Bob",
		`tenants: {"01000": {}}`:                            "tenants.01000",
		`tenants: {a: {scopes: [root]}}`:                    "tenants.a.scopes",
		`tenants: {a: {profiles: [/etc/x.yaml]}}`:           "tenants.a.profiles",
		`tenants: {a: {bind_roots: [{path: srv}]}}`:         "tenants.a.bind_roots[0].path",
		`tenants: {a: {bind_roots: [{path: /}]}}`:           "tenants.a.bind_roots[0].path",
		`tenants: {a: {bind_roots: [{path: /srv/../etc}]}}`: "tenants.a.bind_roots[0].path",
		`tenants: {a: {allow_fields: [mounts]}}`:            "tenants.a.allow_fields",
		`default: {quotas: {sessions: -1}}`:                 "default.quotas.sessions",
		`tenants: {a: {quotas: {memory_max_bytes: "1G"}}}`:  "memory_max_bytes",
	} {
		_, err := ParsePolicy([]byte(bad))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
}

// TestParseTokens: a token file holds hashes; a lookup finds the tenant
// of a token, and nothing for any other string.
func TestParseTokens(t *testing.T) {
	tok, err := ParseTokens([]byte("tokens:\n- sha256: " + HashToken("s3cret") + "\n  tenant: ci\n  scopes: [run]\n"))
	require.NoError(t, err)
	if got := tok.lookup("s3cret"); assert.NotNil(t, got) {
		assert.Equal(t, "ci", got.Tenant)
	}
	assert.Nil(t, tok.lookup("s3cret "))
	assert.Nil(t, tok.lookup(HashToken("s3cret")), "the hash is not the token")
	assert.Nil(t, tok.lookup(""))
	h := HashToken("x")
	for bad, want := range map[string]string{
		"tokens: []": "none",
		"tokens:\n- {sha256: abc, tenant: a, scopes: [run]}":                                                        "tokens[0].sha256",
		"tokens:\n- {sha256: " + h + ", tenant: A, scopes: [run]}":                                                  "tokens[0].tenant",
		"tokens:\n- {sha256: " + h + ", tenant: 1000, scopes: [run]}":                                               "tokens[0].tenant",
		"tokens:\n- {sha256: " + h + ", tenant: a, scopes: []}":                                                     "tokens[0].scopes",
		"tokens:\n- {sha256: " + h + ", tenant: a, scopes: [all]}":                                                  "tokens[0].scopes",
		"tokens:\n- {sha256: " + h + ", tenant: a, scopes: [run]}\n- {sha256: " + h + ", tenant: b, scopes: [run]}": "tokens[1].sha256: listed twice",
		"tokens:\n- {sha256: " + h + ", tenant: a, scopes: [run], admin: true}":                                     `unknown field "admin"`,
	} {
		_, err := ParseTokens([]byte(bad))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
}

// TestBindRoots: a tenant may bind only what resolves under one of its
// bind roots, read-write only under a writable one; a symlink under a root
// that leads out of it is refused; the checked path is what is mounted.
func TestBindRoots(t *testing.T) {
	base := t.TempDir()
	ro, rw, out := filepath.Join(base, "ro"), filepath.Join(base, "rw"), filepath.Join(base, "out")
	for _, d := range []string{ro, rw, out, filepath.Join(ro, "data")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.Symlink(out, filepath.Join(ro, "escape")))
	require.NoError(t, os.Symlink("data", filepath.Join(ro, "inside")))
	require.NoError(t, os.MkdirAll(ro+"x", 0o755)) // a sibling whose name starts with the root's
	user := uidTenant(1000, 4242, &Policy{Default: &TenantPolicy{BindRoots: []BindRoot{{Path: ro}, {Path: rw, Writable: true}}}})
	spec := func(typ mounts.Type, src string) *jail.Spec {
		return &jail.Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/t"}, {Type: typ, Source: src, Target: "/x"}}}
	}
	for _, c := range []struct {
		typ      mounts.Type
		src, got string
	}{
		{mounts.ROBind, ro + "/data", ro + "/data"},
		{mounts.ROBind, ro, ro},
		{mounts.ROBind, ro + "/inside", ro + "/data"},
		{mounts.Bind, rw, rw},
		{mounts.ROBind, rw, rw},
	} {
		s := spec(c.typ, c.src)
		assert.Nil(t, checkSpec(user, s, "spec"), "%s %s", c.typ, c.src)
		assert.Equal(t, c.got, s.Mounts[1].Source)
	}
	for _, c := range []struct {
		typ       mounts.Type
		src, want string
	}{
		{mounts.ROBind, out, "under none"},
		{mounts.ROBind, ro + "/escape", "resolves to " + out},
		{mounts.ROBind, ro + "/data/../../out", "under none"},
		{mounts.ROBind, ro + "x", "under none"},
		{mounts.ROBind, "/etc", "under none"},
		{mounts.Bind, ro + "/data", "only read-only binds"},
		{mounts.ROBind, ro + "/nothing", "does not exist"},
		{mounts.ROBind, "data", "absolute"},
	} {
		e := checkSpec(user, spec(c.typ, c.src), "spec")
		if assert.NotNil(t, e, "%s %s", c.typ, c.src) {
			assert.Equal(t, CodeForbidden, e.Code)
			assert.Equal(t, "spec.mounts[1].source", e.Field)
			assert.Contains(t, e.Message, c.want)
		}
	}
	e := checkSpec(uidTenant(1000, 4242, nil), spec(mounts.ROBind, ro), "spec")
	if assert.NotNil(t, e) {
		assert.Contains(t, e.Message, "no bind_roots")
	}

	// The server's own paths under a bind root (its state directory, a
	// socket not made yet, reached through a symlink of its directory):
	// neither they, what lies under them, nor a directory above them.
	state, sock := filepath.Join(rw, "state"), filepath.Join(rw, "run", "jail.sock")
	require.NoError(t, os.MkdirAll(filepath.Join(state, "tenants"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Dir(sock), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(rw, "run"), filepath.Join(base, "run-link")))
	user.private = privatePaths([]string{state, filepath.Join(base, "run-link", "jail.sock")})
	for _, src := range []string{state, state + "/tenants", rw, filepath.Dir(sock)} {
		e := checkSpec(user, spec(mounts.ROBind, src), "spec")
		if assert.NotNil(t, e, src) {
			assert.Equal(t, "spec.mounts[1].source", e.Field)
			assert.Contains(t, e.Message, "no jail may reach the server")
		}
	}
	assert.Nil(t, checkSpec(user, spec(mounts.ROBind, ro+"/data"), "spec"), "elsewhere under the roots")
}

// TestTenantPolicy: allow_fields lets exactly the named fields through;
// profiles bound what may be named, spec: false a whole spec; the memory
// and workspace quotas bound and fill in.
func TestTenantPolicy(t *testing.T) {
	pol := &Policy{Tenants: map[string]TenantPolicy{
		"1000": {AllowFields: []string{"seccomp", "workspace.type"}, Quotas: Quotas{MemoryMaxBytes: 256 << 20, WorkspaceBytes: 32 << 20}},
		"1001": {Profiles: []string{"default"}, Spec: new(false)},
	}}
	a, b := uidTenant(1000, 4242, pol), uidTenant(1001, 4242, pol)
	s := jail.Spec{Seccomp: "none"}
	assert.Nil(t, checkSpec(a, &s, "spec"))
	assert.Equal(t, int64(256<<20), s.MemoryMaxBytes, "the quota fills an unset limit")
	e := checkSpec(a, &jail.Spec{Landlock: jail.LandlockOff}, "spec")
	if assert.NotNil(t, e) {
		assert.Equal(t, "spec.landlock", e.Field)
	}
	e = checkSpec(a, &jail.Spec{MemoryMaxBytes: 1 << 30}, "spec")
	if assert.NotNil(t, e) {
		assert.Equal(t, "spec.memory_max_bytes", e.Field)
		assert.Contains(t, e.Message, "quota")
	}
	w := jail.Workspace{}
	assert.Nil(t, checkWorkspace(a, &w))
	assert.Equal(t, int64(32<<20), w.SizeBytes)
	assert.Nil(t, checkWorkspace(a, &jail.Workspace{Type: jail.WorkspaceDir, SizeBytes: 1 << 20}), "allowed")
	e = checkWorkspace(a, &jail.Workspace{SizeBytes: 64 << 20})
	if assert.NotNil(t, e) {
		assert.Equal(t, "workspace.size_bytes", e.Field)
	}

	_, e = specOf(b, "strict", nil)
	if assert.NotNil(t, e) {
		assert.Equal(t, CodeForbidden, e.Code)
		assert.Equal(t, "profile", e.Field)
	}
	_, e = specOf(b, "", &jail.Spec{})
	if assert.NotNil(t, e) {
		assert.Equal(t, "spec", e.Field)
	}
	_, e = specOf(b, "", nil)
	assert.Nil(t, e, "the tenant's first profile is its default")
	_, e = specOf(b, "/etc/jail/x.yaml", nil)
	if assert.NotNil(t, e) {
		assert.Equal(t, CodeBadRequest, e.Code)
	}
}

// TestTokenAuth: over TCP, a request without a token, or with another,
// is 401; a token's scopes bound its routes (403); a token's tenant has
// its own sessions; health needs nothing.
func TestTokenAuth(t *testing.T) {
	tokens, err := ParseTokens([]byte("tokens:\n- {sha256: " + HashToken("tok-a") + ", tenant: alpha, scopes: [sessions]}\n"))
	require.NoError(t, err)
	s, err := New(Config{StateDir: t.TempDir(), Ready: true, Tokens: tokens})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = io.Copy(&sb, resp.Body)
		return resp.StatusCode, sb.String()
	}
	code, _ := get("/v1/health", "")
	assert.Equal(t, http.StatusOK, code)
	for _, tok := range []string{"", "tok-b", HashToken("tok-a")} {
		code, b := get("/v1/sessions", tok)
		assert.Equal(t, http.StatusUnauthorized, code, "token %q", tok)
		assert.Contains(t, b, CodeUnauthenticated)
	}
	code, b := get("/v1/sessions", "tok-a")
	assert.Equal(t, http.StatusOK, code, b)
	code, b = get("/v1/info", "tok-a")
	assert.Equal(t, http.StatusOK, code, b)
	assert.Contains(t, b, `"name": "alpha"`)
	code, b = get("/metrics", "tok-a")
	assert.Equal(t, http.StatusForbidden, code, "no metrics scope: %s", b)
	req, _ := http.NewRequest("POST", ts.URL+"/v1/run", strings.NewReader(`{"argv":["true"]}`))
	req.Header.Set("Authorization", "Bearer tok-a")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no run scope")
}

// TestCheckReach: with the server on a TCP port, no allow entry may open
// this host's addresses on that port, whoever asks.
func TestCheckReach(t *testing.T) {
	s, err := New(Config{StateDir: t.TempDir(), TCPPorts: []uint16{8443}})
	require.NoError(t, err)
	egress := func(allow ...string) *jail.Spec {
		return &jail.Spec{Network: jail.Network{Mode: jail.NetworkEgress, Allow: allow}}
	}
	for _, bad := range []string{"127.0.0.1:8443", "127.0.0.1", "127.0.0.0/8:8000-9000", "tcp/127.0.0.1:8443"} {
		e := s.checkReach(egress("10.1.2.3:80", bad), "spec")
		if assert.NotNil(t, e, bad) {
			assert.Equal(t, CodeForbidden, e.Code)
			assert.Equal(t, "spec.network.allow[1]", e.Field)
		}
	}
	// 0.0.0.0/0 opens the internet, never this host (the egress rules
	// open it only to an entry of one of its addresses).
	for _, ok := range []string{"127.0.0.1:8080", "udp/127.0.0.1:8443", "10.1.2.3:8443", "example.invalid:8443", "0.0.0.0/0", "0.0.0.0/0:8443"} {
		assert.Nil(t, s.checkReach(egress(ok), "spec"), ok)
	}
	s.cfg.TCPPorts = nil
	assert.Nil(t, s.checkReach(egress("127.0.0.1:8443"), "spec"), "no TCP listener")
}

// TestParsePools: a pools file is read strictly, with defaults filled in;
// each mistake is named.
func TestParsePools(t *testing.T) {
	f, err := ParsePools([]byte("pools:\n- {name: py, profile: strict, min_ready: 3}\n- {name: big, spec: {memory_max_bytes: 1048576}, min_ready: 1, max: 1, max_age: 1s}\n"))
	require.NoError(t, err)
	require.Len(t, f.Pools, 2)
	assert.Equal(t, 6, f.Pools[0].Max, "twice min_ready")
	assert.Equal(t, jail.Duration(DefaultPoolMaxAge), f.Pools[0].MaxAge)
	assert.Equal(t, 1, f.Pools[1].Max)
	assert.Equal(t, PoolRun, f.Pools[0].Kind, "the default kind")
	f, err = ParsePools([]byte("pools:\n- {name: s, kind: session, profile: strict, min_ready: 1}\n"))
	require.NoError(t, err)
	assert.Equal(t, jail.WorkspaceTmpfs, f.Pools[0].Workspace.Type, "a session pool's default workspace")
	for bad, want := range map[string]string{
		"pools: [{name: a, kind: vm, profile: strict, min_ready: 1}]":                                 "pools[0].kind",
		"pools: [{name: a, profile: strict, min_ready: 1, workspace: {type: tmpfs}}]":                 "pools[0].workspace",
		"pools: [{name: a, kind: session, profile: strict, min_ready: 1, workspace: {type: dir}}]":    "pools[0].workspace.type",
		"pools: [{name: Py, profile: strict, min_ready: 1}]":                                          "pools[0].name",
		"pools: [{name: a, profile: strict, min_ready: 1}, {name: a, profile: strict, min_ready: 1}]": "named twice",
		"pools: [{name: a, min_ready: 1}]":                                                            "profile or spec",
		"pools: [{name: a, profile: strict, spec: {}, min_ready: 1}]":                                 "profile or spec",
		"pools: [{name: a, profile: /etc/p.yaml, min_ready: 1}]":                                      "pools[0].profile",
		"pools: [{name: a, profile: strict, min_ready: 0}]":                                           "pools[0].min_ready",
		"pools: [{name: a, profile: strict, min_ready: 4, max: 2}]":                                   "pools[0].max",
		"pools: [{name: a, spec: {memory_max_bytes: -1}, min_ready: 1}]":                              "pools[0].spec",
		"pools: [{name: a, profile: strict, min_ready: 1, size: 3}]":                                  `unknown field "size"`,
	} {
		_, err := ParsePools([]byte(bad))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), want, bad)
		}
	}
}

// TestReleasable: a pool's member runs a request whose spec differs from
// the pool's only in what a release may change, limits among them only
// where the member's cgroup serves them.
func TestReleasable(t *testing.T) {
	pool := jail.Spec{MemoryMaxBytes: 256 << 20, PidsMax: 64, Timeout: jail.Duration(time.Second)}
	ms := func(d time.Duration) jail.Duration { return jail.Duration(d) }
	for _, tc := range []struct {
		name string
		edit func(*jail.Spec)
		want bool
	}{
		{"the pool's own", func(*jail.Spec) {}, true},
		{"env, cwd, timeout, output limit", func(s *jail.Spec) {
			s.Env, s.Cwd, s.Timeout, s.OutputLimitBytes = []string{"A=1"}, "/tmp", ms(time.Minute), 4096
		}, true},
		{"a lower memory limit", func(s *jail.Spec) { s.MemoryMaxBytes = 64 << 20 }, true},
		{"no memory limit", func(s *jail.Spec) { s.MemoryMaxBytes = 0 }, true},
		{"other pids", func(s *jail.Spec) { s.PidsMax = 8 }, true},
		{"a cpu time limit", func(s *jail.Spec) { s.CPUTime = ms(time.Second) }, true},
		{"cpus the cgroup does not serve", func(s *jail.Spec) { s.CPUs = 0.5 }, false},
		{"another hostname", func(s *jail.Spec) { s.Hostname = "other" }, false},
		{"another seccomp policy", func(s *jail.Spec) { s.Seccomp = "default" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pool
			tc.edit(&s)
			assert.Equal(t, tc.want, releasable(pool, s))
		})
	}
	assert.False(t, releasable(jail.Spec{}, jail.Spec{MemoryMaxBytes: 64 << 20}), "a member without a cgroup takes no limit")
	assert.False(t, releasable(jail.Spec{}, jail.Spec{CPUTime: ms(time.Second)}), "nor a cpu time limit")
}

// TestCheckLimits: a tenant's per-request limits may only tighten the
// spec's; an admin's may do anything.
func TestCheckLimits(t *testing.T) {
	base := jail.Spec{MemoryMaxBytes: 64 << 20, PidsMax: 32, CPUs: 0.5, CPUTime: jail.Duration(time.Second)}
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	d := func(v time.Duration) *jail.Duration { x := jail.Duration(v); return &x }
	for _, tc := range []struct {
		name  string
		l     RunLimits
		field string // "" when allowed
	}{
		{"lower", RunLimits{MemoryMaxBytes: i64(32 << 20), PidsMax: i64(8), CPUs: f64(0.25), CPUTime: d(time.Millisecond), OutputLimitBytes: i64(4096)}, ""},
		{"the same", RunLimits{MemoryMaxBytes: i64(64 << 20), PidsMax: i64(32)}, ""},
		{"memory removed", RunLimits{MemoryMaxBytes: i64(0)}, "limits.memory_max_bytes"},
		{"memory raised", RunLimits{MemoryMaxBytes: i64(128 << 20)}, "limits.memory_max_bytes"},
		{"pids removed", RunLimits{PidsMax: i64(0)}, "limits.pids_max"},
		{"cpus removed", RunLimits{CPUs: f64(0)}, "limits.cpus"},
		{"cpus raised", RunLimits{CPUs: f64(2)}, "limits.cpus"},
		{"cpu time removed", RunLimits{CPUTime: d(0)}, "limits.cpu_time"},
		{"swap added", RunLimits{SwapMaxBytes: i64(1 << 30)}, "limits.swap_max_bytes"},
		{"output above the default", RunLimits{OutputLimitBytes: i64(1 << 30)}, "limits.output_limit_bytes"},
		{"output 0", RunLimits{OutputLimitBytes: i64(0)}, "limits.output_limit_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RunRequest{Limits: &tc.l}
			e := r.checkLimits(Tenant{Name: "t"}, base)
			if tc.field == "" {
				assert.Nil(t, e)
			} else if assert.NotNil(t, e) {
				assert.Equal(t, CodeForbidden, e.Code)
				assert.Equal(t, tc.field, e.Field)
			}
			assert.Nil(t, r.checkLimits(Tenant{Name: "root", Admin: true}, base), "an admin's")
		})
	}
	r := RunRequest{Limits: &RunLimits{MemoryMaxBytes: i64(1 << 30), PidsMax: i64(9)}}
	assert.Nil(t, r.checkLimits(Tenant{Name: "t"}, jail.Spec{}), "a limit the spec does not set may be set")
}
