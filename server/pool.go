package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
)

// Warm pools: jails built ahead. A pool of runs (kind "run", the default)
// holds prepared runs (jail.Cmd.Prepare: namespaces, root, cgroup, network
// and seccomp program made, PID 1 waiting with no workload); a pool of
// sessions (kind "session") holds sessions made with no owner, each in the
// pool's own state directory, which a session create that names the pool
// claims: the session is moved into the tenant's directory under the
// request's id and labels, and its PID 1 re-arms its deadlines with the
// request's TTL and idle timeout (jail.Sessions.Adopt). A run that names a
// pool claims one: the
// request's argv, stdin and timeout are applied and the workload is
// released, so only the part of a run that depends on the command is
// paid while the client waits. A member is never used twice. A claim that
// finds none ready, or a request whose spec would differ from the pool's
// (a tenant's memory quota), is a miss: a cold run of the same spec,
// never an error. Every result says which (Result.Pool). Each pool
// refills in the background, one member at a time per filler, up to its
// min_ready ready and its max alive (ready and in use), and replaces
// ready members older than max_age.
//
// Members live in the server: its end discards them (Close), and a
// server killed outright leaves their PID 1s to die with their sync
// pipes and their cgroups to `jail check --clean`. A session member has
// a TTL of its pool's max_age and a minute (its claim replaces it), and
// the next server of the state directory removes those left.

// PoolsFile is the file of `jail serve --pools FILE` (YAML or JSON).
//
//	pools:
//	  - name: py
//	    profile: strict
//	    min_ready: 4
//	    max: 16
//	    max_age: 10m
type PoolsFile struct {
	Pools []PoolConfig `json:"pools"`
}

// PoolConfig is one pool.
type PoolConfig struct {
	// Name is what a run names: 1 to 63 of [a-z0-9_.-], starting with a
	// letter.
	Name string `json:"name"`
	// Kind is "run" (the default: members serve POST /v1/run) or
	// "session" (members serve POST /v1/sessions).
	Kind string `json:"kind,omitempty"`
	// Workspace is a session pool's members' (tmpfs, the default, or
	// none); a create that claims one may name no other.
	Workspace jail.Workspace `json:"workspace,omitzero"`
	// Profile (a built-in one) or Spec is its members' spec. A pool of a
	// profile may be used by every tenant that may name the profile; one
	// with a spec only by admins and tenants whose policy lists it.
	Profile string     `json:"profile,omitempty"`
	Spec    *jail.Spec `json:"spec,omitempty"`
	// MinReady members are kept ready (1 to 64).
	MinReady int `json:"min_ready"`
	// Max bounds its members at once, ready and in use (default twice
	// MinReady, at most 256).
	Max int `json:"max,omitempty"`
	// MaxAge: a ready member older than this is replaced (default 10m).
	MaxAge jail.Duration `json:"max_age,omitempty"`
	// ReplenishDelay waits this long after a claim before making its
	// replacement (default 0: at once).
	ReplenishDelay jail.Duration `json:"replenish_delay,omitempty"`
}

// Pool kinds.
const (
	PoolRun     = "run"
	PoolSession = "session"
)

// Pool defaults and bounds.
const (
	DefaultPoolMaxAge = 10 * time.Minute
	MaxPoolReady      = 64
	MaxPoolMembers    = 256
	// poolFillers is how many members one pool makes at once.
	poolFillers = 2
	// poolRetry is how long a pool waits after a member could not be made.
	poolRetry = time.Second
)

// ParsePools reads a pools file, refusing unknown fields and naming what
// is wrong.
func ParsePools(data []byte) (*PoolsFile, error) {
	var f PoolsFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i := range f.Pools {
		p := &f.Pools[i]
		at := fmt.Sprintf("pools[%d]", i)
		if err := p.check(at); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%s.name: %q is named twice", at, p.Name)
		}
		seen[p.Name] = true
	}
	return &f, nil
}

