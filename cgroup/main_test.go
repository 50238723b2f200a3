package cgroup

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the processes the privileged tests put in
// groups: TestMain takes the role named in $CGROUP_TEST_ROLE.
const roleEnv = "CGROUP_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
	case "hog":
		roleHog()
		return
	case "spin":
		roleSpin()
		return
	case "new":
		roleNew()
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, os.Getenv(roleEnv))
		os.Exit(2)
	}
	// The first os/exec makes the runtime open its poller fds, which stay:
	// count fds after one.
	_ = exec.Command("/bin/sh", "-c", "true").Run()
	before := countFDs()
	code := m.Run()
	if after := countFDs(); code == 0 && after > before {
		fmt.Fprintf(os.Stderr, "leaked fds: got %d open after the tests, want %d\n", after, before)
		code = 1
	}
	os.Exit(code)
}

func countFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	return len(entries)
}

// waitForGo blocks until a line arrives on stdin: the parent sends it once
// the process is in its group.
func waitForGo() {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// roleHog waits for the go-ahead, maps $CGROUP_TEST_BYTES of anonymous
// memory and writes to every page of it, prints "touched", and exits.
func roleHog() {
	n, err := strconv.Atoi(os.Getenv("CGROUP_TEST_BYTES"))
	if err != nil {
		os.Exit(2)
	}
	waitForGo()
	mem, err := mmapAnon(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		os.Exit(3)
	}
	for i := 0; i < len(mem); i += os.Getpagesize() {
		mem[i] = 1
	}
	fmt.Println("touched")
	os.Exit(0)
}

// roleSpin waits for the go-ahead and keeps $CGROUP_TEST_THREADS threads
// busy for $CGROUP_TEST_WALL of wall time.
func roleSpin() {
	wall, err := time.ParseDuration(os.Getenv("CGROUP_TEST_WALL"))
	if err != nil {
		os.Exit(2)
	}
	threads, _ := strconv.Atoi(os.Getenv("CGROUP_TEST_THREADS"))
	waitForGo()
	deadline := time.Now().Add(wall)
	var wg sync.WaitGroup
	for range max(threads, 1) {
		wg.Go(func() {
			runtime.LockOSThread()
			x := 0
			for time.Now().Before(deadline) {
				for i := range 10000 {
					x += i
				}
			}
			_ = x
		})
	}
	wg.Wait()
}

// newResult is what roleNew reports.
type newResult struct {
	Err              string       `json:"err"`
	ErrIsUnsupported bool         `json:"err_is_unsupported"`
	Unenforced       []Unenforced `json:"unenforced"`
	Version          int          `json:"version"`
	Paths            []string     `json:"paths"`
	DestroyErr       string       `json:"destroy_err"`
}

// roleNew calls New with the limits in $CGROUP_TEST_LIMITS (JSON) and
// $CGROUP_TEST_ALLOW, destroys the group, and prints a newResult: the
// unprivileged tests run it as another user.
func roleNew() {
	var l Limits
	if err := json.Unmarshal([]byte(os.Getenv("CGROUP_TEST_LIMITS")), &l); err != nil {
		os.Exit(2)
	}
	var r newResult
	g, err := New(l, Options{AllowUnenforced: os.Getenv("CGROUP_TEST_ALLOW") == "1"})
	if err != nil {
		r.Err, r.ErrIsUnsupported = err.Error(), errors.Is(err, errors.ErrUnsupported)
	} else {
		r.Unenforced, r.Version, r.Paths = g.Unenforced(), g.Version(), g.Paths()
		if err := g.Destroy(); err != nil {
			r.DestroyErr = err.Error()
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

// mmapAnon maps n bytes of private anonymous memory.
func mmapAnon(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}
