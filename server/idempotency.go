package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Idempotency-Key: a POST that carries one is done once per tenant and
// key; a retry gets the first outcome (its status and body, with
// Idempotent-Replayed: true), a retry while the first is under way gets
// 409 BUSY (retryable), and the key with another request (method, path,
// Accept, body) 400. Kept for IdempotencyTTL, up to MaxIdempotencyKeys and
// MaxIdempotencyBytes of answers per tenant (the oldest go first), in
// memory and in the state directory (StateDir/idempotency, one file a
// key), so that a restarted server replays them too. A key whose request
// was under way when the server stopped, or whose handler panicked, is
// answered 409 INTERRUPTED: its outcome is not known (a session may have
// been made, a command run), and doing it again could do it twice. The
// record that a request is under way is synced to the disk before the
// request is done; its answer is not (lost, the key reads INTERRUPTED).
// Server errors (5xx: a retry may succeed) are not kept. An exec whose
// answer is not kept as it was (a stream, an answer too big to keep, a
// 5xx, or none: its client went away) is kept as a reference to the
// exec: a retry follows its events from the first (a stream) or waits for
// its result, and never runs it again. That result is what the exec did
// with its first request: one whose client went away was killed with it
// (unless it asked to detach), and the retry gets that.
const (
	IdempotencyTTL      = 24 * time.Hour
	MaxIdempotencyKeys  = 1024
	MaxIdempotencyBytes = 64 << 20
	maxKeyLength        = 255
	maxKeptBody         = 4 << 20
	maxRecordBytes      = maxKeptBody*4/3 + 64<<10 // a record's JSON: the body in base64
)

type idemKey struct {
	tenant string
	key    string
}

type idemEntry struct {
	fingerprint [32]byte
	done        bool
	interrupted bool // under way when an earlier server stopped, or its handler panicked
	at          time.Time
	status      int
	ctype       string
	body        []byte
}

// idemRecord is a key's file: idemEntry as JSON.
type idemRecord struct {
	Tenant      string    `json:"tenant"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"`
	Done        bool      `json:"done"`
	At          time.Time `json:"at"`
	Status      int       `json:"status,omitempty"`
	ContentType string    `json:"content_type,omitempty"`
	Body        []byte    `json:"body,omitempty"`
}

type idempotency struct {
	mu      sync.Mutex
	entries map[idemKey]*idemEntry
	order   map[string][]string // per tenant, oldest first
	dir     string              // "": in memory only
	log     *slog.Logger
}

// newIdempotency keeps its keys in dir too (made 0700 if missing) and
// takes up those an earlier server left there: expired, unreadable or
// oversized ones are removed, and a tenant's oldest beyond the limits.
func newIdempotency(dir string, log *slog.Logger) (*idempotency, error) {
	m := &idempotency{entries: map[idemKey]*idemEntry{}, order: map[string][]string{}, dir: dir, log: log}
	if dir == "" {
		return m, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type loaded struct {
		k idemKey
		e *idemEntry
	}
	var all []loaded
	for _, n := range names {
		p := filepath.Join(dir, n.Name())
		if !strings.HasSuffix(n.Name(), ".json") {
			if strings.HasPrefix(n.Name(), ".key-") {
				_ = os.Remove(p) // a write cut short
			}
			continue
		}
		k, e, err := readIdemRecord(p)
		if err != nil || time.Since(e.at) >= IdempotencyTTL || n.Name() != idemFile(k) {
			if err != nil {
				log.Warn("idempotency key unreadable: removed", "file", p, "err", err)
			}
			_ = os.Remove(p)
			continue
		}
		all = append(all, loaded{k, e})
	}
	slices.SortFunc(all, func(a, b loaded) int { return a.e.at.Compare(b.e.at) })
	for _, l := range all {
		m.entries[l.k] = l.e
		m.order[l.k.tenant] = append(m.order[l.k.tenant], l.k.key)
	}
	for tenant := range m.order {
		m.trim(tenant)
	}
	return m, nil
}

func readIdemRecord(p string) (idemKey, *idemEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return idemKey{}, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return idemKey{}, nil, err
	}
	if len(b) > maxRecordBytes {
		return idemKey{}, nil, errors.New("larger than a record can be")
	}
	var r idemRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return idemKey{}, nil, err
	}
	e := &idemEntry{done: r.Done, interrupted: !r.Done, at: r.At, status: r.Status, ctype: r.ContentType, body: r.Body}
	fp, err := hex.DecodeString(r.Fingerprint)
	if err != nil || len(fp) != len(e.fingerprint) {
		return idemKey{}, nil, errors.New("bad fingerprint")
	}
	copy(e.fingerprint[:], fp)
	if r.Done && (r.Status < 100 || r.Status > 599) {
		return idemKey{}, nil, fmt.Errorf("bad status %d", r.Status)
	}
	return idemKey{r.Tenant, r.Key}, e, nil
}

