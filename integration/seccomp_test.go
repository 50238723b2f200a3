package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
)

// probeSys runs `probe sys NAME` in a jail with seccomp policy policy.
func probeSys(t *testing.T, policy, name string, flags ...string) jail.Result {
	t.Helper()
	args := append([]string{"--profile", "strict", "--seccomp", policy, "--ro-bind", binDir + ":/probe"}, flags...)
	res, _ := runJSON(t, append(args, "--", "/probe/probe", "sys", name)...)
	return res
}

// TestSeccompDeniesAttacks tries each attack the policies exist for,
// from inside a jail, and checks the kernel's answer (the probe prints the
// errno) or the reported kill. The baseline column is the same call with
// --seccomp none, which shows that the probe really makes the call and
// that the policy, not the namespaces, stops it where the answers differ.
func TestSeccompDeniesAttacks(t *testing.T) {
	const kill = "kill"
	tests := []struct {
		call            string
		syscall         string // the name the report gives a kill
		defaultPolicy   string // errno name or kill
		strictPolicy    string
		differsFromNone bool // the call succeeds, or fails otherwise, without a filter
	}{
		{"keyctl", "keyctl", "EPERM", kill, true},
		{"add_key", "add_key", "EPERM", kill, true},
		{"bpf", "bpf", "EPERM", kill, false},
		{"perf_event_open", "perf_event_open", "EPERM", kill, false},
		{"userfaultfd", "userfaultfd", "EPERM", kill, false},
		{"io_uring_setup", "io_uring_setup", "ENOSYS", "ENOSYS", true},
		{"unshare-user", "unshare", "EPERM", kill, false},
		{"clone-user", "clone", "EPERM", kill, false},
		{"mount", "mount", "EPERM", kill, false},
		{"ptrace", "ptrace", "EPERM", kill, true},
		{"tiocsti-high", "ioctl", kill, kill, true},
		{"vsock", "socket", "EPERM", kill, true},
		{"netlink-audit", "socket", "EPERM", "EAFNOSUPPORT", true},
		{"open_by_handle_at", "open_by_handle_at", "EPERM", kill, false},
		{"int80", "x86:getpid", kill, kill, true},
		{"x32", "x32:getpid", kill, kill, true},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			none := probeSys(t, "none", tt.call)
			if tt.call == "int80" && none.Status == jail.StatusSignaled && none.Signal == "SEGV" {
				// This host has no ia32 entry point: int 0x80 is a general
				// protection fault before any filter sees it (a PVM guest's
				// kernel, seen here). The attack still fails under each
				// policy: the call never returns.
				t.Logf("int 0x80 faults on this host without a filter: %+v", none)
				for _, policy := range []string{"default", "strict"} {
					res := probeSys(t, policy, tt.call)
					assert.Contains(t, []jail.Status{jail.StatusSignaled, jail.StatusSeccompKilled}, res.Status, policy)
					assert.Empty(t, res.Stdout, "%s: the call must not have returned", policy)
				}
				return
			}
			require.Equal(t, jail.StatusExited, none.Status, "without a filter the call returns: %+v", none)
			for _, c := range []struct{ policy, want string }{{"default", tt.defaultPolicy}, {"strict", tt.strictPolicy}} {
				res := probeSys(t, c.policy, tt.call)
				if c.want == kill {
					assert.Equal(t, jail.StatusSeccompKilled, res.Status, "%s: got %s, want seccomp_killed (stdout %q)", c.policy, res.Status, res.Stdout)
					assert.Equal(t, 137, res.ExitCode, c.policy)
					assert.Equal(t, "KILL", res.Signal, c.policy)
					if assert.Len(t, res.SeccompDenials, 1, c.policy) {
						assert.Equal(t, jail.SeccompDenial{Syscall: tt.syscall, Action: "kill", PID: res.SeccompDenials[0].PID, Workload: true}, res.SeccompDenials[0], c.policy)
					}
					assert.Empty(t, res.Stdout, "%s: the call must not have returned", c.policy)
					continue
				}
				assert.Equal(t, jail.StatusExited, res.Status, c.policy)
				assert.Equal(t, 1, res.ExitCode, "%s: %s", c.policy, res.Stdout)
				assert.Contains(t, res.Stdout, "errno "+errnoNumber(t, c.want)+" ", "%s: got %q, want %s", c.policy, res.Stdout, c.want)
				assert.Empty(t, res.SeccompDenials, "without --seccomp-log errnos are not reported")
				if tt.differsFromNone {
					assert.NotEqual(t, none.Stdout, res.Stdout, "%s: the same answer as without a filter", c.policy)
				}
			}
		})
	}
}

