package hostcheck

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/cgroup"
)

func TestParseKernelRelease(t *testing.T) {
	tests := []struct {
		name    string
		release string
		want    kernelVersion
		wantErr bool
	}{
		{name: "ubuntu", release: "6.8.0-45-generic", want: kernelVersion{6, 8}},
		{name: "custom suffix", release: "6.18.44-fc-v657", want: kernelVersion{6, 18}},
		{name: "wsl", release: "5.15.153.1-microsoft-standard-WSL2", want: kernelVersion{5, 15}},
		{name: "rc without patch", release: "6.12-rc1", want: kernelVersion{6, 12}},
		{name: "two parts", release: "5.12", want: kernelVersion{5, 12}},
		{name: "no minor", release: "6", wantErr: true},
		{name: "not a number", release: "linux.x", wantErr: true},
		{name: "empty", release: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKernelRelease(tt.release)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got, "got %v, want %v", got, tt.want)
		})
	}
}

func TestKernelFeature(t *testing.T) {
	tests := []struct {
		name        string
		release     string
		wantVerdict Verdict
		wantFix     string
	}{
		{name: "current", release: "6.18.44-fc-v657", wantVerdict: OK},
		{name: "exactly 5.12", release: "5.12.0", wantVerdict: OK},
		{name: "5.11 lacks mount_setattr", release: "5.11.22", wantVerdict: Missing, wantFix: "upgrade the kernel to 5.12 or later"},
		{name: "4.19", release: "4.19.0-26-amd64", wantVerdict: Missing, wantFix: "upgrade the kernel to 5.12 or later"},
		{name: "unparsable", release: "weird", wantVerdict: Warn, wantFix: "make sure the kernel is 5.12 or later (mount_setattr)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kernelFeature(tt.release)
			assert.Equal(t, nameKernel, got.Name)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assert.Equal(t, tt.wantFix, got.Fix)
			assert.Contains(t, got.Detail, tt.release)
		})
	}
}

func TestOverlayFeature(t *testing.T) {
	for _, tc := range []struct {
		release string
		euid    int
		want    Verdict
		fix     string
	}{
		{"6.18.44-fc-v657", 0, OK, ""},
		{"6.6.0", 0, OK, ""},
		{"6.1.0-26-amd64", 0, Warn, "upgrade the kernel to 6.6 or later"},
		{"6.18.44", 1000, Warn, "run as root"},
		{"weird", 0, Warn, "upgrade the kernel to 6.6 or later"},
	} {
		f := overlayFeature(tc.release, tc.euid)
		assert.Equal(t, nameOverlay, f.Name)
		assert.Equal(t, tc.want, f.Verdict, "%s as %d", tc.release, tc.euid)
		assert.Equal(t, tc.fix, f.Fix, "%s as %d", tc.release, tc.euid)
		assertFixMatchesVerdict(t, f)
	}
}

func TestNamespacesFeature(t *testing.T) {
	tests := []struct {
		name        string
		absent      []string
		wantVerdict Verdict
		wantDetail  string
		wantFix     string
	}{
		{name: "all present", wantVerdict: OK, wantDetail: "all present in /proc/self/ns"},
		{
			name:        "no net or cgroup",
			absent:      []string{"net", "cgroup"},
			wantVerdict: Missing,
			wantDetail:  "not in /proc/self/ns: net, cgroup",
			wantFix:     "use a kernel built with CONFIG_NET_NS=y, CONFIG_CGROUPS=y",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			present := func(ns string) bool {
				for _, a := range tt.absent {
					if a == ns {
						return false
					}
				}
				return true
			}
			got := namespacesFeature(present)
			assert.Equal(t, Feature{Name: nameNamespaces, Verdict: tt.wantVerdict, Detail: tt.wantDetail, Fix: tt.wantFix}, got)
		})
	}
}

