package runner

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/profiles"
)

// JudgeSchema names the judge report's format.
const JudgeSchema = "jail.judge/v1"

// Verdicts of a test, as online judges name them.
const (
	Accepted     = "accepted"
	WrongAnswer  = "wrong_answer"
	TimeLimit    = "time_limit"
	MemoryLimit  = "memory_limit"
	RuntimeError = "runtime_error"
	CompileError = "compile_error"
)

// Comparisons of a test's output with the expected one.
const (
	// CompareExact wants the same bytes.
	CompareExact = "exact"
	// CompareWhitespace wants the same words: runs of white space (as
	// Unicode has it: spaces, tabs, newlines, no-break spaces...), and
	// those at the ends, are all alike.
	CompareWhitespace = "whitespace"
)

// Test is one input and the output it must give.
type Test struct {
	// Name names the test in the report: its index, or N of a directory's
	// N.in and N.out.
	Name           string `json:"name,omitempty"`
	Stdin          string `json:"stdin"`
	ExpectedStdout string `json:"expected_stdout"`
}

// JudgeReport is what judging a piece of code found: a verdict per test.
type JudgeReport struct {
	// Schema is "jail.judge/v1".
	Schema string `json:"schema"`
	// Language is the runner's language.
	Language string `json:"language"`
	// Verdict is accepted when every test is, else the first test's verdict
	// that is not (compile_error when the code did not compile).
	Verdict string `json:"verdict"`
	// Passed and Total count the tests.
	Passed int `json:"passed"`
	Total  int `json:"total"`
	// Compare is how outputs were compared: exact or whitespace.
	Compare string `json:"compare"`
	// Compile is the compile's Result, for a compiled language; absent
	// otherwise.
	Compile *jail.Result `json:"compile,omitempty"`
	// Tests are the tests' verdicts and results, in order; empty when the
	// code did not compile.
	Tests []TestReport `json:"tests"`
}

// TestReport is one test's verdict and the run's Result.
type TestReport struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"`
	// Why says what the verdict rests on, in a few words.
	Why    string       `json:"why,omitempty"`
	Result *jail.Result `json:"result"`
}

// MaxTests bounds a judge's tests.
const MaxTests = 1000

// maxTestsBytes bounds a tests file, and each file of a tests directory.
const maxTestsBytes = 64 << 20

