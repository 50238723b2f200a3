package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/runner"
)

// newSessionCommand is `jail session`: jails that stay up, and commands
// run in them.
func newSessionCommand(stdout, stderr io.Writer) *cobra.Command {
	var stateDir string
	root := &cobra.Command{
		Use:   "session",
		Short: "Create jails that stay up, and run commands in them",
		Long: `A session is a jail that stays up with no command of its own: create it once, run many commands in it
(the files one writes are there for the next), look at its usage, and remove it, or let it expire.

There is no daemon: the session's PID 1 keeps it up and enforces its deadlines (--ttl, --idle-timeout)
with kernel timers; its state lives in --state-dir (default $JAIL_STATE_DIR, /run/jail for root,
$XDG_RUNTIME_DIR/jail otherwise), 0700, so one user's sessions are invisible to another.`,
		Example: `  id=$(jail session create --profile strict --memory 512M --idle-timeout 10m)
  jail session exec "$id" -- sh -c 'echo hi > /tmp/greeting'
  jail session exec --json "$id" -- cat /tmp/greeting
  jail session put "$id" main.py /workspace/ && jail session get "$id" /workspace/out.txt -
  jail session rm "$id"`,
	}
	root.PersistentFlags().StringVar(&stateDir, "state-dir", "", "directory of the sessions' state (default $JAIL_STATE_DIR, /run/jail as root, else $XDG_RUNTIME_DIR/jail)")
	var snapDir string
	root.PersistentFlags().StringVar(&snapDir, "snapshot-dir", "", snapshotDirHelp)
	var wsDir string
	root.PersistentFlags().StringVar(&wsDir, "workspace-dir", "", "directory of dir workspaces (default $JAIL_WORKSPACE_DIR, /var/lib/jail/workspaces as root, else $XDG_DATA_HOME/jail/workspaces)")
	m := func() *jail.Sessions { return &jail.Sessions{Dir: stateDir, SnapshotDir: snapDir, WorkspaceDir: wsDir} }
	root.AddCommand(newSessionCreate(m, stdout), newSessionExec(m, stdout, stderr), newSessionList(m, stdout),
		newSessionInspect(m, stdout), newSessionPause(m, true), newSessionPause(m, false), newSessionUpdate(m), newSessionRm(m, stdout),
		newSessionGC(m, stdout), newSessionPut(m), newSessionGet(m, stdout), newSessionLs(m, stdout), newSessionMv(m),
		newSessionCp(m, stdout), newSessionSnapshot(m, stdout), newSessionRestore(m), newSessionFork(m, stdout))
	return root
}

// sessionError turns a session error into jail's exit status: 125 and one
// line.
func sessionError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: jail.ExitSetupError, msg: err.Error()}
}

