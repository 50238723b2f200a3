package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/capture"
	"github.com/jailrt/jail/internal/procfs"
	"github.com/jailrt/jail/oci"
)

// Cmd is a jail run as a Pod. Its fields and methods are those of
// [jail.Cmd] that apply: set them, then Start and Wait (or Run); Result
// is then the report. A Pod has no stdin here: the API server's attach is
// a streaming protocol jail does not speak.
type Cmd struct {
	Spec    jail.Spec
	Args    []string
	Options Options
	// Kubeconfig is the kubeconfig file; empty: $KUBECONFIG,
	// ~/.kube/config, or the in-cluster service account.
	Kubeconfig string
	// Stdout receives the container's log (stdout and stderr together,
	// as the kubelet keeps them); nil discards it unless Capture.
	Stdout io.Writer
	// Capture keeps the log, head and tail up to the output limit, in the
	// Result's stdout.
	Capture bool
	// BackendReason is copied into the report's isolation.backend_reason.
	BackendReason string
	// Result is the report, set by Start on failure and by Wait.
	Result *jail.Result

	ctx     context.Context
	cancel  context.CancelFunc
	cl      *Client
	plan    *Plan
	ns      string
	name    string
	havePol bool
	// createUnclear: the Pod's create failed without a clear refusal, so
	// it may still land.
	createUnclear bool
	start         time.Time
	out           *capture.Buffer
	logDone       chan struct{}

	mu      sync.Mutex
	logging bool
}

// Command returns a Cmd that runs name with args in a Pod made from spec.
func Command(ctx context.Context, spec jail.Spec, o Options, name string, args ...string) *Cmd {
	return &Cmd{ctx: ctx, Spec: spec, Options: o, Args: append([]string{name}, args...)}
}

// Signal ends the run, whatever sig is: the API server has no call that
// signals a container. The Pod is deleted with the kill grace (the
// kubelet sends TERM, then KILL), and the status is canceled.
func (c *Cmd) Signal(sig os.Signal) error {
	if c.cancel == nil {
		return errors.New("k8s: not started")
	}
	c.cancel()
	return nil
}

// Run starts the Pod and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// newResult is the report's frame: what is known before the run.
func (c *Cmd) newResult() *jail.Result {
	p := c.plan
	if p == nil {
		return oci.Frame(&c.Spec, nil, jail.BackendK8s, c.BackendReason, c.Capture, nil)
	}
	r := oci.Frame(&c.Spec, p.Mapping, jail.BackendK8s, c.BackendReason, c.Capture, p.Namespaces)
	iso := &r.Isolation
	switch sp := p.Pod.Spec.SecurityContext.SeccompProfile; sp.Type {
	case "RuntimeDefault":
		iso.Seccomp = "runtime/default"
	case "Localhost":
		// Whatever file the nodes hold there, meant to be the Spec's.
		iso.Seccomp = "localhost/" + *sp.LocalhostProfile
	}
	if p.Allow != nil {
		iso.Network.Allow = p.Allow
	}
	if len(p.Pod.Spec.Containers[0].Resources.Limits) > 0 {
		iso.Cgroup = "runtime"
	}
	return r
}

func (c *Cmd) fail(step string, err error) error {
	r := c.newResult()
	r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
	r.Error = &jail.ErrorInfo{Step: step, Message: err.Error()}
	if c.ctx != nil && c.ctx.Err() != nil { // a signal or the caller ended it while it was being set up
		r.Status, r.Error = jail.StatusCanceled, &jail.ErrorInfo{Step: "run", Message: "canceled: " + fmt.Sprint(context.Cause(c.ctx))}
	}
	c.Result = r
	c.cleanup()
	return err
}

