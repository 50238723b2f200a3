package cgroup

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/procfs"
)

// These tests create real cgroups below the cgroups the test process runs
// in, on whatever the host offers (v1 limits and a cgroup2 group on hybrid
// hosts, cgroup2 only on unified ones), and check the kernel's files. Every
// group is destroyed in t.Cleanup, also when a test fails.

// requireRoot skips t unless it runs as root: creating cgroups needs root
// or a delegated subtree, which a plain user does not have.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root (run with `go test -exec sudo`)")
	}
}

// newGroup calls New and destroys the group when the test ends.
func newGroup(t *testing.T, l Limits, o Options) *Group {
	t.Helper()
	g, err := New(l, o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, g.Destroy()) })
	t.Logf("group (v%d): %s", g.Version(), strings.Join(g.Paths(), " "))
	return g
}

// child is a process started in a group, held until release.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// startIn starts argv in g the way jail starts its child: cloned into g's
// cgroup2 directory (CLONE_INTO_CGROUP) if there is one, then moved into the
// v1 hierarchies with Attach. argv must wait for a line on stdin before it
// does anything. The process is killed and reaped when the test ends.
func startIn(t *testing.T, g *Group, env []string, argv ...string) *child {
	t.Helper()
	c := startProcess(t, g, nil, env, argv...)
	require.NoError(t, g.Attach(c.cmd.Process.Pid))
	require.NoError(t, g.Verify(c.cmd.Process.Pid))
	return c
}

