package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIdempotencyKeyRestart: a restarted server of the same state
// directory replays the first answer of a key; a key whose request was
// under way when the server stopped is answered INTERRUPTED, never done
// again.
func TestIdempotencyKeyRestart(t *testing.T) {
	state := t.TempDir()
	request := func(body, key string) (*http.Request, []byte) {
		req, _ := http.NewRequest("POST", "http://jail/v1/run", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		return req, []byte(body)
	}
	post := func(c *http.Client, body, key string) (*http.Response, []byte) {
		req, _ := request(body, key)
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	first, err := New(Config{StateDir: state, Ready: true, Version: "test"})
	require.NoError(t, err)
	r1, b1 := post(unixServer(t, first), `{"argv": []}`, "k-1")
	require.Equal(t, http.StatusBadRequest, r1.StatusCode)
	// A request under way when the server stops: begun, never finished.
	// (The tenant of a unix socket's peer is its uid.)
	_, ae := first.idem.begin(idemKey{fmt.Sprint(os.Geteuid()), "k-2"}, fingerprint(request(`{"argv": ["true"]}`, "k-2")))
	require.Nil(t, ae)
	files, _ := filepath.Glob(filepath.Join(state, "idempotency", "*"))
	for _, f := range files {
		st, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a key's file holds the answer: %s", f)
	}

	first.Close()
	second, err := New(Config{StateDir: state, Ready: true, Version: "test"})
	require.NoError(t, err)
	defer second.Close()
	c := unixServer(t, second)
	r2, b2 := post(c, `{"argv": []}`, "k-1")
	assert.Equal(t, http.StatusBadRequest, r2.StatusCode)
	assert.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"), "the restarted server forgot the key")
	assert.Equal(t, b1, b2)
	r3, b3 := post(c, `{"argv": [""]}`, "k-1")
	assert.Equal(t, http.StatusBadRequest, r3.StatusCode)
	assert.Contains(t, errorOf(t, b3).Message, "another request")

	// The interrupted key: known, but not its outcome; never done again.
	r4, b4 := post(c, `{"argv": ["true"]}`, "k-2")
	assert.Equal(t, http.StatusConflict, r4.StatusCode)
	assert.Equal(t, CodeInterrupted, errorOf(t, b4).Code, "%s", b4)
	assert.Equal(t, "Idempotency-Key", errorOf(t, b4).Field)
	assert.False(t, errorOf(t, b4).Retryable)
	r5, _ := post(c, `{"argv": ["true"]}`, "k-2")
	assert.Equal(t, http.StatusConflict, r5.StatusCode, "an interrupted key stays so")
}

// TestIdempotencyKeyFiles: at its start the server removes expired,
// unreadable and misnamed key files and keeps a tenant's newest
// MaxIdempotencyKeys; a key not kept (a server error) leaves no file.
func TestIdempotencyKeyFiles(t *testing.T) {
	dir := t.TempDir()
	m, err := newIdempotency(dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	// record writes k's answer as a server would have, at time at,
	// without trimming.
	record := func(m *idempotency, k idemKey, at time.Time) {
		e := idemEntry{fingerprint: [32]byte{2}, done: true, at: at, status: 200, ctype: "application/json", body: []byte(`{}`)}
		tmp, err := m.write(k, e, false)
		require.NoError(t, err)
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, idemFile(k))))
	}
	now := time.Now()
	record(m, idemKey{"a", "old"}, now.Add(-IdempotencyTTL-time.Minute))
	record(m, idemKey{"a", "new"}, now)
	_, ae := m.begin(idemKey{"a", "failed"}, [32]byte{3})
	require.Nil(t, ae)
	assert.FileExists(t, filepath.Join(dir, idemFile(idemKey{"a", "failed"})), "a request under way is on the disk")
	m.finish(idemKey{"a", "failed"}, 500, "application/json", nil, forget)
	assert.NoFileExists(t, filepath.Join(dir, idemFile(idemKey{"a", "failed"})))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".key-123"), []byte("{"), 0o600))
	b, err := os.ReadFile(filepath.Join(dir, idemFile(idemKey{"a", "new"})))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, idemFile(idemKey{"b", "elsewhere"})), b, 0o600)) // says tenant a, key new
	for i := range MaxIdempotencyKeys + 5 {
		record(m, idemKey{"c", fmt.Sprint("k", i)}, now.Add(time.Duration(i)*time.Millisecond))
	}

	m2, err := newIdempotency(dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(dir, idemFile(idemKey{"a", "old"})), "expired")
	assert.NoFileExists(t, filepath.Join(dir, "junk.json"))
	assert.NoFileExists(t, filepath.Join(dir, ".key-123"))
	assert.NoFileExists(t, filepath.Join(dir, idemFile(idemKey{"b", "elsewhere"})), "misnamed")
	e, ae := m2.begin(idemKey{"a", "new"}, [32]byte{2})
	require.Nil(t, ae)
	require.NotNil(t, e)
	assert.Equal(t, []byte(`{}`), e.body)
	e, ae = m2.begin(idemKey{"b", "new"}, [32]byte{2})
	assert.Nil(t, e, "another tenant's key of the same name replays nothing")
	assert.Nil(t, ae)
	// The cap, at the start: tenant c's oldest five went, from memory and
	// from the disk.
	assert.Len(t, m2.order["c"], MaxIdempotencyKeys)
	assert.Equal(t, "k5", m2.order["c"][0])
	for i := range 5 {
		assert.NoFileExists(t, filepath.Join(dir, idemFile(idemKey{"c", fmt.Sprint("k", i)})))
	}
	assert.FileExists(t, filepath.Join(dir, idemFile(idemKey{"c", "k5"})))
}