// LoadTests reads tests from a file (a YAML or JSON list of {name, stdin,
// expected_stdout}) or a directory (N.in and N.out files, in the order of
// N: numbers by value, then names).
func LoadTests(path string) ([]Test, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var tests []Test
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		var ins []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".in") && !e.IsDir() {
				ins = append(ins, filepath.Join(path, e.Name()))
			}
		}
		// By N's value where both are numbers, numbers first, then by name.
		slices.SortFunc(ins, func(a, b string) int {
			na, ea := strconv.Atoi(strings.TrimSuffix(filepath.Base(a), ".in"))
			nb, eb := strconv.Atoi(strings.TrimSuffix(filepath.Base(b), ".in"))
			switch {
			case ea == nil && eb == nil && na != nb:
				return cmp.Compare(na, nb)
			case (ea == nil) != (eb == nil):
				if ea == nil {
					return -1
				}
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, in := range ins {
			name := strings.TrimSuffix(filepath.Base(in), ".in")
			stdin, err := hostfs.ReadFile(in, maxTestsBytes)
			if err != nil {
				return nil, err
			}
			out, err := hostfs.ReadFile(strings.TrimSuffix(in, ".in")+".out", maxTestsBytes)
			if err != nil {
				return nil, fmt.Errorf("test %s: %w", name, err)
			}
			tests = append(tests, Test{Name: name, Stdin: string(stdin), ExpectedStdout: string(out)})
		}
	} else {
		data, err := hostfs.ReadFile(path, maxTestsBytes)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(data, &tests); err != nil {
			return nil, fmt.Errorf("want a list of {name, stdin, expected_stdout}: %s", strings.Join(strings.Fields(err.Error()), " "))
		}
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("no tests (a list of {stdin, expected_stdout}, or a directory of N.in and N.out files)")
	}
	if len(tests) > MaxTests {
		return nil, fmt.Errorf("%d tests: at most %d", len(tests), MaxTests)
	}
	for i := range tests {
		if tests[i].Name == "" {
			tests[i].Name = strconv.Itoa(i + 1)
		}
	}
	return tests, nil
}

// JudgeOptions are how Judge compares, and the program's arguments.
type JudgeOptions struct {
	// Compare is CompareExact (the default) or CompareWhitespace.
	Compare string
	// Args go to the program, after the runner's run command.
	Args []string
	// Setup is how the jails are made (see [Setup]).
	Setup Setup
}

// Judge compiles code once (when the language is compiled) and runs it
// once per test, each in a fresh jail of spec (the run's limits) with the
// test's stdin, and compares its stdout with the expected one. The report
// always comes back unless the jails could not be set up.
func Judge(ctx context.Context, p *profiles.Profile, spec jail.Spec, code []byte, tests []Test, o JudgeOptions) (*JudgeReport, error) {
	compare := o.Compare
	if compare == "" {
		compare = CompareExact
	}
	if compare != CompareExact && compare != CompareWhitespace {
		return nil, &jail.SpecError{Field: "compare", Value: compare, Err: fmt.Errorf("want %s or %s", CompareExact, CompareWhitespace)}
	}
	j, err := Prepare(ctx, p, spec, code, o.Setup)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	rep := &JudgeReport{Schema: JudgeSchema, Language: p.Runner.Language, Compare: compare, Total: len(tests), Compile: j.Compile, Tests: []TestReport{}}
	if j.Failed() {
		rep.Verdict = CompileError
		return rep, nil
	}
	for _, t := range tests {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := j.Command(ctx, o.Args...)
		c.Stdin, c.Capture = strings.NewReader(t.Stdin), true
		if err := c.Run(); err != nil && (c.Result == nil || c.Result.Status == jail.StatusSetupError) {
			return nil, fmt.Errorf("test %s: %w", t.Name, err)
		}
		tr := TestReport{Name: t.Name, Result: c.Result}
		tr.Verdict, tr.Why = verdict(c.Result, t.ExpectedStdout, compare)
		c.Result.Language = p.Runner.Language
		if tr.Verdict == Accepted {
			rep.Passed++
		} else if rep.Verdict == "" {
			rep.Verdict = tr.Verdict
		}
		rep.Tests = append(rep.Tests, tr)
	}
	if rep.Verdict == "" {
		rep.Verdict = Accepted
	}
	return rep, nil
}

// verdict judges one run against the expected output.
func verdict(r *jail.Result, want, compare string) (string, string) {
	switch r.Status {
	case jail.StatusTimedOut:
		return TimeLimit, "the wall-clock limit passed"
	case jail.StatusCPUTimeExceeded:
		return TimeLimit, "the CPU time limit ran out"
	case jail.StatusOOMKilled:
		return MemoryLimit, "the memory limit was reached"
	case jail.StatusExited:
		if r.ExitCode != 0 {
			return RuntimeError, fmt.Sprintf("exit code %d", r.ExitCode)
		}
	default:
		if r.Signal != "" {
			return RuntimeError, fmt.Sprintf("%s, signal %s", r.Status, r.Signal)
		}
		return RuntimeError, string(r.Status)
	}
	if slices.Contains(r.LimitsHit, "memory") {
		return MemoryLimit, "the memory limit was reached"
	}
	if r.StdoutTruncated {
		return WrongAnswer, "the output is over the output limit"
	}
	got := r.Stdout
	if r.StdoutEncoding != "utf-8" {
		return WrongAnswer, "the output is not UTF-8 text"
	}
	if compare == CompareWhitespace {
		if slices.Equal(strings.Fields(got), strings.Fields(want)) {
			return Accepted, ""
		}
		return WrongAnswer, "the output differs (whitespace aside)"
	}
	if got == want {
		return Accepted, ""
	}
	return WrongAnswer, "the output differs"
}