// check validates a pool's configuration, naming what is wrong after at,
// and fills in its defaults.
func (p *PoolConfig) check(at string) error {
	if at != "" {
		at += "."
	}
	switch {
	case !validTenantName(p.Name):
		return fmt.Errorf("%sname: %q: want 1 to 63 of [a-z0-9_.-] starting with a letter", at, p.Name)
	case (p.Profile == "") == (p.Spec == nil):
		return fmt.Errorf("%sprofile: give profile or spec", at)
	case p.Profile != "" && !slices.Contains(profiles.Names(), p.Profile):
		return fmt.Errorf("%sprofile: %q is not a built-in profile (%s)", at, p.Profile, strings.Join(profiles.Names(), ", "))
	case p.MinReady < 1 || p.MinReady > MaxPoolReady:
		return fmt.Errorf("%smin_ready: %d: want 1 to %d", at, p.MinReady, MaxPoolReady)
	case p.Max != 0 && (p.Max < p.MinReady || p.Max > MaxPoolMembers):
		return fmt.Errorf("%smax: %d: want min_ready (%d) to %d", at, p.Max, p.MinReady, MaxPoolMembers)
	case p.MaxAge < 0:
		return fmt.Errorf("%smax_age: is negative", at)
	case p.ReplenishDelay < 0:
		return fmt.Errorf("%sreplenish_delay: is negative", at)
	case p.Kind != "" && p.Kind != PoolRun && p.Kind != PoolSession:
		return fmt.Errorf("%skind: %q: want %s or %s", at, p.Kind, PoolRun, PoolSession)
	case p.Workspace != (jail.Workspace{}) && p.Kind != PoolSession:
		return fmt.Errorf("%sworkspace: only a pool of sessions has one", at)
	case p.Workspace.Type != "" && p.Workspace.Type != jail.WorkspaceTmpfs && p.Workspace.Type != jail.WorkspaceNone:
		return fmt.Errorf("%sworkspace.type: %q: a pool's sessions have a tmpfs workspace or none", at, p.Workspace.Type)
	}
	if p.Kind == "" {
		p.Kind = PoolRun
	}
	if p.Kind == PoolSession && p.Workspace.Type == "" {
		p.Workspace.Type = jail.WorkspaceTmpfs
	}
	if p.Spec != nil {
		if err := p.Spec.Validate(); err != nil {
			return fmt.Errorf("%sspec: %w", at, err)
		}
	}
	if p.Max == 0 {
		p.Max = min(2*p.MinReady, MaxPoolMembers)
	}
	if p.MaxAge == 0 {
		p.MaxAge = jail.Duration(DefaultPoolMaxAge)
	}
	return nil
}

// PoolInfo is what GET /v1/pools says of a pool.
type PoolInfo struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Profile  string `json:"profile,omitempty"`
	MinReady int    `json:"min_ready"`
	Max      int    `json:"max"`
	Ready    int    `json:"ready"`
	InUse    int    `json:"in_use"`
	Making   int    `json:"making"`
	Hits     int64  `json:"hits"`
	Misses   int64  `json:"misses"`
	// Recycled members were replaced for their age; Failures could not
	// be made.
	Recycled int64 `json:"recycled"`
	Failures int64 `json:"failures"`
}

type member struct {
	c      *jail.Cmd
	cancel context.CancelFunc
	stdin  *os.File      // the write end of its stdin
	sess   *jail.Session // a session pool's member, instead
	born   time.Time
}

// discard ends a member that will not be used.
func (m *member) discard() {
	if m.sess != nil {
		_, _ = m.sess.Remove()
		return
	}
	m.c.Discard()
	m.cancel()
	m.stdin.Close()
}

type pool struct {
	cfg      PoolConfig
	spec     jail.Spec
	s        *Server
	sessions *jail.Sessions // a session pool's members
	wake     chan struct{}
	cancel   context.CancelFunc // stops its fillers
	wg       sync.WaitGroup     // its fillers

	mu     sync.Mutex
	ready  []*member // oldest first
	making int
	inUse  int
	closed bool
	stats  PoolInfo
}

// pools are the server's, by name: those of --pools, and those PUT.
type pools struct {
	mu     sync.Mutex
	byName map[string]*pool
	// fromFile are the names of the pools of the pools file (Config.Pools,
	// then Reload's): a reload removes those its file no longer lists.
	fromFile map[string]bool
}

func (ps *pools) get(name string) *pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.byName[name]
}

