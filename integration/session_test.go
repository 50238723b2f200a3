package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/nsexec"
)

// sessionDir is a state directory of the test's own, so that sessions
// work for the unprivileged run too (it has no XDG_RUNTIME_DIR).
func sessionDir(t *testing.T) string {
	d := filepath.Join(hostDir(t), "sessions")
	require.NoError(t, os.Mkdir(d, 0o700))
	rememberStateDir(d)
	return d
}

// sess runs `jail session SUB --state-dir DIR args...`.
func sess(t *testing.T, dir, sub string, args ...string) result {
	t.Helper()
	return runJail(t, append([]string{"session", sub, "--state-dir", dir}, args...)...)
}

func sessOK(t *testing.T, dir, sub string, args ...string) string {
	t.Helper()
	r := sess(t, dir, sub, args...)
	require.Equal(t, 0, r.code, "jail session %s %v: %s", sub, args, r.stderr)
	return r.stdout
}

func inspect(t *testing.T, dir, id string) jail.SessionInfo {
	t.Helper()
	var info jail.SessionInfo
	require.NoError(t, json.Unmarshal([]byte(sessOK(t, dir, "inspect", "--json", id)), &info))
	return info
}

// hasCgroups: the session gets a cgroup here (root; an unprivileged
// caller has none on this hybrid host without delegation).
func hasCgroups() bool { return !unprivileged }

func TestSessionLifecycle(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--id", "life", "--label", "team=it", "--env", "GREETING=hello", "--ro-bind", binDir+":/probe"))
	require.Equal(t, "life", id)
	info := inspect(t, dir, id)
	assert.Equal(t, "running", info.State)
	assert.Equal(t, jail.SessionSchema, info.Schema)
	assert.Equal(t, map[string]string{"team": "it"}, info.Labels)

	// A duplicate is refused.
	r := sess(t, dir, "create", "--id", id)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "session exists")

	// Files persist from one command to the next; env and cwd default
	// to the session's and can be overridden.
	sessOK(t, dir, "exec", id, "--", "sh", "-c", "echo kept > /tmp/note")
	assert.Equal(t, "kept\n", sessOK(t, dir, "exec", id, "--", "cat", "/tmp/note"))
	assert.Equal(t, "hello /workspace\n", sessOK(t, dir, "exec", id, "--", "sh", "-c", `echo "$GREETING" "$PWD"`))
	assert.Equal(t, "bye /etc\n", sessOK(t, dir, "exec", "--env", "GREETING=bye", "--cwd", "/etc", id, "--", "sh", "-c", `echo "$GREETING" "$PWD"`))

	// The command is in the session's namespaces (time: the one PID 1
	// made for its children), in a cgroup namespace rooted at its own
	// cgroup, under seccomp, without capabilities, with fds 0-2 only.
	out := sessOK(t, dir, "exec", id, "--", "sh", "-c",
		`for n in user pid mnt net uts ipc time; do readlink /proc/$$/ns/$n; done; grep '^0::' /proc/$$/cgroup; `+
			`grep -E '^(Seccomp|CapEff|CapPrm|NoNewPrivs):' /proc/$$/status`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 12, out)
	lines[8], lines[9], lines[10], lines[11] = lines[11], lines[8], lines[9], lines[10] // /proc order: CapPrm, CapEff, NoNewPrivs, Seccomp
	for i, n := range []string{"user", "pid", "mnt", "net", "uts", "ipc", "time_for_children"} {
		want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", info.PID, n))
		require.NoError(t, err)
		if n == "time_for_children" {
			want = strings.Replace(want, "time_for_children", "time", 1)
		}
		assert.Equal(t, want, lines[i], "namespace %s", n)
	}
	assert.Equal(t, "0::/", lines[7])
	assert.Equal(t, "Seccomp:\t2", lines[8])
	assert.Equal(t, "CapPrm:\t0000000000000000", lines[9])
	assert.Equal(t, "CapEff:\t0000000000000000", lines[10])
	assert.Equal(t, "NoNewPrivs:\t1", lines[11])
	// Fds 0-2 only, as the probe lists them (a shell's ls would list its
	// own directory descriptor, or the shell's pipes, or busybox's own).
	assert.Equal(t, "0\n1\n2\n", sessOK(t, dir, "exec", id, "--", "/probe/probe", "fds"))

	// The joining helper is not in the jail's PID namespace, and its PID 1
	// is non-dumpable: neither can be reached from a command.
	out = sessOK(t, dir, "exec", id, "--", "sh", "-c", `cat /proc/[0-9]*/comm | sort -u | tr '\n' ' '; readlink /proc/1/exe || echo unreadable`)
	assert.NotContains(t, out, "jail:exec")
	assert.Contains(t, out, "jail:init")
	assert.Contains(t, out, "unreadable")

	// The report is a run's, with the session's and the command's ids.
	var res jail.Result
	r = sess(t, dir, "exec", "--json", id, "--", "sh", "-c", "echo out; exit 3")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
	assert.Equal(t, 3, r.code)
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Equal(t, "out\n", res.Stdout)
	assert.Equal(t, id, res.SessionID)
	assert.NotEmpty(t, res.ExecID)

	assert.Contains(t, sessOK(t, dir, "list", "--label", "team=it"), id)
	assert.NotContains(t, sessOK(t, dir, "list", "--label", "team=other"), id)

	// rm ends it, and leaves nothing.
	assert.Contains(t, sessOK(t, dir, "rm", id), id)
	requirePidGone(t, info.PID)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries)
	r = sess(t, dir, "exec", id, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "session not found")
	sessOK(t, dir, "rm", "--force", id)
}

