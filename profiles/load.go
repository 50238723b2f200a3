package profiles

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/mounts"
)

// builtin holds the built-in profiles' files: what `jail profile show`
// prints, and what a file's `extends: NAME` reads (a run of a built-in
// profile takes its compiled values instead).
//
//go:embed *.yaml
var builtin embed.FS

// maxExtends bounds a chain of extends.
const maxExtends = 8

// file is what a profile file holds: a Spec and two fields of its own.
type file struct {
	// Description says what the profile is for.
	Description string `json:"description,omitempty"`
	// Extends names the profile this one starts from: a built-in name, or
	// a file (relative to this file's directory).
	Extends string `json:"extends,omitempty"`
	// Runner makes the profile a language runner (see [Runner]).
	Runner *Runner `json:"runner,omitempty"`
	jail.Spec
}

// layer is one profile file, read: its values, the Spec fields it sets
// (see [Apply]) and the line each field path is written on.
type layer struct {
	name  string // as errors say it: the built-in's name or the file's path
	dir   string // the file's directory, for a relative extends; "" for a built-in
	f     file
	set   []string
	lines map[string]int
}

// LoadError is a problem with a profile: its file (or built-in name), the
// line when it is known, the field path ("mounts[1].source") and what is
// wrong. Its text is one line, "FILE:LINE: FIELD: problem".
type LoadError struct {
	File  string
	Line  int // 0: not known
	Field string
	Err   error
}

func (e *LoadError) Error() string {
	at := quoteOdd(e.File)
	if e.Line > 0 {
		at += ":" + strconv.Itoa(e.Line)
	}
	msg := strings.Join(strings.Fields(e.Err.Error()), " ") // one line
	if e.Field != "" {
		return at + ": " + quoteOdd(e.Field) + ": " + msg
	}
	return at + ": " + msg
}

func (e *LoadError) Unwrap() error { return e.Err }

