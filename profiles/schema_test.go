package profiles

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/schematest"
	"github.com/jailrt/jail/mounts"
)

const schemaFile = "../schema/profile.schema.json"

func loadProfileSchema(t *testing.T) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	return schematest.Compile(t, "../schema", "profile"), doc
}

// TestSchemaMatchesSpec ties schema/profile.schema.json to the Go types a
// profile loads into: a property, with a description, for every field.
func TestSchemaMatchesSpec(t *testing.T) {
	_, doc := loadProfileSchema(t)
	defs := doc["$defs"].(map[string]any)
	for _, tc := range []struct {
		name string
		obj  map[string]any
		typ  reflect.Type
	}{
		{"profile", doc, reflect.TypeFor[file]()},
		{"mount", defs["mount"].(map[string]any), reflect.TypeFor[mounts.Mount]()},
		{"rlimit", defs["rlimit"].(map[string]any), reflect.TypeFor[jail.Rlimit]()},
		{"network", defs["network"].(map[string]any), reflect.TypeFor[jail.Network]()},
		{"runner", defs["runner"].(map[string]any), reflect.TypeFor[Runner]()},
		{"compile_limits", defs["compile_limits"].(map[string]any), reflect.TypeFor[CompileLimits]()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, false, tc.obj["additionalProperties"], "a closed object")
			props := tc.obj["properties"].(map[string]any)
			var want, got []string
			for name := range jsonFields(tc.typ) {
				want = append(want, name)
			}
			for name, p := range props {
				got = append(got, name)
				assert.NotEmpty(t, p.(map[string]any)["description"], "%s has no description", name)
			}
			slices.Sort(want)
			slices.Sort(got)
			assert.Equal(t, want, got)
		})
	}
	ns := doc["properties"].(map[string]any)["disable_namespaces"].(map[string]any)["items"].(map[string]any)["enum"]
	assert.ElementsMatch(t, jail.Namespaces, ns)
	for _, name := range defs["rlimit"].(map[string]any)["properties"].(map[string]any)["name"].(map[string]any)["enum"].([]any) {
		s := jail.Spec{Rlimits: []jail.Rlimit{{Name: name.(string), Soft: 1, Hard: 1}}}
		assert.NoError(t, s.Validate(), "the schema's rlimit %s is one jail knows", name)
	}
}

// TestSchemaBuiltins: every built-in profile's file is valid by the
// schema, and so is every profile the loader accepts in TestExtends.
func TestSchemaBuiltins(t *testing.T) {
	s, _ := loadProfileSchema(t)
	for _, name := range Names() {
		data, ok := Source(name)
		require.True(t, ok)
		assert.NoError(t, validateYAML(s, data), name)
	}
}

// TestSchemaRefuses: what the loader refuses for its form, the schema
// refuses too.
func TestSchemaRefuses(t *testing.T) {
	s, _ := loadProfileSchema(t)
	dir := t.TempDir()
	for _, y := range []string{
		"memroy: 5\n",
		"network: {mode: none, alow: [x]}\n",
		"mounts: [{type: tmpfs, target: /x, sise_bytes: 1}]\n",
		"tmp_size_bytes: 64 megs\n",
		"pids_max: many\n",
		"uid: -1\n",
		"hostname: [a]\n",
		"env: {A: b}\n",
		"env: [NOEQUALS]\n",
		"cpus: lots\n",
		"rlimits: [{name: bogus, soft: 1, hard: 1}]\n",
		"rlimits: [{name: nofile, soft: 1, hard: 1, sfot: 2}]\n",
		"disable_namespaces: [pids]\n",
		"allow_sensitive_sources: maybe\n",
		"timeout: soon\n",
	} {
		assert.Error(t, validateYAML(s, []byte(y)), "the schema takes %q", y)
		f := filepath.Join(dir, "p.yaml")
		require.NoError(t, os.WriteFile(f, []byte(y), 0o644))
		_, err := Load(f)
		assert.Error(t, err, "the loader takes %q", y)
	}
	for _, y := range []string{
		"extends: strict\ntmp_size_bytes: 256Mi\nmemory_max_bytes: 1G\ncpus: \"1.5\"\ntimeout: 500ms\n",
		"rlimits: [{name: stack, soft: 8388608, hard: unlimited}]\nallow_sensitive_sources: [/run/user]\n",
	} {
		assert.NoError(t, validateYAML(s, []byte(y)), y)
		f := filepath.Join(dir, "p.yaml")
		require.NoError(t, os.WriteFile(f, []byte(y), 0o644))
		_, err := Load(f)
		assert.NoError(t, err, y)
	}
}

func validateYAML(s *jsonschema.Schema, data []byte) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(js)))
	if err != nil {
		return err
	}
	return s.Validate(v)
}
