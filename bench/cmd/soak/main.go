// Command soak is a fault-injection soak of jail. It runs
//
//	jail run --profile strict --memory 64M --pids 64 --json -- sh -c 'echo soak-<pid>-<i>; head -c 4096 /dev/urandom | wc -c; sleep 0.0XY'
//
// -n times, -j at once, and SIGKILLs the jail process of a fraction (-kill)
// of the runs at a random moment: in its first millisecond (before the
// clone of its init), during the set-up, while the workload runs, or around
// the workload's end (the teardown). Every run that was not killed must
// exit 0 with a report that is exactly right: status exited, exit code 0,
// the workload's output and nothing else, no limit hit, no error, a v1 or
// v2 cgroup, and no cgroup of its own left behind. Then it checks the host
// for what the runs left: mounts, processes, cgroups, ptys, temporary files
// and state (/run/jail), after the runs and again after `jail check
// --clean`, which removes the cgroups of killed jails. It uses the standard
// library only, like bench/cmd/benchrun.
//
//	soak -jail ./jail -n 10000 -j 8 -kill 0.1 -o /tmp/soak-out
//
// The kill delays are drawn from four windows. 20 % fall in the first
// millisecond after the start (the Go runtime's start, before any clone)
// and 30 % between then and the workload's usual exec, as measured by a
// warm-up (-warmup runs, not killed, under the same load); 25 % fall while
// the workload sleeps and 25 % over jail's usual teardown after it, both
// counted from the moment the tracker saw that run's workload exec, so
// that they hit the run's end whatever the load did to its set-up. The
// phase a kill hit is what the tracker saw in /proc just before the kill
// (a child of jail in a new pid namespace, that child's child and whether
// it has exec'd, whether jail has begun its report), not the delay. A kill
// that comes after jail has exited by itself is counted as late, and that
// run is checked like any other.
//
// A leak is, against a snapshot before the first run: more lines in
// /proc/self/mountinfo, or one that mentions jail; a process of this jail
// binary or with this soak's marker in its command line; a cgroup
// directory of a jail process the soak started (its name holds the pid and
// start time); a pty held by such a process; a new entry in /tmp, $TMPDIR
// or the TMPDIR the soak gives jail, owned by a uid the jails run as and
// still there -settle after the runs (the go tool's and this repository's
// tests' entries, go-build*, jail-it-*, jail-bench*, are not counted); a
// new entry in /run/jail. Before `jail check --clean`, processes and mounts
// must already be gone; the killed jails' cgroups are counted, and removed
// by it. Other jails sharing the cgroup hierarchies are left out of the
// counts, but --clean removes their stale groups too, so the soak first
// gives their owners -settle to do it.
//
// It prints figures and a verdict. It is not a timed test: the exit status
// is 1 on a leak or a wrong report (or when interrupted), 2 on bad flags or
// when it cannot start, and never depends on how fast anything was.
// -o writes soak.csv, one row per run.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
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

	"github.com/jailrt/jail/bench/internal/stats"
	"github.com/jailrt/jail/internal/procfs"
)

func main() {
	pass, err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	case !pass:
		os.Exit(1)
	}
}

