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
	"github.com/jailrt/jail/profiles"
)

// TestBuiltinProfilesRun: every built-in profile runs `sh -c true`, and
// the report says which of them are no security boundary.
func TestBuiltinProfilesRun(t *testing.T) {
	for _, name := range profiles.Names() {
		t.Run(name, func(t *testing.T) {
			var res jail.Result
			var r result
			if name == "net-egress" {
				// In the test's own network, whose host A the allow-list
				// names: the run reaches it, and nothing else.
				if unprivileged {
					t.Skip("an unprivileged caller's egress: TestNetworkEgressPasta")
				}
				n := newTestNet(t)
				n.serve(t, n.a, "tcp", hostA, "8090")
				n.serve(t, n.b, "tcp", hostB, "8090")
				res, r = n.run(t, "--profile", "net-egress", "--allow", hostA+":8090", "--", "sh", "-c",
					"/probe/probe net tcp "+hostA+" 8090; /probe/probe net tcp "+hostB+" 8090; true")
				require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
				lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
				require.Len(t, lines, 2, "%q", res.Stdout)
				assert.True(t, strings.HasPrefix(lines[0], "ok hello from "+hostA+":8090"), lines[0])
				assert.False(t, strings.HasPrefix(lines[1], "ok"), "B is not on the list: %s", lines[1])
				assert.Equal(t, jail.NetworkEgress, res.Isolation.Network.Mode)
				assert.Empty(t, res.Isolation.TrustedOnly)
				return
			}
			c := jailCmd(t.Context(), "run", "--json", "--profile", name, "--", "sh", "-c", "true")
			c.Dir = hostDir(t) // dev binds the working directory
			r = runJailCmd(t, c)
			require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
			assert.Equal(t, jail.StatusExited, res.Status)
			if name == "dev" {
				assert.Contains(t, res.Isolation.TrustedOnly, "network: the host's", "the dev profile is no security boundary, and says so")
				assert.Equal(t, jail.NetworkHost, res.Isolation.Network.Mode)
			} else {
				assert.Empty(t, res.Isolation.TrustedOnly)
			}
		})
	}
}

