//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/netns"
)

// selftestProbePath is where jail's own binary is bound in each jail: /tmp
// is a tmpfs in every jail, so its mount point can be made there, under
// --rootfs too.
const selftestProbePath = "/tmp/.jail-selftest/jail"

// Verdicts of a selftest row.
const (
	verdictPass = "pass" // the attack was refused
	verdictFail = "fail" // it worked, or the probe could not tell
	verdictWarn = "warn" // it worked because the flags asked for it
	verdictSkip = "skip" // the profile sets no such limit
)

// selftestRow is one line of the table and one element of --json.
type selftestRow struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// selftestProbe is one jail of the selftest: the calls its probe makes and
// how to judge the kernel's answers, as one or more rows.
type selftestProbe struct {
	name string
	// ops are `jail selftest-probe`'s arguments: OP ARG pairs.
	ops []string
	// skip, when not empty, is why no jail runs; the row is a skip.
	skip string
	// slow probes start first.
	slow bool
	// adjust changes the Spec for this probe's jail only.
	adjust func(*jail.Spec)
	judge  func(probeRun) []selftestRow
}

// selftestHost is what the host side sets up for the probes to look for.
type selftestHost struct {
	spec       jail.Spec
	markerFile string // a host file every user may read, not bound into the jail
	marker     string // in the command line of the decoy, a host process
	port       int    // of the host's listener on 127.0.0.1
	accepted   atomic.Int64
	memAvail   int64 // the host's MemAvailable, 0 if unknown
}