// quoteOdd quotes a file name or field path with spaces or control
// characters, so that the error stays one line that says where it ends.
func quoteOdd(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// isFile reports whether a profile name is a file rather than a built-in.
func isFile(nameOrPath string) bool {
	return strings.ContainsRune(nameOrPath, '/') || strings.HasSuffix(nameOrPath, ".yaml") ||
		strings.HasSuffix(nameOrPath, ".yml") || strings.HasSuffix(nameOrPath, ".json")
}

// resolve reads the profile nameOrPath and what it extends, and merges
// them: the base first, each layer over it by [Apply]'s rules. from is
// the directory a relative file name is relative to ("" for the caller's
// working directory); seen are the profiles already in the chain.
func resolve(nameOrPath, from string, seen []string) (*Profile, []*layer, error) {
	l, err := readLayer(nameOrPath, from)
	if err != nil {
		return nil, nil, err
	}
	return resolveLayer(l, seen)
}

// resolveLayer merges l over what it extends.
func resolveLayer(l *layer, seen []string) (*Profile, []*layer, error) {
	key := l.name
	if l.dir != "" {
		key = filepath.Join(l.dir, filepath.Base(l.name))
	}
	for _, s := range seen {
		if s == key {
			return nil, nil, &LoadError{File: l.name, Line: l.lines["extends"], Field: "extends",
				Err: fmt.Errorf("a cycle: %s", strings.Join(append(seen, key), " extends "))}
		}
	}
	if len(seen) >= maxExtends {
		return nil, nil, &LoadError{File: l.name, Line: l.lines["extends"], Field: "extends", Err: fmt.Errorf("more than %d profiles in a chain", maxExtends)}
	}
	p := &Profile{Description: l.f.Description}
	chain := []*layer{l}
	if l.f.Extends != "" {
		if l.dir == "" && isFile(l.f.Extends) {
			return nil, nil, &LoadError{File: l.name, Line: l.lines["extends"], Field: "extends", Err: errors.New("a built-in profile extends built-in profiles only")}
		}
		base, below, err := resolve(l.f.Extends, l.dir, append(seen, key))
		if err != nil {
			return nil, nil, err
		}
		p.Spec = base.Spec
		p.Runner = base.Runner
		p.Extends = append([]string{base.Name}, base.Extends...)
		if l.f.Description == "" {
			p.Description = base.Description
		}
		chain = append(chain, below...)
	}
	p.Spec = Apply(p.Spec, l.f.Spec, l.set)
	if l.f.Runner != nil { // a runner is replaced as a whole
		p.Runner = l.f.Runner
	}
	p.Name = l.name
	return p, chain, nil
}

// readLayer reads and checks one profile file, or a built-in's.
func readLayer(nameOrPath, from string) (*layer, error) {
	if !isFile(nameOrPath) {
		data, err := builtin.ReadFile(nameOrPath + ".yaml")
		if err != nil {
			return nil, fmt.Errorf("unknown profile %q (built in: %s; or give a file path)", nameOrPath, strings.Join(Names(), ", "))
		}
		return parseLayer(nameOrPath, "", data)
	}
	path := nameOrPath
	if from != "" && !filepath.IsAbs(path) {
		path = filepath.Join(from, path)
	}
	if from != "" && (strings.HasPrefix(filepath.Clean(path), "/dev/") || strings.HasPrefix(filepath.Clean(path), "/proc/")) {
		// jail's own stdin (/dev/fd/0) or another descriptor: a profile
		// file extends files only.
		return nil, &LoadError{File: path, Field: "extends", Err: errors.New("a file under /dev or /proc cannot be extended")}
	}
	data, err := hostfs.ReadFile(path, maxFileBytes)
	if err != nil {
		return nil, &LoadError{File: path, Err: err}
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, &LoadError{File: path, Err: err}
	}
	return parseLayer(path, dir, data)
}

// parseLayer reads a profile's YAML (or JSON, which is YAML) and checks
// every field against the Spec's types, so that each problem is reported
// with its line: unknown fields, wrong types, sizes and durations that do
// not parse. Sizes may be written with units ("256Mi", "1G") and cpus as
// a string ("1.5").
func parseLayer(name, dir string, data []byte) (*layer, error) {
	l := &layer{name: name, dir: dir, lines: map[string]int{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(name, err)
	}
	if len(doc.Content) == 0 { // an empty file: an empty profile
		return l, nil
	}
	root := doc.Content[0]
	w := walker{l: l}
	if err := w.walk(root, reflect.TypeFor[file](), ""); err != nil {
		return nil, err
	}
	var v any
	if err := root.Decode(&v); err != nil {
		return nil, yamlError(name, err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, &LoadError{File: name, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l.f); err != nil { // the walk checked each field: not expected
		return nil, &LoadError{File: name, Err: err}
	}
	return l, nil
}

// yamlError turns a YAML syntax error ("yaml: line 3: ...") into a
// LoadError with its line.
func yamlError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0] // "line 2: mapping key ... already defined"
	}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return &LoadError{File: name, Line: line, Err: errors.New(after)}
			}
		}
	}
	return &LoadError{File: name, Err: errors.New(msg)}
}

// walker checks a YAML tree against a Go type by its JSON names.
type walker struct{ l *layer }

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func (w walker) fail(n *yaml.Node, path, format string, args ...any) error {
	return &LoadError{File: w.l.name, Line: n.Line, Field: path, Err: fmt.Errorf(format, args...)}
}

func (w walker) walk(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode {
		// Each alias would be walked (and decoded) again: a small file
		// could stand for billions of nodes.
		return w.fail(n, path, "an alias (*%s): a profile writes each value out (use extends to share fields)", n.Value)
	}
	if path != "" {
		if _, ok := w.l.lines[path]; !ok {
			w.l.lines[path] = n.Line
		}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // null: the zero value
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		if t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode { // its own decoder may be lenient: the names are checked here
			fields := jsonFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if _, ok := fields[k.Value]; !ok {
					msg := "unknown field"
					if near := nearest(k.Value, fields); near != "" {
						msg += fmt.Sprintf(" (did you mean %s?)", near)
					}
					return w.fail(k, path+"."+k.Value, "%s", msg)
				}
				w.l.lines[path+"."+k.Value] = k.Line
			}
		}
		return w.leaf(n, t, path)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.walk(n, t.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if path == "" {
				return w.fail(n, "", "want a mapping of profile fields")
			}
			return w.fail(n, path, "want a mapping of fields, not %s", describe(n))
		}
		fields := jsonFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return w.fail(k, path, "want a field name, not %s", describe(k))
			}
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			f, ok := fields[k.Value]
			if !ok {
				msg := "unknown field"
				if near := nearest(k.Value, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", near)
				}
				return w.fail(k, p, "%s", msg)
			}
			w.l.lines[p] = k.Line
			if path == "" && k.Value != "description" && k.Value != "extends" && k.Value != "runner" {
				if k.Value == "network" && v.Kind == yaml.MappingNode {
					for j := 0; j+1 < len(v.Content); j += 2 {
						w.l.set = append(w.l.set, "network."+v.Content[j].Value)
					}
				} else {
					w.l.set = append(w.l.set, k.Value)
				}
			}
			if err := w.walk(v, f.Type, p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return w.fail(n, path, "want a list, not %s", describe(n))
		}
		for i, e := range n.Content {
			if err := w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return w.fail(n, path, "want a mapping, not %s", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := w.walk(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value); err != nil {
				return err
			}
		}
		return nil
	}
	return w.leaf(n, t, path)
}

