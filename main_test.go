package jail

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when its tests leave descriptors or
// goroutines behind: every Cmd, session and cgroup handle of the API must
// be released by the call that took it (Wait, Create, Remove...).
func TestMain(m *testing.M) {
	// The first os/exec makes the runtime open its poller fds, which stay:
	// count after one.
	_ = exec.Command("/bin/sh", "-c", "true").Run()
	fds, goroutines := countFDs(), runtime.NumGoroutine()
	code := m.Run()
	// Fuzzing keeps its coordinator's pipes and goroutines: nothing to count.
	fuzzing := flag.Lookup("test.fuzz").Value.String() != "" || flag.Lookup("test.fuzzworker").Value.String() == "true"
	if code == 0 && !fuzzing {
		// A session's reaper ends once the kernel has taken its PID 1:
		// give the last ones a moment.
		deadline := time.Now().Add(3 * time.Second)
		for (countFDs() > fds || runtime.NumGoroutine() > goroutines) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if after := countFDs(); after > fds {
			fmt.Fprintf(os.Stderr, "leaked fds: got %d open after the tests, want %d:%s\n", after, fds, openFDs())
			code = 1
		}
		if after := runtime.NumGoroutine(); after > goroutines {
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "leaked goroutines: got %d after the tests, want %d\n%s\n", after, goroutines, buf[:runtime.Stack(buf, true)])
			code = 1
		}
	}
	os.Exit(code)
}

// countFDs counts this process's descriptors but the embedded stage's
// memfd, which nsexec makes once per process and keeps.
func countFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range entries {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); !strings.HasPrefix(target, "/memfd:jail-stage") {
			n++
		}
	}
	return n
}

// openFDs lists this process's descriptors and what they are.
func openFDs() string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out string
	for _, e := range entries {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out += " " + e.Name() + "=" + target
	}
	return out
}
