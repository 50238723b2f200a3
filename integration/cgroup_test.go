package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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

	"github.com/jailrt/jail"
)

// The cgroup tests run on this host (cgroup v1 here) and, through
// integration/vm, in a pure cgroup v2 VM: keep their names TestCgroup* and
// their tools to sh and probe.

// cgroupRun runs the static probe in a jail with limits, as JSON. As the
// unprivileged user without a delegated cgroup, limits are refused: that
// case has its own test, and here the run goes ahead with --allow-unenforced
// only where a test says so.
func cgroupRun(t *testing.T, flags ...string) jail.Result {
	t.Helper()
	res, _ := runJSON(t, append([]string{"--profile", "strict", "--ro-bind", binDir + ":/probe"}, flags...)...)
	return res
}

func requireCgroups(t *testing.T) {
	t.Helper()
	if unprivileged {
		t.Skip("the unprivileged user has no delegated cgroup here; TestCgroupRefusedWithoutDelegation covers it")
	}
}

// TestCgroupMemoryOOM: a hog that wants 1 GiB under a 64 MiB limit is
// OOM-killed, the report says so, and the peak is at the limit.
func TestCgroupMemoryOOM(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--memory", "64M", "--", "/probe/probe", "hog", "1024")
	assert.Equal(t, jail.StatusOOMKilled, res.Status)
	assert.Equal(t, 137, res.ExitCode)
	assert.Equal(t, "KILL", res.Signal)
	assert.GreaterOrEqual(t, res.OOMKills, int64(1))
	assert.Equal(t, "memory", firstOf(res.LimitsHit))
	if assert.NotNil(t, res.MemoryPeakBytes, "the kernel reports a peak (memory.peak, Linux 5.19; v1 max_usage_in_bytes)") {
		const limit = 64 << 20
		assert.LessOrEqual(t, *res.MemoryPeakBytes, int64(limit+16*4096), "got peak %d, want at most the limit and a few pages", *res.MemoryPeakBytes)
		assert.GreaterOrEqual(t, *res.MemoryPeakBytes, int64(limit*9/10), "got peak %d, want close to the limit", *res.MemoryPeakBytes)
	}
	assert.NotEqual(t, "none", res.Isolation.Cgroup)
}

// TestCgroupPidsForkBomb: a fork bomb never has more tasks than pids.max,
// and the run ends (by its own exit or the timeout) with nothing left.
func TestCgroupPidsForkBomb(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--pids", "32", "--timeout", "3s", "--", "sh", "-c", "b() { b | b & }; b 2>/dev/null; sleep 5")
	assert.Contains(t, []jail.Status{jail.StatusExited, jail.StatusTimedOut, jail.StatusSignaled}, res.Status)
	assert.Contains(t, res.LimitsHit, "pids")
	if res.PidsPeak != nil {
		assert.LessOrEqual(t, *res.PidsPeak, int64(32))
	}
	requireGone(t, "b | b")
}

// TestCgroupCPUs: two spinning threads under half a CPU get at most half
// of the wall time in CPU time (about 1 s in the 2 s the timeout allows;
// the wall time the report gives is the measure, as a slow VM ends late).
// The quota is a ceiling: on a busy machine the jail may get less, so the
// floor only says that it ran.
func TestCgroupCPUs(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--cpus", "0.5", "--timeout", "2s", "--", "/probe/probe", "spin", "2")
	assert.Equal(t, jail.StatusTimedOut, res.Status)
	cpu := res.CPUUserMS + res.CPUSystemMS
	half := res.WallTimeMS / 2
	t.Logf("%d ms of CPU in %d ms under --cpus 0.5 (%.2f CPU)", cpu, res.WallTimeMS, float64(cpu)/float64(res.WallTimeMS))
	assert.LessOrEqual(t, cpu, half*12/10, "got %d ms of CPU in %d ms under --cpus 0.5, want at most %d + 20%%", cpu, res.WallTimeMS, half)
	assert.GreaterOrEqual(t, cpu, half/5, "got %d ms of CPU in %d ms: the spinner hardly ran", cpu, res.WallTimeMS)
}

