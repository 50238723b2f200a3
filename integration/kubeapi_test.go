package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// kubeNamespace is the namespace testKube creates for the tests.
const kubeNamespace = "jail-test"

// privateKube is the suite's private Kubernetes API: an etcd and a
// kube-apiserver on 127.0.0.1, started by the first testKube and stopped by
// stopKube. There is no kubelet, scheduler or controller manager: Pods
// stay Pending, and nothing makes a namespace's default ServiceAccount but
// testKube.
var privateKube struct {
	once       sync.Once
	err        error  // why the API could not start
	dir        string // state, certificates, keys, logs; removed by stopKube
	kubeconfig string
	api        *kubeAPI // the tests' own client (testKubeAPI)
	etcd       *kubeProc
	apiserver  *kubeProc
}

// kubeProc is one process of the private Kubernetes API.
type kubeProc struct {
	name   string
	log    string // its stdout and stderr
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has ended and been waited for
}

// testKube returns a kubeconfig file for the suite's private kube-apiserver
// (a token user with full rights, the server's self-signed serving
// certificate as the CA, current context set) and the namespace the tests
// use ("jail-test", created with its default ServiceAccount). The apiserver
// and etcd start once per suite on the first call and are stopped by
// stopKube. Skips (t.Skip, with the command to run) when the binaries are
// not built, and in the unprivileged re-run (var unprivileged); t.Fatal
// when they cannot start.
func testKube(t testing.TB) (kubeconfig, namespace string) {
	t.Helper()
	if unprivileged {
		t.Skip("the private kube-apiserver runs only in the root run of the suite")
	}
	bin, err := kubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if fi, err := os.Stat(filepath.Join(bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			t.Skipf("needs etcd and kube-apiserver in %s for a private Kubernetes API: run integration/kube/build.sh (about 10 minutes the first time) or set JAIL_KUBE_BIN", bin)
		}
	}
	privateKube.once.Do(func() { privateKube.err = startKube(t, bin) })
	if privateKube.err != nil {
		t.Fatalf("private Kubernetes API: %v", privateKube.err)
	}
	return privateKube.kubeconfig, kubeNamespace
}