// config is the soak's flags.
type config struct {
	runs, inFlight, warmup int
	killFraction           float64
	jail                   string
	seed                   uint64
	outDir                 string
	settle, delay          time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.runs, "n", 10000, "runs")
	fs.IntVar(&c.inFlight, "j", 8, "runs in flight at once")
	fs.Float64Var(&c.killFraction, "kill", 0.1, "fraction of the runs whose jail is SIGKILLed")
	fs.StringVar(&c.jail, "jail", "jail", "the jail binary (`PATH`, or a name looked up in $PATH)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the plan: which runs are killed, in which window, the workloads' sleeps (0: from the clock; printed)")
	fs.StringVar(&c.outDir, "o", "", "write soak.csv, one row per run, into `OUTDIR`")
	fs.IntVar(&c.warmup, "warmup", 40, "warm-up runs (not killed, checked) that measure the jail's timeline for the kill windows")
	fs.DurationVar(&c.settle, "settle", 2*time.Second, "how long a killed jail's processes and pipes may take to go away")
	fs.DurationVar(&c.delay, "delay", 0, "kill every killed run at this delay instead of a drawn one (to reproduce a finding)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() != 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.runs < 1 || c.inFlight < 1 || c.warmup < 0:
		return c, errors.New("-n and -j must be at least 1, -warmup not negative")
	case c.killFraction < 0 || c.killFraction > 1:
		return c, errors.New("-kill must be between 0 and 1")
	case c.settle <= 0 || c.delay < 0:
		return c, errors.New("-settle must be positive, -delay not negative")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) (pass bool, err error) {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return false, err
	}
	jailPath, err := resolve(c.jail)
	if err != nil {
		return false, err
	}
	if c.outDir != "" {
		if err := os.MkdirAll(c.outDir, 0o755); err != nil {
			return false, fmt.Errorf("-o: %w", err)
		}
		if c.outDir, err = filepath.Abs(c.outDir); err != nil {
			return false, fmt.Errorf("-o: %w", err)
		}
	}
	// jail's own TMPDIR, so that a temporary file jail ever leaves is ours
	// to see, apart from what others put in /tmp meanwhile.
	privateTmp, err := os.MkdirTemp("", "jail-soak-")
	if err != nil {
		return false, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(privateTmp)

	pidNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return false, fmt.Errorf("our pid namespace: %w", err)
	}
	cgroupDirs := procfs.OwnCgroupDirs()
	if len(cgroupDirs) == 0 {
		// The runs have limits, so jail makes groups below ours: without
		// a directory to look in, a leaked group would go unseen.
		return false, errors.New("no cgroup directory of this process found under /sys/fs/cgroup: the soak could not see leaked groups")
	}
	r := &runner{
		jail:       jailPath,
		env:        append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TMPDIR=") }), "TMPDIR="+privateTmp),
		cgroupDirs: cgroupDirs,
		settle:     c.settle,
		pidNS:      pidNS,
		started:    map[[2]uint64]bool{},
	}
	tempDirs := []string{"/tmp", privateTmp}
	if d := os.TempDir(); !slices.Contains(tempDirs, d) {
		tempDirs = append(tempDirs, d)
	}
	ob := &observer{
		jail:       jailPath,
		marker:     fmt.Sprintf("soak-%d-", os.Getpid()),
		cgroupDirs: r.cgroupDirs,
		tempDirs:   tempDirs,
		skipTemp:   []string{privateTmp, c.outDir},
		started:    r.wasStarted,
		uids:       []uint32{uint32(os.Geteuid())},
	}
	if os.Geteuid() == 0 {
		ob.uids = append(ob.uids, 65534)
	}
	header(stdout, c, jailPath, r.cgroupDirs)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	before := ob.snapshot()
	began := time.Now()

	// Warm-up: the timeline the kill windows are drawn over, measured
	// under the same load as the soak.
	warm := make([]plan, c.warmup)
	for i := range warm {
		warm[i] = plan{id: fmt.Sprintf("w%d", i), marker: fmt.Sprintf("%sw%d", ob.marker, i), sleep: time.Duration(i%46) * time.Millisecond}
	}
	warmOut := r.all(ctx, warm, c.inFlight, 2*time.Millisecond, nil)
	tl := measureTimeline(warmOut)
	fmt.Fprintf(stdout, "warm-up:  %d runs; medians: init seen at %.1f ms, workload exec'd at %.1f ms; jail exits %.1f ms after the workload's sleep, %.1f ms after its end\n",
		len(warmOut), ms(tl.init), ms(tl.exec), ms(tl.tail), ms(tl.teardown))

	plans := makePlans(c, ob.marker, tl)
	r.timeline, r.fixedDelay = tl, c.delay
	soakBegan := time.Now()
	var finished atomic.Int64
	step := max(c.runs/10, 1)
	outs := r.all(ctx, plans, c.inFlight, 0, func(o *outcome) {
		if n := finished.Add(1); n%int64(step) == 0 {
			fmt.Fprintf(stderr, "soak: %d/%d runs, %.1f s\n", n, c.runs, time.Since(soakBegan).Seconds())
		}
	})
	elapsed := time.Since(soakBegan)
	interrupted := ctx.Err() != nil
	stop()

	// The kernel takes a killed jail's processes and mounts with it; give
	// it the settle time.
	afterRuns := ob.snapshot()
	for deadline := time.Now().Add(c.settle); len(afterRuns.processes) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		afterRuns = ob.snapshot()
	}
	// `jail check --clean` removes every stale group below our cgroups,
	// other jails' too. Give theirs the settle time to be cleaned by their
	// own users first (a test suite that kills a jail runs --clean itself).
	for deadline := time.Now().Add(c.settle); afterRuns.otherStale > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		afterRuns = ob.snapshot()
	}
	cleanOut, cleanErr := exec.Command(jailPath, "check", "--clean").CombinedOutput()
	afterClean := ob.snapshot()
	// The runs are over: what a jail left stays. A new temporary entry
	// that goes away is another user's work in progress (a test suite on
	// a shared machine); give those the settle time.
	for deadline := time.Now().Add(c.settle); hasKind(leaks(before, afterClean), leakTemp) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		afterClean = ob.snapshot()
	}

	if c.outDir != "" {
		if err := writeCSV(filepath.Join(c.outDir, "soak.csv"), append(slices.Clone(outs), warmOut...)); err != nil {
			return false, err
		}
	}
	pass = figures(stdout, c, outs, warmOut, elapsed, time.Since(began), before, afterRuns, afterClean, cleanOut, cleanErr)
	if interrupted {
		fmt.Fprintf(stdout, "verdict: INCOMPLETE: interrupted after %d of %d runs\n", len(outs), c.runs)
		return false, nil
	}
	return pass, nil
}

