package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// The Engine API client is written here rather than taken from
// github.com/moby/moby/client: that module's package inits (the
// distribution/reference and go-digest regular expressions, and
// OpenTelemetry) cost 1.2 ms of every start of the one jail binary,
// `jail run` of a native jail included (GODEBUG=inittrace=1, median of 5),
// for the dozen endpoints used here. The request and answer types carry
// only the fields jail sets or reads; engine_test.go decodes the requests
// into the official types to keep them the Engine's.

// API versions: jail needs 1.41 (Docker 20.10: CgroupnsMode, the wait
// conditions) and speaks up to maxAPI, the newest it was checked against;
// an engine whose oldest accepted version is newer refuses the run.
const (
	minAPI = "1.41"
	maxAPI = "1.51"
)

// DefaultHost is the engine's socket when DOCKER_HOST is unset.
const DefaultHost = "unix:///var/run/docker.sock"

// Engine is a connection to a Docker engine over its unix socket.
type Engine struct {
	// Socket is the socket's path.
	Socket  string
	version string // negotiated, "1.41"...
	hc      *http.Client
}

// Host returns the engine address jail uses: DOCKER_HOST, or DefaultHost.
func Host() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return DefaultHost
}

// Connect opens the engine at host ("unix:///path"; a TCP engine is
// refused: its TLS set-up is not jail's) and negotiates the API version.
func Connect(ctx context.Context, host string) (*Engine, error) {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("docker host %q: only a unix socket (unix:///path) is supported", host)
	}
	e := &Engine{Socket: path}
	e.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("docker engine at %s: %w (start dockerd, or set DOCKER_HOST=unix:///path/to/docker.sock)", path, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("docker engine at %s: ping: %s", path, resp.Status)
	}
	v := resp.Header.Get("Api-Version")
	if v == "" || versionLess(v, minAPI) {
		return nil, fmt.Errorf("docker engine at %s speaks API %q; jail needs %s or newer (Docker 20.10)", path, v, minAPI)
	}
	e.version = v
	if versionLess(maxAPI, v) {
		e.version = maxAPI
	}
	return e, nil
}

// Version is the negotiated API version.
func (e *Engine) Version() string { return e.version }