// kubeBinDir is $JAIL_KUBE_BIN, or where integration/kube/build.sh puts the
// binaries: the script says, so that its version and cache path are the
// only ones.
func kubeBinDir() (string, error) {
	if d := os.Getenv("JAIL_KUBE_BIN"); d != "" {
		return d, nil
	}
	out, err := exec.Command("/bin/sh", "kube/build.sh", "--print-dir").Output()
	if err != nil {
		return "", fmt.Errorf("kube/build.sh --print-dir: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// startKube starts etcd and kube-apiserver with everything they keep in a
// new temp directory, waits until the apiserver is ready and creates the
// test namespace and its default ServiceAccount. It returns errors rather
// than failing t: it runs inside privateKube.once.
func startKube(t testing.TB, bin string) error {
	dir, err := os.MkdirTemp("", "jail-it-kube-")
	if err != nil {
		return err
	}
	privateKube.dir = dir
	for _, d := range []string{"tmp", "certs"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	ports, err := freeKubePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	server := "https://127.0.0.1:" + strconv.Itoa(ports[2])

	// The service-account key pair signs and checks the tokens the
	// apiserver issues; it refuses to start without one.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saKey := filepath.Join(dir, "service-account.key")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(saKey, keyPEM, 0o600); err != nil {
		return err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	tokens := filepath.Join(dir, "tokens.csv")
	// system:masters bypasses authorization: full rights.
	if err := os.WriteFile(tokens, []byte(token+`,jail-test,jail-test,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}

	t0 := time.Now()
	privateKube.etcd, err = startKubeProc(dir, "etcd", filepath.Join(bin, "etcd"),
		"--name", "jail-test",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "jail-test="+peerURL,
		// Test data: no fsync, which on a busy 2-core machine costs
		// seconds.
		"--unsafe-no-fsync",
	)
	if err != nil {
		return err
	}
	if err := waitKube(privateKube.etcd, 30*time.Second, func(ctx context.Context) error {
		return etcdHealthy(ctx, etcdURL)
	}); err != nil {
		return err
	}
	etcdReady := time.Since(t0)

	t0 = time.Now()
	certDir := filepath.Join(dir, "certs")
	privateKube.apiserver, err = startKubeProc(dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[2]),
		// No --tls-cert-file: the apiserver makes a self-signed serving
		// certificate (for 127.0.0.1) in --cert-dir, the kubeconfig's CA.
		"--cert-dir", certDir,
		"--token-auth-file", tokens,
		"--authorization-mode", "RBAC",
		"--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/16",
		// No kubernetes Service endpoints to keep: nothing could reach
		// them.
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	var api *kubeAPI
	if err := waitKube(privateKube.apiserver, 60*time.Second, func(ctx context.Context) error {
		if api == nil {
			// Written before the apiserver serves.
			ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
			if err != nil {
				return err
			}
			if api, err = newKubeAPI(server, token, ca); err != nil {
				return err
			}
		}
		status, body, err := api.call(ctx, http.MethodGet, "/readyz", nil)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("/readyz: %d: %s", status, bytes.TrimSpace(body))
		}
		return err
	}); err != nil {
		return err
	}
	apiReady := time.Since(t0)

	// The ServiceAccount admission plugin refuses Pods in a namespace
	// without its default ServiceAccount, which only the controller
	// manager would make.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct{ path, body string }{
		{"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + kubeNamespace + `"}}`},
		{"/api/v1/namespaces/" + kubeNamespace + "/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`},
	} {
		status, body, err := api.call(ctx, http.MethodPost, c.path, json.RawMessage(c.body))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("%d: %s", status, bytes.TrimSpace(body))
		}
		if err != nil {
			return fmt.Errorf("POST %s: %w\n%s", c.path, err, privateKube.apiserver.tail())
		}
	}

	privateKube.api = api
	privateKube.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(privateKube.kubeconfig, kubeconfigYAML(server, token, api.ca), 0o600); err != nil {
		return err
	}
	t.Logf("private Kubernetes API at %s: etcd ready in %v, kube-apiserver in %v", server,
		etcdReady.Round(time.Millisecond), apiReady.Round(time.Millisecond))
	return nil
}

// freeKubePorts returns n distinct TCP ports of 127.0.0.1 that nothing
// listens on now: all are held at once, so that none repeats.
func freeKubePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startKubeProc starts path with args, its output in dir/<name>.log. It
// dies with this process, even when a test timeout ends it without
// stopKube.
func startKubeProc(dir, name, path string, args ...string) (*kubeProc, error) {
	p := &kubeProc{name: name, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(path, args...)
	// Nothing from the caller's environment (a KUBECONFIG, ETCD_*
	// variables); temp files in the directory stopKube removes.
	p.cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + filepath.Join(dir, "tmp")}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error)
	go func() {
		// Pdeathsig follows the thread that started the process, not the
		// process: keep that thread for the process's life.
		runtime.LockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return p, nil
}

// tail is the end of the process's log, for a failure message.
func (p *kubeProc) tail() string {
	return fmt.Sprintf("last lines of %s:\n%s", p.log, logTail(p.log, 30))
}

// waitKube polls ready until it succeeds, p exits or timeout passes.
func waitKube(p *kubeProc, timeout time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v: %v\n%s", p.name, timeout, err, p.tail())
		}
	}
}

// etcdHealthy asks etcd's /health.
func etcdHealthy(ctx context.Context, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return err
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %+v", h)
	}
	return nil
}

// kubeconfigYAML is a kubeconfig with one cluster, user and context, all
// named jail-test, the context current.
func kubeconfigYAML(server, token string, ca []byte) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: jail-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: jail-test
  user:
    token: %s
contexts:
- name: jail-test
  context:
    cluster: jail-test
    user: jail-test
    namespace: %s
current-context: jail-test
`, server, base64.StdEncoding.EncodeToString(ca), token, kubeNamespace)
}

// stopKube stops the private Kubernetes API, if a test started it, and
// removes its directory: the apiserver first, so that it does not fail
// against a vanished etcd.
func stopKube() {
	if privateKube.dir == "" {
		return
	}
	var errs []error
	for _, p := range []*kubeProc{privateKube.apiserver, privateKube.etcd} {
		if p == nil {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("%s still running 10 s after SIGTERM; killed it", p.name))
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	errs = append(errs, os.RemoveAll(privateKube.dir))
	if err := errors.Join(errs...); err != nil {
		fmt.Printf("integration: stopping the private Kubernetes API: %v\n", err)
	}
}

// kubeAPI is a minimal REST client of a kube-apiserver: a bearer token and
// a CA, as the Kubernetes backend has (no client-go).
type kubeAPI struct {
	server, token string
	ca            []byte // PEM
	client        *http.Client
}

func newKubeAPI(server, token string, ca []byte) (*kubeAPI, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in the CA data")
	}
	return &kubeAPI{server: server, token: token, ca: ca, client: &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		// No connection outlives a request: none stays open to an
		// apiserver stopKube stops.
		DisableKeepAlives: true,
	}}}, nil
}

// testKubeAPI returns the tests' own client of the private API server
// (its token and CA as testKube made them), outside the product's.
func testKubeAPI(t testing.TB) *kubeAPI {
	t.Helper()
	testKube(t)
	return privateKube.api
}

// call sends one request (in, if not nil, as JSON) and returns the status
// and body of the answer.
func (a *kubeAPI) call(ctx context.Context, method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