// startProcess starts argv, cloned into g's cgroup2 directory if g is not
// nil and has one, with extra files from fd 3 on.
func startProcess(t *testing.T, g *Group, extra []*os.File, env []string, argv ...string) *child {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if g != nil && g.FD() >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, g.FD()
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

func (c *child) release(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(c.stdin, "go\n")
	require.NoError(t, err)
}

func (c *child) readLine(t *testing.T) string {
	t.Helper()
	line, err := c.stdout.ReadString('\n')
	require.NoError(t, err, "read from child")
	return strings.TrimSpace(line)
}

// role returns the argv and environment that run the test binary in a role.
func role(name string, env ...string) ([]string, []string) {
	return []string{os.Args[0], "-test.run=^$"}, append([]string{roleEnv + "=" + name}, env...)
}

// readControl reads a control file of g's directory serving controller.
func readControl(t *testing.T, g *Group, controller, file string) string {
	t.Helper()
	d := g.dirServing(controller)
	require.NotNil(t, d, "group has no directory for %s", controller)
	b, err := os.ReadFile(path.Join(d.path, file))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func TestNewWritesLimits(t *testing.T) {
	requireRoot(t)
	l := Limits{MemoryMaxBytes: 64 << 20, PidsMax: 32, CPUs: 0.5, CPUWeight: 200, CPUTime: time.Second}
	g := newGroup(t, l, Options{})
	require.Empty(t, g.Unenforced())

	type check struct{ controller, file, want string }
	var checks []check
	if g.dirServing(ControllerMemory).hier.V2 {
		checks = append(checks, check{"memory", "memory.max", "67108864"}, check{"memory", "memory.oom.group", "1"})
		if exists(path.Join(g.dirServing(ControllerMemory).path, "memory.swap.max")) {
			checks = append(checks, check{"memory", "memory.swap.max", "0"})
		}
	} else {
		checks = append(checks, check{"memory", "memory.limit_in_bytes", "67108864"})
		if hostHasSwap() {
			checks = append(checks, check{"memory", "memory.memsw.limit_in_bytes", "67108864"})
		}
	}
	checks = append(checks, check{"pids", "pids.max", "32"})
	if g.dirServing(ControllerCPU).hier.V2 {
		checks = append(checks, check{"cpu", "cpu.max", "50000 100000"}, check{"cpu", "cpu.weight", "200"})
	} else {
		// weight 200: l = (−125 + √(125² + 2448·(log10 200 + 7/34)))/2 = 11.2596, 2^l = 2452.
		checks = append(checks, check{"cpu", "cpu.cfs_period_us", "100000"}, check{"cpu", "cpu.cfs_quota_us", "50000"},
			check{"cpu", "cpu.shares", "2452"})
	}
	for _, c := range checks {
		t.Run(c.file, func(t *testing.T) {
			got := readControl(t, g, c.controller, c.file)
			assert.Equal(t, c.want, got, "%s: got %q, want %q", c.file, got, c.want)
		})
	}

	t.Run("only the hierarchies the limits need", func(t *testing.T) {
		for _, d := range g.dirs {
			if d.hier.V2 {
				continue
			}
			assert.True(t, slices.ContainsFunc(d.hier.Controllers, func(c string) bool {
				return slices.Contains([]string{"memory", "pids", "cpu", "cpuacct", "freezer"}, c)
			}), "got a directory in v1 hierarchy %s, which no limit needs", d.hier.Name())
			assert.NotContains(t, d.hier.Controllers, "blkio", "io weight not asked for")
		}
	})

	t.Run("CPU usage is measurable", func(t *testing.T) {
		usage, err := g.CPUUsage()
		require.NoError(t, err)
		assert.Zero(t, usage, "no process ran yet")
	})
}

// TestBeginComplete: Begin makes only the cgroup2 directory, with no limit
// in it yet, and says how many directories Complete makes; Complete makes
// them and writes the limits that New writes. A group never completed is
// removed by Destroy all the same.
func TestBeginComplete(t *testing.T) {
	requireRoot(t)
	l := Limits{MemoryMaxBytes: 64 << 20, PidsMax: 32}
	full := newGroup(t, l, Options{})
	var v1 int
	for _, d := range full.dirs {
		if !d.hier.V2 {
			v1++
		}
	}

	g, err := Begin(l, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, g.Destroy()) })
	assert.Equal(t, v1, g.Pending(), "Complete makes the v1 directories")
	assert.Equal(t, full.Version(), g.Version(), "a begun group's version counts what Complete makes (a run that fails before it reports it)")
	begun := g.Paths()
	if d := g.v2Dir(); d != nil {
		require.Len(t, begun, 1, "only the cgroup2 directory")
		assert.GreaterOrEqual(t, g.FD(), 0, "for CLONE_INTO_CGROUP")
		if d.serving(ControllerMemory) {
			assert.Equal(t, "max", readControl(t, g, ControllerMemory, "memory.max"), "no limit before Complete")
		}
	} else {
		assert.Empty(t, begun)
	}

	require.NoError(t, g.Complete())
	assert.Zero(t, g.Pending())
	assert.Len(t, g.Paths(), len(full.Paths()), "the directories New makes")
	assert.Equal(t, full.Version(), g.Version())
	for _, f := range []struct{ controller, file string }{{ControllerPids, "pids.max"}} {
		assert.Equal(t, readControl(t, full, f.controller, f.file), readControl(t, g, f.controller, f.file), f.file)
	}
	memFile := "memory.max"
	if !g.dirServing(ControllerMemory).hier.V2 {
		memFile = "memory.limit_in_bytes"
	}
	assert.Equal(t, "67108864", readControl(t, g, ControllerMemory, memFile))
	assert.NoError(t, g.Complete(), "a second Complete does nothing")
	assert.Len(t, g.Paths(), len(full.Paths()))

	t.Run("never completed", func(t *testing.T) {
		g, err := Begin(l, Options{})
		require.NoError(t, err)
		paths := g.Paths()
		require.NoError(t, g.Destroy())
		for _, p := range paths {
			assert.NoDirExists(t, p)
		}
		assert.Error(t, g.Complete(), "a destroyed group is not completed")
		for _, p := range g.Paths() {
			assert.NoDirExists(t, p)
		}
	})

	t.Run("a failed Complete fails again", func(t *testing.T) {
		g, err := Begin(Limits{PidsMax: 32}, Options{})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, g.Destroy()) })
		// A limit the kernel refuses, put into what Complete writes.
		g.mu.Lock()
		last := &g.pending[len(g.pending)-1]
		last.writes = append(last.writes, write{Candidates: []fileValue{{"cgroup.procs", "not a pid"}}})
		g.mu.Unlock()
		first := g.Complete()
		require.Error(t, first)
		assert.Equal(t, first, g.Complete())
		for _, p := range g.Paths() {
			assert.NoDirExists(t, p, "destroyed")
		}
	})
}

