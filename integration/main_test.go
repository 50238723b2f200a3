// Package integration runs the real jail binary and looks at what the
// kernel shows, from inside the jail and from the host. The tests need root
// (or, in the unprivileged re-run, a user that may create user namespaces);
// TestMain builds cmd/jail and a static probe program once.
package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	for _, e := range newTempEntries(tmpBefore) {
		fmt.Printf("integration: left behind in %s: %s\n", os.TempDir(), e)
		code = 1
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

// runChecked runs the tests and fails them if they left anything on the
// host.
func runChecked(m *testing.M) int {
	before := hostState()
	code := m.Run()
	stopDocker() // before the host is checked: its processes and cgroups go with it
	stopKube()
	if left := hostState().changedSince(before); len(left) > 0 { // said even when tests failed: a leak may be why
		fmt.Printf("integration: the host changed during the tests:\n  %s\n", strings.Join(left, "\n  "))
		return 1
	}
	return code
}

// hostSnapshot is what a jail must never leave behind on the host, nor
// take away: mounts in the host's mount namespace, jail processes and
// cgroups. Not counted: /run/netns and the namespaces bound below it,
// which the network tests' `ip netns add` makes (the directory's own
// mount stays for good, as iproute2 leaves it, once per boot).
type hostSnapshot struct {
	mounts  map[string]int // "root on mount point type source" → how many
	procs   []string       // ourInits
	cgroups []string       // jailCgroups
}

func hostState() hostSnapshot {
	s := hostSnapshot{mounts: map[string]int{}, procs: ourInits(), cgroups: jailCgroups()}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+3 || f[4] == "/run/netns" || strings.HasPrefix(f[4], "/run/netns/") {
			continue
		}
		s.mounts[f[3]+" on "+f[4]+" "+f[sep+1]+" "+f[sep+2]]++
	}
	return s
}

// changedSince lists what s has of jail processes, cgroups and mounts that
// before had not, and the mounts before had that s has not. A process or
// group that was there first is not the work of what ran in between:
// another package's tests run jails in parallel, and one of theirs may be
// gone by the second look.
func (s hostSnapshot) changedSince(before hostSnapshot) []string {
	var changed []string
	for m, n := range s.mounts {
		if n > before.mounts[m] {
			changed = append(changed, "mounted: "+m)
		}
	}
	for m, n := range before.mounts {
		if n > s.mounts[m] {
			changed = append(changed, "unmounted: "+m)
		}
	}
	for _, p := range s.procs {
		if !slices.Contains(before.procs, p) {
			changed = append(changed, "jail process:"+describeProcs([]string{p}))
		}
	}
	for _, g := range s.cgroups {
		if !slices.Contains(before.cgroups, g) {
			changed = append(changed, "cgroup: "+g)
		}
	}
	slices.Sort(changed)
	return changed
}

// jailCgroups lists the per-run cgroups ("jail-<owner pid>-...") below
// this process's own cgroup in every hierarchy, where jail creates them,
// that this suite's jail binary owns or left behind: those of a live
// process that is not our jail (the cgroup package's tests, running in
// parallel) are not ours to count.
//
// A session's group outlives its creator, never the suite; but other
// packages' tests make sessions in parallel too. Ours are those one of
// the suite's session PID 1s runs in, and those left empty that a state
// directory of the suite's names (ourStateDirHash). A group being made or
// removed is empty for a moment, so empty ones are looked at again half a
// second later and kept only if still there and still empty. (A group
// left when its state directory is gone too is for .ci/run's last check,
// which counts every package's.)
func jailCgroups() []string {
	ours, empty := jailCgroupsOnce()
	if len(empty) == 0 {
		return ours
	}
	time.Sleep(500 * time.Millisecond)
	ours, again := jailCgroupsOnce()
	return slices.DeleteFunc(ours, func(d string) bool { return slices.Contains(again, d) && !slices.Contains(empty, d) })
}

// jailCgroupsOnce is one look of jailCgroups, which also returns the
// session groups it counted because no process runs in them.
func jailCgroupsOnce() (ours, empty []string) {
	for _, d := range allJailCgroups() {
		if strings.HasPrefix(filepath.Base(d), "jail-session-") {
			switch sessionGroupOwner(d) {
			case "ours":
				ours = append(ours, d)
			case "empty":
				ours = append(ours, d)
				empty = append(empty, d)
			}
			continue
		}
		owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "jail-"), "-")
		if _, err := strconv.Atoi(owner); err != nil {
			continue // not a run's group (jail-<owner pid>-...): the cgroup package's tests name theirs jail-test-*
		}
		exe, err := os.Readlink("/proc/" + owner + "/exe")
		if err == nil && exe != jailBin && owner != strconv.Itoa(os.Getpid()) {
			continue
		}
		ours = append(ours, d)
	}
	return ours, empty
}

