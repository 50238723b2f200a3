package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/internal/procfs"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/oci"
)

// Cmd is a jail run as a container. Its fields and methods are those of
// [jail.Cmd] that apply: set them, then Start and Wait (or Run); Result
// is then the report.
type Cmd struct {
	Spec jail.Spec
	Args []string
	// Host is the engine's address (DOCKER_HOST's form); empty means
	// Host().
	Host string
	// Stdin, Stdout and Stderr are the workload's; nil Stdin is an empty
	// input, nil Stdout and Stderr discard the output (unless Capture).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Capture keeps the output, head and tail up to the output limit, in
	// the Result.
	Capture bool
	// BackendReason is copied into the report's isolation.backend_reason.
	BackendReason string
	// Result is the report, set by Start on failure and by Wait.
	Result *jail.Result

	ctx     context.Context
	cancel  context.CancelFunc
	eng     *Engine
	plan    *Plan
	id      string
	conn    *HijackedConn
	outDone chan error
	stdout  *capture.Buffer
	stderr  *capture.Buffer
	start   time.Time
	cgroup  string // "v1" or "v2", from the engine

	mu         sync.Mutex
	killReason jail.Status
	unwatched  string // why the CPU time limit could not be watched
	stats      *Stats
	samples    int
	statsDone  chan struct{}
}

// Command returns a Cmd that runs name with args in a container made
// from spec.
func Command(ctx context.Context, spec jail.Spec, name string, args ...string) *Cmd {
	return &Cmd{ctx: ctx, Spec: spec, Args: append([]string{name}, args...)}
}

// Run starts the container and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// newResult is the report's frame: what is known before the run.
func (c *Cmd) newResult() *jail.Result {
	if c.plan == nil {
		return oci.Frame(&c.Spec, nil, jail.BackendDocker, c.BackendReason, c.Capture, nil)
	}
	r := oci.Frame(&c.Spec, c.plan.Mapping, jail.BackendDocker, c.BackendReason, c.Capture, c.plan.Namespaces)
	if h := c.plan.Body.HostConfig; h.Memory > 0 || h.PidsLimit != nil || h.NanoCpus > 0 || h.CpuShares > 0 || h.BlkioWeight > 0 || c.plan.CPUTime > 0 {
		r.Isolation.Cgroup = c.cgroup
	}
	return r
}

// fail ends a run that never started: the Result is a setup error.
func (c *Cmd) fail(step string, err error) error {
	r := c.newResult()
	r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
	r.Error = &jail.ErrorInfo{Step: step, Message: err.Error()}
	c.Result = r
	c.cleanup()
	return err
}

