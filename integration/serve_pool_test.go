package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/server"
)

// pools answers GET /v1/pools, by name.
func (s *served) pools(t *testing.T) map[string]server.PoolInfo {
	t.Helper()
	code, b := s.do(t, "GET", "/v1/pools", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	var ans struct {
		Pools []server.PoolInfo `json:"pools"`
	}
	require.NoError(t, json.Unmarshal(b, &ans))
	out := map[string]server.PoolInfo{}
	for _, p := range ans.Pools {
		out[p.Name] = p
	}
	return out
}

// runIn POSTs a run and returns its result.
func (s *served) runIn(t *testing.T, body string) jail.Result {
	t.Helper()
	code, b := s.do(t, "POST", "/v1/run", body)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var res jail.Result
	require.NoError(t, json.Unmarshal(b, &res))
	return res
}

// writePools writes a pools file for jail serve --pools and returns its path.
func writePools(t *testing.T, yaml string) string {
	t.Helper()
	file := filepath.Join(openDir(t), "pools.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	return file
}

// TestServePools: a run in a warm pool takes a member built ahead (hit)
// with its own argv, stdin and timeout; with none ready it is a cold
// start (miss), never an error; members are never reused, old ones are
// replaced, a tenant may use a pool of a profile it may name and not one
// with a spec of its own; the server's end leaves nothing.
func TestServePools(t *testing.T) {
	requireRoot(t)
	before := allJailCgroups()
	file := writePools(t, `
pools:
  - {name: warm, profile: strict, min_ready: 2, max: 4}
  - {name: one, profile: strict, min_ready: 1, max: 1, replenish_delay: 1h}
  - {name: young, profile: strict, min_ready: 1, max_age: 200ms}
  - {name: own, spec: {memory_max_bytes: 134217728}, min_ready: 1}
`)
	s := serve(t, openDir(t), "--pools", file)
	require.Eventually(t, func() bool {
		p := s.pools(t)
		return p["warm"].Ready == 2 && p["one"].Ready == 1 && p["own"].Ready == 1
	}, 30*time.Second, 20*time.Millisecond, "the pools fill")

	// A hit: the request's argv, stdin and timeout, in a jail built ahead.
	res := s.runIn(t, `{"pool": "warm", "shell": "read x; echo got $x; echo $0", "stdin": "in\n"}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	assert.Equal(t, jail.StatusExited, res.Status)
	lines := strings.Split(res.Stdout, "\n")
	require.Len(t, lines, 3, "%q", res.Stdout)
	assert.Equal(t, "got in", lines[0])
	assert.Equal(t, "/bin/sh", lines[1], "the argv is the request's")
	res = s.runIn(t, `{"pool": "warm", "argv": ["sleep", "5"], "timeout": "200ms"}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	assert.Equal(t, jail.StatusTimedOut, res.Status)
	// Members are never reused: each run's jail is new (its /tmp too).
	res = s.runIn(t, `{"pool": "warm", "shell": "ls -A /tmp; echo mark > /tmp/mark"}`)
	assert.Equal(t, "", res.Stdout)
	res = s.runIn(t, `{"pool": "warm", "shell": "ls -A /tmp"}`)
	assert.Equal(t, "", res.Stdout, "a later run does not see an earlier one's files")

	// With none ready: a cold start of the pool's spec.
	res = s.runIn(t, `{"pool": "one", "argv": ["/bin/true"]}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	res = s.runIn(t, `{"pool": "one", "shell": "echo cold"}`)
	assert.Equal(t, jail.PoolMiss, res.Pool)
	assert.Equal(t, "cold\n", res.Stdout)
	p := s.pools(t)["one"]
	assert.Equal(t, int64(1), p.Hits)
	assert.Equal(t, int64(1), p.Misses)
	assert.Equal(t, 0, p.Ready, "replenish_delay holds the refill")

	// Old members are replaced.
	require.Eventually(t, func() bool { return s.pools(t)["young"].Recycled >= 2 }, 10*time.Second, 50*time.Millisecond)

	// Tenants: a profile's pool is open to who may name the profile; a
	// pool with a spec of its own is not.
	code, b := s.asUser(t, "POST", "/v1/run", `{"pool": "warm", "argv": ["id", "-u"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"pool": "hit"`)
	code, b = s.asUser(t, "POST", "/v1/run", `{"pool": "own", "argv": ["id"]}`)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "pool", apiError(t, b).Field)
	res = s.runIn(t, `{"pool": "own", "argv": ["/bin/true"]}`)
	assert.Equal(t, jail.PoolHit, res.Pool, "root may")

	// A run's own env, cwd and limits keep the member (a hit): its cgroup
	// takes the limits at the release, and they hold (64 MiB under the
	// run's 16 MiB is OOM-killed, not under the pool's 128 MiB). A limit
	// the pool's spec does not set is a cold start of the run's spec.
	require.Eventually(t, func() bool { return s.pools(t)["own"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)
	res = s.runIn(t, `{"pool": "own", "shell": "echo $GREET in $PWD; dd if=/dev/zero of=/dev/null bs=64M count=1",
		"env": ["GREET=hi"], "cwd": "/tmp", "limits": {"memory_max_bytes": 16777216, "output_limit_bytes": 4096}}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	assert.Contains(t, res.LimitsHit, "memory", "%s", res.Stderr)
	assert.Positive(t, res.OOMKills)
	assert.True(t, strings.HasPrefix(res.Stdout, "hi in /tmp\n"), "%q", res.Stdout)
	require.Eventually(t, func() bool { return s.pools(t)["own"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)
	res = s.runIn(t, `{"pool": "own", "shell": "dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null && echo fits"}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	assert.Equal(t, "fits\n", res.Stdout, "the next member has the pool's own limit: %s", res.Stderr)
	res = s.runIn(t, `{"pool": "own", "argv": ["/bin/true"], "limits": {"cpus": 0.5}}`)
	assert.Equal(t, jail.PoolMiss, res.Pool, "the pool's members have no cpu limit to change")
	assert.Equal(t, jail.StatusExited, res.Status)
	code, b = s.do(t, "POST", "/v1/run", `{"pool": "own", "argv": ["/bin/true"], "limits": {"pids_max": -1}}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	// A tenant may only tighten limits: not raise the output a run keeps
	// in the server, nor remove a limit.
	code, b = s.asUser(t, "POST", "/v1/run", `{"pool": "warm", "argv": ["true"], "limits": {"output_limit_bytes": 1073741824}}`)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	assert.Equal(t, "limits.output_limit_bytes", apiError(t, b).Field)
	code, b = s.asUser(t, "POST", "/v1/run", `{"pool": "warm", "argv": ["true"], "limits": {"output_limit_bytes": 4096}}`)
	assert.Equal(t, http.StatusOK, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/run", `{"pool": "nope", "argv": ["true"]}`)
	assert.Equal(t, http.StatusNotFound, code, "%s", b)
	code, b = s.do(t, "POST", "/v1/run", `{"pool": "warm", "profile": "strict", "argv": ["true"]}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)

	// Pools made and removed while the server runs, by admins only.
	code, b = s.do(t, "PUT", "/v1/pools/extra", `{"profile": "strict", "min_ready": 1}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	require.Eventually(t, func() bool { return s.pools(t)["extra"].Ready == 1 }, 30*time.Second, 20*time.Millisecond)
	res = s.runIn(t, `{"pool": "extra", "shell": "echo made"}`)
	assert.Equal(t, jail.PoolHit, res.Pool)
	code, b = s.do(t, "PUT", "/v1/pools/extra", `{"profile": "strict", "min_ready": 2, "max": 2}`)
	require.Equal(t, http.StatusOK, code, "replaced: %s", b)
	require.Eventually(t, func() bool { return s.pools(t)["extra"].Ready == 2 }, 30*time.Second, 20*time.Millisecond)
	code, b = s.do(t, "PUT", "/v1/pools/extra", `{"profile": "strict", "min_ready": 0}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	assert.Equal(t, "min_ready", apiError(t, b).Field)
	code, b = s.do(t, "PUT", "/v1/pools/extra", `{"name": "other", "profile": "strict", "min_ready": 1}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	code, b = s.asUser(t, "PUT", "/v1/pools/mine", `{"profile": "strict", "min_ready": 1}`)
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	code, b = s.asUser(t, "DELETE", "/v1/pools/extra", "")
	assert.Equal(t, http.StatusForbidden, code, "%s", b)
	code, b = s.do(t, "DELETE", "/v1/pools/extra", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	_, gone := s.pools(t)["extra"]
	assert.False(t, gone)
	code, _ = s.do(t, "DELETE", "/v1/pools/extra", "")
	assert.Equal(t, http.StatusNotFound, code)

	code, b = s.do(t, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `jail_pool_claims_total{pool="one",result="miss"} 1`)
	assert.Contains(t, string(b), `jail_pool_ready{pool="warm"}`)

	// The server's end discards the ready members: nothing is left.
	s.stop(t)
	require.Eventually(t, func() bool { return noCgroupsBut(before) }, 10*time.Second, 50*time.Millisecond,
		"the pools' cgroups are removed: %v", allJailCgroups())
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == "jail:init" {
			status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
			assert.NotContains(t, string(status), fmt.Sprintf("PPid:\t%d\n", s.cmd.Process.Pid), "a member outlived the server")
		}
	}
}

// TestServePoolLoad: 1,000 runs in a pool, 16 at a time (200 under
// -race), all succeed, hits or cold starts; nothing is left after.
func TestServePoolLoad(t *testing.T) {
	requireRoot(t)
	before := allJailCgroups()
	dir := openDir(t)
	file := filepath.Join(dir, "pools.yaml")
	require.NoError(t, os.WriteFile(file, []byte("pools:\n- {name: load, profile: strict, min_ready: 16, max: 48}\n"), 0o644))
	s := serve(t, openDir(t), "--pools", file, "--max-runs", "16")
	require.Eventually(t, func() bool { return s.pools(t)["load"].Ready == 16 }, 60*time.Second, 50*time.Millisecond)
	n := 1000
	if raceEnabled {
		n = 200
	}
	var (
		mu     sync.Mutex
		lat    []float64
		hits   int
		failed []string
		next   = make(chan int, n)
		wg     sync.WaitGroup
	)
	for i := range n {
		next <- i
	}
	close(next)
	t0 := time.Now()
	for range 16 {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				code, b := s.do(t, "POST", "/v1/run", fmt.Sprintf(`{"pool": "load", "shell": "echo %d"}`, i))
				d := time.Since(start)
				var res jail.Result
				err := json.Unmarshal(b, &res)
				mu.Lock()
				switch {
				case code != http.StatusOK || err != nil || res.Stdout != fmt.Sprintf("%d\n", i):
					failed = append(failed, fmt.Sprintf("%d: %d %s", i, code, b))
				default:
					lat = append(lat, float64(d.Microseconds())/1000)
					if res.Pool == jail.PoolHit {
						hits++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	require.Empty(t, failed)
	sort.Float64s(lat)
	t.Logf("%d pool runs at 16 in flight in %v (%.0f runs/s): %d hits, %d misses; latency p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), hits, n-hits, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	assert.Positive(t, hits)
	s.stop(t)
	require.Eventually(t, func() bool { return noCgroupsBut(before) }, 10*time.Second, 50*time.Millisecond,
		"nothing is left: %v", allJailCgroups())
}

// stop sends the server SIGTERM and waits for it to exit; one that does
// not within 30 s is made to print its goroutines (SIGQUIT) and fails t.
func (s *served) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s", s.log)
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		t.Fatalf("jail serve did not stop within 30 s of SIGTERM:\n%s", s.log)
	}
}

// TestServeSessionPools: a session create that names a pool of sessions
// takes a member built ahead (hit), moved to the tenant with the request's
// id, labels and deadlines (counted from now: the member's own TTL no
// longer holds); with none ready it is made cold (miss); members are never
// shared; run and session pools are not mixed up; the server's end removes
// the ready members, and a server killed outright leaves them to the next
// one, which removes them.
func TestServeSessionPools(t *testing.T) {
	requireRoot(t)
	before := allJailCgroups()
	file := writePools(t, `
pools:
  - {name: sess, kind: session, profile: strict, min_ready: 2}
  - {name: solo, kind: session, profile: strict, min_ready: 1, max: 1, replenish_delay: 1h, workspace: {type: none}}
  - {name: runs, profile: strict, min_ready: 1}
`)
	state := openDir(t)
	s := serve(t, state, "--pools", file)
	require.Eventually(t, func() bool {
		p := s.pools(t)
		return p["sess"].Ready == 2 && p["solo"].Ready == 1 && p["runs"].Ready == 1
	}, 30*time.Second, 20*time.Millisecond, "the pools fill")
	assert.Equal(t, server.PoolSession, s.pools(t)["sess"].Kind)
	members := func(pool string) []string {
		list, err := (&jail.Sessions{Dir: filepath.Join(state, "pools", pool, "sessions")}).List(nil)
		require.NoError(t, err)
		var ids []string
		for _, sess := range list {
			ids = append(ids, sess.ID())
		}
		return ids
	}
	ready := members("sess")
	require.Len(t, ready, 2)

	created := func(code int, b []byte) jail.SessionInfo {
		t.Helper()
		require.Equal(t, http.StatusCreated, code, "%s", b)
		var info jail.SessionInfo
		require.NoError(t, json.Unmarshal(b, &info))
		return info
	}
	t0 := time.Now()
	info := created(s.do(t, "POST", "/v1/sessions", `{"pool": "sess", "id": "a", "labels": {"k": "v"}, "ttl": "3s", "idle_timeout": "1h"}`))
	assert.Equal(t, jail.PoolHit, info.Pool)
	assert.Equal(t, "a", info.ID)
	assert.Equal(t, map[string]string{"k": "v"}, info.Labels)
	assert.Equal(t, int64(3000), info.TTLMS)
	assert.WithinDuration(t, time.Now(), info.CreatedAt, 5*time.Second, "created when claimed")
	assert.NotContains(t, members("sess"), "a")
	code, b := s.do(t, "POST", "/v1/sessions/a/exec", `{"shell": "pwd; echo x > f; cat f"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": "/workspace\nx\n"`)
	code, b = s.do(t, "GET", "/v1/sessions?label=k=v", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"id": "a"`)

	// Another member is another jail: none of a's files.
	info = created(s.do(t, "POST", "/v1/sessions", `{"pool": "sess", "id": "b"}`))
	assert.Equal(t, jail.PoolHit, info.Pool)
	code, b = s.do(t, "POST", "/v1/sessions/b/exec", `{"shell": "ls -A"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	assert.Contains(t, string(b), `"stdout": ""`)
	// An id in use is refused; the pool refills.
	code, b = s.do(t, "POST", "/v1/sessions", `{"pool": "sess", "id": "b"}`)
	assert.Equal(t, http.StatusConflict, code, "%s", b)
	require.Eventually(t, func() bool { return s.pools(t)["sess"].Ready == 2 }, 30*time.Second, 20*time.Millisecond)

	// With none ready: made cold, with the pool's spec and workspace.
	info = created(s.do(t, "POST", "/v1/sessions", `{"pool": "solo"}`))
	assert.Equal(t, jail.PoolHit, info.Pool)
	assert.Nil(t, info.Workspace)
	info = created(s.do(t, "POST", "/v1/sessions", `{"pool": "solo", "id": "cold"}`))
	assert.Equal(t, jail.PoolMiss, info.Pool)
	assert.Nil(t, info.Workspace)
	p := s.pools(t)["solo"]
	assert.Equal(t, int64(1), p.Hits)
	assert.Equal(t, int64(1), p.Misses)

	// A tenant may take one from a profile's pool; it is the tenant's.
	code, b = s.asUser(t, "POST", "/v1/sessions", `{"pool": "sess", "id": "mine"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	assert.Contains(t, string(b), `"pool": "hit"`)
	code, _ = s.do(t, "GET", "/v1/sessions/mine", "")
	assert.Equal(t, http.StatusNotFound, code, "another tenant's")
	code, b = s.asUser(t, "POST", "/v1/sessions/mine/exec", `{"argv": ["id", "-u"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)

	// Kinds, and what a pooled create may not say.
	for _, c := range []struct{ path, body, field string }{
		{"/v1/run", `{"pool": "sess", "argv": ["true"]}`, "pool"},
		{"/v1/sessions", `{"pool": "runs"}`, "pool"},
		{"/v1/sessions", `{"pool": "sess", "profile": "strict"}`, "pool"},
		{"/v1/sessions", `{"pool": "sess", "workspace": {"type": "none"}}`, "workspace"},
		{"/v1/sessions", `{"pool": "sess", "ttl": "-1s"}`, "ttl"},
	} {
		code, b := s.do(t, "POST", c.path, c.body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", c.body, b)
		assert.Equal(t, c.field, apiError(t, b).Field, "%s", c.body)
	}
	code, b = s.do(t, "PUT", "/v1/pools/bad", `{"kind": "run", "profile": "strict", "min_ready": 1, "workspace": {"type": "tmpfs"}}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)

	// The request's TTL, from the claim, ends a (the member's was 11 min).
	require.Eventually(t, func() bool {
		code, b := s.do(t, "GET", "/v1/sessions/a", "")
		return code == http.StatusNotFound || strings.Contains(string(b), `"state": "exited"`)
	}, 10*time.Second, 50*time.Millisecond, "its TTL ends it")
	assert.GreaterOrEqual(t, time.Since(t0), 3*time.Second, "not before its TTL")

	// A server killed outright leaves its ready members; the next one of
	// the state directory removes them and makes its own.
	left := members("sess")
	require.NotEmpty(t, left)
	require.NoError(t, s.cmd.Process.Kill())
	_ = s.cmd.Wait()
	s = serve(t, state, "--pools", file)
	require.Eventually(t, func() bool { return s.pools(t)["sess"].Ready == 2 }, 30*time.Second, 20*time.Millisecond)
	for _, id := range members("sess") {
		assert.NotContains(t, left, id, "a member of the killed server")
	}

	// The server's end removes the ready members; the tenants' sessions
	// stay, theirs to remove.
	for _, id := range []string{"b", "cold"} {
		code, b = s.do(t, "DELETE", "/v1/sessions/"+id, "")
		require.Equal(t, http.StatusOK, code, "%s", b)
	}
	list, err := (&jail.Sessions{Dir: filepath.Join(state, "tenants", "0", "sessions")}).List(nil)
	require.NoError(t, err)
	require.Len(t, list, 1, "the session from solo's first claim")
	_, err = list[0].Remove()
	require.NoError(t, err)
	code, b = s.asUser(t, "DELETE", "/v1/sessions/mine", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	s.stop(t)
	assert.Empty(t, members("sess"))
	assert.Empty(t, members("solo"))
	require.Eventually(t, func() bool { return noCgroupsBut(before) }, 10*time.Second, 50*time.Millisecond,
		"nothing left: %v", allJailCgroups())
}
