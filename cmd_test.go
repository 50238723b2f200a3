package jail

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/landlock"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/seccomp"
)

// These tests start real jails through the Go API. The test binary links the
// child stage (package nsexec's constructor runs before main when argv[0] is
// "jail:init"), so Command works with HelperPath empty.

// requireJail skips t unless this process can start jails. Only root is
// sure to: an unprivileged caller depends on the host's user namespace
// policy, and a test that could not run must not pass.
func requireJail(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("starting jails needs root here (run with `go test -exec sudo`); unprivileged user namespaces are host policy")
	}
}

// worldReadableDir returns a temporary directory a root caller's jail can
// read: its workload runs as host uid 65534, and t.TempDir makes both the
// directory and its per-test parent 0700.
func worldReadableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return dir
}

func TestCommand(t *testing.T) {
	requireJail(t)
	dir := worldReadableDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello"), []byte("hi from the host\n"), 0o644))

	for _, tc := range []struct {
		name     string
		spec     Spec
		args     []string
		stdin    string
		status   Status
		exitCode int
		signal   string
		stdout   string
		stderr   string
	}{
		{"exit code and both streams", Spec{}, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, "",
			StatusExited, 3, "", "out\n", "err\n"},
		{"success", Spec{}, []string{"true"}, "", StatusExited, 0, "", "", ""},
		{"stdin", Spec{}, []string{"cat"}, "line one\nline two\n", StatusExited, 0, "", "line one\nline two\n", ""},
		{"killed by a signal", Spec{}, []string{"sh", "-c", "kill -KILL $$"}, "", StatusSignaled, 128 + 9, "KILL", "", ""},
		{"ids inside", Spec{}, []string{"sh", "-c", "id -u; id -g"}, "", StatusExited, 0, "", "1000\n1000\n", ""},
		{"hostname", Spec{Hostname: "box"}, []string{"hostname"}, "", StatusExited, 0, "", "box\n", ""},
		{"env is not inherited", Spec{Env: []string{"ONLY=this"}}, []string{"/usr/bin/env"}, "", StatusExited, 0, "", "ONLY=this\n", ""},
		{"cwd", Spec{Cwd: "/proc"}, []string{"pwd"}, "", StatusExited, 0, "", "/proc\n", ""},
		// PID 1 and its seccomp listener thread (tid 2) come first.
		{"pid 1 is the child stage", Spec{}, []string{"sh", "-c", "echo $$"}, "", StatusExited, 0, "", "3\n", ""},
		{"pid 1 without a listener", Spec{Seccomp: "none"}, []string{"sh", "-c", "echo $$"}, "", StatusExited, 0, "", "2\n", ""},
		{"read-only bind", Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/data"}}},
			[]string{"sh", "-c", "cat /data/hello; touch /data/new 2>/dev/null || echo read-only"}, "",
			StatusExited, 0, "", "hi from the host\nread-only\n", ""},
		{"root is read-only", Spec{}, []string{"sh", "-c", "touch /x 2>/dev/null || echo read-only"}, "",
			StatusExited, 0, "", "read-only\n", ""},
		{"tmp is writable", Spec{}, []string{"sh", "-c", "echo x > /tmp/f && cat /tmp/f"}, "", StatusExited, 0, "", "x\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Command(context.Background(), tc.spec, tc.args[0], tc.args[1:]...)
			c.Capture = true
			if tc.stdin != "" {
				c.Stdin = strings.NewReader(tc.stdin)
			}
			require.NoError(t, c.Run())
			r := c.Result
			require.NotNil(t, r)
			assert.Equal(t, Schema, r.Schema)
			assert.Equal(t, "captured", r.Output)
			assert.Equal(t, tc.status, r.Status, "got status %s, want %s (stderr %q)", r.Status, tc.status, r.Stderr)
			assert.Equal(t, tc.exitCode, r.ExitCode, "got exit code %d, want %d", r.ExitCode, tc.exitCode)
			assert.Equal(t, tc.signal, r.Signal)
			assert.Equal(t, tc.stdout, r.Stdout)
			assert.Equal(t, tc.stderr, r.Stderr)
			assert.Equal(t, int64(len(tc.stdout)), r.StdoutBytes)
			assert.Equal(t, int64(len(tc.stderr)), r.StderrBytes)
			assert.False(t, r.StdoutTruncated)
			assert.Nil(t, r.Error)
			assert.GreaterOrEqual(t, r.WallTimeMS, int64(0))
		})
	}
}

// TestCommandWorkloadPID: a run's workload pid is its own in the jail's
// PID namespace; a workload that never started has none.
func TestCommandWorkloadPID(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{}, "sh", "-c", "echo $$")
	c.Capture = true
	require.NoError(t, c.Start())
	pid := c.WorkloadPID()
	require.NoError(t, c.Wait())
	assert.Greater(t, pid, 1, "not the jail's PID 1")
	assert.Equal(t, fmt.Sprintf("%d\n", pid), c.Result.Stdout)

	// A directory cannot be executed: the jail starts, its workload never does.
	c = Command(context.Background(), Spec{}, "/etc")
	assert.Zero(t, c.WorkloadPID(), "before Start")
	if err := c.Start(); err == nil { // Start may see the execve's failure, or Wait
		assert.Zero(t, c.WorkloadPID())
		assert.ErrorContains(t, c.Wait(), "execve")
	} else {
		assert.Zero(t, c.WorkloadPID())
	}
}

