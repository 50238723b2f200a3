package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/server"
)

// Session is a session of the server as a [jail.Sandbox]: the methods of
// a *jail.Session of this host, over the server's API. Its methods that
// take no context (Inspect, Touch, Pause, Resume, Update, Remove) use the
// one [Client.Sandbox] was given: give it one that lives as long as the
// handle, not one request's; Remove, which is clean-up, is not cut short
// by its cancellation.
type Session struct {
	c   *Client
	id  string
	ctx context.Context
}

var _ jail.Sandbox = (*Session)(nil)

// Sandbox returns session id of the server as a [jail.Sandbox]; ctx is
// what its methods that take no context of their own use. It asks the
// server nothing: a session that does not exist shows in the first call.
func (c *Client) Sandbox(ctx context.Context, id string) *Session {
	return &Session{c: c, id: id, ctx: ctx}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

func (s *Session) path() string { return "/v1/sessions/" + url.PathEscape(s.id) }

// maxStdin bounds ExecOptions.Stdin: it goes in the exec's request body,
// which the server bounds (1 MiB of JSON by default).
const maxStdin = 512 << 10

// Exec runs argv in the session and waits for its report. Its Stdin goes
// in the request (at most 512 KiB; more is refused before anything runs:
// ExecBackground with StdinOpen and WriteStdin carry any amount).
func (s *Session) Exec(ctx context.Context, argv []string, o jail.ExecOptions) (*jail.Result, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &jail.SpecError{Field: "command", Value: "", Err: errors.New("is empty")}
	}
	r := ExecRequest{Command: Command{Argv: argv, Timeout: jail.Duration(o.Timeout)}, Env: o.Env, Cwd: o.Cwd}
	if o.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(o.Stdin, maxStdin+1))
		if err != nil {
			return nil, err
		}
		if len(b) > maxStdin {
			return nil, errors.New("client: ExecOptions.Stdin: more than 512 KiB; use ExecBackground with StdinOpen and WriteStdin")
		}
		// As text when its JSON is no bigger than base64 would be (JSON
		// escapes <, >, & and control bytes in six): either way under
		// the server's 1 MiB body.
		in := string(b)
		if enc, err := json.Marshal(in); err == nil && utf8.Valid(b) && len(enc) <= base64.StdEncoding.EncodedLen(len(b))+2 {
			r.Stdin = &in
		} else {
			r.StdinB64 = base64.StdEncoding.EncodeToString(b)
		}
	}
	res, err := s.c.Exec(ctx, s.id, r)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Inspect returns the session's document.
func (s *Session) Inspect() (*jail.SessionInfo, error) {
	info, err := s.c.Session(s.ctx, s.id)
	if err != nil {
		return nil, err
	}
	return info, nil
}

func (s *Session) action(ctx context.Context, name string, req *server.ActionRequest) error {
	var body io.Reader
	if req != nil {
		b, err := jsonBody(req)
		if err != nil {
			return err
		}
		body = b
	}
	return s.c.do(ctx, "POST", s.path()+":"+name, body, "application/json", nil)
}

// Touch restarts the session's idle timeout.
func (s *Session) Touch() error { return s.action(s.ctx, "touch", nil) }

// Pause freezes the session's processes.
func (s *Session) Pause() error { return s.action(s.ctx, "pause", nil) }

// Resume thaws them.
func (s *Session) Resume() error { return s.action(s.ctx, "resume", nil) }

// Update changes the session's deadlines, default env and cwd (PATCH).
func (s *Session) Update(u jail.SessionUpdate) error {
	_, err := s.c.UpdateSession(s.ctx, s.id, u)
	return err
}