// TestUpdate: the limits of a group in use change as New would have set
// them, lowered and raised (v1 keeps memory+swap at or above memory); a
// limit the group was made without cannot be added, and then nothing
// changes.
func TestUpdate(t *testing.T) {
	requireRoot(t)
	was := Limits{MemoryMaxBytes: 64 << 20, PidsMax: 32, CPUs: 0.5}
	g := newGroup(t, was, Options{})
	memFile := "memory.max"
	if !g.dirServing(ControllerMemory).hier.V2 {
		memFile = "memory.limit_in_bytes"
	}
	cpu := func() string {
		if g.dirServing(ControllerCPU).hier.V2 {
			return readControl(t, g, "cpu", "cpu.max")
		}
		return readControl(t, g, "cpu", "cpu.cfs_quota_us") + " " + readControl(t, g, "cpu", "cpu.cfs_period_us")
	}
	for _, to := range []Limits{
		{MemoryMaxBytes: 32 << 20, PidsMax: 8, CPUs: 0.25},
		{MemoryMaxBytes: 128 << 20, PidsMax: 64, CPUs: 1.5},
		{MemoryMaxBytes: 128 << 20, PidsMax: 64, CPUs: 1.5},
	} {
		require.NoError(t, g.Update(was, to), "%+v -> %+v", was, to)
		assert.Equal(t, strconv.FormatInt(to.MemoryMaxBytes, 10), readControl(t, g, "memory", memFile))
		assert.Equal(t, strconv.FormatInt(to.PidsMax, 10), readControl(t, g, "pids", "pids.max"))
		assert.Equal(t, cpuMax(to.CPUs), cpu())
		if d := g.dirServing(ControllerMemory); !d.hier.V2 && hostHasSwap() {
			assert.Equal(t, strconv.FormatInt(to.MemoryMaxBytes, 10), readControl(t, g, "memory", "memory.memsw.limit_in_bytes"))
		}
		was = to
	}

	// A controller the group was made without: refused, nothing written.
	small := newGroup(t, Limits{PidsMax: 16}, Options{})
	err := small.Update(Limits{PidsMax: 16}, Limits{PidsMax: 8, MemoryMaxBytes: 64 << 20})
	require.ErrorIs(t, err, ErrCannotUpdate)
	assert.Equal(t, "16", readControl(t, small, "pids", "pids.max"), "nothing changed")
	assert.Error(t, small.Update(Limits{PidsMax: 16}, Limits{PidsMax: 8, CPUWeight: 50}), "only memory, swap, pids and cpus")

}

func TestNewIOWeight(t *testing.T) {
	requireRoot(t)
	// Whether a weight file exists depends on the I/O schedulers the kernel
	// has (BFQ) and io.cost; either it is enforced and written, or it is
	// reported as unenforced.
	g := newGroup(t, Limits{IOWeight: 300}, Options{AllowUnenforced: true})
	if u := g.Unenforced(); len(u) > 0 {
		require.Len(t, u, 1)
		assert.Equal(t, LimitIOWeight, u[0].Limit)
		assert.Contains(t, u[0].Reason, "io", "got reason %q", u[0].Reason)
		t.Logf("io weight unenforced here: %s", u[0])
		return
	}
	d := g.dirServing(ControllerIO)
	require.NotNil(t, d)
	var file, want string
	for _, fv := range []fileValue{{"io.weight", "300"}, {"io.bfq.weight", "118"}, {"blkio.bfq.weight", "118"}, {"blkio.weight", "510"}} {
		if exists(path.Join(d.path, fv.File)) {
			file, want = fv.File, fv.Value
			break
		}
	}
	require.NotEmpty(t, file, "no weight file in %s", d.path)
	got := readControl(t, g, ControllerIO, file)
	// io.weight reads "default 300"; the v1 file reads "118".
	assert.Contains(t, strings.Fields(got), want, "%s: got %q, want %s", file, got, want)
}

func TestAttach(t *testing.T) {
	requireRoot(t)
	// The shell moves itself (AttachFiles) or is moved (Attach) before it
	// forks; the fork must land in the group too.
	const forkScript = `read x; sleep 1000 & echo $!; wait`
	tests := []struct {
		name  string
		start func(t *testing.T, g *Group) *child
	}{
		{
			name: "clone into cgroup2 and Attach",
			start: func(t *testing.T, g *Group) *child {
				return startIn(t, g, nil, "/bin/sh", "-c", forkScript)
			},
		},
		{
			name: "clone into cgroup2 and AttachFiles",
			start: func(t *testing.T, g *Group) *child {
				files, err := g.AttachFiles()
				require.NoError(t, err)
				var script []string
				for i := range files {
					script = append(script, fmt.Sprintf("echo 0 >&%d || exit 1", 3+i))
				}
				script = append(script, "echo attached", forkScript)
				c := startProcess(t, g, files, nil, "/bin/sh", "-c", strings.Join(script, "; "))
				for _, f := range files {
					require.NoError(t, f.Close())
				}
				require.Equal(t, "attached", c.readLine(t))
				require.NoError(t, g.Verify(c.cmd.Process.Pid))
				return c
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, Limits{MemoryMaxBytes: 32 << 20, PidsMax: 16}, Options{})
			c := tt.start(t, g)
			self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.cmd.Process.Pid))
			require.NoError(t, err)
			for _, d := range g.dirs {
				assert.Contains(t, string(self), ":"+d.cgPath+"\n", "/proc/PID/cgroup does not name %s", d.cgPath)
			}
			c.release(t)
			grandchild, err := strconv.Atoi(c.readLine(t))
			require.NoError(t, err)
			assert.NoError(t, g.Verify(grandchild), "the child's fork is outside the group")
		})
	}
}

