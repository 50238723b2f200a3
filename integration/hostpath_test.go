package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/procfs"
)

// secretFile is a file only the caller may read, outside anything bound
// into a jail: what an attacker wants jail to read or overwrite for it.
func secretFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir() // 0700, the caller's
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("the caller's secret\n"), 0o600))
	return secret
}

// TestHostPathsRefuseSymlinks is finding 1: one run plants symlinks in the
// job directory it has bound read-write, and the next run's jail — the
// caller, root or not — must not follow them for --report, --stdin or
// --env-file.
func TestHostPathsRefuseSymlinks(t *testing.T) {
	secret := secretFile(t)
	job := hostDir(t)
	// Run 1: the workload plants its traps. The targets are host paths:
	// they only matter to jail itself, on the host.
	plant := `ln -s ` + secret + ` /job/report.json; ln -s ` + secret + ` /job/input.txt; ` +
		`ln -s ` + secret + ` /job/job.env; ln -s / /job/rootdir; ln -s ` + filepath.Dir(secret) + ` /job/outdir; echo planted`
	assert.Equal(t, "planted\n", strict(t, plant, "--bind", job+":/job"))
	// A FIFO too: the strict policy kills mknod and Landlock refuses it
	// under the default one, but a jail with neither, or anything else that
	// writes there, can leave one.
	require.NoError(t, unix.Mkfifo(filepath.Join(job, "wait.env"), 0o666))

	t.Run("report replaces the planted symlink, never writes through it", func(t *testing.T) {
		r := runJail(t, "run", "--profile", "strict", "--report", filepath.Join(job, "report.json"), "--", "true")
		require.Equal(t, 0, r.code, r.stderr)
		b, err := os.ReadFile(secret)
		require.NoError(t, err)
		assert.Equal(t, "the caller's secret\n", string(b), "the secret is untouched")
		fi, err := os.Lstat(filepath.Join(job, "report.json"))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), "the report is a fresh regular file, got %v", fi.Mode())
		var res jail.Result
		b, err = os.ReadFile(filepath.Join(job, "report.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &res))
		assert.Equal(t, jail.StatusExited, res.Status)
	})
	t.Run("report replaces a planted hard link", func(t *testing.T) {
		// protected_hardlinks stops a workload from linking a file it does
		// not own, but an unprivileged caller's jail owns the caller's
		// files: the link stands for that case.
		link := filepath.Join(job, "hard.json")
		require.NoError(t, os.Link(secret, link))
		r := runJail(t, "run", "--profile", "strict", "--report", link, "--", "true")
		require.Equal(t, 0, r.code, r.stderr)
		b, err := os.ReadFile(secret)
		require.NoError(t, err)
		assert.Equal(t, "the caller's secret\n", string(b))
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stdin through a symlink", []string{"--stdin", filepath.Join(job, "input.txt")}, "is a symlink"},
		{"env-file through a symlink", []string{"--env-file", filepath.Join(job, "job.env")}, "is a symlink"},
		{"env-file: a planted FIFO is refused, not waited for", []string{"--env-file", filepath.Join(job, "wait.env")}, "is a FIFO"},
		{"profile: a planted FIFO", []string{"--profile", filepath.Join(job, "wait.env")}, "is a FIFO"},
		{"stdin: a directory", []string{"--stdin", job}, "is a directory"},
		{"stdin: a directory through a symlink", []string{"--stdin", filepath.Join(job, "rootdir")}, "is a symlink"},
		{"stdin: a device", []string{"--stdin", "/dev/zero"}, "is a character device"},
		{"report in a symlinked directory", []string{"--report", filepath.Join(job, "outdir", "report.json")}, "is a symlink"},
		{"report over a directory", []string{"--report", job}, "is a directory"},
		{"profile through a symlink", []string{"--profile", filepath.Join(job, "job.env") + ".yaml"}, "no such file"},
		{"seccomp policy through a symlink", []string{"--seccomp", filepath.Join(job, "input.txt")}, "is a symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hostState()
			r := runJail(t, append(append([]string{"run", "--profile", "strict"}, tc.args...), "--", "cat")...)
			assert.Equal(t, jail.ExitSetupError, r.code, "refused: %s", r.stdout)
			assert.Contains(t, r.stderr, tc.want)
			assert.Len(t, strings.Split(strings.TrimSpace(r.stderr), "\n"), 1, "one line: %q", r.stderr)
			assert.NotContains(t, r.stdout+r.stderr, "the caller's secret")
			assert.Empty(t, hostState().changedSince(before))
		})
	}
	t.Run("a real input file still works, fed through a pipe", func(t *testing.T) {
		in := filepath.Join(job, "real-input.txt")
		require.NoError(t, os.WriteFile(in, []byte("hello\n"), 0o644))
		env := filepath.Join(job, "real.env")
		require.NoError(t, os.WriteFile(env, []byte("# comment\nGREETING=hi\n"), 0o644))
		out := strict(t, `cat; echo $GREETING; stat -L -c %F /proc/self/fd/0`, "--stdin", in, "--env-file", env)
		assert.Equal(t, "hello\nhi\nfifo\n", out, "stdin is a pipe, not the caller's file")
	})
}

