package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/cgroup"
)

// Error codes: stable, what a client switches on. Each has its HTTP status.
const (
	CodeBadRequest      = "BAD_REQUEST"          // 400: a field is wrong; Error.Field names it
	CodeUnauthenticated = "UNAUTHENTICATED"      // 401
	CodeForbidden       = "FORBIDDEN"            // 403: a field this tenant may not set; Error.Field names it
	CodeNotFound        = "NOT_FOUND"            // 404: also another tenant's session
	CodeAlreadyExists   = "ALREADY_EXISTS"       // 409
	CodeNotRunning      = "NOT_RUNNING"          // 409: the session ended or is paused
	CodeBusy            = "BUSY"                 // 409: the session is in another operation
	CodeInterrupted     = "INTERRUPTED"          // 409: an Idempotency-Key's request was under way when the server stopped
	CodeTooLarge        = "PAYLOAD_TOO_LARGE"    // 413
	CodeUnenforceable   = "UNENFORCEABLE"        // 422: this host cannot enforce what the spec asks
	CodeCapacity        = "CAPACITY"             // 503 with Retry-After: a limit of the tenant's or the server's
	CodeNoStorage       = "INSUFFICIENT_STORAGE" // 507: the workspace is full
	CodeSetupFailed     = "SETUP_FAILED"         // 500: the jail could not be built; Error.Step names the step
	CodeInternal        = "INTERNAL"             // 500
)

var statusOf = map[string]int{
	CodeBadRequest: http.StatusBadRequest, CodeUnauthenticated: http.StatusUnauthorized, CodeForbidden: http.StatusForbidden,
	CodeNotFound: http.StatusNotFound, CodeAlreadyExists: http.StatusConflict, CodeNotRunning: http.StatusConflict,
	CodeBusy: http.StatusConflict, CodeInterrupted: http.StatusConflict, CodeTooLarge: http.StatusRequestEntityTooLarge, CodeUnenforceable: http.StatusUnprocessableEntity,
	CodeCapacity: http.StatusServiceUnavailable, CodeNoStorage: http.StatusInsufficientStorage,
	CodeSetupFailed: http.StatusInternalServerError, CodeInternal: http.StatusInternalServerError,
}

// Error is the body of every error answer: {"error": Error}. A non-zero
// exit, a timeout or an OOM of a workload is a result, never an Error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request's field at fault (BAD_REQUEST, FORBIDDEN),
	// as JSON spells it: "spec.mounts[0].source".
	Field string `json:"field,omitempty"`
	// Step names the setup step that failed (SETUP_FAILED).
	Step string `json:"step,omitempty"`
	// Retryable says the same request may succeed later (CAPACITY, BUSY).
	Retryable bool `json:"retryable"`
	// Unenforceable lists, for UNENFORCEABLE, each thing the request asks
	// that this host cannot enforce.
	Unenforceable []Unenforceable `json:"unenforceable,omitempty"`
}

// Unenforceable is one thing a request asks that this host cannot enforce.
type Unenforceable struct {
	// What is the feature or limit: "time namespace", "workspace size",
	// "memory" (a cgroup limit).
	What string `json:"what"`
	// Reason says what is missing; Fix, when known, how to get it.
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
}

// unenforceable lists the FeatureErrors and cgroup UnenforcedErrors in
// err's tree (an errors.Join of several among them).
func unenforceable(err error) []Unenforceable {
	var out []Unenforceable
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
			return
		case *jail.FeatureError:
			n := len(out)
			walk(e.Err)
			if len(out) > n {
				return // its cgroup limits, each apart
			}
			out = append(out, Unenforceable{What: e.Feature, Reason: e.Reason})
			return
		case *cgroup.UnenforcedError:
			for _, u := range e.Limits {
				out = append(out, Unenforceable{What: u.Limit, Reason: u.Reason, Fix: u.Fix})
			}
			return
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches an answer's code with the error a session of this host
// returns for the same (jail.Sandbox): NOT_FOUND of a file (field "path")
// is fs.ErrNotExist, of anything else (a session) jail.ErrNotFound;
// NOT_RUNNING is jail.ErrNotRunning, BUSY jail.ErrBusy, ALREADY_EXISTS
// jail.ErrExists. Code that uses a session here or through the API tests
// for them alike.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeNotFound:
		if e.Field == "path" {
			return target == fs.ErrNotExist
		}
		return target == jail.ErrNotFound
	case CodeNotRunning:
		return target == jail.ErrNotRunning
	case CodeBusy:
		return target == jail.ErrBusy
	case CodeAlreadyExists:
		return target == jail.ErrExists
	}
	return false
}

// ErrorBody is the JSON document of an error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

func apiErr(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...),
		Retryable: code == CodeCapacity || code == CodeBusy}
}

