package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jailrt/jail/internal/procfs"
)

// plan is what one run will do. Every plan is drawn before the first run
// starts, in order, so that a seed reproduces the soak's whole plan
// (though not its timing).
type plan struct {
	id     string        // the run's number, or "w<n>" in the warm-up
	marker string        // "soak-<soak pid>-<id>": in the workload's command line
	sleep  time.Duration // the workload's sleep
	kill   bool
	window string        // the kill window the delay was drawn from
	u      float64       // where in the window, from 0 to 1
	delay  time.Duration // when to send SIGKILL: after the start of `jail run`, or with fromExec after the workload's exec
	// fromExec counts the delay from when the tracker saw the workload
	// exec, so that kills meant for the workload's run or its end hit
	// them whatever the load did to the set-up before.
	fromExec bool
	// carriedFrom is the run whose kill came late (its jail had exited)
	// and was carried over to this one.
	carriedFrom string
}

// setKill makes p kill its jail at the fraction u of window, or at the
// fixed delay when it is not 0.
func (p *plan) setKill(window string, u float64, tl measured, fixed time.Duration) {
	p.kill, p.window, p.u = true, window, u
	if fixed > 0 {
		p.window, p.delay, p.fromExec = "fixed", fixed, false
		return
	}
	lo, hi := killWindow(window, p.sleep, tl)
	p.delay = lo + time.Duration(u*float64(hi-lo))
	p.fromExec = window == "workload" || window == "end"
}

// script is the workload: cheap, but it writes, reads a device, pipes and
// forks, and its output is known exactly.
func (p plan) script() string {
	return fmt.Sprintf("echo %s; head -c 4096 /dev/urandom | wc -c; sleep %d.%03d",
		p.marker, p.sleep/time.Second, (p.sleep%time.Second)/time.Millisecond)
}

// wantStdout is what the workload prints.
func (p plan) wantStdout() string { return p.marker + "\n4096\n" }

// Kill outcomes.
const (
	notKilled = "no"
	killed    = "yes"
	killLate  = "late" // jail exited by itself before the SIGKILL was due, or before it took effect
)

// outcome is what one run did.
type outcome struct {
	plan
	killed   string        // notKilled, killed or killLate
	killedAt time.Duration // when the SIGKILL was sent
	phase    string        // the jail's phase when it was killed
	wall     time.Duration // from just before the start of `jail run` to its reaping
	status   string        // how `jail run` ended: "exit N" or "signal NAME"
	failures []failure

	// Killed runs only.
	initOutlived time.Duration // how long the jail's init was still seen alive after the jail was reaped
	leftCgroups  int           // the run's cgroup directories left behind (until `jail check --clean`)

	timeline timeline // when the tracker saw each stage (warm-up runs)
}

// failure is one way a run went wrong. reason is short and fixed, for
// counting; detail says what was seen.
type failure struct{ reason, detail string }

func (f failure) String() string { return f.reason + ": " + f.detail }

func (o *outcome) fail(reason, format string, args ...any) {
	o.failures = append(o.failures, failure{reason, fmt.Sprintf(format, args...)})
}

// Phases of a jail at its SIGKILL, as the tracker saw them.
const (
	phaseBeforeClone = "before clone" // no child of the jail yet: Go start-up, flags, plan, cgroup
	phaseSetup       = "setup"        // the jail's init exists, the workload has not exec'd
	phaseRun         = "mid-run"      // the workload has exec'd and runs
	phaseTeardown    = "teardown"     // the workload or init has ended, or the report has begun
)

var phases = []string{phaseBeforeClone, phaseSetup, phaseRun, phaseTeardown}

// timeline is when, after the start, the tracker first saw each stage of a
// run (0: not seen).
type timeline struct {
	init         time.Duration // the jail's init exists
	exec         time.Duration // the workload has exec'd
	workloadGone time.Duration // the workload has ended
	initGone     time.Duration // the init has ended
}

// runner runs plans against one jail binary.
type runner struct {
	jail       string   // absolute path of the jail binary
	env        []string // jail's environment: ours, with TMPDIR in the soak's own directory
	cgroupDirs []string // this process's cgroup in each hierarchy, where jail makes its groups
	settle     time.Duration
	pidNS      string        // our pid namespace, to tell the jail's init from other children
	timeline   measured      // from the warm-up: for kills carried over
	fixedDelay time.Duration // -delay

	mu      sync.Mutex
	started map[[2]uint64]bool // pid and start time of every jail process started
}

// wasStarted says whether the soak started the process pid with this
// start time.
func (r *runner) wasStarted(pid int, start uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[[2]uint64{uint64(pid), start}]
}

