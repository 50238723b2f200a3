package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEntry() *execEntry {
	ctx, cancel := context.WithCancel(context.Background())
	return &execEntry{id: "x1", session: "s", ctx: ctx, cancel: cancel, changed: make(chan struct{}), next: 1,
		keepalive: DefaultKeepalive, writeTimeout: DefaultStreamWriteTimeout}
}

// TestExecBufferDrops: without a foreground client, the oldest events go
// once the buffer is full; a replay from before them starts with "lost".
func TestExecBufferDrops(t *testing.T) {
	x := newEntry()
	w := x.output("stdout")
	chunk := strings.Repeat("a", 32<<10)
	for range 64 { // 2 MiB
		_, _ = w.Write([]byte(chunk))
	}
	x.finish(nil, nil)
	in := x.info()
	assert.Equal(t, 66, in.NextSeq)
	assert.Greater(t, in.FirstSeq, 1)
	assert.LessOrEqual(t, x.bytes, keptExecEvents+34<<10)
	rec := httptest.NewRecorder()
	require.NoError(t, x.follow(context.Background(), rec, 1, ndjson, false))
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 1<<20)
	var evs []map[string]any
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		evs = append(evs, e)
	}
	require.NotEmpty(t, evs)
	assert.Equal(t, "lost", evs[0]["event"])
	assert.Equal(t, float64(in.FirstSeq-1), evs[0]["to"])
	assert.Equal(t, "exit", evs[len(evs)-1]["event"])
}

// TestExecBufferOwner: a foreground client is sent every event, however
// much the workload writes: the writes wait for it.
func TestExecBufferOwner(t *testing.T) {
	x := newEntry()
	x.owners, x.ownerNext = 1, 1 // as startExec registers a streaming client
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = x.follow(r.Context(), w, 1, ndjson, true)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	const n = 256 // 8 MiB, eight times the buffer
	go func() {
		w := x.output("stdout")
		for range n {
			_, _ = w.Write([]byte(strings.Repeat("b", 32<<10)))
		}
		x.finish(nil, nil)
	}()
	time.Sleep(100 * time.Millisecond) // the writer fills the buffer and waits
	x.mu.Lock()
	assert.LessOrEqual(t, x.bytes, MaxExecEvents+40<<10, "the buffer is bounded")
	x.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	seq := 0
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		seq++
		require.Equal(t, float64(seq), e["seq"], "no event is skipped")
	}
	assert.Equal(t, n+1, seq, "every output event and the exit")
	_, _ = io.Copy(io.Discard, resp.Body)
}

// TestStreamKeepalive: a quiet stream gets keepalive events, without a
// seq, and the events after them are numbered on.
func TestStreamKeepalive(t *testing.T) {
	x := newEntry()
	x.keepalive = 30 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = x.follow(r.Context(), w, 1, ndjson, false)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = x.output("stdout").Write([]byte("late"))
		x.finish(nil, nil)
	}()
	sc := bufio.NewScanner(resp.Body)
	var kinds []string
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		kinds = append(kinds, e["event"].(string))
		if e["event"] == "keepalive" {
			assert.NotContains(t, e, "seq")
		}
	}
	require.GreaterOrEqual(t, len(kinds), 4, "%v", kinds)
	assert.Equal(t, "keepalive", kinds[0], "%v", kinds)
	assert.Equal(t, []string{"stdout", "exit"}, kinds[len(kinds)-2:])
}

// TestStreamSlowClient: a client that stops reading holds the stream only
// for the write timeout; then follow returns its error (the exec handler
// then kills a foreground command) and the writer is no longer held.
func TestStreamSlowClient(t *testing.T) {
	x := newEntry()
	x.owners, x.ownerNext = 1, 1
	x.writeTimeout = 300 * time.Millisecond
	done := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done <- x.follow(r.Context(), w, 1, ndjson, true)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL) // and never read the body
	require.NoError(t, err)
	defer resp.Body.Close()
	wrote := make(chan struct{})
	go func() {
		w := x.output("stdout")
		for range 512 { // 16 MiB: far beyond the socket buffers and the event buffer
			_, _ = w.Write([]byte(strings.Repeat("c", 32<<10)))
		}
		close(wrote)
	}()
	t0 := time.Now()
	select {
	case err := <-done:
		assert.Error(t, err)
		assert.Less(t, time.Since(t0), 10*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("a client that does not read held the stream")
	}
	select {
	case <-wrote: // the owner is gone: the buffer drops the oldest again
	case <-time.After(20 * time.Second):
		t.Fatal("the workload's writes are still held after the client left")
	}
}
