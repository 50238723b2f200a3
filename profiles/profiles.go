package profiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jailrt/jail"
)

//go:generate go test -run TestCompiled -args -update

// Profile is a named Spec.
type Profile struct {
	// Name is the built-in name or the file's path.
	Name string `json:"-"`
	// Description says what the profile is for.
	Description string `json:"description,omitempty"`
	// Extends is the chain of profiles this one was merged over, nearest
	// first; empty for a profile that extends none.
	Extends []string `json:"-"`
	// Runner, for a language runner's profile, is how it runs code.
	Runner *Runner `json:"runner,omitempty"`
	jail.Spec
}

// Names lists the built-in profiles.
func Names() []string {
	names := make([]string, 0, len(compiled))
	for name := range compiled {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Source returns the file of the built-in profile name, as it is written.
func Source(name string) ([]byte, bool) {
	if isFile(name) {
		return nil, false
	}
	data, err := builtin.ReadFile(name + ".yaml")
	return data, err == nil
}

// maxFileBytes bounds a profile file.
const maxFileBytes = 1 << 20

// Load returns the built-in profile called nameOrPath, or reads the file at
// nameOrPath (a name containing "/" or ending in .yaml, .yml or .json is
// always a file) and what it extends, merged by [Apply]'s rules. A file is
// opened as every host path jail reads: a symlink in its path is refused,
// and it must be a regular file or a pipe. A relative bind source is made
// absolute against the caller's working directory (the dev profile binds
// "."). The merged Spec is validated, but for an egress network's empty
// allow-list, which a profile may leave to its caller (--allow); errors
// are *[LoadError]s naming the file, line and field.
//
// A built-in profile is not parsed: compiled.go holds it, merged, as Go
// values, generated from its YAML file by TestCompiled, which fails when
// the two differ. Parsing the YAML took about 0.25 ms of every `jail
// run`, mostly the decoders' first use in a fresh process.
func Load(nameOrPath string) (*Profile, error) {
	if isFile(nameOrPath) {
		p, chain, err := resolve(nameOrPath, "", nil)
		if err != nil {
			return nil, err
		}
		return finish(p, chain)
	}
	mk, ok := compiled[nameOrPath]
	if !ok {
		return nil, fmt.Errorf("unknown profile %q (built in: %s; or give a file path)", nameOrPath, strings.Join(Names(), ", "))
	}
	p := mk()
	p.Name = nameOrPath
	return finish(p, []*layer{{name: nameOrPath}})
}

// Parse reads a profile from YAML or JSON, merges it over what it extends
// (a built-in, or a file relative to the working directory) and validates
// it as [Load] does.
func Parse(data []byte) (*Profile, error) {
	l, err := parseLayer("profile", "", data)
	if err != nil {
		return nil, err
	}
	l.dir, _ = os.Getwd()
	p, chain, err := resolveLayer(l, nil)
	if err != nil {
		return nil, err
	}
	return finish(p, chain)
}

// finish makes relative bind sources absolute and validates p.
func finish(p *Profile, chain []*layer) (*Profile, error) {
	for i, m := range p.Mounts {
		if m.Source != "" && !filepath.IsAbs(m.Source) {
			abs, err := filepath.Abs(m.Source)
			if err != nil {
				return nil, err
			}
			p.Mounts[i].Source = abs
		}
	}
	if p.Runner != nil {
		if err := p.Runner.Validate(); err != nil {
			se := err.(*jail.SpecError)
			file, line := lineOf(chain, se.Field)
			return nil, &LoadError{File: file, Line: line, Field: se.Field, Err: se.Err}
		}
	}
	if err := p.Spec.Validate(); err != nil {
		var se *jail.SpecError
		if !errors.As(err, &se) {
			return nil, &LoadError{File: p.Name, Err: err}
		}
		if se.Field == "network.allow" && len(p.Network.Allow) == 0 {
			return p, nil // the caller gives it
		}
		field := relocate(chain, p.Spec, se.Field)
		file, line := lineOf(chain, field)
		return nil, &LoadError{File: file, Line: line, Field: field, Err: fmt.Errorf("%q: %w", se.Value, se.Err)}
	}
	return p, nil
}
