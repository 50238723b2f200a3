package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail/seccomp"
)

func newSeccompCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "seccomp",
		Short: "List, show and export seccomp policies",
		Long: `A seccomp policy is a default action and per-syscall rules (allow, errno, kill, trap, log) with
optional argument conditions. jail compiles it with libseccomp and the jail loads it as the last
step before the command: see README.md ("Seccomp").`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the built-in policies",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			w := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
			for _, name := range seccomp.Names() {
				desc := "no filter: for trusted workloads only"
				if p, err := seccomp.Load(name); err != nil {
					return err
				} else if p != nil {
					desc = p.Description
				}
				fmt.Fprintf(w, "%s\t%s\n", name, desc)
			}
			return w.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show NAME|FILE",
		Short: "Print a policy as jail reads it (YAML)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if b, err := seccomp.Builtin(args[0]); err == nil {
				_, err = stdout.Write(b) // the file itself, comments included
				return err
			}
			p, err := loadPolicy(args[0])
			if err != nil {
				return err
			}
			b, err := yaml.Marshal(p)
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "export NAME|FILE",
		Short: "Print a policy as OCI runtime-spec seccomp JSON (for Docker, Kubernetes, runc)",
		Long: `export prints the policy as the "seccomp" object of the OCI runtime spec (LinuxSeccomp), which
docker run --security-opt seccomp=FILE and a Kubernetes Localhost seccomp profile accept. Kills
become SCMP_ACT_KILL_PROCESS: those runtimes report them as a death by SIGSYS, unnamed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := loadPolicy(args[0])
			if err != nil {
				return err
			}
			// Refuse what jail itself would refuse: compile a policy file.
			// A built-in one is compiled at build time (precompiled, and
			// tested): this libseccomp may not know its newest calls
			// (2.5.4 has no fchmodat2), which the program has by number.
			if !seccomp.IsBuiltin(args[0]) {
				if _, err := seccomp.Compile(p, seccomp.Options{}); err != nil {
					return usageError("%s: %v", args[0], err)
				}
			}
			oci, err := p.OCI()
			if err != nil {
				return err
			}
			if idx := p.OverridingRules(); len(idx) > 0 {
				fmt.Fprintf(stderr, "%s note: rules %v override an unconditional rule of the same call; an OCI runtime gives that one precedence, so it will not have them (jail's own filter does)\n", marker(), idx)
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(oci)
		},
	})
	return cmd
}

func loadPolicy(nameOrFile string) (*seccomp.Policy, error) {
	p, err := seccomp.Load(nameOrFile)
	if err != nil {
		return nil, usageError("%v", err)
	}
	if p == nil {
		return nil, usageError("%q is no filter at all; there is nothing to show", nameOrFile)
	}
	return p, nil
}
