// Command benchrun times short-lived commands against each other and reports
// the memory (PSS) of a running jail. It is the timing helper of
// bench/run.sh and uses the standard library only.
//
// Timing mode runs the contenders interleaved: after -w warm-up rounds,
// each of -n rounds runs every contender once, the order rotated by one per
// round, so drift (frequency scaling, page cache, a noisy neighbour) hits
// every contender alike. Each run is one fork+exec+wait4 with no shell in
// between (syscall.ForkExec, which vforks), timed with the monotonic clock
// from just before the fork to just after wait4 returns:
//
//	benchrun -n 200 -w 20 -csv samples.csv \
//		-c 'floor=unshare -Urpf --mount-proc -n -i -u /bin/true' \
//		-c 'jail=./jail run --profile strict -- /bin/true'
//
// A contender's command is split on blanks (no quoting). The first
// contender is the baseline unless -base names another: each contender's
// "ratio" is the median over rounds of its time divided by the baseline's
// time in the same round. A contender that exits non-zero is reported with
// its status, dropped from the remaining rounds, and makes benchrun exit 1.
//
// Throughput mode (-inflight K) asks how many runs per second a contender
// sustains when K are in flight, and what that does to each run's latency.
// Each of -n rounds runs, for each contender in the rotated order, a batch
// of -batch runs: K goroutines each start a run and wait for it (as the
// timing mode does, one fork+exec+wait4 with no shell), then take the next,
// until the batch is done. A batch's throughput is its runs divided by its
// wall time, from before the first fork to the last wait4. Here -n and -w
// count rounds of batches and default to 10 and 1:
//
//	benchrun -inflight 8 -batch 200 -n 10 -w 1 \
//		-c 'floor=unshare -Urpf --mount-proc -n -i -u /bin/true' \
//		-c 'jail=./jail run --profile strict -- /bin/true'
//
// It reports, per contender, the median over rounds of the throughput and
// of its ratio to the baseline's in the same round (above 1 is faster),
// the median CPU time of a run, and the p50, p99 and maximum of all runs'
// latencies with the count of runs slower than -slow (100 ms).
//
// PSS mode starts a command that runs a jail (e.g. `jail run --profile
// strict -- sleep 2`), waits until the jail's init (a child of the jail
// process whose comm is "jail:init") has forked the workload, then reads
// Pss from /proc/PID/smaps_rollup for the jail process and its init:
//
//	benchrun -pss -runs 5 -- ./jail run --profile strict -- sleep 2
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
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
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

// contenders collects repeated -c flags.
type contenders []*contender

func (cs *contenders) String() string { return "" }

func (cs *contenders) Set(v string) error {
	name, cmdline, ok := strings.Cut(v, "=")
	argv := strings.Fields(cmdline)
	if !ok || name == "" || len(argv) == 0 {
		return errors.New("want NAME=COMMAND [ARGS...]")
	}
	for _, c := range *cs {
		if c.name == name {
			return fmt.Errorf("contender %q given twice", name)
		}
	}
	*cs = append(*cs, &contender{name: name, argv: argv})
	return nil
}

// contender is one command under test and its samples, one per round.
type contender struct {
	name string
	argv []string
	path string // argv[0] resolved in PATH

	wall, cpu []time.Duration // indexed by measured round
	failed    error

	// Throughput mode.
	rate  []float64       // runs per second, indexed by measured round
	batch []time.Duration // each measured round's batch, first fork to last wait4
	runs  []runSample     // every measured run, by round and start order
}

