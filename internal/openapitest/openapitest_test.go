package openapitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckAnswer: the checker refuses what the document does not say,
// each way an answer can differ from it.
func TestCheckAnswer(t *testing.T) {
	ch := NewChecker(t, "../../schema/openapi.yaml")
	ok := func(method, path string, code int, ct, body string) {
		t.Helper()
		assert.NoError(t, ch.CheckAnswer(method, path, code, ct, []byte(body)))
	}
	bad := func(method, path string, code int, ct, body, want string) {
		t.Helper()
		err := ch.CheckAnswer(method, path, code, ct, []byte(body))
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), want)
		}
	}
	errBody := `{"error": {"code": "NOT_FOUND", "message": "no session s1", "retryable": false}}`
	ok("GET", "/v1/health", 200, "application/json", `{"status": "ok"}`)
	bad("GET", "/v1/health", 200, "application/json", `{"status": "fine"}`, "/status")
	bad("GET", "/v1/health", 500, "application/json", errBody, "status 500 is not documented")
	ok("GET", "/v1/sessions/s1", 404, "application/json; charset=utf-8", errBody)
	bad("GET", "/v1/sessions/s1", 404, "application/json", `{"error": {"code": "GONE", "message": "x", "retryable": false}}`, "/error/code")
	bad("GET", "/v1/sessions/s1", 404, "application/json", `{"error": {"code": "NOT_FOUND", "message": "x", "retryable": false, "extra": 1}}`, "extra")
	bad("GET", "/v1/sessions/s1", 404, "text/plain", "no", `content type "text/plain" is not documented`)
	// The most specific path: an action, not the session's GET.
	ok("POST", "/v1/sessions/s1:touch", 404, "application/json", errBody)
	bad("POST", "/v1/sessions/s1:touch", 413, "application/json", errBody, "status 413 is not documented")
	// A path the API does not have: 404 or 405 with the error body only.
	ok("GET", "/v1/nothing", 404, "application/json", errBody)
	bad("GET", "/v1/nothing", 200, "application/json", `{}`, "documents no GET /v1/nothing")
	// A stream: every line an Event; a result by result.schema.json.
	ok("POST", "/v1/sessions/s1/exec", 200, "application/x-ndjson", `{"seq": 1, "event": "start", "exec": "e1"}`+"\n"+`{"seq": 2, "event": "stdout", "data": "hi\n"}`+"\n")
	bad("POST", "/v1/sessions/s1/exec", 200, "application/x-ndjson", `{"seq": 1, "event": "start"}`+"\n"+`{"seq": 0, "event": "stdout"}`+"\n", "/seq")
	bad("POST", "/v1/sessions/s1/exec", 200, "application/x-ndjson", `{"seq": 1, "event": "exit", "result": {"status": "exited"}}`+"\n", "/result")
	bad("GET", "/v1/sessions/s1/exec/e1/events", 200, "text/event-stream", "id: 1\nevent: start\ndata: {\"event\": \"begin\"}\n\n", "/event")
	// Bytes are not JSON; a HEAD has no body.
	ok("GET", "/v1/sessions/s1/files/workspace/a.bin", 200, "application/octet-stream", "\x00\x01")
	ok("HEAD", "/v1/sessions/s1/files/workspace/a.bin", 404, "", "")
	bad("DELETE", "/v1/sessions/s1/files/a", 200, "text/plain", "gone", "is not documented")

	// A request the server took is what the document says a request is.
	assert.NoError(t, ch.CheckRequest("POST", "/v1/sessions", "application/json", []byte(`{"id": "s1", "ttl": "1h"}`)))
	err := ch.CheckRequest("POST", "/v1/sessions", "application/json", []byte(`{"id": "s1", "ttl_seconds": 5}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ttl_seconds")
}

// TestTransport: the transport checks what a client reads, once, and only
// what it read whole.
func TestTransport(t *testing.T) {
	ch := NewChecker(t, "../../schema/openapi.yaml")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status": "fine"}`)
	}))
	defer srv.Close()
	rec := &recorder{TB: t}
	c := &http.Client{Transport: ch.Transport(rec, http.DefaultTransport)}
	get := func(read bool) {
		resp, err := c.Get(srv.URL + "/v1/health")
		require.NoError(t, err)
		if read {
			_, _ = io.ReadAll(resp.Body)
		}
		resp.Body.Close()
	}
	get(false)
	require.Len(t, rec.errs, 1, "a JSON body closed unread is read and checked")
	assert.True(t, strings.Contains(rec.errs[0], "/status"), rec.errs[0])
	get(true)
	require.Len(t, rec.errs, 2, "once")
	assert.True(t, strings.Contains(rec.errs[1], "/status"), rec.errs[1])

	// A status the operation does not document is found without its body.
	rec.errs = nil
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv2.Close()
	resp, err := c.Get(srv2.URL + "/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, rec.errs, 1)
	assert.Contains(t, rec.errs[0], "status 418 is not documented")
}

type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
