package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/bench/internal/stats"
)

// poolRefill is the pause, not timed, between pairs of the pool's
// benchmark: the pool's fillers replace the member used, as they would
// between requests that arrive slower than the pool refills.
const poolRefill = 10 * time.Millisecond

// BenchmarkServeVsFloor measures, as a client on jail serve's unix socket
// sees it, POST /v1/run of a strict /bin/true from a warm pool ("pool") and
// without one ("cold"), each alternating with the floor; and through the
// Go API in this process, the release of a prepared strict jail
// ("prepared", jail.Cmd.Prepare outside the timing). The targets:
// pool ≤ 0.5x the floor, prepared ≤ 0.3x, cold no slower than `jail run`.
// "pool" reports only hits (the count of misses too); a miss is a cold
// start.
func BenchmarkServeVsFloor(b *testing.B) {
	requireRoot(b)
	fl := newFloor(b)
	dir := b.TempDir()
	pools := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(pools, []byte("pools:\n- {name: bench, profile: strict, min_ready: 4, max: 8}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	var log bytes.Buffer
	srv := exec.Command(jailBinary(b), "serve", "--listen", "unix:"+sock, "--state-dir", filepath.Join(dir, "state"), "--pools", pools)
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(body string) (string, error) {
		resp, err := client.Post("http://jail/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		var res jail.Result
		if err := json.Unmarshal(raw, &res); err != nil || resp.StatusCode != http.StatusOK || res.ExitCode != 0 {
			return "", fmt.Errorf("POST /v1/run: %d %s", resp.StatusCode, raw)
		}
		return res.Pool, nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://jail/v1/pools")
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(raw, []byte(`"ready": 4`)) {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the pool did not fill: %v\n%s", err, log.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}

	b.Run("pool", func(b *testing.B) {
		var hitMS, floorMS []float64
		misses := 0
		for i := 0; b.Loop(); i++ {
			// The floor first: the claim starts a refill, which would
			// share the CPUs with a floor run after it.
			time.Sleep(poolRefill)
			t1 := time.Now()
			if err := fl.run(); err != nil {
				b.Fatal(err)
			}
			f := float64(time.Since(t1)) / 1e6
			t0 := time.Now()
			got, err := post(`{"pool": "bench", "argv": ["/bin/true"]}`)
			d := float64(time.Since(t0)) / 1e6
			if err != nil {
				b.Fatal(err)
			}
			if got != jail.PoolHit {
				misses++
				continue
			}
			hitMS, floorMS = append(hitMS, d), append(floorMS, f)
		}
		if len(hitMS) == 0 {
			b.Fatal("no hit")
		}
		b.ReportMetric(stats.Quantile(hitMS, 0.5), "pool-median-ms")
		b.ReportMetric(stats.Quantile(hitMS, 0.99), "pool-p99-ms")
		b.ReportMetric(stats.Quantile(floorMS, 0.5), "floor-median-ms")
		b.ReportMetric(stats.Quantile(stats.Ratios(hitMS, floorMS), 0.5), "ratio")
		b.ReportMetric(float64(misses), "misses")
	})
	b.Run("cold", func(b *testing.B) {
		alternate(b, func() error {
			_, err := post(`{"profile": "strict", "argv": ["/bin/true"]}`)
			return err
		}, fl)
	})
	b.Run("prepared", func(b *testing.B) {
		spec := strictSpec(b)
		var next *jail.Cmd
		prep := func() error {
			next = jail.Command(context.Background(), spec, "/bin/true")
			return next.Prepare()
		}
		alternateWith(b, prep, func() error { return runJail(next) }, fl)
	})
}
