package k8s

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Client talks to one cluster's API server as one user.
type Client struct {
	// Server is the API server's URL; Namespace the context's namespace.
	Server, Namespace string
	token             string
	hc                *http.Client
}

// kubeconfig is the part of a kubeconfig file jail reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string          `json:"token"`
			TokenFile             string          `json:"tokenFile"`
			ClientCertificate     string          `json:"client-certificate"`
			ClientCertificateData string          `json:"client-certificate-data"`
			ClientKey             string          `json:"client-key"`
			ClientKeyData         string          `json:"client-key-data"`
			Exec                  json.RawMessage `json:"exec"`
			AuthProvider          json.RawMessage `json:"auth-provider"`
			Username              string          `json:"username"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster   string `json:"cluster"`
			User      string `json:"user"`
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
}

// In-cluster credentials, as every Pod with a service account has them.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// KubeconfigPath is the kubeconfig jail reads when none is given:
// $KUBECONFIG (one file), else ~/.kube/config.
func KubeconfigPath() (string, error) {
	if k := os.Getenv("KUBECONFIG"); k != "" {
		if strings.Contains(k, string(filepath.ListSeparator)) {
			return "", fmt.Errorf("KUBECONFIG lists several files (%s): jail reads one; give it with --kubeconfig", k)
		}
		return k, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".kube", "config"), nil
}

// NewClient reads the kubeconfig at path (empty: KubeconfigPath, or the
// in-cluster service account when there is no such file and jail runs in
// a Pod). Credentials are a bearer token or a client certificate; exec
// plugins and auth providers are refused, as jail runs no programs of a
// kubeconfig's.
func NewClient(path string) (*Client, error) {
	explicit := path != ""
	if !explicit {
		var err error
		if path, err = KubeconfigPath(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			return inCluster()
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (point jail at a cluster with --kubeconfig FILE or KUBECONFIG)", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string { // paths in a kubeconfig are relative to its file
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	ctxName := kc.CurrentContext
	var clusterName, userName, ns string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			clusterName, userName, ns, found = c.Context.Cluster, c.Context.User, c.Context.Namespace, true
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: no context %q (current-context)", path, ctxName)
	}
	c := &Client{Namespace: ns}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	found = false
	for _, cl := range kc.Clusters {
		if cl.Name != clusterName {
			continue
		}
		found = true
		c.Server = strings.TrimRight(cl.Cluster.Server, "/")
		tc.InsecureSkipVerify = cl.Cluster.InsecureSkipTLSVerify
		ca, err := dataOrFile(cl.Cluster.CertificateAuthorityData, rel(cl.Cluster.CertificateAuthority))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: cluster %s: certificate authority: %w", path, clusterName, err)
		}
		if ca != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, fmt.Errorf("kubeconfig %s: cluster %s: no certificate in its certificate authority", path, clusterName)
			}
			tc.RootCAs = pool
		}
	}
	if !found || c.Server == "" {
		return nil, fmt.Errorf("kubeconfig %s: no cluster %q with a server", path, clusterName)
	}
	if !strings.HasPrefix(c.Server, "https://") {
		return nil, fmt.Errorf("kubeconfig %s: server %s: only https is supported", path, c.Server)
	}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		switch {
		case len(u.User.Exec) > 0 && string(u.User.Exec) != "null", len(u.User.AuthProvider) > 0 && string(u.User.AuthProvider) != "null":
			return nil, fmt.Errorf("kubeconfig %s: user %s: exec plugins and auth providers are not supported (give a token or a client certificate)", path, userName)
		case u.User.Token != "":
			c.token = u.User.Token
		case u.User.TokenFile != "":
			t, err := os.ReadFile(rel(u.User.TokenFile))
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %s: %w", path, userName, err)
			}
			c.token = strings.TrimSpace(string(t))
		}
		cert, err := dataOrFile(u.User.ClientCertificateData, rel(u.User.ClientCertificate))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %s: client certificate: %w", path, userName, err)
		}
		key, err := dataOrFile(u.User.ClientKeyData, rel(u.User.ClientKey))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %s: client key: %w", path, userName, err)
		}
		if cert != nil {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %s: %w", path, userName, err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
	}
	c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}}
	return c, nil
}

// inCluster is the Pod's own service account.
func inCluster() (*Client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	tok, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster credentials: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster credentials: %w", err)
	}
	ns, _ := os.ReadFile(filepath.Join(saDir, "namespace"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &Client{Server: "https://" + host + ":" + port, Namespace: strings.TrimSpace(string(ns)), token: strings.TrimSpace(string(tok)),
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}, nil
}

func dataOrFile(data, file string) ([]byte, error) {
	switch {
	case data != "":
		return base64.StdEncoding.DecodeString(data)
	case file != "":
		return os.ReadFile(file)
	}
	return nil, nil
}

// StatusError is an API server's answer that is not a success: its
// Status object's reason (NotFound, AlreadyExists, Forbidden, Invalid...)
// and message.
type StatusError struct {
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("kubernetes: %s (%s, HTTP %d)", e.Message, e.Reason, e.Code)
}

// IsNotFound reports whether err is the API server's 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// send sends a request and returns a successful answer for the caller to
// read and close.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, in any) (*http.Response, error) {
	return c.sendType(ctx, method, path, q, "application/json", in)
}

// sendType is send with the body's content type (a patch's).
func (c *Client) sendType(ctx context.Context, method, path string, q url.Values, contentType string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := c.Server + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("kubernetes API server %s (the kubeconfig's): %s %s: %w", c.Server, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		se := &StatusError{Code: resp.StatusCode}
		var st struct{ Reason, Message string }
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			se.Reason, se.Message = st.Reason, st.Message
		} else {
			se.Message = strings.TrimSpace(string(b))
		}
		return nil, se
	}
	return resp, nil
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.doType(ctx, method, path, q, "application/json", in, out)
}

// doType is do with the body's content type.
func (c *Client) doType(ctx context.Context, method, path string, q url.Values, contentType string, in, out any) error {
	resp, err := c.sendType(ctx, method, path, q, contentType, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

func podsPath(ns string) string { return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods" }
func policiesPath(ns string) string {
	return "/apis/networking.k8s.io/v1/namespaces/" + url.PathEscape(ns) + "/networkpolicies"
}

// CreatePod creates p and returns the Pod as the API server stored it,
// decoded and as it came.
func (c *Client) CreatePod(ctx context.Context, ns string, p *Pod) (*Pod, []byte, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, podsPath(ns), nil, p, &raw); err != nil {
		return nil, nil, err
	}
	var out Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, nil, err
	}
	return &out, raw, nil
}

// GetPod returns the Pod.
func (c *Client) GetPod(ctx context.Context, ns, name string) (*Pod, error) {
	var out Pod
	return &out, c.do(ctx, http.MethodGet, podsPath(ns)+"/"+url.PathEscape(name), nil, nil, &out)
}

// DeletePod deletes the Pod, giving it grace seconds; a Pod already gone
// is no error.
func (c *Client) DeletePod(ctx context.Context, ns, name string, grace int64) error {
	_, err := c.DeletePodExisted(ctx, ns, name, grace)
	return err
}

// DeletePodExisted is DeletePod, saying whether there was a Pod to delete.
func (c *Client) DeletePodExisted(ctx context.Context, ns, name string, grace int64) (bool, error) {
	err := c.do(ctx, http.MethodDelete, podsPath(ns)+"/"+url.PathEscape(name), url.Values{"gracePeriodSeconds": {fmt.Sprint(grace)}}, nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// ListPods lists the Pods with the label selector.
func (c *Client) ListPods(ctx context.Context, ns, selector string) ([]Pod, error) {
	var out struct{ Items []Pod }
	err := c.do(ctx, http.MethodGet, podsPath(ns), url.Values{"labelSelector": {selector}}, nil, &out)
	return out.Items, err
}

// WatchPod calls f with the Pod at each change, from resourceVersion rv,
// until f returns true, the watch ends (then it returns nil: watch again)
// or ctx is done.
func (c *Client) WatchPod(ctx context.Context, ns, name, rv string, f func(*Pod) bool) error {
	q := url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=" + name}, "resourceVersion": {rv}, "allowWatchBookmarks": {"false"}}
	resp, err := c.send(ctx, http.MethodGet, podsPath(ns), q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var ev struct {
			Type   string
			Object json.RawMessage
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if ev.Type == "ERROR" {
			var st struct{ Code int }
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return nil // the version is too old: watch again from a fresh GET
			}
			return fmt.Errorf("kubernetes: watch: %s", ev.Object)
		}
		var p Pod
		if err := json.Unmarshal(ev.Object, &p); err != nil {
			return err
		}
		if f(&p) {
			return nil
		}
	}
}

// Logs streams the container's log (stdout and stderr together, as the
// kubelet keeps them) into w; with follow, until the container ends.
func (c *Client) Logs(ctx context.Context, ns, name string, follow bool, w io.Writer) error {
	q := url.Values{"container": {containerName}}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, podsPath(ns)+"/"+url.PathEscape(name)+"/log", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// WaitPodGone waits until the Pod object is gone (404), or ctx ends.
func (c *Client) WaitPodGone(ctx context.Context, ns, name string) error {
	for {
		_, err := c.GetPod(ctx, ns, name)
		if IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SetPolicyOwner makes the Pod the owner of the NetworkPolicy of the same
// name (a merge patch of its ownerReferences).
func (c *Client) SetPolicyOwner(ctx context.Context, ns, name string, pod *Pod) error {
	patch := map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]any{{
		"apiVersion": "v1", "kind": "Pod", "name": pod.Metadata.Name, "uid": pod.Metadata.UID}}}}
	return c.doType(ctx, http.MethodPatch, policiesPath(ns)+"/"+url.PathEscape(name), nil, "application/merge-patch+json", patch, nil)
}

// CreatePolicy creates the NetworkPolicy.
func (c *Client) CreatePolicy(ctx context.Context, ns string, p *NetworkPolicy) error {
	return c.do(ctx, http.MethodPost, policiesPath(ns), nil, p, nil)
}

// DeletePolicy deletes the NetworkPolicy; one already gone is no error.
func (c *Client) DeletePolicy(ctx context.Context, ns, name string) error {
	err := c.do(ctx, http.MethodDelete, policiesPath(ns)+"/"+url.PathEscape(name), nil, nil, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// ListPolicies lists the NetworkPolicies with the label selector.
func (c *Client) ListPolicies(ctx context.Context, ns, selector string) ([]NetworkPolicy, error) {
	var out struct{ Items []NetworkPolicy }
	err := c.do(ctx, http.MethodGet, policiesPath(ns), url.Values{"labelSelector": {selector}}, nil, &out)
	return out.Items, err
}
