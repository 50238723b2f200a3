// Package integration runs the real jail binary and looks at what the
// kernel shows, from inside the jail and from the host. The tests need root
// (or, in the unprivileged re-run, a user that may create user namespaces);
// TestMain builds cmd/jail and a static probe program once.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/procfs"
)

// Set by TestMain.
var (
	binDir   string // world-readable directory with jail and probe
	jailBin  string
	probeBin string
	// unprivileged is set in the re-run of this suite as an unprivileged
	// user (see TestUnprivileged).
	unprivileged = os.Getenv("JAIL_IT_UNPRIVILEGED") == "1"
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 && !unprivileged {
		fmt.Println("integration: skipped: these tests run the real jail binary and need root (sudo go test ./integration/)")
		return 0
	}
	if unprivileged {
		binDir = os.Getenv("JAIL_IT_BIN")
		jailBin, probeBin = filepath.Join(binDir, "jail"), filepath.Join(binDir, "probe")
		return m.Run()
	}
	if dir := os.Getenv("JAIL_IT_PREBUILT"); dir != "" {
		// A machine without the go tool or gcc (the cgroup v2 VM of
		// integration/vm) brings jail and probe already built.
		binDir = dir
		jailBin, probeBin = filepath.Join(binDir, "jail"), filepath.Join(binDir, "probe")
		return runChecked(m)
	}
	var err error
	// A directory every user can read and search: the unprivileged re-run,
	// and jails of root (which run as host uid 65534), execute from it.
	if binDir, err = os.MkdirTemp("", "jail-it-"); err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if err := os.Chmod(binDir, 0o755); err != nil {
		fmt.Println(err)
		return 1
	}
	jailBin, probeBin = filepath.Join(binDir, "jail"), filepath.Join(binDir, "probe")
	if err := os.Mkdir(filepath.Join(binDir, "work"), 0o777); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := os.Chmod(filepath.Join(binDir, "work"), 0o1777); err != nil {
		fmt.Println(err)
		return 1
	}
	// The release build (static, musl): what users run is what is tested.
	if out, err := exec.Command("../build.sh", "-o", jailBin).CombinedOutput(); err != nil {
		fmt.Printf("building jail with build.sh (needs musl-tools and gperf): %v\n%s", err, out)
		return 1
	}
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", probeBin, "testdata/probe.c").CombinedOutput(); err != nil {
		fmt.Printf("building probe (needs gcc and the static libc, apt-get install build-essential): %v\n%s", err, out)
		return 1
	}
	// The JSON Schemas, where the unprivileged re-run (which runs in a
	// directory of its own) can read them too.
	if err := os.CopyFS(filepath.Join(binDir, "schema"), os.DirFS("../schema")); err != nil {
		fmt.Println(err)
		return 1
	}
	tmpBefore := tempEntries()
	code := runChecked(m)
	for e := range tempEntries() {
		if !tmpBefore[e] && e != binDir && !strings.HasPrefix(filepath.Base(e), "go-build") { // the go tool's own, e.g. a concurrent build
			fmt.Printf("integration: left behind in %s: %s\n", os.TempDir(), e)
			code = 1
		}
	}
	return code
}

// schemaDir is where the tests find schema/*.schema.json: the copy in
// binDir, which every run of the suite can read, or the source tree's.
func schemaDir() string {
	if d := filepath.Join(binDir, "schema"); dirExists(d) {
		return d
	}
	return "../schema"
}

func dirExists(d string) bool {
	st, err := os.Stat(d)
	return err == nil && st.IsDir()
}

// runChecked runs the tests and fails them if the host changed meanwhile.
func runChecked(m *testing.M) int {
	before := hostState()
	code := m.Run()
	stopDocker() // before the host is checked: its processes and cgroups go with it
	stopKube()
	if after := hostState(); code == 0 && after != before {
		fmt.Printf("integration: the host changed during the tests:\nbefore: %s\nafter:  %s\n", before, after)
		return 1
	}
	return code
}

// hostState summarises what a jail must never leave behind on the host:
// mounts in the host's mount namespace, jail processes and cgroups. Not
// counted: /run/netns and the namespaces bound below it, which the
// network tests' `ip netns add` makes (the directory's own mount stays
// for good, as iproute2 leaves it, once per boot).
func hostState() string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	mounts := 0
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] != "/run/netns" && !strings.HasPrefix(f[4], "/run/netns/") {
			mounts++
		}
	}
	return fmt.Sprintf("mounts=%d jail-processes=%v cgroups=%v", mounts, ourInits(), jailCgroups())
}

