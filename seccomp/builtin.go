package seccomp

import (
	"embed"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/jailrt/jail/internal/hostfs"
)

// builtins holds the built-in policies and their programs as libseccomp
// built them (policies/NAME.bpf, kept up to date by
// `go test ./seccomp -run TestPrecompiled -args -update`). Parsing a policy's
// YAML and compiling it costs about 4 ms, which a `jail run` would pay on
// every start; the precompiled program costs nothing.
//
//go:embed policies/*.yaml policies/*.bpf
var builtins embed.FS

// None is the name that selects no filter at all.
const None = "none"

// Names lists the built-in policies, "none" included.
func Names() []string {
	entries, _ := builtins.ReadDir("policies")
	names := []string{None}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
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

// maxFileBytes bounds a policy file.
const maxFileBytes = 1 << 20

// Load returns the built-in policy called nameOrPath, or the policy in the
// file at that path when it contains a slash or ends in .yaml, .yml or
// .json (a symlink in its path is refused, and it must be a regular file
// or a pipe). It returns nil, nil for "none".
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
		data, err = hostfs.ReadFile(nameOrPath, maxFileBytes)
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

// IsBuiltin reports whether name is a built-in policy ("none" included)
// rather than a file.
func IsBuiltin(name string) bool {
	return slices.Contains(Names(), name)
}

// CompileBuiltin returns the program of built-in policy name from its
// precompiled form, without parsing or compiling anything: the hot path
// of `jail run --seccomp strict`.
func CompileBuiltin(name string, o Options) (*Program, error) {
	rules, err := builtins.ReadFile("policies/" + name + ".bpf")
	if err != nil {
		return nil, fmt.Errorf("no built-in seccomp policy %q (built-in: %s)", name, strings.Join(Names(), ", "))
	}
	return newProgram(name, rules, o)
}
