package integration

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestCheckDoctor: `jail check --json` against what this test finds on
// the host by itself: a line per capability, a fix for every one that is
// not ok, backends never missing, and exit 0 where the strict profile
// runs (it does here: the whole suite runs it).
func TestCheckDoctor(t *testing.T) {
	r := runJail(t, "check", "--json")
	require.Equal(t, 0, r.code, "strict runs here, so check exits 0: %s", r.stdout)
	var features []struct{ Name, Verdict, Detail, Fix string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &features))
	by := map[string]struct{ Verdict, Detail, Fix string }{}
	for _, f := range features {
		by[f.Name] = struct{ Verdict, Detail, Fix string }{f.Verdict, f.Detail, f.Fix}
		if f.Verdict != "ok" {
			assert.NotEmpty(t, f.Fix, "%s is %s without a fix", f.Name, f.Verdict)
		}
	}
	for _, name := range []string{"kernel", "user namespaces", "cgroups", "seccomp", "landlock", "nftables", "clone3, pidfd",
		"CLONE_INTO_CGROUP", "egress network", "environment", "caller", "backend docker", "backend k8s"} {
		require.Contains(t, by, name)
	}
	for _, name := range []string{"kernel", "user namespaces", "seccomp", "clone3, pidfd"} {
		assert.Equal(t, "ok", by[name].Verdict, "%s: %s", name, by[name].Detail)
	}
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs("/sys/fs/cgroup", &st))
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		assert.Equal(t, "ok", by["CLONE_INTO_CGROUP"].Verdict, "cgroup v2 alone")
	} else {
		assert.Equal(t, "warn", by["CLONE_INTO_CGROUP"].Verdict, "cgroup v1 controllers")
		assert.Contains(t, by["CLONE_INTO_CGROUP"].Detail, "v1")
	}
	_, pastaErr := exec.LookPath("pasta")
	if unprivileged {
		assert.Contains(t, by["caller"].Detail, "uid 60123")
		assert.Equal(t, map[bool]string{true: "ok", false: "warn"}[pastaErr == nil], by["egress network"].Verdict)
	} else {
		assert.Contains(t, by["caller"].Detail, "root")
		assert.Equal(t, "ok", by["egress network"].Verdict)
	}
	for _, name := range []string{"backend docker", "backend k8s"} {
		assert.Contains(t, []string{"ok", "warn"}, by[name].Verdict, "a backend is never missing")
	}
}
