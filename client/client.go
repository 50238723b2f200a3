// Package client is a Go client of `jail serve` (package server): runs,
// batches and warm pools, sessions, their commands (waited for, streamed,
// or in the background with replay, stdin and signals) and their files,
// over the server's unix socket (Unix) or TCP with a bearer token (TCP).
// It has no dependency on Linux: a program on another system can drive a
// jail server it reaches over TCP or through a forwarded socket.
//
//	c := client.Unix("/run/jail/jail.sock")
//	res, err := c.Run(ctx, client.RunRequest{Command: client.Command{Shell: "echo hi"}})
//
// Errors of the API are *server.Error (errors.As), with a stable Code; a
// workload's exit status, timeout or OOM is in the Result, never an error.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/server"
)

// The request bodies are the server's.
type (
	Command        = server.Command
	RunRequest     = server.RunRequest
	SessionRequest = server.SessionRequest
	ExecRequest    = server.ExecRequest
)

// Client talks to one server.
type Client struct {
	// HTTP carries the requests; Unix makes one that dials the socket.
	HTTP *http.Client
	// Base is the URL the paths are joined to ("http://jail" on a socket).
	Base string
}

// TCP returns a client of the server at base ("https://host:8443") that
// presents token (jail serve token) with every request; tlsConf, when not
// nil, configures TLS (the server's CA, for one).
func TCP(base, token string, tlsConf *tls.Config) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConf
	return &Client{Base: strings.TrimSuffix(base, "/"), HTTP: &http.Client{Transport: &bearer{token: token, next: t}}}
}

// bearer adds the token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Unix returns a client of the server listening on the unix socket at path.
func Unix(path string) *Client {
	return &Client{Base: "http://jail", HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}}
}

// do sends a request and decodes a 2xx JSON answer into out (when not
// nil); any other answer is returned as its *server.Error.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	resp, err := c.send(ctx, method, path, body, contentType, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// send sends a request; an answer that is not 2xx is returned as an error,
// its body consumed.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader, contentType, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb server.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
			return nil, eb.Error
		}
		return nil, fmt.Errorf("jail serve: %s %s: %s", method, path, resp.Status)
	}
	return resp, nil
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	return bytes.NewReader(b), err
}

// Run runs one command in a new jail and returns its report.
func (c *Client) Run(ctx context.Context, r RunRequest) (*jail.Result, error) {
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	var res jail.Result
	return &res, c.do(ctx, "POST", "/v1/run", body, "application/json", &res)
}

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, r SessionRequest) (*jail.SessionInfo, error) {
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	var info jail.SessionInfo
	return &info, c.do(ctx, "POST", "/v1/sessions", body, "application/json", &info)
}

// Sessions lists the caller's sessions that have all of labels.
func (c *Client) Sessions(ctx context.Context, labels map[string]string) ([]*jail.SessionInfo, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	var out struct {
		Sessions []*jail.SessionInfo `json:"sessions"`
	}
	err := c.do(ctx, "GET", "/v1/sessions?"+q.Encode(), nil, "", &out)
	return out.Sessions, err
}

// Session returns one session.
func (c *Client) Session(ctx context.Context, id string) (*jail.SessionInfo, error) {
	var info jail.SessionInfo
	return &info, c.do(ctx, "GET", "/v1/sessions/"+url.PathEscape(id), nil, "", &info)
}

// UpdateSession changes a session (PATCH): the fields of u that are not
// nil, as jail.Session.Update does.
func (c *Client) UpdateSession(ctx context.Context, id string, u jail.SessionUpdate) (*jail.SessionInfo, error) {
	req := server.PatchRequest{SessionUpdate: u}
	if u.TTL != nil {
		d := jail.Duration(*u.TTL)
		req.TTL = &d
	}
	if u.IdleTimeout != nil {
		d := jail.Duration(*u.IdleTimeout)
		req.IdleTimeout = &d
	}
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var info jail.SessionInfo
	return &info, c.do(ctx, "PATCH", "/v1/sessions/"+url.PathEscape(id), body, "application/json", &info)
}

// RemoveSession ends a session and removes it.
func (c *Client) RemoveSession(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/sessions/"+url.PathEscape(id), nil, "", nil)
}

