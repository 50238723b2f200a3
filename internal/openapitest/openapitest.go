// Package openapitest reads schema/openapi.yaml for the tests that tie it
// to the server (package server's, and the integration tests' of a real
// jail serve). Only tests import it.
package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jailrt/jail/internal/schematest"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// OpenAPI is what the tests read of schema/openapi.yaml: each path's
// operations with their response codes, and the component schemas.
type OpenAPI struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

// Load reads the OpenAPI document at path.
func Load(t testing.TB, path string) *OpenAPI {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc OpenAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &doc
}

// SessionActions are the actions of POST /v1/sessions/{id}:ACTION, which
// the server serves with one route, "POST /v1/sessions/{action}" (a
// net/http wildcard is a whole segment), and openapi.yaml documents one
// path each.
var SessionActions = []string{"pause", "resume", "touch", "fork", "restore"}

// Paths turns a route pattern ("GET /v1/sessions/{id}/files/{path...}")
// into OpenAPI's spelling ("GET /v1/sessions/{id}/files/{path}"); the
// actions' route into one path per action.
func Paths(route string) []string {
	if strings.HasSuffix(route, "/{action}") {
		var out []string
		for _, a := range SessionActions {
			out = append(out, strings.TrimSuffix(route, "{action}")+"{id}:"+a)
		}
		return out
	}
	return []string{strings.ReplaceAll(route, "...}", "}")}
}

// Documents reports whether doc documents the answer code to route.
// (for the actions' route: for one of them).
func (doc *OpenAPI) Documents(route string, code string) bool {
	for _, path := range Paths(route) {
		method, p, _ := strings.Cut(path, " ")
		raw, ok := doc.Paths[p][strings.ToLower(method)]
		if !ok {
			continue
		}
		var op struct {
			Responses map[string]any `json:"responses"`
		}
		if json.Unmarshal(raw, &op) != nil {
			continue
		}
		if _, ok = op.Responses[code]; ok {
			return true
		}
	}
	return false
}

// base is the URL the checker gives schema/openapi.yaml, beside the
// schemas of schema/ (their $id prefix), so that its references to
// "result.schema.json" find them.
const base = schematest.Base

// maxChecked is the most of a body the checker keeps: a longer one (the
// 1 GiB stream's) is not checked.
const maxChecked = 16 << 20

// A Checker validates the server's answers, and the requests it took,
// against what schema/openapi.yaml documents: the route, the status, the
// content type and the body's schema (JSON Schema 2020-12, OpenAPI 3.1's
// dialect), an NDJSON stream line by line and an SSE stream's data by the
// Event schema.
type Checker struct {
	doc   map[string]any
	paths []template
	c     *jsonschema.Compiler

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
}

// A template is one of the document's paths as a pattern of request paths.
type template struct {
	path    string
	re      *regexp.Regexp
	literal int // its characters outside parameters: the most specific wins
}