// versionLess compares API versions "1.41" < "1.51".
func versionLess(a, b string) bool {
	pa, pb := strings.SplitN(a, ".", 2), strings.SplitN(b, ".", 2)
	for i := range 2 {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// APIError is an answer of the engine that is not a success.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("docker engine: %s (HTTP %d)", e.Message, e.Status)
}

// IsNotFound reports whether err is the engine's 404.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// do sends a request with a JSON body (when in is not nil) and decodes a
// JSON answer into out (when not nil).
func (e *Engine) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	resp, err := e.send(ctx, method, path, q, in)
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

// send sends a request and returns a successful answer for the caller to
// read; an unsuccessful one becomes an *APIError.
func (e *Engine) send(ctx context.Context, method, path string, q url.Values, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := "http://docker/v" + e.version + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var m struct{ Message string }
	if json.Unmarshal(b, &m) != nil || m.Message == "" {
		m.Message = strings.TrimSpace(string(b))
	}
	return &APIError{Status: resp.StatusCode, Message: m.Message}
}

// Info is what jail reads of GET /info.
type Info struct {
	SecurityOptions []string
	CgroupVersion   string
	CgroupDriver    string
	ServerVersion   string
}

// Info returns the engine's facts.
func (e *Engine) Info(ctx context.Context) (*Info, error) {
	var i Info
	return &i, e.do(ctx, http.MethodGet, "/info", nil, nil, &i)
}

// ImageConfig is what jail reads of an image's configuration: what the
// engine adds to every container of it.
type ImageConfig struct {
	ID      string // the image's id, filled from the inspection
	Env     []string
	Volumes map[string]struct{}
}

// Image returns the image's configuration; an image the engine does not
// have is an *APIError with status 404.
func (e *Engine) Image(ctx context.Context, ref string) (*ImageConfig, error) {
	var out struct {
		ID     string `json:"Id"`
		Config *ImageConfig
	}
	if err := e.do(ctx, http.MethodGet, "/images/"+url.PathEscape(ref)+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Config == nil {
		out.Config = &ImageConfig{}
	}
	out.Config.ID = out.ID
	return out.Config, nil
}

// Create makes a container and returns its id and the engine's warnings
// (limits the host cannot enforce, among others).
func (e *Engine) Create(ctx context.Context, name string, body *CreateBody) (id string, warnings []string, err error) {
	var out struct {
		ID       string `json:"Id"`
		Warnings []string
	}
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if err := e.do(ctx, http.MethodPost, "/containers/create", q, body, &out); err != nil {
		return "", nil, err
	}
	return out.ID, out.Warnings, nil
}

// Start starts a created container.
func (e *Engine) Start(ctx context.Context, id string) error {
	return e.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", nil, nil, nil)
}

// Wait waits until the container is not running and returns its exit
// code as the engine has it.
func (e *Engine) Wait(ctx context.Context, id string) (int, error) {
	var out struct {
		StatusCode int
		Error      *struct{ Message string }
	}
	q := url.Values{"condition": {"not-running"}}
	if err := e.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/wait", q, nil, &out); err != nil {
		return 0, err
	}
	if out.Error != nil && out.Error.Message != "" {
		return out.StatusCode, errors.New(out.Error.Message)
	}
	return out.StatusCode, nil
}

// Kill sends signal sig ("KILL", "TERM", or a number) to the container's
// process.
func (e *Engine) Kill(ctx context.Context, id, sig string) error {
	return e.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/kill", url.Values{"signal": {sig}}, nil, nil)
}

// Remove removes the container, killing it first if it runs.
func (e *Engine) Remove(ctx context.Context, id string) error {
	err := e.do(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// State is what jail reads of a container's inspection.
type State struct {
	Status     string
	Running    bool
	OOMKilled  bool
	ExitCode   int
	Error      string
	StartedAt  time.Time
	FinishedAt time.Time
}

// Inspect returns the container's state.
func (e *Engine) Inspect(ctx context.Context, id string) (*State, error) {
	var out struct{ State State }
	if err := e.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out.State, nil
}

// OOMEvent says whether the engine logged an "oom" event for container id
// between since and until (both past: the answer ends at until). An OOM
// kill can reach the engine after the container's exit, and then its
// inspection never says OOMKilled (containerd/containerd#8180); the event
// is logged all the same.
func (e *Engine) OOMEvent(ctx context.Context, id string, since, until time.Time) (bool, error) {
	filters, err := json.Marshal(map[string]map[string]bool{"container": {id: true}, "event": {"oom": true}})
	if err != nil {
		return false, err
	}
	stamp := func(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
	resp, err := e.send(ctx, http.MethodGet, "/events", url.Values{
		"since": {stamp(since)}, "until": {stamp(until)}, "filters": {string(filters)}}, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var ev struct{ Action, Status string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ev); err != nil {
		if err == io.EOF {
			return false, nil
		}
		return false, err
	}
	return ev.Action == "oom" || ev.Status == "oom", nil
}

// Container is one entry of a listing.
type Container struct {
	ID     string `json:"Id"`
	Names  []string
	Labels map[string]string
	State  string
}

// List lists every container (running or not) that has label (KEY or
// KEY=VALUE).
func (e *Engine) List(ctx context.Context, label string) ([]Container, error) {
	f, _ := json.Marshal(map[string][]string{"label": {label}})
	var out []Container
	err := e.do(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(f)}}, nil, &out)
	return out, err
}

// Stats is one sample of a container's statistics, the fields jail reads.
type Stats struct {
	Read     time.Time `json:"read"` // zero in an empty sample
	CPUStats struct {
		CPUUsage struct {
			TotalUsage        uint64 `json:"total_usage"`
			UsageInKernelmode uint64 `json:"usage_in_kernelmode"`
			UsageInUsermode   uint64 `json:"usage_in_usermode"`
		} `json:"cpu_usage"`
	} `json:"cpu_stats"`
	MemoryStats struct {
		MaxUsage uint64            `json:"max_usage"` // cgroup v1 only
		Usage    uint64            `json:"usage"`
		Stats    map[string]uint64 `json:"stats"`
	} `json:"memory_stats"`
	PidsStats struct {
		Current uint64 `json:"current"`
	} `json:"pids_stats"`
}

// StatsStream follows the container's statistics (the engine sends about
// one sample a second) and calls f with each until the stream ends or ctx
// is done.
func (e *Engine) StatsStream(ctx context.Context, id string, f func(*Stats)) error {
	resp, err := e.send(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/stats", url.Values{"stream": {"1"}}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var s Stats
		if err := dec.Decode(&s); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		f(&s)
	}
}

// Attach attaches to the container's stdin (when stdin is set), stdout
// and stderr, before it starts. The engine hijacks the connection: the
// returned conn carries the multiplexed output (see Demux) and takes the
// input; CloseWrite ends the input.
func (e *Engine) Attach(ctx context.Context, id string, stdin bool) (*HijackedConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", e.Socket)
	if err != nil {
		return nil, fmt.Errorf("docker engine: attach: %w", err)
	}
	q := url.Values{"stream": {"1"}, "stdout": {"1"}, "stderr": {"1"}}
	if stdin {
		q.Set("stdin", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://docker/v"+e.version+"/containers/"+url.PathEscape(id)+"/attach?"+q.Encode(), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("docker engine: attach: %w", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("docker engine: attach: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		defer c.Close()
		return nil, readError(resp)
	}
	_ = c.SetDeadline(time.Time{})
	return &HijackedConn{Conn: c, r: br}, nil
}

// HijackedConn is an attached container's stream.
type HijackedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read reads the multiplexed output.
func (h *HijackedConn) Read(p []byte) (int, error) { return h.r.Read(p) }

// CloseWrite ends the container's stdin.
func (h *HijackedConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Demux splits the engine's multiplexed stream of a container without a
// terminal into stdout and stderr: each frame is a byte naming the stream
// (1 stdout, 2 stderr), three zero bytes and a big-endian length.
func Demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var w io.Writer
		switch hdr[0] {
		case 0, 1: // 0: stdin echo, never asked for; kept with stdout
			w = stdout
		case 2:
			w = stderr
		default:
			return fmt.Errorf("docker engine: attach: bad stream byte %d", hdr[0])
		}
		n := int64(uint32(hdr[4])<<24 | uint32(hdr[5])<<16 | uint32(hdr[6])<<8 | uint32(hdr[7]))
		if _, err := io.CopyBuffer(w, io.LimitReader(r, n), buf); err != nil {
			return err
		}
	}
}