// runSample is one run of a throughput batch.
type runSample struct {
	round     int
	wall, cpu time.Duration
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cs contenders
	fs.Var(&cs, "c", "contender `NAME=COMMAND [ARGS...]` (repeatable; split on blanks)")
	rounds := fs.Int("n", 200, "measured rounds (with -inflight: 10 unless given)")
	warmup := fs.Int("w", 20, "warm-up rounds, run and not recorded (with -inflight: 1 unless given)")
	base := fs.String("base", "", "baseline contender for the ratios (default: the first)")
	csvPath := fs.String("csv", "", "write raw samples to `FILE` as CSV")
	idle := fs.Duration("idle", 0, "sleep this long before each run, so that each starts on a quiet machine (e.g. 100ms)")
	inflight := fs.Int("inflight", 0, "throughput mode: `K` runs in flight (0: the timing mode, one at a time)")
	batchRuns := fs.Int("batch", 200, "throughput mode: runs per contender per round")
	slow := fs.Duration("slow", 100*time.Millisecond, "throughput mode: count the runs slower than this")
	pss := fs.Bool("pss", false, "PSS mode: run the command after -- and measure the jail's memory")
	pssRuns := fs.Int("runs", 5, "PSS mode: runs (the median is reported)")
	settle := fs.Duration("settle", 200*time.Millisecond, "PSS mode: wait this long after the workload starts before reading")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pss {
		if fs.NArg() == 0 {
			return errors.New("-pss: give the command after --")
		}
		return runPSS(fs.Args(), *pssRuns, *settle, stdout, stderr)
	}
	if len(cs) == 0 || fs.NArg() != 0 {
		return errors.New("give contenders with -c NAME=COMMAND (and no other arguments)")
	}
	if *inflight < 0 || *batchRuns < 1 {
		return errors.New("-inflight must not be negative and -batch must be at least 1")
	}
	if *inflight > 0 {
		if *idle != 0 {
			return errors.New("-idle is for the timing mode (runs one at a time), not with -inflight")
		}
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if !given["n"] {
			*rounds = 10
		}
		if !given["w"] {
			*warmup = 1
		}
	}
	if *rounds < 1 || *warmup < 0 {
		return errors.New("-n must be at least 1 and -w not negative")
	}
	baseline := cs[0]
	if *base != "" {
		i := slices.IndexFunc(cs, func(c *contender) bool { return c.name == *base })
		if i < 0 {
			return fmt.Errorf("-base %q: no such contender", *base)
		}
		baseline = cs[i]
	}
	for _, c := range cs {
		p, err := exec.LookPath(c.argv[0])
		if err != nil {
			return fmt.Errorf("contender %s: %w", c.name, err)
		}
		c.path = p
	}

	loadBefore := loadavg()
	if *inflight > 0 {
		err := measureThroughput(cs, *rounds, *warmup, *batchRuns, *inflight, stderr)
		if *csvPath != "" {
			if werr := writeThroughputCSV(*csvPath, cs); werr != nil {
				return werr
			}
		}
		fmt.Fprintf(stdout, "%d rounds of %d runs per contender, %d in flight, after %d warm-up rounds, interleaved, order rotated per round; loadavg before %s, after %s\n",
			*rounds, *batchRuns, *inflight, *warmup, loadBefore, loadavg())
		reportThroughput(stdout, cs, baseline, *slow)
		return err
	}
	err := measure(cs, *rounds, *warmup, *idle, stderr)
	if *csvPath != "" {
		if werr := writeCSV(*csvPath, cs); werr != nil {
			return werr
		}
	}
	fmt.Fprintf(stdout, "%d rounds after %d warm-up rounds, interleaved, order rotated per round; loadavg before %s, after %s\n",
		*rounds, *warmup, loadBefore, loadavg())
	report(stdout, cs, baseline)
	return err
}

