package seccomp

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite policies/*.bpf from policies/*.yaml")

// TestPrecompiled checks that each built-in policy's embedded program
// decides like a fresh compile of its YAML on every case of decisionCases.
// It compares verdicts rather than bytes, so that another libseccomp
// version, which may order its checks differently, still passes. -update
// rewrites the files.
func TestPrecompiled(t *testing.T) {
	for _, name := range []string{"default", "strict"} {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			require.NoError(t, err)
			fresh, err := compile(p, Options{}, binaryTree)
			require.NoError(t, err)
			if *update {
				require.NoError(t, os.WriteFile("policies/"+name+".bpf", rulesOf(t, p), 0o644))
			}
			embedded, err := CompileBuiltin(name, Options{})
			require.NoError(t, err, "run: go test ./seccomp -run TestPrecompiled -args -update")
			assertDecideAlike(t, "policies/"+name+".bpf is out of date (run go test ./seccomp -run TestPrecompiled -args -update)", decisionCases(t, p), fresh.Filter, embedded.Filter)
		})
	}
}

// rulesOf is the policy's program before the notify rewrite.
func rulesOf(t *testing.T, p *Policy) []byte {
	prog, err := compile(p, Options{Log: true}, binaryTree)
	require.NoError(t, err)
	return bytes.Clone(prog.Rules)
}