// TestCgroupCPUTime: four spinning threads are stopped once the jail has
// used 1 s of CPU in all, by the cgroup's count.
func TestCgroupCPUTime(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--cpu-time", "1s", "--timeout", "20s", "--", "/probe/probe", "spin", "4")
	assert.Equal(t, jail.StatusCPUTimeExceeded, res.Status)
	assert.Equal(t, jail.ExitTimedOut, res.ExitCode)
	assert.Equal(t, []string{"cpu_time"}, res.LimitsHit)
	cpu := res.CPUUserMS + res.CPUSystemMS
	assert.GreaterOrEqual(t, cpu, int64(1000))
	// The count is polled every 10 ms: four threads on two CPUs overrun
	// by about 20 ms a poll; 500 ms leaves room for a loaded machine's
	// late polls.
	assert.LessOrEqual(t, cpu, int64(1500), "got %d ms of CPU, want the limit plus a few poll intervals", cpu)
	assert.Less(t, res.WallTimeMS, int64(10000))
}

// TestCgroupRefusedWithoutDelegation: a limit this caller cannot enforce
// refuses the run with one line that names it and the fix, unless
// --allow-unenforced, and then the report lists it. As root, the same
// run has the limit.
func TestCgroupRefusedWithoutDelegation(t *testing.T) {
	if !unprivileged {
		res := cgroupRun(t, "--memory", "64M", "--", "true")
		assert.Equal(t, jail.StatusExited, res.Status)
		assert.NotEqual(t, "none", res.Isolation.Cgroup)
		assert.Empty(t, res.Isolation.NotEnforced)
		return
	}
	r := runJail(t, "run", "--memory", "64M", "--", "true")
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.Contains(t, r.stderr, "cannot enforce memory")
	assert.Contains(t, r.stderr, "fix:")
	res := cgroupRun(t, "--memory", "64M", "--allow-unenforced", "--", "true")
	assert.Equal(t, jail.StatusExited, res.Status)
	require.NotEmpty(t, res.Isolation.NotEnforced)
	assert.True(t, strings.HasPrefix(res.Isolation.NotEnforced[0], "memory: "), res.Isolation.NotEnforced[0])
	n := 0
	for _, ne := range res.Isolation.NotEnforced {
		if strings.HasPrefix(ne, "memory: ") {
			n++
		}
	}
	assert.Equal(t, 1, n, "listed once (noted when the group was begun, and after it was completed): %q", res.Isolation.NotEnforced)
}

