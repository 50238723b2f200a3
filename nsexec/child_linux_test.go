package nsexec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// bothSpawns runs f with spawn.c and with the syscall.StartProcess fallback.
func bothSpawns(t *testing.T, f func(t *testing.T)) {
	for _, spawnC := range []bool{true, false} {
		name := map[bool]string{true: "clone3-vm", false: "fallback"}[spawnC]
		t.Run(name, func(t *testing.T) {
			if spawnC && !useSpawn {
				t.Skip("spawn.c has no trampoline for this architecture")
			}
			saved := useSpawn
			useSpawn = spawnC
			defer func() { useSpawn = saved }()
			f(t)
		})
	}
}

// TestStartPlanSizes: a plan that fits the pipe is written before the
// clone, a larger one after it; the stage reads every byte of both.
func TestStartPlanSizes(t *testing.T) {
	for _, n := range []int{1, 64 << 10, 3<<16 + 5} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var out bytes.Buffer
			c, err := Start(Config{Path: "/bin/sh", Arg0: "sh", Plan: bytes.Repeat([]byte{'x'}, n),
				Stdin: strings.NewReader("wc -c <&3\n"), Stdout: &out})
			require.NoError(t, err)
			c.ClosePlan()
			require.NoError(t, c.Wait())
			c.Close()
			assert.Equal(t, strconv.Itoa(n), strings.TrimSpace(out.String()))
		})
	}
}

// TestStartLayout starts /bin/sh in the stage's place and checks what it
// inherits: the descriptor layout of protocol.go, nothing else open, an
// empty signal mask, the id maps of its user namespace, the credentials,
// and the RLIMIT_NOFILE this process started with.
func TestStartLayout(t *testing.T) {
	extra := filepath.Join(t.TempDir(), "extra")
	require.NoError(t, os.WriteFile(extra, []byte("extra-file"), 0o644))
	script := `cat <&3; echo
readlink /proc/self/fd/4
cat <&5; echo
for fd in 6 7 8 9; do [ -e /proc/self/fd/$fd ] && echo "leaked fd $fd"; done
grep -E '^(SigBlk|Uid|Gid):' /proc/self/status
cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups
ulimit -Sn
`
	bothSpawns(t, func(t *testing.T) {
		f, err := os.Open(extra)
		require.NoError(t, err)
		defer f.Close()
		var out, errOut bytes.Buffer
		c, err := Start(Config{
			Path: "/bin/sh", Arg0: "sh", Plan: []byte("the-plan"), Files: []*os.File{f},
			Stdin: strings.NewReader(script), Stdout: &out, Stderr: &errOut,
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:  unix.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
				Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			},
		})
		require.NoError(t, err)
		c.ClosePlan()
		require.NoError(t, c.Wait())
		c.Close()
		assert.Equal(t, "exit status 0", c.ExitState().String(), "stderr: %s", errOut.String())
		lines := strings.Split(out.String(), "\n")
		require.GreaterOrEqual(t, len(lines), 10, out.String())
		assert.Equal(t, "the-plan", lines[0])
		assert.True(t, strings.HasPrefix(lines[1], "socket:["), lines[1])
		assert.Equal(t, "extra-file", lines[2])
		assert.Equal(t, "Uid:\t0\t0\t0\t0", lines[3])
		assert.Equal(t, "Gid:\t0\t0\t0\t0", lines[4])
		assert.Equal(t, "SigBlk:\t0000000000000000", lines[5])
		assert.Equal(t, []string{"0", strconv.Itoa(os.Getuid()), "1"}, strings.Fields(lines[6]))
		assert.Equal(t, []string{"0", strconv.Itoa(os.Getgid()), "1"}, strings.Fields(lines[7]))
		assert.Equal(t, "deny", lines[8])
		if n := nofileAtStart(); n > 0 {
			assert.Equal(t, strconv.FormatUint(n, 10), lines[9])
		}
		assert.Empty(t, errOut.String())
	})
}

// TestStartFailures checks that a stage that cannot start is reported
// and leaves no child behind: an executable that is not there, and id
// maps the kernel refuses (the child is killed while it waits for them).
func TestStartFailures(t *testing.T) {
	bothSpawns(t, func(t *testing.T) {
		_, err := Start(Config{Path: "/nonexistent/stage", Arg0: "x"})
		var pe *os.PathError
		require.ErrorAs(t, err, &pe)
		assert.True(t, errors.Is(err, syscall.ENOENT), "%v", err)

		_, err = Start(Config{Path: "/bin/true", Arg0: "true", SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 0}},
		}})
		require.Error(t, err)
		assert.True(t, errors.Is(err, syscall.EINVAL), "%v", err)

		// No child is left to reap: every one was waited for.
		_, err = unix.Wait4(-1, nil, unix.WNOHANG, nil)
		assert.ErrorIs(t, err, unix.ECHILD)
	})
}

