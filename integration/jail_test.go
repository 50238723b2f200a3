package integration

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
)

// strict runs a shell command under the strict profile and returns stdout.
func strict(t *testing.T, script string, flags ...string) string {
	t.Helper()
	args := append(append([]string{"run", "--profile", "strict"}, flags...), "--", "sh", "-c", script)
	return runOK(t, args...)
}

func TestQuickstart(t *testing.T) {
	out := strict(t, "id; echo hi")
	assert.Equal(t, "uid=1000(jail) gid=1000(jail) groups=1000(jail)\nhi\n", out)
}

func TestOnlyJailProcessesVisible(t *testing.T) {
	out := strict(t, "ls /proc | grep -E '^[0-9]+$'")
	pids := strings.Fields(out)
	require.NotEmpty(t, pids)
	for _, p := range pids {
		n, err := strconv.Atoi(p)
		require.NoError(t, err)
		assert.LessOrEqual(t, n, 10, "pid %d in the jail's /proc: got host processes, want only the jail's", n)
	}
	assert.Contains(t, pids, "1", "the jail's init is PID 1")
}

func TestReadOnlyRootAndUsr(t *testing.T) {
	for _, path := range []string{"/x", "/usr/x", "/etc/x", "/dev/x"} {
		t.Run(path, func(t *testing.T) {
			out := strict(t, "touch "+path+" 2>&1; echo rc=$?")
			assert.Contains(t, out, "Read-only file system")
			assert.Contains(t, out, "rc=1")
		})
	}
	assert.Equal(t, "ok\n", strict(t, "echo x > /tmp/f && echo x > /dev/shm/f && echo ok"))
}

func TestHostFilesAbsent(t *testing.T) {
	marker := filepath.Join(hostDir(t), "host-marker")
	require.NoError(t, os.WriteFile(marker, []byte("secret"), 0o644))
	for _, path := range []string{"/etc/shadow", "/etc/gshadow", "/root", "/home", "/var", "/sys", "/boot", "/run", marker} {
		t.Run(path, func(t *testing.T) {
			out := strict(t, "test -e "+path+" && echo present || echo absent")
			assert.Equal(t, "absent\n", out)
		})
	}
	assert.Equal(t, "bin\ndev\netc\nlib\nlib64\nproc\nsbin\ntmp\nusr\n", strict(t, "ls /"),
		"the root holds only what the plan puts there")
	etc := strict(t, "ls /etc")
	assert.NotContains(t, etc, "shadow")
	assert.Contains(t, etc, "passwd")
}

func TestHostname(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, "jail\n", strict(t, "hostname"))
	assert.Equal(t, "box\n", strict(t, "hostname", "--hostname", "box"))
	after, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, after, "the host's hostname is untouched")
}

func TestNoCapabilitiesAndNoNewPrivs(t *testing.T) {
	for _, tc := range []struct{ name, uid string }{{"jail user", "1000"}, {"jail root", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			out := strict(t, "cat /proc/self/status", "--uid", tc.uid, "--gid", tc.uid)
			for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				assert.Regexp(t, regexp.MustCompile(`(?m)^`+f+`:\s+0000000000000000$`), out, "%s must be empty", f)
			}
			assert.Regexp(t, regexp.MustCompile(`(?m)^NoNewPrivs:\s+1$`), out)
		})
	}
}

func TestIDMaps(t *testing.T) {
	host := strconv.Itoa(jailHostUID())
	out := strict(t, "cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g")
	hostGID := host
	if unprivileged {
		hostGID = strconv.Itoa(os.Getegid())
	}
	assert.Equal(t, []string{"1000", host, "1", "1000", hostGID, "1", "1000", "1000"}, strings.Fields(out))

	res, _ := runJSON(t, "--uid", "0", "--gid", "0", "--", "id", "-u")
	assert.Equal(t, "0\n", res.Stdout)
	assert.Equal(t, []jail.IDMap{{InsideID: 0, OutsideID: uint32(jailHostUID()), Count: 1}}, res.Isolation.UIDMap)

	t.Run("host uid of a root caller", func(t *testing.T) {
		requireRoot(t)
		out := strict(t, "cat /proc/self/uid_map", "--host-uid", "12345")
		assert.Equal(t, []string{"1000", "12345", "1"}, strings.Fields(out))
	})
}

func TestCVE20195736(t *testing.T) {
	// The jail's PID 1 runs jail's own binary. A workload that could open
	// it through /proc/1/exe could overwrite the host's jail binary.
	for _, tc := range []struct{ path, mode string }{
		{"/proc/1/exe", "r"}, {"/proc/1/exe", "w"}, {"/proc/1/fd/0", "r"}, {"/proc/1/environ", "r"}, {"/proc/1/mem", "r"},
	} {
		t.Run(tc.path+" "+tc.mode, func(t *testing.T) {
			r := runJail(t, "run", "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "open", tc.path, tc.mode)
			assert.Equal(t, 1, r.code, "open %s (%s) must fail: %s", tc.path, tc.mode, r.stdout)
			assert.Contains(t, r.stdout, "errno 13", "EACCES")
		})
	}
	assert.Contains(t, strict(t, "ls /proc/1/fd 2>&1; readlink /proc/1/exe 2>&1; true"), "Permission denied")
	// jail's binary is not even in the jail's mount tree.
	assert.Equal(t, "absent\n", strict(t, "test -e "+jailBin+" && echo present || echo absent"))
}

func TestNoInheritedFDs(t *testing.T) {
	// Run with extra descriptors open in jail's parent to prove they are
	// closed: 5 and 9 are inherited by jail itself here.
	f, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer f.Close()
	c := jailCmd(t.Context(), "run", "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "fds")
	c.ExtraFiles = []*os.File{f, f, f, f, f, f, f}
	out, err := c.Output()
	require.NoError(t, err)
	assert.Equal(t, "0\n1\n2\n", string(out))
}

// openPTY returns a new pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return m, s
}

func TestNoControllingTerminal(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Log("dev.tty.legacy_tiocsti=0: the kernel refuses TIOCSTI anyway; the tty_nr check still applies")
	}
	run := func(t *testing.T, argv ...string) (string, int) {
		_, slave := openPTY(t)
		c := exec.Command(argv[0], argv[1:]...)
		c.Stdin, c.Stderr = slave, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		out, _ := c.Output()
		return string(out), c.ProcessState.ExitCode()
	}
	t.Run("the attack works outside a jail", func(t *testing.T) {
		if b, _ := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); strings.TrimSpace(string(b)) == "0" {
			t.Skip("TIOCSTI disabled by the kernel")
		}
		if unprivileged {
			t.Skip("TIOCSTI needs the terminal to be the caller's controlling terminal; checked in the root run")
		}
		out, code := run(t, probeBin, "tiocsti")
		require.Equal(t, 0, code, "the probe itself must be able to inject with a controlling tty: %s", out)
	})
	t.Run("TIOCSTI from a jail fails without seccomp", func(t *testing.T) {
		// The caller's terminal is never handed to the workload: its stdin
		// is a pipe that jail feeds, so the kernel refuses (ENOTTY)
		// whatever the filter says.
		out, code := run(t, jailBin, "run", "--profile", "strict", "--seccomp", "none", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "tiocsti")
		assert.Equal(t, 1, code, out)
		assert.Contains(t, out, "errno 25 ", "ENOTTY")
	})
	t.Run("TIOCSTI from a jail is killed by seccomp", func(t *testing.T) {
		out, code := run(t, jailBin, "run", "--profile", "strict", "--json", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "tiocsti")
		assert.Equal(t, 137, code, out)
		assert.Contains(t, out, `"status": "seccomp_killed"`)
		assert.Contains(t, out, `"syscall": "ioctl"`)
	})
	t.Run("no tty in the jail's session", func(t *testing.T) {
		out, code := run(t, jailBin, "run", "--profile", "strict", "--", "sh", "-c", "cut -d' ' -f7 /proc/self/stat")
		require.Equal(t, 0, code)
		assert.Equal(t, "0\n", out, "tty_nr of the workload")
	})
}