// TestStepPanicLeavesNothing: a panic in a host step (a bug) undoes the
// steps before it, as an error does, and a panic in Wait's report still
// removes the run's cgroup: whoever recovers it (jail serve) finds nothing
// of the jail left on the host.
func TestStepPanicLeavesNothing(t *testing.T) {
	requireJail(t)
	for _, step := range []string{"cgroup", "network", "ready", "go", "report"} {
		t.Run(step, func(t *testing.T) {
			testStepPanic.Store(&step)
			defer testStepPanic.Store(nil)
			c := Command(context.Background(), Spec{MemoryMaxBytes: 64 << 20, PidsMax: 32}, "sleep", "0.2")
			var p any
			func() {
				defer func() { p = recover() }()
				if c.Start() == nil {
					_ = c.Wait()
				}
			}()
			require.NotNil(t, p, "the step panicked")
			assert.Contains(t, fmt.Sprint(p), "a panic in step "+step, "the panic itself goes on")
			if c.cg != nil {
				dirs := c.cg.State()
				require.NotEmpty(t, dirs)
				for _, d := range dirs {
					assert.NoDirExists(t, d.Path, "the run's cgroup is removed")
				}
			}
			if c.child != nil {
				pid := c.child.Pid()
				_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
				assert.True(t, os.IsNotExist(err), "the jail's PID 1 (%d) is gone and reaped", pid)
			}
		})
	}
}

func TestCommandReport(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{}, "true")
	c.Capture = true
	require.NoError(t, c.Run())
	iso := c.Result.Isolation
	for _, ns := range []string{"user", "pid", "mount", "net", "uts", "ipc", "cgroup"} {
		assert.Contains(t, iso.Namespaces, ns)
	}
	assert.Equal(t, "tmpfs", iso.Root)
	assert.Equal(t, []IDMap{{1000, 65534, 1}}, iso.UIDMap)
	assert.Equal(t, uint32(1000), iso.UID)

	// Every field is in the document (but a session's, for a run that is
	// not a session's, a pool's, for a run not of jail serve's pools, and
	// a language runner's), and no list is null.
	b, err := json.Marshal(c.Result)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	for _, k := range jsonFields(t, reflect.TypeFor[Result]()) {
		if k.name == "session_id" || k.name == "exec_id" || k.name == "pool" || k.name == "language" || k.name == "compile" {
			assert.NotContains(t, doc, k.name)
			continue
		}
		assert.Contains(t, doc, k.name)
	}
	assert.Nil(t, doc["error"])
	assert.NotContains(t, string(b), `_map":null`)
	assert.NotContains(t, string(b), `"namespaces":null`)
	assert.NotContains(t, string(b), `"not_enforced":null`)
}

func TestCommandStreamsToWriters(t *testing.T) {
	requireJail(t)
	var out, errOut strings.Builder
	c := Command(context.Background(), Spec{}, "sh", "-c", "echo to-out; echo to-err >&2")
	c.Stdout, c.Stderr = &out, &errOut
	require.NoError(t, c.Run())
	assert.Equal(t, "streamed", c.Result.Output)
	assert.Equal(t, "to-out\n", out.String())
	assert.Equal(t, "to-err\n", errOut.String())
	assert.Empty(t, c.Result.Stdout, "got captured output without Capture")
}

func TestCommandTimeout(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{Timeout: Duration(time.Second)}, "sleep", "10")
	c.Capture = true
	begin := time.Now()
	require.NoError(t, c.Run())
	elapsed := time.Since(begin)
	r := c.Result
	assert.Equal(t, StatusTimedOut, r.Status)
	assert.Equal(t, ExitTimedOut, r.ExitCode)
	assert.GreaterOrEqual(t, elapsed, time.Second, "got %v, want at least the timeout", elapsed)
	assert.Less(t, elapsed, 6*time.Second, "got %v, want the jail killed soon after the timeout", elapsed)
	assert.Less(t, r.WallTimeMS, int64(6000))
	// WallTimeMS counts from the workload's start; the timer runs from
	// clone, so the setup (a few ms; more on a loaded machine under -race)
	// is not in it.
	assert.GreaterOrEqual(t, r.WallTimeMS, int64(800), "got wall time %d ms, want about the 1 s timeout", r.WallTimeMS)
}

