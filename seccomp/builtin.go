package seccomp

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed policies/*.yaml
var builtins embed.FS

// None is the name that selects no filter at all.
const None = "none"

// Names lists the built-in policies, "none" included.
func Names() []string {
	entries, _ := builtins.ReadDir("policies")
	names := []string{None}
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Builtin returns the text of a built-in policy ("default", "strict").
func Builtin(name string) ([]byte, error) {
	b, err := builtins.ReadFile("policies/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in seccomp policy %q (built-in: %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Load returns the built-in policy called nameOrPath, or the policy in the
// file at that path when it contains a slash or ends in .yaml, .yml or
// .json. It returns nil, nil for "none".
func Load(nameOrPath string) (*Policy, error) {
	if nameOrPath == None {
		return nil, nil
	}
	var (
		data []byte
		err  error
		name = nameOrPath
	)
	if strings.ContainsRune(nameOrPath, '/') || strings.HasSuffix(nameOrPath, ".yaml") ||
		strings.HasSuffix(nameOrPath, ".yml") || strings.HasSuffix(nameOrPath, ".json") {
		data, err = os.ReadFile(nameOrPath)
		name = strings.TrimSuffix(filepath.Base(nameOrPath), filepath.Ext(nameOrPath))
	} else {
		data, err = Builtin(nameOrPath)
	}
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nameOrPath, err)
	}
	if p.Name == "" {
		p.Name = name
	}
	return p, nil
}