func newSessionCreate(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	f := newRunFlags()
	var id string
	var labels []string
	var ttl, idle time.Duration
	var asJSON bool
	var workspace, from string
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a session and print its id",
		Long: `create builds a jail from a profile and the flags, as ` + "`jail run`" + ` does, and leaves it up with no command:
its limits (--memory, --pids, --cpus...) bound every command run in it together; --timeout, --cpu-time,
--env and --cwd are each command's defaults. Its files live in a workspace at /workspace, the
default --cwd, owned by the workload's user: a tmpfs (--workspace tmpfs:SIZE, default 256M), whose
pages count against --memory, or a directory of the host's (--workspace dir:SIZE, default 1G, made in
--workspace-dir and removed with the session), whose size a project quota enforces: on a file system
without project quotas (ext4 -o prjquota, xfs -o pquota) or for a caller who cannot set one, the
session is refused unless --allow-unenforced. It prints the session's id, or with --json its
document (schema jail.session/v1). Exit status 125 when the session could not be created; then
nothing is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ss := jail.SessionSpec{ID: id, TTL: ttl, IdleTimeout: idle, From: from}
			var err error
			if from != "" {
				// The snapshot's jail: no flag may describe another.
				var other []string
				cmd.Flags().Visit(func(fl *pflag.Flag) {
					switch fl.Name {
					case "from", "id", "label", "ttl", "idle-timeout", "json", "state-dir", "snapshot-dir", "workspace-dir":
					default:
						other = append(other, "--"+fl.Name)
					}
				})
				if len(other) > 0 {
					return usageError("--from: a session made from a snapshot has the snapshot's jail; %s cannot change it", strings.Join(other, ", "))
				}
			} else {
				if ss.Spec, err = buildSpec(cmd, f); err != nil {
					return err
				}
				if ss.Workspace, err = jail.ParseWorkspace(workspace); err != nil {
					return usageError("--workspace %q: %v", workspace, err)
				}
				if !cmd.Flags().Changed("cwd") && ss.Workspace.Type != jail.WorkspaceNone {
					ss.Spec.Cwd = "" // the workspace, not the profile's /tmp
				}
			}
			if ss.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if ttl < 0 || idle < 0 {
				return usageError("--ttl and --idle-timeout: want a positive duration")
			}
			s, err := m().Create(context.Background(), ss)
			if err != nil {
				return sessionError(err)
			}
			if !asJSON {
				fmt.Fprintln(stdout, s.ID())
				return nil
			}
			info, err := s.Inspect()
			if err != nil {
				return sessionError(err)
			}
			return printJSON(stdout, info)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&id, "id", "", "the session's `ID`: 1-63 of [A-Za-z0-9_.-], starting with a letter or digit (default: generated)")
	fl.StringArrayVar(&labels, "label", nil, "a `KEY=VALUE` label, listed and matched by `session list --label` (repeatable)")
	fl.DurationVar(&ttl, "ttl", 0, "end the session this long after it started (0: never)")
	fl.DurationVar(&idle, "idle-timeout", 0, "end the session once no command has run in it for this long (0: never)")
	fl.BoolVar(&asJSON, "json", false, "print the session's document (jail.session/v1) instead of its id")
	fl.StringVar(&workspace, "workspace", "tmpfs", "the session's workspace at /workspace: `tmpfs[:SIZE]` (default 256M; counts against --memory), dir[:SIZE] (a host directory in --workspace-dir, default 1G, bounded by a project quota), overlay[:SIZE] (as tmpfs, and /usr, /etc, /home, /mnt, /opt, /root, /srv and /var writable through overlays whose changes it holds; what root keeps from others in /usr masked; root, Linux 6.6), or none")
	fl.StringVar(&from, "from", "", "make the session from `SNAPSHOT` (an id or a name): its jail, and a copy of its files")
	return cmd
}

func newSessionExec(m func() *jail.Sessions, stdout, stderr io.Writer) *cobra.Command {
	f := newRunFlags()
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARGS...] | exec --language L --code FILE|- ID [-- ARGS...]",
		Short: "Run a command, or a piece of code, in a session",
		Long: `exec runs COMMAND in session ID, joining its namespaces: it sees the files earlier commands left,
under the session's limits, in a cgroup of its own, so its report (--json: jail.result/v1 with
session_id and exec_id) has its own CPU time, memory peak and OOM kills. When COMMAND ends or times out,
everything it started ends with it; the session goes on. Output, input and exit status are as for
` + "`jail run`" + `. A paused session refuses commands (exit 125).