// Snapshot keeps the session's files as a new snapshot, named name (may
// be "").
func (s *Session) Snapshot(ctx context.Context, name string) (*jail.SnapshotInfo, error) {
	body, err := jsonBody(server.SnapshotRequest{Name: name})
	if err != nil {
		return nil, err
	}
	var info jail.SnapshotInfo
	if err := s.c.do(ctx, "POST", s.path()+"/snapshots", body, "application/json", &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Restore puts the files of snapshot (an id or a name) back in the
// session.
func (s *Session) Restore(ctx context.Context, snapshot string) error {
	return s.action(ctx, "restore", &server.ActionRequest{Snapshot: snapshot})
}

// Stat describes path, from the server's answer to a HEAD of it.
func (s *Session) Stat(ctx context.Context, p string) (*jail.FileInfo, error) {
	req, err := http.NewRequestWithContext(ctx, "HEAD", s.c.Base+filesPath(s.id, p), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 { // a HEAD's answer has no body: its headers say what it is
		code := resp.Header.Get("X-Jail-Error-Code")
		if code == "" {
			return nil, fmt.Errorf("jail serve: HEAD %s: %s", p, resp.Status)
		}
		return nil, &server.Error{Code: code, Field: resp.Header.Get("X-Jail-Error-Field"), Message: "HEAD " + p + ": " + resp.Status,
			Retryable: code == server.CodeCapacity || code == server.CodeBusy}
	}
	h := resp.Header
	fi := &jail.FileInfo{Name: path.Base(p), Path: p, Type: h.Get("X-Jail-File-Type")}
	mode, err := strconv.ParseUint(h.Get("X-Jail-File-Mode"), 8, 32)
	if err != nil || fi.Type == "" {
		return nil, errors.New("client: HEAD " + p + ": no file description in the answer (an older server?)")
	}
	fi.Mode = jail.FileModeOf(uint32(mode))
	if v, err := strconv.ParseUint(h.Get("X-Jail-File-Uid"), 10, 32); err == nil {
		fi.UID = uint32(v)
	}
	if v, err := strconv.ParseUint(h.Get("X-Jail-File-Gid"), 10, 32); err == nil {
		fi.GID = uint32(v)
	}
	if v, err := strconv.ParseInt(h.Get("X-Jail-File-Size"), 10, 64); err == nil {
		fi.Size = v
	} else if fi.Type == "file" {
		fi.Size = resp.ContentLength
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get("X-Jail-File-Mtime")); err == nil {
		fi.ModTime = t
	} else if t, err := http.ParseTime(h.Get("Last-Modified")); err == nil {
		fi.ModTime = t
	}
	if t, err := url.PathUnescape(h.Get("X-Jail-File-Target")); err == nil {
		fi.Target = t
	}
	return fi, nil
}

// ReadFile copies path to w.
func (s *Session) ReadFile(ctx context.Context, p string, w io.Writer) (int64, error) {
	return s.c.ReadFile(ctx, s.id, p, w)
}

// WriteFile writes r to path as o says (the server applies o.Into as
// jail.Session.WriteFile does; a mode with setuid, setgid or sticky is
// refused there too).
func (s *Session) WriteFile(ctx context.Context, p string, r io.Reader, o jail.WriteOptions) (int64, error) {
	q := url.Values{}
	if o.Mode != 0 {
		q.Set("mode", fmt.Sprintf("0%o", jail.UnixMode(o.Mode)))
	}
	if o.Mkdir {
		q.Set("mkdir", "1")
	}
	if o.Into != "" {
		q.Set("into", o.Into)
	}
	var out struct {
		Bytes int64 `json:"bytes"`
	}
	err := s.c.do(ctx, "PUT", filesPath(s.id, p)+"?"+q.Encode(), r, "application/octet-stream", &out)
	return out.Bytes, err
}

// ReadDir lists path, depth levels deep (0: all).
func (s *Session) ReadDir(ctx context.Context, p string, depth int) ([]jail.FileInfo, error) {
	return s.c.ReadDir(ctx, s.id, p, depth)
}

// RemoveFile removes path (a directory with recursive).
func (s *Session) RemoveFile(ctx context.Context, p string, recursive bool) error {
	return s.c.RemoveFile(ctx, s.id, p, recursive)
}

// Remove ends the session and removes it; it returns how many of its
// processes were killed.
func (s *Session) Remove() (int, error) {
	var out struct {
		Killed int `json:"killed"`
	}
	err := s.c.do(context.WithoutCancel(s.ctx), "DELETE", s.path(), nil, "", &out)
	return out.Killed, err
}