// Start maps the Spec, makes the container, attaches to it and starts it.
// Whatever fails, nothing is left: the container is removed.
func (c *Cmd) Start() error {
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	if c.Result != nil || c.eng != nil {
		return errors.New("docker: Cmd started twice")
	}
	var err error
	if c.plan, err = Map(&c.Spec, c.Args); err != nil {
		return c.fail("spec", err)
	}
	c.ctx, c.cancel = context.WithCancel(c.ctx)
	host := c.Host
	if host == "" {
		host = Host()
	}
	setup, cancelSetup := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancelSetup()
	if c.eng, err = Connect(setup, host); err != nil {
		return c.fail("docker", err)
	}
	info, err := c.eng.Info(setup)
	if err != nil {
		return c.fail("docker", err)
	}
	c.cgroup = "v1"
	if info.CgroupVersion == "2" {
		c.cgroup = "v2"
	}
	// The engine's user namespace: with userns-remap every container is
	// in one, with ids the daemon chose; without, uid N inside is uid N
	// on the host.
	remapped := false
	for _, o := range info.SecurityOptions {
		remapped = remapped || strings.Contains(o, "name=userns")
	}
	if remapped {
		c.plan.Namespaces = append([]string{"user"}, c.plan.Namespaces...)
	} else if !slices.Contains(c.Spec.DisableNamespaces, "user") {
		// Without a user namespace the container's ids are the host's:
		// root in it would be the host's root (without capabilities, but
		// the owner of root's files through any bind or escape).
		if u := c.plan.Spec.Process.User; (u.UID == 0 || u.GID == 0) && !c.Spec.AllowUnenforced {
			return c.fail("spec", &jail.FeatureError{Feature: "uid 0 without a user namespace",
				Reason: "this Docker engine does not remap ids (dockerd --userns-remap): uid or gid 0 in the container would be the host's (--allow-unenforced runs it and lists it in the report)"})
		}
		c.plan.NotEnforced = append(c.plan.NotEnforced, "user namespace: this Docker engine does not remap ids (dockerd --userns-remap): the workload's uid is the same uid on the host")
	}
	c.plan.NotEnforced = append(c.plan.NotEnforced, "seccomp kill reporting: the engine reports a death by SIGSYS, not the call")

	b := c.plan.Body
	if err := c.imageConfig(setup, &b); err != nil {
		return c.fail("docker image", err)
	}
	if err := c.recursiveReadOnly(&b); err != nil {
		return c.fail("spec", err)
	}
	b.Labels = map[string]string{LabelManaged: "1", LabelOwner: procfs.OwnerTag()}
	if c.Stdin != nil {
		b.AttachStdin, b.OpenStdin, b.StdinOnce = true, true, true
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("jail-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))
	id, warnings, err := c.eng.Create(setup, name, &b)
	if err != nil {
		// The engine may have made it before the answer was lost (a
		// timeout, a cancellation): remove it by its name.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = c.eng.Remove(ctx, name)
		cancel()
		return c.fail("docker create", createError(err, c.Spec.Image))
	}
	c.id = id
	// A warning is a limit the engine took but the host will not enforce
	// (no swap accounting, no blkio weight...): refused unless allowed.
	for _, w := range warnings {
		w = strings.TrimSpace(w)
		if !c.Spec.AllowUnenforced {
			return c.fail("docker create", &jail.FeatureError{Feature: "docker", Reason: w + " (--allow-unenforced runs without it and lists it in the report)"})
		}
		c.plan.NotEnforced = append(c.plan.NotEnforced, "docker: "+w)
	}

	if c.conn, err = c.eng.Attach(setup, id, c.Stdin != nil); err != nil {
		return c.fail("docker attach", err)
	}
	limit := c.plan.OutputLimitBytes
	stdout, stderr := c.Stdout, c.Stderr
	if c.Capture {
		c.stdout, c.stderr = capture.New(limit), capture.New(limit)
		stdout, stderr = tee(c.stdout, c.Stdout), tee(c.stderr, c.Stderr)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	c.outDone = make(chan error, 1)
	go func() { c.outDone <- Demux(c.conn, stdout, stderr) }()
	if c.Stdin != nil {
		go func() {
			_, _ = io.Copy(c.conn, c.Stdin)
			_ = c.conn.CloseWrite()
		}()
	}

	c.start = time.Now()
	if err := c.eng.Start(setup, id); err != nil {
		return c.failStart(err)
	}
	c.statsDone = make(chan struct{})
	go c.watch()
	return nil
}

// imageConfig applies what the image adds to every container of it: each
// VOLUME would be a writable directory on the engine's disk, past the
// read-only root, the sizes and the memory limit, so it becomes a tmpfs of
// the Spec's /tmp size (in memory, charged to the memory limit); the
// image's ENV is merged into the environment by the engine, which jail
// cannot stop, so its keys the Spec does not set are listed.
func (c *Cmd) imageConfig(ctx context.Context, b *CreateBody) error {
	ic, err := c.eng.Image(ctx, c.Spec.Image)
	if err != nil {
		return createError(err, c.Spec.Image)
	}
	// Create from the image inspected, not a tag that may move meanwhile.
	if ic.ID != "" {
		b.Image = ic.ID
	}
	// A VOLUME the Spec mounts something on (a bind, a tmpfs) is the
	// Spec's: the engine would otherwise mount only the tmpfs.
	taken := map[string]bool{}
	for t := range b.HostConfig.Tmpfs {
		taken[t] = true
	}
	for _, m := range b.HostConfig.Mounts {
		taken[m.Target] = true
	}
	var vols []string
	for v := range ic.Volumes {
		if !path.IsAbs(v) {
			return fmt.Errorf("image %s: VOLUME %q is not an absolute path", c.Spec.Image, v)
		}
		if v = path.Clean(v); !taken[v] && !slices.Contains(vols, v) {
			vols = append(vols, v)
		}
	}
	slices.Sort(vols)
	if len(vols) > 0 {
		size := c.Spec.TmpSizeBytes
		if size == 0 {
			size = mounts.DefaultTmpfsBytes
		}
		if b.HostConfig.Tmpfs == nil {
			b.HostConfig.Tmpfs = map[string]string{}
		}
		for _, v := range vols {
			// The workload's, as the image's directory would be its.
			b.HostConfig.Tmpfs[v] = fmt.Sprintf("nosuid,nodev,mode=1777,size=%d,uid=%d,gid=%d,exec", size, c.plan.Spec.Process.User.UID, c.plan.Spec.Process.User.GID)
		}
		c.plan.NotEnforced = append(c.plan.NotEnforced, fmt.Sprintf("image volumes: the image's VOLUME %s are tmpfs of %d bytes each, not the image's directories", strings.Join(vols, ", "), size))
	}
	set := map[string]bool{}
	for _, e := range b.Env {
		k, _, _ := strings.Cut(e, "=")
		set[k] = true
	}
	var extra []string
	for _, e := range ic.Env {
		if k, _, _ := strings.Cut(e, "="); !set[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		c.plan.NotEnforced = append(c.plan.NotEnforced, "env: the engine adds the image's "+strings.Join(extra, ", ")+" to the environment")
	}
	return nil
}

// recursiveReadOnly makes read-only binds read-only below too, as a
// native jail's are: Engine API 1.44 has ReadOnlyForceRecursive; an older
// engine makes only the top mount read-only, so a read-only bind whose
// source carries mounts is refused there.
func (c *Cmd) recursiveReadOnly(b *CreateBody) error {
	for i := range b.HostConfig.Mounts {
		m := &b.HostConfig.Mounts[i]
		if !m.ReadOnly {
			continue
		}
		if !versionLess(c.eng.Version(), "1.44") {
			m.BindOptions.ReadOnlyForceRecursive = true
			continue
		}
		subs, err := mountinfo.GetMounts(mountinfo.PrefixFilter(m.Source))
		if err != nil {
			return err
		}
		for _, sm := range subs {
			if sm.Mountpoint != m.Source {
				if err := oci.Gap(&c.Spec, &c.plan.NotEnforced, "read-only bind "+m.Source, true,
					fmt.Sprintf("it carries the mount %s, and this engine (API %s, before 1.44) makes only the top of a bind read-only", sm.Mountpoint, c.eng.Version())); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// tee writes to the capture and, when set, to w.
func tee(b *capture.Buffer, w io.Writer) io.Writer {
	if w == nil {
		return b
	}
	return io.MultiWriter(b, w)
}

// createError names what the engine refused: a missing image is the
// Spec's image, not a setup step.
func createError(err error, image string) error {
	if IsNotFound(err) {
		var ae *APIError
		errors.As(err, &ae)
		return &jail.SpecError{Field: "image", Value: image, Err: errors.New(ae.Message)}
	}
	return err
}

// failStart reports a start the runtime refused. A command that could
// not be executed is the workload's failure, as for a native jail: 127
// when it was not found, 126 when it could not be executed. The runtime
// says which only in its message.
func (c *Cmd) failStart(err error) error {
	msg := err.Error()
	code, errno := jail.ExitSetupError, ""
	switch {
	case strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "executable file not found"):
		code, errno = jail.ExitNotFound, "ENOENT"
	case strings.Contains(msg, "permission denied"):
		code, errno = jail.ExitNotExecutable, "EACCES"
	}
	if code == jail.ExitSetupError {
		return c.fail("docker start", err)
	}
	c.fail("execve", err)
	c.Result.ExitCode = code
	c.Result.Error.Errno = errno
	c.Result.Error.Message = fmt.Sprintf("%s: %s", c.Args[0], msg)
	return &jail.InitError{Step: "execve", Detail: c.Args[0], Err: err}
}

// watch follows the statistics (the CPU time limit, the report's CPU
// time and memory peak) until the run ends. A CPU time limit fails
// closed: if the statistics stop, or none comes within firstSample, while
// the container runs, the run is killed.
func (c *Cmd) watch() {
	defer close(c.statsDone)
	lim := c.plan.CPUTime
	if lim > 0 {
		t := time.AfterFunc(firstSample, func() {
			c.mu.Lock()
			n := c.samples
			c.mu.Unlock()
			if n == 0 {
				c.killUnwatched("no statistics from the engine within " + firstSample.String())
			}
		})
		defer t.Stop()
	}
	err := c.eng.StatsStream(c.ctx, c.id, func(s *Stats) {
		if s.Read.IsZero() || s.CPUStats.CPUUsage.TotalUsage == 0 {
			return // an empty sample: the engine could not read the cgroup (or the container has ended)
		}
		c.mu.Lock()
		c.stats, c.samples = s, c.samples+1
		c.mu.Unlock()
		if lim > 0 && time.Duration(s.CPUStats.CPUUsage.TotalUsage) > lim {
			c.kill(jail.StatusCPUTimeExceeded)
		}
	})
	if lim > 0 && c.ctx.Err() == nil {
		msg := "the engine's statistics stream ended"
		if err != nil {
			msg += ": " + err.Error()
		}
		c.killUnwatched(msg)
	}
}

// firstSample is how long a CPU time limit waits for the engine's first
// statistics (it sends about one a second).
const firstSample = 5 * time.Second

// killUnwatched ends a run whose CPU time limit can no longer be watched,
// unless its container has ended anyway.
func (c *Cmd) killUnwatched(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := c.eng.Inspect(ctx, c.id); err == nil && !st.Running || IsNotFound(err) {
		return // ended (or removed by Wait's teardown)
	}
	c.mu.Lock()
	if c.killReason == "" {
		c.unwatched = "cpu_time could not be watched (" + why + "): killed, failing closed"
	}
	c.mu.Unlock()
	c.kill(jail.StatusCanceled)
}

// kill ends the container for reason (a timeout, the CPU time limit, a
// cancellation); the first reason wins.
func (c *Cmd) kill(reason jail.Status) {
	c.mu.Lock()
	if c.killReason == "" {
		c.killReason = reason
	}
	c.mu.Unlock()
	// Retried while the engine fails (not when the container is gone or
	// not running: the engine's 404 and 409): Wait waits on the engine,
	// so a lost KILL would let the run go on past its limit.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := c.eng.Kill(ctx, c.id, "KILL")
		var ae *APIError
		if err == nil || errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusConflict) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Signal sends sig to the container's command (SIGKILL ends it).
func (c *Cmd) Signal(sig os.Signal) error {
	if c.eng == nil || c.id == "" {
		return errors.New("docker: not started")
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("docker: signal %v", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.eng.Kill(ctx, c.id, strconv.Itoa(int(s)))
}

// Wait waits for the container to end, applying the timeout (SIGTERM
// first with a kill grace) and cancellation, then reports and removes it.
func (c *Cmd) Wait() error {
	if c.eng == nil || c.id == "" || c.statsDone == nil {
		return errors.New("docker: not started")
	}
	defer c.cleanup()
	type waited struct {
		code int
		err  error
	}
	done := make(chan waited, 1)
	go func() {
		code, err := c.eng.Wait(context.WithoutCancel(c.ctx), c.id)
		done <- waited{code, err}
	}()
	var timeout <-chan time.Time
	if c.plan.Timeout > 0 {
		t := time.NewTimer(c.plan.Timeout - time.Since(c.start))
		defer t.Stop()
		timeout = t.C
	}
	var w waited
	termSent := false
	ctxDone := c.ctx.Done()
loop:
	for {
		select {
		case w = <-done:
			break loop
		case <-timeout:
			timeout = nil
			if g := c.plan.KillGrace; g > 0 && !termSent {
				termSent = true
				c.mu.Lock()
				c.killReason = jail.StatusTimedOut
				c.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = c.eng.Kill(ctx, c.id, "TERM")
				cancel()
				grace := time.NewTimer(g)
				defer grace.Stop()
				timeout = grace.C // then KILL below
				continue
			}
			c.kill(jail.StatusTimedOut)
		case <-ctxDone:
			ctxDone = nil // once: a closed channel is always ready
			c.kill(jail.StatusCanceled)
		}
	}
	end := time.Now()
	if w.err != nil {
		c.Result = c.newResult()
		c.Result.Status, c.Result.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		c.Result.Error = &jail.ErrorInfo{Step: "docker wait", Message: w.err.Error()}
		return w.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.eng.Inspect(ctx, c.id)
	if err != nil {
		c.Result = c.newResult()
		c.Result.Status, c.Result.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		c.Result.Error = &jail.ErrorInfo{Step: "docker inspect", Message: err.Error()}
		return err
	}
	if !st.OOMKilled && st.ExitCode == 128+int(syscall.SIGKILL) && c.plan.Body.HostConfig.Memory > 0 {
		st.OOMKilled = c.lateOOM(ctx)
	}
	// The output: the engine closes the stream when the container ends.
	select {
	case <-c.outDone:
	case <-time.After(5 * time.Second):
	}
	c.cancel() // ends the statistics stream
	<-c.statsDone
	c.Result = c.report(st, w.code, end)
	return nil
}

// lateOOM looks for an OOM kill the container's inspection missed: one
// whose event reached the engine after the exit's. It asks for the
// container's "oom" events a few times over lateOOMWait, unless jail
// killed the container itself.
func (c *Cmd) lateOOM(ctx context.Context) bool {
	c.mu.Lock()
	killed := c.killReason != ""
	c.mu.Unlock()
	if killed {
		return false
	}
	for deadline := time.Now().Add(lateOOMWait); ; time.Sleep(lateOOMWait / 10) {
		now := time.Now()
		if oom, err := c.eng.OOMEvent(ctx, c.id, c.start.Add(-time.Second), now); oom || err != nil || now.After(deadline) {
			return oom
		}
	}
}

// lateOOMWait bounds how long a container killed by SIGKILL under a
// memory limit waits for a late "oom" event; an OOM event lags its exit's
// by milliseconds.
const lateOOMWait = 500 * time.Millisecond

// report judges the run from the engine's state, as jail's native report
// judges PID 1's: a kill jail decided wins, then the OOM killer, then the
// exit status (the engine's 128+N for signal N).
func (c *Cmd) report(st *State, code int, end time.Time) *jail.Result {
	r := c.newResult()
	c.mu.Lock()
	reason, stats, samples, unwatched := c.killReason, c.stats, c.samples, c.unwatched
	c.mu.Unlock()
	if st.ExitCode != 0 || code == 0 {
		code = st.ExitCode
	}
	wall := end.Sub(c.start)
	if !st.StartedAt.IsZero() && st.FinishedAt.After(st.StartedAt) {
		wall = st.FinishedAt.Sub(st.StartedAt)
	}
	r.WallTimeMS = wall.Milliseconds()
	switch {
	case reason == jail.StatusCanceled && unwatched != "":
		r.Status, r.ExitCode = reason, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "cpu_time", Message: unwatched}
	case reason == jail.StatusCanceled:
		r.Status, r.ExitCode = reason, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "run", Message: "canceled: " + fmt.Sprint(context.Cause(c.ctx))}
	case reason != "":
		r.Status, r.ExitCode = reason, jail.ExitTimedOut
		r.LimitsHit = append(r.LimitsHit, map[jail.Status]string{jail.StatusTimedOut: "timeout", jail.StatusCPUTimeExceeded: "cpu_time"}[reason])
	case st.OOMKilled:
		r.Status, r.ExitCode, r.Signal = jail.StatusOOMKilled, 128+int(syscall.SIGKILL), "KILL"
		r.OOMKills = 1
		r.LimitsHit = append(r.LimitsHit, "memory")
	case code > 128 && code <= 128+64:
		oci.Signaled(r, syscall.Signal(code-128), c.plan.Mapping)
	default:
		r.Status, r.ExitCode = jail.StatusExited, code
	}
	if stats != nil {
		r.CPUUserMS = int64(stats.CPUStats.CPUUsage.UsageInUsermode / 1e6)
		r.CPUSystemMS = int64(stats.CPUStats.CPUUsage.UsageInKernelmode / 1e6)
		if p := int64(stats.MemoryStats.MaxUsage); p > 0 {
			r.MemoryPeakBytes = &p
		}
	}
	if samples == 0 {
		r.Isolation.NotEnforced = append(r.Isolation.NotEnforced, "report: cpu time: the run ended before the engine's first statistics sample: cpu_user_ms and cpu_system_ms are 0, memory_peak_bytes null")
	} else {
		r.Isolation.NotEnforced = append(r.Isolation.NotEnforced, "report: cpu time and memory peak are the engine's last statistics sample (about one a second), not the run's end; memory_peak_bytes is null where the engine's statistics have no peak (cgroup v2)")
	}
	if c.Capture {
		r.Stdout, r.StdoutEncoding = c.stdout.Encoded()
		r.Stderr, r.StderrEncoding = c.stderr.Encoded()
		r.StdoutBytes, r.StderrBytes = c.stdout.Total(), c.stderr.Total()
		r.StdoutTruncated, r.StderrTruncated = c.stdout.Truncated(), c.stderr.Truncated()
	}
	return r
}

// cleanup removes the container and closes the connections; it runs on
// every way out of Start and Wait.
func (c *Cmd) cleanup() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.cancel != nil {
		c.cancel()
	}
	if c.eng != nil && c.id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.eng.Remove(ctx, c.id)
		c.id = ""
	}
}