func TestStats(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{MemoryMaxBytes: 256 << 20, PidsMax: 64}, Options{})
	// Read once before: the files stay open (readKept), and the second
	// read must see what happened since.
	before, err := g.Stats()
	require.NoError(t, err)
	require.NotNil(t, before.Memory)
	require.NotNil(t, before.Memory.PeakBytes)
	assert.Less(t, *before.Memory.PeakBytes, int64(1<<20), "an empty group's peak")
	argv, env := role("hog", "CGROUP_TEST_BYTES="+strconv.Itoa(20<<20))
	c := startIn(t, g, env, argv...)
	c.release(t)
	assert.Equal(t, "touched", c.readLine(t))
	require.NoError(t, c.cmd.Wait())

	s, err := g.Stats()
	require.NoError(t, err)
	b, _ := json.Marshal(s)
	t.Logf("stats: %s", b)

	require.NotNil(t, s.Memory, "no memory stats")
	require.NotNil(t, s.Memory.PeakBytes, "no memory peak")
	assert.GreaterOrEqual(t, *s.Memory.PeakBytes, int64(20<<20), "got peak %d, want at least 20 MiB", *s.Memory.PeakBytes)
	assert.Less(t, *s.Memory.PeakBytes, int64(256<<20))
	assert.Zero(t, s.Memory.OOMKills)

	require.NotNil(t, s.CPU, "no CPU stats")
	assert.Positive(t, s.CPU.Usage)
	assert.InDelta(t, float64(s.CPU.Usage), float64(s.CPU.User+s.CPU.System), float64(20*time.Millisecond),
		"got usage %v, user %v + system %v", s.CPU.Usage, s.CPU.User, s.CPU.System)
	usage, err := g.CPUUsage()
	require.NoError(t, err)
	assert.Equal(t, s.CPU.Usage.Round(time.Microsecond), usage.Round(time.Microsecond))

	require.NotNil(t, s.Pids, "no pids stats")
	if s.Pids.Peak != nil {
		// The Go runtime starts several threads, and pids counts tasks.
		assert.GreaterOrEqual(t, *s.Pids.Peak, int64(2))
	} else {
		t.Logf("this kernel has no pids.peak")
	}
}

func TestOOMKill(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{MemoryMaxBytes: 16 << 20}, Options{})
	argv, env := role("hog", "CGROUP_TEST_BYTES="+strconv.Itoa(64<<20))
	c := startIn(t, g, env, argv...)
	c.release(t)
	err := c.cmd.Wait()
	exitErr, ok := errors.AsType[*exec.ExitError](err)
	require.True(t, ok, "got %v, want the hog killed", err)
	ws := exitErr.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "got %v, want SIGKILL", ws)

	s, err := g.Stats()
	require.NoError(t, err)
	require.NotNil(t, s.Memory)
	assert.GreaterOrEqual(t, s.Memory.OOMKills, int64(1), "got %d OOM kills", s.Memory.OOMKills)
	if g.dirServing(ControllerMemory).hier.V2 || !hostHasSwap() {
		assert.GreaterOrEqual(t, s.Memory.MaxHits, int64(1), "got %d hits of the limit", s.Memory.MaxHits)
	}
	if s.Memory.PeakBytes != nil {
		// The v1 high-water mark may pass the limit by a page (seen on
		// 6.18: limit + 4096).
		assert.LessOrEqual(t, *s.Memory.PeakBytes, int64(16<<20+64<<10), "peak above the limit")
		assert.Greater(t, *s.Memory.PeakBytes, int64(15<<20), "peak not near the limit")
	}
}

func TestCPULimit(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{CPUs: 0.2}, Options{})
	argv, env := role("spin", "CGROUP_TEST_WALL=600ms", "CGROUP_TEST_THREADS=2")
	c := startIn(t, g, env, argv...)
	start := time.Now()
	c.release(t)
	require.NoError(t, c.cmd.Wait())
	lifetime := time.Since(start)
	usage, err := g.CPUUsage()
	require.NoError(t, err)
	// The group may use 0.2 CPU of its whole lifetime (plus one period's
	// quota): 0.6 s of spinning, and, under emulation (the cgroup v2 VM),
	// seconds of a slow start that the quota also throttles. Unlimited,
	// two threads would use twice the spin's wall time.
	assert.Greater(t, usage, 40*time.Millisecond)
	limit := lifetime/5 + CPUPeriod/5 + 50*time.Millisecond
	assert.Less(t, usage, limit, "got %v of CPU under a 0.2 CPU limit in %v, want under %v", usage, lifetime, limit)
	s, err := g.Stats()
	require.NoError(t, err)
	assert.Positive(t, s.CPU.ThrottledPeriods, "never throttled")
	t.Logf("usage %v, throttled %d periods for %v", usage, s.CPU.ThrottledPeriods, s.CPU.ThrottledTime)
}

// killVariant is a way Destroy kills: options for New and a change to the
// group afterwards.
type killVariant struct {
	name  string
	opts  Options
	tweak func(g *Group)
}