// TestStartRefusesAttr checks that a SysProcAttr field neither spawn
// carries out is refused rather than ignored.
func TestStartRefusesAttr(t *testing.T) {
	_, err := Start(Config{Path: "/bin/true", Arg0: "true", SysProcAttr: &syscall.SysProcAttr{Setsid: true}})
	assert.ErrorContains(t, err, "unsupported SysProcAttr field")
}

// BenchmarkStart measures a spawn of /bin/true with the namespaces of a
// jail (user ns with its maps, pid, mount, net, uts, ipc), to its exit:
// spawn.c against the fork of syscall.StartProcess. The fork's cost grows
// with this process's resident memory; b.Run's ballast makes it a Go
// process of the size of the CLI (8 MiB).
func BenchmarkStart(b *testing.B) {
	ballast := make([]byte, 8<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	for _, spawnC := range []bool{true, false} {
		b.Run(map[bool]string{true: "clone3-vm", false: "fork"}[spawnC], func(b *testing.B) {
			if spawnC && !useSpawn {
				b.Skip("no trampoline")
			}
			saved := useSpawn
			useSpawn = spawnC
			defer func() { useSpawn = saved }()
			for b.Loop() {
				c, err := Start(Config{Path: "/bin/true", Arg0: "true", SysProcAttr: &syscall.SysProcAttr{
					Cloneflags:  flags,
					UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
					GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
				}})
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
				if err := c.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	runtime.KeepAlive(ballast)
}

// TestSpawnExecFD checks that an executable passed by descriptor (the
// embedded stage's memfd) is run even when its number is one the layout
// gives another file: it is moved out of the way first.
func TestSpawnExecFD(t *testing.T) {
	if !useSpawn {
		t.Skip("spawn.c has no trampoline for this architecture")
	}
	exe, err := os.Open("/bin/sh")
	require.NoError(t, err)
	defer exe.Close()
	script, err := os.CreateTemp(t.TempDir(), "script")
	require.NoError(t, err)
	_, err = script.WriteString("echo ran $0\n")
	require.NoError(t, err)
	_, err = script.Seek(0, 0)
	require.NoError(t, err)
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	files := []*os.File{script, pw, pw}
	for len(files) <= int(exe.Fd()) {
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		defer f.Close()
		files = append(files, f)
	}
	done := make(chan struct{})
	var pid int
	var pidfd *os.File
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		pid, pidfd, err = spawn("/nonexistent", exe, "sh", files, &syscall.SysProcAttr{})
		if err == nil {
			_, err = wait4(pid)
			pidfd.Close()
		}
	}()
	<-done
	pw.Close()
	require.NoError(t, err)
	out, _ := io.ReadAll(pr)
	assert.Equal(t, "ran sh\n", string(out), "descriptor %d, %d files", exe.Fd(), len(files))
}

func TestMain(m *testing.M) {
	if os.Getenv("JAIL_TEST_SPAWN_KILLED") == "1" {
		// The parent of TestSpawnParentKilled: dies inside spawn.
		killAfterClone()
		runtime.LockOSThread()
		devnull, _ := os.Open(os.DevNull)
		_, _, err := spawn("/bin/true", nil, "true", []*os.File{devnull, devnull, devnull}, &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		})
		panic(fmt.Sprintf("spawn returned (%v) in a parent that should be dead", err))
	}
	os.Exit(m.Run())
}

// TestSpawnParentKilled kills a parent between the clone and the release
// of its child (which waits for its id maps): the child must see it and
// exit, not wait for ever (the fault-injection soak found one that did).
// This process is the subreaper, so the orphan is its child to wait for.
func TestSpawnParentKilled(t *testing.T) {
	if !useSpawn {
		t.Skip("spawn.c has no trampoline for this architecture")
	}
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	// stderr is a file, not a pipe: an orphan that still waits would hold
	// a pipe's write end, and os/exec's Wait would wait with it.
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer stderr.Close()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), "JAIL_TEST_SPAWN_KILLED=1")
	cmd.Stderr = stderr
	err = cmd.Run()
	msg, _ := os.ReadFile(stderr.Name())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr: %s", msg)
	require.Equal(t, "signal: killed", ee.ProcessState.String(), "stderr: %s", msg)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid > 0 {
			assert.Equal(t, 126, ws.ExitStatus(), "the orphaned child's status")
			return
		}
		require.NoError(t, err, "no orphan to wait for")
		if time.Now().After(deadline) {
			// Kill the orphans by pid (we are their reaper: a pid stays
			// theirs until we wait for it) so the test ends.
			tasks, _ := filepath.Glob("/proc/self/task/*/children")
			for _, f := range tasks {
				b, _ := os.ReadFile(f)
				for _, p := range strings.Fields(string(b)) {
					if n, err := strconv.Atoi(p); err == nil {
						_ = unix.Kill(n, unix.SIGKILL)
					}
				}
			}
			t.Fatal("the child of a killed parent still waits for its release after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
