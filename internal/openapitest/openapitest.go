// Package openapitest reads schema/openapi.yaml for the tests that tie it
// to the server (package server's, and the integration tests' of a real
// jail serve). Only tests import it.
package openapitest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

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
