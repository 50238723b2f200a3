package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/internal/sigpipe"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/runner"
)

// runCode runs --code by the profile's runner: compiled first, in a jail
// of its own, when the language is compiled; args go to the program.
func runCode(cmd *cobra.Command, f *runFlags, p *profiles.Profile, spec jail.Spec, args []string, stdout, stderr io.Writer) error {
	if p.Runner == nil {
		return usageError("--code: profile %s has no runner (give --language, or a profile with runner:)", p.Name)
	}
	if f.code == "" {
		return usageError("--code: missing: the code's FILE, or - for stdin")
	}
	if spec.Backend != "" && spec.Backend != jail.BackendNative {
		return usageError("--language: runs on the native backend only")
	}
	code, err := readCode(cmd, f)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	warn(stderr, spec)
	if f.tests != "" {
		return judge(ctx, cmd, f, p, spec, code, args, stdout, stderr)
	}
	pctx, interrupted := interruptible(ctx)
	job, err := runner.Prepare(pctx, p, spec, code, runner.Setup{})
	if sig := interrupted(); sig != 0 {
		if job != nil {
			job.Close()
		}
		return &exitError{code: 128 + int(sig), msg: "interrupted while compiling"}
	}
	if err != nil {
		return &exitError{code: jail.ExitSetupError, msg: err.Error()}
	}
	defer job.Close()
	if job.Failed() {
		return compileFailed(f, job.FailedResult(), stdout, stderr)
	}
	f.annotate = job.Annotate
	return runCmd(cmd, f, job.Command(ctx, args...), stdout, stderr)
}

// interruptible is ctx, canceled by SIGINT, SIGTERM or SIGHUP until the
// function it returns is called, which says which signal came (0: none):
// a compile or a judge ends, and its directory is removed, instead of jail
// dying with them left behind. The signals stay caught after (sigpipe has
// no release): one that comes between the compile and the run waits on
// the channel runCmd forwards from, instead of killing jail in between.
func interruptible(ctx context.Context) (context.Context, func() syscall.Signal) {
	sigs, err := sigpipe.Catch(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err != nil {
		// Not caught: a signal ends jail as it would without this.
		return ctx, func() syscall.Signal { return 0 }
	}
	ctx, cancel := context.WithCancel(ctx)
	var got atomic.Int32
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case s := <-sigs:
			got.Store(int32(s.(syscall.Signal)))
			cancel()
		case <-done:
		}
	}()
	return ctx, func() syscall.Signal {
		close(done)
		<-exited // a signal it took is in got
		return syscall.Signal(got.Load())
	}
}

// readCode reads --code: a file, or - for stdin (the program's stdin is
// then none unless --stdin names a file).
func readCode(cmd *cobra.Command, f *runFlags) ([]byte, error) {
	if f.code == "" {
		return nil, usageError("--code: missing: the code's FILE, or - for stdin")
	}
	var code []byte
	var err error
	if f.code == "-" {
		if cmd.Flags().Changed("stdin") && f.stdin == "-" {
			return nil, usageError("--stdin -: the code is read from stdin (--code -): give the program's input as a FILE")
		}
		if !cmd.Flags().Changed("stdin") {
			f.stdin = "none"
		}
		code, err = io.ReadAll(io.LimitReader(os.Stdin, runner.MaxCodeBytes+1))
	} else {
		code, err = hostfs.ReadFile(f.code, runner.MaxCodeBytes+1)
	}
	if err != nil {
		return nil, usageError("--code %q: %v", f.code, err)
	}
	if len(code) > runner.MaxCodeBytes {
		return nil, usageError("--code %q: more than %d bytes", f.code, runner.MaxCodeBytes)
	}
	return code, nil
}

// compileFailed reports a run whose compile failed: the compiler's
// output on stderr (streaming), the result (--json, --report), exit 1.
func compileFailed(f *runFlags, res *jail.Result, stdout, stderr io.Writer) error {
	if !f.asJSON { // the compiler's own words, as a compiler on a terminal would print them
		io.WriteString(stderr, res.Compile.Stdout)
		io.WriteString(stderr, res.Compile.Stderr)
	}
	var report *hostfs.Output
	if f.report != "" {
		var err error
		if report, err = hostfs.CreateOutput(f.report); err != nil {
			return usageError("--report %q: %v", f.report, err)
		}
		defer report.Close()
	}
	return finishRun(f, res, nil, report, stdout, stderr)
}

// runnerProfile is the profile of --language L, lang-L.
func runnerProfile(language string) (*profiles.Profile, error) {
	name := "lang-" + language
	if _, ok := profiles.Source(name); !ok || strings.ContainsRune(language, '/') {
		return nil, usageError("--language %q: no such runner (see jail languages)", language)
	}
	p, err := profiles.Load(name)
	if err != nil {
		return nil, usageError("--language: %v", err)
	}
	return p, nil
}