// sessionGroupOwner tells whose session group d is: "ours" when the PID 1
// of one of this suite's sessions runs in it, "empty" when nothing runs,
// else "theirs".
func sessionGroupOwner(d string) string {
	// jail-session-EUID-HASH-ID
	f := strings.SplitN(filepath.Base(d), "-", 5)
	if len(f) != 5 || unprivileged && f[2] != strconv.Itoa(os.Geteuid()) {
		return "theirs" // the unprivileged re-run's are its user's alone
	}
	pids := groupProcs(d)
	if len(pids) == 0 {
		if ourStateDirHash(f[3]) {
			return "empty" // or removed meanwhile: the second look drops it
		}
		return "theirs"
	}
	socks := unixSocketPaths()
	for _, p := range pids {
		if ourSessionInit(p, socks) {
			return "ours"
		}
	}
	return "theirs"
}

// stateDirHashes are the hashes, as a session's group name has its state
// directory's (jail's sessionCgroupName), of the suite's session
// directories: each test's as it is made (sessionDir) and, for those jail
// serve makes, the ones found below a test's directory when it is
// removed, or now below binDir and the jail-it-* temp directories.
var stateDirHashes sync.Map

// rememberStateDir records d as a session directory of the suite's.
func rememberStateDir(d string) {
	if abs, err := filepath.Abs(d); err == nil {
		sum := sha256.Sum256([]byte(abs))
		stateDirHashes.Store(hex.EncodeToString(sum[:4]), true)
	}
}

// rememberStateDirs records the session directories ("sessions") below
// root, to a depth of six: jail serve's tenants/*/sessions and
// pools/*/sessions among them.
func rememberStateDirs(root string) {
	root, err := filepath.Abs(root)
	if err != nil {
		return
	}
	depth := strings.Count(root, "/")
	_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		switch {
		case err != nil || !e.IsDir():
			return nil
		case e.Name() == "sessions":
			rememberStateDir(p)
			return filepath.SkipDir
		case strings.Count(p, "/")-depth >= 6:
			return filepath.SkipDir
		}
		return nil
	})
}

// ourStateDirHash tells whether h is the hash of a session directory of
// the suite's: one remembered, or one now below binDir (the tests' host
// directories, the unprivileged re-run's temp directory) or a jail-it-*
// temp directory.
func ourStateDirHash(h string) bool {
	if _, ok := stateDirHashes.Load(h); ok {
		return true
	}
	roots, _ := filepath.Glob(filepath.Join(os.TempDir(), "jail-it-*"))
	for _, root := range append(roots, binDir) {
		rememberStateDirs(root)
	}
	_, ok := stateDirHashes.Load(h)
	return ok
}

// ourSessionInit tells whether pid is the PID 1 of a session of this
// suite's (sessionInit).
func ourSessionInit(pid string, socks map[string]string) bool {
	_, ours := sessionInit(pid, socks)
	return ours
}

// sessionInit tells whether pid is a session's PID 1, one that holds its
// control socket (ctl.sock), and whether that session is this suite's:
// its state directory is below binDir or a jail-it-* temp directory.
// Every jail's PID 1 looks alike otherwise: all run the same embedded
// stage, from a memfd, with no environment, the host's init its parent.
func sessionInit(pid string, socks map[string]string) (session, ours bool) {
	fds, _ := os.ReadDir("/proc/" + pid + "/fd")
	for _, fd := range fds {
		l, _ := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		ino, ok := strings.CutPrefix(l, "socket:[")
		if !ok {
			continue
		}
		path := socks[strings.TrimSuffix(ino, "]")]
		if filepath.Base(path) != "ctl.sock" {
			continue
		}
		if strings.HasPrefix(path, binDir+"/") || strings.HasPrefix(path, filepath.Join(os.TempDir(), "jail-it-")) {
			return true, true
		}
		session = true
	}
	return session, false
}

// unixSocketPaths maps the inodes of this network namespace's bound unix
// sockets to their paths: a session's control socket is made by its
// creator, on the host.
func unixSocketPaths() map[string]string {
	b, _ := os.ReadFile("/proc/self/net/unix")
	paths := map[string]string{}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path
		if f := strings.Fields(l); len(f) >= 8 {
			paths[f[6]] = strings.Join(f[7:], " ")
		}
	}
	return paths
}

// groupProcs lists the processes in the group d and its children (a
// session's PID 1 runs in d/init, its commands in groups of their own).
func groupProcs(d string) []string {
	var pids []string
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Name() == "cgroup.procs" {
			b, _ := os.ReadFile(p)
			pids = append(pids, strings.Fields(string(b))...)
		}
		return nil
	})
	return pids
}

// runGroups lists the per-run groups of the jail process pid.
func runGroups(pid int) []string {
	var found []string
	for _, d := range allJailCgroups() {
		if strings.HasPrefix(filepath.Base(d), fmt.Sprintf("jail-%d-", pid)) {
			found = append(found, d)
		}
	}
	return found
}

