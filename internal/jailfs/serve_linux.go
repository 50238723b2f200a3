package jailfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Serve is the files helper's whole life after its C stage: it loads the
// helper's seccomp filter, reads one request from sock, carries it out in
// the jail with stdin and stdout as its data, answers on sock and returns
// the exit code. It must run before anything else of the program does.
func Serve(sock *os.File, stdin io.Reader, stdout io.Writer) int {
	if err := LoadFilter(); err != nil {
		reply(sock, &Reply{Error: newError("seccomp", "", err)})
		return 1
	}
	req, err := readRequest(sock)
	if err != nil {
		reply(sock, &Reply{Error: newError("request", "", err)})
		return 1
	}
	rep := serve(req, sock, stdin, stdout)
	err = reply(sock, rep)
	linger(sock)
	if err != nil || rep.Error != nil {
		return 1
	}
	return 0
}

// linger waits, after the answer, until the parent closes the socket:
// it closes its data first, so that the parent's copies end, and reads
// (and drops) what the parent still sends, a Commit after a refusal. A
// unix socket closed with unread data would make the parent's read of
// the answer fail with ECONNRESET instead.
func linger(sock *os.File) {
	_ = unix.Close(0)
	_ = unix.Close(1)
	b := make([]byte, MaxRequest)
	for {
		if n, err := sock.Read(b); n == 0 || err != nil {
			return
		}
	}
}

func readRequest(sock *os.File) (*Request, error) {
	b := make([]byte, MaxRequest)
	n, err := sock.Read(b)
	if err != nil {
		return nil, err
	}
	var req Request
	if err := json.Unmarshal(b[:n], &req); err != nil {
		return nil, err
	}
	return &req, nil
}

func reply(sock *os.File, r *Reply) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = sock.Write(b)
	return err
}

// commitFrom returns a Commit check that reads the parent's Commit from
// sock: the data is the parent's only when it says how much it sent.
func commitFrom(sock *os.File) func(int64) error {
	return func(n int64) error {
		b := make([]byte, MaxRequest)
		k, err := sock.Read(b)
		if err != nil || k == 0 {
			return fmt.Errorf("no commit from jail: %v", errOr(err, io.EOF))
		}
		var c Commit
		if err := json.Unmarshal(b[:k], &c); err != nil {
			return err
		}
		if c.Abort {
			return errors.New("aborted by jail (its input failed)")
		}
		if c.Bytes != n {
			return fmt.Errorf("received %d bytes, jail sent %d", n, c.Bytes)
		}
		return nil
	}
}

func errOr(err, or error) error {
	if err != nil {
		return err
	}
	return or
}

// serve carries out one request.
func serve(req *Request, sock *os.File, stdin io.Reader, stdout io.Writer) *Reply {
	p, err := CleanPath(req.Path)
	if err != nil {
		return &Reply{Error: &Error{Op: string(req.Op), Path: req.Path, Errno: unix.EINVAL, Message: err.Error()}}
	}
	root, err := OpenRoot("/")
	if err != nil {
		return &Reply{Error: newError("open", "/", err)}
	}
	defer root.Close()
	rep := &Reply{}
	if req.Into != "" && (req.Op == OpPut || req.Op == OpPutTar) {
		if p, err = root.into(p, req.Into); err != nil {
			return &Reply{Error: newError(string(req.Op), req.Path, err)}
		}
	}
	switch req.Op {
	case OpStat:
		rep.Entry, err = root.Stat(p)
	case OpGet:
		rep.Entry, rep.Bytes, err = root.Get(p, stdout)
	case OpPut:
		rep.Bytes, err = root.Put(p, stdin, PutOptions{Mode: req.Mode, Mkdir: req.Mkdir, Commit: commitFrom(sock)})
	case OpGetTar:
		cw := &countWriter{w: stdout}
		if len(req.Layers) > 0 {
			rep.Entries, rep.Skipped, err = root.ArchiveLayers(p, req.Layers, cw)
		} else {
			rep.Entries, rep.Skipped, err = root.Archive(p, cw)
		}
		rep.Bytes = cw.n
	case OpPutTar:
		if len(req.Layers) > 0 {
			// A snapshot's layer goes in as a lower layer, from the host
			// (a layer tree), never through the overlays.
			err = &Error{Op: "put_tar", Path: p, Errno: unix.EINVAL, Message: "layers: only archived, not applied"}
			break
		}
		rep.Entries, rep.Bytes, err = root.Extract(p, stdin, ExtractOptions{Mkdir: req.Mkdir, Clear: req.Clear, KeepLinks: req.KeepLinks, Commit: commitFrom(sock)})
	case OpList:
		rep.Entries, err = root.List(p, req.Depth, stdout)
	case OpRemove:
		err = root.Remove(p, req.Recursive)
	case OpRename:
		var to string
		if to, err = CleanPath(req.To); err == nil {
			err = root.Rename(p, to)
		} else {
			err = &Error{Op: "rename", Path: req.To, Errno: unix.EINVAL, Message: err.Error()}
		}
	case OpStatfs:
		rep.Statfs, err = root.Statfs(p)
	default:
		err = &Error{Op: string(req.Op), Errno: unix.EINVAL, Message: "unknown operation"}
	}
	if err != nil {
		rep.Error = newError(string(req.Op), p, err)
	}
	return rep
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