// TestCgroupManyRuns: 200 runs back to back and 50 at once, each with a
// cgroup: no failure, no EBUSY, and no cgroup left (TestMain checks the
// host after the suite; this checks right away).
func TestCgroupManyRuns(t *testing.T) {
	requireCgroups(t)
	var mu sync.Mutex
	var pids []string // of the jails run here: only their groups are this test's
	for i := range 200 {
		r := runJail(t, "run", "--memory", "32M", "--pids", "16", "--", "true")
		require.Equal(t, 0, r.code, "run %d: %s", i, r.stderr)
		pids = append(pids, strconv.Itoa(r.pid))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for i := range 50 {
		wg.Go(func() {
			r := runJail(t, "run", "--memory", "32M", "--pids", "16", "--", "true")
			if r.code != 0 {
				errs <- fmt.Sprintf("parallel run %d: exit %d: %s", i, r.code, r.stderr)
			}
			mu.Lock()
			pids = append(pids, strconv.Itoa(r.pid))
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// Other packages' tests run jails in parallel with this one; a group of
	// theirs whose owner has just exited would look like a leak here.
	var left []string
	for _, d := range allJailCgroups() {
		owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "jail-"), "-")
		if slices.Contains(pids, owner) {
			left = append(left, d)
		}
	}
	assert.Empty(t, left, "cgroups left behind")
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestCgroupCleanAfterKill: jail killed with SIGKILL cannot remove its
// cgroup; `jail check --clean` does, and kills what still runs in it.
func TestCgroupCleanAfterKill(t *testing.T) {
	requireCgroups(t)
	marker, script := sleepMarker(11)
	c := jailCmd(t.Context(), "run", "--memory", "32M", "--no-pidns", "--", "sh", "-c", script)
	require.NoError(t, c.Start())
	// Its own groups and its sleep: other packages' jails run meanwhile,
	// and the script's text, in jail's own arguments, is not the marker.
	require.Eventually(t, func() bool { return len(runGroups(c.Process.Pid)) > 0 && len(processesMatching(marker)) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	groups := runGroups(c.Process.Pid)
	assert.NotEmpty(t, groups, "jail's cgroup outlives a SIGKILL of jail")
	out := runOK(t, "check", "--clean")
	for _, g := range groups {
		assert.Contains(t, out, "removed "+g)
	}
	assert.Empty(t, runGroups(c.Process.Pid))
	requireGone(t, marker)
}

// TestCgroupCleanOrphanSession: a session whose PID 1 is gone and whose
// state directory went too (removed by hand) leaves its group, which no
// state names for `session gc` to find; `jail check --clean` removes it
// once it is over a minute old (a younger empty group may be a session
// being made), and never a live session's group, however old.
func TestCgroupCleanOrphanSession(t *testing.T) {
	if !hasCgroups() {
		t.Skip("an unprivileged session has no cgroup here")
	}
	dir := sessionDir(t)
	groupDirs := func(id string) []string {
		var out []string
		for _, d := range allJailCgroups() {
			if strings.HasPrefix(filepath.Base(d), "jail-session-") && strings.HasSuffix(d, "-"+id) {
				out = append(out, d)
			}
		}
		return out
	}
	age := func(dirs []string) {
		old := time.Now().Add(-2 * time.Minute)
		for _, d := range dirs {
			require.NoError(t, os.Chtimes(d, old, old))
		}
	}
	live := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", live)
	orphan := strings.TrimSpace(sessOK(t, dir, "create"))
	orphanDirs := groupDirs(orphan)
	require.NotEmpty(t, orphanDirs)
	b, err := os.ReadFile(filepath.Join(dir, orphan, "state.json"))
	require.NoError(t, err)
	var st struct{ PID int }
	require.NoError(t, json.Unmarshal(b, &st))
	require.NoError(t, unix.Kill(st.PID, unix.SIGKILL))
	require.Eventually(t, func() bool { return unix.Kill(st.PID, 0) == unix.ESRCH }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, orphan)))

	out := runOK(t, "check", "--clean")
	assert.NotContains(t, out, orphan, "under a minute old: left")
	assert.Equal(t, orphanDirs, groupDirs(orphan))
	age(orphanDirs)
	age(groupDirs(live))
	out = runOK(t, "check", "--clean")
	for _, d := range orphanDirs {
		assert.Contains(t, out, "removed "+d)
	}
	assert.Empty(t, groupDirs(orphan))
	assert.NotEmpty(t, groupDirs(live), "a live session's group stays")
	assert.Equal(t, "running", inspect(t, dir, live).State)
}

// TestCgroupNamespaceHidesTheHost is part of finding 14: on cgroup v1 the
// child joins its cgroups after the cgroup namespace was made (at clone),
// so /proc/self/cgroup showed the jail's cgroup, named after jail's host
// pid. The namespace is made again after the join: every hierarchy shows
// the jail's own cgroup as "/".
func TestCgroupNamespaceHidesTheHost(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--memory", "64M", "--pids", "64", "--", "sh", "-c", "cat /proc/self/cgroup")
	require.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		assert.True(t, strings.HasSuffix(l, ":/"), "got %q, want the namespace root", l)
	}
	assert.NotContains(t, res.Stdout, "jail-", "no host cgroup name")
}

// TestCgroupTCPBuffersCharged is finding 6: on cgroup v1, TCP socket
// buffers are charged to a group only once its TCP limit is set; a jail
// held 400 MiB of loopback buffers under --memory 64M. Now they are
// limited (v1: to the memory limit, on a counter of their own, the sender
// then refused; v2: inside memory.max, where the OOM killer may end the
// jail). Some overshoot is the kernel's (forced charges on send).
func TestCgroupTCPBuffersCharged(t *testing.T) {
	requireCgroups(t)
	res := cgroupRun(t, "--memory", "64M", "--timeout", "20s", "--", "/probe/probe", "tcpfill", "400")
	if res.Status == jail.StatusOOMKilled {
		// cgroup v2 (Linux 6.1 in the VM) charges socket buffers to the
		// group's memory, and the OOM killer ended the jail at the limit.
		assert.Contains(t, res.LimitsHit, "memory")
		return
	}
	require.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
	var mib int
	_, err := fmt.Sscanf(res.Stdout, "tcp queued %d MiB", &mib)
	require.NoError(t, err, "stdout %q", res.Stdout)
	assert.LessOrEqual(t, mib, 96, "got %d MiB of TCP buffers under a 64 MiB limit", mib)
	assert.Greater(t, mib, 8, "the probe queued something at all")
}

// TestCgroupEndsStragglersWithoutPIDNamespace: without a PID namespace,
// a process that left the workload's group with setsid outlives PID 1, and
// holds the pipe jail copies a file stdout from: Wait waited for it (30 s
// here). The jail's cgroup ends it once PID 1 is gone.
func TestCgroupEndsStragglersWithoutPIDNamespace(t *testing.T) {
	requireCgroups(t)
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer out.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := jailCmd(ctx, "run", "--no-pidns", "--pids", "50", "--", "sh", "-c", "setsid sh -c 'sleep 30; : straggler-30531' & echo started")
	c.Stdout = out // a regular file: relayed through a pipe, never handed over
	start := time.Now()
	require.NoError(t, c.Run(), "jail was killed by the test's deadline: it waited for the straggler")
	assert.Less(t, time.Since(start), 10*time.Second, "jail waited for the straggler")
	b, err := os.ReadFile(out.Name())
	require.NoError(t, err)
	assert.Equal(t, "started\n", string(b))
	requireGone(t, "straggler-30531")
}

// TestCgroupLeakCheckSeesGroups: the suite's leak check (hostState) finds
// a running jail's cgroups where it looks; were it looking in the wrong
// place, it would pass on every leak.
func TestCgroupLeakCheckSeesGroups(t *testing.T) {
	requireCgroups(t)
	c := jailCmd(t.Context(), "run", "--pids", "16", "--", "sleep", "30")
	require.NoError(t, c.Start())
	defer func() { _ = c.Process.Signal(syscall.SIGTERM); _ = c.Wait() }() // jail forwards it, and removes its groups
	assert.Eventually(t, func() bool {
		mine, seen := runGroups(c.Process.Pid), jailCgroups()
		return len(mine) > 0 && !slices.ContainsFunc(mine, func(g string) bool { return !slices.Contains(seen, g) })
	}, 10*time.Second, 10*time.Millisecond, "the leak check sees no cgroup of a running jail")
	// The groups come before the clone: wait for PID 1 too.
	assert.Eventually(t, func() bool {
		return slices.ContainsFunc(ourInits(), func(p string) bool { return parentOf(p) == strconv.Itoa(c.Process.Pid) })
	}, 10*time.Second, 10*time.Millisecond, "the leak check sees no PID 1 of a running jail")

	// And a session's, live and then as if leaked, emptied of its PID 1.
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--pids", "16"))
	defer sess(t, dir, "rm", "--force", id)
	var groups []string
	for _, g := range jailCgroups() {
		if strings.HasPrefix(filepath.Base(g), "jail-session-") && strings.HasSuffix(g, "-"+id) {
			groups = append(groups, g)
		}
	}
	require.NotEmpty(t, groups, "the leak check sees no group of a live session")
	procs := groupProcs(groups[0])
	require.Len(t, procs, 1, "the session's PID 1 alone")
	assert.Contains(t, ourInits(), procs[0], "the leak check sees no PID 1 of a live session")

	// Not another package's session (its state elsewhere), live.
	other := t.TempDir()
	oid := strings.TrimSpace(runOK(t, "session", "create", "--state-dir", other, "--pids", "16"))
	defer runJail(t, "session", "rm", "--state-dir", other, "--force", oid)
	for _, g := range jailCgroups() {
		assert.False(t, strings.HasSuffix(g, "-"+oid), "the leak check counts another suite's live session: %s", g)
	}
	pid, _ := strconv.Atoi(procs[0])
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return len(groupProcs(groups[0])) == 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, jailCgroups(), groups[0], "the leak check does not see an emptied session group")
	// Still when its state directory is gone, as at the suite's end, the
	// tests' directories removed.
	require.NoError(t, os.Rename(dir, dir+".gone"))
	assert.Contains(t, jailCgroups(), groups[0], "the leak check does not see an emptied session group whose state directory is gone")
	require.NoError(t, os.Rename(dir+".gone", dir))

	// Nor another's emptied: its state directory is none of the suite's.
	var theirs string
	for _, g := range allJailCgroups() {
		if strings.HasSuffix(g, "-"+oid) {
			theirs = g
		}
	}
	require.NotEmpty(t, theirs, "no group of the other session")
	for _, p := range groupProcs(theirs) {
		pid, _ := strconv.Atoi(p)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	require.Eventually(t, func() bool { return len(groupProcs(theirs)) == 0 }, 5*time.Second, 10*time.Millisecond)
	assert.NotContains(t, jailCgroups(), theirs, "the leak check counts another's emptied session group")
}
