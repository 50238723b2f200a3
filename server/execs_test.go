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
	return &execEntry{id: "x1", session: "s", ctx: ctx, cancel: cancel, changed: make(chan struct{}), next: 1}
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
