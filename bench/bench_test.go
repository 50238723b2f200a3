// Package bench measures jail's start-up cost. These are benchmarks only:
// nothing here passes or fails on a timing. bench/run.sh is the fuller
// measurement (interleaved rounds, a bubblewrap peer, PSS); see README.md.
//
// Run them as root, since the jail maps a host uid:
//
//	sudo env PATH="$PATH" go test -run '^$' -bench . -benchtime 200x ./bench/
//
// JAIL_BIN names a jail binary to measure; without it the benchmarks build
// cmd/jail once, statically as released.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/profiles"
)

var (
	buildOnce sync.Once
	builtDir  string // removed by TestMain
	jailPath  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// jailBinary returns $JAIL_BIN, or builds cmd/jail the way it is released
// (static, cgo for the nsexec stage) on first use. Building lazily keeps a
// plain `go test ./...` from compiling anything.
func jailBinary(b *testing.B) string {
	b.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("JAIL_BIN"); p != "" {
			jailPath, buildErr = filepath.Abs(p)
			return
		}
		builtDir, buildErr = os.MkdirTemp("", "jail-bench-")
		if buildErr != nil {
			return
		}
		jailPath = filepath.Join(builtDir, "jail")
		cmd := exec.Command("go", "build", "-tags", "osusergo,netgo",
			"-ldflags", "-linkmode external -extldflags -static", "-o", jailPath, "./cmd/jail")
		cmd.Dir = ".." // the module root; go test runs in the package directory
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/jail: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return jailPath
}

func requireRoot(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("skipped: needs root (the jail maps a host uid); run: sudo env PATH=\"$PATH\" go test -bench . ./bench/")
	}
}

// benchCommand runs argv b.N times and reports the mean wall time per run
// in ms/op; a run that exits non-zero fails the benchmark with its output.
func benchCommand(b *testing.B, argv ...string) {
	b.Helper()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		b.Skipf("skipped: %v", err)
	}
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		cmd := exec.Command(path, argv[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("%q: %v\n%s", argv, err, out.Bytes())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// BenchmarkStrictTrue is the project's headline figure: a strict jail
// around /bin/true, from exec of jail to its exit.
func BenchmarkStrictTrue(b *testing.B) {
	requireRoot(b)
	benchCommand(b, jailBinary(b), "run", "--profile", "strict", "--", "/bin/true")
}

// BenchmarkFloor is what the same namespaces cost without jail: util-linux
// unshare with a fresh /proc. Targets are stated relative to it.
func BenchmarkFloor(b *testing.B) {
	requireRoot(b)
	benchCommand(b, "unshare", "-Urpf", "--mount-proc", "-n", "-i", "-u", "/bin/true")
}

// BenchmarkSessionExec is a command joining a strict session through the
// CLI: a Go runtime start, the join, a fork and an exec; no namespace is
// made.
func BenchmarkSessionExec(b *testing.B) {
	requireRoot(b)
	bin := jailBinary(b)
	dir := b.TempDir()
	out, err := exec.Command(bin, "session", "create", "--state-dir", dir, "--profile", "strict").Output()
	if err != nil {
		b.Fatalf("session create: %v", err)
	}
	id := string(bytes.TrimSpace(out))
	defer exec.Command(bin, "session", "rm", "--state-dir", dir, id).Run()
	benchCommand(b, bin, "session", "exec", "--state-dir", dir, id, "--", "/bin/true")
}

// strictSpec is the strict profile's Spec.
func strictSpec(b *testing.B) jail.Spec {
	p, err := profiles.Load("strict")
	if err != nil {
		b.Fatal(err)
	}
	return p.Spec
}

// BenchmarkAPIRun is `jail run --profile strict -- /bin/true` through the
// Go API in a long-lived process (this test binary is the helper).
func BenchmarkAPIRun(b *testing.B) {
	requireRoot(b)
	spec := strictSpec(b)
	for b.Loop() {
		c := jail.Command(context.Background(), spec, "/bin/true")
		if err := c.Run(); err != nil || c.Result.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, c.Result.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// BenchmarkAPISessionCommand is a command joining a strict session through
// the Go API in a long-lived process: the join, the fork, the exec.
func BenchmarkAPISessionCommand(b *testing.B) {
	requireRoot(b)
	m := &jail.Sessions{Dir: b.TempDir()}
	s, err := m.Create(context.Background(), jail.SessionSpec{Spec: strictSpec(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Remove()
	for b.Loop() {
		c := s.Command(context.Background(), "/bin/true")
		if err := c.Run(); err != nil || c.Result.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, c.Result.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}
