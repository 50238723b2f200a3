package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/runner"
)

// A session's command (an exec) is the server's, not its request's: it
// has an id, its events (start, stdout, stderr, exit) are numbered and
// kept in a bounded buffer, and any request of its tenant may follow them
// from a sequence number, write its stdin, or signal it.
//
// Who started it decides how it ends. A background exec (background:
// true) runs until it exits; a foreground one (waited for, or streamed)
// is killed when its client goes away, unless the request said detach. A
// streaming client is never skipped: while it has not been sent an event,
// the buffer does not drop it, and the workload's writes wait (as a pipe
// would make them). Without such a client the oldest events go first, and
// a replay from before them starts with a "lost" event.
//
// Execs live in the server's process: its end ends them (their helpers
// kill their command's group when the server's end of the sync pipe
// closes). A draining server waits for them up to its grace. A background
// or detached exec's document is kept on disk (execrecords.go): a
// restarted server answers for it, as interrupted if it was running.
const (
	// MaxExecEvents bounds the bytes of the events an exec keeps.
	MaxExecEvents = 1 << 20
	// keptExecEvents bounds them once the exec has ended.
	keptExecEvents = 256 << 10
	// ExecRetention is how long an ended exec can still be asked for,
	// and MaxEndedExecs how many a tenant keeps (the oldest go first).
	ExecRetention = 10 * time.Minute
	MaxEndedExecs = 64
	// stdinTimeout bounds a write to an exec's stdin that it does not read.
	stdinTimeout = 30 * time.Second
)

// Exec states, as ExecInfo.State reports them.
const (
	ExecRunning = "running"
	ExecExited  = "exited" // its result is in ExecInfo.Result
	ExecFailed  = "failed" // it could not run: ExecInfo.Error
	// ExecInterrupted (execrecords.go): the server stopped while it ran.
)