// all returns the pools, by name.
func (ps *pools) all() []*pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*pool, 0, len(ps.byName))
	for _, name := range sortedKeys(ps.byName) {
		out = append(out, ps.byName[name])
	}
	return out
}

// startPools makes the pools of f and starts filling them.
func (s *Server) startPools(f *PoolsFile) error {
	s.pools.fromFile = map[string]bool{}
	for _, cfg := range f.Pools {
		if cfg.Kind == PoolSession {
			// What an earlier server of the state directory left; only
			// now: a pool replaced later shares its directory with the
			// pool it replaces, whose members are its own to remove.
			removeLeft(s.poolSessions(cfg.Name), s.cfg.Logger, cfg.Name)
		}
		p, err := s.newPool(cfg)
		if err != nil {
			s.Close()
			return err
		}
		s.pools.byName[cfg.Name] = p
		s.pools.fromFile[cfg.Name] = true
	}
	return nil
}

// poolSessions are the members of a pool of sessions, in their state
// directory.
func (s *Server) poolSessions(name string) *jail.Sessions {
	return &jail.Sessions{Dir: filepath.Join(s.cfg.StateDir, "pools", name, "sessions"),
		HelperPath: s.cfg.HelperPath, Logger: s.cfg.Logger}
}

// Reload replaces the server's bearer tokens, its tenant policy and the
// pools of its pools file, as jail serve does on SIGHUP; nil leaves one as
// it is. A token left out is refused from
// the next request on; a request under way keeps the tenant it was given.
// A pool the file adds is made, one whose configuration changed is replaced
// (its ready members discarded, those running go on), one it no longer
// lists is removed; a pool made with PUT stays, unless the file names it.
// The files were checked by their parsers: Reload fails only when a pool
// cannot be made, and then changes no pool (tokens and policy are
// replaced all the same).
func (s *Server) Reload(tokens *Tokens, policy *Policy, pf *PoolsFile) error {
	if tokens != nil {
		s.tokens.Store(tokens)
	}
	if policy != nil {
		s.policy.Store(policy)
	}
	if pf == nil {
		return nil
	}
	made := map[string]*pool{}
	for _, cfg := range pf.Pools {
		if old := s.pools.get(cfg.Name); old != nil && reflect.DeepEqual(old.cfg, cfg) {
			continue
		}
		p, err := s.newPool(cfg)
		if err != nil {
			for _, p := range made {
				p.stop()
			}
			return fmt.Errorf("pool %s: %w", cfg.Name, err)
		}
		made[cfg.Name] = p
	}
	var stale []*pool
	s.pools.mu.Lock()
	listed := map[string]bool{}
	for _, cfg := range pf.Pools {
		listed[cfg.Name] = true
	}
	for name := range s.pools.fromFile {
		if !listed[name] {
			if p := s.pools.byName[name]; p != nil {
				stale = append(stale, p)
			}
			delete(s.pools.byName, name)
		}
	}
	for name, p := range made {
		if old := s.pools.byName[name]; old != nil {
			stale = append(stale, old)
		}
		s.pools.byName[name] = p
	}
	s.pools.fromFile = listed
	s.pools.mu.Unlock()
	for _, p := range stale {
		p.stop()
	}
	return nil
}

