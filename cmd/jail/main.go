// Command jail runs a command in a jail and reports what happened.
//
//	jail run --profile strict -- sh -c 'id; echo hi'
//	jail run --json --timeout 2s -- python3 solution.py < input
//	jail check
//
// See README.md and `jail run --help`.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
)

// exitError carries an exit code out of a subcommand; its message, when
// not empty, is printed as one line on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usageError is bad input: exit 125 with one line naming the field.
func usageError(format string, args ...any) error {
	return &exitError{code: jail.ExitSetupError, msg: fmt.Sprintf(format, args...)}
}

// newRoot makes jail's command tree for args. For `jail run`, the hot
// path, it makes only the run command: the others (their flags cost
// about 0.07 ms to register) and cobra's completion command cannot be
// reached from it, and what `jail run` prints, --help included, is the
// same.
func newRoot(stdout, stderr io.Writer, args []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "jail",
		Short:         "Run a command in a Linux jail and report what happened",
		Long:          "jail runs a command in fresh user, pid, mount, net, uts, ipc, cgroup and time namespaces\nover a read-only root, without capabilities, and reports its exit status, time and output.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	if len(args) > 0 && args[0] == "run" {
		root.CompletionOptions.DisableDefaultCmd = true
		root.AddCommand(newRunCommand(stdout, stderr))
		return root
	}
	root.AddCommand(newRunCommand(stdout, stderr), newCheckCommand(stdout), newVersionCommand(stdout), newSeccompCommand(stdout, stderr), newSelftestCommand(stdout, stderr), newSelftestProbeCommand(stdout), newSessionCommand(stdout, stderr), newSnapshotCommand(stdout), newServeCommand(stdout, stderr), newExportCommand(stdout, stderr), newProfileCommand(stdout, stderr), newLanguagesCommand(stdout))
	return root
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "run" || os.Args[1] == "session") {
		// The host probes and the stage's memfd, on another thread while
		// this one parses the flags and builds the Spec: about 0.3 ms
		// less before the clone (bench/README.md).
		go jail.Preload()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr, args)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, marker(), ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, marker(), err)
	return jail.ExitSetupError
}

// marker starts every line jail itself writes on stderr: "jail[PID]:",
// with jail's own process id. A workload shares jail's stderr and can print
// "jail: ..." and exit 125 to look like a jail failure; it cannot know
// jail's pid, as it runs in a PID namespace of its own. The report
// (--json, --report) is the record that cannot be imitated.
func marker() string { return fmt.Sprintf("jail[%d]:", os.Getpid()) }