// RemoveSessions removes the tenant's sessions that have every one of
// labels, or, with all (and no labels), every session of the tenant. It
// returns the ids removed; those that could not be are in the error.
func (c *Client) RemoveSessions(ctx context.Context, labels map[string]string, all bool) ([]string, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	if all {
		q.Set("all", "1")
	}
	var out struct {
		Removed []struct {
			ID string `json:"id"`
		} `json:"removed"`
		Failed []struct {
			ID    string        `json:"id"`
			Error *server.Error `json:"error"`
		} `json:"failed"`
	}
	if err := c.do(ctx, "DELETE", "/v1/sessions?"+q.Encode(), nil, "", &out); err != nil {
		return nil, err
	}
	ids := make([]string, len(out.Removed))
	for i, r := range out.Removed {
		ids[i] = r.ID
	}
	var errs []error
	for _, f := range out.Failed {
		errs = append(errs, fmt.Errorf("session %s: %w", f.ID, f.Error))
	}
	return ids, errors.Join(errs...)
}

// Exec runs a command in a session and returns its report.
func (c *Client) Exec(ctx context.Context, id string, r ExecRequest) (*jail.Result, error) {
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	var res jail.Result
	return &res, c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(id)+"/exec", body, "application/json", &res)
}

// Event is one event of an exec: numbered (Seq) but for keepalive and
// lost, which say that the stream is alive and which events were dropped
// before a replay's start (From, To).
type Event struct {
	Seq      int           `json:"seq"`
	Event    string        `json:"event"` // start, stdout, stderr, keepalive, lost, exit, error
	Exec     string        `json:"exec,omitempty"`
	PID      int           `json:"pid,omitempty"` // start: the command's pid in the session
	Data     string        `json:"data,omitempty"`
	Encoding string        `json:"encoding,omitempty"`
	From     int           `json:"from,omitempty"`
	To       int           `json:"to,omitempty"`
	Result   *jail.Result  `json:"result,omitempty"`
	Error    *server.Error `json:"error,omitempty"`
}

// ExecStream runs a command in a session, writing its output to stdout and
// stderr (either may be nil) as it comes, and returns its report. Ending
// ctx ends the command (unless r.Detach). A stream that ends without its
// exit event is an error.
func (c *Client) ExecStream(ctx context.Context, id string, r ExecRequest, stdout, stderr io.Writer) (*jail.Result, error) {
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, "POST", "/v1/sessions/"+url.PathEscape(id)+"/exec", body, "application/json", "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return follow(resp.Body, 1, stdout, stderr)
}

// follow reads an exec's events from seq from on, writing the output to
// stdout and stderr, until its exit or error event.
func follow(r io.Reader, from int, stdout, stderr io.Writer) (*jail.Result, error) {
	sc := bufio.NewScanner(r)
	// An output event carries at most 32 KiB; the exit event the whole
	// result, with the captured head and tail of both streams.
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	next := from
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("jail serve: event %d: %w", next, err)
		}
		switch {
		case e.Event == "keepalive":
			continue
		case e.Event == "lost":
			next = e.To + 1
			continue
		case e.Seq != next:
			return nil, fmt.Errorf("jail serve: event %d came as %d", next, e.Seq)
		}
		next++
		switch e.Event {
		case "stdout", "stderr":
			data := []byte(e.Data)
			if e.Encoding == "base64" {
				var err error
				if data, err = base64.StdEncoding.DecodeString(e.Data); err != nil {
					return nil, fmt.Errorf("jail serve: event %d: %w", e.Seq, err)
				}
			}
			w := stdout
			if e.Event == "stderr" {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(data); err != nil {
					return nil, err
				}
			}
		case "exit":
			return e.Result, nil
		case "error":
			return nil, e.Error
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("jail serve: the stream ended without its exit event (at event %d)", next)
}

// execPath is the route of exec eid of session id.
func execPath(id, eid string) string {
	return "/v1/sessions/" + url.PathEscape(id) + "/exec/" + url.PathEscape(eid)
}

