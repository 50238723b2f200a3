package jail

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests tie schema/result.schema.json to result.go, and
// schema/session.schema.json to session.go, so neither can change without
// the other.

const schemaFile = "schema/result.schema.json"

// schemaDefs names the schema object that describes each struct of the
// Result document.
var schemaDefs = map[reflect.Type]string{
	reflect.TypeFor[Result]():            "#",
	reflect.TypeFor[ErrorInfo]():         "#/$defs/error_info",
	reflect.TypeFor[Isolation]():         "#/$defs/isolation",
	reflect.TypeFor[IDMap]():             "#/$defs/id_map",
	reflect.TypeFor[SeccompDenial]():     "#/$defs/seccomp_denial",
	reflect.TypeFor[LandlockInfo]():      "#/$defs/landlock_info",
	reflect.TypeFor[NetworkInfo]():       "#/$defs/network_info",
	reflect.TypeFor[AllowInfo]():         "#/$defs/allow_info",
	reflect.TypeFor[NetworkStats]():      "#/$defs/network_stats",
	reflect.TypeFor[DeniedDestination](): "#/$defs/denied_destination",
}

// sessionSchemaDefs is schemaDefs for the session document; it shares the
// result's isolation.
var sessionSchemaDefs = map[reflect.Type]string{
	reflect.TypeFor[SessionInfo]():   "#",
	reflect.TypeFor[SessionUsage]():  "#/$defs/usage",
	reflect.TypeFor[WorkspaceInfo](): "#/$defs/workspace",
	reflect.TypeFor[Isolation]():     "result.schema.json#/$defs/isolation",
}

// ownDefs are the entries of defs that its file itself defines.
func ownDefs(defs map[reflect.Type]string) map[reflect.Type]string {
	out := map[reflect.Type]string{}
	for typ, ref := range defs {
		if strings.HasPrefix(ref, "#") {
			out[typ] = ref
		}
	}
	return out
}

type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// jsonFields lists the JSON properties of struct type typ as encoding/json
// writes them.
func jsonFields(t *testing.T, typ reflect.Type) []jsonField {
	t.Helper()
	require.Equal(t, reflect.Struct, typ.Kind(), "got %s, want a struct", typ)
	var out []jsonField
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		require.NotEmpty(t, tag, "%s.%s has no json tag", typ.Name(), f.Name)
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		out = append(out, jsonField{name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
	}
	return out
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	return loadSchemaFile(t, schemaFile)
}

func loadSchemaFile(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var s map[string]any
	require.NoError(t, json.Unmarshal(b, &s))
	return s
}

// resolve returns the schema object at ref, "#" or "#/$defs/name", or
// "other.schema.json#/$defs/name" in a file beside it.
func resolve(t *testing.T, root map[string]any, ref string) map[string]any {
	t.Helper()
	if file, frag, _ := strings.Cut(ref, "#"); file != "" {
		root, ref = loadSchemaFile(t, "schema/"+file), "#"+frag
	}
	obj := root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
		next, ok := obj[part].(map[string]any)
		require.True(t, ok, "got no object at %s in %s", part, ref)
		obj = next
	}
	return obj
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	require.True(t, ok, "got %T, want a list", v)
	var out []string
	for _, e := range list {
		s, ok := e.(string)
		require.True(t, ok, "got %T in a list, want a string", e)
		out = append(out, s)
	}
	return out
}

// jsonType is the JSON Schema type encoding/json writes for a Go type.
func jsonType(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "unsupported " + typ.Kind().String()
}

// checkProperty checks that the schema of one property fits Go type typ.
func checkProperty(t *testing.T, root, prop map[string]any, typ reflect.Type) {
	t.Helper()
	checkPropertyDefs(t, schemaDefs, root, prop, typ)
}

