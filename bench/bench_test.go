// Package bench measures jail's start-up cost. These are benchmarks only:
// nothing here passes or fails on a timing. bench/run.sh is the fuller
// measurement (interleaved rounds, a bubblewrap peer, PSS); see README.md.
//
// Run them as root, since the jail maps a host uid:
//
//	sudo env PATH="$PATH" go test -run '^$' -bench . -benchtime 200x ./bench/
//
// JAIL_BIN names a jail binary to measure; without it the benchmarks build
// cmd/jail once, statically as released.
//
// BenchmarkAPIvsFloor and BenchmarkAPIThroughput measure the Go API against
// the floor from the same process, interleaved, and report medians and
// ratios with b.ReportMetric; their ns/op is a run of each (one after the
// other, or at 8 in flight), not a figure to quote.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/bench/internal/stats"
	"github.com/jailrt/jail/profiles"
)

var (
	buildOnce sync.Once
	builtDir  string // removed by TestMain
	jailPath  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// jailBinary returns $JAIL_BIN, or builds cmd/jail the way it is released
// (static, cgo for the nsexec stage) on first use. Building lazily keeps a
// plain `go test ./...` from compiling anything.
func jailBinary(b *testing.B) string {
	b.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("JAIL_BIN"); p != "" {
			jailPath, buildErr = filepath.Abs(p)
			return
		}
		builtDir, buildErr = os.MkdirTemp("", "jail-bench-")
		if buildErr != nil {
			return
		}
		jailPath = filepath.Join(builtDir, "jail")
		// The release build, as users run it.
		cmd := exec.Command("../build.sh", "-o", jailPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build.sh: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return jailPath
}

func requireRoot(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("skipped: needs root (the jail maps a host uid); run: sudo env PATH=\"$PATH\" go test -bench . ./bench/")
	}
}

// benchCommand runs argv b.N times and reports the mean wall time per run
// in ms/op; a run that exits non-zero fails the benchmark with its output.
func benchCommand(b *testing.B, argv ...string) {
	b.Helper()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		b.Skipf("skipped: %v", err)
	}
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		cmd := exec.Command(path, argv[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("%q: %v\n%s", argv, err, out.Bytes())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// BenchmarkStrictTrue is the project's headline figure: a strict jail
// around /bin/true, from exec of jail to its exit.
func BenchmarkStrictTrue(b *testing.B) {
	requireRoot(b)
	benchCommand(b, jailBinary(b), "run", "--profile", "strict", "--", "/bin/true")
}

// BenchmarkFloor is what the same namespaces cost without jail: util-linux
// unshare with a fresh /proc. Targets are stated relative to it.
func BenchmarkFloor(b *testing.B) {
	requireRoot(b)
	benchCommand(b, "unshare", "-Urpf", "--mount-proc", "-n", "-i", "-u", "/bin/true")
}

// BenchmarkSessionExec is a command joining a strict session through the
// CLI: a Go runtime start, the join, a fork and an exec; no namespace is
// made.
func BenchmarkSessionExec(b *testing.B) {
	requireRoot(b)
	bin := jailBinary(b)
	dir := b.TempDir()
	out, err := exec.Command(bin, "session", "create", "--state-dir", dir, "--profile", "strict").Output()
	if err != nil {
		b.Fatalf("session create: %v", err)
	}
	id := string(bytes.TrimSpace(out))
	defer exec.Command(bin, "session", "rm", "--state-dir", dir, id).Run()
	benchCommand(b, bin, "session", "exec", "--state-dir", dir, id, "--", "/bin/true")
}

// strictSpec is the strict profile's Spec.
func strictSpec(b *testing.B) jail.Spec {
	p, err := profiles.Load("strict")
	if err != nil {
		b.Fatal(err)
	}
	return p.Spec
}

// BenchmarkAPIRun is `jail run --profile strict -- /bin/true` through the
// Go API in a long-lived process (this test binary is the helper).
func BenchmarkAPIRun(b *testing.B) {
	requireRoot(b)
	spec := strictSpec(b)
	for b.Loop() {
		c := jail.Command(context.Background(), spec, "/bin/true")
		if err := c.Run(); err != nil || c.Result.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, c.Result.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// BenchmarkAPISessionCommand is a command joining a strict session through
// the Go API in a long-lived process: the join, the fork, the exec.
func BenchmarkAPISessionCommand(b *testing.B) {
	requireRoot(b)
	m := &jail.Sessions{Dir: b.TempDir()}
	s, err := m.Create(context.Background(), jail.SessionSpec{Spec: strictSpec(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Remove()
	for b.Loop() {
		c := s.Command(context.Background(), "/bin/true")
		if err := c.Run(); err != nil || c.Result.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, c.Result.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// floor runs the floor, `unshare -Urpf --mount-proc -n -i -u /bin/true`,
// from this process as bench/cmd/benchrun does: syscall.ForkExec (a vfork,
// no shell) and wait4, stdin and stdout on /dev/null. Not os/exec: per run
// it also opens /dev/null, makes a pidfd and an os.Process, small costs
// that would be charged to the floor and flatter the API's ratio; and the
// figures stay comparable with bench/run.sh's floor.
type floor struct {
	path string
	argv []string
	attr *syscall.ProcAttr
}

func newFloor(b *testing.B) *floor {
	b.Helper()
	argv := []string{"unshare", "-Urpf", "--mount-proc", "-n", "-i", "-u", "/bin/true"}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		b.Skipf("skipped: the floor needs util-linux unshare: %v", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { devnull.Close() })
	files := []uintptr{devnull.Fd(), devnull.Fd(), os.Stderr.Fd()} // stderr shows a failure's message
	return &floor{path: path, argv: argv, attr: &syscall.ProcAttr{Env: os.Environ(), Files: files}}
}

// run runs the floor once and returns an error unless it exited 0.
func (f *floor) run() error {
	pid, err := syscall.ForkExec(f.path, f.argv, f.attr)
	if err != nil {
		return fmt.Errorf("floor: fork/exec: %w", err)
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("floor: %w", os.NewSyscallError("wait4", err))
	case ws.Signaled():
		return fmt.Errorf("floor: killed by signal %s", ws.Signal())
	case ws.ExitStatus() != 0:
		return fmt.Errorf("floor: exit status %d", ws.ExitStatus())
	}
	return nil
}

// runJail runs c, a jail around /bin/true, and returns an error unless
// the workload exited 0.
func runJail(c *jail.Cmd) error {
	err := c.Run()
	switch {
	case err != nil && c.Result != nil && c.Result.Error != nil:
		return fmt.Errorf("jail: %w (%+v)", err, *c.Result.Error)
	case err != nil:
		return fmt.Errorf("jail: %w", err)
	case c.Result.ExitCode != 0:
		return fmt.Errorf("jail: exit code %d, status %s", c.Result.ExitCode, c.Result.Status)
	}
	return nil
}

// alternateWarmup is how many pairs run before the measured ones: the
// first runs fault in the helper's pages and warm the dentry cache.
const alternateWarmup = 5

// alternate runs api and the floor once each per iteration, the order
// swapped every iteration so that neither always runs on the other's warm
// caches, times each from the call to its return, and reports the medians,
// the API's p99 and the median of the per-pair ratios api/floor.
func alternate(b *testing.B, api func() error, fl *floor) {
	b.Helper()
	alternateWith(b, nil, api, fl)
}

// alternateWith is alternate with before, when not nil, called before
// each call of api, outside the timing.
func alternateWith(b *testing.B, before, api func() error, fl *floor) {
	b.Helper()
	if before == nil {
		before = func() error { return nil }
	}
	for range alternateWarmup {
		if err := errors.Join(before(), api(), fl.run()); err != nil {
			b.Fatal(err)
		}
	}
	var apiMS, floorMS []float64
	timed := func(run func() error, into *[]float64) {
		start := time.Now()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, float64(time.Since(start))/1e6)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if err := before(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if i%2 == 0 {
			timed(api, &apiMS)
			timed(fl.run, &floorMS)
		} else {
			timed(fl.run, &floorMS)
			timed(api, &apiMS)
		}
	}
	b.ReportMetric(stats.Quantile(apiMS, 0.5), "api-median-ms")
	b.ReportMetric(stats.Quantile(apiMS, 0.99), "api-p99-ms")
	b.ReportMetric(stats.Quantile(floorMS, 0.5), "floor-median-ms")
	b.ReportMetric(stats.Quantile(stats.Ratios(apiMS, floorMS), 0.5), "ratio")
}

// BenchmarkAPIvsFloor runs, in one long-lived process (this test binary is
// the helper), a strict /bin/true through the Go API alternating with the
// floor, and a command joining a strict session alternating with the
// floor. The targets: run ≤ 1.0x the floor with its p99 ≤ 2x its
// median; session ≤ 0.5x the floor. "ratio" is the median over pairs of
// api/floor. run-netns-pool is run with a jail.NetnsPool, as a long-lived
// program (jail serve) has one.
func BenchmarkAPIvsFloor(b *testing.B) {
	requireRoot(b)
	spec := strictSpec(b)
	fl := newFloor(b)
	ctx := context.Background()
	b.Run("run", func(b *testing.B) {
		alternate(b, func() error { return runJail(jail.Command(ctx, spec, "/bin/true")) }, fl)
	})
	b.Run("run-limits", func(b *testing.B) {
		// The limits: memory and pids (a cgroup), against "run".
		limited := spec
		limited.MemoryMaxBytes, limited.PidsMax = 256<<20, 64
		alternate(b, func() error { return runJail(jail.Command(ctx, limited, "/bin/true")) }, fl)
	})
	b.Run("run-netns-pool", func(b *testing.B) {
		pool, err := jail.NewNetnsPool(0)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		// Untimed, before each pair: the pool is full again, as it is
		// when requests come slower than it refills; its refill would
		// otherwise share the two CPUs with the floor's run.
		full := func() error {
			for deadline := time.Now().Add(time.Second); pool.Stats().Ready < jail.DefaultNetnsPoolSize; {
				if time.Now().After(deadline) {
					return fmt.Errorf("the netns pool did not refill within 1 s: %+v", pool.Stats())
				}
				time.Sleep(100 * time.Microsecond)
			}
			return nil
		}
		alternateWith(b, full, func() error {
			c := jail.Command(ctx, spec, "/bin/true")
			c.NetnsPool = pool
			return runJail(c)
		}, fl)
		if s := pool.Stats(); s.Misses > 0 {
			b.Logf("%d of %d runs found no namespace ready", s.Misses, s.Misses+s.Taken)
		}
	})
	b.Run("session", func(b *testing.B) {
		m := &jail.Sessions{Dir: b.TempDir()}
		s, err := m.Create(ctx, jail.SessionSpec{Spec: spec})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Remove()
		alternate(b, func() error { return runJail(s.Command(ctx, "/bin/true")) }, fl)
	})
}

// Throughput: runs of each contender at a time, and the most runs of
// each in a round.
const (
	throughputInflight = 8
	throughputBatch    = 40
)

// cpuTime is the CPU time (user and system) this process has used, all
// its threads, plus that of its children it has reaped and of what they
// reaped: the jails' stages are children of this process and their
// workloads are reaped by them.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		panic(err) // only EFAULT or EINVAL: a broken call
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		panic(err)
	}
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// batchResult is one batch of runs at some in flight.
type batchResult struct {
	elapsed time.Duration
	cpu     time.Duration // of the whole process and its reaped children
	latMS   []float64     // each run's, call to return
}

// inFlight calls run n times, inflight at a time, and measures the batch.
// After a failure no new run starts; it returns the first failure.
func inFlight(n, inflight int, run func() error) (batchResult, error) {
	var (
		next     atomic.Int64
		stop     atomic.Bool
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	lat := make([]float64, n)
	cpu0, start := cpuTime(), time.Now()
	for range min(n, inflight) {
		wg.Go(func() {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := run(); err != nil {
					stop.Store(true)
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				lat[i] = float64(time.Since(t0)) / 1e6
			}
		})
	}
	wg.Wait()
	return batchResult{elapsed: time.Since(start), cpu: cpuTime() - cpu0, latMS: lat}, firstErr
}

// BenchmarkAPIThroughput runs strict /bin/true jails through the Go API,
// 8 goroutines each calling Command(...).Run() in a loop, against the
// floor at 8 in flight from the same process. An op is one run of each:
// the b.N runs are split evenly into rounds of at most 40, each round a
// batch of the API's and a batch of the floor's, the order swapped every
// round (so -benchtime 2000x is 50 rounds of 40). It reports the median
// over rounds of each one's runs/s and of the per-round ratio api/floor
// (the target: ≥ 0.9x); the CPU per run, the median over rounds
// of the getrusage deltas of this process and its reaped children around
// a batch divided by its runs (for the API: its Go work in this process
// plus the jails'; for the floor: the harness's fork and wait plus
// unshare's); and the latency tail of all runs, each timed from the call
// to its return.
func BenchmarkAPIThroughput(b *testing.B) {
	requireRoot(b)
	spec := strictSpec(b)
	fl := newFloor(b)
	ctx := context.Background()
	api := func() error { return runJail(jail.Command(ctx, spec, "/bin/true")) }
	// Warm up: a batch of each, not recorded.
	for _, run := range []func() error{api, fl.run} {
		if _, err := inFlight(throughputInflight, throughputInflight, run); err != nil {
			b.Fatal(err)
		}
	}
	var apiRate, floorRate, apiCPU, floorCPU, apiLat, floorLat []float64
	measure := func(n int, run func() error, rate, cpu, lat *[]float64) {
		r, err := inFlight(n, throughputInflight, run)
		if err != nil {
			b.Fatal(err)
		}
		*rate = append(*rate, float64(n)/r.elapsed.Seconds())
		*cpu = append(*cpu, float64(r.cpu)/1e6/float64(n))
		*lat = append(*lat, r.latMS...)
	}
	rounds := (b.N + throughputBatch - 1) / throughputBatch
	b.ResetTimer()
	for r := range rounds {
		n := b.N*(r+1)/rounds - b.N*r/rounds
		if r%2 == 0 {
			measure(n, api, &apiRate, &apiCPU, &apiLat)
			measure(n, fl.run, &floorRate, &floorCPU, &floorLat)
		} else {
			measure(n, fl.run, &floorRate, &floorCPU, &floorLat)
			measure(n, api, &apiRate, &apiCPU, &apiLat)
		}
	}
	b.StopTimer()
	b.ReportMetric(stats.Quantile(apiRate, 0.5), "api-runs/s")
	b.ReportMetric(stats.Quantile(floorRate, 0.5), "floor-runs/s")
	b.ReportMetric(stats.Quantile(stats.Ratios(apiRate, floorRate), 0.5), "ratio")
	b.ReportMetric(stats.Quantile(apiCPU, 0.5), "api-cpu-ms/run")
	b.ReportMetric(stats.Quantile(floorCPU, 0.5), "floor-cpu-ms/run")
	t := stats.Tails(apiLat, 100)
	b.ReportMetric(t.P99, "api-p99-ms")
	b.ReportMetric(t.Max, "api-max-ms")
	b.ReportMetric(float64(t.Over), "api-runs-over-100ms")
	b.ReportMetric(stats.Quantile(floorLat, 0.99), "floor-p99-ms")
}