// measure runs the rounds. Samples of a contender that failed stop at the
// round it failed in.
func measure(cs []*contender, rounds, warmup int, idle time.Duration, stderr io.Writer) error {
	files, closeFiles, err := runFiles()
	if err != nil {
		return err
	}
	defer closeFiles()
	env := os.Environ()

	// No collection while timing: the heap stays tiny, and a GC cycle
	// between fork and wait4 would only add noise.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range cs {
		c.wall = make([]time.Duration, 0, rounds)
		c.cpu = make([]time.Duration, 0, rounds)
	}
	var failures []error
	for r := -warmup; r < rounds; r++ {
		for i := range cs {
			c := cs[(i+r+warmup)%len(cs)] // rotate the order by one each round
			if c.failed != nil {
				continue
			}
			time.Sleep(idle)
			wall, cpu, err := once(c, files, env)
			if err != nil {
				when := fmt.Sprintf("round %d", r)
				if r < 0 {
					when = fmt.Sprintf("warm-up round %d", r+warmup)
				}
				c.failed = fmt.Errorf("contender %s: %s in %s (%s)", c.name, err, when, strings.Join(c.argv, " "))
				fmt.Fprintln(stderr, "benchrun: FAILED", c.failed)
				failures = append(failures, c.failed)
				continue
			}
			if r >= 0 {
				c.wall = append(c.wall, wall)
				c.cpu = append(c.cpu, cpu)
			}
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d contenders failed (see above)", len(failures), len(cs))
	}
	return nil
}

// runFiles returns the standard files of a run: stdin and stdout are
// /dev/null; stderr stays ours so a failure shows its message next to
// benchrun's.
func runFiles() (files []uintptr, closeFiles func(), err error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, err
	}
	return []uintptr{devnull.Fd(), devnull.Fd(), os.Stderr.Fd()}, func() { devnull.Close() }, nil
}