func TestCommandKillGrace(t *testing.T) {
	requireJail(t)
	spec := Spec{Timeout: Duration(200 * time.Millisecond), KillGrace: Duration(5 * time.Second)}
	// The workload ends itself on SIGTERM well before the grace runs out.
	c := Command(context.Background(), spec, "sh", "-c", "trap 'echo term; exit 0' TERM; while :; do sleep 0.05; done")
	c.Capture = true
	begin := time.Now()
	require.NoError(t, c.Run())
	assert.Less(t, time.Since(begin), 4*time.Second, "got a run as long as the grace, want SIGTERM to end it")
	assert.Contains(t, c.Result.Stdout, "term")
}

func TestCommandCancel(t *testing.T) {
	requireJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := Command(ctx, Spec{}, "sleep", "10")
	require.NoError(t, c.Start())
	begin := time.Now()
	time.AfterFunc(100*time.Millisecond, cancel)
	require.NoError(t, c.Wait())
	assert.Less(t, time.Since(begin), 5*time.Second)
	r := c.Result
	assert.Equal(t, StatusCanceled, r.Status)
	assert.Equal(t, ExitSetupError, r.ExitCode)
	require.NotNil(t, r.Error, "got no error info, want the cancellation")
	assert.Contains(t, r.Error.Message, "canceled")
}

func TestCommandContextDeadline(t *testing.T) {
	requireJail(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c := Command(ctx, Spec{}, "sleep", "10")
	require.NoError(t, c.Run())
	assert.Equal(t, StatusTimedOut, c.Result.Status, "got %s, want a context deadline reported as a timeout", c.Result.Status)
}

func TestCommandCanceledBeforeStart(t *testing.T) {
	requireJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := Command(ctx, Spec{}, "true")
	err := c.Start()
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, StatusSetupError, c.Result.Status)
}

func TestCommandNotExecuted(t *testing.T) {
	requireJail(t)
	dir := worldReadableDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\necho no\n"), 0o644))
	bin := []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/opt/x"}}

	for _, tc := range []struct {
		name     string
		spec     Spec
		cmd      string
		errno    syscall.Errno
		exitCode int
	}{
		{"not in PATH", Spec{}, "no-such-command-for-jail", syscall.ENOENT, ExitNotFound},
		{"missing path", Spec{}, "/no/such/command", syscall.ENOENT, ExitNotFound},
		{"empty PATH", Spec{Env: []string{"PATH="}}, "sh", syscall.ENOENT, ExitNotFound},
		{"not executable", Spec{Mounts: bin}, "/opt/x/script", syscall.EACCES, ExitNotExecutable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Command(context.Background(), tc.spec, tc.cmd)
			c.Capture = true
			require.NoError(t, c.Start())
			err := c.Wait()
			require.Error(t, err)
			var ie *InitError
			require.ErrorAs(t, err, &ie)
			assert.ErrorIs(t, err, tc.errno, "got %v, want %v", err, tc.errno)
			r := c.Result
			assert.Equal(t, StatusSetupError, r.Status)
			assert.Equal(t, tc.exitCode, r.ExitCode, "got exit code %d, want %d", r.ExitCode, tc.exitCode)
			require.NotNil(t, r.Error)
			assert.Equal(t, errnoName(tc.errno), r.Error.Errno)
			assert.Equal(t, ie.Step, r.Error.Step)
		})
	}
}

func TestCommandInvalidSpec(t *testing.T) {
	// Validation happens before anything needs privileges.
	for _, tc := range []struct {
		name string
		spec Spec
		args []string
	}{
		{"bad hostname", Spec{Hostname: "-bad"}, []string{"true"}},
		{"missing bind source", Spec{Mounts: []mounts.Mount{{Type: mounts.Bind, Source: "/no/such/dir", Target: "/x"}}}, []string{"true"}},
		{"empty command", Spec{}, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Command(context.Background(), tc.spec, tc.args[0], tc.args[1:]...)
			err := c.Start()
			require.ErrorIs(t, err, ErrInvalidSpec)
			r := c.Result
			require.NotNil(t, r, "got no Result after a failed Start")
			assert.Equal(t, Schema, r.Schema)
			assert.Equal(t, StatusSetupError, r.Status)
			assert.Equal(t, ExitSetupError, r.ExitCode)
			require.NotNil(t, r.Error)
			assert.Equal(t, "spec", r.Error.Step)
			assert.Equal(t, err.Error(), r.Error.Message)
			assert.Error(t, c.Wait(), "got Wait without a started jail to succeed")
		})
	}
}

func TestCommandRunTwice(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{}, "true")
	require.NoError(t, c.Run())
	first := c.Result
	err := c.Run()
	assert.Error(t, err, "got a second Run to succeed")
	assert.Same(t, first, c.Result, "a refused Run must keep the first Result")
}