// NewChecker reads the OpenAPI document at path, and the JSON Schemas
// beside it.
func NewChecker(t testing.TB, path string) *Checker {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ch := &Checker{c: jsonschema.NewCompiler(), schemas: map[string]*jsonschema.Schema{}}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ch.doc, _ = doc.(map[string]any)
	if err := ch.c.AddResource(base+"openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	schematest.Add(t, ch.c, filepath.Dir(path))
	paths, _ := ch.doc["paths"].(map[string]any)
	param := regexp.MustCompile(`\{[^}]+\}`)
	for p := range paths {
		// QuoteMeta escapes the braces: match the escaped form.
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllStringFunc(regexp.QuoteMeta(p), func(m string) string {
			if m == `\{path\}` {
				return `.+`
			}
			return `[^/]+`
		}) + "$"
		ch.paths = append(ch.paths, template{path: p, re: regexp.MustCompile(re), literal: len(param.ReplaceAllString(p, ""))})
	}
	sort.Slice(ch.paths, func(i, j int) bool { return ch.paths[i].literal > ch.paths[j].literal })
	return ch
}

// operation finds the documented operation of a request, and the JSON
// pointer to it.
func (ch *Checker) operation(method, path string) (map[string]any, string, error) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	for _, tp := range ch.paths {
		if !tp.re.MatchString(path) {
			continue
		}
		ops, _ := ch.doc["paths"].(map[string]any)[tp.path].(map[string]any)
		m := strings.ToLower(method)
		op, ok := ops[m].(map[string]any)
		if !ok {
			continue // /v1/sessions/{id} and /v1/sessions/{id}:touch both match "/v1/sessions/a:touch"
		}
		return op, "/paths/" + pointerEscape(tp.path) + "/" + m, nil
	}
	return nil, "", fmt.Errorf("openapi.yaml documents no %s %s", method, path)
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// schema compiles the schema at a JSON pointer into the document.
func (ch *Checker) schema(ptr string) (*jsonschema.Schema, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if s, ok := ch.schemas[ptr]; ok {
		return s, nil
	}
	s, err := ch.c.Compile(base + "openapi.json#" + ptr)
	if err != nil {
		return nil, err
	}
	ch.schemas[ptr] = s
	return s, nil
}

// content finds, in an operation's request body or one of its responses
// (following a $ref to components), the schema's pointer for a media type;
// "" when it documents no body at all.
func (ch *Checker) content(obj map[string]any, ptr, mediaType string) (string, bool, error) {
	if ref, ok := obj["$ref"].(string); ok {
		ptr = strings.TrimPrefix(ref, "#")
		obj = ch.doc
		for _, k := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			obj, _ = obj[strings.ReplaceAll(strings.ReplaceAll(k, "~1", "/"), "~0", "~")].(map[string]any)
		}
		if obj == nil {
			return "", false, fmt.Errorf("%s: no such object", ref)
		}
	}
	content, ok := obj["content"].(map[string]any)
	if !ok {
		return "", false, nil
	}
	if _, ok := content[mediaType].(map[string]any); !ok {
		var have []string
		for k := range content {
			have = append(have, k)
		}
		sort.Strings(have)
		return "", true, fmt.Errorf("content type %q is not documented (%s)", mediaType, strings.Join(have, ", "))
	}
	return ptr + "/content/" + pointerEscape(mediaType) + "/schema", true, nil
}

// CheckAnswer validates an answer: its status is documented for the
// request's operation, and its body (of this content type) fits the
// schema documented for both.
func (ch *Checker) CheckAnswer(method, path string, code int, contentType string, body []byte) error {
	sptr, mediaType, err := ch.answer(method, path, code, contentType, len(body) > 0)
	if err != nil || sptr == "" {
		return err
	}
	if err := ch.validate(sptr, mediaType, body); err != nil {
		return fmt.Errorf("%s %s answering %d (%s): %w\n%.2000s", method, path, code, mediaType, err, body)
	}
	return nil
}

// answer checks an answer's status and content type, and returns the
// pointer to its body's schema ("" when none is to be checked).
func (ch *Checker) answer(method, path string, code int, contentType string, hasBody bool) (string, string, error) {
	mediaType, _, _ := mime.ParseMediaType(contentType)
	op, ptr, err := ch.operation(method, path)
	if err != nil {
		// A path or method the API does not have: 404 or 405, with the
		// error body.
		if (code != http.StatusNotFound && code != http.StatusMethodNotAllowed) || method == http.MethodHead {
			return "", "", err
		}
		if hasBody && mediaType != "application/json" {
			return "", "", fmt.Errorf("%s %s answering %d: content type %q, not the error body's", method, path, code, contentType)
		}
		return "/components/schemas/ErrorBody", "application/json", nil
	}
	responses, _ := op["responses"].(map[string]any)
	resp, ok := responses[strconv.Itoa(code)].(map[string]any)
	if !ok {
		return "", "", fmt.Errorf("%s %s: status %d is not documented", method, path, code)
	}
	if !hasBody && (method == http.MethodHead || mediaType == "") {
		return "", "", nil
	}
	sptr, documented, err := ch.content(resp, ptr+"/responses/"+strconv.Itoa(code), mediaType)
	if err != nil {
		return "", "", fmt.Errorf("%s %s answering %d: %w", method, path, code, err)
	}
	if !documented {
		if hasBody {
			return "", "", fmt.Errorf("%s %s answering %d: a body (%s) where none is documented", method, path, code, contentType)
		}
		return "", "", nil
	}
	return sptr, mediaType, nil
}