// sleepMarker returns a command line that only a sleep started by script
// has ("sleep N", unique to this test process and k), and the script:
// the script's own text, in the jail CLI's arguments, does not hold it.
func sleepMarker(k int) (marker, script string) {
	n := 100000 + (os.Getpid()%10000)*10 + k
	return fmt.Sprintf("sleep %d", n), fmt.Sprintf("exec sleep $((%d+0))", n)
}

// requireRunning waits up to 30 s (a loaded CI machine, an emulated VM)
// for n host processes matching s.
func requireRunning(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(processesMatching(s)) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(t, processesMatching(s), n, "processes matching %q", s)
}

// requirePidGone waits up to 10 s for pid to be gone (or a zombie).
func requirePidGone(t *testing.T, pid int) {
	t.Helper()
	requirePidGoneWithin(t, pid, 10*time.Second)
}

func requirePidGoneWithin(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d is still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSessionExecTimeoutKillsWhatItStarted(t *testing.T) {
	if !hasCgroups() {
		t.Skip("needs the session's cgroup: without one, a command's timeout reaches only its process group (the report says so)")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--pids", "64"))
	defer sess(t, dir, "rm", id)
	marker, script := sleepMarker(1)
	var res jail.Result
	r := sess(t, dir, "exec", "--json", "--timeout", "3s", id, "--", "sh", "-c",
		"setsid sh -c 'trap \"\" HUP; "+script+"' >/dev/null 2>&1 & "+ // nohup, in any sh
			"for i in $(seq 50); do grep -qx sleep /proc/[0-9]*/comm && { echo started; break; }; sleep 0.05; done; sleep 100")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
	assert.Equal(t, jail.StatusTimedOut, res.Status)
	assert.Equal(t, 124, r.code)
	assert.Equal(t, "started\n", res.Stdout, "the grandchild ran")
	requireGone(t, marker)
	assert.Equal(t, "running", inspect(t, dir, id).State)
	assert.Equal(t, "ok\n", sessOK(t, dir, "exec", id, "--", "echo", "ok"))
}

// TestSessionExecEndsItsGroup: a command that times out, or simply ends,
// is gone with its process group, in a session with or without a cgroup.
// SIGKILL of its helper alone left a timed-out one running, reparented out
// of reach; an ended one's background processes ran on without a cgroup.
func TestSessionExecEndsItsGroup(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", id)
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"timeout", []string{"--timeout", "300ms", id, "--", "sh", "-c", "sleep 60 & sleep 61"}, 124, ""},
		{"end", []string{id, "--", "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo hi"}, 0, "hi\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sess(t, dir, "exec", tc.args...)
			assert.Equal(t, tc.code, r.code, r.stderr)
			assert.Equal(t, tc.out, r.stdout)
			// The session's PID 1 reaps what the kill left as it comes.
			assert.Equal(t, onlyPID1, awaitOnlyPID1(t, dir, id), "nothing of the command is left, not even a zombie")
		})
	}
}

// tracedLeader is a command whose leader cannot be reaped: a process
// that left its group with setsid traces it (PTRACE_SEIZE) and never
// waits for it. It prints "ready" once it traces, and lets go of the
// command's stdout and stderr. The session needs /probe bound and a policy
// that allows ptrace.
const tracedLeader = `setsid /probe/probe seize "$$" & wait`

// ptraceSession makes a session whose policy allows ptrace (seccomp
// none), with the probe at /probe, removed when the test ends.
func ptraceSession(t *testing.T) (dir, id string) {
	t.Helper()
	dir = sessionDir(t)
	id = strings.TrimSpace(sessOK(t, dir, "create", "--seccomp", "none", "--ro-bind", binDir+":/probe"))
	t.Cleanup(func() { sess(t, dir, "rm", id) })
	return dir, id
}