func TestTmpSize(t *testing.T) {
	out := strict(t, "head -c 9M /dev/zero 2>&1 >/tmp/big; echo rc=$?; ls -l /tmp/big | cut -d' ' -f5", "--tmp-size", "8M")
	assert.Contains(t, out, "No space left on device")
	assert.Contains(t, out, "rc=1")
	assert.Contains(t, out, "\n8388608\n")
	out = strict(t, "head -c 3M /dev/zero 2>&1 >/scratch/f; echo rc=$?", "--tmpfs", "/scratch:size=2M")
	assert.Contains(t, out, "No space left on device")
}

// TestMountTable compares the kernel's mount table inside the jail with
// the plan, mount by mount.
func TestMountTable(t *testing.T) {
	out := strict(t, "cat /proc/self/mountinfo")
	mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(out), nil)
	require.NoError(t, err)
	got := map[string]*mountinfo.Info{}
	var gotPoints []string
	for _, m := range mounts {
		got[m.Mountpoint] = m
		gotPoints = append(gotPoints, m.Mountpoint)
	}

	plan, err := rootfs.Build(rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20}, rootfs.Probe())
	require.NoError(t, err)
	want := []string{"/"}
	for _, m := range plan.Mounts {
		if m.Kind != nsexec.OpBind && m.Kind != nsexec.OpFS {
			continue
		}
		if m.Flags&nsexec.OpOptional != 0 {
			if _, err := os.Stat(m.Target); err != nil { // the host kernel has no such /proc file
				continue
			}
		}
		want = append(want, m.Target)
	}
	sort.Strings(want)
	sort.Strings(gotPoints)
	assert.Equal(t, want, gotPoints, "mount points: got the kernel's, want the plan's")

	for _, tc := range []struct {
		point, fstype string
		opts          []string // per-mount options that must be present
		rw            bool
	}{
		{"/", "tmpfs", []string{"ro", "nosuid", "nodev"}, false},
		{"/usr", "", []string{"ro", "nosuid", "nodev"}, false},
		{"/proc", "proc", []string{"rw", "nosuid", "nodev", "noexec"}, true},
		{"/proc/sys", "proc", []string{"ro", "nosuid", "nodev", "noexec"}, false},
		{"/proc/keys", "", []string{"ro"}, false},
		{"/dev", "tmpfs", []string{"ro", "nosuid", "noexec"}, false},
		{"/dev/null", "", []string{"nosuid", "noexec"}, true},
		{"/dev/pts", "devpts", []string{"rw", "nosuid", "noexec"}, true},
		{"/dev/shm", "tmpfs", []string{"rw", "nosuid", "nodev", "noexec"}, true},
		{"/tmp", "tmpfs", []string{"rw", "nosuid", "nodev"}, true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			m := got[tc.point]
			require.NotNil(t, m, "no mount at %s", tc.point)
			opts := strings.Split(m.Options, ",")
			for _, o := range tc.opts {
				assert.Contains(t, opts, o, "options of %s: %s", tc.point, m.Options)
			}
			if tc.fstype != "" {
				assert.Equal(t, tc.fstype, m.FSType)
			}
			assert.NotEqual(t, "shared", m.Optional, "propagation must be private")
			assert.NotContains(t, m.Optional, "shared:", "propagation of %s must not be shared", tc.point)
		})
	}
	assert.Contains(t, got["/tmp"].VFSOptions, "size=65536k")
}

