package runner

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/schematest"
)

func jsonNames(typ reflect.Type) []string {
	var out []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestJudgeSchemaMatchesStructs ties the schema to JudgeReport and
// TestReport, and checks a report of every verdict against it.
func TestJudgeSchemaMatchesStructs(t *testing.T) {
	b, err := os.ReadFile("../schema/judge.schema.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	assert.Equal(t, jsonNames(reflect.TypeFor[JudgeReport]()), keys(doc["properties"].(map[string]any)))
	test := doc["$defs"].(map[string]any)["test"].(map[string]any)
	assert.Equal(t, jsonNames(reflect.TypeFor[TestReport]()), keys(test["properties"].(map[string]any)))
	var verdicts []string
	for _, v := range doc["$defs"].(map[string]any)["verdict"].(map[string]any)["enum"].([]any) {
		verdicts = append(verdicts, v.(string))
	}
	assert.Equal(t, []string{Accepted, WrongAnswer, TimeLimit, MemoryLimit, RuntimeError, CompileError}, verdicts)

	s := schematest.Compile(t, "../schema", "judge")
	res := func(status jail.Status, code int, stdout string) *jail.Result {
		return &jail.Result{Schema: jail.Schema, Status: status, ExitCode: code, Stdout: stdout, Output: "captured", StdoutEncoding: "utf-8", StderrEncoding: "utf-8",
			LimitsHit: []string{}, SeccompDenials: []jail.SeccompDenial{},
			Isolation: jail.Isolation{Backend: "native", Namespaces: []string{}, UIDMap: []jail.IDMap{}, GIDMap: []jail.IDMap{}, NotEnforced: []string{},
				Root: "tmpfs", Cgroup: "none", Seccomp: "strict", Landlock: jail.LandlockInfo{Enforced: []string{}, Missing: []string{}},
				Network: jail.NetworkInfo{Mode: "none", Allow: []jail.AllowInfo{}}}}
	}
	rep := &JudgeReport{Schema: JudgeSchema, Language: "c", Verdict: WrongAnswer, Passed: 1, Total: 2, Compare: CompareExact,
		Compile: res(jail.StatusExited, 0, ""),
		Tests: []TestReport{{Name: "1", Verdict: Accepted, Result: res(jail.StatusExited, 0, "3\n")},
			{Name: "2", Verdict: WrongAnswer, Why: "the output differs", Result: res(jail.StatusExited, 0, "4\n")}}}
	assert.NoError(t, schematest.Validate(s, rep))
}

// TestVerdict: each end of a run, judged.
func TestVerdict(t *testing.T) {
	r := func(mod func(*jail.Result)) *jail.Result {
		res := &jail.Result{Status: jail.StatusExited, StdoutEncoding: "utf-8", Stdout: "8\n"}
		if mod != nil {
			mod(res)
		}
		return res
	}
	for _, tc := range []struct {
		name    string
		res     *jail.Result
		want    string
		compare string
		verdict string
	}{
		{"accepted", r(nil), "8\n", CompareExact, Accepted},
		{"wrong", r(nil), "9\n", CompareExact, WrongAnswer},
		{"spaces exact", r(nil), "8", CompareExact, WrongAnswer},
		{"spaces", r(nil), " 8 \n\n", CompareWhitespace, Accepted},
		{"words differ", r(nil), "8 8", CompareWhitespace, WrongAnswer},
		{"timeout", r(func(x *jail.Result) { x.Status = jail.StatusTimedOut }), "8\n", CompareExact, TimeLimit},
		{"cpu time", r(func(x *jail.Result) { x.Status = jail.StatusCPUTimeExceeded }), "8\n", CompareExact, TimeLimit},
		{"oom", r(func(x *jail.Result) { x.Status = jail.StatusOOMKilled }), "8\n", CompareExact, MemoryLimit},
		{"exit code", r(func(x *jail.Result) { x.ExitCode = 1 }), "8\n", CompareExact, RuntimeError},
		{"signal", r(func(x *jail.Result) { x.Status, x.Signal = jail.StatusSignaled, "SEGV" }), "8\n", CompareExact, RuntimeError},
		{"seccomp", r(func(x *jail.Result) { x.Status, x.Signal = jail.StatusSeccompKilled, "SYS" }), "8\n", CompareExact, RuntimeError},
		{"truncated", r(func(x *jail.Result) { x.StdoutTruncated = true }), "8\n", CompareExact, WrongAnswer},
		{"binary", r(func(x *jail.Result) { x.StdoutEncoding = "base64" }), "8\n", CompareExact, WrongAnswer},
	} {
		got, _ := verdict(tc.res, tc.want, tc.compare)
		assert.Equal(t, tc.verdict, got, tc.name)
	}
}

// TestCapped: the artifact's writer takes up to its bound, then calls
// over once (which kills the compile) and refuses the rest.
func TestCapped(t *testing.T) {
	var b strings.Builder
	overs := 0
	w := &capped{w: &b, left: 10, over: func() { overs++ }}
	n, err := w.Write([]byte("0123456"))
	assert.Equal(t, 7, n)
	assert.NoError(t, err)
	_, err = w.Write([]byte("7890"))
	assert.Error(t, err)
	_, err = w.Write([]byte("x"))
	assert.Error(t, err, "refused from then on")
	assert.True(t, w.exceeded)
	assert.Equal(t, 1, overs)
	assert.Equal(t, "0123456", b.String())
}
