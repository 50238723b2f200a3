package profiles

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
)

//go:generate go test -run TestCompiled -args -update

// Profile is a named Spec.
type Profile struct {
	// Name is the built-in name or the file's path.
	Name string `json:"-"`
	// Description says what the profile is for.
	Description string `json:"description,omitempty"`
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

// maxFileBytes bounds a profile file.
const maxFileBytes = 1 << 20

// Load returns the built-in profile called nameOrPath, or reads the file at
// nameOrPath (a name containing "/" or ending in .yaml, .yml or .json is
// always a file). The Spec is validated. A file is opened as every host
// path jail reads: a symlink in its path is refused, and it must be a
// regular file or a pipe.
//
// A built-in profile is not parsed: compiled.go holds it as Go values,
// generated from its YAML file by TestCompiled, which fails when the two
// differ. Parsing the YAML took about 0.25 ms of every `jail run`, mostly
// the decoders' first use in a fresh process.
func Load(nameOrPath string) (*Profile, error) {
	isFile := strings.ContainsRune(nameOrPath, '/') || strings.HasSuffix(nameOrPath, ".yaml") ||
		strings.HasSuffix(nameOrPath, ".yml") || strings.HasSuffix(nameOrPath, ".json")
	var p *Profile
	if isFile {
		data, err := hostfs.ReadFile(nameOrPath, maxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("profile %q: %w", nameOrPath, err)
		}
		if p, err = Parse(data); err != nil {
			return nil, fmt.Errorf("profile %q: %w", nameOrPath, err)
		}
	} else {
		mk, ok := compiled[nameOrPath]
		if !ok {
			return nil, fmt.Errorf("unknown profile %q (built in: %s; or give a file path)", nameOrPath, strings.Join(Names(), ", "))
		}
		p = mk()
		if err := p.Spec.Validate(); err != nil { // as Parse does; TestCompiled makes sure it passes
			return nil, fmt.Errorf("profile %q: %w", nameOrPath, err)
		}
	}
	p.Name = nameOrPath
	return p, nil
}

// Parse reads a profile from YAML or JSON and validates its Spec.
func Parse(data []byte) (*Profile, error) {
	var p Profile
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, err
	}
	if err := p.Spec.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}