func TestTimeNSFeature(t *testing.T) {
	tests := []struct {
		name        string
		present     bool
		wantVerdict Verdict
	}{
		{name: "present", present: true, wantVerdict: OK},
		{name: "absent", present: false, wantVerdict: Warn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := timeNSFeature(tt.present)
			assert.Equal(t, tt.wantVerdict, got.Verdict)
			assertFixMatchesVerdict(t, got)
		})
	}
}

func TestSeccompFeature(t *testing.T) {
	const actions = "kill_process kill_thread trap errno user_notif trace log allow"
	tests := []struct {
		name        string
		facts       seccompFacts
		wantVerdict Verdict
		wantDetail  string
	}{
		{
			name:        "unfiltered with kill_process",
			facts:       seccompFacts{StatusLine: "0", Mode: 0, ActionsAvail: actions},
			wantVerdict: OK,
			wantDetail:  "mode 0; actions " + actions,
		},
		{
			name:        "already filtered",
			facts:       seccompFacts{StatusLine: "2", Mode: 2, ActionsAvail: actions},
			wantVerdict: OK,
			wantDetail:  "mode 2 (this process is already filtered; jail's filter stacks on it); actions " + actions,
		},
		{
			name:        "no killable wait (before Linux 5.19)",
			facts:       seccompFacts{StatusLine: "0", Mode: 0, ActionsAvail: actions, NoWaitKillable: true},
			wantVerdict: Warn,
			wantDetail:  "mode 0; actions " + actions + "; no SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: a signal could make a call the policy kills return EINTR instead, so the default and strict policies are refused (--allow-unenforced runs them without it)",
		},
		{
			name:        "old kernel without kill_process",
			facts:       seccompFacts{StatusLine: "0", ActionsAvail: "kill trap errno trace allow"},
			wantVerdict: Warn,
			wantDetail:  `mode 0; no kill_process in actions "kill trap errno trace allow"`,
		},
		{
			name:        "no actions_avail",
			facts:       seccompFacts{StatusLine: "0", ActionsErr: syscall.ENOENT},
			wantVerdict: Warn,
			wantDetail:  "mode 0; read actions_avail: " + syscall.ENOENT.Error(),
		},
		{
			name:        "no status line",
			facts:       seccompFacts{ActionsAvail: actions},
			wantVerdict: Missing,
			wantDetail:  "no Seccomp line in /proc/self/status",
		},
		{
			name:        "prctl fails",
			facts:       seccompFacts{StatusLine: "0", ModeErr: syscall.EINVAL},
			wantVerdict: Missing,
			wantDetail:  "prctl PR_GET_SECCOMP: " + syscall.EINVAL.Error(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := seccompFeature(tt.facts)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assert.Equal(t, tt.wantDetail, got.Detail)
			assertFixMatchesVerdict(t, got)
		})
	}
}

func TestLandlockFeature(t *testing.T) {
	tests := []struct {
		name        string
		abi         int
		err         error
		wantVerdict Verdict
		wantDetail  string
	}{
		{name: "abi 9", abi: 9, wantVerdict: OK, wantDetail: "ABI v9: the second wall (file rules from the mount plan, signal and socket scopes, unix sockets by path)"},
		{name: "abi 7", abi: 7, wantVerdict: OK, wantDetail: "ABI v7: the second wall (file rules from the mount plan, signal and abstract socket scopes; unix sockets by path need ABI 9, Linux 7.1)"},
		{name: "abi 4", abi: 4, wantVerdict: Warn, wantDetail: "ABI v4: the second wall (file rules from the mount plan; signal and socket scopes need ABI 6, and --landlock require refuses this kernel)"},
		{name: "disabled at boot", err: syscall.EOPNOTSUPP, wantVerdict: Warn, wantDetail: "built in but disabled at boot: jails run without their second wall, and say so"},
		{name: "not built", err: syscall.ENOSYS, wantVerdict: Warn, wantDetail: "not in this kernel: jails run without their second wall, and say so"},
		{name: "other error", err: syscall.EPERM, wantVerdict: Warn, wantDetail: "landlock_create_ruleset: " + syscall.EPERM.Error() + ": jails run without their second wall"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := landlockFeature(tt.abi, tt.err)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assert.Equal(t, tt.wantDetail, got.Detail)
			assertFixMatchesVerdict(t, got)
		})
	}
}