// TestIdempotencyKeyCutShort: a request whose handler panicked is not done
// again (its outcome is not known); one whose record cannot be written is
// refused, not done without it.
func TestIdempotencyKeyCutShort(t *testing.T) {
	s := newTestServer(t)
	r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", "k")
	ran := 0
	panicky := func(http.ResponseWriter) *Error { ran++; panic("boom") }
	run := func(h func(http.ResponseWriter) *Error) *Error {
		r.Body = io.NopCloser(strings.NewReader(`{}`))
		return s.protect(func() *Error {
			return s.idempotent(&statusRecorder{ResponseWriter: httptest.NewRecorder()}, r, Tenant{Name: "t"}, h)
		})
	}
	assert.Equal(t, CodeInternal, run(panicky).Code)
	e := run(panicky)
	require.NotNil(t, e)
	assert.Equal(t, CodeInterrupted, e.Code)
	assert.Equal(t, 1, ran, "a request that panicked was done again")

	// The records' directory made unusable: a file where it was.
	dir := filepath.Join(t.TempDir(), "idempotency")
	require.NoError(t, os.WriteFile(dir, nil, 0o600))
	s.idem.dir = dir
	r.Header.Set("Idempotency-Key", "k2")
	e = run(func(http.ResponseWriter) *Error { ran++; return nil })
	require.NotNil(t, e)
	assert.Equal(t, CodeInternal, e.Code)
	assert.Contains(t, e.Message, "recording Idempotency-Key")
	assert.Equal(t, 1, ran, "done without its record")
	s.idem.mu.Lock()
	assert.NotContains(t, s.idem.entries, idemKey{"t", "k2"})
	s.idem.mu.Unlock()
}

// TestIdempotencyKeyExec: a request that started an exec and answered
// nothing (its client went away) is kept as that exec: its retry never
// runs the handler again, and once the exec is no longer kept it is
// answered INTERRUPTED, not with an empty answer nor by a second run.
// The same after a restart, from the record. Requests that started no
// exec and answered nothing are forgotten, as before.
func TestIdempotencyKeyExec(t *testing.T) {
	s := newTestServer(t)
	r := httptest.NewRequest("POST", "/v1/sessions/s/exec", strings.NewReader(`{}`))
	ran := 0
	run := func(key string, h func(http.ResponseWriter) *Error) (*Error, *httptest.ResponseRecorder) {
		r.Header.Set("Idempotency-Key", key)
		r.Body = io.NopCloser(strings.NewReader(`{}`))
		w := httptest.NewRecorder()
		return s.idempotent(&statusRecorder{ResponseWriter: w, status: http.StatusOK}, r, Tenant{Name: "t"}, h), w
	}
	started := func(w http.ResponseWriter) *Error { ran++; noteExec(w, "s", "x0123456789ab"); return nil }
	e, w := run("k", started)
	require.Nil(t, e)
	assert.Empty(t, w.Body.String())
	for range 2 {
		e, w = run("k", started)
		require.NotNil(t, e, "%d %q", w.Code, w.Body.String())
		assert.Equal(t, CodeInterrupted, e.Code)
		assert.Contains(t, e.Message, "x0123456789ab")
		assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	}
	assert.Equal(t, 1, ran)
	idem, err := newIdempotency(s.idem.dir, s.cfg.Logger)
	require.NoError(t, err)
	s.idem = idem
	e, _ = run("k", started)
	require.NotNil(t, e)
	assert.Equal(t, CodeInterrupted, e.Code, "the reference outlives the server")
	assert.Equal(t, 1, ran)

	// One that started an exec and then failed (a 5xx) is kept as that
	// exec too: it may have done something.
	failed := func(w http.ResponseWriter) *Error {
		ran++
		noteExec(w, "s", "x0123456789ac")
		return apiErr(CodeInternal, "", "internal error")
	}
	e, w = run("k3", failed)
	require.Nil(t, e)
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Contains(t, w.Body.String(), CodeInternal)
	e, _ = run("k3", failed)
	require.NotNil(t, e)
	assert.Equal(t, CodeInterrupted, e.Code, "not run again")
	assert.Equal(t, 2, ran)

	nothing := func(http.ResponseWriter) *Error { ran++; return nil }
	for range 2 {
		e, _ = run("k2", nothing)
		assert.Nil(t, e)
	}
	assert.Equal(t, 4, ran, "no answer and no exec: nothing to replay")
}
