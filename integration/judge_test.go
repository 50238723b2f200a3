package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/schematest"
	"github.com/jailrt/jail/runner"
)

// solution reads two numbers and prints their sum, but for the inputs
// that make it loop, allocate, crash or print the wrong thing.
const solution = `#include <stdio.h>
#include <stdlib.h>
int main(void) {
	long a, b;
	if (scanf("%ld %ld", &a, &b) != 2) return 2;
	if (a == -1) for (;;);                       /* time_limit */
	if (a == -2) { size_t n = 512u << 20; volatile char *p = malloc(n); for (size_t i = 0; i < n; i += 4096) p[i] = 1; }  /* memory_limit */
	if (a == -3) return 3;                        /* runtime_error */
	if (a == -4) { printf("%ld\n", a + b + 1); return 0; }  /* wrong_answer */
	printf("%ld\n", a + b);
	return 0;
}
`

// TestJudge: compile once, one fresh jail per test, a verdict per test
// from the kernel's view of each run.
func TestJudge(t *testing.T) {
	dir := hostDir(t)
	code := filepath.Join(dir, "sum.c")
	require.NoError(t, os.WriteFile(code, []byte(solution), 0o644))
	var extra []string
	if unprivileged {
		extra = []string{"--allow-unenforced"} // the compile's memory and pids limits need a cgroup
	}

	// A directory of N.in and N.out, in the order of N.
	tests := filepath.Join(dir, "tests")
	require.NoError(t, os.Mkdir(tests, 0o755))
	for name, io := range map[string][2]string{"1": {"1 2\n", "3\n"}, "2": {"40 2", "42\n"}, "10": {"5 5\n", "10\n"}} {
		require.NoError(t, os.WriteFile(filepath.Join(tests, name+".in"), []byte(io[0]), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(tests, name+".out"), []byte(io[1]), 0o644))
	}
	r := runJail(t, append([]string{"run", "--json", "--language", "c", "--code", code, "--tests", tests}, extra...)...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep runner.JudgeReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, runner.JudgeSchema, rep.Schema)
	assert.Equal(t, runner.Accepted, rep.Verdict)
	assert.Equal(t, 3, rep.Passed)
	require.Len(t, rep.Tests, 3)
	assert.Equal(t, []string{"1", "2", "10"}, []string{rep.Tests[0].Name, rep.Tests[1].Name, rep.Tests[2].Name})
	require.NotNil(t, rep.Compile)
	for _, tr := range rep.Tests {
		assert.Equal(t, "strict", tr.Result.Isolation.Seccomp)
	}

	// A YAML list, every verdict.
	list := `- {name: ok, stdin: "2 3", expected_stdout: "5\n"}
- {name: wa, stdin: "-4 3", expected_stdout: "-1\n"}
- {name: tle, stdin: "-1 0", expected_stdout: ""}
- {name: re, stdin: "-3 0", expected_stdout: ""}
- {name: spaces, stdin: "4 4", expected_stdout: "  8  \n\n"}
`
	if !unprivileged { // a memory limit needs a cgroup
		list += `- {name: mle, stdin: "-2 0", expected_stdout: ""}` + "\n"
	}
	yml := filepath.Join(dir, "tests.yaml")
	require.NoError(t, os.WriteFile(yml, []byte(list), 0o644))
	args := append([]string{"run", "--json", "--language", "c", "--code", code, "--tests", yml, "--timeout", "1s", "--compare", "whitespace"}, extra...)
	if !unprivileged {
		args = append(args, "--memory", "64M")
	}
	r = runJail(t, args...)
	assert.Equal(t, 1, r.code, r.stderr)
	rep = runner.JudgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	got := map[string]string{}
	for _, tr := range rep.Tests {
		got[tr.Name] = tr.Verdict
	}
	want := map[string]string{"ok": runner.Accepted, "wa": runner.WrongAnswer, "tle": runner.TimeLimit, "re": runner.RuntimeError, "spaces": runner.Accepted}
	if !unprivileged {
		want["mle"] = runner.MemoryLimit
	}
	assert.Equal(t, want, got)
	assert.Equal(t, runner.WrongAnswer, rep.Verdict, "the first test's verdict that is not accepted")
	var raw any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	assert.NoError(t, schematest.Validate(schematest.Compile(t, schemaDir(), "judge"), raw), "the report is as schema/judge.schema.json says")
	assert.Equal(t, 2, rep.Passed)
	assert.Equal(t, len(want), rep.Total)

	// Exact comparison: the spaces test fails.
	r = runJail(t, append([]string{"run", "--language", "c", "--code", code, "--tests", yml, "--timeout", "1s"}, extra...)...)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "spaces  wrong_answer")
	assert.Contains(t, r.stdout, "wrong_answer: 1 of")

	// A compile error: every test's verdict is the compile's, and no test ran.
	bad := filepath.Join(dir, "bad.c")
	require.NoError(t, os.WriteFile(bad, []byte("int main(void) { return nope; }\n"), 0o644))
	r = runJail(t, append([]string{"run", "--json", "--language", "c", "--code", bad, "--tests", tests}, extra...)...)
	assert.Equal(t, 1, r.code)
	rep = runner.JudgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, runner.CompileError, rep.Verdict)
	assert.Empty(t, rep.Tests)
	require.NotNil(t, rep.Compile)
	assert.Contains(t, rep.Compile.Stderr, "nope")

	// Bad input: one line, exit 125.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tests", filepath.Join(dir, "none")}, "--tests"},
		{[]string{"--tests", tests, "--compare", "fuzzy"}, "compare"},
		{[]string{"--tests", tests, "--stdin", yml}, "--stdin: not with --tests"},
	} {
		r := runJail(t, append([]string{"run", "--language", "c", "--code", code}, tc.args...)...)
		assert.Equal(t, jail.ExitSetupError, r.code, "%v", tc.args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.Contains(t, r.stderr, tc.want)
	}
	assert.Empty(t, codeDirs(t))
}
