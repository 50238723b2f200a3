package nsexec

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

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