// newPool makes a pool of cfg (checked) and starts filling it.
func (s *Server) newPool(cfg PoolConfig) (*pool, error) {
	spec := jail.Spec{}
	if cfg.Spec != nil {
		spec = *cfg.Spec
	} else {
		prof, err := profiles.Load(cfg.Profile)
		if err != nil {
			return nil, err
		}
		spec = prof.Spec
		if cfg.Kind == PoolSession && cfg.Workspace.Type != jail.WorkspaceNone {
			spec.Cwd = "" // the workspace, not the profile's /tmp (as a session create)
		}
	}
	p := &pool{cfg: cfg, spec: spec, s: s, wake: make(chan struct{}, 1)}
	if cfg.Kind == PoolSession {
		p.sessions = s.poolSessions(cfg.Name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for range min(poolFillers, cfg.MinReady) {
		p.wg.Add(1)
		go p.fill(ctx, &p.wg)
	}
	p.wg.Add(1)
	go p.recycle(ctx, &p.wg)
	return p, nil
}

// stop stops the pool's fillers and discards its ready members; runs in
// its members go on.
func (p *pool) stop() {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, m := range ready {
		m.discard()
	}
}

// Close stops the pools' filling and discards their ready members, and
// lets go of the state directory once no request or exec is under way (at
// once when none is; else when the last ends, or the process does): until
// then no other server may take it. Runs and execs under way go on.
func (s *Server) Close() {
	if s.pools != nil {
		s.pools.mu.Lock()
		all := s.pools.byName
		s.pools.byName = map[string]*pool{}
		s.pools.mu.Unlock()
		for _, p := range all {
			p.stop()
		}
	}
	if s.netns != nil {
		_ = s.netns.Close()
	}
	s.reqMu.Lock()
	s.closing = true
	idle := s.reqs == 0
	s.reqMu.Unlock()
	if idle {
		s.unlock()
	}
}

// fill keeps the pool at its min_ready, within its max, one member at a
// time.
func (p *pool) fill(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	defer p.s.survive("pool "+p.cfg.Name+" filler", nil) // outside make (made safe below): the pool then has one filler less
	for ctx.Err() == nil {
		p.mu.Lock()
		need := !p.closed && len(p.ready)+p.making < p.cfg.MinReady && len(p.ready)+p.making+p.inUse < p.cfg.Max
		if need {
			p.making++
		}
		p.mu.Unlock()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			}
		}
		m, err := p.safeMake(ctx)
		p.mu.Lock()
		p.making--
		switch {
		case err != nil:
			p.stats.Failures++
		case p.closed || ctx.Err() != nil:
		default:
			p.ready = append(p.ready, m)
			m = nil
		}
		p.mu.Unlock()
		if m != nil {
			m.discard()
		}
		if err != nil {
			if ctx.Err() == nil {
				p.s.cfg.Logger.Warn("pool member not made", "pool", p.cfg.Name, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(poolRetry):
			}
		}
	}
}

// removeLeft removes the sessions an earlier server left in a session
// pool's directory: members no one claimed.
func removeLeft(m *jail.Sessions, log *slog.Logger, pool string) {
	left, err := m.List(nil)
	if err != nil {
		return // none yet
	}
	for _, sess := range left {
		if _, err := sess.Remove(); err != nil {
			log.Warn("pool: a member left by an earlier server", "pool", pool, "session", sess.ID(), "err", err)
		}
	}
}

// make prepares one member.
// safeMake is make, a panic in it a failure like any other (logged with
// its stack): the filler goes on, and the pool's count of members being
// made stays right.
func (p *pool) safeMake(ctx context.Context) (m *member, err error) {
	defer p.s.survive("pool "+p.cfg.Name+" member", func() { m, err = nil, errors.New("internal error making a member (a panic, logged)") })
	testHook("pool")
	return p.make(ctx)
}

func (p *pool) make(ctx context.Context) (*member, error) {
	if p.sessions != nil {
		sess, err := p.sessions.Create(ctx, jail.SessionSpec{Spec: p.spec, Workspace: p.cfg.Workspace,
			TTL: time.Duration(p.cfg.MaxAge) + time.Minute})
		if err != nil {
			return nil, err
		}
		return &member{sess: sess, born: time.Now()}, nil
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := jail.Command(mctx, p.spec, "/bin/true") // the claim's argv replaces it
	c.Capture, c.HelperPath, c.Logger, c.NetnsPool = true, p.s.cfg.HelperPath, p.s.cfg.Logger, p.s.netns
	pr, pw, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, err
	}
	defer pr.Close() // the jail has its own
	c.Stdin = pr
	if err := c.Prepare(); err != nil {
		cancel()
		pw.Close()
		return nil, err
	}
	return &member{c: c, cancel: cancel, stdin: pw, born: time.Now()}, nil
}

// recycle replaces ready members older than max_age.
func (p *pool) recycle(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	defer p.s.survive("pool "+p.cfg.Name+" recycler", nil)
	every := min(time.Duration(p.cfg.MaxAge)/4, time.Second)
	tk := time.NewTicker(max(every, 10*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		var old []*member
		p.mu.Lock()
		for len(p.ready) > 0 && time.Since(p.ready[0].born) > time.Duration(p.cfg.MaxAge) {
			old = append(old, p.ready[0])
			p.ready = p.ready[1:]
		}
		p.stats.Recycled += int64(len(old))
		p.mu.Unlock()
		for _, m := range old {
			m.discard()
		}
		if len(old) > 0 {
			p.poke(0)
		}
	}
}

// poke wakes a filler, after delay.
func (p *pool) poke(delay time.Duration) {
	wake := func() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	if delay > 0 {
		time.AfterFunc(delay, wake)
		return
	}
	wake()
}

// claim takes the newest ready member (the least likely to be recycled),
// or nil.
func (p *pool) claim() *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 || p.closed {
		p.stats.Misses++
		return nil
	}
	m := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	p.inUse++
	p.stats.Hits++
	return m
}

// done gives back a claimed member's place (never the member).
func (p *pool) done() {
	p.mu.Lock()
	p.inUse--
	p.mu.Unlock()
	p.poke(time.Duration(p.cfg.ReplenishDelay))
}

func (p *pool) info() PoolInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.stats
	in.Name, in.Kind, in.Profile, in.MinReady, in.Max = p.cfg.Name, p.cfg.Kind, p.cfg.Profile, p.cfg.MinReady, p.cfg.Max
	in.Ready, in.InUse, in.Making = len(p.ready), p.inUse, p.making
	return in
}

