package integration

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selftestRow is one element of `jail selftest --json`.
type selftestRow struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// selftestProbes are the rows of `jail selftest`, in order.
var selftestProbes = []string{
	"host_file_read", "host_file_write", "host_pids", "capabilities", "seccomp_mode", "isolation", "landlock",
	"userns_nesting", "mount", "ptrace_pid1", "network_reach", "network_interfaces", "proc_masks",
	"memory_limit", "pids_limit", "cpu_time", "timeout",
}

// selftestJSON runs `jail selftest --json flags...` and returns its rows
// by name, in order, and the exit code.
func selftestJSON(t *testing.T, flags ...string) (map[string]selftestRow, int) {
	t.Helper()
	r := runJail(t, append([]string{"selftest", "--json"}, flags...)...)
	var rows []selftestRow
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rows), "stdout: %q stderr: %s", r.stdout, r.stderr)
	byName := map[string]selftestRow{}
	var names []string
	for _, row := range rows {
		byName[row.Name] = row
		names = append(names, row.Name)
		assert.Contains(t, []string{"pass", "fail", "warn", "skip"}, row.Result, "row %s", row.Name)
		assert.NotEmpty(t, row.Detail, "row %s", row.Name)
	}
	require.Equal(t, selftestProbes, names, "every probe, in order")
	return byName, r.code
}

// TestSelftestStrict: under the strict profile every probe passes, but the
// limits the profile does not set; the table has a header and a summary.
func TestSelftestStrict(t *testing.T) {
	start := time.Now()
	out := runOK(t, "selftest", "--profile", "strict")
	t.Logf("jail selftest --profile strict took %s:\n%s", time.Since(start), out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, len(selftestProbes)+2, "header, one line per probe, summary")
	assert.Regexp(t, `^RESULT\s+PROBE\s+DETAIL$`, lines[0])
	for i, name := range selftestProbes {
		want := "pass"
		if name == "memory_limit" || name == "pids_limit" || name == "cpu_time" {
			want = "skip"
		}
		assert.Regexp(t, `^`+want+`\s+`+name+`\s+\S`, lines[i+1])
	}
	assert.Equal(t, "14 passed, 0 failed, 0 warned, 3 skipped; this proves only what the probes try", lines[len(lines)-1])
}

// TestSelftestJSON: --json is one array with a verdict and a detail per
// probe, and the details say what the kernel answered.
func TestSelftestJSON(t *testing.T) {
	rows, code := selftestJSON(t, "--profile", "strict")
	assert.Equal(t, 0, code)
	for _, name := range selftestProbes {
		want := "pass"
		if name == "memory_limit" || name == "pids_limit" || name == "cpu_time" {
			want = "skip"
		}
		assert.Equal(t, want, rows[name].Result, "%s: %s", name, rows[name].Detail)
	}
	for name, want := range map[string]string{
		"host_file_read":     "absent",
		"host_pids":          "is not visible",
		"userns_nesting":     "killed by seccomp (clone)",
		"mount":              "killed by seccomp (mount)",
		"ptrace_pid1":        "killed by seccomp (ptrace)",
		"network_reach":      "ECONNREFUSED",
		"network_interfaces": "lo only",
		"timeout":            "was killed after",
		"memory_limit":       "no memory limit",
	} {
		assert.Contains(t, rows[name].Detail, want, name)
	}
	// The default policy answers with errnos where strict kills.
	rows, code = selftestJSON(t, "--profile", "default")
	assert.Equal(t, 0, code)
	assert.Equal(t, "pass", rows["mount"].Result)
	assert.Contains(t, rows["mount"].Detail, "EPERM")
}

