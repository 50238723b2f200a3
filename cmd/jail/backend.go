package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/internal/hostcheck"
)

// chooseBackend resolves the Spec's backend: native and docker are taken
// as they are; auto is native when `jail check` finds nothing missing that
// jail needs here, else docker when an engine answers at $DOCKER_HOST. The
// reason is for the report (isolation.backend_reason).
func chooseBackend(ctx context.Context, s *jail.Spec) (backend, reason string, err error) {
	switch s.Backend {
	case "", jail.BackendNative:
		return jail.BackendNative, "", nil
	case jail.BackendDocker:
		return jail.BackendDocker, "", nil
	case jail.BackendAuto:
	default:
		return "", "", usageError("--backend %q: want native, docker or auto", s.Backend)
	}
	var missing []string
	for _, f := range hostcheck.Run() {
		if f.Verdict == hostcheck.Missing {
			missing = append(missing, f.Name+": "+f.Detail)
		}
	}
	if len(missing) == 0 && s.Image == "" {
		s.Backend = jail.BackendNative
		return jail.BackendNative, "auto: this host has every kernel feature jail needs", nil
	}
	why := "auto: native: " + strings.Join(missing, "; ")
	if len(missing) == 0 {
		why = "auto: the spec names an image, which only a container backend runs"
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, derr := docker.Connect(pctx, docker.Host()); derr != nil {
		return "", "", &exitError{code: jail.ExitSetupError, msg: fmt.Sprintf("--backend auto: no backend can run here: %s; docker: %v", strings.TrimPrefix(why, "auto: "), derr)}
	}
	s.Backend = jail.BackendDocker
	return jail.BackendDocker, why + "; docker: an engine answers at " + docker.Host(), nil
}

// runDocker runs c with run's input and output flags, as runCmd does for
// a native jail.
func runDocker(cmd *cobra.Command, f *runFlags, c *docker.Cmd, stdout, stderr io.Writer) error {
	if f.tty {
		return usageError("--tty: not with --backend docker")
	}
	rio, err := openRunIO(cmd, f)
	if err != nil {
		return err
	}
	defer rio.close()
	c.Capture = f.asJSON
	c.Stdin = rio.stdin
	if !f.asJSON {
		c.Stdout, c.Stderr = stdout, stderr
	}
	// Signals to jail go to the container's command, as for a native jail.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	runErr := c.Start()
	if runErr == nil {
		go func() {
			for s := range sigs {
				_ = c.Signal(s)
			}
		}()
		runErr = c.Wait()
	}
	if runErr != nil && c.Result != nil && c.Result.Error != nil && isInputError(runErr) {
		c.Result.Error.Step = "spec"
	}
	return finishRun(f, c.Result, runErr, rio.report, stdout, stderr)
}

func isInputError(err error) bool {
	return errors.Is(err, jail.ErrInvalidSpec) || errors.Is(err, jail.ErrNotSupported)
}

func newExportCommand(stdout, stderr io.Writer) *cobra.Command {
	f := newRunFlags()
	cmd := &cobra.Command{
		Use:   "export docker [run flags] -- COMMAND [ARGS...]",
		Short: "Print what a container backend would submit for a run, without running it",
		Long: `export maps a run (a profile and run's flags, as jail run takes them) on to a backend's API and
prints what it would submit, running nothing: for docker, the body of the Engine API's
POST /containers/create, as JSON. What the backend cannot enforce is refused (exit 125) or, when it
is a default the spec did not ask for (or with --allow-unenforced), listed on stderr, one line each,
as the report's isolation.not_enforced would list it; the engine's own facts (its user namespace
remapping, its warnings) are known only at the run.`,
		Example: `  jail export docker --profile strict --image jail-test --memory 256M -- python3 -c 'print(1)'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError("want a backend (docker) and a command after --")
			}
			if args[0] != jail.BackendDocker {
				return usageError("backend %q: export knows docker", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := buildSpec(cmd, f)
			if err != nil {
				return err
			}
			p, err := docker.Map(&spec, args[1:])
			if err != nil {
				return &exitError{code: jail.ExitSetupError, msg: err.Error()}
			}
			for _, n := range p.NotEnforced {
				fmt.Fprintf(stderr, "%s not enforced: %s\n", marker(), n)
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(p.Body)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().SetInterspersed(true) // "export docker --flags -- CMD"
	return cmd
}