func TestCommandSignal(t *testing.T) {
	requireJail(t)
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		signal string
	}{
		{"TERM is forwarded to the workload", syscall.SIGTERM, "TERM"},
		{"KILL ends the jail", syscall.SIGKILL, "KILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			c := Command(context.Background(), Spec{}, "sh", "-c", "echo ready; exec sleep 10")
			c.Stdout = pw
			assert.Error(t, c.Signal(tc.sig), "got Signal before Start to succeed")
			require.NoError(t, c.Start())
			// Signals reach the workload once PID 1 forwards them, which
			// is certain once the workload writes.
			line, err := bufio.NewReader(pr).ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "ready\n", line)
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			begin := time.Now()
			require.NoError(t, c.Signal(tc.sig))
			err = c.Wait()
			pw.Close()
			assert.Less(t, time.Since(begin), 5*time.Second)
			require.NoError(t, err)
			r := c.Result
			assert.Equal(t, StatusSignaled, r.Status)
			assert.Equal(t, tc.signal, r.Signal)
			assert.Equal(t, 128+int(tc.sig), r.ExitCode)
		})
	}
}

func TestCommandWaitErrors(t *testing.T) {
	c := Command(context.Background(), Spec{}, "true")
	err := c.Wait()
	assert.Error(t, err, "got Wait before Start to succeed")
	assert.False(t, errors.Is(err, ErrInvalidSpec))
}

func TestCommandWithoutMountNamespace(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{DisableNamespaces: []string{"mount"}}, "sh", "-c", "pwd")
	c.Capture = true
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Equal(t, StatusExited, c.Result.Status)
	assert.Equal(t, "host", c.Result.Isolation.Root)
	assert.Equal(t, "/\n", c.Result.Stdout)
}

// addHostBind adds to a planned launch what the plan did not mean: a
// read-only bind on target of the host path opened (by Start) as a source and
// reopened by the child stage at reopened (the same path, unless a test
// wants them to differ).
func addHostBind(l *launch, opened, reopened, target string, flags nsexec.OpFlags) {
	l.sources = append(l.sources, hostSource{path: opened})
	l.plan.Sources = uint32(len(l.sources))
	l.plan.Mounts = append(l.plan.Mounts, nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate | flags, Source: reopened,
		Target: target, Attr: nsexec.AttrRdonly | nsexec.AttrNosuid | nsexec.AttrNodev, Src: l.plan.Sources})
}

// TestLandlockHoldsWhenTheMountPlanIsWrong: Landlock's rules come from the
// plan's intent, so a mount the plan did not mean (a bug, made here on
// purpose: the host's /etc at /leak, added after planning) is still
// refused; without Landlock it is readable.
func TestLandlockHoldsWhenTheMountPlanIsWrong(t *testing.T) {
	requireJail(t)
	if landlock.ProbeABI() == 0 {
		t.Skip("this kernel has no Landlock")
	}
	overBroad := func(l *launch) { addHostBind(l, "/etc", "/etc", "/leak", 0) }
	for _, tc := range []struct {
		mode string
		want string
	}{{LandlockAuto, "Permission denied"}, {LandlockOff, "root:x:0:0"}} {
		t.Run(tc.mode, func(t *testing.T) {
			c := Command(t.Context(), Spec{Seccomp: "strict", Landlock: tc.mode}, "sh", "-c", "head -1 /leak/passwd 2>&1")
			c.Capture, c.testHook = true, overBroad
			require.NoError(t, c.Run())
			assert.Contains(t, c.Result.Stdout, tc.want)
			// Names below /leak can be listed: the default root's rule
			// lists /, and Landlock's rules hold for whole subtrees.
		})
	}
}

// TestOptionalSourceGone: an optional bind whose host source is gone by the
// time the child stage opens it again is skipped, target and all, as when it
// is missing at planning time; it used to fail the run with EBADF and leave
// its target made. The hook makes the path the child opens differ from the
// one the parent opened, as a source removed in between would.
func TestOptionalSourceGone(t *testing.T) {
	requireJail(t)
	hook := func(l *launch) { addHostBind(l, "/etc", "/no-such-jail-source", "/tmp/gone", nsexec.OpOptional) }
	c := Command(t.Context(), Spec{Seccomp: "strict"}, "sh", "-c", "ls -a /tmp")
	c.Capture, c.testHook = true, hook
	require.NoError(t, c.Run())
	assert.Equal(t, StatusExited, c.Result.Status)
	assert.Equal(t, ".\n..\n", c.Result.Stdout, "skipped, and its target not made")
}

// addMask adds to a planned launch a mask as rootfs plans one (an optional
// read-only bind that makes no mount point) of the host path opened (by
// Start), reopened by the child stage at reopened, on target.
func addMask(l *launch, opened, reopened, target string) {
	l.sources = append(l.sources, hostSource{path: opened})
	l.plan.Sources = uint32(len(l.sources))
	l.plan.Mounts = append(l.plan.Mounts, nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpOptional, Source: reopened,
		Target: target, Attr: nsexec.AttrRdonly | nsexec.AttrNosuid | nsexec.AttrNoexec, Src: l.plan.Sources})
}

