package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/backend/k8s"
)

// chooseBackend resolves the Spec's backend (backend.Choose); finding
// none for auto is jail's failure (125), in one line.
func chooseBackend(ctx context.Context, s *jail.Spec, kubeconfig string) (name, reason string, err error) {
	name, reason, err = backend.Choose(ctx, s, backend.Options{Kubeconfig: kubeconfig})
	var se *jail.SpecError
	switch {
	case errors.As(err, &se):
		return "", "", usageError("--backend %q: want native, docker, k8s or auto", s.Backend)
	case err != nil:
		return "", "", &exitError{code: jail.ExitSetupError, msg: err.Error()}
	}
	return name, reason, nil
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

// runK8s runs c with run's output flags. A Pod takes no stdin here: one
// given is refused, the default (jail's own) is none.
func runK8s(cmd *cobra.Command, f *runFlags, spec jail.Spec, args []string, reason string, stdout, stderr io.Writer) error {
	if f.tty {
		return usageError("--tty: not with --backend k8s")
	}
	if cmd.Flags().Changed("stdin") && f.stdin != "none" {
		return usageError("--stdin %q: --backend k8s runs a Pod without stdin (give none)", f.stdin)
	}
	g := *f
	g.stdin = "none"
	rio, err := openRunIO(cmd, &g)
	if err != nil {
		return err
	}
	defer rio.close()
	// A signal to jail ends the run (the Pod is deleted, with the kill
	// grace): the API server has no way to signal a container.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	c := k8s.Command(ctx, spec, f.kube.options(), args[0], args[1:]...)
	c.Kubeconfig, c.BackendReason = f.kube.kubeconfig, reason
	c.Capture = f.asJSON
	if !f.asJSON {
		c.Stdout = stdout
	}
	runErr := c.Run()
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
		Use:   "export docker|k8s [run flags] -- COMMAND [ARGS...]",
		Short: "Print what a container backend would submit for a run, without running it",
		Long: `export maps a run (a profile and run's flags, as jail run takes them) on to a backend's API and
prints what it would submit, running nothing: for docker, the body of the Engine API's
POST /containers/create, as JSON; for k8s, the Pod and the NetworkPolicy that selects it, as YAML
documents (jail names them, labels them and sets the policy's selector at the run). What the
backend cannot enforce is refused (exit 125) or, when it is a default the spec did not ask for (or
with --allow-unenforced), listed on stderr, one line each, as the report's isolation.not_enforced
would list it; what the engine or cluster says at the run (a user namespace it lacks, a warning)
is known only then. Host names of a k8s egress allow-list are resolved, as the run would.`,
		Example: `  jail export docker --profile strict --image jail-test --memory 256M -- python3 -c 'print(1)'
  jail export k8s --profile strict --image python:3.12-slim --k8s-seccomp-profile jail/strict.json -- python3 -c 'print(1)'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError("want a backend (docker or k8s) and a command after --")
			}
			if args[0] != jail.BackendDocker && args[0] != jail.BackendK8s {
				return usageError("backend %q: export knows docker and k8s", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := buildSpec(cmd, f)
			if err != nil {
				return err
			}
			var notEnforced []string
			var out []byte
			switch args[0] {
			case jail.BackendDocker:
				p, err := docker.Map(&spec, args[1:])
				if err != nil {
					return &exitError{code: jail.ExitSetupError, msg: err.Error()}
				}
				notEnforced = p.NotEnforced
				if out, err = json.MarshalIndent(p.Body, "", "  "); err != nil {
					return err
				}
				out = append(out, '\n')
			default:
				p, err := k8s.Map(context.Background(), &spec, args[1:], f.kube.options())
				if err != nil {
					return &exitError{code: jail.ExitSetupError, msg: err.Error()}
				}
				notEnforced = p.NotEnforced
				if out, err = yaml.Marshal(p.Pod); err != nil {
					return err
				}
				if p.Policy.Kind != "" {
					pol, err := yaml.Marshal(p.Policy)
					if err != nil {
						return err
					}
					out = append(append(out, "---\n"...), pol...)
				}
			}
			for _, n := range notEnforced {
				fmt.Fprintf(stderr, "%s not enforced: %s\n", marker(), n)
			}
			_, err = stdout.Write(out)
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().SetInterspersed(true) // "export docker --flags -- CMD"
	return cmd
}
