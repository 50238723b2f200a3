package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/client"
	"github.com/jailrt/jail/internal/openapitest"
	"github.com/jailrt/jail/server"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jail serve test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}

// freePort is a TCP port of 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newToken makes a token with `jail serve token`, added to file.
func newToken(t *testing.T, file, tenant, scopes string) string {
	t.Helper()
	out, err := exec.Command(jailBin, "serve", "token", "--tenant", tenant, "--scope", scopes, "--tokens", file).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// TestServeTCP: over TCP, jail serve needs TLS and a bearer token; a
// token's tenant has its own sessions, its scopes, and the policy's bind
// roots and quotas; no jail's allow-list may open the server's port.
func TestServeTCP(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	cert, key, pool := selfSigned(t, dir)
	tokens := filepath.Join(dir, "tokens.yaml")
	ci := newToken(t, tokens, "ci", "run,sessions")
	viewer := newToken(t, tokens, "viewer", "metrics")
	b, err := os.ReadFile(tokens)
	require.NoError(t, err)
	assert.NotContains(t, string(b), ci, "the file holds the hash, not the token")
	fi, err := os.Stat(tokens)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	roots := filepath.Join(dir, "roots")
	data := filepath.Join(roots, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "in.txt"), []byte("bound\n"), 0o644))
	require.NoError(t, os.Symlink("/etc", filepath.Join(data, "escape")))
	policy := filepath.Join(dir, "tenants.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(`
tenants:
  ci:
    bind_roots: [{path: `+roots+`}, {path: `+dir+`}]
    quotas: {sessions: 1, memory_max_bytes: 134217728}
`), 0o644))

	port := strconv.Itoa(freePort(t))
	// The state directory, the tokens, the policy and the TLS key lie
	// under a bind root of the tenant's: it may bind none of them.
	state := filepath.Join(dir, "state")
	require.NoError(t, os.Mkdir(state, 0o700))
	s := serve(t, state, "--listen", "tcp://127.0.0.1:"+port, "--tokens", tokens, "--tls-cert", cert, "--tls-key", key, "--tenants", policy)
	url := "https://127.0.0.1:" + port
	tc := &http.Client{Transport: openapitest.NewChecker(t, filepath.Join(schemaDir(), "openapi.yaml")).Transport(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}), Timeout: time.Minute}
	do := func(method, path, body, token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}

	// Health needs nothing; everything else a token of the file's.
	resp, _ := do("GET", "/v1/health", "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	for _, tok := range []string{"", "jail_not-a-token", server.HashToken(ci)} {
		resp, b := do("GET", "/v1/sessions", "", tok)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "token %q: %s", tok, b)
		assert.Equal(t, server.CodeUnauthenticated, apiError(t, b).Code)
		assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	}
	// No plaintext on the TLS port: the token never crosses in clear.
	presp, err := http.Get("http://127.0.0.1:" + port + "/v1/health")
	if err == nil {
		presp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, presp.StatusCode, "plain HTTP to the TLS listener")
	}

	resp, b = do("GET", "/v1/info", "", ci)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var info struct {
		Tenant map[string]any `json:"tenant"`
	}
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, "ci", info.Tenant["name"])
	assert.Nil(t, info.Tenant["uid"])
	assert.Equal(t, false, info.Tenant["admin"])

	// A read-only bind under the tenant's root runs; the policy's memory
	// quota is the jail's limit (an allocation above it is killed).
	run := func(spec, argv string) (*http.Response, []byte) {
		return do("POST", "/v1/run", `{"spec": `+spec+`, "argv": `+argv+`}`, ci)
	}
	resp, b = run(`{"mounts": [{"type": "ro-bind", "source": "`+data+`", "target": "/data"}]}`, `["/bin/cat", "/data/in.txt"]`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var res jail.Result
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, "bound\n", res.Stdout, "%s", b)
	resp, b = run(`{}`, `["/usr/bin/python3", "-c", "x = b'a' * (300 << 20)"]`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, jail.StatusOOMKilled, res.Status, "300 MiB against a 128 MiB quota: %s", b)
	for _, c := range []struct{ spec, field, msg string }{
		{`{"mounts": [{"type": "ro-bind", "source": "/etc", "target": "/x"}]}`, "spec.mounts[0].source", "under none"},
		{`{"mounts": [{"type": "ro-bind", "source": "` + data + `/escape", "target": "/x"}]}`, "spec.mounts[0].source", "resolves to /etc"},
		{`{"mounts": [{"type": "bind", "source": "` + data + `", "target": "/x"}]}`, "spec.mounts[0].source", "only read-only"},
		{`{"memory_max_bytes": 1073741824}`, "spec.memory_max_bytes", "quota"},
		{`{"seccomp": "none"}`, "spec.seccomp", "weaker"},
		{`{"mounts": [{"type": "ro-bind", "source": "` + dir + `", "target": "/x"}]}`, "spec.mounts[0].source", "no jail may reach the server"},
		{`{"mounts": [{"type": "ro-bind", "source": "` + state + `/server.lock", "target": "/x"}]}`, "spec.mounts[0].source", "no jail may reach the server"},
		{`{"mounts": [{"type": "ro-bind", "source": "` + key + `", "target": "/x"}]}`, "spec.mounts[0].source", "no jail may reach the server"},
		{`{"network": {"mode": "egress", "allow": ["127.0.0.1:` + port + `"]}}`, "spec.network.allow[0]", "no jail may reach the server"},
	} {
		resp, b := run(c.spec, `["/bin/true"]`)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", c.spec, b)
		e := apiError(t, b)
		assert.Equal(t, c.field, e.Field, "%s", b)
		assert.Contains(t, e.Message, c.msg)
	}

	// Sessions: the token's own, one at a time (its quota), unseen by
	// the unix socket's root.
	resp, b = do("POST", "/v1/sessions", `{"profile": "strict"}`, ci)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	var sess jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &sess))
	_, err = os.Stat(filepath.Join(s.state, "tenants", "ci", "sessions"))
	assert.NoError(t, err, "the token's tenant's state is its own")
	resp, b = do("POST", "/v1/sessions", `{}`, ci)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
	assert.Equal(t, server.CodeCapacity, apiError(t, b).Code)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	code, _ := s.do(t, "GET", "/v1/sessions/"+sess.ID, "")
	assert.Equal(t, http.StatusNotFound, code, "root on the socket is another tenant")
	resp, b = do("POST", "/v1/sessions/"+sess.ID+"/exec", `{"argv": ["/bin/echo", "in"]}`, ci)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"stdout": "in\n"`)
	resp, b = do("DELETE", "/v1/sessions/"+sess.ID, "", ci)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = do("POST", "/v1/sessions", `{}`, ci)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "a removed session frees its place: %s", b)
	require.NoError(t, json.Unmarshal(b, &sess))
	resp, _ = do("DELETE", "/v1/sessions/"+sess.ID, "", ci)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The Go client over TLS with the token.
	gc := client.TCP(url, ci, &tls.Config{RootCAs: pool})
	gres, err := gc.Run(context.Background(), client.RunRequest{Command: client.Command{Shell: "echo over tcp"}})
	require.NoError(t, err)
	assert.Equal(t, "over tcp\n", gres.Stdout)
	_, err = client.TCP(url, "jail_wrong", &tls.Config{RootCAs: pool}).Run(context.Background(), client.RunRequest{Command: client.Command{Argv: []string{"true"}}})
	var ae *server.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, server.CodeUnauthenticated, ae.Code)

	// Scopes: ci has no metrics, viewer nothing but.
	resp, b = do("GET", "/metrics", "", ci)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
	resp, b = do("GET", "/metrics", "", viewer)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), "jail_http_requests_total")
	resp, _ = do("POST", "/v1/run", `{"argv": ["/bin/true"]}`, viewer)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = do("GET", "/v1/sessions", "", viewer)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// TestServeRefusesUnsafeTCP: serve does not start on TCP without tokens,