// TestStdinRelayNotHeldByStragglers: a file given as --stdin is fed through
// a pipe. A process that keeps that pipe and never reads it (here one that
// left the workload's group, without a PID namespace or cgroup to end it)
// left the relay blocked on the full pipe, and Wait with it, until that
// process ended. Wait now closes the pipe.
func TestStdinRelayNotHeldByStragglers(t *testing.T) {
	in := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(in, make([]byte, 1<<20), 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := jailCmd(ctx, "run", "--no-pidns", "--stdin", in, "--", "sh", "-c", "exec 3<&0; setsid sh -c 'sleep 8; : straggler-8321' <&3 & exit 0")
	start := time.Now()
	require.NoError(t, c.Run(), "jail was killed by the test's deadline")
	assert.Less(t, time.Since(start), 6*time.Second, "Wait waited for the process holding stdin")
	for _, pid := range processesMatching("straggler-8321") { // ours: it has the marker of this test
		if n, err := strconv.Atoi(pid); err == nil {
			_ = unix.Kill(n, unix.SIGKILL)
		}
	}
}

// TestInheritedDescriptorsClosed: a descriptor that jail's caller lets jail
// inherit (no close-on-exec; here a host directory at fd 200, as a careless
// supervisor might) must not stay open in the jail's PID 1 or reach the
// workload: inside the jail it is a way back to the host's tree (runc
// CVE-2024-21626).
func TestInheritedDescriptorsClosed(t *testing.T) {
	dir := filepath.Dir(secretFile(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	c := jailCmd(ctx, "run", "--profile", "strict", "--", "sleep", "30")
	c.ExtraFiles = make([]*os.File, 200-3+1) // nil: closed in jail
	c.ExtraFiles[200-3] = d
	require.NoError(t, c.Start())
	defer func() { c.Process.Kill(); c.Wait() }()

	children := func(pid string) []string { // of every thread: Go forks from any
		n, err := strconv.Atoi(pid)
		if err != nil {
			return nil // not found yet
		}
		var kids []string
		for _, k := range procfs.Children(n) {
			kids = append(kids, strconv.Itoa(k))
		}
		return kids
	}
	cmdline := func(pid string) string {
		b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		return strings.ReplaceAll(string(b), "\x00", " ")
	}
	jailPID := fmt.Sprint(c.Process.Pid)
	var initPID, workload string
	for deadline := time.Now().Add(10 * time.Second); workload == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, p := range children(jailPID) {
			if strings.HasPrefix(cmdline(p), "jail:init") {
				initPID = p
			}
		}
		for _, p := range children(initPID) {
			if strings.HasPrefix(cmdline(p), "sleep 30") {
				workload = p
			}
		}
	}
	require.NotEmpty(t, workload, "the jail's workload did not start")

	link, err := os.Readlink("/proc/" + jailPID + "/fd/200")
	require.NoError(t, err, "jail itself was given fd 200")
	require.Equal(t, dir, link)
	fds := func(pid string) map[string]string {
		entries, err := os.ReadDir("/proc/" + pid + "/fd")
		require.NoError(t, err)
		m := map[string]string{}
		for _, e := range entries {
			m[e.Name()], _ = os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		}
		return m
	}
	w := fds(workload)
	assert.ElementsMatch(t, []string{"0", "1", "2"}, keys(w), "the workload holds only its stdio: %v", w)
	if unprivileged {
		// PID 1 is not dumpable: only root may list its descriptors.
		return
	}
	for fd, target := range fds(initPID) {
		assert.False(t, strings.HasPrefix(target, dir), "PID 1 holds the caller's directory at fd %s", fd)
		// Past stdio, PID 1 holds pipes, sockets, the seccomp listener
		// and a signalfd: no file, and no mount the plan made (a mask's
		// clone of /dev/null left open when its target was missing).
		if fd != "0" && fd != "1" && fd != "2" {
			assert.False(t, strings.HasPrefix(target, "/"), "PID 1 holds a path at fd %s: %s", fd, target)
		}
	}
}

func keys(m map[string]string) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

// TestStdinFileNotReopenedReadWrite is finding 8: a file given as --stdin
// (opened read-only by jail) must not be reachable for writing through
// /proc/self/fd/0. Unprivileged, the jail runs as the caller, who owns the
// file, so only the descriptor's nature can stop it.
func TestStdinFileNotReopenedReadWrite(t *testing.T) {
	dir := hostDir(t)
	in := filepath.Join(dir, "input.txt")
	require.NoError(t, os.WriteFile(in, []byte("original\n"), 0o666))
	require.NoError(t, os.Chmod(in, 0o666)) // writable by the jail's ids: only the descriptor can stop it
	for _, stdin := range []string{"--stdin=" + in, "--stdin=-"} {
		t.Run(stdin, func(t *testing.T) {
			args := []string{"run", "--profile", "strict", stdin, "--", "sh", "-c", `stat -L -c %F /proc/self/fd/0; { echo overwritten 1<>/proc/self/fd/0; } 2>/dev/null; true`}
			c := jailCmd(t.Context(), args...)
			if stdin == "--stdin=-" { // the caller redirects a file into jail itself
				f, err := os.Open(in)
				require.NoError(t, err)
				defer f.Close()
				c.Stdin = f
			}
			out, err := c.Output()
			require.NoError(t, err, "%s", out)
			assert.True(t, strings.HasPrefix(string(out), "fifo\n"), "stdin is a pipe jail feeds, got %q", out)
			b, err := os.ReadFile(in)
			require.NoError(t, err)
			assert.Equal(t, "original\n", string(b))
		})
	}
}

// TestBindSourceSwap is finding 2: while one jail is being set up, the
// workload of another (with a writable bind of the source's parent) swaps
// the source for a symlink to the host's root and back. Each run must
// either mount the real directory or refuse; never the host's root.
func TestBindSourceSwap(t *testing.T) {
	parent := hostDir(t)
	src, link := filepath.Join(parent, "data"), filepath.Join(parent, "swap")
	require.NoError(t, os.Mkdir(src, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "marker"), []byte("m"), 0o644))
	require.NoError(t, os.Symlink("/", link))

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the attacker: atomic exchanges of the directory and the symlink
		defer wg.Done()
		for !stop.Load() {
			if unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) == nil {
				swaps.Add(1)
			}
		}
	}()
	outcomes := map[string]int{}
	for i := 0; i < 60; i++ {
		r := runJail(t, "run", "--profile", "strict", "--ro-bind", src+":/data", "--", "ls", "/data")
		switch {
		case r.code == 0 && r.stdout == "marker\n":
			outcomes["the real directory"]++
		case r.code == jail.ExitSetupError:
			outcomes["refused"]++
			assert.Regexp(t, `is a symlink|does not exist|changed after jail checked it`, r.stderr)
		default:
			outcomes["escaped"]++
			t.Errorf("run %d mounted something else: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d swaps during 60 runs: %v", swaps.Load(), outcomes)
	require.Greater(t, swaps.Load(), int64(100), "the attacker must really have raced")
	assert.Zero(t, outcomes["escaped"])
}

// inMountNS runs script as root in a new, private mount namespace, so that
// the mounts it makes for an attack never touch the host's table.
func inMountNS(t *testing.T, script string) result {
	t.Helper()
	requireRoot(t)
	c := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	c.Env = []string{"PATH=/usr/bin:/bin", "JAIL=" + jailBin}
	out, err := c.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("unshare: %v", err)
	}
	r := result{stdout: string(out), code: c.ProcessState.ExitCode()}
	if ee != nil {
		r.stderr = string(ee.Stderr)
	}
	return r
}