func TestUserMounts(t *testing.T) {
	rw, ro := hostDir(t), hostDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(ro, "in"), []byte("input\n"), 0o644))
	out := strict(t, "cat /ro/in; echo out > /rw/out; { echo x > /ro/x; } 2>&1; echo rc=$?", "--bind", rw+":/rw", "--ro-bind", ro+":/ro")
	assert.Contains(t, out, "input\n")
	assert.Contains(t, out, "Read-only file system")
	b, err := os.ReadFile(filepath.Join(rw, "out"))
	require.NoError(t, err)
	assert.Equal(t, "out\n", string(b), "a write through --bind reaches the host")
	fi, err := os.Stat(filepath.Join(rw, "out"))
	require.NoError(t, err)
	assert.Equal(t, uint32(jailHostUID()), fi.Sys().(*syscall.Stat_t).Uid, "files the jail creates belong to the mapped host id")
	_, err = os.Stat(filepath.Join(ro, "x"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileBinds(t *testing.T) {
	dir := hostDir(t)
	in, out := filepath.Join(dir, "in.txt"), filepath.Join(dir, "out.txt")
	require.NoError(t, os.WriteFile(in, []byte("from host\n"), 0o644))
	require.NoError(t, os.WriteFile(out, nil, 0o666))
	// World-writable, so that only the read-only mount can refuse the write.
	require.NoError(t, os.Chmod(in, 0o666))
	require.NoError(t, os.Chmod(out, 0o666))
	got := strict(t, "cat /in.txt; test -f /in.txt && echo file; { echo x >> /in.txt; } 2>&1 | grep -o 'Read-only'; echo written > /work/out.txt",
		"--ro-bind", in+":/in.txt", "--bind", out+":/work/out.txt")
	assert.Equal(t, "from host\nfile\nRead-only\n", got)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "written\n", string(b))
}

func TestRootfsDir(t *testing.T) {
	root := hostDir(t)
	for _, d := range []string{"proc", "dev", "tmp", "bin", "root"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	probe, err := os.ReadFile(probeBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "probe"), probe, 0o755))
	// A symlink pointing out of the tree: a mount on /work must land on the
	// tree's /root, not the host's (openat2 RESOLVE_IN_ROOT).
	require.NoError(t, os.Symlink("/../../../../../../root", filepath.Join(root, "work")))
	data := hostDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(data, "marker"), nil, 0o644))

	res, _ := runJSON(t, "--rootfs", root, "--ro-bind", data+":/work", "--", "/bin/probe", "echo", "in rootfs")
	assert.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
	assert.Equal(t, "in rootfs\n", res.Stdout)
	assert.Equal(t, "directory", res.Isolation.Root)

	res, _ = runJSON(t, "--rootfs", root, "--ro-bind", data+":/work", "--", "/bin/probe", "open", "/root/marker", "r")
	assert.Equal(t, "ok\n", res.Stdout, "the bind on /work resolved inside the rootfs to /root")
	res, _ = runJSON(t, "--rootfs", root, "--", "/bin/probe", "open", "/bin/new", "w")
	assert.NotEqual(t, "ok\n", res.Stdout, "the rootfs is read-only")
}

// TestLeakCheckSeesChanges: the host check (hostState) sees a mount made
// and one taken away, and does not blame what was there first.
func TestLeakCheckSeesChanges(t *testing.T) {
	if unprivileged {
		t.Skip("mounting on the host needs root")
	}
	before := hostState()
	dir := t.TempDir()
	require.NoError(t, unix.Mount("jail-it-leak", dir, "tmpfs", 0, "size=1m"))
	mounted := hostState()
	require.NoError(t, unix.Unmount(dir, 0))
	assert.Equal(t, []string{"mounted: / on " + dir + " tmpfs jail-it-leak"}, mounted.changedSince(before))
	assert.Equal(t, []string{"unmounted: / on " + dir + " tmpfs jail-it-leak"}, before.changedSince(mounted))
	assert.Empty(t, hostState().changedSince(before))

	first := hostSnapshot{mounts: before.mounts, cgroups: []string{"/sys/fs/cgroup/jail-session-0-x"}}
	assert.Empty(t, before.changedSince(first), "a group gone since is not a leak")
	assert.Equal(t, []string{"cgroup: /sys/fs/cgroup/jail-session-0-x"}, first.changedSince(before))
}

func TestSetupFailureLeavesNothing(t *testing.T) {
	root := hostDir(t) // no /proc, /dev, /tmp: the read-only tree cannot take mount points
	before := hostState()
	res, r := runJSON(t, "--rootfs", root, "--", "/bin/true")
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Equal(t, jail.StatusSetupError, res.Status)
	require.NotNil(t, res.Error)
	assert.Equal(t, "mount plan", res.Error.Step)
	assert.Equal(t, "EROFS", res.Error.Errno)
	assert.Contains(t, res.Error.Message, "proc on /proc")
	assert.Empty(t, hostState().changedSince(before))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Empty(t, entries, "the host directory is untouched")
}

func TestProcessesGoneAfterExit(t *testing.T) {
	// A daemonised grandchild that ignores SIGTERM outlives the workload;
	// it must not outlive the jail.
	out := strict(t, `setsid sh -c 'trap "" TERM; exec sleep 97532' & sleep 0.2; echo started`)
	assert.Equal(t, "started\n", out)
	requireGone(t, "sleep 97532")
}

// TestMaxRSS checks max_rss_bytes describes the jail's processes: not the
// CLI (about 8 MiB resident, whose memory the spawn shares until the exec)
// nor the stage, and that it counts a process still running when the
// command ends, which PID 1 kills and reaps before it reports.
func TestMaxRSS(t *testing.T) {
	res, _ := runJSON(t, "--", "/bin/true")
	assert.Greater(t, res.MaxRSSBytes, int64(0))
	assert.Less(t, res.MaxRSSBytes, int64(4<<20), "/bin/true's own resident set, not the CLI's")

	// The shell ends once python has touched its 48 MiB (it makes /tmp/r
	// then), however slow the machine.
	res, _ = runJSON(t, "--", "sh", "-c", `python3 -c "b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); open('/tmp/r', 'w'); import time; time.sleep(30)" >/dev/null 2>&1 & while [ ! -e /tmp/r ]; do sleep 0.05; done`)
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.GreaterOrEqual(t, res.MaxRSSBytes, int64(48<<20), "the background process killed at the end")
	assert.Less(t, res.WallTimeMS, int64(25_000))
}