// TestMaskFailsClosed: a mask is skipped only when there is nothing to
// mask. /proc/version, which no mask of the plan covers, stands for a
// host fact; the attack makes the mask's source vanish between the
// parent's check and the child stage's (as a swapped /dev/null would).
// The child stage used to skip such a mask silently and run the workload
// with the file readable; it must refuse to start.
func TestMaskFailsClosed(t *testing.T) {
	requireJail(t)
	const fact, absent = "/proc/version", "/proc/no-such-file-for-jail"
	host, err := os.ReadFile(fact)
	require.NoError(t, err)
	require.NotEmpty(t, host, "nothing to hide")
	_, err = os.Stat(absent)
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, tc := range []struct {
		name             string
		reopened, target string
		refused          bool
		want             string // the workload's output
	}{
		{"masks a file", "/dev/null", fact, false, ""},
		{"skips an absent target", "/dev/null", absent, false, "absent\n"},
		{"skips an absent target, its source gone", "/no-such-jail-source", absent, false, "absent\n"},
		{"refuses a present target, its source gone", "/no-such-jail-source", fact, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := func(l *launch) { addMask(l, "/dev/null", tc.reopened, tc.target) }
			c := Command(t.Context(), Spec{Seccomp: "strict"}, "sh", "-c", "cat "+tc.target+" 2>/dev/null || echo absent")
			c.Capture, c.testHook = true, hook
			err := c.Run()
			assert.Equal(t, tc.want, c.Result.Stdout)
			if !tc.refused {
				require.NoError(t, err)
				return
			}
			var ie *InitError
			require.ErrorAs(t, err, &ie, "refused at set-up, got %v", err)
			assert.Equal(t, "mount plan", ie.Step)
			assert.Equal(t, "bind /no-such-jail-source on "+fact, ie.Detail)
			assert.ErrorIs(t, err, syscall.ENOENT)
			assert.Equal(t, StatusSetupError, c.Result.Status)
		})
	}
}

// TestNewTargetFailsClosed: the child stage makes an OpNew target without
// looking for it first; if the plan is wrong and something is there, the
// op fails (EEXIST) rather than mounting on, or writing through, what is
// there.
func TestNewTargetFailsClosed(t *testing.T) {
	requireJail(t)
	for _, tc := range []struct {
		name string
		op   nsexec.Mount
	}{
		{"a bind on a file", nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate | nsexec.OpFileTarget | nsexec.OpNew,
			Source: "/etc/hostname", Target: "/etc/passwd", Attr: nsexec.AttrRdonly | nsexec.AttrNosuid | nsexec.AttrNodev}},
		{"a tmpfs on a directory", nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate | nsexec.OpNew, FSType: "tmpfs",
			Target: "/etc", Attr: nsexec.AttrNosuid | nsexec.AttrNodev}},
		{"a file", nsexec.Mount{Kind: nsexec.OpWriteFile, Flags: nsexec.OpNew, Target: "/etc/hosts", Mode: 0o644, Data: []byte("x")}},
		{"a symlink", nsexec.Mount{Kind: nsexec.OpSymlink, Flags: nsexec.OpNew, Target: "/etc/group", Data: []byte("/x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := func(l *launch) {
				if tc.op.Kind == nsexec.OpBind {
					l.sources = append(l.sources, hostSource{path: tc.op.Source})
					l.plan.Sources = uint32(len(l.sources))
					tc.op.Src = l.plan.Sources
				}
				l.plan.Mounts = append(l.plan.Mounts, tc.op)
			}
			c := Command(t.Context(), Spec{Seccomp: "strict"}, "true")
			c.Capture, c.testHook = true, hook
			err := c.Run()
			var ie *InitError
			require.ErrorAs(t, err, &ie, "refused at set-up, got %v", err)
			assert.Equal(t, "mount plan", ie.Step)
			assert.Equal(t, describeOp(tc.op), ie.Detail)
			assert.ErrorIs(t, err, syscall.EEXIST)
		})
	}
}

// TestLandlockRulesFollowNoSymlink: a Landlock rule is added on what the
// mount plan made at its path, never on what a symlink found there later
// names. Here the plan itself puts a symlink at a rule's path (in a real
// attack another jail sharing a read-write directory renames a mounted
// directory away and plants one): the rule must not land on the symlink's
// target, the over-broad /leak, and grant what the plan never meant to.
func TestLandlockRulesFollowNoSymlink(t *testing.T) {
	requireJail(t)
	if landlock.ProbeABI() == 0 {
		t.Skip("this kernel has no Landlock")
	}
	hook := func(l *launch) {
		addHostBind(l, "/etc", "/etc", "/leak", 0)
		l.plan.Mounts = append(l.plan.Mounts, nsexec.Mount{Kind: nsexec.OpSymlink, Target: "/tmp/out", Data: []byte("/leak")})
		l.plan.LandlockRules = append(l.plan.LandlockRules, nsexec.LandlockRule{Path: "/tmp/out", Access: uint64(landlock.ReadFile | landlock.ReadDir)})
	}
	c := Command(t.Context(), Spec{Seccomp: "strict"}, "sh", "-c", "head -1 /leak/passwd 2>&1")
	c.Capture, c.testHook = true, hook
	err := c.Run()
	assert.NotContains(t, c.Result.Stdout, "root:x:0:0", "the rule for /tmp/out followed the symlink to /leak")
	var ie *InitError
	require.ErrorAs(t, err, &ie, "refused at set-up, got %v", err)
	assert.Equal(t, "landlock", ie.Step)
	assert.ErrorIs(t, err, syscall.ELOOP)
}

