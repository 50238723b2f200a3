package server

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/cgroup"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnenforceableListed: a 422 lists each thing the host cannot
// enforce, wherever it is in the error's tree, and the answer is what
// openapi.yaml documents for an error.
func TestUnenforceableListed(t *testing.T) {
	ws := &jail.FeatureError{Feature: "workspace size", Reason: "no project quotas"}
	limits := &cgroup.UnenforcedError{Limits: []cgroup.Unenforced{
		{Limit: "memory", Reason: "no memory controller", Fix: "enable it"},
		{Limit: "pids", Reason: "no pids controller"},
	}}
	for _, tc := range []struct {
		name string
		err  error
		want []Unenforceable
	}{
		{"a setup step's", &jail.InitError{Step: "host", Err: ws}, []Unenforceable{{What: "workspace size", Reason: "no project quotas"}}},
		{"cgroup limits", &jail.FeatureError{Feature: "cgroup", Reason: "cannot enforce memory", Err: limits}, []Unenforceable{
			{What: "memory", Reason: "no memory controller", Fix: "enable it"}, {What: "pids", Reason: "no pids controller"}}},
		{"several", errors.Join(ws, &jail.FeatureError{Feature: "cgroup", Err: limits}), []Unenforceable{{What: "workspace size", Reason: "no project quotas"},
			{What: "memory", Reason: "no memory controller", Fix: "enable it"}, {What: "pids", Reason: "no pids controller"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := asAPIError(tc.err, "spec")
			assert.Equal(t, CodeUnenforceable, e.Code)
			assert.Equal(t, tc.want, e.Unenforceable)
			b, err := json.Marshal(ErrorBody{Error: e})
			require.NoError(t, err)
			assert.NoError(t, openapiChecker(t).CheckAnswer("POST", "/v1/sessions", 422, "application/json", b))
		})
	}
	assert.Empty(t, asAPIError(jail.ErrNotFound, "").Unenforceable)
}

// TestDecodeNamesNestedUnknownField: an unknown field is named by its
// path in the request, as JSON spells it, however deep.
func TestDecodeNamesNestedUnknownField(t *testing.T) {
	for _, tc := range []struct {
		body  string
		into  any
		field string
	}{
		{`{"argvv": ["x"]}`, &RunRequest{}, "argvv"},
		{`{"argv": ["x"], "spec": {"memroy_max_bytes": 1}}`, &RunRequest{}, "spec.memroy_max_bytes"},
		{`{"argv": ["x"], "spec": {"mounts": [{"type": "bind", "target": "/a"}, {"sourc": "/x"}]}}`, &RunRequest{}, "spec.mounts[1].sourc"},
		{`{"argv": ["x"], "limits": {"memory_max_bytes": 1}}`, &ExecRequest{}, "limits.memory_max_bytes"},
		{`{"runs": [{"argv": ["x"]}, {"argv": ["y"], "limits": {"pids": 3}}]}`, &BatchRequest{}, "runs[1].limits.pids"},
	} {
		r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(tc.body))
		e := decode(r, httptest.NewRecorder(), 1<<20, tc.into)
		if assert.NotNil(t, e, tc.body) {
			assert.Equal(t, CodeBadRequest, e.Code)
			assert.Equal(t, tc.field, e.Field, tc.body)
			assert.Contains(t, e.Message, tc.field)
		}
	}
}