// Start maps the Spec, creates the NetworkPolicy and then the Pod. The
// policy comes first, so that the Pod never runs without it. Whatever
// fails, both are deleted.
func (c *Cmd) Start() error {
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	if c.Result != nil || c.cl != nil {
		return errors.New("k8s: Cmd started twice")
	}
	c.ctx, c.cancel = context.WithCancel(c.ctx)
	var err error
	if c.plan, err = Map(c.ctx, &c.Spec, c.Args, c.Options); err != nil {
		return c.fail("spec", err)
	}
	if c.cl, err = NewClient(c.Kubeconfig); err != nil {
		return c.fail("kubernetes", err)
	}
	c.ns = c.Options.Namespace
	if c.ns == "" {
		c.ns = c.cl.Namespace
	}
	if c.ns == "" {
		c.ns = "default"
	}
	c.name = c.plan.Pod.Metadata.Name
	owner := procfs.OwnerTag()
	setup, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()

	pod := c.plan.Pod
	pod.Metadata.Namespace = c.ns
	pod.Metadata.Annotations = map[string]string{AnnotationOwner: owner}
	if c.plan.Policy.Kind != "" {
		pol := c.plan.Policy
		pol.Metadata.Namespace = c.ns
		pol.Metadata.Annotations = map[string]string{AnnotationOwner: owner}
		if err := c.cl.CreatePolicy(setup, c.ns, &pol); err != nil {
			return c.fail("network policy", err)
		}
		c.havePol = true
	}
	c.start = time.Now()
	got, raw, err := c.cl.CreatePod(setup, c.ns, &pod) // cleanup deletes c.name whatever the answer
	if err != nil {
		// Without a clear refusal (a 4xx), the create may still land
		// after the answer was lost (cleanup sees to it).
		var se *StatusError
		c.createUnclear = !errors.As(err, &se) || se.Code/100 != 4
		return c.fail("pod", createError(err, c.Spec.Image))
	}
	// What the API server stored is what runs: admission may have
	// changed the Pod (a sidecar, a volume, a security context).
	if err := admitted(&pod, got, raw); err != nil {
		return c.fail("pod", err)
	}
	// The policy is owned by the Pod: whatever happens to this process,
	// the garbage collector deletes it after the Pod, never before.
	if c.havePol {
		if err := c.cl.SetPolicyOwner(setup, c.ns, c.name, got); err != nil {
			return c.fail("network policy", err)
		}
	}
	// An API server drops a field of a feature it has off: a Pod asked
	// to be in a user namespace must come back so.
	if pod.Spec.HostUsers != nil && got.Spec.HostUsers == nil {
		if err := c.gapAfterCreate("user namespace", "this cluster dropped the Pod's hostUsers: false (its UserNamespacesSupport feature is off)"); err != nil {
			return c.fail("pod", err)
		}
	}
	return nil
}

