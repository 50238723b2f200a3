package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Exec records. A client that started a background (or detached) exec
// polls it by id, and a server restart (an upgrade, a crash) must not
// turn its answer into "no such exec": the exec's document is kept in
// STATE_DIR/execs when it starts and again when it ends, and the next
// server takes them up. One that had ended is answered as before the
// restart, its events replayed as a "lost" range and its last event; one
// that was running is ended with the server (its helper kills its
// command when the server's end of the sync pipe closes), and is answered
// as state "interrupted", error INTERRUPTED: its output and status are
// not known.
//
// The files are written and renamed, not fsynced: a server's crash keeps
// the page cache; a host's crash ends the sessions too. A waited-for or
// streamed exec, whose client is there to see its end, is not recorded:
// its start pays no file write.

// ExecInterrupted is ExecInfo.State of an exec a server stopped under.
const ExecInterrupted = "interrupted"

// maxExecRecord bounds a record's file (a variable for the tests): one
// whose captured output would make it bigger is kept without it.
var maxExecRecord int64 = 64 << 20

// execRecord is an exec's file.
type execRecord struct {
	Tenant string   `json:"tenant"`
	Info   ExecInfo `json:"info"`
}

var execIDPattern = regexp.MustCompile(`^x[0-9a-f]{12}$`)

// execRecordDir is where the records are.
func (s *Server) execRecordDir() string { return filepath.Join(s.cfg.StateDir, "execs") }

// execRecordPath is x's file: by the tenant's hash (a tenant's name may
// hold any character) and the exec's id.
func execRecordPath(dir, tenant, id string) string {
	sum := sha256.Sum256([]byte(tenant))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+"-"+id+".json")
}

// record writes x's document to its file, when x is recorded and not
// forgotten. A document too big for a record (the captured output of a
// large output limit) is kept without the captured output, marked
// truncated (its byte counts stay).
func (s *Server) record(x *execEntry) {
	if x.recordPath == "" {
		return
	}
	// The state is read under recMu: records written at once (the start
	// event's and the exec's own) land in the order they were read, the
	// newest last.
	x.recMu.Lock()
	defer x.recMu.Unlock()
	if x.forgotten {
		return
	}
	in := x.info()
	b, err := json.Marshal(execRecord{Tenant: x.tenant, Info: *in})
	if err == nil && int64(len(b)) > maxExecRecord && in.Result != nil {
		r := *in.Result
		r.Stdout, r.Stderr, r.StdoutEncoding, r.StderrEncoding = "", "", "", ""
		r.StdoutTruncated, r.StderrTruncated = r.StdoutBytes > 0, r.StderrBytes > 0
		in.Result = &r
		b, err = json.Marshal(execRecord{Tenant: x.tenant, Info: *in})
	}
	if err == nil {
		err = writeFileAtomic(x.recordPath, b)
	}
	if err != nil {
		// Not a reason to fail the exec: a restart would forget it, as
		// before records.
		s.cfg.Logger.Warn("exec record", "exec", x.id, "err", err)
	}
}

// forget removes x's file, when x is recorded, for good: a record after
// this writes nothing.
func (x *execEntry) forget() {
	if x.recordPath == "" {
		return
	}
	x.recMu.Lock()
	defer x.recMu.Unlock()
	x.forgotten = true
	_ = os.Remove(x.recordPath)
}

// writeFileAtomic writes b to p through a temporary file and a rename.
func writeFileAtomic(p string, b []byte) error {
	tmp, err := writeTemp(filepath.Dir(p), ".tmp-", b, false)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// loadExecRecords takes up the records of the last server: the ended ones
// kept ExecRetention since their end, the running ones ended now as
// interrupted (and written so). Files that are not records (temporary
// ones of a write cut short, unreadable, too big, misnamed) are removed.
func (s *Server) loadExecRecords() error {
	dir := s.execRecordDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	now := time.Now()
	type loaded struct {
		rec  *execRecord
		path string
	}
	var all []loaded
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		rec, err := readExecRecord(p)
		if err == nil && execRecordPath(dir, rec.Tenant, rec.Info.ID) != p {
			err = errors.New("misnamed")
		}
		if err == nil {
			switch in := rec.Info; in.State {
			case ExecRunning:
			case ExecExited, ExecFailed, ExecInterrupted:
				if in.EndedAt == nil {
					err = errors.New("ended, but no ended_at")
				} else if now.Sub(*in.EndedAt) > ExecRetention {
					_ = os.Remove(p) // past its retention
					continue
				}
			default:
				err = fmt.Errorf("state %q", in.State)
			}
		}
		if err != nil {
			s.cfg.Logger.Warn("exec record removed", "file", p, "err", err)
			_ = os.Remove(p)
			continue
		}
		all = append(all, loaded{rec, p})
	}
	// Oldest end first, as they ended: a tenant's limit then forgets the
	// oldest (a running one ended now, last).
	endOf := func(l loaded) time.Time {
		if l.rec.Info.EndedAt == nil {
			return now
		}
		return *l.rec.Info.EndedAt
	}
	slices.SortStableFunc(all, func(a, b loaded) int { return endOf(a).Compare(endOf(b)) })
	n := 0
	for _, l := range all {
		in := l.rec.Info
		// The last event's seq: the one it had, or the next for the end
		// found now.
		last := in.NextSeq - 1
		if in.State == ExecRunning {
			in.State, in.EndedAt = ExecInterrupted, &now
			in.Error = apiErr(CodeInterrupted, "", "the server stopped while it ran, and its command ended with it: its output and status are not known")
			last = in.NextSeq
		}
		x := s.endedRecord(l.rec.Tenant, in, last, l.path)
		if l.rec.Info.State == ExecRunning {
			s.record(x)
		}
		n++
	}
	if n > 0 {
		s.cfg.Logger.Info("exec records taken up", "execs", n)
	}
	return nil
}

// readExecRecord reads and checks one record.
func readExecRecord(p string) (*execRecord, error) {
	if !strings.HasSuffix(p, ".json") {
		return nil, errors.New("not a record")
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case st.Size() > maxExecRecord:
		return nil, fmt.Errorf("%d bytes: at most %d", st.Size(), maxExecRecord)
	}
	dec := json.NewDecoder(io.LimitReader(f, maxExecRecord))
	dec.DisallowUnknownFields()
	var rec execRecord
	if err := dec.Decode(&rec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON document")
	}
	// NextSeq 1: recorded before its start event was out.
	if !execIDPattern.MatchString(rec.Info.ID) || rec.Info.Session == "" || rec.Info.NextSeq < 1 {
		return nil, errors.New("not a record")
	}
	return &rec, nil
}

// endedRecord is the exec of an ended record, kept as the execs a server
// ran are: its events lost but the last (exit with the result, or error),
// numbered last.
func (s *Server) endedRecord(tenant string, in ExecInfo, last int, path string) *execEntry {
	x := &execEntry{id: in.ID, session: in.Session, tenant: tenant, argv: in.Argv, started: in.StartedAt,
		changed: make(chan struct{}), next: last, ownerNext: last, keepalive: s.cfg.Keepalive,
		writeTimeout: s.cfg.StreamWriteTimeout, recordPath: path, interrupted: in.State == ExecInterrupted}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.cancel()
	if in.Error != nil {
		x.publish(map[string]any{"event": "error", "error": in.Error}, true)
	} else {
		x.publish(map[string]any{"event": "exit", "result": in.Result}, true)
	}
	x.done, x.ended, x.result, x.err = true, *in.EndedAt, in.Result, in.Error
	s.execs.add(x)
	return x
}
