package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// TestServePools: a run in a warm pool takes a member built ahead (hit)
// with its own argv, stdin and timeout; with none ready it is a cold
// start (miss), never an error; members are never reused, old ones are
// replaced, a tenant may use a pool of a profile it may name and not one
// with a spec of its own; the server's end leaves nothing.
func TestServePools(t *testing.T) {
	requireRoot(t)
	before := allJailCgroups()
	dir := openDir(t)
	file := filepath.Join(dir, "pools.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
pools:
  - {name: warm, profile: strict, min_ready: 2, max: 4}
  - {name: one, profile: strict, min_ready: 1, max: 1, replenish_delay: 1h}
  - {name: young, profile: strict, min_ready: 1, max_age: 200ms}
  - {name: own, spec: {memory_max_bytes: 134217728}, min_ready: 1}
`), 0o644))
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
	require.Eventually(t, func() bool { return slices.Equal(before, allJailCgroups()) }, 10*time.Second, 50*time.Millisecond,
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
	require.Eventually(t, func() bool { return slices.Equal(before, allJailCgroups()) }, 10*time.Second, 50*time.Millisecond,
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