// TestProfileFile: a profile file that extends a built-in, with units, as
// the kernel sees it in the jail.
func TestProfileFile(t *testing.T) {
	dir := hostDir(t)
	file := filepath.Join(dir, "judge.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`description: a judge's run
extends: strict
tmp_size_bytes: 8Mi
timeout: 5s
env: [GREETING=hi]
rlimits:
  - {name: nofile, soft: 64, hard: 64}
mounts:
  - {type: tmpfs, target: /scratch, size_bytes: 2M}
`), 0o644))
	out := runOK(t, "run", "--profile", file, "--", "sh", "-c",
		`echo $GREETING $HOME; ulimit -n; grep -E ' /(tmp|scratch) ' /proc/self/mountinfo | sed 's/.*size=\([0-9]*k\).*/\1/'`)
	assert.Equal(t, "hi /tmp\n64\n8192k\n2048k\n", out, "strict's HOME, the file's env, nofile and tmpfs sizes")

	// Flags override the file's fields by the same rules.
	out = runOK(t, "run", "--profile", file, "--tmp-size", "4M", "--env", "GREETING=bye", "--", "sh", "-c",
		`echo $GREETING; grep ' /tmp ' /proc/self/mountinfo | sed 's/.*size=\([0-9]*k\).*/\1/'`)
	assert.Equal(t, "bye\n4096k\n", out)

	// --print-spec shows the merge and runs nothing.
	r := runJail(t, "run", "--print-spec", "--profile", file, "--memory", "256M")
	require.Equal(t, 0, r.code, r.stderr)
	var spec jail.Spec
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &spec))
	assert.Equal(t, int64(8<<20), spec.TmpSizeBytes)
	assert.Equal(t, int64(256<<20), spec.MemoryMaxBytes)
	assert.Equal(t, "strict", spec.Seccomp)
	assert.Contains(t, spec.Env, "GREETING=hi")
}

// TestProfileErrors: a bad profile is one line naming the file, the line
// and the field, exit 125, and nothing runs; `jail profile validate` says
// the same.
func TestProfileErrors(t *testing.T) {
	dir := hostDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("extends: strict\ntimeout: 2s\nmemroy_max_bytes: 1G\n"), 0o644))
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("extends: default\ncpus: \"0.5\"\n"), 0o644))
	want := bad + ":3: memroy_max_bytes: unknown field (did you mean memory_max_bytes?)"

	before := hostState()
	r := runJail(t, "run", "--profile", bad, "--", "sh", "-c", "echo ran")
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Empty(t, r.stdout, "nothing ran")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.Contains(t, r.stderr, want)
	assert.Empty(t, hostState().changedSince(before))

	r = runJail(t, "profile", "validate", good, bad)
	assert.Equal(t, jail.ExitSetupError, r.code)
	assert.Equal(t, good+": ok\n", r.stdout)
	assert.Contains(t, r.stderr, want)
	assert.Equal(t, 0, runJail(t, "profile", "validate", good).code)

	r = runJail(t, "profile", "show", "dev")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "# profile dev, merged over default over strict\n")
	assert.Contains(t, r.stdout, "mode: host")
	r = runJail(t, "profile", "show", "--source", "strict")
	require.Equal(t, 0, r.code, r.stderr)
	src, _ := profiles.Source("strict")
	assert.Equal(t, string(src), r.stdout)
}

// TestSensitiveSourcesAttack: a home directory (it holds .ssh) and a key
// below it cannot be bound unless a profile names them; a named one is
// bound and listed in the report.
func TestSensitiveSourcesAttack(t *testing.T) {
	home := filepath.Join(hostDir(t), "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o755))
	key := filepath.Join(home, ".ssh", "id_ed25519")
	require.NoError(t, os.WriteFile(key, []byte("PRIVATE KEY"), 0o644))
	for _, src := range []string{home, key, filepath.Join(home, ".ssh")} {
		r := runJail(t, "run", "--profile", "strict", "--ro-bind", src+":/loot", "--", "sh", "-c", "cat /loot/.ssh/id_ed25519 /loot/id_ed25519 /loot 2>/dev/null")
		assert.Equal(t, jail.ExitSetupError, r.code, "binding %s", src)
		assert.NotContains(t, r.stdout, "PRIVATE KEY")
		assert.Contains(t, r.stderr, "refused unless allowed as a sensitive source")
	}

	dir := hostDir(t)
	other := filepath.Join(dir, "other.yaml")
	require.NoError(t, os.WriteFile(other, []byte("extends: strict\nallow_sensitive_sources: [/run/user]\n"), 0o644))
	r := runJail(t, "run", "--profile", other, "--ro-bind", key+":/loot", "--", "cat", "/loot")
	assert.Equal(t, jail.ExitSetupError, r.code, "another path named does not allow this one")
	assert.NotContains(t, r.stdout, "PRIVATE KEY")

	named := filepath.Join(dir, "named.yaml")
	require.NoError(t, os.WriteFile(named, []byte("extends: strict\nallow_sensitive_sources: ["+filepath.Join(home, ".ssh")+"]\n"), 0o644))
	res, r := runJSON(t, "--profile", named, "--ro-bind", key+":/loot", "--", "cat", "/loot")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "PRIVATE KEY", res.Stdout)
	require.Len(t, res.Isolation.SensitiveSources, 1)
	assert.Contains(t, res.Isolation.SensitiveSources[0], key+": is sensitive")
	assert.Contains(t, res.Isolation.TrustedOnly, "sensitive source "+res.Isolation.SensitiveSources[0])
}

// TestUnreachableSourceWarning: run as root, a source in a 0700
// directory gets one warning line before the run, and the warning is
// true: the workload cannot read it.
func TestUnreachableSourceWarning(t *testing.T) {
	requireRoot(t)
	dir := hostDir(t)
	closed := filepath.Join(dir, "closed")
	require.NoError(t, os.MkdirAll(filepath.Join(closed, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(closed, "data", "f"), []byte("x"), 0o644))
	require.NoError(t, os.Chmod(closed, 0o700))
	r := runJail(t, "run", "--profile", "strict", "--ro-bind", filepath.Join(closed, "data")+":/data", "--", "cat", "/data/f")
	assert.Equal(t, jail.ExitSetupError, r.code)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, lines, 2, "the warning, then the failed setup: %q", r.stderr)
	assert.Contains(t, lines[0], `warning: mounts[0].source "`+filepath.Join(closed, "data")+`": the jail's user, host uid 65534, cannot read it: `+closed+" is mode 0700")
	assert.Contains(t, lines[1], "permission denied")

	require.NoError(t, os.Chmod(closed, 0o755))
	r = runJail(t, "run", "--profile", "strict", "--ro-bind", filepath.Join(closed, "data")+":/data", "--", "cat", "/data/f")
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stderr)
}