// resolve returns the absolute path of the jail binary, with symlinks
// resolved, as /proc/PID/exe shows it.
func resolve(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("-jail: %w", err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", fmt.Errorf("-jail: %w", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", fmt.Errorf("-jail: %w", err)
	}
	return p, nil
}

func header(w io.Writer, c config, jailPath string, cgroupDirs []string) {
	uname := func() string {
		b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		return strings.TrimSpace(string(b))
	}
	version, _ := exec.Command(jailPath, "version").Output()
	fmt.Fprintf(w, "date:     %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "kernel:   %s, %d CPUs, loadavg %s\n", uname(), cpus(), loadavg())
	fmt.Fprintf(w, "jail:     %s (%s)\n", jailPath, strings.TrimSpace(string(version)))
	fmt.Fprintf(w, "soak:     %d runs, %d in flight, kill %.0f%% (seed %d)", c.runs, c.inFlight, 100*c.killFraction, c.seed)
	if c.delay > 0 {
		fmt.Fprintf(w, ", every kill at %v", c.delay)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "cgroups:  %s\n", strings.Join(cgroupDirs, " "))
	if os.Geteuid() != 0 {
		fmt.Fprintln(w, "note:     not root: --memory and --pids may be refused, and every run then fails")
	}
}

func cpus() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "\nprocessor\t") + 1
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// all runs the plans, inFlight at a time, until ctx is done; it returns
// the outcomes of the runs that ran, in index order. A kill that came late
// (the jail had exited by itself) is carried over to the next run to start
// that has none, with the same window and place in it, so that the share
// of killed runs stays what -kill says.
func (r *runner) all(ctx context.Context, plans []plan, inFlight int, trackEvery time.Duration, finished func(*outcome)) []outcome {
	var (
		mu   sync.Mutex
		owed []plan // late kills not carried over yet
	)
	carry := func(p plan) plan {
		mu.Lock()
		defer mu.Unlock()
		if p.kill || len(owed) == 0 {
			return p
		}
		k := owed[0]
		owed = owed[1:]
		p.setKill(k.window, k.u, r.timeline, r.fixedDelay)
		p.carriedFrom = k.id
		return p
	}
	outs := make([]*outcome, len(plans))
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range plans {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for i := range next {
				o := r.do(carry(plans[i]), trackEvery)
				if o.killed == killLate {
					mu.Lock()
					owed = append(owed, o.plan)
					mu.Unlock()
				}
				outs[i] = &o
				if finished != nil {
					finished(&o)
				}
			}
		})
	}
	wg.Wait()
	var ran []outcome
	for _, o := range outs {
		if o != nil {
			ran = append(ran, *o)
		}
	}
	return ran
}