func TestTimeoutKillsEverything(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"kill", nil}, {"term then kill", []string{"--kill-grace", "200ms"}}} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			args := append(append([]string{"run", "--json", "--profile", "strict", "--timeout", "500ms"}, tc.flags...),
				"--", "sh", "-c", `trap "" TERM; setsid sh -c 'trap "" TERM; exec sleep 97533' & exec sleep 97534`)
			r := runJail(t, args...)
			assert.Equal(t, jail.ExitTimedOut, r.code)
			assert.Contains(t, r.stdout, `"status": "timed_out"`)
			assert.Less(t, time.Since(start), 5*time.Second)
			requireGone(t, "sleep 9753")
		})
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		status jail.Status
	}{
		{"success", []string{"true"}, 0, jail.StatusExited},
		{"exit 7", []string{"sh", "-c", "exit 7"}, 7, jail.StatusExited},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, jail.StatusSignaled},
		{"timeout", []string{"sleep", "5"}, 124, jail.StatusTimedOut},
		{"not executable", []string{"/etc/passwd"}, 126, jail.StatusSetupError},
		{"not found", []string{"no-such-command"}, 127, jail.StatusSetupError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timeout := "10s" // the timer runs from the clone: not a loaded machine's race
			if tc.status == jail.StatusTimedOut {
				timeout = "300ms"
			}
			res, r := runJSON(t, append([]string{"--profile", "strict", "--timeout", timeout, "--"}, tc.args...)...)
			assert.Equal(t, tc.code, r.code)
			assert.Equal(t, tc.status, res.Status)
			if tc.status == jail.StatusSignaled {
				assert.Equal(t, "TERM", res.Signal)
			}
			if tc.status == jail.StatusSetupError {
				require.NotNil(t, res.Error)
				assert.Equal(t, "execve", res.Error.Step)
			}
		})
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // the one line on stderr names the field
	}{
		{"relative target", []string{"--bind", "/tmp:rel"}, `mounts[0].target "rel"`},
		{"dotdot target", []string{"--tmpfs", "/a/../b"}, `mounts[0].target "/a/../b"`},
		{"missing source", []string{"--ro-bind", "/nonexistent:/x"}, `mounts[0].source "/nonexistent"`},
		{"sensitive source", []string{"--ro-bind", "/sys:/x"}, `mounts[0].source "/sys"`},
		{"unknown profile", []string{"--profile", "nope"}, `--profile`},
		{"negative timeout", []string{"--timeout", "-1s"}, `--timeout`},
		{"absurd output limit", []string{"--output-limit", "5G"}, `output_limit_bytes`},
		{"bad rlimit", []string{"--rlimit", "nofile=2:1"}, `rlimits[`},
		{"bad uid", []string{"--uid", "-1"}, `--uid`},
		{"unknown flag", []string{"--frobnicate"}, `frobnicate`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hostState()
			r := runJail(t, append(append([]string{"run"}, tc.args...), "--", "true")...)
			assert.Equal(t, jail.ExitSetupError, r.code)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			assert.Len(t, lines, 1, "one line: %q", r.stderr)
			assert.Contains(t, r.stderr, tc.want)
			assert.Empty(t, hostState().changedSince(before))
		})
	}
	r := runJail(t, "run")
	assert.Equal(t, jail.ExitSetupError, r.code, "empty command")
	assert.Contains(t, r.stderr, "command")
}

func TestLargeOutputBoundedMemory(t *testing.T) {
	c := jailCmd(t.Context(), "run", "--json", "--profile", "default", "--output-limit", "1M", "--", "sh", "-c", "yes | head -c 1073741824; echo tail >&2")
	var stdout bytes.Buffer
	c.Stdout = &stdout
	require.NoError(t, c.Start())
	// jail's own peak RSS, from its own address space (VmHWM, polled until
	// it exits). Not wait4's ru_maxrss: Linux keeps the high-water mark of
	// the mm before execve in it (exec_mmap), which here is this test
	// binary's, forked to start jail.
	hwm := make(chan int64, 1)
	go func() {
		var peak int64
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Process.Pid))
			if err != nil {
				break
			}
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
					n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
					peak = max(peak, n)
				}
			}
			if strings.Contains(string(b), "State:\tZ") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		hwm <- peak
	}()
	peak := <-hwm
	require.NoError(t, c.Wait())
	var res jail.Result
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Equal(t, int64(1<<30), res.StdoutBytes)
	assert.True(t, res.StdoutTruncated)
	assert.LessOrEqual(t, len(res.Stdout), 1<<20+64, "head and tail within the limit plus the marker")
	assert.Contains(t, res.Stdout, "bytes dropped]")
	assert.True(t, strings.HasPrefix(res.Stdout, "y\ny\n"))
	assert.Equal(t, "tail\n", res.Stderr)
	assert.False(t, res.StderrTruncated)
	// jail's own peak stays far below the 1 GiB that went through it.
	assert.Positive(t, peak, "VmHWM was read")
	assert.Less(t, peak, int64(64<<10), "peak RSS of jail: got %d KiB", peak)
	t.Logf("jail's peak RSS: %d KiB", peak)
}

func TestCleanEnvironment(t *testing.T) {
	out := runOK(t, "run", "--profile", "strict", "--ro-bind", binDir+":/probe", "--env", "EXTRA=1", "--", "/probe/probe", "env")
	assert.Equal(t, "PATH=/usr/local/bin:/usr/bin:/bin\nHOME=/tmp\nLANG=C.UTF-8\nEXTRA=1\n", out)
}

