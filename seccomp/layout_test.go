package seccomp

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinaryTreeDecidesAlike checks that the binary tree, which Compile
// builds, decides every case of decisionCases like libseccomp's linear
// program of the same policy: the layout is an optimization and must never
// change a verdict. The policies cover the override prefix, other ABIs in
// the filter, and architectures whose tree is empty.
func TestBinaryTreeDecidesAlike(t *testing.T) {
	policies := map[string]*Policy{}
	for _, name := range []string{"default", "strict"} {
		p, err := Load(name)
		require.NoError(t, err)
		policies[name] = p
	}
	// Overriding rules need a native-only policy, and libseccomp refuses
	// argument conditions on ia32's socket, which it multiplexes through
	// socketcall. Each ABI in a filter gets its own tree.
	strict := policies["strict"]
	x32, x86 := *strict, *strict
	x32.Architectures = []string{"x86_64", "x32"}
	x86.Architectures = []string{"x86_64", "x86", "x32"}
	x32.Rules, x86.Rules = nil, nil
	for i, r := range strict.Rules {
		if !slices.Contains(strict.OverridingRules(), i) {
			x32.Rules = append(x32.Rules, r)
		}
		if len(r.Args) == 0 {
			x86.Rules = append(x86.Rules, r)
		}
	}
	policies["strict on x86_64 and x32"] = &x32
	policies["strict without conditions on x86_64, x86 and x32"] = &x86
	for what, text := range map[string]string{
		"no rules":                 "default_action: allow\nrules: []",
		"no native rules":          "default_action: allow\narchitectures: [x86_64, x86]\nrules: [{names: [socketcall], action: errno}]",
		"rules repeat the default": "default_action: allow\nrules: [{names: [read, write], action: allow}, {names: [ptrace], action: errno, errno: ENOSYS}]",
	} {
		p, err := Parse([]byte(text))
		require.NoError(t, err, what)
		policies[what] = p
	}
	for what, p := range policies {
		for _, o := range []Options{{}, {Log: true}} {
			t.Run(fmt.Sprintf("%s %+v", what, o), func(t *testing.T) {
				lin, err := compile(p, o, linear)
				require.NoError(t, err)
				tree, err := compile(p, o, binaryTree)
				require.NoError(t, err)
				if (what == "default" || what == "strict") && treeSafe() {
					require.NotEqual(t, lin.Filter, tree.Filter, "libseccomp built no tree")
				}
				assertDecideAlike(t, "filter", decisionCases(t, p), lin.Filter, tree.Filter)
				if o.Log {
					assertDecideAlike(t, "rules", decisionCases(t, p), lin.Rules, tree.Rules)
				}
			})
		}
	}
}