// ExecBackground starts a command in a session that runs until it ends,
// whoever follows it (r.Background is set), and returns its document.
func (c *Client) ExecBackground(ctx context.Context, id string, r ExecRequest) (*server.ExecInfo, error) {
	r.Background = true
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	var in server.ExecInfo
	return &in, c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(id)+"/exec", body, "application/json", &in)
}

// ExecInfo returns an exec's document: its state, and its result once it
// ended.
func (c *Client) ExecInfo(ctx context.Context, id, eid string) (*server.ExecInfo, error) {
	var in server.ExecInfo
	return &in, c.do(ctx, "GET", execPath(id, eid), nil, "", &in)
}

// Follow replays an exec's events from seq from (1: all that are kept)
// and follows it to its end, writing its output to stdout and stderr;
// it returns its report. Ending ctx stops following, not the exec.
func (c *Client) Follow(ctx context.Context, id, eid string, from int, stdout, stderr io.Writer) (*jail.Result, error) {
	resp, err := c.send(ctx, "GET", execPath(id, eid)+"/events?from="+strconv.Itoa(from), nil, "", "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return follow(resp.Body, from, stdout, stderr)
}

// WriteStdin writes r to an exec's stdin (opened with StdinOpen), and
// closes it after when eof.
func (c *Client) WriteStdin(ctx context.Context, id, eid string, r io.Reader, eof bool) error {
	q := ""
	if eof {
		q = "?eof=1"
	}
	return c.do(ctx, "POST", execPath(id, eid)+"/stdin"+q, r, "application/octet-stream", nil)
}

// Signal sends a signal ("TERM", "SIGINT", ...) to an exec's process
// group.
func (c *Client) Signal(ctx context.Context, id, eid, signal string) error {
	body, err := jsonBody(server.SignalRequest{Signal: signal})
	if err != nil {
		return err
	}
	return c.do(ctx, "POST", execPath(id, eid)+"/signal", body, "application/json", nil)
}

// RunBatch runs several commands, each in a new jail, and returns one
// entry per run, in order.
func (c *Client) RunBatch(ctx context.Context, runs []RunRequest) ([]server.BatchEntry, error) {
	body, err := jsonBody(server.BatchRequest{Runs: runs})
	if err != nil {
		return nil, err
	}
	var ans struct {
		Runs []server.BatchEntry `json:"runs"`
	}
	err = c.do(ctx, "POST", "/v1/runs:batch", body, "application/json", &ans)
	return ans.Runs, err
}

// Pools returns the server's warm pools.
func (c *Client) Pools(ctx context.Context) ([]server.PoolInfo, error) {
	var ans struct {
		Pools []server.PoolInfo `json:"pools"`
	}
	err := c.do(ctx, "GET", "/v1/pools", nil, "", &ans)
	return ans.Pools, err
}

// filesPath is the route of path (absolute, in the jail) of session id.
func filesPath(id, path string) string {
	return "/v1/sessions/" + url.PathEscape(id) + "/files/" + (&url.URL{Path: strings.TrimPrefix(path, "/")}).EscapedPath()
}

// WriteFile writes r to path in session id (mode 0: 0644), making the
// missing directories above it with mkdir.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode uint32, mkdir bool) (int64, error) {
	q := url.Values{}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode), 8))
	}
	if mkdir {
		q.Set("mkdir", "1")
	}
	var out struct {
		Bytes int64 `json:"bytes"`
	}
	err := c.do(ctx, "PUT", filesPath(id, path)+"?"+q.Encode(), r, "application/octet-stream", &out)
	return out.Bytes, err
}

// ReadFile copies path of session id to w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, "GET", filesPath(id, path), nil, "", "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(w, resp.Body)
}

// ReadDir lists path of session id, depth levels deep (0: all).
func (c *Client) ReadDir(ctx context.Context, id, path string, depth int) ([]jail.FileInfo, error) {
	var out struct {
		Files []jail.FileInfo `json:"files"`
	}
	err := c.do(ctx, "GET", filesPath(id, path)+"?list&depth="+strconv.Itoa(depth), nil, "", &out)
	return out.Files, err
}

// RemoveFile removes path of session id (a directory with recursive).
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	q := ""
	if recursive {
		q = "?recursive=1"
	}
	return c.do(ctx, "DELETE", filesPath(id, path)+q, nil, "", nil)
}
