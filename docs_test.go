package jail

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/spec.md from the Spec's doc comments")

// TestSpecDocs keeps docs/spec.md, a section per Spec field, the same as
// the fields' doc comments; every field must have one. -update-docs
// rewrites the file.
func TestSpecDocs(t *testing.T) {
	got, err := specDocs()
	require.NoError(t, err)
	if *updateDocs {
		require.NoError(t, os.WriteFile("docs/spec.md", got, 0o644))
	}
	want, err := os.ReadFile("docs/spec.md")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "docs/spec.md is out of date: go test -run TestSpecDocs -args -update-docs")
}

// docType is a struct documented in docs/spec.md: its Go type, and the
// file and name its fields are declared under.
type docType struct {
	title, file, name string
	typ               reflect.Type
}

var docTypes = []docType{
	{"Spec", "spec.go", "Spec", reflect.TypeFor[Spec]()},
	{"network", "network.go", "Network", reflect.TypeFor[Network]()},
	{"mounts[]", "mounts/mounts.go", "Mount", reflect.TypeFor[mounts.Mount]()},
	{"rlimits[]", "spec.go", "Rlimit", reflect.TypeFor[Rlimit]()},
}

func specDocs() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`# The Spec

<!-- Generated from the doc comments of spec.go, network.go and mounts/mounts.go by
TestSpecDocs (go test -run TestSpecDocs -args -update-docs); edit those, not this. -->

A Spec describes what to isolate and what to limit: profiles (docs/profiles.md) are Specs in YAML
or JSON, the Go API takes one (jail.Spec), and jail serve takes one as JSON. These are its fields,
by their JSON names. Sizes (*_bytes) are bytes; in a profile they may be written with units
(256Mi, 1G). Durations are Go duration strings ("500ms", "10s") or a number of seconds.
`)
	for _, dt := range docTypes {
		fields, err := fieldDocs(dt)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n## %s\n", dt.title)
		for _, f := range fields {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n\n%s\n", strings.Join(f.names, ", "), f.typ, f.doc)
		}
	}
	return b.Bytes(), nil
}

type fieldDoc struct {
	names []string
	typ   string
	doc   string
}

// fieldDocs reads the doc comments of dt's exported fields; a field
// without one shares the one above it ("UID and GID are ...").
func fieldDocs(dt docType) ([]fieldDoc, error) {
	f, err := parser.ParseFile(token.NewFileSet(), dt.file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == dt.name {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		return nil, fmt.Errorf("%s: no struct %s", dt.file, dt.name)
	}
	var out []fieldDoc
	for _, field := range st.Fields.List {
		for _, name := range field.Names {
			if !name.IsExported() {
				continue
			}
			sf, ok := dt.typ.FieldByName(name.Name)
			if !ok {
				return nil, fmt.Errorf("%s.%s: not in the type", dt.name, name.Name)
			}
			jsonName, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			doc := strings.TrimSpace(field.Doc.Text())
			if doc == "" {
				if len(out) == 0 {
					return nil, fmt.Errorf("%s.%s has no doc comment", dt.name, name.Name)
				}
				last := &out[len(out)-1]
				last.names = append(last.names, "`"+jsonName+"`")
				continue
			}
			out = append(out, fieldDoc{names: []string{"`" + jsonName + "`"}, typ: "Type: " + typeName(sf.Type, jsonName) + ".", doc: unwrap(doc)})
		}
	}
	return out, nil
}

// unwrap joins a comment's lines into paragraphs.
func unwrap(doc string) string {
	var paras []string
	for _, p := range strings.Split(doc, "\n\n") {
		paras = append(paras, strings.Join(strings.Fields(p), " "))
	}
	return strings.Join(paras, "\n\n")
}

// typeName is how a field's value is written in JSON or YAML.
func typeName(t reflect.Type, jsonName string) string {
	switch {
	case t == reflect.TypeFor[Duration]():
		return "duration"
	case t == reflect.TypeFor[SensitiveSources]():
		return "true, false, or a list of host paths"
	case t == reflect.TypeFor[Network]():
		return "object (network, below)"
	case t == reflect.TypeFor[[]mounts.Mount]():
		return "list of mounts (below)"
	case t == reflect.TypeFor[[]Rlimit]():
		return "list of rlimits (below)"
	case strings.HasSuffix(jsonName, "_bytes"):
		return "size in bytes"
	case strings.HasPrefix(jsonName, "soft") || strings.HasPrefix(jsonName, "hard"):
		return `integer, or "unlimited"`
	}
	switch t.Kind() {
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			return "object"
		}
		return typeName(t.Elem(), jsonName) + " (absent: the default)"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Uint32, reflect.Uint64:
		return "integer, 0 or more"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem(), "") + "s"
	}
	return t.String()
}