// poolFor finds the pool of kind a request names and checks that the
// tenant may use it. It returns the spec the run or session must have:
// the pool's, or, when the tenant's policy changes it (a memory quota),
// that one (a miss).
func (s *Server) poolFor(t Tenant, name, kind string) (*pool, jail.Spec, *Error) {
	p := s.pools.get(name)
	if p == nil {
		return nil, jail.Spec{}, apiErr(CodeNotFound, "pool", "no pool %q", name)
	}
	if p.cfg.Kind != kind {
		return nil, jail.Spec{}, apiErr(CodeBadRequest, "pool", "pool %q is a pool of %ss, not of %ss", name, p.cfg.Kind, kind)
	}
	spec := p.spec
	if t.Admin || slices.Contains(t.Policy.Pools, name) {
		return p, spec, nil
	}
	if p.cfg.Profile == "" {
		return nil, jail.Spec{}, apiErr(CodeForbidden, "pool", "pool %q has a spec of its own: only admins and tenants whose policy lists it may use it", name)
	}
	if e := checkProfile(t, p.cfg.Profile, "pool"); e != nil {
		return nil, jail.Spec{}, e
	}
	spec.Mounts = slices.Clone(spec.Mounts)
	if e := checkSpec(t, &spec, "pool"); e != nil {
		return nil, jail.Spec{}, e
	}
	return p, spec, nil
}