// TestStageExecutable runs a jail with each stage executable: the one
// nsexec embeds (from a sealed memfd, where the architecture has one) and
// this program re-executed, whose nsexec constructor is the same stage.
// Neither can be written through /proc/PID/exe.
func TestStageExecutable(t *testing.T) {
	requireJail(t)
	for _, helper := range []string{"", "/proc/self/exe"} {
		t.Run("helper="+helper, func(t *testing.T) {
			var out bytes.Buffer
			c := Command(context.Background(), Spec{}, "sh", "-c", "cat /proc/1/comm; read x")
			c.HelperPath = helper
			c.Stdout = &out
			pr, pw, err := os.Pipe()
			require.NoError(t, err)
			defer pr.Close()
			c.Stdin = pr
			require.NoError(t, c.Start())
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.child.Pid()))
			require.NoError(t, err)
			if helper == "" && runtime.GOARCH == "amd64" {
				assert.Equal(t, "/memfd:jail-stage (deleted)", exe)
			} else {
				self, err := os.Executable()
				require.NoError(t, err)
				assert.Equal(t, self, exe)
			}
			_, err = os.OpenFile(fmt.Sprintf("/proc/%d/exe", c.child.Pid()), os.O_WRONLY, 0)
			assert.Error(t, err, "the stage's executable opened for writing")
			pw.Close()
			require.NoError(t, c.Wait())
			assert.Equal(t, StatusExited, c.Result.Status)
			assert.Equal(t, "jail:init\n", out.String())
		})
	}
}

// preforkedWorkload waits until the prepared jail c's PID 1 has forked
// its workload, and returns the workload's pid.
func preforkedWorkload(t *testing.T, c *Cmd) int {
	t.Helper()
	var kids []byte
	require.Eventually(t, func() bool {
		kids, _ = os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.child.Pid(), c.child.Pid()))
		return len(strings.Fields(string(kids))) == 1
	}, 5*time.Second, time.Millisecond, "PID 1 forks the workload before the release")
	pid, err := strconv.Atoi(strings.Fields(string(kids))[0])
	require.NoError(t, err)
	return pid
}

// TestPreparePreforks: a prepared jail's workload is forked and set up
// before its release, and waits with everything dropped (ids, every
// capability, no_new_privs) and nothing open but its stdio, the
// exec-error socket and the plan pipe; its seccomp filter comes after the
// wait, right before the exec, as for any workload; the release runs what
// it says, a release that cannot run is reported as such, and a discarded
// jail leaves nothing.
func TestPreparePreforks(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	spec := Spec{Seccomp: "strict"}

	c := Command(ctx, spec, "/bin/true")
	c.Capture = true
	require.NoError(t, c.Prepare())
	pid := preforkedWorkload(t, c)
	// Set up, it blocks reading its process from the plan pipe (fd 4):
	// /proc/PID/syscall is "0 0x4 ..." (read).
	require.Eventually(t, func() bool {
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		return strings.HasPrefix(string(sc), "0 0x4 ")
	}, 5*time.Second, time.Millisecond, "the workload waits on the plan pipe")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, want := range []string{"Seccomp:\t0", "NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", DefaultHostUID, DefaultHostUID, DefaultHostUID, DefaultHostUID)} {
		assert.Contains(t, string(status), want)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	var names []string
	for _, fd := range fds {
		names = append(names, fd.Name())
	}
	assert.Equal(t, []string{"0", "1", "2", "3", "4"}, names, "stdio, the exec-error socket, the plan pipe")
	c.Args = []string{"/bin/sh", "-c", "echo $0 ran in $PWD; grep Seccomp: /proc/self/status"}
	c.Spec.Cwd = "/tmp"
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Equal(t, "/bin/sh ran in /tmp\nSeccomp:\t2\n", c.Result.Stdout, "under its filter")

	// A policy that kills a call jail's own code might make before the
	// exec (close, read, chdir): none of it runs under the filter, so the
	// workload's own call is what is killed, and reported.
	kill := Spec{SeccompPolicy: &seccomp.Policy{DefaultAction: seccomp.ActAllow, Rules: []seccomp.Rule{
		{Names: []string{"close", "chdir"}, Action: seccomp.ActKill}}}, Timeout: Duration(5 * time.Second)}
	c = Command(ctx, kill, "/bin/true")
	c.Capture = true
	require.NoError(t, c.Prepare())
	c.Args = []string{"/bin/sh", "-c", "cd /tmp"}
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Equal(t, StatusSeccompKilled, c.Result.Status, "not a hang: %+v", c.Result)
	c = Command(ctx, kill, "/bin/echo", "hi") // and cold, where close killed jail's own call first
	c.Capture = true
	require.NoError(t, c.Run())
	assert.Equal(t, StatusSeccompKilled, c.Result.Status, "not a hang: %+v", c.Result)

	for _, tc := range []struct {
		args       []string
		cwd, step  string
		code, want int
	}{
		{[]string{"/no/such/program"}, "", "execve", ExitNotFound, int(syscall.ENOENT)},
		{[]string{"/bin/true"}, "/no/such/dir", "chdir", ExitNotExecutable, int(syscall.ENOENT)},
	} {
		c := Command(ctx, spec, "/bin/true")
		c.Capture = true
		require.NoError(t, c.Prepare())
		preforkedWorkload(t, c)
		c.Args, c.Spec.Cwd = tc.args, tc.cwd
		require.NoError(t, c.Start())
		err := c.Wait()
		var ie *InitError
		require.ErrorAs(t, err, &ie, "%v", tc.args)
		assert.Equal(t, tc.step, ie.Step)
		assert.ErrorIs(t, err, syscall.Errno(tc.want))
	}

	c = Command(ctx, spec, "/bin/true")
	require.NoError(t, c.Prepare())
	pid, init := preforkedWorkload(t, c), c.child.Pid()
	c.Discard()
	for _, p := range []int{pid, init} {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", p))
		assert.True(t, os.IsNotExist(err), "%d is gone", p)
	}
}