// TestSelftestLimits: the memory limit OOM-kills the probe that touches
// more, and the pids limit refuses its fork.
func TestSelftestLimits(t *testing.T) {
	requireCgroups(t)
	rows, code := selftestJSON(t, "--profile", "strict", "--memory", "64M", "--pids", "32", "--cpu-time", "3s")
	assert.Equal(t, 0, code, "%+v", rows)
	assert.Equal(t, "pass", rows["memory_limit"].Result, rows["memory_limit"].Detail)
	assert.Contains(t, rows["memory_limit"].Detail, "OOM-killed")
	assert.Equal(t, "pass", rows["pids_limit"].Result, rows["pids_limit"].Detail)
	assert.Contains(t, rows["pids_limit"].Detail, "EAGAIN")
	assert.Equal(t, "pass", rows["cpu_time"].Result, rows["cpu_time"].Detail)
	assert.Contains(t, rows["cpu_time"].Detail, "killed by a 1s CPU time limit")
	assert.Equal(t, "pass", rows["timeout"].Result, rows["timeout"].Detail)

	// An rlimit that refuses the fork before the cgroup does is not a pass
	// of the pids limit: that was never reached.
	rows, _ = selftestJSON(t, "--profile", "strict", "--pids", "64", "--rlimit", "nproc=20")
	assert.Equal(t, "warn", rows["pids_limit"].Result, rows["pids_limit"].Detail)
	assert.Contains(t, rows["pids_limit"].Detail, "the limit itself was not tested")
}

// TestSelftestUnenforcedLimits: a limit this caller cannot enforce refuses
// the selftest as it refuses `jail run`, and with --allow-unenforced the
// limit probes say it was not in force.
func TestSelftestUnenforcedLimits(t *testing.T) {
	// The unprivileged user has no delegated cgroup here; root is given a
	// parent cgroup that does not exist. Either way the limit cannot be had.
	flags := []string{"--profile", "strict", "--memory", "64M"}
	if !unprivileged {
		flags = append(flags, "--cgroup-parent", "/no-such-jail-selftest-group")
	}
	r := runJail(t, append([]string{"selftest"}, flags...)...)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "cannot enforce memory")
	assert.Empty(t, r.stdout)
	rows, code := selftestJSON(t, append(flags, "--allow-unenforced")...)
	assert.Equal(t, 0, code)
	assert.Equal(t, "warn", rows["memory_limit"].Result, rows["memory_limit"].Detail)
	assert.Equal(t, "warn", rows["isolation"].Result, rows["isolation"].Detail)
}

// TestSelftestWeakened: each weakening of the strict profile turns exactly
// the probes it concerns into fail or warn, and the rest still pass.
func TestSelftestWeakened(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  map[string]string // the other probes pass (or skip: no limits are set)
	}{
		{"no netns and no seccomp", []string{"--no-netns", "--seccomp", "none"}, map[string]string{
			"network_reach": "fail", "network_interfaces": "warn", "seccomp_mode": "warn", "userns_nesting": "fail", "isolation": "warn",
		}},
		{"no pidns", []string{"--no-pidns"}, map[string]string{"host_pids": "fail", "isolation": "warn"}},
		{"no mountns", []string{"--no-mountns"}, map[string]string{"host_file_read": "fail", "host_pids": "fail", "isolation": "warn", "landlock": "warn", "proc_masks": "warn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, code := selftestJSON(t, append([]string{"--profile", "strict"}, tt.flags...)...)
			assert.Equal(t, 1, code, "a probe failed")
			for _, name := range selftestProbes {
				want, ok := tt.want[name]
				if !ok {
					want = "pass"
					if name == "memory_limit" || name == "pids_limit" || name == "cpu_time" {
						want = "skip"
					}
				}
				assert.Equal(t, want, rows[name].Result, "%s: %s", name, rows[name].Detail)
			}
		})
	}
}

// TestSelftestRootfs: in a --rootfs without libraries, a dynamically
// linked jail cannot run its probe and says so in one line; a static one
// (integration/vm brings one) runs every probe.
func TestSelftestRootfs(t *testing.T) {
	root := hostDir(t)
	for _, d := range []string{"proc", "dev", "tmp", "etc"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.Chmod(root, 0o755))
	bin, err := elf.Open(jailBin)
	require.NoError(t, err)
	defer bin.Close()
	dynamic := false
	for _, p := range bin.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}

	r := runJail(t, "selftest", "--profile", "strict", "--rootfs", root)
	if !dynamic {
		assert.Equal(t, 0, r.code, "stdout: %s stderr: %s", r.stdout, r.stderr)
		return
	}
	assert.Equal(t, 125, r.code)
	assert.Empty(t, r.stdout)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.Contains(t, r.stderr, "the probe needs a static jail binary (see README) to run in this --rootfs")
}

// TestSelftestBadFlags: bad input is exit 125, as for `jail run`.
func TestSelftestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--memory", "lots"}, {"--", "sh"}, {"--no-such-flag"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runJail(t, append([]string{"selftest"}, args...)...)
			assert.Equal(t, 125, r.code, r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}
