package profiles

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden.json")

func TestBuiltins(t *testing.T) {
	assert.Equal(t, []string{"default", "dev", "lang-bash", "lang-c", "lang-cpp", "lang-go", "lang-node", "lang-python", "lang-rust", "lang-sh", "lang-typescript", "net-egress", "strict"}, Names())
	strict, err := Load("strict")
	require.NoError(t, err)
	assert.Equal(t, jail.Duration(10*time.Second), strict.Timeout)
	assert.Equal(t, int64(1<<20), strict.OutputLimitBytes)
	assert.Equal(t, int64(64<<20), strict.TmpSizeBytes)
	require.NotNil(t, strict.UID)
	assert.NotZero(t, *strict.UID, "strict runs as a non-root user")
	assert.Empty(t, strict.DisableNamespaces, "strict has every namespace")
	assert.Contains(t, strict.Rlimits, jail.Rlimit{Name: "nofile", Soft: 1024, Hard: 1024})
	assert.Contains(t, strict.Rlimits, jail.Rlimit{Name: "core", Soft: 0, Hard: 0})
	assert.Contains(t, strict.Rlimits, jail.Rlimit{Name: "fsize", Soft: 64 << 20, Hard: 64 << 20})
	assert.Contains(t, strict.Rlimits, jail.Rlimit{Name: "stack", Soft: 8 << 20, Hard: 8 << 20})
	assert.Equal(t, "strict", strict.Seccomp)
	assert.Empty(t, strict.Extends)

	def, err := Load("default")
	require.NoError(t, err)
	assert.Equal(t, []string{"strict"}, def.Extends)
	assert.Equal(t, jail.Duration(60*time.Second), def.Timeout)
	assert.Contains(t, def.Rlimits, jail.Rlimit{Name: "stack", Soft: 8 << 20, Hard: jail.RlimitInfinity})
	assert.Contains(t, def.Rlimits, jail.Rlimit{Name: "core", Soft: 0, Hard: 0}, "strict's core limit, inherited")

	dev, err := Load("dev")
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	assert.Equal(t, []mounts.Mount{{Type: mounts.Bind, Source: wd, Target: "/work"}}, dev.Mounts, "the caller's working directory")
	assert.Equal(t, jail.NetworkHost, dev.Network.Mode)

	egress, err := Load("net-egress")
	require.NoError(t, err, "an egress profile may leave its allow-list to the caller")
	assert.Equal(t, jail.NetworkEgress, egress.Network.Mode)
	assert.Equal(t, "strict", egress.Seccomp)
}