--language L --code FILE runs a piece of code by the runner lang-L (see jail languages) in the
session: the code is written to .jail-code/ID in its workspace (its files beside it), compiled there
by a command of the session when the language is compiled (the runner's compile timeout, under the
session's limits), run with the args after ID, and removed; the report has language and compile.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 && args[1] == "--" { // flags stop at ID, so "--" comes through
				args = args[1:]
			}
			if len(args) < 2 && !(len(args) == 1 && f.language != "") {
				return usageError("want a session ID and a command after -- (or --language and --code)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 && args[1] == "--" {
				args = append(args[:1], args[2:]...)
			}
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var c *jail.Cmd
			if f.language != "" || f.code != "" {
				if f.language == "" {
					return usageError("--code: give --language too")
				}
				p, err := runnerProfile(f.language)
				if err != nil {
					return err
				}
				code, err := readCode(cmd, f)
				if err != nil {
					return err
				}
				job, err := runner.PrepareIn(ctx, s, p, code)
				if err != nil {
					return sessionError(err)
				}
				defer job.Close()
				if job.Failed() {
					return compileFailed(f, job.FailedResult(), stdout, stderr)
				}
				c, f.annotate = job.Command(ctx, args[1:]...), job.Annotate
			} else {
				c = s.Command(ctx, args[1], args[2:]...)
			}
			fl := cmd.Flags()
			if len(f.env) > 0 {
				c.Spec = profiles.Apply(c.Spec, jail.Spec{Env: f.env}, []string{"env"})
			}
			if fl.Changed("cwd") {
				c.Spec.Cwd = f.cwd
			}
			if fl.Changed("timeout") {
				c.Spec.Timeout = jail.Duration(f.timeout)
			}
			if fl.Changed("kill-grace") {
				c.Spec.KillGrace = jail.Duration(f.killGrace)
			}
			if fl.Changed("cpu-time") {
				c.Spec.CPUTime = jail.Duration(f.cpuTime)
			}
			if fl.Changed("output-limit") {
				n, err := mounts.ParseSize(f.outputLimit)
				if err != nil {
					return usageError("--output-limit %q: %v", f.outputLimit, err)
				}
				c.Spec.OutputLimitBytes = n
			}
			return runCmd(cmd, f, c, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringArrayVar(&f.env, "env", nil, "set `KEY=VALUE` in the command's environment (repeatable; added to the session's)")
	fl.StringVar(&f.cwd, "cwd", "", "working directory inside the jail (default: the session's)")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of this command (default: the session's; 0: none)")
	fl.DurationVar(&f.killGrace, "kill-grace", 0, "at the timeout send SIGTERM first and SIGKILL after this long")
	fl.DurationVar(&f.cpuTime, "cpu-time", 0, "CPU time this command may use, e.g. 5s (needs the session's cgroup)")
	fl.StringVar(&f.outputLimit, "output-limit", "", "bytes of stdout and of stderr kept with --json (head and tail), e.g. 1M")
	fl.StringVar(&f.stdin, "stdin", "-", "the command's stdin: - (jail's own; with --json the default is none), none, or a FILE")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "feed jail's stdin to the command (the same as --stdin -, also with --json)")
	fl.BoolVar(&f.asJSON, "json", false, "capture stdout and stderr and print the result as one JSON document")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a terminal of its own, relayed to yours in raw mode; not with --json")
	fl.StringVar(&f.report, "report", "", "also write the JSON result to `FILE`")
	fl.StringVar(&f.language, "language", "", "run the code of --code in `LANGUAGE` by its runner (see jail languages), in the session: the code goes to a directory of its workspace, a compiled language is compiled by a command of the session first (the runner's compile timeout, the session's limits); the args after ID go to the program")
	fl.StringVar(&f.code, "code", "", "with --language, the code: a `FILE`, or - to read it from stdin")
	return cmd
}

func newSessionList(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var labels []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--label KEY=VALUE]... [--json]",
		Short: "List running sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, err := parseLabels(labels)
			if err != nil {
				return err
			}
			list, err := m().List(want)
			if err != nil {
				return sessionError(err)
			}
			infos := []*jail.SessionInfo{}
			for _, s := range list {
				if info, err := s.Inspect(); err == nil {
					infos = append(infos, info)
				}
			}
			if asJSON {
				return printJSON(stdout, infos)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tAGE\tPID\tLABELS")
			for _, i := range infos {
				var ls []string
				for k, v := range i.Labels {
					ls = append(ls, k+"="+v)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", i.ID, i.State, time.Since(i.CreatedAt).Round(time.Second), i.PID, strings.Join(ls, ","))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sessions with this `KEY=VALUE` label (repeatable: all of them)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of session documents (jail.session/v1)")
	return cmd
}

func newSessionInspect(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect ID [--json]",
		Short: "Show a session: state, age, deadlines, usage",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			info, err := s.Inspect()
			if err != nil {
				return sessionError(err)
			}
			if asJSON {
				return printJSON(stdout, info)
			}
			fmt.Fprintf(stdout, "id:       %s\nstate:    %s\npid:      %d\ncreated:  %s (%s ago)\n", info.ID, info.State, info.PID,
				info.CreatedAt.Format(time.RFC3339), time.Since(info.CreatedAt).Round(time.Second))
			if info.ExpiresAt != nil {
				fmt.Fprintf(stdout, "expires:  %s\n", info.ExpiresAt.Format(time.RFC3339))
			}
			if info.IdleTimeoutMS > 0 {
				fmt.Fprintf(stdout, "idle:     ends after %s without a command\n", time.Duration(info.IdleTimeoutMS)*time.Millisecond)
			}
			if w := info.Workspace; w != nil {
				used := "unknown"
				if w.UsedBytes != nil {
					used = strconv.FormatInt(*w.UsedBytes, 10)
				}
				fmt.Fprintf(stdout, "workspace: %s %s, %s of %d bytes used\n", w.Type, w.Path, used, w.SizeBytes)
			}
			if u := info.Usage; u != nil {
				fmt.Fprintf(stdout, "cpu:      %d ms user, %d ms system\n", u.CPUUserMS, u.CPUSystemMS)
				if u.MemoryPeakBytes != nil {
					fmt.Fprintf(stdout, "memory:   peak %d bytes\n", *u.MemoryPeakBytes)
				}
				if u.PidsPeak != nil {
					fmt.Fprintf(stdout, "pids:     peak %d\n", *u.PidsPeak)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session's document (jail.session/v1)")
	return cmd
}

func newSessionPause(m func() *jail.Sessions, pause bool) *cobra.Command {
	use, short := "resume ID", "Let a paused session run again"
	if pause {
		use, short = "pause ID", "Freeze every process of a session, keeping its memory (cgroup freezer); commands are refused until resume"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			if pause {
				return sessionError(s.Pause())
			}
			return sessionError(s.Resume())
		},
	}
}

func newSessionUpdate(m func() *jail.Sessions) *cobra.Command {
	var allow, labels []string
	var ttl, idle time.Duration
	cmd := &cobra.Command{
		Use:   "update ID [--ttl D] [--idle-timeout D] [--label KEY=VALUE]... [--allow DEST]...",
		Short: "Change a running session's deadlines, labels or egress allow-list",
		Long: `update changes a running session.

--ttl replaces its TTL, counted from when the session started, as at create (so it lengthens or
shortens it; a TTL that has already passed is refused; 0 removes it). --idle-timeout replaces its idle
timeout (0: none), counted from now: an update is activity. Both are kernel timers of the session's
PID 1, changed through its control socket; a session made by an older jail cannot change them.

--label replaces all of its labels with the ones given.

--allow replaces the allow-list of a session made with --net egress, in one transaction of its rules:
its commands reach what the new list names from then on, and a connection to a destination no longer
listed is refused at its next packet. DEST is as for --allow of run; host names are limited to those
the session was made with (they are pinned in its /etc/hosts, with the addresses they had then).`,
		Example: `  jail session update "$id" --ttl 2h --idle-timeout 15m
  jail session update "$id" --allow 10.0.0.5:443 --allow udp/10.0.0.53:53`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			var u jail.SessionUpdate
			if fl.Changed("ttl") {
				if ttl < 0 {
					return usageError("--ttl: want a duration of 0 or more")
				}
				u.TTL = &ttl
			}
			if fl.Changed("idle-timeout") {
				if idle < 0 {
					return usageError("--idle-timeout: want a duration of 0 or more")
				}
				u.IdleTimeout = &idle
			}
			if fl.Changed("label") {
				l, err := parseLabels(labels)
				if err != nil {
					return err
				}
				if l == nil {
					l = map[string]string{}
				}
				u.Labels = l
			}
			if fl.Changed("allow") && len(allow) == 0 {
				return usageError("--allow: give the new list, one or more destinations")
			}
			if u.TTL == nil && u.IdleTimeout == nil && u.Labels == nil && len(allow) == 0 {
				return usageError("update: give what to change: --ttl, --idle-timeout, --label or --allow")
			}
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			if len(allow) > 0 {
				if err := s.SetAllow(allow); err != nil {
					return sessionError(err)
				}
			}
			if u.TTL == nil && u.IdleTimeout == nil && u.Labels == nil {
				return nil
			}
			return sessionError(s.Update(u))
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&ttl, "ttl", 0, "the session's new TTL, from when it started (0: none)")
	fl.DurationVar(&idle, "idle-timeout", 0, "the session's new idle timeout, from now (0: none)")
	fl.StringArrayVar(&labels, "label", nil, "a `KEY=VALUE` label; the ones given replace all of the session's (repeatable)")
	fl.StringArrayVar(&allow, "allow", nil, "a destination of the new allow-list: `[tcp/|udp/]DEST[:PORT[-PORT]]` (repeatable)")
	return cmd
}

func newSessionRm(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var force, recursive bool
	cmd := &cobra.Command{
		Use:   "rm ID... [--force] | rm [-r] ID:PATH...",
		Short: "Remove sessions, or files of a session (ID:PATH)",
		Long: `rm ID ends each session: its PID 1 is killed, and with it every process of the jail (a running
` + "`session exec`" + ` reports KILL); then its cgroup and state are removed. It prints each id and how many
processes it ended. An unknown id is an error (exit 125) unless --force.

rm ID:PATH removes the file PATH of session ID, in the session, as its workload's user: a symlink
itself, never what it points to; a directory only when it is empty, or with -r. Files and sessions
cannot be removed by one command, and an argument that is neither an id nor ID:PATH fails the whole
command before anything is removed (so "rm ID /tmp/x" removes nothing).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files := 0
			for _, a := range args {
				if _, p, ok := splitSessionPath(a); ok {
					files++
					if p == "" {
						return usageError("rm %q: no path after the colon", a)
					}
				} else if !jail.ValidSessionID(a) {
					return usageError("rm %q: neither a session id nor ID:PATH (a file of a session is ID:PATH); nothing removed", a)
				}
			}
			if files > 0 && files < len(args) {
				return usageError("rm: sessions and files of sessions (ID:PATH) in one command; nothing removed")
			}
			if files > 0 && force {
				return usageError("rm: --force is for sessions; for files use -r")
			}
			if files == 0 && recursive {
				return usageError("rm: -r is for files of a session (ID:PATH)")
			}
			var errs []error
			for _, a := range args {
				if files > 0 {
					id, p, _ := splitSessionPath(a)
					s, err := m().Get(id)
					if err == nil {
						err = s.RemoveFile(context.Background(), p, recursive)
					}
					if err != nil {
						errs = append(errs, err)
					}
					continue
				}
				s, err := m().Get(a)
				if err != nil {
					if !(force && errors.Is(err, jail.ErrNotFound)) {
						errs = append(errs, err)
					}
					continue
				}
				n, err := s.Remove()
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(stdout, "%s\t%d processes ended\n", a, n)
			}
			return sessionError(errors.Join(errs...))
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "no error for sessions that do not exist or have ended")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory of a session and everything in it")
	return cmd
}

func newSessionGC(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove what ended sessions left (cgroups, state)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ids, err := m().GC()
			for _, id := range ids {
				fmt.Fprintln(stdout, id)
			}
			return sessionError(err)
		},
	}
}

// parseLabels parses --label KEY=VALUE flags; nil for none.
func parseLabels(flags []string) (map[string]string, error) {
	var labels map[string]string
	for _, l := range flags {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError("--label %q: want KEY=VALUE", l)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	return labels, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return &exitError{code: jail.ExitSetupError, msg: "writing JSON: " + err.Error()}
	}
	return nil
}
