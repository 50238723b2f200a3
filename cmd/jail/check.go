package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/backend/k8s"
	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/hostcheck"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/runner"
)

func newCheckCommand(stdout io.Writer) *cobra.Command {
	var (
		asJSON, clean         bool
		cgroupParent          string
		kubeconfig, namespace string
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Say what this host and this caller can do",
		Long: "check probes the kernel features jail uses, for the calling user, without changing anything,\n" +
			"and prints a verdict per feature (ok, warn, missing) with a fix for what is not ok.\n" +
			"It exits 1 when a feature jail needs is missing.\n" +
			"--clean removes instead what jail runs whose jail process died without cleaning up (kill -9)\n" +
			"left: their cgroups, the leases, veth host ends and nftables chains of egress jails, the\n" +
			"cgroups of sessions whose PID 1 and state are both gone (empty, over a minute old), and the\n" +
			"pid FIFOs of an unprivileged caller's pasta (in $TMPDIR, jail-pasta-PID-*), and the containers\n" +
			"of --backend docker runs (labelled org.jailrt.jail) on the engine at $DOCKER_HOST, and the\n" +
			"Pods and NetworkPolicies of --backend k8s runs of this machine (with a kubeconfig), and the\n" +
			"code directories of language runs (jail-code-* in $TMPDIR) whose process died;\n" +
			"it prints each one.\n" +
			"The last lines say whether the container backends answer (--backend docker: the engine at\n" +
			"$DOCKER_HOST; --backend k8s: the API server of --kubeconfig): they are never missing.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if clean {
				removed, err := cgroup.Prune(cgroup.Options{Parent: cgroupParent})
				for _, d := range removed {
					fmt.Fprintln(stdout, "removed", d)
				}
				removed, serr := jail.PruneSessionCgroups(cgroupParent)
				for _, d := range removed {
					fmt.Fprintln(stdout, "removed", d)
				}
				if serr != nil && !errors.Is(serr, jail.ErrNotSupported) {
					err = errors.Join(err, serr)
				}
				for _, d := range netns.PruneUser() {
					fmt.Fprintln(stdout, "removed", d)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				ids, derr := docker.Prune(ctx, docker.Host())
				cancel()
				for _, id := range ids {
					fmt.Fprintln(stdout, "removed docker container", id)
				}
				if derr != nil {
					err = errors.Join(err, fmt.Errorf("docker containers: %w", derr))
				}
				names, kerr := pruneKube(kubeconfig, namespace)
				for _, n := range names {
					fmt.Fprintln(stdout, "removed kubernetes", n)
				}
				if kerr != nil {
					err = errors.Join(err, fmt.Errorf("kubernetes: %w", kerr))
				}
				codes, cerr := runner.Prune()
				for _, d := range codes {
					fmt.Fprintln(stdout, "removed", d)
				}
				if cerr != nil {
					err = errors.Join(err, fmt.Errorf("language runners' code: %w", cerr))
				}
				if os.Geteuid() != 0 {
					return err // leases are root's
				}
				// Whatever failed before, the egress networks are
				// cleaned too (an engine that does not answer must not
				// keep a leaked lease).
				removed, nerr := netns.Prune()
				for _, d := range removed {
					fmt.Fprintln(stdout, "removed", d)
				}
				return errors.Join(err, nerr)
			}
			features := append(hostcheck.Run(), backendFeatures(kubeconfig)...)
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(features); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				for _, f := range features {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Verdict, f.Name, f.Detail)
					if f.Fix != "" {
						fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
					}
				}
				tw.Flush()
			}
			for _, f := range features {
				if f.Verdict == hostcheck.Missing {
					return &exitError{code: 1}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verdicts as a JSON array")
	cmd.Flags().BoolVar(&clean, "clean", false, "remove the cgroups and egress networks that killed jail runs left behind, instead of checking")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the kubeconfig whose API server the k8s backend line asks; with --clean: also delete the Pods and NetworkPolicies of killed --backend k8s runs of this machine in the cluster of `FILE` (default: $KUBECONFIG or ~/.kube/config, when it exists)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "with --clean: the `NAMESPACE` to look in (default: the kubeconfig context's, else default)")
	cmd.Flags().StringVar(&cgroupParent, "cgroup-parent", "", "with --clean: look under `CGROUP` (as jail run --cgroup-parent) instead of jail's own cgroup")
	return cmd
}

// pruneKube deletes what killed k8s runs of this machine left in the
// cluster. Without an explicit kubeconfig, a missing or unusable default
// one means there is nothing to do.
func pruneKube(kubeconfig, namespace string) ([]string, error) {
	c, err := k8s.NewClient(kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, nil
		}
		return nil, err
	}
	if namespace == "" {
		namespace = c.Namespace
	}
	if namespace == "" {
		namespace = "default"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	removed, err := c.Prune(ctx, namespace)
	if kubeconfig == "" {
		err = nil // a default kubeconfig's cluster that does not answer is not the host's to clean
	}
	return removed, err
}

// backendFeatures say whether the container backends answer here: an
// engine at $DOCKER_HOST, an API server of the kubeconfig. Neither is
// needed by native runs, so neither is ever missing.
func backendFeatures(kubeconfig string) []hostcheck.Feature {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d := hostcheck.Feature{Name: "backend docker", Verdict: hostcheck.OK}
	host := docker.Host()
	if e, err := docker.Connect(ctx, host); err != nil {
		d.Verdict, d.Detail = hostcheck.Warn, fmt.Sprintf("no engine at %s: %v", host, err)
		d.Fix = "for --backend docker only: start dockerd, or set DOCKER_HOST=unix:///path/to/docker.sock"
	} else {
		d.Detail = fmt.Sprintf("an engine answers at %s (API %s)", host, e.Version())
	}
	k := hostcheck.Feature{Name: "backend k8s", Verdict: hostcheck.OK}
	c, err := k8s.NewClient(kubeconfig)
	if err == nil {
		err = c.Ping(ctx)
	}
	if err != nil {
		k.Verdict, k.Detail = hostcheck.Warn, fmt.Sprintf("no API server: %v", err)
		k.Fix = "for --backend k8s only: give --kubeconfig FILE, or set KUBECONFIG"
	} else {
		k.Detail = "the API server at " + c.Server + " answers"
	}
	return []hostcheck.Feature{d, k}
}