// TestGolden keeps every built-in profile, merged (its description,
// runner and Spec), in
// testdata/NAME.golden.json, so that a change to a profile, or to the
// merge rules, shows in review as a change of what runs.
func TestGolden(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, _, err := resolve(name, "", nil)
			require.NoError(t, err)
			got, err := json.MarshalIndent(p, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			file := filepath.Join("testdata", name+".golden.json")
			if *updateGolden {
				require.NoError(t, os.WriteFile(file, got, 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test ./profiles -run TestGolden -args -update-golden")
			assert.Equal(t, string(want), string(got))
		})
	}
}

// TestErrors: every way a profile can be wrong gives one line naming the
// file, the line and the field.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "timeout: 1s\nmemroy: 5\n", "F:2: memroy: unknown field (did you mean memory_max_bytes?)"},
		{"unknown nested field", "network:\n  mode: none\n  alow: [x]\n", "F:3: network.alow: unknown field (did you mean allow?)"},
		{"unknown mount field", "mounts:\n  - {type: tmpfs, target: /x, sise_bytes: 1}\n", "F:2: mounts[0].sise_bytes: unknown field (did you mean size_bytes?)"},
		{"bad duration", "timeout: soon\n", `F:1: timeout: soon: time: invalid duration "soon"`},
		{"negative timeout", "timeout: -1s\n", `F:1: timeout: "-1s": must be between 0 (none) and 168h`},
		{"bad size", "tmp_size_bytes: 64 megs\n", `F:1: tmp_size_bytes: "64 megs": not a size: want a number with an optional K, M, G or T suffix (K, M, G and T are powers of 1024; Ki, Mi, Gi too)`},
		{"size out of range", "tmp_size_bytes: 2T\n", `F:1: tmp_size_bytes: "2199023255552": must be between 0 and 1 TiB`},
		{"a string for a number", "pids_max: many\n", "F:1: pids_max: many: want a whole number"},
		{"a negative uid", "uid: -1\n", "F:1: uid: -1: want a whole number, 0 or more"},
		{"a list for a string", "hostname: [a]\n", `F:1: hostname: want a string, not a list`},
		{"a mapping for a list", "env: {A: b}\n", "F:1: env: want a list, not a mapping"},
		{"bad cpus", "cpus: lots\n", `F:1: cpus: "lots": want a number`},
		{"bad env", "env: [NOEQUALS]\n", `F:1: env[0]: "NOEQUALS": must be KEY=VALUE without NUL bytes`},
		{"unknown rlimit", "rlimits:\n  - {name: bogus, soft: 1, hard: 1}\n", `F:2: rlimits[0].name: "bogus": unknown resource`},
		{"unknown rlimit field", "rlimits:\n  - {name: nofile, soft: 1, hard: 1, sfot: 2}\n", "F:2: rlimits[0].sfot: unknown field (did you mean soft?)"},
		{"a bad rlimit value", "rlimits:\n  - {name: nofile, soft: lots, hard: 1}\n", `F:2: rlimits[0]: rlimit nofile: "lots" is not a number or "unlimited"`},
		{"relative mount target", "mounts:\n  - {type: tmpfs, target: x}\n", `F:2: mounts[0].target: "x": must be an absolute path`},
		{"unknown namespace", "disable_namespaces: [pids]\n", `F:1: disable_namespaces[0]: "pids": unknown namespace (want one of user, pid, mount, net, uts, ipc, cgroup, time)`},
		{"not a mapping", "- a\n- b\n", "F:1: want a mapping of profile fields"},
		{"not yaml", "timeout: [1\n", "F:1: did not find expected ',' or ']'"},
		{"a duplicate field", "timeout: 1s\ntimeout: 2s\n", `F:2: mapping key "timeout" already defined at line 1`},
		{"a missing base", "extends: nope\n", `unknown profile "nope" (built in: default, dev, lang-bash, lang-c, lang-cpp, lang-go, lang-node, lang-python, lang-rust, lang-sh, lang-typescript, net-egress, strict; or give a file path)`},
		{"a sensitive path not clean", "allow_sensitive_sources: [/run/]\n", `F:1: allow_sensitive_sources[0]: "/run/": must be clean (/run)`},
		{"a runner without run", "runner: {language: x, source: main.x, version: [x]}\n", "F:1: runner.run: want a command"},
		{"a compiled runner without artifact", "runner:\n  language: x\n  source: main.x\n  compile: [xc, main.x]\n  run: [./main]\n  version: [xc]\n", "F:1: runner.artifact: a compiled runner needs the absolute path of what it makes, named apart from source"},
		{"a runner source with a slash", "runner:\n  language: x\n  source: a/main.x\n  run: [x]\n  version: [x]\n", "F:3: runner.source: want a file name, e.g. main.py"},
		{"an unknown runner field", "runner:\n  language: x\n  compiler: [x]\n", "F:3: runner.compiler: unknown field (did you mean compile?)"},
		{"an alias", "env: &e [A=1]\nmounts: []\ndisable_namespaces: *e\n", "F:3: disable_namespaces: an alias (*e): a profile writes each value out (use extends to share fields)"},
		{"extends a descriptor", "extends: /dev/fd/0\n", "/dev/fd/0: extends: a file under /dev or /proc cannot be extended"},
		{"sensitive sources as a string", "allow_sensitive_sources: yes\n", `F:1: allow_sensitive_sources: yes: want true, false or a list of host paths`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(file, []byte(tc.yaml), 0o644))
			_, err := Load(file)
			require.Error(t, err)
			assert.Equal(t, tc.want, strings.ReplaceAll(err.Error(), file, "F"))
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
	_, err := Load("nonexistent")
	assert.ErrorContains(t, err, "unknown profile")
}