// idemFile names k's file: a hash, whatever the tenant's name and the key.
func idemFile(k idemKey) string {
	h := sha256.Sum256([]byte(k.tenant + "\x00" + k.key))
	return hex.EncodeToString(h[:]) + ".json"
}

// write writes k's record e into a temporary file, synced to the disk
// when sync is set, and returns its name, for rename to put in place. It
// needs no lock: e is a copy.
func (m *idempotency) write(k idemKey, e idemEntry, sync bool) (string, error) {
	b, err := json.Marshal(idemRecord{Tenant: k.tenant, Key: k.key, Fingerprint: hex.EncodeToString(e.fingerprint[:]),
		Done: e.done, At: e.at, Status: e.status, ContentType: e.ctype, Body: e.body})
	if err != nil {
		return "", err
	}
	return writeTemp(m.dir, ".key-", b, sync)
}

// writeTemp writes b into a new temporary file in dir, synced to the disk
// when sync is set, and returns its name; on failure nothing is left.
func writeTemp(dir, prefix string, b []byte, sync bool) (_ string, retErr error) {
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return "", err
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// rename puts the temporary file tmp in place as k's, synced to the disk
// when sync is set; under m.mu, and only while e is still k's entry.
func (m *idempotency) rename(k idemKey, e *idemEntry, tmp string, sync bool) error {
	if m.entries[k] != e {
		_ = os.Remove(tmp) // replaced meanwhile: its file is the newer entry's
		return nil
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, idemFile(k))); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if !sync {
		return nil
	}
	d, err := os.Open(m.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// remove removes k's file; one that cannot be is removed by the next
// server's start once expired.
func (m *idempotency) remove(k idemKey) {
	if m.dir != "" {
		if err := os.Remove(filepath.Join(m.dir, idemFile(k))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("idempotency key not removed", "file", idemFile(k), "err", err)
		}
	}
}

// trim forgets the tenant's oldest ended keys beyond MaxIdempotencyKeys
// or MaxIdempotencyBytes of answers.
func (m *idempotency) trim(tenant string) {
	o := m.order[tenant]
	size, kept := 0, 0
	for i := len(o) - 1; i >= 0; i-- {
		e := m.entries[idemKey{tenant, o[i]}]
		if e == nil {
			continue
		}
		size += len(e.body)
		if kept >= MaxIdempotencyKeys || size > MaxIdempotencyBytes {
			if e.done || e.interrupted {
				delete(m.entries, idemKey{tenant, o[i]})
				m.remove(idemKey{tenant, o[i]})
				continue
			}
		}
		kept++
	}
	m.order[tenant] = slices.DeleteFunc(o, func(key string) bool { return m.entries[idemKey{tenant, key}] == nil })
}

// begin looks key up for a request of fingerprint fp. It returns the entry
// to replay (done), or an Error, or registers the request, its record on
// the disk, and returns neither: the caller then calls finish.
func (m *idempotency) begin(k idemKey, fp [32]byte) (*idemEntry, *Error) {
	m.mu.Lock()
	if e, ok := m.entries[k]; ok && time.Since(e.at) < IdempotencyTTL {
		defer m.mu.Unlock()
		switch {
		case e.fingerprint != fp:
			return nil, apiErr(CodeBadRequest, "Idempotency-Key", "Idempotency-Key %q was used for another request", k.key)
		case e.interrupted:
			return nil, apiErr(CodeInterrupted, "Idempotency-Key",
				"the request of Idempotency-Key %q was cut short (the server stopped, or failed) while under way: what it did is not known; look before you send it again, with another key", k.key)
		case !e.done:
			return nil, apiErr(CodeBusy, "Idempotency-Key", "the request of Idempotency-Key %q is still under way", k.key)
		}
		return e, nil
	}
	e := &idemEntry{fingerprint: fp, at: time.Now()}
	m.entries[k] = e // a retry meanwhile is BUSY
	m.order[k.tenant] = append(slices.DeleteFunc(m.order[k.tenant], func(o string) bool { return o == k.key }), k.key)
	m.trim(k.tenant)
	m.mu.Unlock()
	if m.dir == "" {
		return nil, nil
	}
	// Done only once is what the key asks for: without its record, a
	// restart would forget it and do it again.
	tmp, err := m.write(k, *e, true)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		err = m.rename(k, e, tmp, true)
	}
	if err != nil {
		if m.entries[k] == e {
			delete(m.entries, k)
		}
		return nil, asAPIError(fmt.Errorf("recording Idempotency-Key %q: %w", k.key, err), "")
	}
	return nil, nil
}

// finish records the outcome of k's request, or forgets k when the
// outcome is not to be replayed, or marks it interrupted.
func (m *idempotency) finish(k idemKey, status int, ctype string, body []byte, how finishHow) {
	m.mu.Lock()
	e := m.entries[k]
	if e == nil || e.done {
		m.mu.Unlock()
		return
	}
	switch how {
	case forget:
		delete(m.entries, k)
		m.remove(k)
		m.mu.Unlock()
		return
	case interrupt:
		e.interrupted = true // its record on the disk says so already
		m.mu.Unlock()
		return
	}
	e.done, e.at, e.status, e.ctype, e.body = true, time.Now(), status, ctype, body
	m.trim(k.tenant)
	m.mu.Unlock()
	if m.dir == "" {
		return
	}
	tmp, err := m.write(k, *e, false)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		err = m.rename(k, e, tmp, false)
	}
	if err != nil {
		// The answer is kept in memory; a restarted server would take
		// the key for interrupted, which says the truth it knows.
		m.log.Warn("idempotency key's answer not recorded", "file", idemFile(k), "err", err)
	}
}

