package server

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Idempotency-Key: a POST that carries one is done once per tenant and
// key; a retry gets the first outcome (its status and body, with
// Idempotent-Replayed: true), a retry while the first is under way gets
// 409 BUSY (retryable), and the key with another request (method, path,
// body) 400. Kept in memory, for IdempotencyTTL, up to MaxIdempotencyKeys
// per tenant (the oldest go first): a restarted server has forgotten them.
// Streamed answers (NDJSON) and server errors (5xx: a retry may succeed)
// are not kept.
const (
	IdempotencyTTL     = 24 * time.Hour
	MaxIdempotencyKeys = 1024
	maxKeyLength       = 255
	maxKeptBody        = 4 << 20
)

type idemKey struct {
	tenant string
	key    string
}

type idemEntry struct {
	fingerprint [32]byte
	done        bool
	at          time.Time
	status      int
	ctype       string
	body        []byte
}

type idempotency struct {
	mu      sync.Mutex
	entries map[idemKey]*idemEntry
	order   map[string][]string // per tenant, oldest first
}

func newIdempotency() *idempotency {
	return &idempotency{entries: map[idemKey]*idemEntry{}, order: map[string][]string{}}
}

// begin looks key up for a request of fingerprint fp. It returns the entry
// to replay (done), or an Error, or registers the request and returns
// neither: the caller then calls finish.
func (m *idempotency) begin(k idemKey, fp [32]byte) (*idemEntry, *Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[k]; ok && time.Since(e.at) < IdempotencyTTL {
		switch {
		case e.fingerprint != fp:
			return nil, apiErr(CodeBadRequest, "Idempotency-Key", "Idempotency-Key %q was used for another request", k.key)
		case !e.done:
			return nil, apiErr(CodeBusy, "Idempotency-Key", "the request of Idempotency-Key %q is still under way", k.key)
		}
		return e, nil
	}
	m.entries[k] = &idemEntry{fingerprint: fp, at: time.Now()}
	m.order[k.tenant] = append(m.order[k.tenant], k.key)
	if o := m.order[k.tenant]; len(o) > MaxIdempotencyKeys {
		for _, old := range o[:len(o)-MaxIdempotencyKeys] {
			if e := m.entries[idemKey{k.tenant, old}]; e != nil && e.done {
				delete(m.entries, idemKey{k.tenant, old})
			}
		}
		m.order[k.tenant] = append([]string{}, o[len(o)-MaxIdempotencyKeys:]...)
	}
	return nil, nil
}

// finish records the outcome of k's request, or forgets k when the
// outcome is not to be replayed.
func (m *idempotency) finish(k idemKey, status int, ctype string, body []byte, keep bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[k]
	if e == nil {
		return
	}
	if !keep {
		delete(m.entries, k)
		return
	}
	e.done, e.at, e.status, e.ctype, e.body = true, time.Now(), status, ctype, body
}

// teeRecorder keeps a copy of what the handler answers, up to maxKeptBody.
type teeRecorder struct {
	*statusRecorder
	buf      bytes.Buffer
	overflow bool
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return asAPIError(err, "")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp := sha256.New()
	io.WriteString(fp, r.Method+" "+r.URL.RequestURI()+"\x00"+r.Header.Get("Accept")+"\x00")
	fp.Write(body)
	var sum [32]byte
	copy(sum[:], fp.Sum(nil))
	k := idemKey{t.Name, key}
	e, ae := s.idem.begin(k, sum)
	if ae != nil {
		return ae
	}
	if e != nil {
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", e.ctype)
		w.WriteHeader(e.status)
		_, _ = w.Write(e.body)
		return nil
	}
	tee := &teeRecorder{statusRecorder: w}
	ae = h(tee)
	if ae != nil && !tee.wrote {
		writeError(tee, ae)
		ae = nil
	}
	ctype := tee.Header().Get("Content-Type")
	keep := tee.status < 500 && !tee.overflow && !strings.HasPrefix(ctype, "application/x-ndjson") &&
		!strings.HasPrefix(ctype, "text/event-stream") &&
		!(tee.status == http.StatusConflict && strings.Contains(tee.buf.String(), `"`+CodeBusy+`"`))
	s.idem.finish(k, tee.status, ctype, tee.buf.Bytes(), keep)
	return ae
}