// TestExtends: a chain of files, relative names, built-in bases, and the
// errors of a base reported at its own file and line.
func TestExtends(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	write("base/team.yaml", "extends: strict\ntimeout: 30s\nenv: [TEAM=a, LANG=C]\nrlimits:\n  - {name: nofile, soft: 64, hard: 64}\nmounts:\n  - {type: tmpfs, target: /cache, size_bytes: 1Mi}\n")
	child := write("child.yaml", "description: mine\nextends: base/team.yaml\ntimeout: 0\nenv: [B=c]\nmemory_max_bytes: 256Mi\ncpus: \"1.5\"\nmounts:\n  - {type: tmpfs, target: /cache, size_bytes: 2M}\n  - {type: tmpfs, target: /more}\n")
	p, err := Load(child)
	require.NoError(t, err)
	assert.Equal(t, "mine", p.Description)
	assert.Equal(t, []string{filepath.Join(dir, "base/team.yaml"), "strict"}, p.Extends)
	assert.Zero(t, p.Timeout, "timeout: 0 lifts the base's")
	assert.Equal(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C", "TEAM=a", "B=c"}, p.Env)
	assert.Equal(t, int64(256<<20), p.MemoryMaxBytes)
	assert.Equal(t, 1.5, p.CPUs)
	assert.Equal(t, []mounts.Mount{{Type: mounts.Tmpfs, Target: "/cache", SizeBytes: 2 << 20}, {Type: mounts.Tmpfs, Target: "/more"}}, p.Mounts)
	assert.Contains(t, p.Rlimits, jail.Rlimit{Name: "nofile", Soft: 64, Hard: 64})
	assert.Contains(t, p.Rlimits, jail.Rlimit{Name: "stack", Soft: 8 << 20, Hard: 8 << 20})
	assert.Equal(t, "strict", p.Seccomp)

	// A problem in a base is reported where it is written.
	write("bad/base.yaml", "extends: strict\nhostname: \"-bad-\"\n")
	bad := write("bad/child.yaml", "extends: base.yaml\ntimeout: 1s\n")
	_, err = Load(bad)
	assert.EqualError(t, err, filepath.Join(dir, "bad/base.yaml")+`:2: hostname: "-bad-": must be 1-64 letters, digits, '.' or '-'`)

	// Cycles, direct and through another file.
	self := write("self.yaml", "extends: self.yaml\n")
	_, err = Load(self)
	assert.ErrorContains(t, err, "self.yaml:1: extends: a cycle: ")
	write("a.yaml", "extends: b.yaml\n")
	write("b.yaml", "extends: ./a.yaml\n")
	_, err = Load(filepath.Join(dir, "a.yaml"))
	var le *LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "extends", le.Field)
	assert.Contains(t, le.Err.Error(), "a cycle: "+filepath.Join(dir, "a.yaml")+" extends "+filepath.Join(dir, "b.yaml")+" extends "+filepath.Join(dir, "a.yaml"))

	// A long chain is refused.
	for i := range maxExtends + 1 {
		write("chain/"+strings.Repeat("x", i+1)+".yaml", "extends: "+strings.Repeat("x", i+2)+".yaml\n")
	}
	write("chain/"+strings.Repeat("x", maxExtends+2)+".yaml", "timeout: 1s\n")
	_, err = Load(filepath.Join(dir, "chain", "x.yaml"))
	assert.ErrorContains(t, err, "more than 8 profiles in a chain")

	// A missing base file names the file that extends it.
	missing := write("missing.yaml", "extends: gone.yaml\n")
	_, err = Load(missing)
	assert.ErrorContains(t, err, filepath.Join(dir, "gone.yaml"))
}