// measureThroughput runs the throughput rounds: per round, a batch of
// batchRuns runs of each contender with inflight in flight. A contender
// whose run fails is dropped from the remaining rounds; the samples of the
// failed batch are not kept.
func measureThroughput(cs []*contender, rounds, warmup, batchRuns, inflight int, stderr io.Writer) error {
	files, closeFiles, err := runFiles()
	if err != nil {
		return err
	}
	defer closeFiles()
	env := os.Environ()

	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // as in measure
	for _, c := range cs {
		c.rate = make([]float64, 0, rounds)
		c.batch = make([]time.Duration, 0, rounds)
		c.runs = make([]runSample, 0, rounds*batchRuns)
	}
	samples := make([]runSample, batchRuns)
	var failures []error
	for r := -warmup; r < rounds; r++ {
		for i := range cs {
			c := cs[(i+r+warmup)%len(cs)]
			if c.failed != nil {
				continue
			}
			elapsed, err := batch(c, samples, inflight, files, env)
			if err != nil {
				when := fmt.Sprintf("round %d", r)
				if r < 0 {
					when = fmt.Sprintf("warm-up round %d", r+warmup)
				}
				c.failed = fmt.Errorf("contender %s: %s in %s (%s)", c.name, err, when, strings.Join(c.argv, " "))
				fmt.Fprintln(stderr, "benchrun: FAILED", c.failed)
				failures = append(failures, c.failed)
				continue
			}
			if r >= 0 {
				c.rate = append(c.rate, float64(batchRuns)/elapsed.Seconds())
				c.batch = append(c.batch, elapsed)
				for _, s := range samples {
					s.round = r
					c.runs = append(c.runs, s)
				}
			}
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d contenders failed (see above)", len(failures), len(cs))
	}
	return nil
}

// batch runs c len(samples) times with inflight runs at a time, fills
// samples in the order the runs started, and returns the batch's wall
// time from before the first fork to after the last wait4. After a run
// fails no new one starts; it returns the first failure once the runs
// under way have ended.
func batch(c *contender, samples []runSample, inflight int, files []uintptr, env []string) (time.Duration, error) {
	var (
		next     atomic.Int64
		stop     atomic.Bool
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range min(inflight, len(samples)) {
		wg.Go(func() {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(samples) {
					return
				}
				wall, cpu, err := once(c, files, env)
				if err != nil {
					stop.Store(true)
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("run %d of the batch: %w", i, err)
					}
					mu.Unlock()
					return
				}
				samples[i] = runSample{wall: wall, cpu: cpu}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// once runs c and returns its wall time and the CPU time (user+system) of
// it and its reaped descendants.
func once(c *contender, files []uintptr, env []string) (wall, cpu time.Duration, err error) {
	attr := &syscall.ProcAttr{Env: env, Files: files}
	start := time.Now()
	pid, err := syscall.ForkExec(c.path, c.argv, attr)
	if err != nil {
		return 0, 0, fmt.Errorf("fork/exec: %w", err)
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err = syscall.Wait4(pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			break
		}
	}
	wall = time.Since(start)
	if err != nil {
		return 0, 0, os.NewSyscallError("wait4", err)
	}
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	switch {
	case ws.Signaled():
		return wall, cpu, fmt.Errorf("killed by signal %s", ws.Signal())
	case ws.ExitStatus() != 0:
		return wall, cpu, fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return wall, cpu, nil
}

// loadavg returns the 1-minute load average, which tells a reader whether
// something else competed for the CPUs during the run.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func writeCSV(path string, cs []*contender) error {
	var b bytes.Buffer
	b.WriteString("contender,round,wall_ns,cpu_ns\n")
	for _, c := range cs {
		for r := range c.wall {
			fmt.Fprintf(&b, "%s,%d,%d,%d\n", c.name, r, c.wall[r].Nanoseconds(), c.cpu[r].Nanoseconds())
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-csv: %w", err)
	}
	return nil
}

func writeThroughputCSV(path string, cs []*contender) error {
	var b bytes.Buffer
	b.WriteString("contender,round,run,wall_ns,cpu_ns,batch_ns\n")
	for _, c := range cs {
		i := 0
		for j, s := range c.runs {
			if j > 0 && s.round != c.runs[j-1].round {
				i = 0
			}
			fmt.Fprintf(&b, "%s,%d,%d,%d,%d,%d\n", c.name, s.round, i, s.wall.Nanoseconds(), s.cpu.Nanoseconds(), c.batch[s.round].Nanoseconds())
			i++
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-csv: %w", err)
	}
	return nil
}

// reportThroughput prints a row per contender: throughput and its ratio to
// the baseline's (medians over rounds), CPU per run, and the latency tail
// of all runs with the count slower than slow.
func reportThroughput(w io.Writer, cs []*contender, baseline *contender, slow time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\truns/s (median)\tvs %s (median of per-round)\tcpu ms/run (median)\tp50 ms\tp99 ms\tmax ms\tover %s\truns\t\n",
		baseline.name, slow)
	for _, c := range cs {
		if len(c.rate) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t0\t\n", c.name)
			continue
		}
		ratio := "-"
		if rs := stats.Ratios(c.rate, baseline.rate); len(rs) > 0 {
			ratio = fmt.Sprintf("%.2fx", stats.Quantile(rs, 0.5))
		}
		wall := make([]float64, len(c.runs))
		cpu := make([]float64, len(c.runs))
		for i, s := range c.runs {
			wall[i], cpu[i] = float64(s.wall)/1e6, float64(s.cpu)/1e6
		}
		t := stats.Tails(wall, float64(slow)/1e6)
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t\n", c.name,
			stats.Quantile(c.rate, 0.5), ratio, stats.Quantile(cpu, 0.5), t.P50, t.P99, t.Max, t.Over, t.N)
	}
	tw.Flush()
}

func report(w io.Writer, cs []*contender, baseline *contender) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tmedian ms\tp10 ms\tp90 ms\tcpu ms (median)\tratio vs %s (median of per-round)\truns\t\n", baseline.name)
	for _, c := range cs {
		if len(c.wall) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t0\t\n", c.name)
			continue
		}
		ratio := "-"
		if rs := stats.Ratios(toMS(c.wall), toMS(baseline.wall)); len(rs) > 0 {
			ratio = fmt.Sprintf("%.2fx", stats.Quantile(rs, 0.5))
		}
		ms := toMS(c.wall)
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t\n", c.name,
			stats.Quantile(ms, 0.5), stats.Quantile(ms, 0.1), stats.Quantile(ms, 0.9), stats.Quantile(toMS(c.cpu), 0.5), ratio, len(c.wall))
	}
	tw.Flush()
}

func toMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / 1e6
	}
	return out
}

// memory is one reading of /proc/PID/smaps_rollup, in KiB.
type memory struct{ rss, pss, pssAnon, pssFile int64 }