// CheckRequest validates the JSON body of a request the server took (the
// requests it refused may be wrong on purpose).
func (ch *Checker) CheckRequest(method, path, contentType string, body []byte) error {
	mediaType, _, _ := mime.ParseMediaType(contentType)
	if mediaType != "application/json" || len(body) == 0 {
		return nil
	}
	op, ptr, err := ch.operation(method, path)
	if err != nil {
		return err
	}
	rb, ok := op["requestBody"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: a JSON body where none is documented", method, path)
	}
	sptr, _, err := ch.content(rb, ptr+"/requestBody", mediaType)
	if err != nil {
		return fmt.Errorf("%s %s request: %w", method, path, err)
	}
	if err := ch.validate(sptr, mediaType, body); err != nil {
		return fmt.Errorf("%s %s request: %w\n%.2000s", method, path, err, body)
	}
	return nil
}

// validate checks a body against the schema at sptr: a JSON document, each
// line of NDJSON, or each data field of server-sent events by the Event
// schema (what their data is).
func (ch *Checker) validate(sptr, mediaType string, body []byte) error {
	var docs [][]byte
	switch mediaType {
	case "application/json":
		docs = [][]byte{body}
	case "application/x-ndjson":
		for _, line := range bytes.Split(body, []byte("\n")) {
			if len(line) > 0 {
				docs = append(docs, line)
			}
		}
	case "text/event-stream":
		sptr = "/components/schemas/Event"
		for _, line := range bytes.Split(body, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				docs = append(docs, d)
			}
		}
	default:
		return nil // bytes: a file, a tar, the metrics' text
	}
	s, err := ch.schema(sptr)
	if err != nil {
		return err
	}
	for _, d := range docs {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(d))
		if err != nil {
			return fmt.Errorf("not JSON: %v: %.200s", err, d)
		}
		if err := s.Validate(v); err != nil {
			return err
		}
	}
	return nil
}

// Transport wraps next: every answer that goes through it, and every JSON
// request the server took (a 2xx answer), is checked when its body has been
// read to its end (a body closed before, or longer than 16 MiB, is not; an
// NDJSON or SSE stream closed early is checked up to its last whole line),
// and a mismatch fails t.
func (ch *Checker) Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	return &checking{ch: ch, t: t, next: next}
}

type checking struct {
	ch   *Checker
	t    testing.TB
	next http.RoundTripper
}

func (c *checking) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.GetBody != nil && req.Header.Get("Content-Type") == "application/json" {
		if rc, err := req.GetBody(); err == nil {
			reqBody, _ = io.ReadAll(io.LimitReader(rc, maxChecked))
			rc.Close()
		}
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	method, path := req.Method, req.URL.RequestURI()
	if resp.StatusCode/100 == 2 {
		if err := c.ch.CheckRequest(method, path, req.Header.Get("Content-Type"), reqBody); err != nil {
			c.t.Errorf("openapi.yaml: %v", err)
		}
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	stream := mt == "application/x-ndjson" || mt == "text/event-stream"
	// The status and the content type now, whatever is read of the body.
	if _, _, err := c.ch.answer(method, path, resp.StatusCode, ct, false); err != nil {
		c.t.Errorf("openapi.yaml: %v", err)
	}
	resp.Body = &checkedBody{ReadCloser: resp.Body, readRest: !stream, check: func(body []byte, whole bool) {
		if !whole {
			if !stream {
				return
			}
			if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
				body = body[:i+1]
			} else {
				body = nil
			}
		}
		if len(body) == 0 && (stream || resp.StatusCode == http.StatusNoContent) {
			return // checked above
		}
		if err := c.ch.CheckAnswer(method, path, resp.StatusCode, ct, body); err != nil {
			c.t.Errorf("openapi.yaml: %v", err)
		}
	}}
	return resp, nil
}

// A checkedBody keeps what is read of a body, and checks it once, at its
// end or when it is closed; with readRest, Close reads what the client
// left (a JSON decoder stops at the value's end, before EOF) first.
type checkedBody struct {
	io.ReadCloser
	buf      bytes.Buffer
	over     bool
	done     bool
	readRest bool
	check    func(body []byte, whole bool)
	checked  sync.Once
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.over {
		if b.buf.Len()+n > maxChecked {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		b.done = true
		b.finish()
	}
	return n, err
}

func (b *checkedBody) Close() error {
	if b.readRest && !b.done {
		_, _ = io.Copy(io.Discard, io.LimitReader(b, maxChecked+1))
	}
	b.finish()
	return b.ReadCloser.Close()
}

func (b *checkedBody) finish() {
	b.checked.Do(func() {
		if !b.over {
			b.check(b.buf.Bytes(), b.done)
		}
	})
}