type finishHow int

const (
	keep      finishHow = iota // replay the answer
	forget                     // a retry may do it again
	interrupt                  // its outcome is not known
)

// teeRecorder keeps a copy of what the handler answers, up to maxKeptBody.
type teeRecorder struct {
	*statusRecorder
	buf      bytes.Buffer
	overflow bool
	exec     *execRef // the exec the request started (noteExec)
}

func (r *teeRecorder) Write(b []byte) (int, error) {
	if !r.overflow {
		if r.buf.Len()+len(b) > maxKeptBody {
			r.overflow = true
		} else {
			r.buf.Write(b)
		}
	}
	return r.statusRecorder.Write(b)
}

func (r *teeRecorder) Unwrap() http.ResponseWriter { return r.statusRecorder }

// fingerprint tells requests apart for their Idempotency-Key: method,
// path and query, Accept, body.
func fingerprint(r *http.Request, body []byte) [32]byte {
	fp := sha256.New()
	io.WriteString(fp, r.Method+" "+r.URL.RequestURI()+"\x00"+r.Header.Get("Accept")+"\x00")
	fp.Write(body)
	var sum [32]byte
	copy(sum[:], fp.Sum(nil))
	return sum
}

// idempotent runs h for a POST with an Idempotency-Key once per tenant and
// key; see the constants above.
func (s *Server) idempotent(w *statusRecorder, r *http.Request, t Tenant, h func(http.ResponseWriter) *Error) *Error {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		return h(w)
	}
	if len(key) > maxKeyLength || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return apiErr(CodeBadRequest, "Idempotency-Key", "Idempotency-Key: want 1 to %d printable ASCII characters", maxKeyLength)
	}
	if !strings.HasSuffix(r.URL.Path, "/stdin") {
		boundBody(r) // a JSON request's, whatever its Content-Type says; an exec's stdin keeps its own pace
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return asAPIError(err, "")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	k := idemKey{t.Name, key}
	e, ae := s.idem.begin(k, fingerprint(r, body))
	if ae != nil {
		return ae
	}
	if e != nil {
		w.Header().Set("Idempotent-Replayed", "true")
		if e.ctype == execRefType {
			return s.replayExec(w, r, t, e.body)
		}
		w.Header().Set("Content-Type", e.ctype)
		w.WriteHeader(e.status)
		_, _ = w.Write(e.body)
		return nil
	}
	tee := &teeRecorder{statusRecorder: w}
	finished := false
	defer func() {
		if finished {
			return
		}
		p := recover()
		if p == nil { // runtime.Goexit
			s.idem.finish(k, 0, "", nil, forget)
			return
		}
		if p == http.ErrAbortHandler { // a stream's client went away: streams are not kept
			s.idem.finish(k, 0, "", nil, forget)
		} else {
			s.idem.finish(k, 0, "", nil, interrupt)
		}
		panic(p)
	}()
	ae = h(tee)
	if ae != nil && !tee.wrote {
		writeError(tee, ae)
		ae = nil
	}
	ctype := tee.Header().Get("Content-Type")
	stream := strings.HasPrefix(ctype, "application/x-ndjson") || strings.HasPrefix(ctype, "text/event-stream")
	status, body, how := tee.status, tee.buf.Bytes(), forget
	switch {
	case tee.exec != nil && (!tee.wrote || stream || tee.overflow || tee.status >= 500):
		// What a retry gets is the exec's own outcome, from the exec:
		// once started, it may have done something, whatever the answer
		// said (a 500 for its failed set-up included).
		status, ctype, how = http.StatusOK, execRefType, keep
		body, _ = json.Marshal(tee.exec)
	case tee.status >= 500:
	case tee.wrote && !tee.overflow && !stream &&
		!(tee.status == http.StatusConflict && strings.Contains(tee.buf.String(), `"`+CodeBusy+`"`)):
		how = keep
	}
	s.idem.finish(k, status, ctype, body, how)
	finished = true
	return ae
}