// measured is the jail's timeline from the warm-up, medians.
type measured struct {
	init time.Duration // the jail's init appears
	exec time.Duration // the workload has exec'd
	// tail is from the end of the workload's sleep to jail's exit: the
	// rest of the workload, init's exit, jail's teardown and report.
	tail time.Duration
	// teardown is from the workload's end, as the tracker saw it, to
	// jail's exit.
	teardown time.Duration
}

func measureTimeline(outs []outcome) measured {
	var inits, execs, tails, teardowns []float64
	for _, o := range outs {
		if o.timeline.init > 0 {
			inits = append(inits, float64(o.timeline.init))
		}
		if o.timeline.exec > 0 {
			execs = append(execs, float64(o.timeline.exec))
			tails = append(tails, float64(o.wall-o.timeline.exec-o.sleep))
		}
		if o.timeline.workloadGone > 0 {
			teardowns = append(teardowns, float64(o.wall-o.timeline.workloadGone))
		}
	}
	med := func(xs []float64) time.Duration { return time.Duration(stats.Quantile(xs, 0.5)) }
	m := measured{init: med(inits), exec: med(execs), tail: med(tails), teardown: med(teardowns)}
	// Without a warm-up (or if the tracker saw nothing), about what
	// bench/README.md measured on this machine.
	if len(execs) == 0 {
		m = measured{init: 7 * time.Millisecond, exec: 12 * time.Millisecond, tail: 4 * time.Millisecond}
	}
	m.tail = max(m.tail, time.Millisecond)
	return m
}

// Kill windows, with their shares of the kills.
var windows = []struct {
	name  string
	share float64
}{
	{"first ms", 0.20}, // from the start: the Go runtime's start, before any clone
	{"setup", 0.30},    // from the start: 1 ms to the workload's usual exec
	{"workload", 0.25}, // from the workload's exec, over its sleep
	{"end", 0.25},      // from the workload's exec: after its sleep, until jail's usual exit and a little after
}

// makePlans draws every run's plan from the seed: exactly -kill of the
// runs are killed (rounded), each in a window drawn by the windows'
// shares. The draws do not depend on the timeline, so one seed gives the
// same runs, windows and places in them on any machine; the delays scale
// with the measured timeline.
func makePlans(c config, marker string, tl measured) []plan {
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	toKill := map[int]bool{}
	for _, i := range rng.Perm(c.runs)[:int(math.Round(float64(c.runs)*c.killFraction))] {
		toKill[i] = true
	}
	plans := make([]plan, c.runs)
	for i := range plans {
		p := plan{id: strconv.Itoa(i), marker: marker + strconv.Itoa(i), sleep: time.Duration(rng.IntN(46)) * time.Millisecond}
		w, u := rng.Float64(), rng.Float64()
		if toKill[i] {
			window := windows[len(windows)-1].name
			for _, win := range windows {
				if w < win.share {
					window = win.name
					break
				}
				w -= win.share
			}
			p.setKill(window, u, tl, c.delay)
		}
		plans[i] = p
	}
	return plans
}