// asAPIError maps an error of the jail package (or of the request) to the
// answer's Error; field prefixes a SpecError's field ("spec").
func asAPIError(err error, field string) *Error {
	var ae *Error
	var se *jail.SpecError
	var fe *jail.FeatureError
	var ie *jail.InitError
	var fileErr *jail.FileError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return apiErr(CodeTooLarge, "", "the request body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, errBodyStalled):
		return apiErr(CodeBadRequest, "", "%v", err)
	case errors.As(err, &se):
		f := se.Field
		if field != "" {
			f = field + "." + f
		}
		return apiErr(CodeBadRequest, f, "%s", err.Error())
	case errors.As(err, &fe), errors.Is(err, jail.ErrNotSupported):
		e := apiErr(CodeUnenforceable, "", "%s", err.Error())
		e.Unenforceable = unenforceable(err)
		return e
	case errors.Is(err, jail.ErrNotFound):
		return apiErr(CodeNotFound, "", "%s", err.Error())
	case errors.Is(err, jail.ErrExists):
		return apiErr(CodeAlreadyExists, "", "%s", err.Error())
	case errors.Is(err, jail.ErrNotRunning):
		return apiErr(CodeNotRunning, "", "%s", err.Error())
	case errors.Is(err, jail.ErrBusy):
		return apiErr(CodeBusy, "", "%s", err.Error())
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return apiErr(CodeNoStorage, "", "%s", err.Error())
	case errors.As(err, &fileErr):
		if fileErr.Errno == syscall.ENOENT {
			return apiErr(CodeNotFound, "path", "%s", err.Error())
		}
		return apiErr(CodeBadRequest, "path", "%s", err.Error())
	case errors.As(err, &ie):
		e := apiErr(CodeSetupFailed, "", "%s", err.Error())
		e.Step = ie.Step
		return e
	}
	return apiErr(CodeInternal, "", "%s", err.Error())
}

// writeError answers with e's status and body.
func writeError(w http.ResponseWriter, e *Error) {
	w.Header().Set("X-Jail-Error-Code", e.Code) // for a HEAD too, whose answer has no body
	if e.Field != "" {
		w.Header().Set("X-Jail-Error-Field", e.Field)
	}
	switch e.Code {
	case CodeCapacity:
		w.Header().Set("Retry-After", "1")
	case CodeUnauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="jail"`) // RFC 6750
	}
	writeJSON(w, statusOf[e.Code], ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decode reads one JSON document of at most limit bytes into v, refusing
// unknown fields and trailing data, and names the field at fault.
func decode(r *http.Request, w http.ResponseWriter, limit int64, v any) *Error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return apiErr(CodeBadRequest, "", "Content-Type %q: want application/json", ct)
	}
	boundBody(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return decodeError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e := decodeError(err)
		if e.Field != "" && strings.HasPrefix(e.Message, "unknown field ") {
			// encoding/json names the key alone: name it where it is.
			if path := unknownPath(body, reflect.TypeOf(v), e.Field); path != "" {
				e.Field, e.Message = path, "unknown field "+strconv.Quote(path)
			}
		}
		return e
	}
	if _, err := dec.Token(); err != io.EOF {
		return apiErr(CodeBadRequest, "", "the body holds more than one JSON document")
	}
	return nil
}

// decodeError names the field of a JSON decoding error where it can.
func decodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return apiErr(CodeTooLarge, "", "the request body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, errBodyStalled):
		return apiErr(CodeBadRequest, "", "%v", err)
	case errors.As(err, &te):
		// The path as JSON spells it: without the Go names of embedded
		// structs ("Command.argv" is "argv").
		var parts []string
		for _, p := range strings.Split(te.Field, ".") {
			if p != "" && !(p[0] >= 'A' && p[0] <= 'Z') {
				parts = append(parts, p)
			}
		}
		f := strings.Join(parts, ".")
		return apiErr(CodeBadRequest, f, "field %s: want %s, got JSON %s", f, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(CodeBadRequest, "", "malformed JSON: the body ends inside a value")
	case errors.As(err, &se):
		return apiErr(CodeBadRequest, "", "malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.EOF):
		return apiErr(CodeBadRequest, "", "empty body: want a JSON object")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		f, _ := strconv.Unquote(name)
		return apiErr(CodeBadRequest, f, "unknown field %s", name)
	}
	return apiErr(CodeBadRequest, "", "%s", strings.TrimPrefix(msg, "json: "))
}

// unknownPath finds in a JSON document, read as type t, where the key
// name is one t has no field for, and returns its path as JSON spells
// fields ("spec.mounts[0].sourc"); "" if it is not found. It does not
// look inside a type that decodes itself.
func unknownPath(body []byte, t reflect.Type, name string) string {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	var walk func(v any, t reflect.Type, path string) string
	walk = func(v any, t reflect.Type, path string) string {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if reflect.PointerTo(t).Implements(unmarshaler) {
			return ""
		}
		join := func(key string) string {
			if path == "" {
				return key
			}
			return path + "." + key
		}
		switch v := v.(type) {
		case map[string]any:
			switch t.Kind() {
			case reflect.Struct:
				for key, val := range v {
					ft, ok := jsonField(t, key)
					if !ok {
						if key == name {
							return join(key)
						}
						continue
					}
					if p := walk(val, ft, join(key)); p != "" {
						return p
					}
				}
			case reflect.Map:
				for key, val := range v {
					if p := walk(val, t.Elem(), join(key)); p != "" {
						return p
					}
				}
			}
		case []any:
			if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
				for i, val := range v {
					if p := walk(val, t.Elem(), path+"["+strconv.Itoa(i)+"]"); p != "" {
						return p
					}
				}
			}
		}
		return ""
	}
	return walk(doc, t, "")
}

// jsonField finds the type of the field of struct t that encoding/json
// decodes key into (its tag's name, or its Go name, case-insensitively;
// embedded structs' fields included).
func jsonField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			if t, ok := jsonField(ft, key); ok {
				return t, true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if strings.EqualFold(tag, key) {
			return f.Type, true
		}
	}
	return nil, false
}

// jsonLine is v as one line of JSON.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