// killVariants are the ways Destroy kills that this host offers: the
// default (cgroup.kill where there is cgroup2) and, where v1 has a freezer
// and cpuacct, the v1 freezer, and pidfd kills until empty as on a host
// without a freezer.
func killVariants(t *testing.T) []killVariant {
	variants := []killVariant{{name: "default"}}
	f, err := gatherFacts(Options{noV2: true}, nil)
	require.NoError(t, err)
	if decide(ControllerFreezer, f).Usable && decide(ControllerCPUAcct, f).Usable {
		variants = append(variants,
			killVariant{name: "v1 freezer", opts: Options{noV2: true}},
			killVariant{name: "v1 without freezer", opts: Options{noV2: true}, tweak: func(g *Group) {
				d := g.dirServing(ControllerFreezer)
				d.serves = slices.DeleteFunc(d.serves, func(c string) bool { return c == ControllerFreezer })
			}})
	}
	return variants
}

// TestKill: Kill empties the group and leaves it in place for Stats and
// Destroy.
func TestKill(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{PidsMax: 64}, Options{})
	c := startIn(t, g, nil, "/bin/sh", "-c", `trap "" TERM; read x; (sleep 1000 &); echo started; sleep 1000`)
	c.release(t)
	require.Equal(t, "started", c.readLine(t))
	require.NoError(t, g.Kill())
	pids, err := g.Procs()
	require.NoError(t, err)
	assert.Empty(t, pids)
	assert.ErrorContains(t, c.cmd.Wait(), "signal: killed")
	for _, p := range g.Paths() {
		assert.DirExists(t, p)
	}
	_, err = g.Stats()
	assert.NoError(t, err)
	require.NoError(t, g.Destroy())
	assert.NoError(t, g.Kill(), "Kill after Destroy does nothing")
}

func TestDestroy(t *testing.T) {
	requireRoot(t)
	for _, v := range killVariants(t) {
		t.Run(v.name+" kills a tree that ignores SIGTERM", func(t *testing.T) {
			g := newGroup(t, Limits{PidsMax: 64}, v.opts)
			if v.opts.noV2 {
				require.NotNil(t, g.dirServing(ControllerFreezer))
				require.False(t, g.dirServing(ControllerFreezer).hier.V2)
			}
			if v.tweak != nil {
				v.tweak(g)
			}
			// A daemonised grandchild, a subshell and a background job, all
			// ignoring SIGTERM.
			c := startIn(t, g, nil, "/bin/sh", "-c",
				`trap "" TERM HUP; read x; (trap "" TERM; sleep 1000) & (sleep 1000 &); sleep 1000 & echo started; wait`)
			c.release(t)
			require.Equal(t, "started", c.readLine(t))
			var pids []int
			require.Eventually(t, func() bool {
				var err error
				pids, err = g.Procs()
				// sh, the subshell (which dash turns into its sleep), the
				// orphaned sleep and the background one.
				return err == nil && len(pids) >= 4
			}, 5*time.Second, time.Millisecond, "want 4 processes in the group")
			paths := g.Paths()

			start := time.Now()
			require.NoError(t, g.Destroy())
			t.Logf("Destroy of %d processes took %v", len(pids), time.Since(start))
			for _, p := range paths {
				assert.NoDirExists(t, p)
			}
			err := c.cmd.Wait()
			assert.ErrorContains(t, err, "signal: killed")
			for _, pid := range pids {
				assert.True(t, deadOrZombie(pid), "pid %d survived", pid)
			}
			assert.NoError(t, g.Destroy(), "second Destroy")
		})
	}

	t.Run("processes already exited", func(t *testing.T) {
		g := newGroup(t, Limits{PidsMax: 8}, Options{})
		c := startIn(t, g, nil, "/bin/sh", "-c", "read x")
		c.release(t)
		require.NoError(t, c.cmd.Wait())
		paths := g.Paths()
		require.NoError(t, g.Destroy())
		for _, p := range paths {
			assert.NoDirExists(t, p)
		}
	})

	t.Run("New failing half-way leaves nothing", func(t *testing.T) {
		// Make the last directory's mkdir fail: take its name first.
		l := Limits{MemoryMaxBytes: 32 << 20, PidsMax: 8}
		f, err := gatherFacts(Options{}, nil)
		require.NoError(t, err)
		p := makePlan(l, f)
		dirs := p.V1
		if p.V2 != nil {
			dirs = append([]dirPlan{*p.V2}, dirs...)
		}
		require.NotEmpty(t, dirs)
		next, err := newOwner()
		require.NoError(t, err)
		next.Seq++ // New takes the following number.
		blocker := path.Join(dirs[len(dirs)-1].Parent, next.name())
		require.NoError(t, os.Mkdir(blocker, 0o755))
		t.Cleanup(func() { assert.NoError(t, removeTree(blocker, time.Now().Add(time.Second))) })

		_, err = New(l, Options{})
		require.ErrorIs(t, err, fs.ErrExist)
		for _, d := range dirs[:len(dirs)-1] {
			assert.NoDirExists(t, path.Join(d.Parent, next.name()))
		}
		assert.DirExists(t, blocker, "New removed a directory it did not create")
	})
}