// ExecInfo is the document of an exec.
type ExecInfo struct {
	ID      string   `json:"id"`
	Session string   `json:"session"`
	Argv    []string `json:"argv"`
	// PID is the workload's pid in the session's PID namespace, once it
	// started (0, left out: not known).
	PID       int        `json:"pid,omitempty"`
	State     string     `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// NextSeq is the sequence number the next event will have; FirstSeq
	// the oldest one kept.
	NextSeq  int  `json:"next_seq"`
	FirstSeq int  `json:"first_seq"`
	Stdin    bool `json:"stdin_open"`
	// Result once it exited, Error when it could not run.
	Result *jail.Result `json:"result"`
	Error  *Error       `json:"error"`
}

// event is one of an exec's events, as sent.
type event struct {
	seq  int
	kind string
	line []byte // the JSON object and "\n"
}

type execEntry struct {
	id, session, tenant string
	argv                []string
	started             time.Time
	cmd                 *jail.Cmd // until it ended (under mu): its capture is then the Result's
	cancel              context.CancelFunc
	ctx                 context.Context
	// keepalive and writeTimeout are the server's Config.Keepalive and
	// Config.StreamWriteTimeout.
	keepalive, writeTimeout time.Duration

	// gate holds the command's output, and its end, until its start event
	// is out (with the workload's pid, known only once it started);
	// openGate opens it.
	gate     chan struct{}
	gateOnce sync.Once

	mu      sync.Mutex
	pid     int           // the workload's pid in the session (WorkloadPID); 0 unknown
	changed chan struct{} // closed and made anew at every change
	events  []event       // events[head:] are kept
	head    int
	next    int // the next event's seq (the first is 1)
	bytes   int
	// owners counts foreground clients that must get every event;
	// ownerNext is the lowest seq one of them has not been sent.
	owners    int
	ownerNext int
	done      bool
	ended     time.Time
	result    *jail.Result
	err       *Error
	stdin     *os.File // its stdin's write end while open, under stdinMu
	stdinMu   sync.Mutex
	stdinOpen atomic.Bool // stdin is not nil (without waiting for a write under way)
	// onEnd, when set, sees the Result (nil after an error) before the
	// exec's end is published: a language exec's annotation and cleanup.
	onEnd func(*jail.Result)
	// recordPath is the file of its record, if it has one; interrupted:
	// taken up from a record of an exec a server stopped under. recMu
	// orders the record's writes and its removal, after which (forgotten)
	// nothing is written.
	recordPath  string
	interrupted bool
	recMu       sync.Mutex
	forgotten   bool
}

// notifyLocked wakes whoever waits for a change. x.mu is held.
func (x *execEntry) notifyLocked() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// publish numbers and keeps ev. When the buffer is full, it drops the
// oldest event unless a foreground client has not been sent it: then it
// waits until one has, or until the exec is canceled (force: never wait).
func (x *execEntry) publish(ev map[string]any, force bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		// An estimate: the line is made below, once the seq is known.
		if x.bytes < MaxExecEvents || x.head == len(x.events) {
			break
		}
		if !force && x.owners > 0 && x.events[x.head].seq >= x.ownerNext {
			ch := x.changed
			x.mu.Unlock()
			select {
			case <-ch:
			case <-x.ctx.Done():
				force = true
			}
			x.mu.Lock()
			continue
		}
		x.dropLocked()
	}
	seq := x.next
	x.next++
	ev["seq"] = seq
	line, err := jsonLine(ev)
	if err != nil {
		line, _ = jsonLine(map[string]any{"event": "error", "seq": seq, "error": apiErr(CodeInternal, "", "event: %v", err)})
	}
	kind, _ := ev["event"].(string)
	x.events = append(x.events, event{seq: seq, kind: kind, line: line})
	x.bytes += len(line)
	x.notifyLocked()
}

// dropLocked drops the oldest kept event. x.mu is held.
func (x *execEntry) dropLocked() {
	x.bytes -= len(x.events[x.head].line)
	x.events[x.head] = event{}
	x.head++
	if x.head > len(x.events)/2 && x.head > 64 {
		x.events = slices.Clone(x.events[x.head:])
		x.head = 0
	}
}

// output is the writer of one of the workload's streams: each write is an
// event, its data as text when it is UTF-8, else base64, at most
// maxEventData bytes (split where a UTF-8 character starts), so that a
// client reading lines needs no more than a small buffer.
func (x *execEntry) output(stream string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if x.gate != nil {
			<-x.gate
		}
		for rest := p; len(rest) > 0; {
			n := min(len(rest), maxEventData)
			for back := 0; n < len(rest) && back < utf8.UTFMax && n > 1 && !utf8.RuneStart(rest[n]); back++ {
				n--
			}
			chunk := rest[:n]
			rest = rest[n:]
			ev := map[string]any{"event": stream}
			if utf8.Valid(chunk) {
				ev["data"] = string(chunk)
			} else {
				ev["data"], ev["encoding"] = base64.StdEncoding.EncodeToString(chunk), "base64"
			}
			x.publish(ev, false)
		}
		return len(p), nil
	})
}

func (x *execEntry) openGate() { x.gateOnce.Do(func() { close(x.gate) }) }

// finish records the exec's end: its last event (exit, or error), its
// result, and a smaller buffer.
func (x *execEntry) finish(res *jail.Result, e *Error) {
	if e != nil {
		x.publish(map[string]any{"event": "error", "error": e}, true)
	} else {
		x.publish(map[string]any{"event": "exit", "result": res}, true)
	}
	x.closeStdin()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.done, x.ended, x.result, x.err = true, time.Now(), res, e
	// An ended exec is kept for ExecRetention: not its Cmd, whose capture
	// buffers would double what its Result holds.
	x.cmd = nil
	x.trimLocked()
	x.notifyLocked()
}

// trimLocked drops, once the exec has ended, the oldest events beyond
// keptExecEvents that no owner still has to be sent. x.mu is held.
func (x *execEntry) trimLocked() {
	for x.done && x.bytes > keptExecEvents && x.head < len(x.events)-1 && (x.owners == 0 || x.events[x.head].seq < x.ownerNext) {
		x.dropLocked()
	}
}

func (x *execEntry) closeStdin() {
	x.stdinMu.Lock()
	defer x.stdinMu.Unlock()
	if x.stdin != nil {
		x.stdin.Close()
		x.stdin = nil
		x.stdinOpen.Store(false)
	}
}

func (x *execEntry) info() *ExecInfo {
	x.mu.Lock()
	defer x.mu.Unlock()
	in := &ExecInfo{ID: x.id, Session: x.session, Argv: x.argv, PID: x.pid, State: ExecRunning, StartedAt: x.started, NextSeq: x.next,
		FirstSeq: x.next, Stdin: x.stdinOpen.Load(), Result: x.result, Error: x.err}
	if x.head < len(x.events) {
		in.FirstSeq = x.events[x.head].seq
	}
	if x.done {
		in.EndedAt = &x.ended
		in.State = ExecExited
		if x.err != nil {
			in.State = ExecFailed
		}
		if x.interrupted {
			in.State = ExecInterrupted
		}
	}
	return in
}

// wait waits for the exec's end, or ctx's.
func (x *execEntry) wait(ctx context.Context) bool {
	for {
		x.mu.Lock()
		done, ch := x.done, x.changed
		x.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// streamFormat is how a client asked for events: NDJSON or SSE.
type streamFormat int

const (
	noStream streamFormat = iota
	ndjson
	sse
)

// wantsStream is the event format the request's Accept asks for.
func wantsStream(r *http.Request) streamFormat {
	a := r.Header.Get("Accept")
	switch {
	case strings.Contains(a, "application/x-ndjson"):
		return ndjson
	case strings.Contains(a, "text/event-stream"):
		return sse
	}
	return noStream
}

// follow sends the exec's events from seq from on until the last one (or
// until the client goes: its error). An owner (registered by startExec,
// before the command could write) holds the events it has not been sent
// in the buffer; its end lets them go. A quiet stream gets a keepalive event (no seq)
// every x.keepalive, and a client that does not take a write within
// x.writeTimeout is gone (the error); events dropped before from is sent are
// reported by one "lost" event (no seq) with their range.
func (x *execEntry) follow(ctx context.Context, w http.ResponseWriter, from int, f streamFormat, owner bool) error {
	if owner {
		defer func() {
			x.mu.Lock()
			x.owners--
			x.trimLocked()
			x.notifyLocked()
			x.mu.Unlock()
		}()
	}
	rc := http.NewResponseController(w)
	if f == sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Jail-Exec", x.id)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil { // the header now: the client knows the stream began
		return err
	}
	write := func(ev event) error {
		_ = rc.SetWriteDeadline(time.Now().Add(x.writeTimeout))
		var err error
		if f == sse {
			if ev.seq > 0 {
				_, err = fmt.Fprintf(w, "id: %d\n", ev.seq)
			}
			if err == nil {
				_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n", ev.kind, ev.line)
			}
		} else {
			_, err = w.Write(ev.line)
		}
		return err
	}
	x.mu.Lock()
	if x.interrupted && x.done && from >= x.next {
		// Its client saw events of the last server that this one never
		// knew (its record is from the exec's start): its end is new to
		// that client all the same.
		from = x.next - 1
	}
	x.mu.Unlock()
	tk := time.NewTicker(x.keepalive)
	defer tk.Stop()
	for {
		x.mu.Lock()
		var batch []event
		var lost []int
		if x.head < len(x.events) && from < x.events[x.head].seq {
			lost = []int{from, x.events[x.head].seq - 1}
			from = x.events[x.head].seq
		} else if x.head == len(x.events) && from < x.next {
			lost = []int{from, x.next - 1}
			from = x.next
		}
		for _, ev := range x.events[x.head:] {
			if ev.seq >= from {
				batch = append(batch, ev)
			}
		}
		done, ch := x.done, x.changed
		x.mu.Unlock()
		if lost != nil && lost[0] <= lost[1] {
			line, _ := jsonLine(map[string]any{"event": "lost", "from": lost[0], "to": lost[1]})
			if err := write(event{kind: "lost", line: line}); err != nil {
				return err
			}
		}
		for _, ev := range batch {
			if err := write(ev); err != nil {
				return err
			}
			from = ev.seq + 1
		}
		if len(batch) > 0 || lost != nil {
			if err := rc.Flush(); err != nil {
				return err
			}
		}
		if owner && len(batch) > 0 {
			x.mu.Lock()
			x.ownerNext = from
			x.notifyLocked()
			x.mu.Unlock()
		}
		if done { // the batch, taken with done, held every event
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
			line, _ := jsonLine(map[string]any{"event": "keepalive"})
			if err := write(event{kind: "keepalive", line: line}); err != nil {
				return err
			}
			if err := rc.Flush(); err != nil {
				return err
			}
		}
	}
}

// execs are the server's execs, by tenant and id.
type execs struct {
	mu  sync.Mutex
	all map[string]*execEntry // by tenant + "/" + id
}

func (e *execs) key(tenant, id string) string { return tenant + "/" + id }

// add registers x, forgetting the tenant's ended execs beyond
// ExecRetention and MaxEndedExecs.
func (e *execs) add(x *execEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.all == nil {
		e.all = map[string]*execEntry{}
	}
	var ended []*execEntry
	for k, o := range e.all {
		if o.tenant != x.tenant {
			continue
		}
		o.mu.Lock()
		done, at := o.done, o.ended
		o.mu.Unlock()
		switch {
		case done && time.Since(at) > ExecRetention:
			delete(e.all, k)
			o.forget()
		case done:
			ended = append(ended, o)
		}
	}
	if len(ended) >= MaxEndedExecs {
		slices.SortFunc(ended, func(a, b *execEntry) int { return a.ended.Compare(b.ended) })
		for _, o := range ended[:len(ended)-MaxEndedExecs+1] {
			delete(e.all, e.key(o.tenant, o.id))
			o.forget()
		}
	}
	e.all[e.key(x.tenant, x.id)] = x
}

func (e *execs) get(tenant, session, id string) *execEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.all[e.key(tenant, id)]
	if x == nil || x.session != session {
		return nil
	}
	return x
}

func (e *execs) list(tenant, session string) []*execEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*execEntry
	for _, x := range e.all {
		if x.tenant == tenant && x.session == session {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b *execEntry) int { return a.started.Compare(b.started) })
	return out
}

// ExecRequest is the body of POST /v1/sessions/{id}/exec: a Command, and
// the environment and working directory (the session's by default).
type ExecRequest struct {
	Command
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	// Background: answer 202 with the exec's document at once; the exec
	// runs until it ends, whoever follows it.
	Background bool `json:"background,omitempty"`
	// Detach: a foreground exec whose client goes away runs on (as a
	// background one) instead of being killed.
	Detach bool `json:"detach,omitempty"`
	// StdinOpen keeps the exec's stdin open after Stdin (if any) for
	// POST .../exec/{eid}/stdin, until one with ?eof=1.
	StdinOpen bool `json:"stdin_open,omitempty"`
	// Language and Code run a piece of code by a language runner in the
	// session (package runner's PrepareIn): written to its workspace,
	// compiled there first when the language is compiled (the request
	// answers once it is), then run as the exec with argv as the
	// program's arguments. A compile that fails is an exec that ended
	// with status compile_error.
	Language string  `json:"language,omitempty"`
	Code     *string `json:"code,omitempty"`
	// Limits are the command's own, the session's command defaults of
	// these names replaced (as a run's limits, a tenant that is not an
	// admin may only tighten them). The session's cgroup limits bound all
	// its commands together: PATCH and the session's spec set them.
	Limits *ExecLimits `json:"limits,omitempty"`
}

// ExecLimits are a command's own limits in a session.
type ExecLimits struct {
	// CPUTime is the CPU time the command and what it starts may use
	// (measured in its own cgroup: the session needs one); 0: none.
	CPUTime *jail.Duration `json:"cpu_time,omitempty"`
	// OutputLimitBytes bounds the stdout and the stderr its result keeps
	// (head and tail).
	OutputLimitBytes *int64 `json:"output_limit_bytes,omitempty"`
}

// check refuses limits that are no limits, and, to a tenant that is not
// an admin, limits that loosen base's (the session's command defaults).
func (l *ExecLimits) check(t Tenant, base jail.Spec) *Error {
	if l == nil {
		return nil
	}
	if l.CPUTime != nil && *l.CPUTime < 0 {
		return apiErr(CodeBadRequest, "limits.cpu_time", "limits.cpu_time %v: want 0 (none) or more", time.Duration(*l.CPUTime))
	}
	if l.OutputLimitBytes != nil && *l.OutputLimitBytes <= 0 {
		return apiErr(CodeBadRequest, "limits.output_limit_bytes", "limits.output_limit_bytes %d: want more than 0", *l.OutputLimitBytes)
	}
	run := RunRequest{Limits: &RunLimits{CPUTime: l.CPUTime, OutputLimitBytes: l.OutputLimitBytes}}
	return run.checkLimits(t, base)
}

func newExecID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "x" + hex.EncodeToString(b)
}

// startExec starts a command of sess as an exec of the server's. The
// tenant's slot it takes is given back when the command ends. With
// quiet, its output is not published as events (a waited-for exec: its
// result carries it); with owned, the caller follows it as its owner.
func (s *Server) startExec(t Tenant, sess *jail.Session, req *ExecRequest, argv []string, quiet, owned bool, onEnd func(*jail.Result)) (*execEntry, *Error) {
	stdin, e := req.stdin()
	if e != nil {
		return nil, e
	}
	release, e := s.acquire(t)
	if e != nil {
		return nil, e
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &execEntry{id: newExecID(), session: sess.ID(), tenant: t.Name, argv: argv, started: time.Now(), ctx: ctx, cancel: cancel,
		changed: make(chan struct{}), next: 1, ownerNext: 1, keepalive: s.cfg.Keepalive, writeTimeout: s.cfg.StreamWriteTimeout}
	if owned {
		x.owners = 1
	}
	if req.Background || req.Detach {
		x.recordPath = execRecordPath(s.execRecordDir(), t.Name, x.id)
	}
	x.onEnd = onEnd
	c := sess.Command(ctx, argv[0], argv[1:]...)
	c.Capture, c.Logger = true, s.cfg.Logger
	if len(req.Env) > 0 {
		c.Spec = profiles.Apply(c.Spec, jail.Spec{Env: req.Env}, []string{"env"})
	}
	if req.Cwd != "" {
		c.Spec.Cwd = req.Cwd
	}
	if req.Timeout != 0 {
		c.Spec.Timeout = req.Timeout
	}
	if l := req.Limits; l != nil { // checked against the tenant's rules by exec, before any compile
		if l.CPUTime != nil {
			c.Spec.CPUTime = *l.CPUTime
		}
		if l.OutputLimitBytes != nil {
			c.Spec.OutputLimitBytes = *l.OutputLimitBytes
		}
	}
	var pr *os.File
	if req.StdinOpen {
		var err error
		if pr, x.stdin, err = os.Pipe(); err != nil {
			cancel()
			release()
			return nil, asAPIError(err, "")
		}
		x.stdinOpen.Store(true)
		c.Stdin = pr
	} else {
		c.Stdin = stdin
	}
	if !quiet {
		c.Stdout, c.Stderr = x.output("stdout"), x.output("stderr")
	}
	x.cmd = c
	x.gate = make(chan struct{})
	fail := func(err error) (*execEntry, *Error) {
		x.openGate()
		cancel()
		release()
		if pr != nil {
			pr.Close()
			x.stdin.Close()
		}
		s.m.results.inc("exec", "error")
		return nil, asAPIError(err, "spec")
	}
	err := func() (err error) {
		defer s.survive("exec "+x.id+" start", func() { err = errors.New("internal error starting the command (a panic, logged)") })
		return c.Start() // a panic in it leaves nothing of the jail (jail's runSteps)
	}()
	if err != nil {
		return fail(err)
	}
	// start is the first event, with the workload's pid once it started:
	// the command's output and its end wait for it (gate), the answer
	// does not (its execve may wait on a frozen session or a hung mount).
	go func() {
		published := false
		defer x.openGate()
		defer s.survive("exec "+x.id+" start event", func() {
			if !published {
				x.publish(map[string]any{"event": "start", "exec": x.id}, true)
			}
		})
		start := map[string]any{"event": "start", "exec": x.id}
		if pid := c.WorkloadPID(); pid > 0 {
			x.mu.Lock()
			x.pid = pid
			x.mu.Unlock()
			start["pid"] = pid
		}
		x.publish(start, true)
		published = true
		s.record(x) // with its pid (before the gate opens: its end's record comes after)
	}()
	if pr != nil {
		pr.Close() // the workload has it
		if stdin != nil {
			// Taken now, so that the request's stdin goes before any
			// later write's.
			x.stdinMu.Lock()
			go func() {
				defer x.stdinMu.Unlock()
				_ = x.stdin.SetWriteDeadline(time.Now().Add(stdinTimeout))
				_, _ = io.Copy(x.stdin, stdin)
			}()
		}
	}
	s.execs.add(x)
	s.record(x)
	s.enter() // its record is written in the state directory: Close keeps the lock until then
	go func() {
		defer s.leave()
		defer release()
		defer cancel()
		waiting, ending := false, false
		defer s.survive("exec "+x.id, func() {
			if !waiting { // end the command, and reap it (a panic in Wait: not again)
				cancel()
				_ = c.Wait()
			}
			select { // its start event first (PID 1 is gone: WorkloadPID has its answer)
			case <-x.gate:
			case <-time.After(time.Second):
			}
			x.mu.Lock()
			done := x.done
			x.mu.Unlock()
			if !done {
				if !ending && x.onEnd != nil {
					x.onEnd(nil) // a language exec's files
				}
				x.finish(nil, apiErr(CodeInternal, "", "internal error"))
			}
			s.record(x)
		})
		testHook("exec")
		t0 := time.Now()
		waiting = true
		err := c.Wait()
		<-x.gate // the start event before the end's (PID 1 is gone: WorkloadPID has its answer)
		s.m.duration.observe(time.Since(t0).Seconds(), "exec")
		var ie *jail.InitError
		if errors.As(err, &ie) && ie.Step == "execve" && c.Result != nil {
			err = nil // a program that cannot be run is a result, as a shell's 127 is
		}
		ending = true
		if err != nil {
			s.m.results.inc("exec", "error")
			x.end(nil, asAPIError(err, "spec"))
		} else {
			s.m.results.inc("exec", string(c.Result.Status))
			x.end(c.Result, nil)
		}
		s.record(x)
	}()
	return x, nil
}

// end runs onEnd, then finishes x.
func (x *execEntry) end(res *jail.Result, e *Error) {
	if x.onEnd != nil {
		x.onEnd(res)
	}
	x.finish(res, e)
}

// endedExec is an exec that ended before it began: a language exec
// whose compile failed, res its compile_error. Kept and answered as any
// other.
func (s *Server) endedExec(t Tenant, sess *jail.Session, argv []string, res *jail.Result, recorded bool) *execEntry {
	ctx, cancel := context.WithCancel(context.Background())
	x := &execEntry{id: newExecID(), session: sess.ID(), tenant: t.Name, argv: argv, started: time.Now(), ctx: ctx, cancel: cancel,
		changed: make(chan struct{}), next: 1, ownerNext: 1, keepalive: s.cfg.Keepalive, writeTimeout: s.cfg.StreamWriteTimeout}
	if recorded {
		x.recordPath = execRecordPath(s.execRecordDir(), t.Name, x.id)
	}
	res.ExecID, res.SessionID = x.id, sess.ID()
	x.publish(map[string]any{"event": "start", "exec": x.id}, true)
	s.execs.add(x)
	s.m.results.inc("exec", string(res.Status))
	x.finish(res, nil)
	s.record(x)
	cancel()
	return x
}

// prepareCode compiles a language exec's code in sess (holding one of
// the tenant's slots meanwhile). It returns the job, or the exec that
// already ended when the compile failed.
func (s *Server) prepareCode(r *http.Request, t Tenant, sess *jail.Session, req *ExecRequest) (*runner.SessionJob, *execEntry, *Error) {
	name := "lang-" + req.Language
	p, err := profiles.Load(name)
	if err != nil {
		return nil, nil, apiErr(CodeInternal, "", "%v", err)
	}
	release, e := s.acquire(t)
	if e != nil {
		return nil, nil, e
	}
	job, err := runner.PrepareIn(r.Context(), sess, p, []byte(*req.Code))
	release()
	if err != nil {
		return nil, nil, asAPIError(err, "language")
	}
	if job.Failed() {
		job.Close()
		return nil, s.endedExec(t, sess, append([]string{"compile:"}, p.Runner.Compile...), job.FailedResult(), req.Background || req.Detach), nil
	}
	return job, nil, nil
}

// checkCode checks a language exec's request: its language a runner the
// tenant may use, its code there, no shell.
func checkCode(t Tenant, req *ExecRequest) *Error {
	switch {
	case req.Language == "":
		return apiErr(CodeBadRequest, "language", "code needs a language (GET /v1/info lists them)")
	case req.Code == nil:
		return apiErr(CodeBadRequest, "code", "missing: the code to run, as text")
	case len(*req.Code) > runner.MaxCodeBytes:
		return apiErr(CodeBadRequest, "code", "%d bytes: at most %d", len(*req.Code), runner.MaxCodeBytes)
	case req.Shell != "":
		return apiErr(CodeBadRequest, "shell", "a language exec takes argv (the program's arguments), not shell")
	}
	name := "lang-" + req.Language
	if !slices.Contains(profiles.Names(), name) {
		return apiErr(CodeBadRequest, "language", "no runner %q (GET /v1/info lists them)", req.Language)
	}
	return checkProfile(t, name, "language")
}

// check checks an exec request as far as it can without its session: its
// command (argv, or a language's code the tenant may run), stdin, env,
// background and detach. It returns the argv of a command (nil for code).
func (req *ExecRequest) check(t Tenant) ([]string, *Error) {
	var argv []string
	var e *Error
	if req.Language != "" || req.Code != nil {
		e = checkCode(t, req)
	} else {
		argv, e = req.args()
	}
	if e != nil {
		return nil, e
	}
	if _, e := req.stdin(); e != nil {
		return nil, e
	}
	for i, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, apiErr(CodeBadRequest, "env["+strconv.Itoa(i)+"]", "env entry %q: want KEY=VALUE", kv)
		}
	}
	if req.Background && req.Detach {
		return nil, apiErr(CodeBadRequest, "detach", "a background exec is detached already: give background or detach")
	}
	if e := req.Limits.check(Tenant{Admin: true}, jail.Spec{}); e != nil {
		return nil, e // what no tenant may ask; the tenant's rules are checked by exec
	}
	return argv, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req ExecRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	code := req.Language != "" || req.Code != nil
	argv, e := req.check(t)
	if e != nil {
		return e
	}
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	if req.Limits != nil {
		// The tenant's rules, against the session's command defaults
		// (the only check of them: startExec applies what passed); before
		// a language exec's compile, which a refusal would waste.
		if e := req.Limits.check(t, sess.Spec()); e != nil {
			return e
		}
	}
	f := wantsStream(r)
	var x *execEntry
	var onEnd func(*jail.Result)
	if code {
		job, ended, e := s.prepareCode(r, t, sess, &req)
		if e != nil {
			return e
		}
		if ended != nil {
			x = ended
		} else {
			argv = job.Argv(req.Argv...)
			req.Env = append(append([]string{}, job.Env()...), req.Env...)
			onEnd = func(res *jail.Result) {
				job.Annotate(res)
				job.Close()
			}
			if x, e = s.startExec(t, sess, &req, argv, f == noStream && !req.Background, f != noStream && !req.Background, onEnd); e != nil {
				job.Close()
				return e
			}
		}
	} else if x, e = s.startExec(t, sess, &req, argv, f == noStream && !req.Background, f != noStream && !req.Background, nil); e != nil {
		return e
	}
	noteExec(w, x.session, x.id) // a retry with its Idempotency-Key gets this exec's outcome
	switch {
	case req.Background:
		writeJSON(w, http.StatusAccepted, x.info())
		return nil
	case f != noStream:
		if err := x.follow(r.Context(), w, 1, f, true); err != nil && !req.Detach {
			x.cancel() // the client went away: so does its command
		}
		return nil
	}
	answered, e := x.answer(w, r)
	if !answered && !req.Detach {
		x.cancel() // the client went away: so does its command
	}
	return e
}

// answer waits for x's end and answers with its result, or returns its
// error for the caller to answer; answered is false when the client went
// away first (nothing is answered).
func (x *execEntry) answer(w http.ResponseWriter, r *http.Request) (answered bool, e *Error) {
	w.Header().Set("X-Jail-Exec", x.id)
	if !x.wait(r.Context()) {
		return false, nil
	}
	in := x.info()
	if in.Error != nil {
		return true, in.Error
	}
	writeJSON(w, http.StatusOK, in.Result)
	return true, nil
}

// execOf is the exec the path names, of the tenant's session.
func (s *Server) execOf(r *http.Request, t Tenant) (*execEntry, *Error) {
	sess, e := s.session(r, t)
	if e != nil {
		return nil, e
	}
	x := s.execs.get(t.Name, sess.ID(), r.PathValue("eid"))
	if x == nil {
		return nil, apiErr(CodeNotFound, "eid", "no exec %q in session %s (an ended one is kept %v, the last %d)", r.PathValue("eid"), sess.ID(), ExecRetention, MaxEndedExecs)
	}
	return x, nil
}

func (s *Server) listExecs(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	sess, e := s.session(r, t)
	if e != nil {
		return e
	}
	out := []*ExecInfo{}
	for _, x := range s.execs.list(t.Name, sess.ID()) {
		out = append(out, x.info())
	}
	writeJSON(w, http.StatusOK, map[string]any{"execs": out})
	return nil
}

func (s *Server) getExec(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	x, e := s.execOf(r, t)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, x.info())
	return nil
}

// execEvents serves GET .../exec/{eid}/events?from=SEQ (or SSE's
// Last-Event-ID): the kept events from SEQ, then the new ones as they
// come, until the last.
func (s *Server) execEvents(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	from := 1
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return apiErr(CodeBadRequest, "from", "from %q: want a sequence number, 1 or more", v)
		}
		from = n
	} else if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apiErr(CodeBadRequest, "Last-Event-ID", "Last-Event-ID %q: want a sequence number", v)
		}
		from = n + 1
	}
	x, e := s.execOf(r, t)
	if e != nil {
		return e
	}
	release, e := s.acquireStream(t)
	if e != nil {
		return e
	}
	defer release()
	f := wantsStream(r)
	if f == noStream {
		f = ndjson
	}
	_ = x.follow(r.Context(), w, from, f, false)
	return nil
}

// execStdin serves POST .../exec/{eid}/stdin[?eof=1]: the body is written
// to the exec's stdin (opened with stdin_open), then it is closed if eof.
func (s *Server) execStdin(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	x, e := s.execOf(r, t)
	if e != nil {
		return e
	}
	eof := boolParam(r.URL.Query(), "eof")
	running := x.info().State == ExecRunning
	x.stdinMu.Lock()
	defer x.stdinMu.Unlock()
	if x.stdin == nil {
		if !running {
			return apiErr(CodeNotRunning, "", "exec %s has ended", x.id)
		}
		return apiErr(CodeBadRequest, "stdin", "exec %s has no open stdin: start it with stdin_open, and write before eof", x.id)
	}
	_ = x.stdin.SetWriteDeadline(time.Now().Add(stdinTimeout))
	n, err := io.Copy(x.stdin, r.Body)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return apiErr(CodeBusy, "", "exec %s did not read its stdin for %v: %d bytes were written", x.id, stdinTimeout, n)
	case errors.Is(err, syscall.EPIPE):
		return apiErr(CodeNotRunning, "", "exec %s no longer reads its stdin: %d bytes were written", x.id, n)
	case err != nil:
		return asAPIError(err, "")
	}
	if eof {
		x.stdin.Close()
		x.stdin = nil
		x.stdinOpen.Store(false)
	}
	writeJSON(w, http.StatusOK, map[string]any{"bytes": n, "eof": eof})
	return nil
}

// SignalRequest is the body of POST .../exec/{eid}/signal.
type SignalRequest struct {
	// Signal is a name (TERM or SIGTERM) of those signalNames lists.
	Signal string `json:"signal"`
}

// signalNames are the signals a client may send an exec; SIGSTOP would
// stop its helper instead (pause the session to stop it).
var signalNames = map[string]syscall.Signal{"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM,
	"CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH}

// signalOf is the signal a request names (KILL, SIGTERM, term...).
func signalOf(name string) (syscall.Signal, *Error) {
	sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	if !ok {
		names := make([]string, 0, len(signalNames))
		for n := range signalNames {
			names = append(names, n)
		}
		slices.Sort(names)
		return 0, apiErr(CodeBadRequest, "signal", "signal %q: want one of %s", name, strings.Join(names, ", "))
	}
	return sig, nil
}

func (s *Server) execSignal(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	var req SignalRequest
	if e := decode(r, w, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	sig, e := signalOf(req.Signal)
	if e != nil {
		return e
	}
	x, e := s.execOf(r, t)
	if e != nil {
		return e
	}
	x.mu.Lock()
	c := x.cmd
	x.mu.Unlock()
	if c == nil {
		return apiErr(CodeNotRunning, "", "exec %s has ended", x.id)
	}
	if err := c.Signal(sig); err != nil {
		return apiErr(CodeNotRunning, "", "exec %s: %v", x.id, err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"signal": "SIG" + strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG"), "sent": true})
	return nil
}