// runPooled runs req in a member of p, or cold when none is ready or the
// spec is not the pool's: its Result says which.
func (s *Server) runPooled(r *http.Request, t Tenant, p *pool, spec jail.Spec, req *RunRequest) (*jail.Result, *Error) {
	argv, e := req.args()
	if e != nil {
		return nil, e
	}
	stdin, e := req.stdin()
	if e != nil {
		return nil, e
	}
	// Not checkSpec again: the pool's spec is one the tenant may use
	// (poolFor), and its limits may only be tightened.
	if e := req.checkLimits(t, spec); e != nil {
		return nil, e
	}
	req.override(&spec)
	release, e := s.acquire(t)
	if e != nil {
		return nil, e
	}
	defer release()
	var m *member
	if releasable(p.spec, spec) {
		m = p.claim()
	} else {
		p.mu.Lock()
		p.stats.Misses++
		p.mu.Unlock()
	}
	if m == nil {
		s.m.claims.inc(p.cfg.Name, "miss")
		if req.Timeout != 0 {
			spec.Timeout = req.Timeout
		}
		c := jail.Command(r.Context(), spec, argv[0], argv[1:]...)
		c.Stdin, c.Capture, c.HelperPath, c.Logger, c.NetnsPool = stdin, true, s.cfg.HelperPath, s.cfg.Logger, s.netns
		res, e := s.runCmd("run", c)
		if res != nil {
			res.Pool = jail.PoolMiss
		}
		return res, e
	}
	s.m.claims.inc(p.cfg.Name, "hit")
	defer p.done()
	defer m.cancel()
	stop := context.AfterFunc(r.Context(), m.cancel) // a client that goes away ends the run
	defer stop()
	c := m.c
	c.Args = argv
	c.Spec = spec
	if req.Timeout != 0 {
		c.Spec.Timeout = req.Timeout
	}
	go func() {
		defer m.stdin.Close()
		if stdin != nil {
			_ = m.stdin.SetWriteDeadline(time.Now().Add(stdinTimeout))
			_, _ = io.Copy(m.stdin, stdin)
		}
	}()
	res, e := s.runCmd("run", c)
	if e != nil && e.Code == CodeSetupFailed && r.Context().Err() == nil {
		// The member could not be released (its PID 1 is gone): a
		// member is disposable, and the run is not its fault.
		s.cfg.Logger.Warn("pool member failed, running cold", "pool", p.cfg.Name, "err", e.Message)
		c := jail.Command(r.Context(), spec, argv[0], argv[1:]...)
		if req.Timeout != 0 {
			c.Spec.Timeout = req.Timeout
		}
		stdin, _ = req.stdin()
		c.Stdin, c.Capture, c.HelperPath, c.Logger, c.NetnsPool = stdin, true, s.cfg.HelperPath, s.cfg.Logger, s.netns
		res, e = s.runCmd("run", c)
		if res != nil {
			res.Pool = jail.PoolMiss
		}
		return res, e
	}
	if res != nil {
		res.Pool = jail.PoolHit
	}
	return res, e
}

// releasable reports whether a member of a pool of spec pool can run spec:
// what differs is what a release may change (jail.Cmd.Prepare): env, cwd,
// timeout, the kill grace, the output limit, and the limits its cgroup
// serves (those the pool's spec sets; the CPU time limit needs a cgroup).
func releasable(pool, spec jail.Spec) bool {
	hasCgroup := pool.MemoryMaxBytes > 0 || pool.PidsMax > 0 || pool.CPUs > 0 || pool.CPUWeight > 0 || pool.IOWeight > 0
	switch {
	case (spec.MemoryMaxBytes != pool.MemoryMaxBytes || spec.SwapMaxBytes != pool.SwapMaxBytes) && pool.MemoryMaxBytes == 0,
		spec.PidsMax != pool.PidsMax && pool.PidsMax == 0,
		spec.CPUs != pool.CPUs && pool.CPUs == 0,
		spec.CPUTime > 0 && !hasCgroup:
		return false
	}
	s := spec
	s.Env, s.Cwd, s.Timeout, s.KillGrace, s.OutputLimitBytes = pool.Env, pool.Cwd, pool.Timeout, pool.KillGrace, pool.OutputLimitBytes
	s.MemoryMaxBytes, s.SwapMaxBytes, s.PidsMax, s.CPUs, s.CPUTime = pool.MemoryMaxBytes, pool.SwapMaxBytes, pool.PidsMax, pool.CPUs, pool.CPUTime
	return reflect.DeepEqual(s, pool)
}