// execJSON runs argv in session id with timeout and returns what jail
// printed and its report.
func execJSON(t *testing.T, dir, id, timeout string, argv ...string) (result, jail.Result) {
	t.Helper()
	var res jail.Result
	r := sess(t, dir, "exec", append([]string{"--json", "--timeout", timeout, id, "--"}, argv...)...)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), "stdout %q stderr %s", r.stdout, r.stderr)
	return r, res
}

// TestSessionExecTimeoutTracedLeader: a command's timeout holds when its
// leader cannot be reaped: a process the command started traces it, or
// one of its threads (whose zombie keeps the whole process from its
// parent), from its main thread or another. The helper, told to kill the
// command, waited for the leader's end to report it: for good without a
// cgroup, and the command's other processes ran on, its caller waiting.
// Now it kills the tracer when the leader is not reaped 100 ms after the
// kill, reaps it and reports.
func TestSessionExecTimeoutTracedLeader(t *testing.T) {
	for _, tc := range []struct{ name, script string }{
		{"leader", tracedLeader},
		{"from a thread", `setsid /probe/probe seize-thread "$$" & wait`},
		{"a thread", `mkfifo /tmp/tid && { setsid sh -c 'read tid </tmp/tid; exec /probe/probe seize "$tid"' & } &&
			exec /probe/probe thread >/tmp/tid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := ptraceSession(t)
			t0 := time.Now()
			// The timeout runs from the helper's clone: 3 s leaves time for
			// the joins, the shells and the probes to start and trace
			// under emulation (the script never ends by itself).
			r, res := execJSON(t, dir, id, "3s", "sh", "-c", tc.script)
			assert.Equal(t, 124, r.code, r.stderr)
			assert.Equal(t, "ready\n", res.Stdout, "traced")
			assert.Equal(t, jail.StatusTimedOut, res.Status)
			// Reported by its helper, which reaped it once it had killed
			// the tracer (not by the parent's kill of the command's cgroup
			// after joinedKillGrace, which leaves the resident set unknown).
			assert.Positive(t, res.MaxRSSBytes, "the helper reaped the leader")
			assert.Less(t, time.Since(t0), 20*time.Second)
			assertTracerEnds(t, dir, id)
		})
	}
}

// TestSessionExecTracedLeaderExits: a command that exits while another
// of its processes traces its leader, or another of its threads, ends
// then, with the leader's own status. A traced zombie is its tracer's to
// wait for first, and a traced thread's zombie keeps its whole process
// from its parent (no SIGCHLD, no process pidfd): the helper watches the
// leader thread, kills the tracer when the process is not reaped 100 ms
// after its leader's end, and reaps it. It used to wait until the tracer
// let go, or the timeout.
func TestSessionExecTracedLeaderExits(t *testing.T) {
	for _, tc := range []struct{ name, script, stdout string }{
		// Builtins only once traced: a traced shell stops at its next
		// signal (a child's SIGCHLD), for good with this tracer. (The loop
		// ends only once the leader is traced.)
		{"leader", `setsid /probe/probe seize "$$" &
			while :; do while read -r k v; do [ "$k" = TracerPid: ] && [ "$v" != 0 ] && exit 3; done </proc/$$/status; done`, ""},
		// The probe exits once its thread is traced.
		{"a thread", `mkfifo /tmp/tid && { setsid sh -c 'read tid </tmp/tid; exec /probe/probe seize "$tid"' & } &&
			exec /probe/probe thread 3 >/tmp/tid`, "ready\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := ptraceSession(t)
			t0 := time.Now()
			r, res := execJSON(t, dir, id, "30s", "sh", "-c", tc.script)
			assert.Equal(t, 3, r.code, r.stderr)
			assert.Equal(t, jail.StatusExited, res.Status)
			assert.Equal(t, 3, res.ExitCode, "the leader's own status")
			if tc.stdout != "" {
				assert.Equal(t, tc.stdout, res.Stdout, "traced")
			}
			assert.Positive(t, res.MaxRSSBytes, "reaped: its resident set is known")
			assert.Less(t, time.Since(t0), 10*time.Second)
			assertTracerEnds(t, dir, id)
		})
	}
}

// TestTracemeParent: a workload that makes its parent its tracer
// (PTRACE_TRACEME, where the policy allows ptrace) makes a run's PID 1, or
// a session command's helper, the tracer of its execve. Its stops come to
// their wait whatever its options: they took the first for its end,
// reported a stopped status, and a run's PID 1 exited, which killed it.
// They let it go on untraced now, and report its real end.
func TestTracemeParent(t *testing.T) {
	argv := []string{"/probe/probe", "traceme", "/bin/sh", "-c", "echo traced; exit 7"}
	check := func(t *testing.T, r result) {
		t.Helper()
		var res jail.Result
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), "stdout %q stderr %s", r.stdout, r.stderr)
		assert.Equal(t, 7, r.code, r.stderr)
		assert.Equal(t, jail.StatusExited, res.Status)
		assert.Equal(t, 7, res.ExitCode)
		assert.Equal(t, "traced\n", res.Stdout)
	}
	t.Run("run", func(t *testing.T) {
		check(t, runJail(t, append([]string{"run", "--json", "--seccomp", "none", "--ro-bind", binDir + ":/probe", "--"}, argv...)...))
	})
	t.Run("session", func(t *testing.T) {
		dir, id := ptraceSession(t)
		check(t, sess(t, dir, "exec", append([]string{"--json", "--timeout", "30s", id, "--"}, argv...)...))
		assert.Equal(t, onlyPID1, awaitOnlyPID1(t, dir, id), "nothing of the command is left")
	})
}

// assertTracerEnds checks that a command with a traced leader left
// nothing in session id, cgroup or not: its helper killed the tracer,
// which held the leader's end (the cgroup kills it too).
func assertTracerEnds(t *testing.T, dir, id string) {
	t.Helper()
	assert.Equal(t, onlyPID1, awaitOnlyPID1(t, dir, id), "nothing of the command is left")
}

// childPIDs lists pid's children, from every one of its threads.
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	require.NoError(t, err)
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, c := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(c)
			require.NoError(t, err)
			pids = append(pids, n)
		}
	}
	return pids
}

// awaitOnlyPID1 waits up to 5 s for session id to run nothing but its
// PID 1, and returns what ran last.
func awaitOnlyPID1(t *testing.T, dir, id string) string {
	t.Helper()
	left := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = sessionProcs(t, dir, id); left == onlyPID1 {
			break
		}
	}
	return left
}

// onlyPID1 is what sessionProcs gives for a session running nothing.
const onlyPID1 = "jail:init\nps\n"

// sessionProcs lists the names of the processes in session id, as ps in it
// sees them (itself last).
func sessionProcs(t *testing.T, dir, id string) string {
	t.Helper()
	return sessOK(t, dir, "exec", id, "--", "ps", "-e", "-o", "comm=")
}

// TestSessionExecKilledEndsItsCommand: a `jail session exec` killed with
// SIGKILL (a crashed server, an OOM-killed caller) ends its command with
// its process group, as a timeout does, and with its cgroup what left the
// group with setsid. Its helper used to die with it, of its parent-death
// signal, and leave the command's children running in the session with
// no one to enforce their timeout; then it ended only the group; then a
// traced zombie kept it waiting before it could end the cgroup, and an
// exec killed after its command ended left what the command had started.
func TestSessionExecKilledEndsItsCommand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create []string
		script string
		// cgroup: only the command's cgroup holds what it leaves (without
		// one it runs on, as README says). stop: the exec is stopped at
		// "ready" until its command has ended, then killed.
		cgroup, stop bool
	}{
		{name: "group", script: "sleep 60 & sleep 61 & echo ready; wait"},
		// "ready" comes after the setsid.
		{name: "setsid", cgroup: true, script: "sleep 60 & setsid sh -c 'echo ready; exec sleep 62' & wait"},
		// The leader's zombie cannot be reaped while its tracer lives.
		// The helper kills the tracer, cgroup or not.
		{name: "traced", create: []string{"--seccomp", "none", "--ro-bind", binDir + ":/probe"},
			script: tracedLeader},
		{name: "after its end", cgroup: true, stop: true,
			script: "setsid sh -c 'exec sleep 62' </dev/null >/dev/null 2>&1 & echo ready; sleep 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cgroup && !hasCgroups() {
				t.Skip("without a cgroup what left the process group runs on (README)")
			}
			dir := sessionDir(t)
			id := strings.TrimSpace(sessOK(t, dir, "create", tc.create...))
			defer sess(t, dir, "rm", id)
			c := jailCmd(t.Context(), "session", "exec", "--state-dir", dir, "--timeout", "0", id, "--", "sh", "-c", tc.script)
			stdout, err := c.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, c.Start())
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "ready\n", line)
			if tc.stop {
				require.NoError(t, c.Process.Signal(syscall.SIGSTOP))
				time.Sleep(2 * time.Second) // the command ends after 1 s
			}
			helpers := childPIDs(t, c.Process.Pid)
			require.NotEmpty(t, helpers)
			require.NoError(t, c.Process.Kill())
			_ = c.Wait()
			for _, pid := range helpers {
				requirePidGone(t, pid) // it does not wait for a zombie it cannot reap
			}
			assert.Equal(t, onlyPID1, awaitOnlyPID1(t, dir, id), "nothing of the killed exec's command is left")
			assert.Equal(t, "running", inspect(t, dir, id).State, "the session goes on")
		})
	}
}

func TestSessionOOMIsTheCommands(t *testing.T) {
	if !hasCgroups() {
		t.Skip("a memory limit needs a cgroup (refused without one: see TestSessionRefusesUnenforcedLimits)")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--memory", "64M"))
	defer sess(t, dir, "rm", id)
	var res jail.Result
	r := sess(t, dir, "exec", "--json", id, "--", "sh", "-c", "x=a; while :; do x=$x$x; done")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
	assert.Equal(t, jail.StatusOOMKilled, res.Status, r.stdout)
	assert.Positive(t, res.OOMKills)
	first := res.CPUUserMS + res.CPUSystemMS
	// The next command has its own count, and CPU time of its own: less
	// than the first's, which started a shell too and then copied tens of
	// megabytes. (Not a fixed bound: `true` alone took 105 ms of CPU in
	// CI's emulated VM once.)
	r = sess(t, dir, "exec", "--json", id, "--", "true")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Zero(t, res.OOMKills)
	assert.Less(t, res.CPUUserMS+res.CPUSystemMS, first, "the command's own CPU time, not the session's")
}

// TestSessionRefusesUnenforcedLimits: a limit this caller cannot enforce
// (unprivileged, no delegation here), or one no host can (root), refuses
// the session and leaves nothing.
func TestSessionRefusesUnenforcedLimits(t *testing.T) {
	dir := sessionDir(t)
	memory := "64M"
	if hasCgroups() {
		memory = "4K" // below cgroup.MinMemoryBytes
	}
	r := sess(t, dir, "create", "--memory", memory)
	assert.Equal(t, 125, r.code)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "a failed create leaves nothing")
}

func TestSessionDeadlines(t *testing.T) {
	dir := sessionDir(t)
	ttl := strings.TrimSpace(sessOK(t, dir, "create", "--ttl", "1s"))
	ttlPID := inspect(t, dir, ttl).PID
	// A command that runs past the idle timeout keeps the session up. It
	// connects right after the create: the timeout runs from PID 1's start
	// (two more CLI starts before it took 1 s of CI's emulated VM's time,
	// and a slower host doubles that: 5 s leaves room).
	idle := strings.TrimSpace(sessOK(t, dir, "create", "--idle-timeout", "5s"))
	assert.Equal(t, "done\n", sessOK(t, dir, "exec", idle, "--", "sh", "-c", "sleep 6; echo done"))
	info := inspect(t, dir, idle)
	assert.Equal(t, "running", info.State)
	// With no jail process on the host, the kernel timers of each PID 1
	// end them.
	requirePidGone(t, ttlPID)
	requirePidGoneWithin(t, info.PID, 10*time.Second)
	assert.Equal(t, 125, sess(t, dir, "exec", ttl, "--", "true").code)
	sessOK(t, dir, "gc")
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "gc leaves nothing")
}

// TestSessionOtherPIDNamespace: a session's state names its PID 1 by a
// pid of its creator's PID namespace. A caller in another (a container
// sharing the state directory; unshare -p, with or without its own /proc)
// sees another process or none by that pid: there the session is not
// found, and not taken for ended. exec and gc there used to remove its
// state and kill its cgroup, ending it.
func TestSessionOtherPIDNamespace(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", id)
	pid := inspect(t, dir, id).PID
	unshare := []string{"unshare", "-pf"}
	if unprivileged {
		unshare = []string{"unshare", "-Ucpf"}
	}
	path, err := exec.LookPath("unshare")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		extra []string
		says  string
	}{
		{"the host's /proc", nil, "/proc is not this process's PID namespace's"},
		{"its own /proc", []string{"--mount-proc"}, "it was made in another PID namespace than this process's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sub := range [][]string{{"exec", id, "--", "true"}, {"gc"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c := jailCmd(ctx)
				c.Path = path
				c.Args = append(append(append(slices.Clone(unshare), tc.extra...), jailBin, "session", sub[0], "--state-dir", dir), sub[1:]...)
				r := runJailCmd(t, c)
				cancel()
				if sub[0] == "gc" {
					assert.Equal(t, 0, r.code, r.stderr)
					assert.Empty(t, strings.TrimSpace(r.stdout), "gc removed nothing")
				} else {
					assert.Equal(t, 125, r.code, r.stderr)
					assert.Contains(t, r.stderr, tc.says)
					assert.Contains(t, r.stderr, "session not found")
				}
			}
			assert.Equal(t, "running", inspect(t, dir, id).State)
			assert.Equal(t, pid, inspect(t, dir, id).PID)
			assert.Equal(t, "alive\n", sessOK(t, dir, "exec", id, "--", "echo", "alive"))
		})
	}
	// The probe of a session's control socket (seen from there) does not
	// restart its idle timeout: a session with a 1 s idle timeout, probed
	// every 200 ms, ends all the same. Each probe here waits until PID 1
	// has taken the connection (its ack) before it says it only probes;
	// every other one, as the client does, leaves the ack unread, which
	// makes PID 1's first read of it a reset. A connection used to count
	// as a command's, and each probe gave the session 1 s more.
	t.Run("probes keep no session up", func(t *testing.T) {
		idle := strings.TrimSpace(sessOK(t, dir, "create", "--idle-timeout", "1s"))
		idlePID := inspect(t, dir, idle).PID
		end := time.Now().Add(2500 * time.Millisecond)
		for i := 0; time.Now().Before(end); i++ {
			time.Sleep(200 * time.Millisecond)
			c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, idle, "ctl.sock"), Net: "unixpacket"})
			if err != nil {
				break // ended
			}
			if i%2 == 0 {
				ack := make([]byte, 1)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(ack)
				require.NoError(t, err, "PID 1 takes the connection")
			} else {
				time.Sleep(50 * time.Millisecond) // PID 1 takes it and acks
			}
			_, err = c.Write(nsexec.Probe())
			require.NoError(t, err)
			c.Close()
		}
		requirePidGoneWithin(t, idlePID, 500*time.Millisecond)
		sessOK(t, dir, "gc")
	})
	// A session made in a PID namespace that is gone (a container's,
	// restarted) went with it: its control socket refuses, and gc here
	// removes what it left.
	t.Run("made in a namespace now gone", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := jailCmd(ctx)
		c.Path = path
		c.Args = append(slices.Clone(unshare), "--mount-proc", jailBin, "session", "create", "--state-dir", dir)
		r := runJailCmd(t, c)
		require.Equal(t, 0, r.code, r.stderr)
		gone := strings.TrimSpace(r.stdout)
		require.DirExists(t, filepath.Join(dir, gone))
		assert.Contains(t, sessOK(t, dir, "gc"), gone)
		assert.NoDirExists(t, filepath.Join(dir, gone))
		assert.Equal(t, "alive\n", sessOK(t, dir, "exec", id, "--", "echo", "alive"), "the other session runs on")
	})
}

func TestSessionPauseFreezes(t *testing.T) {
	if !hasCgroups() {
		t.Skip("pausing needs the session's cgroup (freezer)")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spin := jailCmd(ctx, "session", "exec", "--state-dir", dir, id, "--", "sh", "-c", "echo spinning; while :; do :; done")
	out, err := spin.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, spin.Start())
	cpu := func() int64 {
		u := inspect(t, dir, id).Usage
		require.NotNil(t, u)
		return u.CPUUserMS + u.CPUSystemMS
	}
	// The loop runs before the pause (a command started after it is
	// refused), however slow the machine.
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "spinning\n", line)
	sessOK(t, dir, "pause", id)
	assert.Equal(t, "paused", inspect(t, dir, id).State)
	// The count may still grow a little after the pause, with CPU time
	// run before it and counted late (cgroup's TestFreezeThaw saw 5.9 ms
	// in CI's emulated VM): it is taken once two reads 100 ms apart
	// agree, which a running loop never lets them do.
	var a int64
	settled := false
	for deadline := time.Now().Add(10 * time.Second); !settled && time.Now().Before(deadline); {
		x := cpu()
		time.Sleep(100 * time.Millisecond)
		a = cpu()
		settled = x == a
	}
	require.True(t, settled, "CPU time went on after pause")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, a, cpu(), "CPU time went on while paused")
	r := sess(t, dir, "exec", id, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "paused")
	sessOK(t, dir, "resume", id)
	// 100 ms of CPU, however loaded the machine.
	grew := false
	for deadline := time.Now().Add(10 * time.Second); !grew && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		grew = cpu() > a+100
	}
	assert.True(t, grew, "the loop did not go on after resume")
	assert.Contains(t, sessOK(t, dir, "rm", id), id)
	err = spin.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 128+9, ee.ExitCode(), "rm kills a running command")
}

func TestSessionRefusesForgedState(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--ttl", "10s"))
	real := inspect(t, dir, id).PID
	victim := exec.Command("sleep", "30")
	require.NoError(t, victim.Start())
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()

	p := filepath.Join(dir, id, "state.json")
	orig, err := os.ReadFile(p)
	require.NoError(t, err)
	b := orig
	var st map[string]any
	require.NoError(t, json.Unmarshal(b, &st))
	st["pid"] = victim.Process.Pid
	b, err = json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o600))

	r := sess(t, dir, "exec", id, "--", "true")
	assert.Equal(t, 125, r.code)
	sess(t, dir, "rm", id)
	sess(t, dir, "gc")
	assert.NoError(t, victim.Process.Signal(syscall.Signal(0)), "the forged pid was acted on")
	// The real session was not reached through the forged state; with its
	// own state back, rm ends it.
	if _, err := os.Stat(p); err == nil {
		require.NoError(t, os.WriteFile(p, orig, 0o600))
		sessOK(t, dir, "rm", id)
	}
	requirePidGoneWithin(t, real, 12*time.Second)
}

func TestSessionSurvivesAKilledExec(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", id)
	marker, script := sleepMarker(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := jailCmd(ctx, "session", "exec", "--state-dir", dir, id, "--", "sh", "-c", script)
	require.NoError(t, c.Start())
	requireRunning(t, marker, 1)
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	requireGone(t, marker)
	assert.Equal(t, "ok\n", sessOK(t, dir, "exec", id, "--", "echo", "ok"))
}

func TestSessionManyLeaveNothing(t *testing.T) {
	n, execs := 100, 10
	if unprivileged || testing.Short() || os.Getenv("JAIL_IT_PREBUILT") != "" {
		n, execs = 10, 3 // the unprivileged re-run, and the VMs (ten times slower): the host's root run does the full count
	}
	dir := sessionDir(t)
	script := fmt.Sprintf(`set -e
for i in $(seq %d); do id=$(%s session create --state-dir %s); for j in $(seq %d); do %s session exec --state-dir %s $id -- true; done; %s session rm --state-dir %s $id >/dev/null; done`,
		n, jailBin, dir, execs, jailBin, dir, jailBin, dir)
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries)
	inits := ourInits()
	assert.Empty(t, inits, describeProcs(inits))
	assert.Empty(t, jailCgroups())
}

func TestSessionOtherUsersCannotTouch(t *testing.T) {
	requireRoot(t)
	if unprivileged {
		t.Skip("needs root to be the other user")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", id)
	for _, args := range [][]string{{"list"}, {"exec", id, "--", "true"}, {"rm", id}, {"inspect", id}} {
		c := jailCmd(context.Background(), append([]string{"session", args[0], "--state-dir", dir}, args[1:]...)...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivUID, Gid: unprivUID}}
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v as uid %d: %s", args, unprivUID, out)
		assert.Equal(t, 125, ee.ExitCode(), "%v as uid %d: %s", args, unprivUID, out)
	}
	assert.Equal(t, "running", inspect(t, dir, id).State)
}

// TestSessionSeccompKillsAreTheCommands: a call the policy kills is
// reported, by name, in the result of the command that made it, and in no
// other command's.
func TestSessionSeccompKillsAreTheCommands(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--profile", "strict", "--ro-bind", binDir+":/probe"))
	defer sess(t, dir, "rm", id)
	exec := func(args ...string) jail.Result {
		t.Helper()
		var res jail.Result
		r := sess(t, dir, "exec", append([]string{"--json", id, "--"}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
		return res
	}
	res := exec("/probe/probe", "sys", "keyctl")
	assert.Equal(t, jail.StatusSeccompKilled, res.Status)
	assert.Equal(t, 137, res.ExitCode)
	if assert.Len(t, res.SeccompDenials, 1) {
		assert.Equal(t, "keyctl", res.SeccompDenials[0].Syscall)
		assert.Equal(t, "kill", res.SeccompDenials[0].Action)
		assert.True(t, res.SeccompDenials[0].Workload)
	}
	res = exec("sh", "-c", "/probe/probe sys mount; echo child=$?")
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Equal(t, "child=137\n", res.Stdout)
	if assert.Len(t, res.SeccompDenials, 1) {
		assert.Equal(t, "mount", res.SeccompDenials[0].Syscall)
		assert.False(t, res.SeccompDenials[0].Workload)
	}
	res = exec("true")
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Empty(t, res.SeccompDenials)
}

// TestSessionTTY: `session exec -t` gives the command a terminal of the
// jail's own devpts, relayed to the caller's, as `run -t` does.
func TestSessionTTY(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--profile", "strict"))
	defer sess(t, dir, "rm", id)
	master, slave := openPTY(t)
	got, code := runOnPTY(t, master, slave, []string{"session", "exec", "--state-dir", dir, "-t", id, "--", "sh", "-c",
		`tty; stty size; read x; echo got $x; exit 3`}, "40 100", nil)
	assert.Equal(t, 3, code, "the command's exit code: %q", got)
	assert.Contains(t, got, "/dev/pts/", "a terminal of the jail's devpts")
	assert.Contains(t, got, "40 100\n", "of the caller's size")
	assert.Contains(t, got, "got typed\n", "input reached the command")
}

// TestSessionRmWhileCommandsRun: rm with commands running, and more
// starting meanwhile, ends every one of them (each reports KILL or is
// refused, none hangs or runs on), and leaves nothing.
func TestSessionRmWhileCommandsRun(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	marker, script := sleepMarker(3)
	var cmds []*exec.Cmd
	start := func() {
		c := jailCmd(ctx, "session", "exec", "--state-dir", dir, id, "--", "sh", "-c", script)
		require.NoError(t, c.Start())
		cmds = append(cmds, c)
	}
	for range 4 {
		start()
	}
	requireRunning(t, marker, 4)
	done := make(chan result, 1)
	go func() { done <- sess(t, dir, "rm", id) }()
	for range 4 {
		start() // racing the rm: joined and killed, or refused
	}
	r := <-done
	assert.Equal(t, 0, r.code, r.stderr)
	for i, c := range cmds {
		err := c.Wait()
		var ee *exec.ExitError
		if assert.ErrorAs(t, err, &ee, "command %d ran on", i) {
			assert.Contains(t, []int{125, 137}, ee.ExitCode(), "command %d", i)
		}
		if i < 4 {
			assert.Equal(t, 137, ee.ExitCode(), "a command running at rm is killed")
		}
	}
	requireGone(t, marker)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries)
}

// TestSessionCreateKilledEndsItsPID1: a create killed after its PID 1
// was cloned and before it wrote the session's state (here: a live
// session whose state is taken away) leaves a directory with a free lock
// and no state; whoever finds it ends that PID 1 through the session's
// cgroup, not only the directory.
func TestSessionCreateKilledEndsItsPID1(t *testing.T) {
	if !hasCgroups() {
		t.Skip("an unprivileged session has no cgroup to find its PID 1 by")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create"))
	defer sess(t, dir, "rm", id)
	b, err := os.ReadFile(filepath.Join(dir, id, "state.json"))
	require.NoError(t, err)
	var st struct{ PID int }
	require.NoError(t, json.Unmarshal(b, &st))
	require.NoError(t, os.Remove(filepath.Join(dir, id, "state.json")))
	sessOK(t, dir, "list")
	require.Eventually(t, func() bool { return syscall.Kill(st.PID, 0) == syscall.ESRCH }, 10*time.Second, 20*time.Millisecond,
		"the orphan PID 1 is ended")
	_, err = os.Stat(filepath.Join(dir, id))
	assert.ErrorIs(t, err, os.ErrNotExist)
	for _, d := range allJailCgroups() {
		assert.NotContains(t, d, id, "its cgroup is gone")
	}
}

// TestLanguageExecInSession (not TestSession...: the cgroup v2 VM, which runs those, has no toolchains): `jail session exec --language L --code F ID`:
// the code runs beside the session's files, compiled by a command of the
// session first for C, and is gone after.
func TestLanguageExecInSession(t *testing.T) {
	if avail := languages(t); !avail["python"] || !avail["c"] {
		if os.Getenv("CI") != "" && os.Getenv("JAIL_IT_PREBUILT") == "" {
			t.Fatal("CI's host has python3 and gcc")
		}
		t.Skip("needs python3 and gcc in a jail's root")
	}
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--profile", "strict"))
	defer sess(t, dir, "rm", id)
	sessOK(t, dir, "exec", id, "--", "sh", "-c", "echo 21 > n.txt")
	src := hostDir(t)
	py := filepath.Join(src, "main.py")
	require.NoError(t, os.WriteFile(py, []byte("import sys\nprint(int(open('n.txt').read()) * 2, sys.argv[1:])\n"), 0o644))
	assert.Equal(t, "42 ['a', 'b']\n", sessOK(t, dir, "exec", "--language", "python", "--code", py, id, "--", "a", "b"))

	c := filepath.Join(src, "main.c")
	require.NoError(t, os.WriteFile(c, []byte("#include <stdio.h>\nint main(void){ FILE *f = fopen(\"n.txt\", \"r\"); int n; fscanf(f, \"%d\", &n); printf(\"%d\\n\", n + 1); return 0; }\n"), 0o644))
	r := sess(t, dir, "exec", "--json", "--language", "c", "--code", c, id) // the session's limits: nothing to refuse unprivileged
	require.Equal(t, 0, r.code, r.stderr)
	var res jail.Result
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.Equal(t, "22\n", res.Stdout)
	assert.Equal(t, "c", res.Language)
	require.NotNil(t, res.Compile)
	assert.Equal(t, id, res.Compile.SessionID, "compiled by a command of the session")

	bad := filepath.Join(src, "bad.c")
	require.NoError(t, os.WriteFile(bad, []byte("int main(void){ return nope; }\n"), 0o644))
	r = sess(t, dir, "exec", "--language", "c", "--code", bad, id)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "nope", "the compiler's words")

	assert.Equal(t, "n.txt\n", sessOK(t, dir, "exec", id, "--", "sh", "-c", "ls -A; ls -A .jail-code 2>/dev/null; ls /tmp"), "nothing of the code is left")
}