// do runs one plan: starts `jail run`, tracks its stages (when it is to
// be killed, or when timeline is asked for), kills it when planned, and
// checks what it left and reported.
func (r *runner) do(p plan, trackEvery time.Duration) outcome {
	o := outcome{plan: p, killed: notKilled}
	args := []string{"run", "--profile", "strict", "--memory", "64M", "--pids", "64", "--json", "--", "sh", "-c", p.script()}
	cmd := exec.Command(r.jail, args...)
	cmd.Env = r.env
	// Its own process group: a ^C or timeout(1) aimed at the soak reaches
	// the soak, which stops starting runs and still checks the host, not
	// the jails in flight.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	stdout, err := startReader()
	if err != nil {
		o.fail("start", "%v", err)
		return o
	}
	stderr, err := startReader()
	if err != nil {
		stdout.abandon()
		o.fail("start", "%v", err)
		return o
	}
	cmd.Stdout, cmd.Stderr = stdout.w, stderr.w

	start := time.Now()
	err = cmd.Start()
	stdout.closeWriter()
	stderr.closeWriter()
	if err != nil {
		stdout.abandon()
		stderr.abandon()
		o.fail("start", "%v", err)
		return o
	}
	jailPID := cmd.Process.Pid
	// The jail's cgroups are named after its pid and start time; pids are
	// reused (pid_max is 32768 here), start times tell them apart. Read
	// while the process exists (it stays until reaped).
	jailStart, ok := procfs.ReadStat(jailPID)
	if !ok {
		// Without its start time the run's groups could not be told from
		// other jails', and a leak of them would go unseen.
		o.fail("start", "reading /proc/%d/stat of the jail just started", jailPID)
	}
	r.mu.Lock()
	r.started[[2]uint64{uint64(jailPID), jailStart.StartTime}] = true
	r.mu.Unlock()

	t := &tracker{jailPID: jailPID, pidNS: r.pidNS}
	done := make(chan struct{})
	var watching sync.WaitGroup
	if p.kill || trackEvery > 0 {
		watching.Add(1)
		go func() {
			defer watching.Done()
			r.watch(cmd.Process, start, p, trackEvery, t, stdout, done)
		}()
	}
	waitErr := cmd.Wait()
	o.wall = time.Since(start)
	close(done)
	watching.Wait()
	o.timeline = t.seen

	if cmd.ProcessState == nil {
		o.fail("wait", "%v", waitErr)
		return o
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	o.status = fmt.Sprintf("exit %d", ws.ExitStatus())
	if ws.Signaled() {
		o.status = "signal " + ws.Signal().String()
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		o.fail("wait", "%v", waitErr)
	}

	// The pipes reach EOF once every process holding them is gone: jail's
	// init and workload hold neither (with --json the workload writes to
	// jail's own pipes), so they are closed when jail is.
	outBytes, outOpen := stdout.finish(r.settle)
	errBytes, errOpen := stderr.finish(r.settle)
	if outOpen || errOpen {
		o.fail("output pipe held open", "jail's stdout or stderr was still open %v after jail was reaped", r.settle)
	}

	if t.killSent {
		o.killedAt = t.killedAt
		o.phase = t.phase
		if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			o.killed = killed
			r.afterKill(&o, t, jailPID, jailStart.StartTime)
			return o
		}
		o.killed = killLate
	} else if p.kill {
		o.killed = killLate
	}
	r.check(&o, ws, outBytes, errBytes)
	if left := r.runCgroups(jailPID, jailStart.StartTime); len(left) > 0 {
		o.fail("cgroup left", "%s", strings.Join(left, " "))
	}
	return o
}

