package profiles

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/jailrt/jail"
)

// Runner is a language runner: how a profile's jail runs a piece of code
// in one language, compiled first when it has to be. The code is placed
// read-only at /code/SOURCE; a compile runs in a jail of its own, with its
// own limits (CompileLimits over the profile's Spec), and makes ARTIFACT,
// which the run's jail sees read-only at /code/ARTIFACT's name. Package
// runner carries it out.
type Runner struct {
	// Language is the name `jail run --language` takes: python, node, c...
	Language string `json:"language"`
	// Source is the code's file name in /code, e.g. main.py.
	Source string `json:"source"`
	// Compile, when not empty, is the command that compiles /code/SOURCE
	// into Artifact, run in /tmp.
	Compile []string `json:"compile,omitempty"`
	// Artifact is the absolute path in the compile's jail of what Compile
	// makes, e.g. /tmp/main, an argument of Compile of its own; the run's
	// jail has it at /code/NAME.
	Artifact string `json:"artifact,omitempty"`
	// CompileLimits replace the profile's limits for the compile: it is
	// the toolchain's work, not the code's, and gets more room.
	CompileLimits CompileLimits `json:"compile_limits,omitzero"`
	// Run is the command that runs the code (or the artifact), in /tmp.
	Run []string `json:"run"`
	// Version is a command that prints the toolchain's version, for
	// `jail languages`.
	Version []string `json:"version"`
	// Check, when not empty, is a command that must succeed in a jail of
	// the run's Spec before the code is placed: a toolchain feature the
	// runner needs (TypeScript's type stripping), whose absence refuses
	// the run rather than running the code as something else.
	Check []string `json:"check,omitempty"`
}

// CompileLimits are the limits of a runner's compile.
type CompileLimits struct {
	// Timeout is the compile's wall-clock limit; 0: 60 s.
	Timeout jail.Duration `json:"timeout,omitempty"`
	// MemoryMaxBytes caps the compile's memory (cgroup); 0: none.
	MemoryMaxBytes int64 `json:"memory_max_bytes,omitempty"`
	// PidsMax caps the compile's processes and threads; 0: none.
	PidsMax int64 `json:"pids_max,omitempty"`
	// TmpSizeBytes is the compile's /tmp; 0: 512 MiB.
	TmpSizeBytes int64 `json:"tmp_size_bytes,omitempty"`
	// ArtifactMaxBytes bounds the artifact, which crosses to the host
	// between the two jails on the compile's stdout (a compile past it is
	// killed); 0: 256 MiB.
	ArtifactMaxBytes int64 `json:"artifact_max_bytes,omitempty"`
}

// Validate checks r.
func (r *Runner) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &jail.SpecError{Field: "runner." + field, Err: fmt.Errorf(format, args...)}
	}
	if r.Language == "" || strings.ContainsAny(r.Language, "/ \x00") {
		return bad("language", "want a name, e.g. python")
	}
	if r.Source == "" || r.Source != path.Base(r.Source) || r.Source == "." || r.Source == ".." {
		return bad("source", "want a file name, e.g. main.py")
	}
	if len(r.Run) == 0 || r.Run[0] == "" {
		return bad("run", "want a command")
	}
	if len(r.Version) == 0 || r.Version[0] == "" {
		return bad("version", "want a command that prints the toolchain's version")
	}
	if len(r.Compile) > 0 {
		if r.Artifact == "" || !path.IsAbs(r.Artifact) || path.Clean(r.Artifact) != r.Artifact || path.Base(r.Artifact) == r.Source {
			return bad("artifact", "a compiled runner needs the absolute path of what it makes, named apart from source")
		}
		if !slices.Contains(r.Compile[1:], r.Artifact) {
			return bad("artifact", "%s must be an argument of compile of its own (-o %s), where a session's job puts its own", r.Artifact, r.Artifact)
		}
	} else if r.Artifact != "" {
		return bad("artifact", "only a runner that compiles has one")
	}
	l := r.CompileLimits
	if l.Timeout < 0 || l.MemoryMaxBytes < 0 || l.PidsMax < 0 || l.TmpSizeBytes < 0 || l.ArtifactMaxBytes < 0 {
		return bad("compile_limits", "must not be negative")
	}
	return nil
}

// ErrNoRunner is returned for a profile without a runner.
var ErrNoRunner = errors.New("the profile has no runner")