func checkPropertyDefs(t *testing.T, defs map[reflect.Type]string, root, prop map[string]any, typ reflect.Type) {
	t.Helper()
	checkProperty := func(t *testing.T, root, prop map[string]any, typ reflect.Type) {
		t.Helper()
		checkPropertyDefs(t, defs, root, prop, typ)
	}
	if typ.Kind() == reflect.Pointer {
		// A nil pointer is written as null: anyOf [null, the element].
		alts, ok := prop["anyOf"].([]any)
		require.True(t, ok, "got %v, want anyOf [null, ...] for a pointer", prop)
		require.Len(t, alts, 2)
		assert.Equal(t, map[string]any{"type": "null"}, alts[0])
		checkProperty(t, root, alts[1].(map[string]any), typ.Elem())
		return
	}
	if typ == reflect.TypeFor[time.Time]() {
		assert.Equal(t, "string", prop["type"])
		assert.Equal(t, "date-time", prop["format"])
		return
	}
	if def, ok := defs[typ]; ok {
		assert.Equal(t, def, prop["$ref"], "got %v, want a $ref to %s", prop["$ref"], def)
		assert.Equal(t, "object", resolve(t, root, def)["type"])
		return
	}
	assert.Equal(t, jsonType(typ), prop["type"], "got schema type %v, want %s for %s", prop["type"], jsonType(typ), typ)
	switch typ.Kind() {
	case reflect.Slice:
		items, ok := prop["items"].(map[string]any)
		require.True(t, ok, "got %v, want items for %s", prop["items"], typ)
		checkProperty(t, root, items, typ.Elem())
	case reflect.Map:
		values, ok := prop["additionalProperties"].(map[string]any)
		require.True(t, ok, "got %v, want additionalProperties for %s", prop["additionalProperties"], typ)
		checkProperty(t, root, values, typ.Elem())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		assert.Equal(t, 0.0, prop["minimum"], "got minimum %v, want 0 for %s", prop["minimum"], typ)
		limit := float64(uint64(1)<<typ.Bits() - 1)
		max, ok := prop["maximum"].(float64)
		if assert.True(t, ok, "got no maximum for %s", typ) {
			assert.LessOrEqual(t, max, limit, "got maximum %v, want at most %v", max, limit)
		}
	}
}

func TestResultSchemaMatchesStructs(t *testing.T) {
	checkSchemaMatchesStructs(t, schemaFile, schemaDefs)
}

func TestSessionSchemaMatchesStructs(t *testing.T) {
	checkSchemaMatchesStructs(t, "schema/session.schema.json", sessionSchemaDefs)
	root := loadSchemaFile(t, "schema/session.schema.json")
	assert.Equal(t, SessionSchema, root["title"])
	props := root["properties"].(map[string]any)
	assert.Equal(t, SessionSchema, props["schema"].(map[string]any)["const"])
	assert.Equal(t, []string{SessionRunning, SessionPaused, SessionExited}, strs(t, props["state"].(map[string]any)["enum"]))
}

// snapshotSchemaDefs is schemaDefs for the snapshot document.
var snapshotSchemaDefs = map[reflect.Type]string{
	reflect.TypeFor[SnapshotInfo](): "#",
	reflect.TypeFor[Workspace]():    "#/$defs/workspace",
}

func TestSnapshotSchemaMatchesStructs(t *testing.T) {
	checkSchemaMatchesStructs(t, "schema/snapshot.schema.json", snapshotSchemaDefs)
	root := loadSchemaFile(t, "schema/snapshot.schema.json")
	assert.Equal(t, SnapshotSchema, root["title"])
	props := root["properties"].(map[string]any)
	assert.Equal(t, SnapshotSchema, props["schema"].(map[string]any)["const"])
	assert.Equal(t, []string{ConsistencyFrozen}, strs(t, props["consistency"].(map[string]any)["enum"]))
	ws := root["$defs"].(map[string]any)["workspace"].(map[string]any)["properties"].(map[string]any)
	assert.Equal(t, []string{WorkspaceTmpfs, WorkspaceDir, WorkspaceOverlay, WorkspaceNone}, strs(t, ws["type"].(map[string]any)["enum"]))
}

func checkSchemaMatchesStructs(t *testing.T, file string, defs map[reflect.Type]string) {
	root := loadSchemaFile(t, file)
	assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", root["$schema"])
	for typ, ref := range ownDefs(defs) {
		t.Run(typ.Name(), func(t *testing.T) {
			obj := resolve(t, root, ref)
			assert.Equal(t, "object", obj["type"])
			assert.Equal(t, false, obj["additionalProperties"], "got %v, want a closed object", obj["additionalProperties"])
			props, ok := obj["properties"].(map[string]any)
			require.True(t, ok, "got no properties in %s", ref)

			var names, required []string
			for _, f := range jsonFields(t, typ) {
				names = append(names, f.name)
				if !f.omitempty {
					required = append(required, f.name)
				}
				if prop, ok := props[f.name].(map[string]any); assert.True(t, ok, "got no property %q, want one for %s", f.name, typ.Name()) {
					t.Run(f.name, func(t *testing.T) { checkPropertyDefs(t, defs, root, prop, f.typ) })
					assert.NotEmpty(t, prop["description"], "property %q has no description", f.name)
				}
			}
			slices.Sort(names)
			assert.Equal(t, names, keys(props), "got properties %v, want the JSON fields %v", keys(props), names)
			gotRequired := strs(t, obj["required"])
			// The order of required is the struct's, so the file reads like result.go.
			slices.Sort(required)
			sortedRequired := slices.Sorted(slices.Values(gotRequired))
			assert.Equal(t, required, sortedRequired, "got required %v, want every field without omitempty %v", sortedRequired, required)
		})
	}
}