// killWindow returns the bounds of a window for a workload that sleeps
// sleep: from the start, or for "workload" and "end" from its exec.
func killWindow(name string, sleep time.Duration, tl measured) (lo, hi time.Duration) {
	switch name {
	case "first ms":
		return 0, time.Millisecond
	case "setup":
		return time.Millisecond, max(tl.exec, 2*time.Millisecond)
	case "workload":
		return 0, sleep
	default: // "end": over jail's usual teardown
		return sleep + max(tl.tail-tl.teardown-time.Millisecond, 0), sleep + tl.tail
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func writeCSV(path string, outs []outcome) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write([]string{"run", "sleep_ms", "kill_window", "kill_delay_ms", "kill_delay_from", "kill_carried_from", "killed", "killed_at_ms", "phase", "init_seen_ms", "exec_seen_ms", "wall_ms", "status", "init_outlived_ms", "left_cgroups", "result"})
	for _, o := range outs {
		result := "ok"
		if len(o.failures) > 0 {
			var fs []string
			for _, f := range o.failures {
				fs = append(fs, f.String())
			}
			result = "FAIL: " + strings.Join(fs, "; ")
		}
		w.Write([]string{
			o.id,
			strconv.FormatInt(o.sleep.Milliseconds(), 10),
			o.window, fmtMS(o.delay, o.kill), from(o.plan), o.carriedFrom, o.killed, fmtMS(o.killedAt, o.killed != notKilled && o.killedAt > 0), o.phase,
			fmtMS(o.timeline.init, o.timeline.init > 0), fmtMS(o.timeline.exec, o.timeline.exec > 0),
			fmtMS(o.wall, true), o.status, fmtMS(o.initOutlived, o.killed == killed), strconv.Itoa(o.leftCgroups), result,
		})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	return nil
}

// from says what a kill delay counts from.
func from(p plan) string {
	switch {
	case !p.kill:
		return ""
	case p.fromExec:
		return "exec"
	}
	return "start"
}

func fmtMS(d time.Duration, ok bool) string {
	if !ok {
		return ""
	}
	return strconv.FormatFloat(ms(d), 'f', 3, 64)
}

// figures prints the soak's figures and verdict, and reports whether it
// passed: no wrong report, no leak.
func figures(w io.Writer, c config, outs, warm []outcome, soakTime, total time.Duration, before, afterRuns, afterClean host, cleanOut []byte, cleanErr error) bool {
	var (
		byPhase                = map[string][]float64{} // kill times, ms
		late, planned, checked int
		carried                int
		failedRuns             int
		byReason               = map[string]int{}
		walls                  []float64
		outlived               []float64
		leftRuns, leftDirs     int
	)
	var failed []outcome
	for _, o := range append(slices.Clone(outs), warm...) {
		if o.kill {
			planned++
		}
		if o.carriedFrom != "" {
			carried++
		}
		switch o.killed {
		case killed:
			byPhase[o.phase] = append(byPhase[o.phase], ms(o.killedAt))
			if o.initOutlived > 0 {
				outlived = append(outlived, ms(o.initOutlived))
			}
			if o.leftCgroups > 0 {
				leftRuns++
				leftDirs += o.leftCgroups
			}
		case killLate:
			late++
		}
		if o.killed != killed {
			checked++
			if len(o.failures) == 0 {
				walls = append(walls, ms(o.wall))
			}
		}
		if len(o.failures) > 0 {
			failedRuns++
			failed = append(failed, o)
			for _, f := range o.failures {
				byReason[f.reason]++
			}
		}
	}
	nKilled := 0
	for _, ks := range byPhase {
		nKilled += len(ks)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "== figures ==")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "runs\t%d (+%d warm-up), %d in flight\n", len(outs), len(warm), c.inFlight)
	fmt.Fprintf(tw, "killed\t%d (%.1f%% of the runs), by phase:\n", nKilled, 100*float64(nKilled)/float64(max(len(outs), 1)))
	for _, ph := range phases {
		ks := byPhase[ph]
		if len(ks) == 0 {
			fmt.Fprintf(tw, "  %s\t0\n", ph)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d, killed at %.1f-%.1f ms (median %.1f)\n", ph, len(ks), stats.Quantile(ks, 0), stats.Quantile(ks, 1), stats.Quantile(ks, 0.5))
	}
	fmt.Fprintf(tw, "kills\t%d drawn from the seed; %d came late (jail had exited by itself: that run is checked as any other, and its kill carried over to the next run to start), %d carried over, %d still owed at the end\n",
		planned-carried, late, carried, late-carried)
	fmt.Fprintf(tw, "checked\t%d runs not killed (warm-up included), %d with a wrong report or a leak of their own\n", checked, failedRuns-countKilled(failed))
	fmt.Fprintf(tw, "failures\t%d runs", failedRuns)
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for i, r := range reasons {
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(tw, "%s%s %d", sep, r, byReason[r])
	}
	fmt.Fprintln(tw)
	if len(outlived) > 0 {
		fmt.Fprintf(tw, "init after kill\tstill alive after its jail was reaped in %d runs, for up to %.1f ms (median %.1f)\n",
			len(outlived), stats.Quantile(outlived, 1), stats.Quantile(outlived, 0.5))
	} else {
		fmt.Fprintf(tw, "init after kill\tgone by the time its jail was reaped in every killed run\n")
	}
	fmt.Fprintf(tw, "killed runs' cgroups\t%d runs left %d directories for jail check --clean (seen right after each kill)", leftRuns, leftDirs)
	if n := len(afterRuns.cgroups); n < leftDirs {
		// Only cgroup.Prune (`jail check --clean`, or the cgroup package's
		// tests) removes a dead jail's groups, and it prunes those of every
		// jail in the hierarchies it shares with ours.
		fmt.Fprintf(tw, "; %d still there after the runs: %d removed meanwhile by another process (a jail check --clean sharing the hierarchy)", n, leftDirs-n)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "time\t%.1f s for the runs (%.1f runs/s), %.1f s in all\n", soakTime.Seconds(), float64(len(outs))/soakTime.Seconds(), total.Seconds())
	fmt.Fprintf(tw, "wall, correct runs\tmedian %.1f ms, p99 %.1f ms, max %.1f ms (%d runs, jail's start to its reaping)\n",
		stats.Quantile(walls, 0.5), stats.Quantile(walls, 0.99), stats.Quantile(walls, 1), len(walls))
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "== host: before -> after the runs -> after jail check --clean ==")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, f func(host) string) {
		fmt.Fprintf(tw, "%s\t%s -> %s -> %s\n", name, f(before), f(afterRuns), f(afterClean))
	}
	row("mounts (/proc/self/mountinfo lines)", func(h host) string { return strconv.Itoa(h.mounts) })
	row("mounts mentioning jail", func(h host) string { return strconv.Itoa(len(h.jailMounts)) })
	row("jail processes", func(h host) string { return strconv.Itoa(len(h.processes)) })
	row("jail cgroup directories", func(h host) string { return strconv.Itoa(len(h.cgroups)) })
	row("processes in them", func(h host) string { return strconv.Itoa(h.cgroupTasks) })
	row("other jails' cgroup directories (not counted)", func(h host) string { return fmt.Sprintf("%d (%d stale)", h.otherCgroups, h.otherStale) })
	row("ptys (/proc/sys/kernel/pty/nr)", func(h host) string {
		return fmt.Sprintf("%d (%d other holders)", h.ptys, h.otherPtyHolders)
	})
	row("temp entries", func(h host) string { return strconv.Itoa(len(h.temp)) })
	row("other tools' and users' temp entries (not counted)", func(h host) string { return strconv.Itoa(len(h.otherTemp)) })
	row(stateDir+" entries", func(h host) string {
		if h.state == nil {
			return "absent"
		}
		return strconv.Itoa(len(h.state))
	})
	tw.Flush()
	var removed, removedOthers int
	for _, line := range strings.Split(string(cleanOut), "\n") {
		if d, ok := strings.CutPrefix(line, "removed "); ok {
			removed++
			if !slices.Contains(afterRuns.cgroups, d) {
				removedOthers++
			}
		}
	}
	fmt.Fprintf(w, "jail check --clean: removed %d directories (%d of other jails)", removed, removedOthers)
	if cleanErr != nil {
		fmt.Fprintf(w, ", and failed: %v: %s", cleanErr, strings.TrimSpace(string(cleanOut)))
	}
	fmt.Fprintln(w)

	// Before --clean the kernel must already have taken the killed jails'
	// processes and mounts; their cgroups stay until --clean, and the rest
	// is judged after it.
	var beforeClean, pending []leak
	expected := 0
	for _, l := range leaks(before, afterRuns) {
		switch l.kind {
		case leakCgroup:
			expected++
		case leakMount, leakProcess:
			beforeClean = append(beforeClean, l)
		default:
			pending = append(pending, l)
		}
	}
	afterCleanLeaks := leaks(before, afterClean)
	byMarker := map[string]outcome{}
	for _, o := range append(slices.Clone(outs), warm...) {
		byMarker[o.marker] = o
	}
	fmt.Fprintf(w, "leaks after the runs, before --clean: %d processes or mounts (and %d cgroup directories of killed jails, expected; %d of other kinds, judged after --clean)\n",
		len(beforeClean), expected, len(pending))
	printList(w, annotate(slices.Concat(beforeClean, pending), byMarker))
	fmt.Fprintf(w, "leaks after --clean: %d\n", len(afterCleanLeaks))
	printList(w, annotate(afterCleanLeaks, byMarker))

	if len(failed) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "== failed runs (first 20; all in soak.csv with -o) ==")
		for i, o := range failed {
			if i == 20 {
				break
			}
			fmt.Fprintf(w, "run %s: killed %s", o.id, o.killed)
			if o.kill {
				fmt.Fprintf(w, " (window %s, delay %.2f ms after the %s, killed at %.2f ms, phase %s)", o.window, ms(o.delay), from(o.plan), ms(o.killedAt), orDash(o.phase))
			}
			fmt.Fprintf(w, ", %s, wall %.1f ms\n", o.status, ms(o.wall))
			for _, f := range o.failures {
				fmt.Fprintf(w, "    %s\n", f)
			}
		}
	}

	pass := failedRuns == 0 && len(beforeClean) == 0 && len(afterCleanLeaks) == 0 && cleanErr == nil
	fmt.Fprintln(w)
	if pass {
		fmt.Fprintf(w, "verdict: PASS: %d runs, %d killed, every report of the rest right, nothing left on the host\n", len(outs), nKilled)
	} else {
		fmt.Fprintf(w, "verdict: FAIL: %d runs failed, %d processes or mounts left before --clean, %d leaks after it\n", failedRuns, len(beforeClean), len(afterCleanLeaks))
	}
	return pass
}