// execRefType is the content type of a kept answer that is a reference
// to an exec (execRef), never sent.
const execRefType = "application/vnd.jail.exec-ref+json"

// execRef is the exec a request with an Idempotency-Key started.
type execRef struct {
	Session string `json:"session"`
	Exec    string `json:"exec"`
}

// noteExec tells the recorder of an idempotent request which exec it
// started, and the request's log line; w is the handler's
// ResponseWriter.
func noteExec(w http.ResponseWriter, session, id string) {
	if tee, ok := w.(*teeRecorder); ok {
		tee.exec = &execRef{session, id}
	}
	noteIDs(w, session, id)
}

// replayExec answers a retry of a request that started an exec: its
// events from the first (a stream, as the request's Accept asks), or its
// result once it has ended. An exec no longer kept (ExecRetention after
// its end, or a foreground one a restart ended) ran once: its outcome is
// gone, and it is not run again.
func (s *Server) replayExec(w http.ResponseWriter, r *http.Request, t Tenant, ref []byte) *Error {
	var er execRef
	var x *execEntry
	if json.Unmarshal(ref, &er) == nil {
		x = s.execs.get(t.Name, er.Session, er.Exec)
	}
	if x == nil {
		return apiErr(CodeInterrupted, "Idempotency-Key",
			"the exec of this Idempotency-Key (%s) ran, and is no longer kept: its outcome is not known; look before you send it again, with another key", er.Exec)
	}
	if f := wantsStream(r); f != noStream {
		release, e := s.acquireStream(t) // a follower as any other
		if e != nil {
			return e
		}
		defer release()
		_ = x.follow(r.Context(), w, 1, f, false)
		return nil
	}
	_, e := x.answer(w, r)
	return e
}