// noCgroupsBut reports whether every jail cgroup there is now was there
// before: other packages' tests make and remove theirs meanwhile, so one
// of before's may be gone.
func noCgroupsBut(before []string) bool {
	for _, g := range allJailCgroups() {
		if !slices.Contains(before, g) {
			return false
		}
	}
	return true
}

func allJailCgroups() []string {
	var found []string
	for _, d := range procfs.OwnCgroupDirs() {
		m, _ := filepath.Glob(filepath.Join(d, "jail-*"))
		found = append(found, m...)
	}
	return found
}

// ourInits returns the pids of the jail:init processes of this suite
// (other packages' tests run their own jails in parallel): a run's, whose
// ancestors include this process or a process of the suite's jail binary,
// a session's (sessionInit), and a run's whose jail is gone (its parent
// the host's init): a leak whoever made it, looked at again half a second
// later, as another package's may be one for a moment while it is killed.
// The unprivileged re-run counts only its own user's: it cannot read the
// descriptors of root's sessions to tell them from orphans, and root's
// jails are the root run's to judge.
func ourInits() []string {
	pids, orphans := ourInitsOnce()
	if len(orphans) == 0 {
		return pids
	}
	time.Sleep(500 * time.Millisecond)
	pids, again := ourInitsOnce()
	return slices.DeleteFunc(pids, func(p string) bool { return slices.Contains(again, p) && !slices.Contains(orphans, p) })
}

// ourInitsOnce is one look of ourInits, which also returns the orphans it
// counted.
func ourInitsOnce() (pids, orphans []string) {
	socks := unixSocketPaths()
	me := strconv.Itoa(os.Getuid())
	for _, p := range processesMatching("jail:init") {
		if cmd, _ := os.ReadFile("/proc/" + p + "/cmdline"); !bytes.HasPrefix(cmd, []byte("jail:init\x00")) {
			continue // another process naming it
		}
		if unprivileged && ownerOf(p) != me {
			continue
		}
		switch session, ours := sessionInit(p, socks); {
		case ours:
			pids = append(pids, p)
		case session: // another's session: its PID 1 outlives its creator
		case ourDescendant(p):
			pids = append(pids, p)
		case parentOf(p) == "1":
			pids = append(pids, p)
			orphans = append(orphans, p)
		}
	}
	return pids, orphans
}

// describeProcs says who each of pids is, for a leak's message: its
// owner, parent, command line and the session socket it holds if any.
func describeProcs(pids []string) string {
	socks := unixSocketPaths()
	var b strings.Builder
	for _, p := range pids {
		cmd, _ := os.ReadFile("/proc/" + p + "/cmdline")
		fmt.Fprintf(&b, "\n  pid %s uid %s ppid %s %q", p, ownerOf(p), parentOf(p), strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " "))
		fds, err := os.ReadDir("/proc/" + p + "/fd")
		if err != nil {
			fmt.Fprintf(&b, " (fds: %v)", err)
		}
		for _, fd := range fds {
			l, _ := os.Readlink("/proc/" + p + "/fd/" + fd.Name())
			if ino, ok := strings.CutPrefix(l, "socket:["); ok && socks[strings.TrimSuffix(ino, "]")] != "" {
				fmt.Fprintf(&b, " socket %s", socks[strings.TrimSuffix(ino, "]")])
			}
		}
	}
	return b.String()
}

// ownerOf is the real uid of pid.
func ownerOf(pid string) string {
	st, _ := os.ReadFile("/proc/" + pid + "/status")
	_, after, _ := strings.Cut(string(st), "\nUid:\t")
	uid, _, _ := strings.Cut(after, "\t")
	return uid
}

func parentOf(pid string) string {
	st, _ := os.ReadFile("/proc/" + pid + "/status")
	_, after, _ := strings.Cut(string(st), "\nPPid:\t")
	ppid, _, _ := strings.Cut(after, "\n")
	return ppid
}

// ourDescendant tells whether pid descends from this process or from a
// process of the suite's jail binary.
func ourDescendant(pid string) bool {
	me := strconv.Itoa(os.Getpid())
	for range 64 {
		ppid := parentOf(pid)
		if ppid == me {
			return true
		}
		if ppid == "" || ppid == "0" || ppid == "1" {
			return false
		}
		if exe, _ := os.Readlink("/proc/" + ppid + "/exe"); exe == jailBin {
			return true
		}
		pid = ppid
	}
	return false
}

// newTempEntries lists what the temp directory holds, named as jail and
// this suite name theirs (jail-*), that it did not before, but for what
// goes within two seconds (another package's test at work). Other
// processes' files are not this suite's to judge.
func newTempEntries(before map[string]bool) []string {
	var left []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for e := range tempEntries() {
			if before[e] || e == binDir || !strings.HasPrefix(filepath.Base(e), "jail") {
				continue
			}
			left = append(left, e)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
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
	t.Cleanup(func() {
		rememberStateDirs(d) // for the end's leak check: a group left is still ours
		os.RemoveAll(d)
	})
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