// jailCgroups lists the per-run cgroups ("jail-<owner pid>-...") below
// this process's own cgroup in every hierarchy, where jail creates them,
// that this suite's jail binary owns or left behind: those of a live
// process that is not our jail (the cgroup package's tests, running in
// parallel) are not ours to count.
func jailCgroups() []string {
	var ours []string
	for _, d := range allJailCgroups() {
		if strings.HasPrefix(filepath.Base(d), "jail-session-") {
			ours = append(ours, d) // a session's group outlives its creator, never the suite
			continue
		}
		owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "jail-"), "-")
		if _, err := strconv.Atoi(owner); err != nil {
			continue // not a run's group (jail-<owner pid>-...): the cgroup package's tests name theirs jail-test-*
		}
		exe, err := os.Readlink("/proc/" + owner + "/exe")
		if err == nil && exe != jailBin {
			continue
		}
		ours = append(ours, d)
	}
	return ours
}

func allJailCgroups() []string {
	var found []string
	for _, d := range procfs.OwnCgroupDirs() {
		m, _ := filepath.Glob(filepath.Join(d, "jail-*"))
		found = append(found, m...)
	}
	return found
}

// ourInits returns the pids of jail:init processes of this suite's jail
// binary (other packages' tests run their own jails in parallel).
func ourInits() []string {
	var pids []string
	for _, p := range processesMatching("jail:init") {
		if exe, _ := os.Readlink("/proc/" + p + "/exe"); exe == jailBin {
			pids = append(pids, p)
		}
	}
	return pids
}

// tempEntries lists the temp directory, for files a run leaves behind.
func tempEntries() map[string]bool {
	entries, _ := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	set := map[string]bool{}
	for _, e := range entries {
		set[e] = true
	}
	return set
}

// processesMatching returns the pids of host processes whose command line
// contains s.
func processesMatching(s string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), s) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

// requireGone waits up to 3 s for every host process matching s to end.
func requireGone(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		pids := processesMatching(s)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes matching %q still alive on the host: %v", s, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// result is one finished `jail` process.
type result struct {
	stdout, stderr string
	code           int
	pid            int // jail's
}

// jailCmd returns the command `jail args...` with stdin from /dev/null.
func jailCmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, jailBin, args...)
	c.Env = []string{"PATH=/usr/bin:/bin", "JAIL_IT_HOST_SECRET=do-not-leak"}
	return c
}

// runJail runs `jail args...` and returns what it printed and its exit code.
func runJail(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return runJailCmd(t, jailCmd(ctx, args...))
}

// runJailCmd runs c, a jailCmd, and returns what it printed and its exit
// code.
func runJailCmd(t *testing.T, c *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("jail %v: %v", c.Args[1:], err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: c.ProcessState.ExitCode(), pid: c.Process.Pid}
}

// runOK runs jail and requires exit 0.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	r := runJail(t, args...)
	require.Equal(t, 0, r.code, "jail %v: stderr: %s", args, r.stderr)
	return r.stdout
}

// runJSON runs `jail run --json args...` and decodes its one document.
func runJSON(t *testing.T, args ...string) (jail.Result, result) {
	t.Helper()
	r := runJail(t, append([]string{"run", "--json"}, args...)...)
	var res jail.Result
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&res), "stdout: %q stderr: %s", r.stdout, r.stderr)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "exactly one JSON document on stdout")
	require.Equal(t, jail.Schema, res.Schema)
	require.Equal(t, r.code, res.ExitCode, "exit code and report agree")
	return res, r
}

// hostDir returns a temp directory a jail of root (host uid 65534) and the
// unprivileged user can use.
func hostDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(filepath.Join(binDir, "work"), "dir-") // t.TempDir's parent is 0700
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o777))
	return d
}

// jailUID is the host uid the jail's ids map to in this run.
func jailHostUID() int {
	if unprivileged {
		return os.Geteuid()
	}
	return jail.DefaultHostUID
}

func requireRoot(t *testing.T) {
	t.Helper()
	if unprivileged {
		t.Skip("root only: checks the id mapping and options of a root caller")
	}
}