// TestBindSourceMounts is finding 13 and its cousin: a bind carries every
// mount below its source (open_tree AT_RECURSIVE), and a source may itself
// be a bind mount of a sensitive tree. Both are judged by what they are,
// not by their path.
func TestBindSourceMounts(t *testing.T) {
	requireRoot(t) // making the mounts needs root; the check itself is the same for every caller
	dir := hostDir(t)
	for _, tc := range []struct {
		name, setup, bind, want string
	}{
		{"/run mounted below a harmless directory", "mkdir -p $D/job/run && mount --bind /run $D/job/run",
			"$D/job", "carries the mount at " + dir + "/job/run, which is the host's /run"},
		{"a proc mounted below it", "mkdir -p $D/job2/p && mount -t proc proc $D/job2/p",
			"$D/job2", "which is a proc file system"},
		{"the source itself a bind of /run", "mkdir -p $D/innocent && mount --bind /run $D/innocent",
			"$D/innocent", "is the host's /run"},
		{"the source a bind of the host's root", "mkdir -p $D/root && mount --bind / $D/root",
			"$D/root", "is the host's /"},
		{"a bind of /etc", "mkdir -p $D/cfg && mount --bind /etc $D/cfg", "$D/cfg", "is the host's /etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := "D=" + dir + "; " + tc.setup + ` && exec "$JAIL" run --profile strict --ro-bind ` + tc.bind + `:/data -- ls /data`
			r := inMountNS(t, script)
			assert.Equal(t, jail.ExitSetupError, r.code, "stdout %q", r.stdout)
			assert.Contains(t, r.stderr, tc.want)
			assert.Contains(t, r.stderr, "mounts[0].source")
			// And with the caller's explicit consent it runs.
			script = "D=" + dir + "; " + tc.setup + ` && exec "$JAIL" run --profile strict --allow-sensitive-sources --ro-bind ` + tc.bind + `:/data -- true`
			r = inMountNS(t, script)
			assert.Equal(t, 0, r.code, r.stderr)
		})
	}
	t.Run("a harmless submount comes along", func(t *testing.T) {
		script := "D=" + dir + `; mkdir -p $D/ok/scratch && mount -t tmpfs tmpfs $D/ok/scratch && touch $D/ok/scratch/x && ` +
			`exec "$JAIL" run --profile strict --ro-bind $D/ok:/data -- ls /data/scratch`
		r := inMountNS(t, script)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "x\n", r.stdout)
	})
	t.Run("rootfs carrying /run", func(t *testing.T) {
		script := "D=" + dir + `; mkdir -p $D/rfs/proc $D/rfs/dev $D/rfs/tmp $D/rfs/run && mount --bind /run $D/rfs/run && ` +
			`exec "$JAIL" run --rootfs $D/rfs -- /x`
		r := inMountNS(t, script)
		assert.Equal(t, jail.ExitSetupError, r.code)
		assert.Contains(t, r.stderr, "root")
		assert.Contains(t, r.stderr, "which is the host's /run")
	})
}
