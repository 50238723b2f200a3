// Package schematest compiles jail's JSON Schemas (schema/*.schema.json)
// for tests that validate documents against them.
package schematest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// Base is the $id prefix of every schema of schema/.
const Base = "https://github.com/jailrt/jail/schema/"

// Compile compiles dir/name.schema.json, with every other schema of dir
// it may refer to.
func Compile(t *testing.T, dir, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	Add(t, c, dir)
	s, err := c.Compile(Base + name + ".schema.json")
	require.NoError(t, err)
	return s
}

// Add adds every schema of dir to c, by its $id.
func Add(t testing.TB, c *jsonschema.Compiler, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no schemas in %s", dir)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
		require.NoError(t, err, f)
		require.NoError(t, c.AddResource(Base+filepath.Base(f), doc))
	}
}

// Validate checks v (anything encoding/json writes) against s.
func Validate(s *jsonschema.Schema, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	return s.Validate(doc)
}