// judge runs --code against --tests and prints the judge report: a table,
// or with --json the jail.judge/v1 document; --report writes the
// document. Exit 0 when every test is accepted, 1 otherwise.
func judge(ctx context.Context, cmd *cobra.Command, f *runFlags, p *profiles.Profile, spec jail.Spec, code []byte, args []string, stdout, stderr io.Writer) error {
	if cmd.Flags().Changed("stdin") {
		return usageError("--stdin: not with --tests (each test is the program's input)")
	}
	if f.tty {
		return usageError("--tty: not with --tests")
	}
	tests, err := runner.LoadTests(f.tests)
	if err != nil {
		return usageError("--tests %q: %v", f.tests, err)
	}
	var report *hostfs.Output
	if f.report != "" {
		if report, err = hostfs.CreateOutput(f.report); err != nil {
			return usageError("--report %q: %v", f.report, err)
		}
		defer report.Close()
	}
	jctx, interrupted := interruptible(ctx)
	rep, err := runner.Judge(jctx, p, spec, code, tests, runner.JudgeOptions{Compare: f.compare, Args: args})
	if sig := interrupted(); sig != 0 {
		return &exitError{code: 128 + int(sig), msg: "interrupted while judging"}
	}
	if err != nil {
		return &exitError{code: jail.ExitSetupError, msg: err.Error()}
	}
	if report != nil {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = report.Write(append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s --report %q: %v\n", marker(), f.report, err)
		}
	}
	if f.asJSON {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		if rep.Verdict == runner.CompileError {
			io.WriteString(stderr, rep.Compile.Stdout)
			io.WriteString(stderr, rep.Compile.Stderr)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		if len(rep.Tests) > 0 {
			fmt.Fprintln(tw, "TEST\tVERDICT\tWALL MS\tCPU MS\tWHY")
		}
		for _, t := range rep.Tests {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.Name, t.Verdict, t.Result.WallTimeMS, t.Result.CPUUserMS+t.Result.CPUSystemMS, t.Why)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%s: %d of %d tests passed\n", rep.Verdict, rep.Passed, rep.Total)
	}
	if rep.Verdict != runner.Accepted {
		return &exitError{code: 1}
	}
	return nil
}

// language is one runner, as `jail languages` reports it.
type language struct {
	Language    string `json:"language"`
	Profile     string `json:"profile"`
	Compiled    bool   `json:"compiled"`
	Available   bool   `json:"available"`
	Version     string `json:"version,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description"`
}

func newLanguagesCommand(stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "languages",
		Short: "List the language runners and whether this host can serve them",
		Long: `languages lists the built-in language runners (the lang-* profiles) and, for each, whether it runs
here: its version command is run in a jail of its profile, so the answer is what a jail sees
(the toolchain on the default root's /usr, /bin, /lib...), not what the caller's PATH has.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []language
			for _, name := range profiles.Names() {
				if !strings.HasPrefix(name, "lang-") {
					continue
				}
				p, err := profiles.Load(name)
				if err != nil {
					return &exitError{code: jail.ExitSetupError, msg: err.Error()}
				}
				list = append(list, probeLanguage(p))
			}
			if asJSON {
				return printJSON(stdout, list)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LANGUAGE\tAVAILABLE\tVERSION")
			for _, l := range list {
				avail, v := "yes", l.Version
				if !l.Available {
					avail, v = "no", l.Reason
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Language, avail, v)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

// probeLanguage runs p's runner's version command in a jail of p.
func probeLanguage(p *profiles.Profile) language {
	r := p.Runner
	l := language{Language: r.Language, Profile: p.Name, Compiled: len(r.Compile) > 0, Description: p.Description}
	c := jail.Command(context.Background(), p.Spec, r.Version[0], r.Version[1:]...)
	c.Capture = true
	err := c.Run()
	res := c.Result
	first := func(s string) string {
		for _, line := range strings.Split(s, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				return line
			}
		}
		return ""
	}
	switch {
	case err != nil && (res == nil || res.Error == nil):
		l.Reason = err.Error()
	case res.Status == jail.StatusSetupError:
		l.Reason = res.Error.Message
	case res.ExitCode != 0:
		l.Reason = first(res.Stderr + "\n" + res.Stdout)
		if l.Reason == "" {
			l.Reason = fmt.Sprintf("%s exited %d", r.Version[0], res.ExitCode)
		}
	default:
		l.Available, l.Version = true, first(res.Stdout+"\n"+res.Stderr)
	}
	return l
}