func newSelftestCommand(stdout, stderr io.Writer) *cobra.Command {
	f := newRunFlags()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "selftest [flags]",
		Short: "Try escapes from a jail built from a profile and flags, and print what held",
		Long: `selftest runs escape probes inside jails built from the profile and the flags (the same ones
as jail run, which override the profile) on this host and kernel, and prints one verdict per probe:
pass (the attack was refused), fail (it worked, or the probe could not run or got no answer:
nothing tried is nothing proven), warn (the jail is
weaker because the profile or flags ask for it: no seccomp filter, a namespace not created, a limit
not enforced under --allow-unenforced; an attack that works because of it still fails) or skip (a
limit the profile does not set).

The probes: a host file that is not bound in, and /etc/shadow, must not be readable; /, /usr,
/etc and /proc/sys/kernel/hostname must not be writable; no host process may be visible; every
capability set must be empty and no_new_privs set; the seccomp filter must be on; a new user
namespace (clone with CLONE_NEWUSER), a tmpfs mount, opening /proc/1/exe and /proc/1/mem, and
ptrace of PID 1 must be refused; a TCP listener of selftest on the host's 127.0.0.1 must be out
of reach (no other address is ever tried) and lo the only interface; /proc/kcore and /proc/keys
must not be readable (refused, absent or empty) nor /proc/sysrq-trigger writable; and, when the
profile sets them, the memory limit must OOM-kill, the pids limit must refuse a fork, the CPU time
limit and the timeout (each shortened to at most 1s) must kill. Two rows read the report: isolation
(what is in force) and landlock (the ABI, warn below 6).

Each probe runs in a jail of its own (a seccomp kill ends only that one): jail's own binary, bound
read-only at /tmp/.jail-selftest/jail, runs a hidden subcommand that makes the calls and prints the
kernel's answers. Under --rootfs a dynamically linked jail cannot run there: use the static build
(see README).

selftest proves only what it probes: a pass means these calls were refused here, with this
profile, not that no other way out exists.

Exit status: 0 when no probe failed, 1 when one did, 125 for bad flags or when the jail could not
be set up.`,
		Example: `  jail selftest --profile strict
  jail selftest --profile my-judge.yaml --memory 256M --pids 64 --json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("selftest takes no command: %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := buildSpec(cmd, f)
			if err != nil {
				return err
			}
			rows, err := runSelftest(cmd.Context(), spec)
			if err != nil {
				return err
			}
			return printSelftest(stdout, rows, asJSON)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.BoolVar(&asJSON, "json", false, "print the verdicts as a JSON array of {name, result, detail}")
	return cmd
}

// printSelftest writes the table (or JSON) and returns exit status 1 when
// a probe failed.
func printSelftest(w io.Writer, rows []selftestRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return fmt.Errorf("writing the verdicts: %w", err)
		}
	} else {
		counts := map[string]int{}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESULT\tPROBE\tDETAIL")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Result, r.Name, r.Detail)
			counts[r.Result]++
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing the verdicts: %w", err)
		}
		fmt.Fprintf(w, "%d passed, %d failed, %d warned, %d skipped; this proves only what the probes try\n",
			counts[verdictPass], counts[verdictFail], counts[verdictWarn], counts[verdictSkip])
	}
	for _, r := range rows {
		if r.Result == verdictFail {
			return &exitError{code: 1}
		}
	}
	return nil
}

// runSelftest sets up what the probes look for on the host (a marker
// file, a decoy process, a loopback listener), runs every probe in a jail
// of its own and judges the answers. It returns an error, and no rows,
// when a jail could not be set up at all.
func runSelftest(ctx context.Context, spec jail.Spec) (rows []selftestRow, retErr error) {
	if ctx == nil {
		ctx = context.Background()
	}
	// Cancelling kills and removes the jails; a signal's default action
	// would leave their cgroups behind.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()

	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("selftest: finding jail's own binary: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return nil, fmt.Errorf("selftest: finding jail's own binary: %w", err)
	}
	h := &selftestHost{spec: spec, memAvail: memAvailable()}
	h.marker = "jail-selftest-" + rand.Text()

	dir, err := os.MkdirTemp("", "jail-selftest-")
	if err != nil {
		return nil, fmt.Errorf("selftest: marker file: %w", err)
	}
	defer os.RemoveAll(dir)
	// Readable by everyone on the host, so that only the jail's mount
	// namespace can hide it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("selftest: marker file: %w", err)
	}
	h.markerFile = filepath.Join(dir, "secret")
	if err := os.WriteFile(h.markerFile, []byte(h.marker+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("selftest: marker file: %w", err)
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("selftest: listen on 127.0.0.1: %w", err)
	}
	defer ln.Close()
	h.port = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			conn.Close()
		}
	}()

	decoy := exec.CommandContext(ctx, exe, "selftest-probe", "decoy", h.marker)
	decoy.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	decoyIn, err := decoy.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("selftest: decoy process: %w", err)
	}
	if err := decoy.Start(); err != nil {
		return nil, fmt.Errorf("selftest: decoy process: %w", err)
	}
	defer func() {
		decoyIn.Close() // it exits at EOF
		if err := decoy.Wait(); err != nil && retErr == nil {
			retErr = fmt.Errorf("selftest: decoy process: %w", err)
		}
	}()

	probePath := selftestProbePath
	if slices.Contains(spec.DisableNamespaces, "mount") {
		probePath = exe // no jail root to bind it into: the jail sees the host's files
	}
	probes := selftestProbes(h)
	runs := make([]probeRun, len(probes))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4)
	for _, i := range startOrder(probes) {
		p := probes[i]
		if p.skip != "" {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			runs[i] = runProbe(ctx, h.spec, p, exe, probePath)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, &exitError{code: jail.ExitSetupError, msg: "selftest: interrupted"}
	}

	for i, p := range probes {
		if p.skip != "" {
			rows = append(rows, selftestRow{Name: p.name, Result: verdictSkip, Detail: p.skip})
			continue
		}
		if err := runs[i].setupError(); err != nil {
			return nil, err
		}
		rows = append(rows, p.judge(runs[i])...)
	}
	return rows, nil
}

// startOrder returns the indices of probes, the slow ones first.
func startOrder(probes []selftestProbe) []int {
	var order []int
	for _, slow := range []bool{true, false} {
		for i, p := range probes {
			if p.slow == slow {
				order = append(order, i)
			}
		}
	}
	return order
}

// runProbe runs one probe in a jail of its own.
func runProbe(ctx context.Context, spec jail.Spec, p selftestProbe, exe, probePath string) probeRun {
	if probePath != exe {
		spec.Mounts = append(slices.Clone(spec.Mounts), mounts.Mount{Type: mounts.ROBind, Source: exe, Target: probePath})
	}
	// The output limit bounds what the host keeps of the probe's answers,
	// not what the jail may do: keep all of them.
	spec.OutputLimitBytes = max(spec.OutputLimitBytes, 64<<10)
	if p.adjust != nil {
		p.adjust(&spec)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := jail.Command(ctx, spec, probePath, append([]string{"selftest-probe"}, p.ops...)...)
	c.Capture = true
	runErr := c.Run()
	r := probeRun{res: c.Result, err: runErr}
	for i := 0; i+1 < len(p.ops); i += 2 {
		r.ops = append(r.ops, p.ops[i]+" "+p.ops[i+1])
	}
	if r.res == nil { // cannot happen: Run always sets it
		r.res = &jail.Result{Status: jail.StatusSetupError, Error: &jail.ErrorInfo{Step: "run", Message: fmt.Sprint(runErr)}}
	}
	sc := bufio.NewScanner(strings.NewReader(r.res.Stdout))
	for sc.Scan() {
		var a probeAnswer
		if json.Unmarshal(sc.Bytes(), &a) == nil && a.Op != "" {
			r.answers = append(r.answers, a)
		}
	}
	return r
}

// probeRun is one probe's jail: its report and the probe's answers.
type probeRun struct {
	res     *jail.Result
	err     error    // from Cmd.Run
	ops     []string // "OP ARG", in order
	answers []probeAnswer
}

// setupError returns an error when the probe never ran: the jail could
// not be set up, or jail's binary could not run in it.
func (r probeRun) setupError() error {
	static := "selftest: the probe needs a static jail binary (see README) to run in this --rootfs"
	if r.res.Status == jail.StatusExited && r.res.ExitCode == jail.ExitNotFound &&
		strings.Contains(r.res.Stderr, "error while loading shared libraries") {
		return &exitError{code: jail.ExitSetupError, msg: static + ": " + firstLine(r.res.Stderr)}
	}
	if r.res.Status != jail.StatusSetupError {
		return nil
	}
	e := r.res.Error
	if e == nil {
		e = &jail.ErrorInfo{Message: fmt.Sprint(r.err)}
	}
	if e.Step == "execve" {
		if r.res.Isolation.Root == "directory" && (e.Errno == "ENOENT" || e.Errno == "ENOEXEC") {
			return &exitError{code: jail.ExitSetupError, msg: static + " (" + e.Message + ")"}
		}
		return &exitError{code: jail.ExitSetupError, msg: "selftest: jail's binary cannot run in the jail (the jail's host uid must be able to execute it): " + e.Message}
	}
	msg := e.Message
	if r.err != nil && !errors.Is(r.err, jail.ErrInvalidSpec) && !errors.Is(r.err, jail.ErrNotSupported) {
		msg = r.err.Error()
	}
	return &exitError{code: jail.ExitSetupError, msg: msg}
}

func (r probeRun) answer(op string) (probeAnswer, bool) {
	for _, a := range r.answers {
		if a.Op == op {
			return a, true
		}
	}
	return probeAnswer{}, false
}

// probeSyscalls are, per op, the system calls that are the attack: the
// seccomp policy killing the probe at one of them refused the op. A kill
// at any other call (one the Go runtime makes) proves nothing.
var probeSyscalls = map[string][]string{
	"read":              {"open", "openat", "openat2", "read"},
	"open":              {"open", "openat", "openat2"},
	"open-write":        {"open", "openat", "openat2"},
	"create":            {"open", "openat", "openat2", "creat"},
	"rewrite":           {"open", "openat", "openat2", "write"},
	"count-pids":        {"open", "openat", "openat2", "getdents", "getdents64"},
	"find-cmdline":      {"open", "openat", "openat2", "getdents", "getdents64", "read"},
	"clone-ns":          {"clone"},
	"mount-tmpfs":       {"mount"},
	"ptrace-attach":     {"ptrace"},
	"connect-lo":        {"socket", "setsockopt", "connect"},
	"hog":               {"mmap"},
	"fork-until-eagain": {"clone", "fork"},
}

// call returns what became of op: refused (with the errno, or the seccomp
// kill at one of its calls) or succeeded, and how, in a few words. An
// error means the probe did not get to op.
func (r probeRun) call(op string) (refused bool, how string, err error) {
	if a, ok := r.answer(op); ok {
		if a.Err != "" {
			return true, a.Err, nil
		}
		return false, "succeeded", nil
	}
	// The first op without an answer is the one the probe was at.
	at := ""
	for _, o := range r.ops {
		if _, ok := r.answer(o); !ok {
			at = o
			break
		}
	}
	if kill := lastKill(r.res); r.res.Status == jail.StatusSeccompKilled && kill != "" {
		switch {
		case at == op && slices.Contains(probeSyscalls[opName(op)], kill):
			return true, "killed by seccomp (" + kill + ")", nil
		case at != op && slices.Contains(probeSyscalls[opName(at)], kill):
			return false, "", fmt.Errorf("the seccomp policy killed the probe at %q, before %q", at, op)
		default:
			return false, "", fmt.Errorf("the seccomp policy killed the probe at %s, not a call it tests, before %q: jail's binary cannot run under this policy", kill, op)
		}
	}
	return false, "", fmt.Errorf("the probe ended (%s) before %q%s", r.ended(), op, stderrSuffix(r.res.Stderr))
}

// unanswered explains an op without an answer: the probe never got to it,
// or the seccomp policy killed the probe there. Either way what the row
// needed was not seen, and the row is not a pass.
func (r probeRun) unanswered(op string) error {
	refused, how, err := r.call(op)
	switch {
	case err != nil:
		return err
	case refused:
		return fmt.Errorf("%q was refused (%s) before the probe could answer, so the rest was not tried", op, how)
	}
	return fmt.Errorf("%q got no answer", op)
}

// opName returns OP of "OP ARG".
func opName(op string) string {
	name, _, _ := strings.Cut(op, " ")
	return name
}

// ended describes how the probe's jail ended.
func (r probeRun) ended() string {
	s := string(r.res.Status)
	switch {
	case r.res.Status == jail.StatusExited:
		s += " " + strconv.Itoa(r.res.ExitCode)
	case r.res.Signal != "":
		s += " " + r.res.Signal
	}
	if r.res.Error != nil {
		s += ": " + r.res.Error.Message
	}
	return s
}

// lastKill returns the syscall of the last seccomp kill of the workload.
func lastKill(res *jail.Result) string {
	for i := len(res.SeccompDenials) - 1; i >= 0; i-- {
		if d := res.SeccompDenials[i]; d.Action == "kill" && d.Workload {
			return d.Syscall
		}
	}
	return ""
}

func stderrSuffix(stderr string) string {
	if line := firstLine(stderr); line != "" {
		return ": " + line
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// attempt is one attack of a row, and whether it was refused.
type attempt struct {
	what    string
	refused bool
	how     string
}

// refusedRow is a pass when every attempt was refused, else a fail; err,
// when not nil, is a fail saying the probe could not tell, and so is a row
// without attempts: nothing tried is nothing proven.
func refusedRow(name string, attempts []attempt, err error) selftestRow {
	if err == nil && len(attempts) == 0 {
		err = errors.New("no attempt was made")
	}
	if err != nil {
		return selftestRow{Name: name, Result: verdictFail, Detail: "not probed: " + err.Error()}
	}
	verdict, parts := verdictPass, []string{}
	for _, a := range attempts {
		if !a.refused {
			verdict = verdictFail
		}
		parts = append(parts, a.what+": "+a.how)
	}
	return selftestRow{Name: name, Result: verdict, Detail: strings.Join(parts, "; ")}
}

// refusedCalls makes one attempt of each op; labels name them in the
// detail.
func (r probeRun) refusedCalls(name string, ops, labels []string) selftestRow {
	var attempts []attempt
	for i, op := range ops {
		refused, how, err := r.call(op)
		if err != nil {
			return refusedRow(name, nil, err)
		}
		attempts = append(attempts, attempt{labels[i], refused, how})
	}
	return refusedRow(name, attempts, nil)
}

// selftestProbes lists the probes, in the order of the table.
func selftestProbes(h *selftestHost) []selftestProbe {
	spec := h.spec
	disabled := func(ns string) bool { return slices.Contains(spec.DisableNamespaces, ns) }
	probes := []selftestProbe{
		{
			name: "host_file_read",
			ops:  []string{"read", h.markerFile, "read", "/etc/shadow"},
			judge: func(r probeRun) []selftestRow {
				a, ok := r.answer("read " + h.markerFile)
				if !ok {
					return []selftestRow{refusedRow("host_file_read", nil, r.unanswered("read "+h.markerFile))}
				}
				marker := attempt{what: "a fresh host file (" + h.markerFile + ")", refused: a.Err == "ENOENT", how: "absent"}
				switch a.Err {
				case "":
					marker.how = "readable in the jail"
				case "ENOENT":
				default:
					marker.how = "visible in the jail (" + a.Err + ")"
				}
				refused, how, err := r.call("read /etc/shadow")
				return []selftestRow{refusedRow("host_file_read", []attempt{marker, {"/etc/shadow", refused, how}}, err)}
			},
		},
		{
			name: "host_file_write",
			ops:  []string{"create", "/", "create", "/usr", "create", "/etc", "rewrite", "/proc/sys/kernel/hostname"},
			judge: func(r probeRun) []selftestRow {
				return []selftestRow{r.refusedCalls("host_file_write",
					[]string{"create /", "create /usr", "create /etc", "rewrite /proc/sys/kernel/hostname"},
					[]string{"create in /", "create in /usr", "create in /etc", "write /proc/sys/kernel/hostname"})}
			},
		},
		{
			name: "host_pids",
			ops:  []string{"count-pids", "/proc", "find-cmdline", h.marker},
			judge: func(r probeRun) []selftestRow {
				count, ok := r.answer("count-pids /proc")
				if !ok {
					return []selftestRow{refusedRow("host_pids", nil, r.unanswered("count-pids /proc"))}
				}
				a, ok := r.answer("find-cmdline " + h.marker)
				if !ok {
					return []selftestRow{refusedRow("host_pids", nil, r.unanswered("find-cmdline "+h.marker))}
				}
				if a.Err != "" { // /proc could not be searched: nothing seen proves nothing
					return []selftestRow{refusedRow("host_pids", nil, errors.New("looking for the decoy in /proc: "+a.Err))}
				}
				seen := count.Value
				if count.Err != "" {
					seen = "no processes (" + count.Err + ")"
				} else {
					seen += " processes"
				}
				if a.Value != "" {
					return []selftestRow{{Name: "host_pids", Result: verdictFail,
						Detail: "selftest's decoy, a host process, is visible (pid " + a.Value + "); the jail sees " + seen}}
				}
				return []selftestRow{{Name: "host_pids", Result: verdictPass,
					Detail: "selftest's decoy, a host process, is not visible; the jail sees " + seen}}
			},
		},
		{
			name:  "capabilities",
			ops:   []string{"read", "/proc/self/status"},
			judge: func(r probeRun) []selftestRow { return judgeStatus(r, spec) },
		},
		{
			name: "userns_nesting",
			ops:  []string{"clone-ns", "user"},
			judge: func(r probeRun) []selftestRow {
				if a, _ := r.answer("clone-ns user"); a.Err == "EAGAIN" {
					return []selftestRow{refusedRow("userns_nesting", nil, errors.New("clone got EAGAIN: the pids limit leaves the probe no room for a child"))}
				}
				return []selftestRow{r.refusedCalls("userns_nesting", []string{"clone-ns user"}, []string{"clone(CLONE_NEWUSER)"})}
			},
		},
		{
			name: "mount",
			ops:  []string{"mount-tmpfs", "/tmp"},
			judge: func(r probeRun) []selftestRow {
				return []selftestRow{r.refusedCalls("mount", []string{"mount-tmpfs /tmp"}, []string{"mount tmpfs on /tmp"})}
			},
		},
		{
			name: "ptrace_pid1",
			ops:  []string{"open", "/proc/1/exe", "open", "/proc/1/mem", "ptrace-attach", "1"},
			judge: func(r probeRun) []selftestRow {
				return []selftestRow{r.refusedCalls("ptrace_pid1",
					[]string{"open /proc/1/exe", "open /proc/1/mem", "ptrace-attach 1"},
					[]string{"open /proc/1/exe", "open /proc/1/mem", "PTRACE_ATTACH 1"})}
			},
		},
		{
			name: "network_reach",
			ops:  []string{"read", "/proc/net/dev", "connect-lo", strconv.Itoa(h.port)},
			judge: func(r probeRun) []selftestRow {
				mode := spec.Network.Mode
				if disabled("net") {
					mode = jail.NetworkHost
				}
				return []selftestRow{judgeReach(r, h), judgeInterfaces(r, mode)}
			},
		},
		{
			name: "proc_masks",
			ops:  []string{"read", "/proc/kcore", "read", "/proc/keys", "open-write", "/proc/sysrq-trigger"},
			judge: func(r probeRun) []selftestRow {
				var attempts []attempt
				for _, path := range []string{"/proc/kcore", "/proc/keys"} {
					refused, how, err := r.call("read " + path)
					if err != nil {
						return []selftestRow{refusedRow("proc_masks", nil, err)}
					}
					if a, _ := r.answer("read " + path); !refused && a.Value == "" {
						refused, how = true, "empty"
					}
					attempts = append(attempts, attempt{"read " + path, refused, how})
				}
				refused, how, err := r.call("open-write /proc/sysrq-trigger")
				attempts = append(attempts, attempt{"open /proc/sysrq-trigger for writing", refused, how})
				row := refusedRow("proc_masks", attempts, err)
				if err == nil && !slices.Contains(r.res.Isolation.Namespaces, "mount") {
					// No masks without a mount namespace: what the host's
					// /proc shows (its keys, say) is the host's, not the
					// jail's doing, either way.
					row.Result = verdictWarn
					row.Detail = "no mount namespace: the host's /proc, unmasked; " + row.Detail
				}
				return []selftestRow{row}
			},
		},
		memoryProbe(h),
		pidsProbe(spec),
		cpuTimeProbe(spec),
		timeoutProbe(spec),
	}
	return probes
}

// judgeStatus makes three rows of /proc/self/status and the report:
// capabilities and no_new_privs, the seccomp mode, and what is in force.
func judgeStatus(r probeRun, spec jail.Spec) []selftestRow {
	a, ok := r.answer("read /proc/self/status")
	if !ok || a.Err != "" {
		err := errors.New("reading /proc/self/status: " + a.Err)
		if !ok {
			err = r.unanswered("read /proc/self/status")
		}
		return []selftestRow{refusedRow("capabilities", nil, err), refusedRow("seccomp_mode", nil, err), isolationRow(r.res, spec), landlockRow(r.res)}
	}
	caps := selftestRow{Name: "capabilities", Result: verdictPass, Detail: "CapInh CapPrm CapEff CapBnd CapAmb empty; NoNewPrivs 1"}
	var held []string
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v := statusField(a.Value, set)
		if n, err := strconv.ParseUint(v, 16, 64); err != nil || n != 0 {
			held = append(held, set+" "+v)
		}
	}
	if nnp := statusField(a.Value, "NoNewPrivs"); nnp != "1" {
		held = append(held, "NoNewPrivs "+nnp)
	}
	if len(held) > 0 {
		caps.Result, caps.Detail = verdictFail, strings.Join(held, "; ")
	}

	mode, policy := statusField(a.Value, "Seccomp"), r.res.Isolation.Seccomp
	sc := selftestRow{Name: "seccomp_mode", Result: verdictPass, Detail: "Seccomp " + mode + " (filter), policy " + policy}
	switch {
	case mode == "2" && policy != "none":
	case mode == "0" && policy == "none":
		sc.Result, sc.Detail = verdictWarn, "Seccomp 0: no filter, as the profile or --seccomp none asks"
	default:
		sc.Result, sc.Detail = verdictFail, "Seccomp "+mode+", but the report says policy "+policy
	}
	return []selftestRow{caps, sc, isolationRow(r.res, spec), landlockRow(r.res)}
}

// landlockRow says what the report had of the second wall: a warning when
// it lacks what `--landlock require` asks for (ABI 6: files and the signal
// and abstract socket scopes), and in any case what this kernel (or the
// profile) left out.
func landlockRow(res *jail.Result) selftestRow {
	ll := res.Isolation.Landlock
	row := selftestRow{Name: "landlock", Result: verdictPass,
		Detail: fmt.Sprintf("ABI %d: %s", ll.ABI, strings.Join(ll.Enforced, ", "))}
	if ll.ABI < 6 {
		row.Result = verdictWarn
	}
	if ll.ABI == 0 {
		row.Detail = "not in force"
	}
	if len(ll.Missing) > 0 {
		row.Detail += "; missing: " + strings.Join(ll.Missing, "; ")
	}
	return row
}

// isolationRow says what the report of a jail had in force: a warning for
// each namespace not created and each thing not enforced, as asked.
func isolationRow(res *jail.Result, spec jail.Spec) selftestRow {
	iso := res.Isolation
	detail := fmt.Sprintf("namespaces %s; root %s; cgroup %s; seccomp %s",
		strings.Join(iso.Namespaces, ","), iso.Root, iso.Cgroup, iso.Seccomp)
	row := selftestRow{Name: "isolation", Result: verdictPass, Detail: detail}
	var missing []string
	for _, ns := range jail.Namespaces {
		if !slices.Contains(iso.Namespaces, ns) {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		row.Result = verdictWarn
		row.Detail += "; no " + strings.Join(missing, ",") + " namespace"
		if len(spec.DisableNamespaces) > 0 {
			row.Detail += " (--no-" + strings.Join(spec.DisableNamespaces, "ns, --no-") + "ns)"
		}
	}
	if len(iso.NotEnforced) > 0 {
		row.Result = verdictWarn
		row.Detail += "; not enforced: " + strings.Join(iso.NotEnforced, "; ")
	}
	return row
}

// judgeReach: the connection to the host's listener must fail, and the
// listener must not have accepted one.
func judgeReach(r probeRun, h *selftestHost) selftestRow {
	addr := fmt.Sprintf("127.0.0.1:%d", h.port)
	refused, how, err := r.call("connect-lo " + strconv.Itoa(h.port))
	if n := h.accepted.Load(); n > 0 {
		refused, how = false, fmt.Sprintf("%s (the host's listener accepted %d connection(s))", how, n)
	}
	return refusedRow("network_reach", []attempt{{"connect to selftest's listener on the host's " + addr, refused, how}}, err)
}

// judgeInterfaces: the jail's network namespace has only lo, or lo and
// the veth of an egress network (mode).
func judgeInterfaces(r probeRun, mode string) selftestRow {
	a, ok := r.answer("read /proc/net/dev")
	if !ok || a.Err != "" {
		err := errors.New("reading /proc/net/dev: " + a.Err)
		if !ok {
			err = r.unanswered("read /proc/net/dev")
		}
		return refusedRow("network_interfaces", nil, err)
	}
	var names []string
	for _, line := range strings.Split(a.Value, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	list := strings.Join(names, ", ")
	switch {
	case mode == jail.NetworkHost:
		return selftestRow{Name: "network_interfaces", Result: verdictWarn, Detail: "the jail shares the host's network (--net host): " + list}
	case len(names) == 1 && names[0] == "lo":
		return selftestRow{Name: "network_interfaces", Result: verdictPass, Detail: "lo only"}
	case mode == jail.NetworkEgress && list == "lo, "+netns.JailIf:
		return selftestRow{Name: "network_interfaces", Result: verdictPass, Detail: "lo and " + netns.JailIf + ", the egress interface (a veth, or pasta's), whose rules the jail cannot change"}
	default:
		return selftestRow{Name: "network_interfaces", Result: verdictFail, Detail: "interfaces besides lo: " + list}
	}
}

// memoryProbe touches more memory than the limit allows: the OOM killer
// must end it.
func memoryProbe(h *selftestHost) selftestProbe {
	const name = "memory_limit"
	limit, swap := h.spec.MemoryMaxBytes, h.spec.SwapMaxBytes
	if limit == 0 {
		return selftestProbe{name: name, skip: "the profile sets no memory limit"}
	}
	size := limit + swap + 64<<20
	if h.memAvail > 0 && size > h.memAvail/2 {
		return selftestProbe{name: name, skip: fmt.Sprintf("the limit and swap (%s) are more than half of this host's available memory (%s): selftest does not fill them",
			mib(limit+swap), mib(h.memAvail))}
	}
	return selftestProbe{
		name: name,
		ops:  []string{"hog", strconv.FormatInt(size, 10)},
		judge: func(r probeRun) []selftestRow {
			row := selftestRow{Name: name}
			if ne := notEnforced(r.res, "memory"); ne != "" {
				row.Result, row.Detail = verdictWarn, "not enforced here (--allow-unenforced): "+ne
				return []selftestRow{row}
			}
			if r.res.Status == jail.StatusOOMKilled {
				row.Result = verdictPass
				row.Detail = fmt.Sprintf("touching %s under a %s limit was OOM-killed (oom_kills %d", mib(size), mib(limit), r.res.OOMKills)
				if p := r.res.MemoryPeakBytes; p != nil {
					row.Detail += ", peak " + mib(*p)
				}
				row.Detail += ")"
				return []selftestRow{row}
			}
			refused, how, err := r.call("hog " + strconv.FormatInt(size, 10))
			switch {
			case err != nil:
				return []selftestRow{refusedRow(name, nil, err)}
			case refused:
				row.Result, row.Detail = verdictWarn, "the allocation was refused ("+how+"), before the cgroup limit: an rlimit? The limit itself was not tested"
			default:
				row.Result, row.Detail = verdictFail, fmt.Sprintf("touched %s under a %s limit and was not killed", mib(size), mib(limit))
			}
			return []selftestRow{row}
		},
	}
}

// pidsProbe forks until fork fails: it must fail with EAGAIN, within the
// limit.
func pidsProbe(spec jail.Spec) selftestProbe {
	const name, most = "pids_limit", 1024
	limit := spec.PidsMax
	if limit == 0 {
		return selftestProbe{name: name, skip: "the profile sets no pids limit"}
	}
	if limit > most {
		return selftestProbe{name: name, skip: fmt.Sprintf("the limit (%d) is above the %d processes selftest starts", limit, most)}
	}
	tries := strconv.FormatInt(limit+16, 10)
	return selftestProbe{
		name: name,
		ops:  []string{"fork-until-eagain", tries},
		judge: func(r probeRun) []selftestRow {
			row := selftestRow{Name: name}
			if ne := notEnforced(r.res, "pids"); ne != "" {
				row.Result, row.Detail = verdictWarn, "not enforced here (--allow-unenforced): "+ne
				return []selftestRow{row}
			}
			a, ok := r.answer("fork-until-eagain " + tries)
			if !ok {
				return []selftestRow{refusedRow(name, nil, r.unanswered("fork-until-eagain "+tries))}
			}
			var forked, threads int64
			fmt.Sscanf(a.Value, "forked=%d threads=%d", &forked, &threads)
			peak := "the kernel gives no peak"
			if p := r.res.PidsPeak; p != nil {
				peak = fmt.Sprintf("peak %d", *p)
			}
			switch {
			case a.Err != "EAGAIN" && a.Err != "":
				row.Result, row.Detail = verdictFail, fmt.Sprintf("fork failed with %s, not EAGAIN, after %d processes", a.Err, forked)
			case a.Err == "":
				row.Result, row.Detail = verdictFail, fmt.Sprintf("forked %d processes under a limit of %d without EAGAIN", forked, limit)
			case r.res.PidsPeak != nil && *r.res.PidsPeak > limit:
				row.Result, row.Detail = verdictFail, fmt.Sprintf("fork got EAGAIN, but the jail had %d tasks at once under a limit of %d", *r.res.PidsPeak, limit)
			case !slices.Contains(r.res.LimitsHit, "pids"):
				row.Result, row.Detail = verdictWarn, fmt.Sprintf("fork got EAGAIN after %d processes, but the cgroup refused none (an rlimit, such as nproc, came first): the limit itself was not tested", forked)
			default:
				row.Result = verdictPass
				row.Detail = fmt.Sprintf("fork got EAGAIN after %d processes beside the probe's %d threads and the jail's PID 1 (limit %d, %s)", forked, threads, limit, peak)
			}
			return []selftestRow{row}
		},
	}
}

// selftestTimeout bounds the timeout the timeout probe waits for, so that
// selftest stays quick; the profile's longer one is the same mechanism.
const selftestTimeout = time.Second

// timeoutProbe sleeps beyond the timeout: the jail must be killed.
func timeoutProbe(spec jail.Spec) selftestProbe {
	const name = "timeout"
	if spec.Timeout == 0 {
		return selftestProbe{name: name, skip: "the profile sets no timeout"}
	}
	timeout := min(time.Duration(spec.Timeout), selftestTimeout)
	sleep := (timeout + 2*time.Second).String()
	return selftestProbe{
		name:   name,
		ops:    []string{"sleep", sleep},
		slow:   true,
		adjust: func(s *jail.Spec) { s.Timeout = jail.Duration(timeout) },
		judge: func(r probeRun) []selftestRow {
			row := selftestRow{Name: name}
			shortened := shortenedNote(timeout, time.Duration(spec.Timeout))
			switch r.res.Status {
			case jail.StatusTimedOut:
				row.Result = verdictPass
				row.Detail = fmt.Sprintf("a sleep of %s was killed after %d ms by a %s timeout%s", sleep, r.res.WallTimeMS, timeout, shortened)
			case jail.StatusExited:
				row.Result = verdictFail
				row.Detail = fmt.Sprintf("a sleep of %s ended by itself under a %s timeout%s", sleep, timeout, shortened)
			default:
				row.Result, row.Detail = verdictFail, "not probed: the probe ended ("+r.ended()+")"+stderrSuffix(r.res.Stderr)
			}
			return []selftestRow{row}
		},
	}
}

// shortenedNote says that a probe used a shorter limit than the profile's.
func shortenedNote(used, profile time.Duration) string {
	if used < profile {
		return fmt.Sprintf(" (the profile's %s, shortened for this probe)", profile)
	}
	return ""
}

// cpuTimeProbe burns more CPU time than the limit allows: the jail must
// be killed for it.
func cpuTimeProbe(spec jail.Spec) selftestProbe {
	const name = "cpu_time"
	if spec.CPUTime == 0 {
		return selftestProbe{name: name, skip: "the profile sets no CPU time limit"}
	}
	limit := min(time.Duration(spec.CPUTime), selftestTimeout)
	burn := (limit + time.Second).String()
	return selftestProbe{
		name: name,
		ops:  []string{"spin", burn},
		slow: true,
		adjust: func(s *jail.Spec) {
			s.CPUTime = jail.Duration(limit)
			// Under a small --cpus the burn takes longer than its CPU time;
			// the timeout must not end it first.
			s.Timeout = jail.Duration(20 * time.Second)
		},
		judge: func(r probeRun) []selftestRow {
			row := selftestRow{Name: name}
			shortened := shortenedNote(limit, time.Duration(spec.CPUTime))
			if ne := notEnforced(r.res, "cpu-time"); ne != "" {
				row.Result, row.Detail = verdictWarn, "not enforced here (--allow-unenforced): "+ne
				return []selftestRow{row}
			}
			switch r.res.Status {
			case jail.StatusCPUTimeExceeded:
				row.Result = verdictPass
				row.Detail = fmt.Sprintf("burning %s of CPU was killed by a %s CPU time limit%s (cpu %d ms)", burn, limit, shortened, r.res.CPUUserMS+r.res.CPUSystemMS)
			case jail.StatusExited:
				row.Result = verdictFail
				row.Detail = fmt.Sprintf("burned %s of CPU under a %s CPU time limit and was not killed%s", burn, limit, shortened)
			default:
				row.Result, row.Detail = verdictFail, "not probed: the probe ended ("+r.ended()+")"+stderrSuffix(r.res.Stderr)
			}
			return []selftestRow{row}
		},
	}
}

// notEnforced returns the report's not_enforced entry of limit, or "".
func notEnforced(res *jail.Result, limit string) string {
	for _, ne := range res.Isolation.NotEnforced {
		if strings.HasPrefix(ne, limit+":") {
			return ne
		}
	}
	return ""
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// memAvailable returns MemAvailable of /proc/meminfo in bytes, or 0.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	v := statusField(string(b), "MemAvailable")
	kib, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0
	}
	return kib << 10
}
