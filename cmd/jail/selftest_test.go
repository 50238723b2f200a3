//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
)

// killedAt is the report of a probe the seccomp policy killed at syscall.
func killedAt(syscall string) *jail.Result {
	return &jail.Result{Status: jail.StatusSeccompKilled, Signal: "KILL", ExitCode: 137,
		SeccompDenials: []jail.SeccompDenial{{Syscall: syscall, Action: "kill", Workload: true}}}
}

func exited(code int) *jail.Result { return &jail.Result{Status: jail.StatusExited, ExitCode: code} }

func TestProbeRunCall(t *testing.T) {
	ops := []string{"open /proc/1/exe", "ptrace-attach 1"}
	tests := []struct {
		name        string
		res         *jail.Result
		answers     []probeAnswer
		op          string
		wantRefused bool
		wantHow     string
		wantErr     string
	}{
		{"errno refuses", exited(0), []probeAnswer{{Op: "open /proc/1/exe", Err: "EACCES"}}, "open /proc/1/exe", true, "EACCES", ""},
		{"success does not", exited(0), []probeAnswer{{Op: "open /proc/1/exe", Value: "x"}}, "open /proc/1/exe", false, "succeeded", ""},
		{"kill at the attack refuses", killedAt("ptrace"), []probeAnswer{{Op: "open /proc/1/exe", Err: "EACCES"}}, "ptrace-attach 1", true, "killed by seccomp (ptrace)", ""},
		{"kill at a runtime call proves nothing", killedAt("sched_getaffinity"), nil, "open /proc/1/exe", false, "", "killed the probe at sched_getaffinity, not a call it tests"},
		{"kill at an earlier op", killedAt("openat"), nil, "ptrace-attach 1", false, "", `killed the probe at "open /proc/1/exe", before "ptrace-attach 1"`},
		{"kill of another call at this op", killedAt("openat"), []probeAnswer{{Op: "open /proc/1/exe", Err: "EACCES"}}, "ptrace-attach 1", false, "", "killed the probe at openat, not a call it tests"},
		{"crash before the op", &jail.Result{Status: jail.StatusExited, ExitCode: 2, Stderr: "fatal error: x\nmore"}, nil, "open /proc/1/exe", false, "", `the probe ended (exited 2) before "open /proc/1/exe": fatal error: x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := probeRun{res: tt.res, ops: ops, answers: tt.answers}
			refused, how, err := r.call(tt.op)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantRefused, refused)
			assert.Equal(t, tt.wantHow, how)
		})
	}
}

const zeroCaps = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" +
	"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"

func TestJudgeStatus(t *testing.T) {
	tests := []struct {
		name                    string
		status, policy          string
		wantCaps, wantSeccomp   string
		wantCapsDetail, wantDet string
	}{
		{"strict jail", zeroCaps + "Seccomp:\t2\n", "strict", verdictPass, verdictPass, "empty", "policy strict"},
		{"a capability held", "CapInh:\t0\nCapPrm:\t0\nCapEff:\t0000000000200000\nCapBnd:\t0\nCapAmb:\t0\nNoNewPrivs:\t1\nSeccomp:\t2\n", "default", verdictFail, verdictPass, "CapEff 0000000000200000", "policy default"},
		{"no no_new_privs", zeroCaps[:len(zeroCaps)-2] + "0\nSeccomp:\t2\n", "default", verdictFail, verdictPass, "NoNewPrivs 0", ""},
		{"seccomp none as asked", zeroCaps + "Seccomp:\t0\n", "none", verdictPass, verdictWarn, "", "as the profile or --seccomp none asks"},
		{"no filter though one was asked", zeroCaps + "Seccomp:\t0\n", "strict", verdictPass, verdictFail, "", "the report says policy strict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := exited(0)
			res.Isolation = jail.Isolation{Namespaces: jail.Namespaces, Seccomp: tt.policy}
			r := probeRun{res: res, ops: []string{"read /proc/self/status"},
				answers: []probeAnswer{{Op: "read /proc/self/status", Value: tt.status}}}
			rows := judgeStatus(r, jail.Spec{})
			require.Len(t, rows, 4, "capabilities, seccomp_mode, isolation, landlock")
			assert.Equal(t, tt.wantCaps, rows[0].Result, "capabilities: %s", rows[0].Detail)
			assert.Contains(t, rows[0].Detail, tt.wantCapsDetail)
			assert.Equal(t, tt.wantSeccomp, rows[1].Result, "seccomp_mode: %s", rows[1].Detail)
			assert.Contains(t, rows[1].Detail, tt.wantDet)
			assert.Equal(t, verdictPass, rows[2].Result, "isolation: %s", rows[2].Detail)
			assert.Equal(t, "landlock", rows[3].Name)
		})
	}
}

// TestNothingTriedIsNoPass: a row whose calls got no answer (the probe was
// killed at them, or never got there) fails as not probed; it used to pass
// with an empty detail.
func TestNothingTriedIsNoPass(t *testing.T) {
	r := probeRun{res: killedAt("openat"), ops: []string{"read /proc/self/status"}}
	rows := judgeStatus(r, jail.Spec{})
	for _, row := range rows[:2] {
		assert.Equal(t, verdictFail, row.Result, "%s: %s", row.Name, row.Detail)
		assert.Contains(t, row.Detail, "not probed: \"read /proc/self/status\" was refused (killed by seccomp (openat))")
	}
	row := refusedRow("x", nil, nil)
	assert.Equal(t, verdictFail, row.Result)
	assert.Equal(t, "not probed: no attempt was made", row.Detail)

	host := &selftestHost{marker: "m", markerFile: "/tmp/f"}
	for _, p := range selftestProbes(host) {
		if p.name != "host_pids" {
			continue
		}
		// /proc could not be searched: the decoy not being found proves nothing.
		r := probeRun{res: exited(0), ops: []string{"count-pids /proc", "find-cmdline m"}, answers: []probeAnswer{
			{Op: "count-pids /proc", Value: "2"}, {Op: "find-cmdline m", Err: "EACCES"}}}
		rows := p.judge(r)
		assert.Equal(t, verdictFail, rows[0].Result, rows[0].Detail)
		assert.Contains(t, rows[0].Detail, "looking for the decoy in /proc: EACCES")
	}
}

// TestUndoneIsStillSuccess: an attack that worked is answered as such,
// whatever undoing it gave; an error there used to read as a refusal.
func TestUndoneIsStillSuccess(t *testing.T) {
	dir := t.TempDir()
	v, err := probeCreate(dir)
	require.NoError(t, err)
	assert.Equal(t, "created", v)
	assert.Equal(t, "created (undoing it: EACCES)", undone("created", syscall.EACCES))
	r := probeRun{res: exited(0), ops: []string{"create /"}, answers: []probeAnswer{{Op: "create /", Value: undone("created", syscall.EACCES)}}}
	refused, _, err := r.call("create /")
	require.NoError(t, err)
	assert.False(t, refused)
}

func TestLandlockRow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ll     jail.LandlockInfo
		want   string
		detail string
	}{
		{"ABI 7", jail.LandlockInfo{ABI: 7, Enforced: []string{"fs", "signal"}, Missing: []string{"landlock unix_socket_path: ..."}}, verdictPass, "ABI 7: fs, signal; missing: landlock unix_socket_path"},
		{"ABI 4", jail.LandlockInfo{ABI: 4, Enforced: []string{"fs"}}, verdictWarn, "ABI 4: fs"},
		{"none", jail.LandlockInfo{Missing: []string{"landlock: off, as the Spec says"}}, verdictWarn, "not in force; missing: landlock: off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := exited(0)
			res.Isolation.Landlock = tc.ll
			row := landlockRow(res)
			assert.Equal(t, tc.want, row.Result)
			assert.Contains(t, row.Detail, tc.detail)
		})
	}
}

func TestIsolationRow(t *testing.T) {
	tests := []struct {
		name        string
		namespaces  []string
		notEnforced []string
		disabled    []string
		want        string
		wantDetail  string
	}{
		{"everything", jail.Namespaces, nil, nil, verdictPass, "namespaces user,pid,mount,net,uts,ipc,cgroup,time"},
		{"no netns", []string{"user", "pid", "mount", "uts", "ipc", "cgroup", "time"}, nil, []string{"net"}, verdictWarn, "no net namespace (--no-netns)"},
		{"not enforced", jail.Namespaces, []string{"memory: no cgroup"}, nil, verdictWarn, "not enforced: memory: no cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &jail.Result{Isolation: jail.Isolation{Namespaces: tt.namespaces, NotEnforced: tt.notEnforced}}
			row := isolationRow(res, jail.Spec{DisableNamespaces: tt.disabled})
			assert.Equal(t, tt.want, row.Result, row.Detail)
			assert.Contains(t, row.Detail, tt.wantDetail)
		})
	}
}

func TestJudgeInterfaces(t *testing.T) {
	const header = "Inter-|   Receive   |  Transmit\n face |bytes    packets|bytes    packets\n"
	tests := []struct {
		name   string
		netDev string
		mode   string
		want   string
	}{
		{"lo only", header + "    lo: 0 0 0\n", "", verdictPass},
		{"host interfaces", header + "    lo: 0 0 0\n  eth0: 1 2 3\n", "", verdictFail},
		{"host interfaces, mode none", header + "    lo: 0 0 0\n  eth0: 1 2 3\n", "none", verdictFail},
		{"shared as asked", header + "    lo: 0 0 0\n  eth0: 1 2 3\n", "host", verdictWarn},
		{"egress veth", header + "    lo: 0 0 0\n  eth0: 1 2 3\n", "egress", verdictPass},
		{"egress with more", header + "    lo: 0 0 0\n  eth0: 1 2 3\n  eth1: 1 2 3\n", "egress", verdictFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := probeRun{res: exited(0), ops: []string{"read /proc/net/dev"},
				answers: []probeAnswer{{Op: "read /proc/net/dev", Value: tt.netDev}}}
			row := judgeInterfaces(r, tt.mode)
			assert.Equal(t, tt.want, row.Result, row.Detail)
		})
	}
}

func TestJudgeLimits(t *testing.T) {
	peak := func(n int64) *int64 { return &n }
	host := &selftestHost{spec: jail.Spec{MemoryMaxBytes: 64 << 20, PidsMax: 32, CPUTime: jail.Duration(5 * time.Second)}}
	mem, pids, cpu := memoryProbe(host), pidsProbe(host.spec), cpuTimeProbe(host.spec)
	hog, fork, spin := "hog "+mem.ops[1], "fork-until-eagain "+pids.ops[1], "spin "+cpu.ops[1]
	tests := []struct {
		name    string
		probe   selftestProbe
		res     *jail.Result
		answers []probeAnswer
		want    string
	}{
		{"oom killed", mem, &jail.Result{Status: jail.StatusOOMKilled, OOMKills: 1}, nil, verdictPass},
		{"memory not limited", mem, exited(0), []probeAnswer{{Op: hog, Value: "touched"}}, verdictFail},
		{"refused by an rlimit", mem, exited(0), []probeAnswer{{Op: hog, Err: "ENOMEM"}}, verdictWarn},
		{"memory not enforced", mem, &jail.Result{Status: jail.StatusExited, Isolation: jail.Isolation{NotEnforced: []string{"memory: no"}}}, nil, verdictWarn},
		{"fork refused", pids, &jail.Result{Status: jail.StatusExited, PidsPeak: peak(32), LimitsHit: []string{"pids"}}, []probeAnswer{{Op: fork, Err: "EAGAIN", Value: "forked=26 threads=5"}}, verdictPass},
		{"fork refused by an rlimit first", pids, &jail.Result{Status: jail.StatusExited, PidsPeak: peak(21)}, []probeAnswer{{Op: fork, Err: "EAGAIN", Value: "forked=14 threads=5"}}, verdictWarn},
		{"fork killed before it answered", pids, killedAt("clone"), nil, verdictFail},
		{"cpu time killed", cpu, &jail.Result{Status: jail.StatusCPUTimeExceeded, LimitsHit: []string{"cpu_time"}}, nil, verdictPass},
		{"cpu time not limited", cpu, exited(0), []probeAnswer{{Op: spin, Value: "spun 2s"}}, verdictFail},
		{"cpu time not enforced", cpu, &jail.Result{Status: jail.StatusExited, Isolation: jail.Isolation{NotEnforced: []string{"cpu-time: no"}}}, nil, verdictWarn},
		{"cpu time: the timeout came first", cpu, &jail.Result{Status: jail.StatusTimedOut}, nil, verdictFail},
		{"fork refused beyond the limit", pids, &jail.Result{Status: jail.StatusExited, PidsPeak: peak(40)}, []probeAnswer{{Op: fork, Err: "EAGAIN"}}, verdictFail},
		{"fork never refused", pids, exited(0), []probeAnswer{{Op: fork, Value: "forked=48 threads=5"}}, verdictFail},
		{"fork failed otherwise", pids, exited(0), []probeAnswer{{Op: fork, Err: "ENOMEM"}}, verdictFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := probeRun{res: tt.res, ops: []string{tt.probe.ops[0] + " " + tt.probe.ops[1]}, answers: tt.answers}
			rows := tt.probe.judge(r)
			require.Len(t, rows, 1)
			assert.Equal(t, tt.want, rows[0].Result, rows[0].Detail)
		})
	}
}

func TestLimitProbesSkip(t *testing.T) {
	tests := []struct {
		name  string
		probe selftestProbe
		want  string
	}{
		{"no memory limit", memoryProbe(&selftestHost{}), "no memory limit"},
		{"memory beyond the host", memoryProbe(&selftestHost{spec: jail.Spec{MemoryMaxBytes: 8 << 30}, memAvail: 4 << 30}), "more than half"},
		{"no pids limit", pidsProbe(jail.Spec{}), "no pids limit"},
		{"too many pids", pidsProbe(jail.Spec{PidsMax: 5000}), "above the 1024"},
		{"no timeout", timeoutProbe(jail.Spec{}), "no timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Contains(t, tt.probe.skip, tt.want)
			assert.Empty(t, tt.probe.ops)
		})
	}
}

func TestSetupError(t *testing.T) {
	tests := []struct {
		name string
		run  probeRun
		want string // "" for none
	}{
		{"ran", probeRun{res: exited(0)}, ""},
		{"dynamic binary in a rootfs", probeRun{res: &jail.Result{Status: jail.StatusSetupError,
			Error: &jail.ErrorInfo{Step: "execve", Errno: "ENOENT", Message: "execve: no such file"}, Isolation: jail.Isolation{Root: "directory"}}},
			"needs a static jail binary"},
		{"libraries missing in a rootfs", probeRun{res: &jail.Result{Status: jail.StatusExited, ExitCode: 127,
			Stderr: "jail: error while loading shared libraries: libseccomp.so.2"}}, "needs a static jail binary"},
		{"not executable", probeRun{res: &jail.Result{Status: jail.StatusSetupError,
			Error: &jail.ErrorInfo{Step: "execve", Errno: "EACCES", Message: "execve: permission denied"}, Isolation: jail.Isolation{Root: "tmpfs"}}},
			"jail's host uid must be able to execute it"},
		{"refused limit", probeRun{err: &jail.FeatureError{Feature: "memory"}, res: &jail.Result{Status: jail.StatusSetupError,
			Error: &jail.ErrorInfo{Step: "cgroup", Message: "cgroup: cannot enforce memory"}}}, "cannot enforce memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run.setupError()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			var ee *exitError
			require.True(t, errors.As(err, &ee), "got %v, want an exitError", err)
			assert.Equal(t, jail.ExitSetupError, ee.code)
			assert.Contains(t, ee.msg, tt.want)
		})
	}
}

func TestPrintSelftest(t *testing.T) {
	pass := selftestRow{Name: "mount", Result: verdictPass, Detail: "EPERM"}
	fail := selftestRow{Name: "network_reach", Result: verdictFail, Detail: "succeeded"}
	tests := []struct {
		name     string
		rows     []selftestRow
		asJSON   bool
		wantCode int // 0: no error
	}{
		{"all pass", []selftestRow{pass}, false, 0},
		{"a failure", []selftestRow{pass, fail}, false, 1},
		{"a failure as JSON", []selftestRow{pass, fail}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := printSelftest(&out, tt.rows, tt.asJSON)
			if tt.wantCode == 0 {
				assert.NoError(t, err)
			} else {
				var ee *exitError
				require.True(t, errors.As(err, &ee), "got %v", err)
				assert.Equal(t, tt.wantCode, ee.code)
			}
			if tt.asJSON {
				var got []selftestRow
				require.NoError(t, json.Unmarshal(out.Bytes(), &got))
				assert.Equal(t, tt.rows, got)
				return
			}
			assert.Regexp(t, `^RESULT\s+PROBE\s+DETAIL\n`, out.String())
			assert.Contains(t, out.String(), "pass    mount")
		})
	}
}