func errnoNumber(t *testing.T, name string) string {
	for _, e := range []struct {
		name, num string
	}{{"EPERM", "1"}, {"ENOSYS", "38"}, {"EAFNOSUPPORT", "97"}} {
		if e.name == name {
			return e.num
		}
	}
	t.Fatalf("errno %s not in the table", name)
	return ""
}

// TestSeccompInForce reads the kernel's view from inside the jail.
func TestSeccompInForce(t *testing.T) {
	for _, policy := range []string{"default", "strict"} {
		out := strict(t, "grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs):' /proc/self/status", "--seccomp", policy)
		assert.Equal(t, "NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n", out, policy)
	}
	out := strict(t, "grep -E '^Seccomp:' /proc/self/status", "--seccomp", "none")
	assert.Equal(t, "Seccomp:\t0\n", out)
	res, _ := runJSON(t, "--profile", "strict", "--", "true")
	assert.Equal(t, "strict", res.Isolation.Seccomp)
	res, _ = runJSON(t, "--profile", "default", "--seccomp", "none", "--", "true")
	assert.Equal(t, "none", res.Isolation.Seccomp, "the report says when there is no filter")
}

// TestStrictRunsToolchains: the strict policy is sized for interpreters
// and compilers; each runs to completion under it with nothing denied.
func TestStrictRunsToolchains(t *testing.T) {
	src := hostDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(src, "hello.c"), []byte("#include <stdio.h>\nint main(void) { puts(\"hello from c\"); return 0; }\n"), 0o644))
	tests := []struct {
		what   string
		argv   []string
		want   string
		needed string // the program that must exist on this host
	}{
		{"sh script", []string{"sh", "-c", "for i in 1 2 3; do echo $i; done | sort -r | tr '\\n' ' '; ls / >/dev/null; x=$(date +%Y); cat /etc/passwd | wc -l >/dev/null; echo"}, "3 2 1 \n", "/bin/sh"},
		{"python3", []string{"python3", "-c", "import subprocess, threading, json, tempfile; t = threading.Thread(target=print, args=('thread',)); t.start(); t.join(); print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip()); print(json.dumps({'ok': tempfile.mkstemp()[0] > 2}))"}, "thread\nchild\n{\"ok\": true}\n", "/usr/bin/python3"},
		{"node", []string{"node", "-e", "const fs = require('fs'); console.log(fs.readdirSync('/').includes('tmp')); console.log(require('child_process').execSync('echo child').toString().trim()); setTimeout(() => console.log('timer'), 10)"}, "true\nchild\ntimer\n", "/usr/bin/node"},
		{"gcc compile and run", []string{"sh", "-c", "gcc -O2 -o /tmp/hello /src/hello.c && /tmp/hello"}, "hello from c\n", "/usr/bin/gcc"},
		{"go version", []string{"/usr/local/go/bin/go", "version"}, "go version go", "/usr/local/go/bin/go"},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			_, err := os.Stat(tt.needed)
			require.NoError(t, err, "%s is needed for this test (.ci/run installs it)", tt.needed)
			args := append([]string{"--profile", "strict", "--timeout", "60s", "--seccomp-log", "--ro-bind", src + ":/src", "--"}, tt.argv...)
			res, r := runJSON(t, args...)
			require.Equal(t, jail.StatusExited, res.Status, "stderr: %s %s", res.Stderr, r.stderr)
			assert.Equal(t, 0, res.ExitCode, res.Stderr)
			assert.True(t, strings.HasPrefix(res.Stdout, tt.want), "got %q, want %q", res.Stdout, tt.want)
			for _, d := range res.SeccompDenials {
				// clone3 is denied with ENOSYS on purpose: glibc falls back to clone.
				assert.Equal(t, jail.SeccompDenial{Syscall: "clone3", Action: "ENOSYS", PID: d.PID, Workload: d.Workload}, d, "denied under strict")
			}
		})
	}
}

