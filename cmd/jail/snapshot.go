package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
)

const snapshotDirHelp = "directory of snapshots (default $JAIL_SNAPSHOT_DIR, /var/lib/jail/snapshots as root, else $XDG_DATA_HOME/jail/snapshots)"

const snapshotHelp = `A snapshot is a copy of a session's workspace, taken while every process of the session is
stopped (cgroup freezer: "consistency": "frozen"), so that each file is as it was between two
system calls, never half written. It holds files only: no memory, no processes (pause keeps those;
a snapshot does not). It needs the session's cgroup. Snapshots live in --snapshot-dir, 0700, and
outlive the session and a reboot.`

func newSessionSnapshot(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshot [--name NAME] [--json] ID",
		Short: "Copy a session's workspace while it is frozen, and print the snapshot's id",
		Long: `snapshot stops every process of session ID, copies its workspace (as the files helper sees it, in
the jail) and lets them run again. It prints the snapshot's id, or with --json its description
(schema jail.snapshot/v1: id, name, session, parent, spec hash, created, bytes, files, consistency,
freeze_ms). ` + "`session restore`" + ` and ` + "`session create --from`" + ` bring it back; ` + "`jail snapshot`" + ` lists,
removes and exports snapshots.

` + snapshotHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			info, err := s.Snapshot(context.Background(), name)
			if err != nil {
				return sessionError(err)
			}
			if asJSON {
				return printJSON(stdout, info)
			}
			fmt.Fprintln(stdout, info.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a `NAME` for the snapshot (restore and --from take it for the id when one snapshot has it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot's description (jail.snapshot/v1)")
	return cmd
}

func newSessionRestore(m func() *jail.Sessions) *cobra.Command {
	return &cobra.Command{
		Use:   "restore ID SNAPSHOT",
		Short: "Bring a session's workspace back to a snapshot (its commands are killed)",
		Long: `restore kills every command running in session ID, with everything it started (its PID 1 stays,
and so does the session), empties the workspace and puts SNAPSHOT's files back, in the jail, as the
workload's user. The snapshot must come from a session of the same jail (the same Spec): this one,
or one it was forked or created from. An overlay workspace's overlays are made again with empty upper
layers and the snapshot's layer tree as their lower layer: nothing of it is copied. If its PID 1
cannot make them again, with every mask and mount they had, it ends the session (fail closed).

` + snapshotHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			return sessionError(s.Restore(context.Background(), args[1]))
		},
	}
}

// forkEntry is one line of `session fork --json`.
type forkEntry struct {
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
}

func newSessionFork(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var n int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork [-n N] [--json] ID",
		Short: "Snapshot a session now and make N sessions from it",
		Long: `fork takes a snapshot of session ID now (never an older one) and makes N new sessions from it, each
with the session's jail, labels and deadlines and a copy of its workspace. It prints one line per
fork: the new session's id, or "error: ..." for one that could not be made; with --json, an object
{snapshot, forks: [{id} or {error}]}. Exit status 125 if any fork failed.

` + snapshotHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			snap, forks, err := s.Fork(context.Background(), n)
			if err != nil {
				return sessionError(err)
			}
			var entries []forkEntry
			failed := 0
			for _, f := range forks {
				if f.Err != nil {
					entries = append(entries, forkEntry{Error: f.Err.Error()})
					failed++
				} else {
					entries = append(entries, forkEntry{ID: f.Session.ID()})
				}
			}
			if asJSON {
				if err := printJSON(stdout, struct {
					Snapshot string      `json:"snapshot"`
					Forks    []forkEntry `json:"forks"`
				}{snap.ID, entries}); err != nil {
					return err
				}
			} else {
				for _, e := range entries {
					if e.Error != "" {
						fmt.Fprintln(stdout, "error: "+e.Error)
					} else {
						fmt.Fprintln(stdout, e.ID)
					}
				}
			}
			if failed > 0 {
				return &exitError{code: jail.ExitSetupError, msg: fmt.Sprintf("fork: %d of %d sessions could not be made", failed, n)}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "number", "n", 1, "how many sessions to make (1 to 1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {snapshot, forks: [{id} or {error}]}")
	return cmd
}

// newSnapshotCommand is `jail snapshot`: the snapshots themselves.
func newSnapshotCommand(stdout io.Writer) *cobra.Command {
	var snapDir string
	root := &cobra.Command{
		Use:   "snapshot",
		Short: "List, inspect, remove and export session snapshots",
		Long:  snapshotHelp + "\n\n`jail session snapshot` takes one; `session restore` and `session create --from` use one.",
	}
	root.PersistentFlags().StringVar(&snapDir, "snapshot-dir", "", snapshotDirHelp)
	m := func() *jail.Sessions { return &jail.Sessions{SnapshotDir: snapDir} }
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List snapshots, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := m().Snapshots()
			if err != nil {
				return sessionError(err)
			}
			if asJSON {
				return printJSON(stdout, l)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSESSION\tCREATED\tBYTES\tFILES")
			for _, s := range l {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", s.ID, s.Name, s.SessionID, s.CreatedAt.Local().Format(time.DateTime), s.Bytes, s.Files)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of snapshot descriptions (jail.snapshot/v1)")
	inspect := &cobra.Command{
		Use:   "inspect SNAPSHOT",
		Short: "Print a snapshot's description (jail.snapshot/v1) as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := m().SnapshotInfo(args[0])
			if err != nil {
				return sessionError(err)
			}
			return printJSON(stdout, info)
		},
	}
	rm := &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots (sessions made from them keep their own files)",
		Long: `Remove snapshots. Sessions made from them keep their own workspace files. A snapshot of an
overlay workspace whose layer tree a running session has as the lower layer of its overlays (made
from it, or restored to it) is refused, naming the sessions: remove them, or restore them to another
snapshot, first.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, id := range args {
				errs = append(errs, m().RemoveSnapshot(id))
			}
			return sessionError(errors.Join(errs...))
		},
	}
	export := &cobra.Command{
		Use:   "export SNAPSHOT [FILE|-]",
		Short: "Write a snapshot as an OCI image layer tarball (its files under workspace/), for `docker import`",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 || args[1] == "-" {
				return sessionError(m().ExportSnapshot(args[0], stdout))
			}
			out, err := hostfs.CreateOutput(args[1])
			if err != nil {
				return usageError("%s: %v", args[1], err)
			}
			defer out.Close()
			return sessionError(writeFrom(out, func(w io.Writer) error { return m().ExportSnapshot(args[0], w) }))
		},
	}
	root.AddCommand(list, inspect, rm, export)
	return root
}

// writeFrom writes what write yields to out, which appears once complete.
func writeFrom(out *hostfs.Output, write func(io.Writer) error) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	_, err := out.WriteFrom(pr, 0o644)
	pr.Close()
	return err
}
