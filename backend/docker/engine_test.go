// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOOMEvent: the query an engine answers with a container's past "oom"
// events (the shape of Docker 20.10's /events), and both answers.
func TestOOMEvent(t *testing.T) {
	since, until := time.Unix(1700000000, 5), time.Unix(1700000009, 123456789)
	var oom bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
	})
	mux.HandleFunc("GET /v1.41/events", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		assert.Equal(t, "1700000000.000000005", q.Get("since"))
		assert.Equal(t, "1700000009.123456789", q.Get("until"))
		var f map[string]map[string]bool
		assert.NoError(t, json.Unmarshal([]byte(q.Get("filters")), &f))
		assert.Equal(t, map[string]map[string]bool{"container": {"c1": true}, "event": {"oom": true}}, f)
		if oom {
			_, _ = w.Write([]byte(`{"status":"oom","id":"c1","from":"jail-test","Type":"container","Action":"oom","Actor":{"ID":"c1"},"scope":"local","time":1700000001,"timeNano":1700000001000000000}` + "\n"))
		}
	})
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = l
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	e, err := Connect(ctx, "unix://"+sock)
	require.NoError(t, err)
	got, err := e.OOMEvent(ctx, "c1", since, until)
	require.NoError(t, err)
	assert.False(t, got, "no event")
	oom = true
	got, err = e.OOMEvent(ctx, "c1", since, until)
	require.NoError(t, err)
	assert.True(t, got, "an oom event")
}