// afterKill checks a killed run: the jail's init must die with it (it has
// SIGKILL as its parent-death signal), and only the cgroup may stay behind.
func (r *runner) afterKill(o *outcome, t *tracker, jailPID int, jailStart uint64) {
	if t.initPID != 0 {
		reaped := time.Now()
		for t.initLives() {
			if o.initOutlived = time.Since(reaped); o.initOutlived > r.settle {
				o.fail("init outlived jail", "jail:init pid %d still alive %v after its jail was killed", t.initPID, r.settle)
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	o.leftCgroups = len(r.runCgroups(jailPID, jailStart))
}

// check compares the report of a run that was not killed with what the
// workload did. Any difference is a failure.
func (r *runner) check(o *outcome, ws syscall.WaitStatus, stdout, stderr []byte) {
	if ws.Signaled() || ws.ExitStatus() != 0 {
		o.fail("jail exit status", "%s, want exit 0", o.status)
	}
	if len(stderr) > 0 {
		o.fail("jail stderr", "%q", clip(stderr))
	}
	var rep report
	dec := json.NewDecoder(bytes.NewReader(stdout))
	if err := dec.Decode(&rep); err != nil {
		o.fail("report json", "%v in %q", err, clip(stdout))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		o.fail("report json", "more after the document: %q", clip(stdout[dec.InputOffset():]))
	}
	want := o.wantStdout()
	for _, c := range []struct {
		field    string
		ok       bool
		got, exp any
	}{
		{"schema", rep.Schema == "jail.result/v1", rep.Schema, "jail.result/v1"},
		{"status", rep.Status == "exited", rep.Status, "exited"},
		{"exit_code", rep.ExitCode != nil && *rep.ExitCode == 0, deref(rep.ExitCode), 0},
		{"signal", rep.Signal == "", rep.Signal, ""},
		{"stdout", rep.Stdout != nil && *rep.Stdout == want, deref(rep.Stdout), want},
		{"stderr", rep.Stderr != nil && *rep.Stderr == "", deref(rep.Stderr), ""},
		{"stdout_bytes", rep.StdoutBytes == int64(len(want)), rep.StdoutBytes, len(want)},
		{"stderr_bytes", rep.StderrBytes == 0, rep.StderrBytes, 0},
		{"stdout_truncated", !rep.StdoutTruncated && !rep.StderrTruncated, rep.StdoutTruncated || rep.StderrTruncated, false},
		{"limits_hit", rep.LimitsHit != nil && len(*rep.LimitsHit) == 0, deref(rep.LimitsHit), "[]"},
		{"error", string(rep.Error) == "null", string(rep.Error), "null"},
		{"oom_kills", rep.OOMKills == 0, rep.OOMKills, 0},
		{"seccomp_denials_total", rep.SeccompDenialsTotal == 0, rep.SeccompDenialsTotal, 0},
		{"isolation.cgroup", rep.Isolation.Cgroup == "v1" || rep.Isolation.Cgroup == "v2", rep.Isolation.Cgroup, "v1 or v2"},
		// The workload slept this long: a lower bound, not a timing test.
		{"wall_time_ms", rep.WallTimeMS >= o.sleep.Milliseconds(), rep.WallTimeMS, fmt.Sprintf(">= %d", o.sleep.Milliseconds())},
		// --memory gives the run a memory cgroup, which has a high-water mark.
		{"memory_peak_bytes", rep.MemoryPeakBytes != nil && *rep.MemoryPeakBytes > 0, deref(rep.MemoryPeakBytes), "> 0"},
	} {
		if !c.ok {
			o.fail(c.field, "got %v, want %v", c.got, c.exp)
		}
	}
}

// report holds the fields of jail.result/v1 the soak checks. Pointers tell
// a missing field from a zero one.
type report struct {
	Schema              string          `json:"schema"`
	Status              string          `json:"status"`
	ExitCode            *int            `json:"exit_code"`
	Signal              string          `json:"signal"`
	WallTimeMS          int64           `json:"wall_time_ms"`
	Stdout              *string         `json:"stdout"`
	Stderr              *string         `json:"stderr"`
	StdoutBytes         int64           `json:"stdout_bytes"`
	StderrBytes         int64           `json:"stderr_bytes"`
	StdoutTruncated     bool            `json:"stdout_truncated"`
	StderrTruncated     bool            `json:"stderr_truncated"`
	MemoryPeakBytes     *int64          `json:"memory_peak_bytes"`
	OOMKills            int             `json:"oom_kills"`
	LimitsHit           *[]string       `json:"limits_hit"`
	SeccompDenialsTotal int             `json:"seccomp_denials_total"`
	Error               json.RawMessage `json:"error"`
	Isolation           struct {
		Cgroup string `json:"cgroup"`
	} `json:"isolation"`
}

func deref[T any](p *T) any {
	if p == nil {
		return "(missing)"
	}
	return *p
}

// clip shortens b for a failure message.
func clip(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// runCgroups returns the cgroup directories of the jail process pid with
// the given start time ("jail-<pid>-<start time>-..."; any start time when
// it is 0, unknown), in every hierarchy.
func (r *runner) runCgroups(pid int, start uint64) []string {
	pattern := fmt.Sprintf("jail-%d-%d-*", pid, start)
	if start == 0 {
		pattern = fmt.Sprintf("jail-%d-*", pid)
	}
	var found []string
	for _, d := range r.cgroupDirs {
		m, _ := filepath.Glob(filepath.Join(d, pattern))
		found = append(found, m...)
	}
	return found
}

// watch tracks the jail's stages every `every` (2 ms if not given: often
// enough to see a workload that lives 5 ms) and, when the plan says so,
// sends SIGKILL to the jail process at the planned delay, right after a
// last look that sets the phase. It returns at the kill or when the jail
// has been reaped (done).
func (r *runner) watch(proc *os.Process, start time.Time, p plan, every time.Duration, t *tracker, stdout *reader, done <-chan struct{}) {
	if every <= 0 {
		every = 2 * time.Millisecond
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-done:
			return
		case <-timer.C:
		}
		now := time.Since(start)
		t.probe(now)
		next := every
		if at, known := p.killAt(t.seen); p.kill && known {
			if now >= at {
				t.phase = t.classify(stdout.began())
				// os.Process signals through a pidfd: never another
				// process that reused the pid, and an error once jail has
				// been reaped.
				if err := proc.Signal(syscall.SIGKILL); err == nil {
					t.killSent, t.killedAt = true, time.Since(start)
				}
				return
			}
			next = min(next, at-now)
		}
		timer.Reset(next)
	}
}

// killAt returns when after the start to kill the jail, and false while
// that depends on a stage not seen yet.
func (p plan) killAt(seen timeline) (time.Duration, bool) {
	if !p.fromExec {
		return p.delay, true
	}
	if seen.exec == 0 {
		return 0, false
	}
	return seen.exec + p.delay, true
}

// tracker follows one jail's stages through /proc: the jail's init (its
// child in a new pid namespace), then the workload (init's child, once it
// is no longer named jail:init it has exec'd), then their ends.
type tracker struct {
	jailPID   int
	pidNS     string
	initPID   int
	initStart uint64

	workloadSeen, workloadExeced, workloadGone, initGone bool
	seen                                                 timeline

	phase    string
	killSent bool
	killedAt time.Duration
}

func (t *tracker) probe(now time.Duration) {
	if t.initPID == 0 {
		for _, c := range procfs.Children(t.jailPID) {
			// jail's other children (os/exec's pidfd probe) share our pid
			// namespace; the init, even before its exec, does not.
			ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c))
			if procfs.Comm(c) == "jail:init" || (ns != "" && ns != t.pidNS) {
				if st, ok := procfs.ReadStat(c); ok {
					t.initPID, t.initStart, t.seen.init = c, st.StartTime, now
				}
			}
		}
		return
	}
	if t.initGone {
		return
	}
	if !t.initLives() {
		t.initGone, t.seen.initGone = true, now
		return
	}
	kids := procfs.Children(t.initPID)
	if len(kids) == 0 {
		if t.workloadSeen && !t.workloadGone {
			t.workloadGone, t.seen.workloadGone = true, now
		}
		return
	}
	t.workloadSeen, t.workloadGone = true, false
	for _, k := range kids {
		if c := procfs.Comm(k); c != "" && c != "jail:init" {
			if !t.workloadExeced {
				t.seen.exec = now
			}
			t.workloadExeced = true
		}
	}
}

// initLives reports whether the init seen earlier still runs: the same pid
// with the same start time, and not a zombie.
func (t *tracker) initLives() bool {
	st, ok := procfs.ReadStat(t.initPID)
	return ok && st.StartTime == t.initStart && st.State != 'Z' && st.State != 'X'
}

// classify names the phase the jail is in, from what the tracker has seen
// and whether jail has begun to print its report.
func (t *tracker) classify(reportBegun bool) string {
	switch {
	case reportBegun || t.initGone || t.workloadGone:
		return phaseTeardown
	case t.workloadExeced:
		return phaseRun
	case t.initPID != 0:
		return phaseSetup
	default:
		return phaseBeforeClone
	}
}

// reader drains one of jail's output pipes and says whether anything has
// arrived yet.
type reader struct {
	r, w *os.File
	n    atomic.Int64
	buf  bytes.Buffer
	done chan struct{}
}

func startReader() (*reader, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	rd := &reader{r: pr, w: pw, done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		chunk := make([]byte, 4096)
		for {
			n, err := pr.Read(chunk)
			rd.buf.Write(chunk[:n])
			rd.n.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	return rd, nil
}

func (rd *reader) began() bool { return rd.n.Load() > 0 }

// closeWriter closes our copy of the write end once the child has its own.
func (rd *reader) closeWriter() { rd.w.Close() }

// finish waits up to settle for EOF and returns what was read, and whether
// some process still held the write end (then it stops reading).
func (rd *reader) finish(settle time.Duration) (out []byte, heldOpen bool) {
	select {
	case <-rd.done:
	case <-time.After(settle):
		heldOpen = true
		rd.r.Close() // unblocks the reading goroutine
		<-rd.done
	}
	if !heldOpen {
		rd.r.Close()
	}
	return rd.buf.Bytes(), heldOpen
}

// abandon is for a run that never started.
func (rd *reader) abandon() {
	rd.w.Close()
	rd.finish(0)
}