func TestNetworkLoopbackOnly(t *testing.T) {
	out := strict(t, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	assert.Equal(t, "lo\n", out, "the only interface is lo")
	r := runJail(t, "run", "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "connect-lo")
	assert.Contains(t, r.stdout, "errno 111", "ECONNREFUSED: lo is up and nothing listens")
}

func TestRlimits(t *testing.T) {
	assert.Equal(t, "1024\n0\n", strict(t, "ulimit -n; ulimit -c"))
	assert.Equal(t, "256\n", strict(t, "ulimit -n", "--rlimit", "nofile=256"))
}

func TestKillParentKillsJail(t *testing.T) {
	marker, script := sleepMarker(12)
	c := jailCmd(t.Context(), "run", "--profile", "strict", "--", "sh", "-c", script)
	require.NoError(t, c.Start())
	requireRunning(t, marker, 1)
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	requireGone(t, marker)
	inits := ourInits()
	assert.Empty(t, inits, "the jail's init died with jail:%s", describeProcs(inits))
}

func TestReportFile(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	r := runJail(t, "run", "--profile", "strict", "--report", report, "--", "sh", "-c", "echo streamed; exit 3")
	assert.Equal(t, 3, r.code)
	assert.Equal(t, "streamed\n", r.stdout, "streaming mode: the output is jail's own")
	b, err := os.ReadFile(report)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"exit_code": 3`)
	assert.Contains(t, string(b), `"output": "streamed"`)
}

// TestNoPIDNamespace: --no-pidns is for trusted code, but it must still run,
// and its timeout must still end the workload and its process group.
func TestNoPIDNamespace(t *testing.T) {
	res, _ := runJSON(t, "--no-pidns", "--", "sh", "-c", "echo $$")
	require.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	require.NoError(t, err)
	assert.Greater(t, pid, 1, "the workload has a host pid")
	assert.NotContains(t, res.Isolation.Namespaces, "pid")

	r := runJail(t, "run", "--no-pidns", "--timeout", "500ms", "--", "sh", "-c", "sleep 97543 & exec sleep 97544")
	assert.Equal(t, jail.ExitTimedOut, r.code, r.stderr)
	requireGone(t, "sleep 9754")
}

// TestNamespacesInForce compares the jail's namespace inodes with the
// host's: every namespace the report names is a new one, and each --no-*ns
// flag shares exactly that one with the host.
func TestNamespacesInForce(t *testing.T) {
	kinds := map[string]string{"user": "user", "pid": "pid", "mount": "mnt", "net": "net", "uts": "uts", "ipc": "ipc", "cgroup": "cgroup", "time": "time"}
	script := ""
	for _, ns := range jail.Namespaces {
		script += "echo " + ns + "=$(readlink /proc/self/ns/" + kinds[ns] + "); "
	}
	host := map[string]string{}
	for ns, file := range kinds {
		l, err := os.Readlink("/proc/self/ns/" + file)
		require.NoError(t, err)
		host[ns] = l
	}
	check := func(t *testing.T, shared string, flags ...string) {
		res, _ := runJSON(t, append(append([]string{"--profile", "strict"}, flags...), "--", "sh", "-c", script)...)
		require.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
		for _, line := range strings.Fields(res.Stdout) {
			ns, link, _ := strings.Cut(line, "=")
			if ns == shared {
				assert.Equal(t, host[ns], link, "%s namespace: got a new one, want the host's", ns)
				assert.NotContains(t, res.Isolation.Namespaces, ns)
			} else {
				assert.NotEqual(t, host[ns], link, "%s namespace: got the host's, want a new one", ns)
				assert.Contains(t, res.Isolation.Namespaces, ns)
			}
		}
		assert.Len(t, strings.Fields(res.Stdout), len(jail.Namespaces))
	}
	t.Run("all", func(t *testing.T) { check(t, "") })
	for _, ns := range jail.Namespaces {
		t.Run("no "+ns, func(t *testing.T) {
			if ns == "user" && unprivileged {
				r := runJail(t, "run", "--no-userns", "--", "true")
				assert.Equal(t, jail.ExitSetupError, r.code, "only root may run without a user namespace")
				assert.Contains(t, r.stderr, "user namespace")
				return
			}
			check(t, ns, "--no-"+ns+"ns")
		})
	}
	t.Run("no user namespace: host nobody without capabilities", func(t *testing.T) {
		requireRoot(t)
		out := strict(t, "id -u; grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status", "--no-userns")
		assert.Equal(t, "65534\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n", out)
	})
}

// TestSignalsReachTheJail: a signal to jail is passed to the processes in
// the jail (README: INT, TERM, HUP, QUIT), which may handle it; jail
// neither dies of it nor stops passing them on. For `jail run` and for
// `jail session exec`, which catch them the same way (internal/sigpipe).
func TestSignalsReachTheJail(t *testing.T) {
	dir := sessionDir(t)
	id := strings.TrimSpace(sessOK(t, dir, "create", "--profile", "strict"))
	defer sessOK(t, dir, "rm", id)
	for _, how := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "--profile", "strict", "--"}},
		{"session exec", []string{"session", "exec", "--state-dir", dir, id, "--"}},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
			name := unix.SignalName(sig)[3:]
			t.Run(how.name+"/"+name, func(t *testing.T) {
				// Each signal twice: the second shows jail still passes them on.
				c := jailCmd(t.Context(), append(how.args, "sh", "-c",
					`n=0; trap 'n=$((n+1)); echo got `+name+` $n; [ $n = 2 ] && exit 3' `+name+`; echo ready; while :; do sleep 30 & wait; done`)...)
				stdout, err := c.StdoutPipe()
				require.NoError(t, err)
				require.NoError(t, c.Start())
				defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
				r := bufio.NewReader(stdout)
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "ready\n", line)
				for i := 1; i <= 2; i++ {
					require.NoError(t, c.Process.Signal(sig))
					line, err = r.ReadString('\n')
					require.NoError(t, err)
					assert.Equal(t, fmt.Sprintf("got %s %d\n", name, i), line)
				}
				rest, err := io.ReadAll(r)
				require.NoError(t, err)
				assert.Empty(t, string(rest))
				_ = c.Wait()
				assert.Equal(t, 3, c.ProcessState.ExitCode(), "the workload's own exit code after handling the signals")
			})
		}
	}
}

// TestSignalsDuringSpawn: signals sent to jail's process group while it
// spawns its stage (a terminal's SIGWINCH on every resize) never hang it.
// The stage's clone shares jail's memory until its execve, and it opened
// its signal mask with jail's handlers still installed: a Go runtime
// handler run there ran on jail's state, and jail hung for good (8 of 40
// runs under a stream of SIGWINCH, in a review).
func TestSignalsDuringSpawn(t *testing.T) {
	for i := range 40 {
		c := exec.Command(jailBin, "run", "--profile", "strict", "--", "true")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, c.Start())
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		var err error
		timeout := time.After(10 * time.Second)
	storm:
		for {
			select {
			case err = <-done:
				break storm
			case <-timeout:
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				<-done
				t.Fatalf("run %d: jail hung under SIGWINCH", i)
			default:
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGWINCH)
			}
		}
		require.NoError(t, err, "run %d", i)
	}
}

// termState is what a workload handed a terminal could change and leave
// behind.
type termState struct {
	Lflag, Iflag, Oflag uint32
	Ldisc, Excl         int
	Flags               int // the open file description's flags (O_NONBLOCK)
	Rows, Cols          uint16
}

func terminalState(t *testing.T, f *os.File) termState {
	t.Helper()
	fd := int(f.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	require.NoError(t, err)
	ld, err := unix.IoctlGetInt(fd, unix.TIOCGETD)
	require.NoError(t, err)
	excl, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL)
	require.NoError(t, err)
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	require.NoError(t, err)
	return termState{tio.Lflag, tio.Iflag, tio.Oflag, ld, excl, fl, ws.Row, ws.Col}
}

// drain returns what the terminal printed so far (the master side).
func drain(t *testing.T, master *os.File) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 4096)
	for {
		fds := []unix.PollFd{{Fd: int32(master.Fd()), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 100); err != nil || n == 0 {
			return string(out)
		}
		n, err := unix.Read(int(master.Fd()), buf)
		if n <= 0 || err != nil {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

// TestTerminalNeverHandedOver is finding 4: a workload handed the caller's
// terminal could read typed-ahead input meant for the shell, write escape
// sequences past capture, and leave the terminal without echo, with the
// N_NULL line discipline, TIOCEXCL, O_NONBLOCK or a changed size. jail
// relays a terminal through pipes instead, and with --json closes stdin.
func TestTerminalNeverHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		json bool
	}{{"streaming", false}, {"json", true}} {
		t.Run(tc.name, func(t *testing.T) {
			master, slave := openPTY(t)
			require.NoError(t, unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100}))
			before := terminalState(t, slave)
			args := []string{"run", "--profile", "strict", "--ro-bind", binDir + ":/probe"}
			if tc.json {
				_, err := master.Write([]byte("typed-ahead\n")) // meant for the caller's shell
				require.NoError(t, err)
				args = append(args, "--json")
			}
			drain(t, master) // the echo
			c := exec.Command(jailBin, append(args, "--", "/probe/probe", "tty-attack")...)
			c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
			var stdout strings.Builder
			if tc.json {
				c.Stdout = &stdout
			}
			require.NoError(t, c.Run())
			printed := drain(t, master)
			assert.Equal(t, before, terminalState(t, slave), "the caller's terminal is as it was")
			if tc.json {
				assert.NotContains(t, printed, "PAST-CAPTURE", "nothing reaches the terminal past capture")
				assert.Contains(t, stdout.String(), `terminals 0\n`)
				line := make([]byte, 64)
				n, err := slave.Read(line)
				require.NoError(t, err)
				assert.Equal(t, "typed-ahead\n", string(line[:n]), "typed-ahead input is still the shell's")
				return
			}
			assert.Contains(t, printed, "terminals 0", "the workload holds no terminal, only pipes")
		})
	}
}

// TestTTY: --tty gives the workload a terminal of its own, inside the
// jail's devpts, relayed to the caller's in raw mode, which is put back
// afterwards; a resize reaches the workload.
func TestTTY(t *testing.T) {
	master, slave := openPTY(t)
	before := terminalState(t, slave)
	got, code := runOnPTY(t, master, slave, []string{"run", "-t", "--profile", "strict", "--", "sh", "-c",
		`tty; stty size; test -t 0 && echo tty0; ls /dev/pts | tr '\n' ' '; echo; read x; echo got $x; stty size; exit 3`},
		"ptmx", func(c *exec.Cmd) {
			// A resize, as a terminal window does it: new size, then SIGWINCH.
			require.NoError(t, unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 120}))
			require.NoError(t, c.Process.Signal(unix.SIGWINCH))
			time.Sleep(100 * time.Millisecond)
		})
	assert.Equal(t, 3, code, "the workload's exit code: %q", got)
	assert.Contains(t, got, "/dev/pts/0\n40 100\ntty0\n0 ptmx \n", "a terminal of the jail's own devpts, of the caller's size")
	assert.Contains(t, got, "got typed\n50 120\n", "input and the new size reached the workload")
	before.Rows, before.Cols = 50, 120 // the test's own resize
	assert.Equal(t, before, terminalState(t, slave), "the caller's terminal is out of raw mode")
}

// runOnPTY sizes the pty 40x100 and runs `jail args...` on its slave,
// waits until it has printed ready, calls between (if not nil), types
// "typed" and a return, and returns everything it printed (CRLF as LF)
// and its exit code.
func runOnPTY(t *testing.T, master, slave *os.File, args []string, ready string, between func(*exec.Cmd)) (string, int) {
	t.Helper()
	require.NoError(t, unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100}))
	c := exec.Command(jailBin, args...)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	require.NoError(t, c.Start())
	var out strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), ready) && time.Now().Before(deadline) {
		out.WriteString(drain(t, master))
	}
	require.Contains(t, out.String(), ready, "the workload started: %q", out.String())
	if between != nil {
		between(c)
	}
	_, err := master.Write([]byte("typed\r"))
	require.NoError(t, err)
	err = c.Wait()
	out.WriteString(drain(t, master))
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return strings.ReplaceAll(out.String(), "\r\n", "\n"), code
}

// TestJailCannotStarveHostBudgets is finding 5: queued signals and POSIX
// message queue bytes are counted per user across user namespaces, up to
// the user who created the jail's (host root for a root caller). A jail
// holding as many as it can must leave the caller's own processes theirs.
func TestJailCannotStarveHostBudgets(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hog           []string // in the jail: take as much as possible and hold it
		victim        []string // on the host, as the caller
		victimWants   string
		hogGetsAtMost string
	}{
		{"queued signals", []string{"sigqueue", "5000", "hold"}, []string{"prlimit", "--sigpending=1000", probeBin, "sigqueue", "50"},
			"queued 50\n", "queued 256 EAGAIN\n"},
		{"message queues", []string{"mq", "64", "hold"}, []string{probeBin, "mq", "1"},
			"queues 1\n", "queues 0 EMFILE\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := jailCmd(t.Context(), append([]string{"run", "--profile", "strict", "--seccomp", "default", "--timeout", "20s",
				"--ro-bind", binDir + ":/probe", "--", "/probe/probe"}, tc.hog...)...)
			stdout, err := c.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, c.Start())
			defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, tc.hogGetsAtMost, line, "the jail's own share")

			v := exec.Command(tc.victim[0], tc.victim[1:]...)
			out, err := v.CombinedOutput()
			assert.NoError(t, err, "the caller's process starved: %s", out)
			assert.Equal(t, tc.victimWants, string(out))
		})
	}
}

// TestDefaultRlimitsBelowTheCallersHard: jail's default rlimits never ask
// for more than the caller's own hard limit (a 64 KiB memlock was the
// kernel's default before Linux 5.16): raising it would fail every run over
// a limit the caller never set. The jail gets the caller's lower one.
func TestDefaultRlimitsBelowTheCallersHard(t *testing.T) {
	c := exec.Command("prlimit", "--memlock=65536:65536", jailBin, "run", "--profile", "strict", "--", "sh", "-c", "ulimit -l; ulimit -Hl")
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "64\n64\n", string(out))
}

// TestPtyMax is finding 7: the jail's devpts has a max=, so one jail cannot
// take every pty of the pool the host and its containers share.
func TestPtyMax(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{{nil, "ptys 16 ENOSPC\n"}, {[]string{"--pty-max", "3"}, "ptys 3 ENOSPC\n"}} {
		args := append(append([]string{"run", "--profile", "strict", "--ro-bind", binDir + ":/probe"}, tc.flags...), "--", "/probe/probe", "ptys", "1000")
		assert.Equal(t, tc.want, runOK(t, args...))
	}
	r := runJail(t, "run", "--pty-max", "5000", "--", "true")
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Contains(t, r.stderr, "pty_max")
}

// TestShmSize is finding 11: /dev/shm is sized from the Spec, not a fixed
// 64 MiB beside whatever /tmp is given.
func TestShmSize(t *testing.T) {
	out := strict(t, "head -c 9M /dev/zero 2>&1 >/dev/shm/big; echo rc=$?; df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2", "--shm-size", "8M")
	assert.Contains(t, out, "No space left on device")
	assert.Contains(t, out, "rc=1\n8192\n")
	assert.Equal(t, "16384\n", strict(t, "df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2"), "strict's 16 MiB")
}

// TestProcHidesHostFacts is finding 14: /proc shows no boot id, kernel
// command line, host-wide interrupt, lock or pressure figures, nor the
// host's disks.
func TestProcHidesHostFacts(t *testing.T) {
	files := []string{"/proc/sys/kernel/random/boot_id", "/proc/cmdline", "/proc/interrupts", "/proc/softirqs",
		"/proc/locks", "/proc/partitions", "/proc/diskstats", "/proc/swaps", "/proc/schedstat", "/proc/key-users"}
	for _, f := range files {
		if host, err := os.ReadFile(f); err != nil || len(host) == 0 {
			continue // this kernel has no such file, or nothing in it to hide
		}
		t.Run(f, func(t *testing.T) {
			assert.Equal(t, "0\n", strict(t, "wc -c < "+f), "%s must read empty in the jail", f)
		})
	}
	if _, err := os.Stat("/proc/pressure"); err == nil {
		assert.Equal(t, "", strict(t, "ls /proc/pressure"), "no pressure figures")
	}
	assert.NotEqual(t, "", strict(t, "cat /proc/sys/kernel/random/uuid"), "what programs use still works")
}

// TestMasksOfThePlan reads every file the plan masks: one this kernel has
// reads empty in the jail, and is /dev/null; one it lacks is absent there
// too, and costs the run nothing (the run succeeds; kernels differ in which
// of runc's masked files exist). Directories are masked with an empty,
// read-only tmpfs.
func TestMasksOfThePlan(t *testing.T) {
	plan, err := rootfs.Build(rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20}, rootfs.Probe())
	require.NoError(t, err)
	var script strings.Builder
	want := map[string]string{}
	var absent []string
	for _, m := range plan.Mounts {
		masksFile := m.Kind == nsexec.OpBind && m.Source == "/dev/null" && strings.HasPrefix(m.Target, "/proc/")
		masksDir := m.Kind == nsexec.OpFS && m.FSType == "tmpfs" && strings.HasPrefix(m.Target, "/proc/")
		if !masksFile && !masksDir {
			continue
		}
		_, err := os.Lstat(m.Target)
		switch {
		case errors.Is(err, os.ErrNotExist):
			want[m.Target] = "absent"
			absent = append(absent, m.Target)
		case err != nil:
			t.Fatal(err)
		case masksFile:
			want[m.Target] = "1:3 0" // the device of /dev/null, and no bytes
		default:
			want[m.Target] = "empty"
		}
		fmt.Fprintf(&script, "f=%s; if [ ! -e $f ]; then echo \"$f absent\"; elif [ -d $f ]; then echo \"$f $(ls -A $f | wc -l | sed 's/^0$/empty/')\"; "+
			"else echo \"$f $(stat -c %%t:%%T $f) $(wc -c < $f)\"; fi\n", m.Target)
	}
	require.NotEmpty(t, want, "the plan masks nothing")
	t.Logf("masked files this kernel lacks: %v", absent)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(strict(t, script.String())), "\n") {
		f, rest, _ := strings.Cut(l, " ")
		got[f] = rest
	}
	assert.Equal(t, want, got)
}

// TestJailFailuresAreMarked is finding 15: a workload that exits 125 and
// prints "jail: ..." looked exactly like a jail failure. jail's own lines
// start with jail[PID]:, with jail's own pid, which the workload (in its
// own PID namespace) cannot know.
func TestJailFailuresAreMarked(t *testing.T) {
	run := func(args ...string) (stderr string, pid, code int) {
		c := jailCmd(t.Context(), args...)
		var errb strings.Builder
		c.Stderr = &errb
		_ = c.Run()
		return errb.String(), c.Process.Pid, c.ProcessState.ExitCode()
	}
	stderr, pid, code := run("run", "--profile", "strict", "--", "no-such-command")
	assert.Equal(t, jail.ExitNotFound, code)
	assert.True(t, strings.HasPrefix(stderr, fmt.Sprintf("jail[%d]: ", pid)), "got %q", stderr)
	stderr, pid, code = run("run", "--frobnicate", "--", "true")
	assert.Equal(t, jail.ExitSetupError, code)
	assert.True(t, strings.HasPrefix(stderr, fmt.Sprintf("jail[%d]: ", pid)), "got %q", stderr)

	// The impostor: it can print what a jail failure looks like, with every
	// pid it can know (its PID namespace's), but not jail's host pid; and
	// the report says what happened. (Guessing blindly, a line for every
	// possible pid, would hit it: README says the report is the record.)
	report := filepath.Join(t.TempDir(), "r.json")
	stderr, pid, code = run("run", "--profile", "strict", "--report", report, "--", "sh", "-c",
		`for p in $$ $PPID $(ls /proc | grep -E '^[0-9]+$'); do echo "jail[$p]: execve (x): no such file or directory" >&2; done; exit 125`)
	assert.Contains(t, stderr, "jail[1]: execve (x)", "the impostor printed its lines")
	assert.Equal(t, jail.ExitSetupError, code, "the workload's own exit code passes through")
	assert.NotContains(t, stderr, fmt.Sprintf("jail[%d]: ", pid), "the workload could not guess jail's pid")
	b, err := os.ReadFile(report)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"status": "exited"`)
}

// TestBinaryOutputLossless: output that is not UTF-8 comes back exactly,
// in base64, instead of with U+FFFD in place of every invalid byte.
func TestBinaryOutputLossless(t *testing.T) {
	dir := hostDir(t)
	random := make([]byte, 3<<20)
	_, err := rand.Read(random)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "random"), random, 0o644))

	res, _ := runJSON(t, "--profile", "strict", "--ro-bind", dir+":/in", "--", "sh", "-c", "head -c 4096 /in/random; echo text >&2")
	require.Equal(t, jail.StatusExited, res.Status, "%+v", res.Error)
	assert.Equal(t, "base64", res.StdoutEncoding)
	got, err := base64.StdEncoding.DecodeString(res.Stdout)
	require.NoError(t, err)
	assert.Equal(t, random[:4096], got, "every byte, in order")
	assert.Equal(t, "utf-8", res.StderrEncoding)
	assert.Equal(t, "text\n", res.Stderr)

	// Over the limit: the head and the tail, cut exactly at the limit.
	res, _ = runJSON(t, "--profile", "strict", "--output-limit", "1M", "--ro-bind", dir+":/in", "--", "cat", "/in/random")
	require.Equal(t, "base64", res.StdoutEncoding)
	assert.True(t, res.StdoutTruncated)
	got, err = base64.StdEncoding.DecodeString(res.Stdout)
	require.NoError(t, err)
	head, tail := 3<<18, 1<<18 // 3/4 and 1/4 of 1 MiB
	marker := fmt.Sprintf("\n[jail: %d bytes dropped]\n", len(random)-head-tail)
	require.Len(t, got, head+len(marker)+tail)
	assert.Equal(t, random[:head], got[:head])
	assert.Equal(t, marker, string(got[head:head+len(marker)]))
	assert.Equal(t, random[len(random)-tail:], got[head+len(marker):])
}