func TestNftablesFeature(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantVerdict Verdict
	}{
		{name: "socket opens", wantVerdict: OK},
		{name: "protocol not supported", err: os.NewSyscallError("socket", syscall.EPROTONOSUPPORT), wantVerdict: Warn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nftablesFeature(tt.err)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assertFixMatchesVerdict(t, got)
		})
	}
}

func TestMountAPIFeature(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantVerdict Verdict
	}{
		{name: "no-op succeeds", wantVerdict: OK},
		{name: "EBADF", err: syscall.EBADF, wantVerdict: OK},
		{name: "EINVAL", err: syscall.EINVAL, wantVerdict: OK},
		{name: "EPERM unprivileged", err: syscall.EPERM, wantVerdict: OK},
		{name: "ENOSYS", err: syscall.ENOSYS, wantVerdict: Missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mountAPIFeature(tt.err)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assertFixMatchesVerdict(t, got)
		})
	}
}

func TestCallerFeature(t *testing.T) {
	tests := []struct {
		name      string
		uid, euid int
		want      string
	}{
		{name: "root", uid: 0, euid: 0, want: "root (jail maps in-jail ids to host uid 65534)"},
		{name: "unprivileged", uid: 1000, euid: 1000, want: "uid 1000 (unprivileged: jail maps your uid into the jail)"},
		{name: "setuid root", uid: 1000, euid: 0, want: "uid 1000, euid 0 (root: jail maps in-jail ids to host uid 65534)"},
		{name: "different euid", uid: 1000, euid: 1001, want: "uid 1000, euid 1001 (unprivileged: jail maps your uid into the jail)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, Feature{Name: nameCaller, Verdict: OK, Detail: tt.want}, callerFeature(tt.uid, tt.euid, "/w", ""))
		})
	}
}

// assertFixMatchesVerdict checks that a fix is given exactly when the verdict is not OK.
func assertFixMatchesVerdict(t *testing.T, f Feature) {
	t.Helper()
	if f.Verdict == OK {
		assert.Empty(t, f.Fix, "%s: got a fix for an OK verdict", f.Name)
	} else {
		assert.NotEmpty(t, f.Fix, "%s: got no fix for verdict %q", f.Name, f.Verdict)
	}
}

func TestRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		got := Run()
		require.Len(t, got, 1)
		assert.Equal(t, Missing, got[0].Verdict)
		return
	}

	// The caller's check warns a root caller whose working directory its
	// jails cannot reach (a clone under 0700 /root): run where they can.
	t.Chdir("/")
	// The first Run makes the Go runtime open its netpoller (an epoll fd
	// and an eventfd) for os/exec; they stay open, so count fds after it.
	start := time.Now()
	Run()
	t.Logf("first Run took %v", time.Since(start))
	fdsBefore := openFDs(t)
	start = time.Now()
	features := Run()
	elapsed := time.Since(start)
	t.Logf("Run took %v", elapsed)
	for _, f := range features {
		t.Logf("%-45s %-7s %s | %s", f.Name, f.Verdict, f.Detail, f.Fix)
	}

	wantNames := []string{nameKernel, nameUserNS, nameNamespaces, nameTimeNS, nameCgroups, nameSnapshots, nameOverlay,
		nameSeccomp, nameLandlock, nameNftables, nameMountAPI, nameSpawn, nameIntoCgroup, nameEgress, nameEnvironment, nameRootFS, nameCaller}
	require.Len(t, features, len(wantNames))
	byName := map[string]Feature{}
	for i, f := range features {
		assert.Equal(t, wantNames[i], f.Name, "feature %d: got %q, want %q", i, f.Name, wantNames[i])
		assert.Contains(t, []Verdict{OK, Warn, Missing}, f.Verdict, "%s: got verdict %q", f.Name, f.Verdict)
		assert.NotEmpty(t, f.Detail, "%s: empty detail", f.Name)
		assert.NotContains(t, f.Detail, "\n", "%s: detail is not one line", f.Name)
		assert.NotContains(t, f.Fix, "\n", "%s: fix is not one line", f.Name)
		assertFixMatchesVerdict(t, f)
		byName[f.Name] = f
	}

	t.Run("kernel is recent enough", func(t *testing.T) {
		assert.Equal(t, OK, byName[nameKernel].Verdict, "got %+v", byName[nameKernel])
	})
	t.Run("root can create a user namespace", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: an unprivileged caller may legitimately be refused")
		}
		assert.Equal(t, OK, byName[nameUserNS].Verdict, "got %+v", byName[nameUserNS])
	})
	t.Run("caller is ok in a directory its jails reach", func(t *testing.T) {
		assert.Equal(t, OK, byName[nameCaller].Verdict)
	})
	t.Run("no fd leaked", func(t *testing.T) {
		assert.Equal(t, fdsBefore, openFDs(t), "got %d open fds after Run, want %d", openFDs(t), fdsBefore)
	})
	t.Run("fast", func(t *testing.T) {
		// The budget is 50 ms; allow slack for loaded CI machines (and the
		// race detector's second run).
		assert.Less(t, elapsed, 2*time.Second)
	})
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no /proc/self/fd")
	}
	require.NoError(t, err)
	return len(entries)
}

func BenchmarkRun(b *testing.B) {
	for b.Loop() {
		Run()
	}
}

func TestRootFSFeature(t *testing.T) {
	assert.Contains(t, rootFSFeature(true).Detail, "initramfs")
	assert.Contains(t, rootFSFeature(false).Detail, "pivot_root detaches")
	assert.Equal(t, OK, rootFSFeature(true).Verdict, "handled: each jail enters a copy")
}

func TestSnapshotFeature(t *testing.T) {
	for _, tc := range []struct {
		name    string
		freezer *cgroup.Controller
		want    Verdict
		detail  string
	}{
		{"v2", &cgroup.Controller{Name: cgroup.ControllerFreezer, Version: 2, Usable: true}, OK, "no memory or process checkpoint"},
		{"not usable", &cgroup.Controller{Name: cgroup.ControllerFreezer, Version: 1, Reason: "permission denied", Fix: "delegate it"}, Warn, "permission denied"},
		{"absent", nil, Warn, "no freezer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cgroup.Support{Mode: cgroup.ModeHybrid, Controllers: []cgroup.Controller{{Name: cgroup.ControllerMemory, Version: 1, Usable: true}}}
			if tc.freezer != nil {
				s.Controllers = append(s.Controllers, *tc.freezer)
			}
			f := snapshotFeature(s)
			assert.Equal(t, tc.want, f.Verdict)
			assert.Contains(t, f.Detail, tc.detail)
			if tc.want != OK {
				assert.NotEmpty(t, f.Fix)
			}
		})
	}
}

// TestCallerUnreachableCwd: a root caller in a directory its jails cannot
// reach is warned, with the fix.
func TestCallerUnreachableCwd(t *testing.T) {
	f := callerFeature(0, 0, "/root/w", "/root is mode 0700, owned by 0:0 (needs x)")
	assert.Equal(t, Warn, f.Verdict)
	assert.Contains(t, f.Detail, "host uid 65534 cannot reach the working directory /root/w: /root is mode 0700")
	assert.Contains(t, f.Fix, "--host-uid")
	assert.Equal(t, OK, callerFeature(1000, 1000, "/home/a", "").Verdict)
}