// annotate adds to each leaked process that carries a run's marker what
// happened to that run.
func annotate(leaks []leak, byMarker map[string]outcome) []string {
	out := make([]string, len(leaks))
	for i, l := range leaks {
		out[i] = l.String()
		for _, word := range strings.Fields(l.what) {
			if o, ok := byMarker[strings.TrimSuffix(word, ";")]; ok {
				out[i] += fmt.Sprintf(" [run %s: killed %s, %s", o.id, o.killed, o.status)
				if o.kill {
					out[i] += fmt.Sprintf(", window %s, killed at %.2f ms, phase %s", o.window, ms(o.killedAt), orDash(o.phase))
				}
				out[i] += "]"
				break
			}
		}
	}
	return out
}

func hasKind(leaks []leak, kind string) bool {
	return slices.ContainsFunc(leaks, func(l leak) bool { return l.kind == kind })
}

func countKilled(outs []outcome) int {
	n := 0
	for _, o := range outs {
		if o.killed == killed {
			n++
		}
	}
	return n
}

func printList(w io.Writer, xs []string) {
	for i, x := range xs {
		if i == 20 {
			fmt.Fprintf(w, "    ... and %d more\n", len(xs)-i)
			break
		}
		fmt.Fprintf(w, "    %s\n", x)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