// admitted compares the Pod the API server stored with the one jail sent,
// in what makes the isolation: admission webhooks and defaults may add
// containers, volumes or mounts, or change a security context or the run
// label the NetworkPolicy selects. Any such change refuses the run.
func admitted(sent, got *Pod, raw []byte) error {
	var diffs []string
	differ := func(what string, a, b any) {
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		if string(x) != string(y) {
			diffs = append(diffs, fmt.Sprintf("%s: sent %s, stored %s", what, x, y))
		}
	}
	gs, ss := got.Spec, sent.Spec
	differ("run label", sent.Metadata.Labels[LabelRun], got.Metadata.Labels[LabelRun])
	differ("init containers", len(ss.InitContainers), len(gs.InitContainers))
	differ("containers", len(ss.Containers), len(gs.Containers))
	differ("automountServiceAccountToken", ss.AutomountServiceAccountToken, gs.AutomountServiceAccountToken)
	differ("host namespaces", []bool{ss.HostNetwork, ss.HostPID, ss.HostIPC}, []bool{gs.HostNetwork, gs.HostPID, gs.HostIPC})
	differ("hostUsers", ss.HostUsers, gs.HostUsers)
	differ("pod securityContext", ss.SecurityContext, gs.SecurityContext)
	differ("volumes", sizesInBytes(ss.Volumes), sizesInBytes(gs.Volumes)) // the API server rewrites a quantity its way
	differ("runtimeClassName", ss.RuntimeClassName, gs.RuntimeClassName)
	if len(gs.Containers) == 1 && len(ss.Containers) == 1 {
		sc, gc := ss.Containers[0], gs.Containers[0]
		differ("container securityContext", sc.SecurityContext, gc.SecurityContext)
		differ("volumeMounts", sc.VolumeMounts, gc.VolumeMounts)
		if !slices.Equal(sc.Command, gc.Command) || !slices.Equal(sc.Args, gc.Args) { // nil and empty alike
			differ("command", [][]string{sc.Command, sc.Args}, [][]string{gc.Command, gc.Args})
		}
		differ("image", sc.Image, gc.Image)
		differ("env", sc.Env, gc.Env)
		differ("resources", quantities(sc.Resources), quantities(gc.Resources))
	}
	// What jail's types do not have must not be there: a field jail
	// never sets in a security context, a shared process namespace,
	// variables from elsewhere.
	var rp struct {
		Spec struct {
			ShareProcessNamespace *bool                      `json:"shareProcessNamespace"`
			SecurityContext       map[string]json.RawMessage `json:"securityContext"`
			Containers            []struct {
				EnvFrom         json.RawMessage            `json:"envFrom"`
				SecurityContext map[string]json.RawMessage `json:"securityContext"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &rp); err != nil {
		return fmt.Errorf("the stored Pod: %w", err)
	}
	only := func(what string, m map[string]json.RawMessage, keys ...string) {
		for k := range m {
			if !slices.Contains(keys, k) {
				diffs = append(diffs, fmt.Sprintf("%s: stored with %s", what, k))
			}
		}
	}
	only("pod securityContext", rp.Spec.SecurityContext, "runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")
	if p := rp.Spec.ShareProcessNamespace; p != nil && *p {
		diffs = append(diffs, "shareProcessNamespace: stored true")
	}
	for _, c := range rp.Spec.Containers {
		only("container securityContext", c.SecurityContext, "readOnlyRootFilesystem", "allowPrivilegeEscalation", "privileged", "capabilities", "procMount")
		if len(c.EnvFrom) > 0 && string(c.EnvFrom) != "null" {
			diffs = append(diffs, "envFrom: stored "+string(c.EnvFrom))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the API server stored another Pod than jail sent (admission changed it): %s", strings.Join(diffs, "; "))
	}
	return nil
}

// sizesInBytes is vols with each sizeLimit in bytes: "131072k" and
// "131072000" alike.
func sizesInBytes(vols []Volume) []Volume {
	out := slices.Clone(vols)
	for i, v := range out {
		if v.EmptyDir != nil {
			e := *v.EmptyDir
			if n, ok := parseQuantity(e.SizeLimit); ok {
				e.SizeLimit = strconv.FormatInt(n, 10)
			}
			out[i].EmptyDir = &e
		}
	}
	return out
}

// quantities is r with each quantity in its smallest unit (bytes,
// millicores), so that the API server's rewriting does not differ.
func quantities(r ResourceRequirements) map[string]int64 {
	out := map[string]int64{}
	for k, v := range r.Limits {
		out["limits."+k] = milli(k, v)
	}
	for k, v := range r.Requests {
		out["requests."+k] = milli(k, v)
	}
	return out
}

func milli(name, v string) int64 {
	if m, ok := strings.CutSuffix(v, "m"); ok && name == "cpu" {
		n, _ := strconv.ParseInt(m, 10, 64)
		return n
	}
	n, ok := parseQuantity(v)
	if !ok {
		return -1
	}
	if name == "cpu" {
		return n * 1000
	}
	return n
}

// parseQuantity reads a whole-number Kubernetes quantity: digits, then
// an optional decimal (k, M, G, T, P, E) or binary (Ki ... Ei) suffix or a
// decimal exponent (e3).
func parseQuantity(s string) (int64, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	mul := map[string]int64{"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
	suf := s[i:]
	if e, ok := strings.CutPrefix(strings.ToLower(suf), "e"); ok && e != "" {
		x, err := strconv.Atoi(e)
		if err != nil || x > 18 {
			return 0, false
		}
		for range x {
			n *= 10
		}
		return n, true
	}
	m, ok := mul[suf]
	if !ok {
		return 0, false
	}
	return n * m, true
}

// gapAfterCreate refuses, or lists, what the created Pod turned out not to
// have.
func (c *Cmd) gapAfterCreate(field, why string) error {
	if !c.Spec.AllowUnenforced {
		return &jail.FeatureError{Feature: field, Reason: why + " (--allow-unenforced runs without it and lists it in the report)"}
	}
	c.plan.NotEnforced = append(c.plan.NotEnforced, field+": "+why)
	return nil
}

func createError(err error, image string) error {
	var se *StatusError
	if errors.As(err, &se) && se.Reason == "Invalid" && strings.Contains(se.Message, "image") {
		return &jail.SpecError{Field: "image", Value: image, Err: errors.New(se.Message)}
	}
	return err
}

// fatalWaiting are the waiting reasons of a container that will not start
// without a change.
var fatalWaiting = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true}

// Wait watches the Pod until its container ends, applying the timeout and
// cancellation, then reports and deletes the Pod and its policy.
func (c *Cmd) Wait() error {
	if c.cl == nil || c.name == "" {
		return errors.New("k8s: not started")
	}
	defer c.cleanup()
	if c.Capture {
		c.out = capture.New(c.plan.OutputLimitBytes)
	}
	var deadline <-chan time.Time
	if c.plan.Timeout > 0 {
		t := time.NewTimer(c.plan.Timeout - time.Since(c.start))
		defer t.Stop()
		deadline = t.C
	}
	type seen struct {
		pod   *Pod
		final bool
	}
	events := make(chan seen, 16)
	wctx, stopWatch := context.WithCancel(c.ctx)
	defer stopWatch()
	go func() {
		for wctx.Err() == nil {
			p, err := c.cl.GetPod(wctx, c.ns, c.name)
			if IsNotFound(err) {
				sendPod(wctx, events, seen{nil, true}) // deleted by someone else
				return
			}
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			f := final(p)
			if !sendPod(wctx, events, seen{p, f}) || f {
				return
			}
			_ = c.cl.WatchPod(wctx, c.ns, c.name, p.Metadata.ResourceVersion, func(p *Pod) bool {
				f := final(p)
				return !sendPod(wctx, events, seen{p, f}) || f
			})
		}
	}()

	var last *Pod
	var reason jail.Status
	var setupErr error
loop:
	for {
		select {
		case ev := <-events:
			last = ev.pod
			st := containerState(ev.pod)
			if st != nil && (st.Running != nil || st.Terminated != nil) {
				c.followLogs()
			}
			if st != nil && st.Waiting != nil && fatalWaiting[st.Waiting.Reason] {
				setupErr = fmt.Errorf("%s: %s", st.Waiting.Reason, st.Waiting.Message)
				break loop
			}
			if ev.final {
				break loop
			}
		case <-deadline:
			reason = jail.StatusTimedOut
			break loop
		case <-c.ctx.Done():
			reason = jail.StatusCanceled
			break loop
		}
	}
	stopWatch()
	c.mu.Lock()
	logging := c.logging
	c.mu.Unlock()
	if reason != "" && logging {
		// End the Pod now (TERM, then KILL after the kill grace); its
		// log ends with it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = c.cl.DeletePod(ctx, c.ns, c.name, c.grace())
		cancel()
	}
	if logging {
		select {
		case <-c.logDone:
		case <-time.After(10 * time.Second):
		}
	}
	c.Result = c.report(last, reason, setupErr)
	if c.Result.Status == jail.StatusSetupError {
		return errors.New(c.Result.Error.Message)
	}
	return nil
}

func sendPod[T any](ctx context.Context, ch chan T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// final reports whether the Pod has ended: its phase, or its container's
// terminated state.
func final(p *Pod) bool {
	if p.Status == nil {
		return false
	}
	if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
		return true
	}
	st := containerState(p)
	return st != nil && st.Terminated != nil
}

func containerState(p *Pod) *ContainerState {
	if p == nil || p.Status == nil {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == containerName {
			return &p.Status.ContainerStatuses[i].State
		}
	}
	return nil
}

// followLogs starts, once, following the container's log into the
// capture and Stdout.
func (c *Cmd) followLogs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logging {
		return
	}
	c.logging = true
	c.logDone = make(chan struct{})
	var w io.Writer = io.Discard
	switch {
	case c.out != nil && c.Stdout != nil:
		w = io.MultiWriter(c.out, c.Stdout)
	case c.out != nil:
		w = c.out
	case c.Stdout != nil:
		w = c.Stdout
	}
	go func() {
		defer close(c.logDone)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 24*time.Hour)
		defer cancel()
		_ = c.cl.Logs(ctx, c.ns, c.name, true, w)
	}()
}

// report judges the run from the Pod's last state, as the native report
// judges PID 1's.
func (c *Cmd) report(p *Pod, reason jail.Status, setupErr error) *jail.Result {
	r := c.newResult()
	st := containerState(p)
	var term *Terminated
	if st != nil {
		term = st.Terminated
	}
	started := term != nil || st != nil && st.Running != nil
	switch {
	case setupErr != nil:
		r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		msg := setupErr.Error()
		if strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory") {
			r.ExitCode = jail.ExitNotFound
		}
		r.Error = &jail.ErrorInfo{Step: "pod", Message: msg}
	case reason == jail.StatusCanceled:
		r.Status, r.ExitCode = reason, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "run", Message: "canceled: " + fmt.Sprint(context.Cause(c.ctx))}
	case reason == jail.StatusTimedOut && !started:
		r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "pod", Message: "the Pod did not start within the timeout: " + podPhase(p)}
	case reason == jail.StatusTimedOut || p != nil && p.Status != nil && p.Status.Reason == "DeadlineExceeded":
		r.Status, r.ExitCode = jail.StatusTimedOut, jail.ExitTimedOut
		r.LimitsHit = append(r.LimitsHit, "timeout")
	case term == nil:
		r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "pod", Message: "the Pod ended without its container's state: " + podPhase(p)}
	case term.Reason == "OOMKilled":
		r.Status, r.ExitCode, r.Signal = jail.StatusOOMKilled, 128+int(syscall.SIGKILL), "KILL"
		r.OOMKills = 1
		r.LimitsHit = append(r.LimitsHit, "memory")
	case term.Reason == "StartError" || term.Reason == "ContainerCannotRun":
		// The runtime says why only in its message (its exit code is 128).
		r.Status, r.ExitCode = jail.StatusSetupError, jail.ExitSetupError
		r.Error = &jail.ErrorInfo{Step: "execve", Message: c.Args[0] + ": " + term.Message}
		switch m := term.Message; {
		case strings.Contains(m, "executable file not found") || strings.Contains(m, "no such file or directory"):
			r.ExitCode, r.Error.Errno = jail.ExitNotFound, "ENOENT"
		case strings.Contains(m, "permission denied"):
			r.ExitCode, r.Error.Errno = jail.ExitNotExecutable, "EACCES"
		}
	case term.Signal > 0 || term.ExitCode > 128 && term.ExitCode <= 128+64:
		sig := syscall.Signal(term.Signal)
		if sig == 0 {
			sig = syscall.Signal(term.ExitCode - 128)
		}
		oci.Signaled(r, sig, c.plan.Mapping)
	default:
		r.Status, r.ExitCode = jail.StatusExited, term.ExitCode
	}
	if term != nil {
		s, err1 := time.Parse(time.RFC3339, term.StartedAt)
		e, err2 := time.Parse(time.RFC3339, term.FinishedAt)
		if err1 == nil && err2 == nil {
			r.WallTimeMS = e.Sub(s).Milliseconds()
		}
	}
	r.Isolation.NotEnforced = append(r.Isolation.NotEnforced,
		"stderr: a Pod's log holds stdout and stderr together: both are in stdout",
		"report: wall time is the kubelet's, in whole seconds; cpu time, max_rss_bytes and memory_peak_bytes are not reported through the API (0 and null)",
		"seccomp kill reporting: the runtime reports a death by SIGSYS, not the call")
	if c.out != nil {
		r.Stdout, r.StdoutEncoding = c.out.Encoded()
		r.StdoutBytes, r.StdoutTruncated = c.out.Total(), c.out.Truncated()
	}
	return r
}

func podPhase(p *Pod) string {
	if p == nil {
		return "the Pod was deleted"
	}
	if p.Status == nil {
		return "no status yet"
	}
	s := p.Status.Phase
	if st := containerState(p); st != nil && st.Waiting != nil {
		s += " (" + st.Waiting.Reason + ")"
	} else if p.Status.Reason != "" {
		s += " (" + p.Status.Reason + ")"
	}
	return s
}

// cleanup deletes the Pod and its policy; it runs on every way out of
// Start and Wait.
func (c *Cmd) cleanup() {
	if c.cancel != nil {
		defer c.cancel()
	}
	if c.cl == nil || c.name == "" {
		return
	}
	grace := c.grace()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(grace)*time.Second+10*time.Second)
	defer cancel()
	existed, _ := c.cl.DeletePodExisted(ctx, c.ns, c.name, grace)
	// The policy goes only once the Pod object is gone, that is once the
	// kubelet has stopped its containers: until then the workload may
	// still run, and must not run without it. If the Pod outlasts the
	// wait, the policy stays; its owner reference has the garbage
	// collector delete it after the Pod. A Pod whose create was lost and
	// that was not there to delete may still come: its policy stays for
	// it too (prune deletes it once no Pod of the run is left).
	if c.havePol && (existed || !c.createUnclear) && c.cl.WaitPodGone(ctx, c.ns, c.name) == nil {
		_ = c.cl.DeletePolicy(ctx, c.ns, c.name)
	}
	c.name = ""
}

// grace is the Pod's deletion grace in whole seconds: the kill grace
// rounded up, and at least 1. Grace 0 is a forced deletion: the API server
// forgets the Pod at once while the kubelet may still be running it.
func (c *Cmd) grace() int64 {
	g := int64(1)
	if c.plan != nil {
		g = max(g, int64(math.Ceil(c.plan.KillGrace.Seconds())))
	}
	return g
}