// createPooled answers a session create that names a pool of sessions: a
// ready member adopted into the tenant's directory, or, when none is ready,
// the spec is not the pool's, or the member cannot be adopted, a session
// made cold. The answer's "pool" says which.
func (s *Server) createPooled(w http.ResponseWriter, r *http.Request, t Tenant, p *pool, ss jail.SessionSpec) *Error {
	var m *member
	if reflect.DeepEqual(ss.Spec, p.spec) {
		m = p.claim()
	} else {
		p.mu.Lock()
		p.stats.Misses++
		p.mu.Unlock()
	}
	how := jail.PoolMiss
	var sess *jail.Session
	if m != nil {
		p.done() // a session is the tenant's once adopted: not the pool's to count
		var err error
		sess, err = s.sessions(t).Adopt(p.sessions, m.sess.ID(), ss)
		switch {
		case err == nil:
			how = jail.PoolHit
		case errors.Is(err, jail.ErrExists):
			m.discard()
			return asAPIError(err, "")
		default:
			var se *jail.SpecError
			m.discard()
			if errors.As(err, &se) {
				return asAPIError(err, "")
			}
			s.cfg.Logger.Warn("pool member could not be adopted, creating cold", "pool", p.cfg.Name, "err", err)
		}
	}
	if sess == nil {
		var err error
		if sess, err = s.sessions(t).Create(r.Context(), ss); err != nil {
			return asAPIError(err, "spec")
		}
	}
	s.m.claims.inc(p.cfg.Name, how)
	info, err := sess.Inspect()
	if err != nil {
		return asAPIError(err, "")
	}
	info.Pool = how
	writeJSON(w, http.StatusCreated, info)
	return nil
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	out := []PoolInfo{}
	for _, p := range s.pools.all() {
		out = append(out, p.info())
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
	return nil
}

// putPool serves PUT /v1/pools/{name} (admins only): the pool of the body
// (a PoolConfig; its name, if given, the path's) is made and fills; one of
// that name already there is replaced (its ready members discarded, its
// runs under way go on).
func (s *Server) putPool(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	if !t.Admin {
		return apiErr(CodeForbidden, "", "tenant %s may not make pools: only the server's own user, root or an admin by the tenant policy", t.Name)
	}
	var cfg PoolConfig
	if e := decode(r, w, s.cfg.MaxBodyBytes, &cfg); e != nil {
		return e
	}
	name := r.PathValue("name")
	if cfg.Name != "" && cfg.Name != name {
		return apiErr(CodeBadRequest, "name", "name %q: the path names pool %q", cfg.Name, name)
	}
	cfg.Name = name
	if err := cfg.check(""); err != nil {
		field, _, _ := strings.Cut(err.Error(), ":")
		return apiErr(CodeBadRequest, field, "%v", err)
	}
	if s.draining.Load() {
		return apiErr(CodeCapacity, "", "the server is draining: it takes no new work")
	}
	p, err := s.newPool(cfg)
	if err != nil {
		return asAPIError(err, "")
	}
	s.pools.mu.Lock()
	old := s.pools.byName[name]
	s.pools.byName[name] = p
	s.pools.mu.Unlock()
	status := http.StatusCreated
	if old != nil {
		old.stop()
		status = http.StatusOK
	}
	writeJSON(w, status, p.info())
	return nil
}

// deletePool serves DELETE /v1/pools/{name} (admins only).
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request, t Tenant) *Error {
	if !t.Admin {
		return apiErr(CodeForbidden, "", "tenant %s may not remove pools: only the server's own user, root or an admin by the tenant policy", t.Name)
	}
	name := r.PathValue("name")
	s.pools.mu.Lock()
	p := s.pools.byName[name]
	delete(s.pools.byName, name)
	s.pools.mu.Unlock()
	if p == nil {
		return apiErr(CodeNotFound, "name", "no pool %q", name)
	}
	p.stop()
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "removed": true})
	return nil
}

// writePoolMetrics writes each pool's ready members.
func (s *Server) writePoolMetrics(w io.Writer) {
	if s.netns != nil {
		st := s.netns.Stats()
		fmt.Fprintf(w, "# HELP jail_netns_pool_ready Network namespaces made ahead and ready.\n# TYPE jail_netns_pool_ready gauge\njail_netns_pool_ready %d\n", st.Ready)
		fmt.Fprintf(w, "# HELP jail_netns_pool_taken_total Jails that joined a namespace of the pool.\n# TYPE jail_netns_pool_taken_total counter\njail_netns_pool_taken_total %d\n", st.Taken)
		fmt.Fprintf(w, "# HELP jail_netns_pool_misses_total Jails that found none ready and made their own.\n# TYPE jail_netns_pool_misses_total counter\njail_netns_pool_misses_total %d\n", st.Misses)
	}
	all := s.pools.all()
	if len(all) == 0 {
		return
	}
	fmt.Fprintf(w, "# HELP jail_pool_ready Ready members of each warm pool.\n# TYPE jail_pool_ready gauge\n")
	for _, p := range all {
		in := p.info()
		fmt.Fprintf(w, "jail_pool_ready%s %d\n", labelString([]string{"pool"}, []string{in.Name}, "", ""), in.Ready)
	}
}