// pssSample is one PSS run: the jail process and its init.
type pssSample struct{ parent, init memory }

func runPSS(argv []string, runs int, settle time.Duration, stdout, stderr io.Writer) error {
	if runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	var samples []pssSample
	for i := range runs {
		s, err := pssOnce(argv, settle, stderr)
		if err != nil {
			return fmt.Errorf("pss run %d (%s): %w", i, strings.Join(argv, " "), err)
		}
		samples = append(samples, s)
	}
	med := func(f func(pssSample) int64) float64 {
		xs := make([]float64, len(samples))
		for i, s := range samples {
			xs[i] = float64(f(s))
		}
		return stats.Quantile(xs, 0.5)
	}
	fmt.Fprintf(stdout, "PSS of `%s`, median of %d runs, read %s after the workload started (KiB)\n", strings.Join(argv, " "), runs, settle)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "process\tPss\tPss_Anon\tPss_File\tRss\t\n")
	for _, row := range []struct {
		name string
		get  func(pssSample) memory
	}{
		{"parent (jail)", func(s pssSample) memory { return s.parent }},
		{"init (jail:init)", func(s pssSample) memory { return s.init }},
		{"sum", func(s pssSample) memory {
			return memory{s.parent.rss + s.init.rss, s.parent.pss + s.init.pss,
				s.parent.pssAnon + s.init.pssAnon, s.parent.pssFile + s.init.pssFile}
		}},
	} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t\n", row.name,
			med(func(s pssSample) int64 { return row.get(s).pss }),
			med(func(s pssSample) int64 { return row.get(s).pssAnon }),
			med(func(s pssSample) int64 { return row.get(s).pssFile }),
			med(func(s pssSample) int64 { return row.get(s).rss }))
	}
	return tw.Flush()
}

// pssOnce starts argv, finds the jail's init once the workload runs, reads
// both processes' memory and waits for argv to exit successfully.
func pssOnce(argv []string, settle time.Duration, stderr io.Writer) (pssSample, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return pssSample{}, err
	}
	parent := cmd.Process.Pid
	s, readErr := readJail(parent, settle)
	if readErr != nil {
		_ = cmd.Process.Kill()
	}
	if err := cmd.Wait(); err != nil && readErr == nil {
		return s, err
	}
	return s, readErr
}

func readJail(parent int, settle time.Duration) (pssSample, error) {
	deadline := time.Now().Add(5 * time.Second)
	init := 0
	for {
		if time.Now().After(deadline) {
			return pssSample{}, fmt.Errorf("no jail:init child with a running workload under pid %d after 5s", parent)
		}
		if init == 0 {
			for _, c := range procfs.Children(parent) {
				if procfs.Comm(c) == "jail:init" {
					init = c
				}
			}
		}
		if init != 0 && len(procfs.Children(init)) > 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(settle)
	var s pssSample
	var err error
	if s.parent, err = rollup(parent); err != nil {
		return s, err
	}
	if s.init, err = rollup(init); err != nil {
		return s, err
	}
	return s, nil
}

// rollup reads /proc/PID/smaps_rollup (Linux 4.14).
func rollup(pid int) (memory, error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memory{}, err
	}
	defer fh.Close()
	var m memory
	fields := map[string]*int64{"Rss:": &m.rss, "Pss:": &m.pss, "Pss_Anon:": &m.pssAnon, "Pss_File:": &m.pssFile}
	sc := bufio.NewScanner(fh)
	found := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if dst, ok := fields[f[0]]; ok {
			if *dst, err = strconv.ParseInt(f[1], 10, 64); err != nil {
				return m, fmt.Errorf("smaps_rollup of %d: %s: %w", pid, f[0], err)
			}
			found = found || f[0] == "Pss:"
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("smaps_rollup of %d: %w", pid, err)
	}
	if !found {
		return m, fmt.Errorf("smaps_rollup of %d: no Pss line (process gone or not readable)", pid)
	}
	return m, nil
}