// TestSeccompLog: every denial is reported, the first 32 by name, and the
// call still gets the policy's errno.
func TestSeccompLog(t *testing.T) {
	res := probeSys(t, "default", "keyctl", "--seccomp-log")
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Contains(t, res.Stdout, "errno 1 ")
	require.Len(t, res.SeccompDenials, 1)
	assert.Equal(t, "keyctl", res.SeccompDenials[0].Syscall)
	assert.Equal(t, "EPERM", res.SeccompDenials[0].Action)
	assert.True(t, res.SeccompDenials[0].Workload)

	args := []string{"--profile", "strict", "--seccomp", "default", "--seccomp-log", "--ro-bind", binDir + ":/probe", "--", "/probe/probe", "sys", "keyctl", "100"}
	res, _ = runJSON(t, args...)
	assert.Len(t, res.SeccompDenials, 32)
	assert.Equal(t, 100, res.SeccompDenialsTotal)
}

// TestSeccompKillOfAChild: a child killed by the policy is reported, and
// the command carries on and says how it ended.
func TestSeccompKillOfAChild(t *testing.T) {
	res, _ := runJSON(t, "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "sh", "-c", "/probe/probe sys mount; echo child=$?")
	assert.Equal(t, jail.StatusExited, res.Status)
	assert.Equal(t, "child=137\n", res.Stdout)
	require.Len(t, res.SeccompDenials, 1)
	assert.Equal(t, "mount", res.SeccompDenials[0].Syscall)
	assert.False(t, res.SeccompDenials[0].Workload)
}

// TestSeccompPolicyFile: a policy file is compiled and enforced, and a bad
// one is refused with its field named.
func TestSeccompPolicyFile(t *testing.T) {
	dir := hostDir(t)
	good := filepath.Join(dir, "nokeys.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`description: default without getpid
default_action: allow
rules:
  - {names: [getpid], action: errno, errno: EACCES}
`), 0o644))
	res := probeSys(t, good, "getpid")
	assert.Equal(t, "nokeys", res.Isolation.Seccomp)
	assert.Contains(t, res.Stdout, "errno 13 ")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("default_action: allow\nrules: [{names: [no_such_call], action: kill}]\n"), 0o644))
	r := runJail(t, "run", "--seccomp", bad, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.Contains(t, r.stderr, `seccomp`)
	assert.Contains(t, r.stderr, `unknown syscall "no_such_call"`)
}

// TestSeccompKillCannotBeDodged is finding 9: a workload floods itself
// with a signal whose handler does not restart calls, makes a call the
// strict policy kills, and goes on for 200 ms if it lives. The
// interruptible wait for PID 1 used to let about a quarter of such calls
// return EINTR, alive and unreported. Now a received call waits killably
// (WAIT_KILLABLE_RECV), and a call taken back before PID 1 could read it is
// seen by PID 1's listener thread, which kills the jail and reports it.
// (A caller that exits within the listener's wake-up latency of taking the
// call back can still go unreported, a case README states with figures.)
func TestSeccompKillCannotBeDodged(t *testing.T) {
	const runs = 40
	var killed, interrupted int
	for i := 0; i < runs; i++ {
		res, _ := runJSON(t, "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "dodge", "keyctl", "1", "200")
		named := false
		for _, d := range res.SeccompDenials {
			named = named || d.Action == "kill" && (d.Syscall == "keyctl" || d.Interrupted)
			if d.Interrupted {
				interrupted++
			}
		}
		if assert.True(t, res.Status == jail.StatusSeccompKilled && named, "run %d: %s, stdout %q, denials %+v", i, res.Status, res.Stdout, res.SeccompDenials) {
			killed++
		}
		assert.NotContains(t, res.Stdout, "survived", "run %d: the workload went on after a call the policy kills", i)
	}
	t.Logf("%d runs: %d killed and reported, %d of them for a call a signal took back", runs, killed, interrupted)
}

// TestSeccompKillNotHiddenByDenials is finding 10: 40 throw-away children
// each make a call the policy kills, then the workload makes one itself.
// Its own kill must be reported, whatever the cap on the list.
func TestSeccompKillNotHiddenByDenials(t *testing.T) {
	res, r := runJSON(t, "--profile", "strict", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "children", "keyctl", "40")
	require.Equal(t, jail.StatusSeccompKilled, res.Status, "stderr %s", r.stderr)
	assert.Equal(t, 41, res.SeccompDenialsTotal)
	require.Len(t, res.SeccompDenials, 33, "the first 32, and the kill that ended the workload")
	last := res.SeccompDenials[32]
	assert.Equal(t, jail.SeccompDenial{Syscall: "keyctl", Action: "kill", PID: last.PID, Workload: true}, last)
	for _, d := range res.SeccompDenials[:32] {
		assert.False(t, d.Workload, "the throw-away children's kills")
	}
}

// TestPID1Survives is finding 3: the workload shares its ids with the
// jail's PID 1, so prlimit64(1, RLIMIT_CPU, 0) used to kill PID 1, and the
// report said setup_error. Both built-in policies refuse prlimit64 on any
// process but the caller; without a policy the attack works, and the
// report says what happened: the supervisor was lost, the workload killed.
func TestPID1Survives(t *testing.T) {
	for _, policy := range []string{"strict", "default"} {
		t.Run(policy, func(t *testing.T) {
			r, _ := runJSON(t, "--profile", "strict", "--seccomp", policy, "--ro-bind", binDir+":/probe", "--", "/probe/probe", "kill-init")
			assert.Equal(t, jail.StatusExited, r.Status)
			assert.Equal(t, "errno 1 Operation not permitted\n", r.Stdout, "EPERM")
			assert.False(t, r.SupervisorLost)
		})
	}
	t.Run("no policy: the loss is reported, not a setup error", func(t *testing.T) {
		r, c := runJSON(t, "--profile", "strict", "--seccomp", "none", "--ro-bind", binDir+":/probe", "--", "/probe/probe", "kill-init")
		assert.Equal(t, "set\n", r.Stdout, "the attack went through")
		assert.True(t, r.SupervisorLost)
		assert.Equal(t, jail.StatusSignaled, r.Status)
		assert.Equal(t, "KILL", r.Signal)
		assert.Equal(t, 137, c.code)
		require.NotNil(t, r.Error)
		assert.Equal(t, "supervisor", r.Error.Step)
		// PID 1 sends its word of the workload's start after the execve;
		// the workload may kill it first (the root package's
		// TestSupervisorLostBeforeStarted makes that order certain).
		assert.Regexp(t, `^jail init ended after the workload (started|was let go, before it confirmed the workload's start) \(signal: killed\)`, r.Error.Message)
	})
}

// TestSeccompExportBuiltins: every built-in policy exports as OCI JSON
// from the release binary, whatever libseccomp it links (found broken:
// build.sh's libseccomp 2.5.4 does not know fchmodat2, which the strict
// policy names; the built-in programs are compiled at build time, by
// number). A Kubernetes node is given the policy this way.
func TestSeccompExportBuiltins(t *testing.T) {
	for _, name := range []string{"strict", "default"} {
		out := runOK(t, "seccomp", "export", name)
		var oci struct {
			DefaultAction string `json:"defaultAction"`
			Syscalls      []struct {
				Names []string `json:"names"`
			} `json:"syscalls"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &oci), out)
		require.NotEmpty(t, oci.DefaultAction)
		require.NotEmpty(t, oci.Syscalls)
	}
}