// deadOrZombie reports whether pid has exited (its parent may not have
// reaped it yet).
func deadOrZombie(pid int) bool {
	st, ok := procfs.ReadStat(pid)
	return !ok || st.State == 'Z'
}

func TestParallelNewDestroy(t *testing.T) {
	requireRoot(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = runOnce(Limits{MemoryMaxBytes: 32 << 20, PidsMax: 16})
		})
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "run %d", i)
		assert.NotErrorIs(t, err, unix.EBUSY)
	}
	assert.Empty(t, leftovers(t), "groups left behind")
}

// runOnce creates a group, runs a shell in it, and destroys it.
func runOnce(l Limits) (retErr error) {
	g, err := New(l, Options{})
	if err != nil {
		return err
	}
	defer func() {
		if err := g.Destroy(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	cmd := exec.Command("/bin/sh", "-c", "read x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if fd := g.FD(); fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer stdin.Close()
	if err := g.Attach(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	// Leave it running: Destroy kills it.
	if err := g.Destroy(); err != nil {
		return err
	}
	if err := cmd.Wait(); err == nil {
		return errors.New("the shell exited by itself, want it killed")
	}
	return nil
}

// leftovers lists groups of this process in its own cgroups.
func leftovers(t *testing.T) []string {
	t.Helper()
	f, err := gatherFacts(Options{}, nil)
	require.NoError(t, err)
	me, err := newOwner()
	require.NoError(t, err)
	prefix := fmt.Sprintf("%s%d-%d-", namePrefix, me.PID, me.StartTime)
	var dirs []string
	hs := slices.Clone(f.Layout.V1)
	if f.Layout.V2 != nil {
		hs = append(hs, *f.Layout.V2)
	}
	for _, h := range hs {
		matches, err := filepath.Glob(path.Join(f.parentDir(h), prefix+"*"))
		require.NoError(t, err)
		dirs = append(dirs, matches...)
	}
	return dirs
}

func TestPrune(t *testing.T) {
	requireRoot(t)
	// Prune looks only below a parent of the test's own, so it cannot touch
	// groups of other jail processes on this host.
	parent := fmt.Sprintf("jail-test-prune-%d", os.Getpid())
	f, err := gatherFacts(Options{}, nil)
	require.NoError(t, err)
	var parents []string
	hs := slices.Clone(f.Layout.V1)
	if f.Layout.V2 != nil {
		hs = append(hs, *f.Layout.V2)
	}
	for _, h := range hs {
		if _, ok := f.V1[h.Name()]; !ok && !h.V2 {
			continue
		}
		dir := path.Join(f.parentDir(h), parent)
		require.NoError(t, os.Mkdir(dir, 0o755))
		parents = append(parents, dir)
	}
	t.Cleanup(func() {
		for _, dir := range parents {
			assert.NoError(t, removeTree(dir, time.Now().Add(time.Second)))
		}
	})
	opts := Options{Parent: parent}

	me, err := newOwner()
	require.NoError(t, err)
	// A dead owner: a process that ran and was reaped.
	dead := exec.Command("/bin/sh", "-c", "true")
	require.NoError(t, dead.Start())
	deadStart := procStartTime(t, dead.Process.Pid)
	require.NoError(t, dead.Wait())
	// A live owner: a sleeping child.
	live := startProcess(t, nil, nil, nil, "/bin/sh", "-c", "read x")
	liveStart := procStartTime(t, live.cmd.Process.Pid)

	// A group per case, named for its owner, each with a process.
	mkGroup := func(o owner) *Group {
		// No limits: on cgroup2 the test's parent enables no controller.
		g, err := create(Limits{}, opts, &o)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, g.Destroy()) })
		startIn(t, g, nil, "/bin/sh", "-c", "read x")
		return g
	}
	staleDead := mkGroup(owner{PID: dead.Process.Pid, StartTime: deadStart, PIDNS: me.PIDNS, Seq: 1})
	staleReused := mkGroup(owner{PID: live.cmd.Process.Pid, StartTime: liveStart + 1, PIDNS: me.PIDNS, Seq: 2})
	alive := mkGroup(owner{PID: live.cmd.Process.Pid, StartTime: liveStart, PIDNS: me.PIDNS, Seq: 3})
	otherNS := mkGroup(owner{PID: dead.Process.Pid, StartTime: deadStart, PIDNS: me.PIDNS + 1, Seq: 4})

	removed, err := Prune(opts)
	require.NoError(t, err)
	want := append(staleDead.Paths(), staleReused.Paths()...)
	slices.Sort(want)
	assert.Equal(t, want, removed)
	for _, p := range want {
		assert.NoDirExists(t, p)
	}
	for _, g := range []*Group{alive, otherNS} {
		for _, p := range g.Paths() {
			assert.DirExists(t, p, "Prune removed a group it must keep")
		}
		pids, err := g.Procs()
		require.NoError(t, err)
		assert.NotEmpty(t, pids, "Prune killed the processes of a group it must keep")
	}
}

func procStartTime(t *testing.T, pid int) uint64 {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	start, err := parseStatStartTime(string(stat))
	require.NoError(t, err)
	return start
}

func TestUnprivileged(t *testing.T) {
	requireRoot(t)
	// Run New as uid/gid 65534, which no cgroup is delegated to. The test
	// binary must be readable by that user.
	dir, err := os.MkdirTemp("", "cgroup-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "cgroup.test")
	src, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, src, 0o755))

	run := func(t *testing.T, allow bool) newResult {
		argv, env := role("new", `CGROUP_TEST_LIMITS={"memory_max_bytes":67108864}`)
		if allow {
			env = append(env, "CGROUP_TEST_ALLOW=1")
		}
		cmd := exec.Command(bin, argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = "/"
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		require.NoError(t, err)
		var r newResult
		require.NoError(t, json.Unmarshal(out, &r), "output %q", out)
		return r
	}
	t.Run("refused with one line saying how", func(t *testing.T) {
		r := run(t, false)
		t.Logf("error: %s", r.Err)
		assert.True(t, r.ErrIsUnsupported, "got %q, want an error matching errors.ErrUnsupported", r.Err)
		assert.Contains(t, r.Err, "cgroup: cannot enforce memory: ")
		assert.Contains(t, r.Err, "uid 65534")
		assert.Regexp(t, `run as root|chown 65534`, r.Err)
		assert.NotContains(t, r.Err, "\n")
	})
	t.Run("allowed unenforced", func(t *testing.T) {
		r := run(t, true)
		assert.Empty(t, r.Err)
		assert.Empty(t, r.DestroyErr)
		require.NotEmpty(t, r.Unenforced)
		assert.Equal(t, LimitMemory, r.Unenforced[0].Limit)
		assert.NotEmpty(t, r.Unenforced[0].Fix)
	})
}

func TestProbe(t *testing.T) {
	requireRoot(t)
	s := Probe()
	require.NoError(t, s.Err)
	b, _ := json.MarshalIndent(s, "", "  ")
	t.Logf("%s", b)
	assert.NotEqual(t, ModeNone, s.Mode)
	require.Len(t, s.Controllers, len(controllerNames))
	for _, c := range s.Controllers {
		if c.Name == ControllerIO {
			continue // some kernels are built without the blkio/io controller
		}
		assert.True(t, c.Usable, "%s: root cannot use it here: %s", c.Name, c.Reason)
		assert.Contains(t, []int{1, 2}, c.Version)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.Equal(t, strings.Contains(string(mountinfo), "favordynmods"), s.FavorDynMods)
	assert.Contains(t, []string{"yes", "no", "unknown"}, s.SwapAccounting)
}

// BenchmarkAttach measures moving a waiting shell into a group with
// memory and pids limits, after 100 ms of quiet and right after another
// move ("b2b"): by the parent (procs: Attach, pid to cgroup.procs, timed
// alone) and by the child itself (self: AttachFiles, "0" to tasks, timed as
// the round trip to the shell; self-baseline is the same round trip with
// the writes going to /dev/null). Run with -benchtime=25x; the metric is
// the median.
//
//	go test -exec sudo -run '^$' -bench Attach -benchtime 25x ./cgroup
func BenchmarkAttach(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	for _, idle := range []time.Duration{100 * time.Millisecond, 0} {
		for _, method := range []string{"procs", "self", "self-baseline"} {
			name := fmt.Sprintf("%s/idle=%v", method, idle)
			if idle == 0 {
				name = method + "/b2b"
			}
			b.Run(name, func(b *testing.B) {
				g, err := New(Limits{MemoryMaxBytes: 64 << 20, PidsMax: 64}, Options{})
				require.NoError(b, err)
				defer func() { require.NoError(b, g.Destroy()) }()
				var times []time.Duration
				for b.Loop() {
					times = append(times, attachOnce(b, g, method, idle))
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// waitingShell starts a shell in g's cgroup2 directory (if any) that says
// "ready", waits for a line, runs writes, says "done" and waits again.
type waitingShell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startWaitingShell(b *testing.B, g *Group, files []*os.File, writes []string) *waitingShell {
	script := "echo ready; read x; " + strings.Join(append(writes, "echo done"), "; ") + "; read x"
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, UseCgroupFD: g.FD() >= 0, CgroupFD: g.FD()}
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	s := &waitingShell{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := s.out.ReadString('\n')
	require.NoError(b, err)
	require.Equal(b, "ready\n", line)
	return s
}

func (s *waitingShell) roundTrip(b *testing.B) {
	_, err := io.WriteString(s.stdin, "go\n")
	require.NoError(b, err)
	_, err = s.out.ReadString('\n')
	require.NoError(b, err)
}

func (s *waitingShell) stop() {
	s.stdin.Close()
	_ = s.cmd.Wait()
}

// attachOnce moves a shell into g with method and returns how long it took.
func attachOnce(b *testing.B, g *Group, method string, idle time.Duration) time.Duration {
	files, err := g.AttachFiles()
	require.NoError(b, err)
	var writes []string
	for i := range files {
		target := fmt.Sprintf("&%d", 3+i)
		if method == "self-baseline" {
			target = "/dev/null"
		}
		writes = append(writes, "echo 0 >"+target)
	}
	s := startWaitingShell(b, g, files, writes)
	for _, f := range files {
		f.Close()
	}
	defer s.stop()
	if idle > 0 {
		time.Sleep(idle)
	} else {
		// Back to back: another process was just moved by pid.
		warm := startWaitingShell(b, g, nil, nil)
		defer warm.stop()
		require.NoError(b, g.Attach(warm.cmd.Process.Pid))
	}
	start := time.Now()
	if method == "procs" {
		require.NoError(b, g.Attach(s.cmd.Process.Pid))
		elapsed := time.Since(start)
		require.NoError(b, g.Verify(s.cmd.Process.Pid))
		return elapsed
	}
	s.roundTrip(b)
	elapsed := time.Since(start)
	if method == "self" {
		require.NoError(b, g.Verify(s.cmd.Process.Pid))
	}
	return elapsed
}

// BenchmarkNewDestroy measures a group's whole life without processes.
func BenchmarkNewDestroy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	for _, l := range []struct {
		name   string
		limits Limits
	}{
		{"none", Limits{}},
		{"memory+pids", Limits{MemoryMaxBytes: 256 << 20, PidsMax: 64}},
		{"memory+pids+cpus", Limits{MemoryMaxBytes: 256 << 20, PidsMax: 64, CPUs: 1}},
	} {
		b.Run(l.name, func(b *testing.B) {
			for b.Loop() {
				g, err := New(l.limits, Options{})
				require.NoError(b, err)
				require.NoError(b, g.Destroy())
			}
		})
	}
}

// BenchmarkEnd is a run's end with memory and pids limits: its group
// read for the report (Stats) and removed (Destroy), after a process ran
// and exited in it. Only that part is timed.
func BenchmarkEnd(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	for b.Loop() {
		b.StopTimer()
		g, err := New(Limits{MemoryMaxBytes: 256 << 20, PidsMax: 64}, Options{})
		require.NoError(b, err)
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: g.FD() >= 0, CgroupFD: g.FD()}
		require.NoError(b, cmd.Run())
		b.StartTimer()
		_, err = g.Stats()
		require.NoError(b, err)
		require.NoError(b, g.Destroy())
	}
}

// BenchmarkCPUUsage measures one poll of a CPU-time limit.
func BenchmarkCPUUsage(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	g, err := New(Limits{}, Options{})
	require.NoError(b, err)
	defer func() { require.NoError(b, g.Destroy()) }()
	for b.Loop() {
		_, err := g.CPUUsage()
		require.NoError(b, err)
	}
}

// BenchmarkCloneIntoCgroup compares starting `sh -c true` plainly and with
// clone3 CLONE_INTO_CGROUP into a group's cgroup2 directory, after 100 ms of
// quiet and back to back. Run with -benchtime=25x; the metric is the median.
func BenchmarkCloneIntoCgroup(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	g, err := New(Limits{}, Options{})
	require.NoError(b, err)
	defer func() { require.NoError(b, g.Destroy()) }()
	if g.FD() < 0 {
		b.Skip("no cgroup2 here")
	}
	for _, idle := range []time.Duration{100 * time.Millisecond, 0} {
		for _, into := range []bool{false, true} {
			b.Run(fmt.Sprintf("into=%v/idle=%v", into, idle), func(b *testing.B) {
				var times []time.Duration
				for b.Loop() {
					time.Sleep(idle)
					cmd := exec.Command("/bin/sh", "-c", "true")
					cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: into, CgroupFD: g.FD()}
					start := time.Now()
					require.NoError(b, cmd.Run())
					times = append(times, time.Since(start))
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