// without TLS, or in plaintext off loopback.
func TestServeRefusesUnsafeTCP(t *testing.T) {
	dir := openDir(t)
	tokens := filepath.Join(dir, "tokens.yaml")
	newToken(t, tokens, "ci", "run")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--listen", "tcp://127.0.0.1:1"}, "needs --tokens"},
		{[]string{"--listen", "tcp://127.0.0.1:1", "--tokens", tokens}, "needs TLS"},
		{[]string{"--listen", "tcp://0.0.0.0:1", "--tokens", tokens, "--insecure-plaintext"}, "only on a loopback"},
		{[]string{"--listen", "tcp://localhost:1", "--tokens", tokens, "--insecure-plaintext"}, "IP address"},
		{[]string{"--listen", "unix:" + filepath.Join(dir, "s"), "--insecure-plaintext"}, "no tcp://"},
	} {
		cmd := exec.Command(jailBin, append([]string{"serve", "--state-dir", dir}, c.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if assert.ErrorAs(t, err, &ee, "%v: %s", c.args, out) {
			assert.Equal(t, jail.ExitSetupError, ee.ExitCode())
		}
		assert.Contains(t, string(out), c.msg)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
	}
}

// hostIPv4 is an IPv4 address of this host that is not loopback.
func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no IPv4 address but loopback")
	return ""
}