// TestSupervisorLostBeforeStarted: PID 1 killed after the workload was
// let go, before its word of the workload's start came, is a lost
// supervisor, not a setup error. The workload may already run then (a
// workload with no seccomp policy can kill PID 1 at once: see
// integration's TestPID1Survives, which raced this), so the report may not
// say it never ran. Here both are stopped, so the order is certain: the
// workload is let go, PID 1 is killed before it could say anything.
func TestSupervisorLostBeforeStarted(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{Seccomp: "strict"}, "/bin/true")
	c.Capture = true
	require.NoError(t, c.Prepare())
	workload := preforkedWorkload(t, c)
	require.NoError(t, syscall.Kill(workload, syscall.SIGSTOP))
	require.NoError(t, syscall.Kill(c.child.Pid(), syscall.SIGSTOP))
	require.NoError(t, c.Start())
	require.NoError(t, syscall.Kill(c.child.Pid(), syscall.SIGKILL))
	require.NoError(t, c.Wait(), "the workload was let go: Wait does not say it never ran")
	r := c.Result
	assert.True(t, r.SupervisorLost)
	assert.Equal(t, StatusSignaled, r.Status)
	assert.Equal(t, "KILL", r.Signal)
	require.NotNil(t, r.Error)
	assert.Equal(t, "supervisor", r.Error.Step)
	assert.Contains(t, r.Error.Message, "after the workload was let go, before it confirmed the workload's start (signal: killed)")
	_, err := os.Stat(fmt.Sprintf("/proc/%d", workload))
	assert.True(t, os.IsNotExist(err), "the workload went with PID 1")
}

// TestForkFailsAfterGo: a step of PID 1's that fails after GO, before the
// workload runs (here its fork, under pids.max 1 with no listener thread
// to count), is a setup error naming the step, not a lost supervisor.
func TestForkFailsAfterGo(t *testing.T) {
	requireJail(t)
	c := Command(context.Background(), Spec{PidsMax: 1, Seccomp: "none"}, "/bin/true")
	c.Capture = true
	err := c.Run()
	var ie *InitError
	require.ErrorAs(t, err, &ie, "%+v", c.Result)
	assert.Equal(t, "reap workload", ie.Step)
	assert.ErrorIs(t, err, syscall.EAGAIN)
	assert.Equal(t, StatusSetupError, c.Result.Status)
	assert.False(t, c.Result.SupervisorLost)
	require.NotNil(t, c.Result.Error)
	assert.Equal(t, "reap workload", c.Result.Error.Step)
}

