package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
)

func newProfileCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "List, show and validate profiles",
		Long: `A profile is a Spec in YAML or JSON, with a description and extends: NAME|FILE (the
profile it starts from). Built in: strict, default, dev (trusted local work: not a security
boundary) and net-egress. The format and the merge rules: docs/profiles.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newProfileListCommand(stdout), newProfileShowCommand(stdout), newProfileValidateCommand(stdout, stderr))
	return cmd
}

func newProfileListCommand(stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the built-in profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			type entry struct {
				Name        string   `json:"name"`
				Description string   `json:"description"`
				Extends     []string `json:"extends"`
			}
			var list []entry
			for _, name := range profiles.Names() {
				p, err := profiles.Load(name)
				if err != nil {
					return &exitError{code: jail.ExitSetupError, msg: err.Error()}
				}
				list = append(list, entry{name, p.Description, append([]string{}, p.Extends...)})
			}
			if asJSON {
				return printJSON(stdout, list)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tEXTENDS\tDESCRIPTION")
			for _, e := range list {
				ext := "-"
				if len(e.Extends) > 0 {
					ext = e.Extends[0]
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, ext, e.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newProfileShowCommand(stdout io.Writer) *cobra.Command {
	var asJSON, source bool
	cmd := &cobra.Command{
		Use:   "show NAME|FILE",
		Short: "Print a profile fully merged: the Spec it gives a run",
		Long: `show prints the Spec of a profile merged over every profile it extends, as YAML (or JSON with
--json): what a run of it gets before flags. --source prints a built-in profile's file as written,
with its comments.`,
		Example: `  jail profile show strict
  jail profile show --source default
  jail profile show ./judge.yaml --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if source {
				data, ok := profiles.Source(args[0])
				if !ok {
					return usageError("--source: %q is not a built-in profile (%s)", args[0], strings.Join(profiles.Names(), ", "))
				}
				_, err := stdout.Write(data)
				return err
			}
			p, err := profiles.Load(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			if asJSON {
				return printJSON(stdout, p.Spec)
			}
			return printSpecYAML(stdout, p)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the merged Spec as JSON")
	cmd.Flags().BoolVar(&source, "source", false, "print a built-in profile's file as written")
	return cmd
}

func newProfileValidateCommand(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check profile files: every field, merged over what they extend",
		Long: `validate loads each FILE as a run would (its extends chain merged, bind sources opened and
checked on this host) and prints "FILE: ok", or one line naming the file, line and field of the
first problem. Exit status: 0 when every file is valid, 125 otherwise.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, file := range args {
				if _, err := profiles.Load(file); err != nil {
					fmt.Fprintln(stderr, marker(), err)
					bad++
					continue
				}
				fmt.Fprintf(stdout, "%s: ok\n", file)
			}
			if bad > 0 {
				return &exitError{code: jail.ExitSetupError}
			}
			return nil
		},
	}
}

// printSpecYAML writes p's merged Spec as YAML, its name, description and
// chain as comments.
func printSpecYAML(w io.Writer, p *profiles.Profile) error {
	b, err := json.Marshal(p.Spec)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# profile %s", p.Name)
	if len(p.Extends) > 0 {
		fmt.Fprintf(w, ", merged over %s", strings.Join(p.Extends, " over "))
	}
	fmt.Fprintln(w)
	if p.Description != "" {
		fmt.Fprintf(w, "# %s\n", p.Description)
	}
	_, err = w.Write(y)
	return err
}