// TestServeUnreachableFromJails: with the server on every address, an
// egress entry naming this host's address and the server's port is
// refused before anything runs. (Traffic itself is not tried here: the
// egress rules that refuse this host to broader entries are tested in
// network_test.go, in namespaces that forward; this host does not.)
func TestServeUnreachableFromJails(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	cert, key, _ := selfSigned(t, dir)
	tokens := filepath.Join(dir, "tokens.yaml")
	newToken(t, tokens, "ci", "run")
	port := strconv.Itoa(freePort(t))
	host := hostIPv4(t)
	s := serve(t, openDir(t), "--listen", "tcp://0.0.0.0:"+port, "--tokens", tokens, "--tls-cert", cert, "--tls-key", key)
	c, err := net.DialTimeout("tcp", host+":"+port, 5*time.Second)
	require.NoError(t, err, "the server answers on %s:%s from the host", host, port)
	c.Close()
	for _, entry := range []string{host + ":" + port, host, "tcp/" + host + ":1-65535"} {
		code, b := s.do(t, "POST", "/v1/run", `{"spec": {"network": {"mode": "egress", "allow": ["`+entry+`"]}}, "argv": ["/bin/true"]}`)
		assert.Equal(t, http.StatusForbidden, code, "%s: %s", entry, b)
		assert.Equal(t, "spec.network.allow[0]", apiError(t, b).Field)
	}
	code, b := s.do(t, "POST", "/v1/sessions", `{"spec": {"network": {"mode": "egress", "allow": ["`+host+`:`+port+`"]}}}`)
	assert.Equal(t, http.StatusForbidden, code, "a session too: %s", b)
}

// TestServeReload: SIGHUP reads the tokens, the tenant policy and the
// pools again, without a restart: a revoked token is refused from the next
// request on and a new one taken, the new policy holds, a pool the file
// drops goes and one it adds is filled; a file that does not parse changes
// nothing.
func TestServeReload(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	tokens := filepath.Join(dir, "tokens.yaml")
	old := newToken(t, tokens, "ci", "run,sessions")
	policy := filepath.Join(dir, "tenants.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("tenants:\n  ci: {profiles: [strict, default]}\n"), 0o644))
	pools := filepath.Join(dir, "pools.yaml")
	require.NoError(t, os.WriteFile(pools, []byte("pools:\n- {name: first, profile: strict, min_ready: 1}\n"), 0o644))
	port := strconv.Itoa(freePort(t))
	s := serve(t, openDir(t), "--listen", "tcp://127.0.0.1:"+port, "--insecure-plaintext", "--tokens", tokens, "--tenants", policy, "--pools", pools)
	require.Eventually(t, func() bool { return s.pools(t)["first"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)
	run := func(token, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest("POST", "http://127.0.0.1:"+port+"/v1/run", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	code, b := run(old, `{"profile": "default", "argv": ["true"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)

	// New files: the old token revoked, another one; default no longer
	// allowed; another pool.
	fresh := filepath.Join(dir, "tokens-new.yaml")
	neu := newToken(t, fresh, "ci", "run,sessions")
	require.NoError(t, os.Rename(fresh, tokens))
	require.NoError(t, os.WriteFile(policy, []byte("tenants:\n  ci: {profiles: [strict]}\n"), 0o644))
	require.NoError(t, os.WriteFile(pools, []byte("pools:\n- {name: second, profile: strict, min_ready: 1}\n"), 0o644))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(s.log.String(), "reloaded") }, 10*time.Second, 20*time.Millisecond, "%s", s.log)
	code, b = run(old, `{"argv": ["true"]}`)
	assert.Equal(t, http.StatusUnauthorized, code, "the revoked token: %s", b)
	code, b = run(neu, `{"profile": "default", "argv": ["true"]}`)
	assert.Equal(t, http.StatusForbidden, code, "the new policy: %s", b)
	code, b = run(neu, `{"argv": ["true"]}`)
	assert.Equal(t, http.StatusOK, code, "the new token: %s", b)
	require.Eventually(t, func() bool { return s.pools(t)["second"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)
	_, kept := s.pools(t)["first"]
	assert.False(t, kept, "the pool the file dropped")

	// A file that does not parse: nothing changes.
	require.NoError(t, os.WriteFile(pools, []byte("pools: [{name: third, profile: nope, min_ready: 1}]\n"), 0o644))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(s.log.String(), "msg=reload ") }, 10*time.Second, 20*time.Millisecond, "%s", s.log)
	p := s.pools(t)
	assert.Contains(t, p, "second")
	assert.NotContains(t, p, "third")
	code, b = run(neu, `{"argv": ["true"]}`)
	assert.Equal(t, http.StatusOK, code, "%s", b)
	s.stop(t)
}