// TestPrepareLimits: a release may change the limits of a prepared jail
// whose cgroup serves them, and they hold (the run is OOM-killed at the new,
// lower memory limit), and its output limit; a limit it was made without
// is refused, naming the field, and leaves nothing.
func TestPrepareLimits(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	c := Command(ctx, Spec{MemoryMaxBytes: 256 << 20, PidsMax: 64}, "/bin/true")
	c.Capture = true
	require.NoError(t, c.Prepare())
	c.Spec.MemoryMaxBytes, c.Spec.PidsMax, c.Spec.OutputLimitBytes = 16<<20, 8, 8
	c.Args = []string{"/bin/sh", "-c", "echo 0123456789abcdef; cat /sys/fs/cgroup/pids.max 2>/dev/null; dd if=/dev/zero of=/dev/null bs=64M count=1"}
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Contains(t, c.Result.LimitsHit, "memory", "64 MiB under the release's 16 MiB: %s", c.Result.Stderr)
	assert.Positive(t, c.Result.OOMKills)
	assert.True(t, c.Result.StdoutTruncated, "the release's output limit")
	assert.Less(t, len(c.Result.Stdout), 40, "%q", c.Result.Stdout)

	c = Command(ctx, Spec{PidsMax: 64}, "/bin/true")
	require.NoError(t, c.Prepare())
	paths := c.cg.Paths()
	c.Spec.MemoryMaxBytes = 64 << 20
	var se *SpecError
	require.ErrorAs(t, c.Start(), &se)
	assert.Equal(t, "memory_max_bytes", se.Field)
	for _, p := range paths {
		_, err := os.Stat(p)
		assert.True(t, os.IsNotExist(err), "%s is removed", p)
	}

	c = Command(ctx, Spec{}, "/bin/true")
	require.NoError(t, c.Prepare())
	c.Spec.PidsMax = 8
	require.ErrorAs(t, c.Start(), &se)
	assert.Equal(t, "pids_max", se.Field)

	c = Command(ctx, Spec{PidsMax: 64}, "/bin/true")
	require.NoError(t, c.Prepare())
	c.Spec.PidsMax = -1
	require.ErrorAs(t, c.Start(), &se)
	assert.Equal(t, "pids_max", se.Field)
}

// TestPrepare: a prepared jail waits; Start releases the workload with the
// Args, env and cwd given then, and its timeout runs from there. A change
// of a field of the jail is refused and the jail is discarded; Discard
// leaves nothing.
func TestPrepare(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	spec := Spec{MemoryMaxBytes: 64 << 20, Timeout: Duration(time.Second)}
	gone := func(c *Cmd) (check func()) {
		pid, paths := c.child.Pid(), c.cg.Paths()
		require.NotEmpty(t, paths)
		return func() {
			t.Helper()
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			assert.True(t, os.IsNotExist(err), "PID 1 %d is gone", pid)
			for _, p := range paths {
				_, err := os.Stat(p)
				assert.True(t, os.IsNotExist(err), "%s is removed", p)
			}
		}
	}

	c := Command(ctx, spec, "/bin/false")
	c.Capture = true
	require.NoError(t, c.Prepare())
	time.Sleep(1500 * time.Millisecond) // longer than the timeout: it has not begun
	c.Args = []string{"/bin/sh", "-c", "sleep 0.1; echo $GREETING; pwd"}
	c.Spec.Env = append(append([]string{}, DefaultEnv...), "GREETING=hello")
	c.Spec.Cwd = "/tmp"
	check := gone(c)
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Equal(t, StatusExited, c.Result.Status)
	assert.Equal(t, "hello\n/tmp\n", c.Result.Stdout)
	assert.Less(t, c.Result.WallTimeMS, int64(1000), "the wall time counts from the release")
	check()

	c = Command(ctx, spec, "/bin/sh", "-c", "sleep 5")
	require.NoError(t, c.Prepare())
	require.NoError(t, c.Start())
	require.NoError(t, c.Wait())
	assert.Equal(t, StatusTimedOut, c.Result.Status, "the timeout runs from the release")

	c = Command(ctx, spec, "true")
	require.NoError(t, c.Prepare())
	check = gone(c)
	c.Spec.Hostname = "other"
	err := c.Start()
	var se *SpecError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "hostname", se.Field)
	assert.Equal(t, StatusSetupError, c.Result.Status)
	check()

	c = Command(ctx, spec, "true")
	require.NoError(t, c.Prepare())
	check = gone(c)
	c.Discard()
	check()
	assert.Error(t, c.Prepare(), "once")
}

// TestSetupFailureCgroup: a run with limits whose stage cannot start (the
// clone's exec fails, after the cgroup was begun and before it was
// completed) reports the cgroup version it was to have, as a run that
// starts does, and leaves none of its directories.
func TestSetupFailureCgroup(t *testing.T) {
	requireJail(t)
	spec := Spec{MemoryMaxBytes: 64 << 20, PidsMax: 32}
	ok := Command(context.Background(), spec, "/bin/true")
	require.NoError(t, ok.Run())
	require.NotEqual(t, "none", ok.Result.Isolation.Cgroup)

	c := Command(context.Background(), spec, "/bin/true")
	c.HelperPath = filepath.Join(t.TempDir(), "no-such-stage")
	require.Error(t, c.Run())
	require.NotNil(t, c.Result)
	assert.Equal(t, StatusSetupError, c.Result.Status)
	assert.Equal(t, ok.Result.Isolation.Cgroup, c.Result.Isolation.Cgroup, "the version the failed run's group was to have")
	require.NotNil(t, c.cg, "the group was begun")
	require.NotEmpty(t, c.cg.Paths(), "its cgroup2 directory was made")
	for _, p := range c.cg.Paths() {
		assert.NoDirExists(t, p)
	}
}