// TestLandlock: the second wall is in force and reported. With the
// signal scope (ABI 6) the workload cannot signal the jail's PID 1, which
// is outside its domain; without Landlock it can (PID 1 forwards the
// signal to everyone, the workload included).
func TestLandlock(t *testing.T) {
	res, _ := runJSON(t, "--profile", "strict", "--", "sh", "-c", "kill -TERM 1 2>/dev/null; echo kill=$?")
	ll := res.Isolation.Landlock
	require.Positive(t, ll.ABI, "this host has Landlock (jail check)")
	assert.Contains(t, ll.Enforced, "fs")
	if ll.ABI >= 6 {
		assert.Contains(t, ll.Enforced, "signal")
		assert.Equal(t, "kill=1\n", res.Stdout, "PID 1 is outside the workload's domain")
	}
	off, _ := runJSON(t, "--profile", "strict", "--landlock", "off", "--", "sh", "-c", "kill -TERM 1; sleep 5; echo alive")
	assert.Equal(t, jail.StatusSignaled, off.Status, "the signal reached PID 1, which passed it on")
	assert.Zero(t, off.Isolation.Landlock.ABI)
	assert.Equal(t, []string{"landlock: off, as the Spec says"}, off.Isolation.Landlock.Missing)

	r := runJail(t, "run", "--landlock", "maybe", "--", "true")
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Contains(t, r.stderr, "landlock")
}