// statusConstants returns the values of the constants of type Status
// declared in result.go.
func statusConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "result.go", nil, 0)
	require.NoError(t, err)
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Status" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				require.True(t, ok && lit.Kind == token.STRING, "got a Status constant that is not a string literal: %#v", v)
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, s)
			}
		}
	}
	return out
}

func TestResultSchemaEnums(t *testing.T) {
	root := loadSchema(t)
	props := root["properties"].(map[string]any)

	t.Run("schema", func(t *testing.T) {
		schema := props["schema"].(map[string]any)
		assert.Equal(t, Schema, schema["const"], "got %v, want %s", schema["const"], Schema)
		assert.Equal(t, Schema, root["title"])
	})
	t.Run("status", func(t *testing.T) {
		want := statusConstants(t)
		require.NotEmpty(t, want, "found no Status constants in result.go")
		assert.Contains(t, want, string(StatusExited), "the parse of result.go missed StatusExited")
		got := strs(t, props["status"].(map[string]any)["enum"])
		assert.Equal(t, want, got, "got status enum %v, want the Status constants of result.go %v", got, want)
	})
	t.Run("namespaces", func(t *testing.T) {
		iso := resolve(t, root, "#/$defs/isolation")["properties"].(map[string]any)
		items := iso["namespaces"].(map[string]any)["items"].(map[string]any)
		got := strs(t, items["enum"])
		assert.Equal(t, Namespaces, got, "got namespace enum %v, want %v", got, Namespaces)
	})
	t.Run("exit codes", func(t *testing.T) {
		ec := props["exit_code"].(map[string]any)
		for _, code := range []int{ExitTimedOut, ExitSetupError, ExitNotExecutable, ExitNotFound, 128 + 64} {
			assert.LessOrEqual(t, ec["minimum"], float64(code))
			assert.GreaterOrEqual(t, ec["maximum"], float64(code))
		}
	})
}

// TestResultDocument checks a Result as Start and Wait build it against the
// schema's required lists: every required property is present and not
// null unless the schema allows null.
func TestResultDocument(t *testing.T) {
	root := loadSchema(t)
	for _, tc := range []struct {
		name string
		r    *Result
	}{
		{"failed start", func() *Result {
			c := Command(t.Context(), Spec{Hostname: "-"}, "true")
			require.Error(t, c.Start())
			return c.Result
		}()},
		{"planned run", func() *Result {
			l, err := newLaunch(&Spec{}, []string{"true"}, testHost(0, 0, "time"))
			require.NoError(t, err)
			c := &Cmd{l: l, Capture: true}
			r := c.newResult()
			r.Status = StatusExited
			return r
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.r)
			require.NoError(t, err)
			var doc map[string]any
			require.NoError(t, json.Unmarshal(b, &doc))
			checkRequired(t, root, root, doc, "result")
		})
	}
}

func checkRequired(t *testing.T, root, schema map[string]any, doc map[string]any, where string) {
	t.Helper()
	props := schema["properties"].(map[string]any)
	for _, name := range strs(t, schema["required"]) {
		v, ok := doc[name]
		if !assert.True(t, ok, "%s: got no %q, want it present", where, name) {
			continue
		}
		prop := props[name].(map[string]any)
		if v == nil {
			_, nullable := prop["anyOf"]
			assert.True(t, nullable, "%s: got %q null, want a %v", where, name, prop["type"])
			continue
		}
		if ref, ok := prop["$ref"].(string); ok {
			if sub, ok := v.(map[string]any); assert.True(t, ok, "%s: got %q as %T, want an object", where, name, v) {
				checkRequired(t, root, resolve(t, root, ref), sub, where+"."+name)
			}
		}
	}
	for name := range doc {
		assert.Contains(t, props, name, "%s: got property %q, which the schema does not have", where, name)
	}
}