// TestApply: the merge rules, one by one.
func TestApply(t *testing.T) {
	base := jail.Spec{
		Timeout: jail.Duration(time.Second), Hostname: "a", Seccomp: "strict",
		Env:                   []string{"A=1", "B=2"},
		Rlimits:               []jail.Rlimit{{Name: "nofile", Soft: 1, Hard: 1}},
		DisableNamespaces:     []string{"uts"},
		Network:               jail.Network{Mode: jail.NetworkEgress, Allow: []string{"a.example"}, LogDenied: 3},
		AllowSensitiveSources: jail.SensitiveSources{Paths: []string{"/run/a"}},
	}
	uid := uint32(7)
	over := jail.Spec{
		Timeout: 0, Hostname: "b", SeccompPolicy: nil, Seccomp: "",
		Env:                   []string{"B=3", "C=4"},
		Rlimits:               []jail.Rlimit{{Name: "nofile", Soft: 2, Hard: 2}, {Name: "core"}},
		DisableNamespaces:     []string{"uts", "ipc"},
		Network:               jail.Network{Allow: []string{"b.example"}, Pool: "10.9.0.0/16"},
		AllowSensitiveSources: jail.SensitiveSources{Paths: []string{"/run/b"}},
		UID:                   &uid,
	}
	got := Apply(base, over, []string{"timeout", "env", "rlimits", "disable_namespaces", "network.allow", "network.pool", "allow_sensitive_sources", "uid", "seccomp_policy"})
	assert.Zero(t, got.Timeout)
	assert.Equal(t, "a", got.Hostname, "not in set: kept")
	assert.Equal(t, []string{"A=1", "B=3", "C=4"}, got.Env)
	assert.Equal(t, []jail.Rlimit{{Name: "nofile", Soft: 2, Hard: 2}, {Name: "core"}}, got.Rlimits)
	assert.Equal(t, []string{"uts", "ipc"}, got.DisableNamespaces)
	assert.Equal(t, jail.Network{Mode: jail.NetworkEgress, Allow: []string{"a.example", "b.example"}, Pool: "10.9.0.0/16", LogDenied: 3}, got.Network)
	assert.Equal(t, []string{"/run/a", "/run/b"}, got.AllowSensitiveSources.Paths)
	assert.Empty(t, got.Seccomp, "seccomp_policy clears seccomp")
	require.NotNil(t, got.UID)
	assert.NotSame(t, &uid, got.UID, "a copy of its own")
	assert.Equal(t, []string{"A=1", "B=2"}, base.Env, "base untouched")
	assert.Equal(t, []string{"a.example"}, base.Network.Allow, "base untouched")

	got = Apply(jail.Spec{}, jail.Spec{Env: []string{"X=1"}}, []string{"env"})
	assert.Equal(t, append(append([]string{}, jail.DefaultEnv...), "X=1"), got.Env, "over the default environment")

	for _, key := range Fields() { // every key Apply is given exists
		assert.NotPanics(t, func() { Apply(base, over, []string{key}) }, key)
	}
	assert.Panics(t, func() { Apply(base, over, []string{"nope"}) })
}

// FuzzParse: whatever loads validates (but for an egress allow-list left
// to the caller), an error is one line, and nothing panics.
func FuzzParse(f *testing.F) {
	for _, n := range Names() {
		b, ok := Source(n)
		require.True(f, ok)
		f.Add(b)
	}
	f.Add([]byte(`{"timeout": 3, "env": ["A=b"]}`))
	f.Add([]byte("extends: strict\nmemory_max_bytes: 1Gi\ncpus: 0.5\nnetwork: {mode: none}\n"))
	f.Add([]byte("env: &x [A=1]\ndisable_namespaces: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		if err := p.Spec.Validate(); err != nil {
			var se *jail.SpecError
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, "network.allow", se.Field, "%v", err)
		}
	})
}