// leaf checks a value by decoding it as the Spec will, after rewriting a
// size with units or a cpus string to a number.
func (w walker) leaf(n *yaml.Node, t reflect.Type, path string) error {
	last := path[strings.LastIndexByte(path, '.')+1:]
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		switch {
		case t.Kind() == reflect.Int64 && strings.HasSuffix(last, "_bytes"):
			size, err := mounts.ParseSize(n.Value)
			if err != nil {
				return w.fail(n, path, "%q: %v (K, M, G and T are powers of 1024; Ki, Mi, Gi too)", n.Value, err)
			}
			n.Value, n.Tag = strconv.FormatInt(size, 10), "!!int"
		case t.Kind() == reflect.Float64:
			if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
				return w.fail(n, path, "%q: want a number", n.Value)
			}
			n.Tag = "!!float"
		}
	}
	if n.Kind != yaml.ScalarNode && !reflect.PointerTo(t).Implements(unmarshaler) {
		return w.fail(n, path, "want %s, not %s", want(t), describe(n))
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return w.fail(n, path, "%v", err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return w.fail(n, path, "%v", err)
	}
	if err := json.Unmarshal(js, reflect.New(t).Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return w.fail(n, path, "%s: want %s", n.Value, want(t))
		}
		if n.Kind != yaml.ScalarNode {
			return w.fail(n, path, "%v", err)
		}
		return w.fail(n, path, "%s: %v", n.Value, err)
	}
	return nil
}

// want names what a value of t is written as.
func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float64:
		return "a number"
	}
	return "a value of type " + t.String()
}

// describe names a YAML node's kind for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// jsonFields maps the JSON names of t's fields (those of embedded structs
// included) to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// nearest is the field name closest to a misspelt one: at most two edits
// away, or sharing its first word ("memory" → memory_max_bytes).
func nearest(s string, fields map[string]reflect.StructField) string {
	best, bestD := "", 3
	for name := range fields {
		d := editDistance(s, name)
		if d < bestD || d == bestD && name < best {
			best, bestD = name, d
		}
	}
	if best != "" || len(s) < 4 {
		return best
	}
	for name := range fields {
		if first, _, _ := strings.Cut(name, "_"); first != name && editDistance(s, first) <= 2 && (best == "" || name < best) {
			best = name
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// relocate turns the field path of an error in a merged list ("env[3]",
// an index of the merged Spec) into the path of the layer that wrote that
// element ("env[0]" of the file that added it); the path as it is when no
// layer has the element as it was merged.
func relocate(chain []*layer, merged jail.Spec, field string) string {
	name, rest, ok := strings.Cut(field, "[")
	if !ok {
		return field
	}
	idx, rest, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil {
		return field
	}
	f, ok := jsonFields(reflect.TypeFor[jail.Spec]())[name]
	if !ok || f.Type.Kind() != reflect.Slice {
		return field
	}
	list := reflect.ValueOf(merged).FieldByIndex(f.Index)
	if i >= list.Len() {
		return field
	}
	elem := list.Index(i).Interface()
	for _, l := range chain {
		own := reflect.ValueOf(l.f.Spec).FieldByIndex(f.Index)
		for j := range own.Len() {
			if reflect.DeepEqual(own.Index(j).Interface(), elem) {
				return fmt.Sprintf("%s[%d]%s", name, j, rest)
			}
		}
	}
	return field
}

// lineOf finds where a field path was written in a chain (the profile
// first, its bases after), for an error of the merged Spec.
func lineOf(chain []*layer, field string) (string, int) {
	for _, l := range chain {
		for p := field; p != ""; {
			if n, ok := l.lines[p]; ok {
				return l.name, n
			}
			i := strings.LastIndexAny(p, ".[")
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	if len(chain) > 0 {
		return chain[0].name, 0
	}
	return "", 0
}