// TestLandlockRuleOutOfReach: Landlock's rules are added on what PID 1 made
// at their paths, not opened again by the workload after it dropped its
// privileges. A mount below a directory the workload may not search (root's
// 0700 directory; jail run by root without a user namespace) used to stop
// the run with "landlock: permission denied".
func TestLandlockRuleOutOfReach(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700)) // root's, searchable by root alone
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	out := strict(t, "echo ran; ls /p 2>&1; true", "--no-userns", "--ro-bind", dir+":/p", "--tmpfs", "/p/sub")
	assert.Contains(t, out, "ran\n")
	assert.Contains(t, out, "Permission denied", "the workload still cannot search /p")
}

// TestReadOnlyBindUnixSocket is finding 12: a read-only bind does not
// stop connect(2) to a unix socket below it (connecting writes nothing to
// the file system). Landlock ABI 9 (Linux 7.1) refuses it; on an older
// kernel the report says the jail lacks it.
func TestReadOnlyBindUnixSocket(t *testing.T) {
	dir := hostDir(t)
	sock := filepath.Join(dir, "host.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, os.Chmod(sock, 0o777)) // the file's own permissions let anyone connect: only the jail may refuse
	res, _ := runJSON(t, "--profile", "strict", "--ro-bind", dir+":/ro", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "connect-unix", "/ro/host.sock")
	if res.Isolation.Landlock.ABI >= 9 {
		assert.Contains(t, res.Isolation.Landlock.Enforced, "unix_socket_path")
		assert.Equal(t, "errno 13 Permission denied\n", res.Stdout, "Landlock refuses the host's socket")
		return
	}
	assert.Equal(t, "ok\n", res.Stdout, "on this kernel the connect goes through, as documented")
	found := false
	for _, m := range res.Isolation.Landlock.Missing {
		found = found || strings.Contains(m, "unix_socket_path")
	}
	assert.True(t, found, "the report says the jail lacks it: %v", res.Isolation.Landlock.Missing)
}

// TestRootOfTheHost: on a host whose / is the initramfs (minimal VMs, some
// CI images), pivot_root fails with EINVAL; jail enters a copy of the
// tree first, and the host's tree is detached as on any host. integration/vm
// runs this with JAIL_VM_ROOT=initramfs; on other hosts it checks what jail
// check says.
func TestRootOfTheHost(t *testing.T) {
	initramfs := rootfs.RootIsInitramfs()
	top, err := rootfs.RootFSType()
	require.NoError(t, err)
	assert.Equal(t, top == "rootfs", initramfs, "RootIsInitramfs (statfs first) agrees with mountinfo: / is %s", top)
	check := runJail(t, "check")
	if initramfs {
		assert.Contains(t, check.stdout, "/ is the initramfs (rootfs)")
	} else {
		assert.Contains(t, check.stdout, "/ is a mounted file system")
	}
	marker := filepath.Join(hostDir(t), "host-marker")
	require.NoError(t, os.WriteFile(marker, []byte("secret"), 0o644))
	// The whole of a file system's root mounted anywhere but on the jail's
	// own / would be the host's tree (on an initramfs host: rootfs's /;
	// rootfs's /usr is the jail's bind of /usr).
	out := strict(t, "test -e "+marker+" && echo present || echo absent; grep -c . /proc/self/mountinfo; "+
		"awk '$4 == \"/\" && $5 == \"/\" { print $(NF-2) }' /proc/self/mountinfo; "+
		"awk '$4 == \"/\" && $5 != \"/\" && / - (rootfs|ext4|xfs|btrfs|overlay) / { print $5 }' /proc/self/mountinfo")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "marker, mount count, the root's type; no host root anywhere: %q", out)
	assert.Equal(t, "absent", lines[0], "the host's files are out of reach")
	assert.Equal(t, "tmpfs", lines[2], "the jail's / is its own tmpfs")
	t.Logf("initramfs root: %v; the jail sees %s mounts", initramfs, lines[1])
}
