package jail

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/seccomp"
)

func ptr[T any](v T) *T { return &v }

func TestSpecValidate(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string // "" means valid
	}{
		{"zero spec", Spec{}, ""},
		{"everything set", Spec{
			Root: dir,
			Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/src"},
				{Type: mounts.Bind, Source: dir, Target: "/out"}, {Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 1 << 20}},
			TmpSizeBytes: mounts.MaxTmpfsBytes, Hostname: "a-b.c", UID: ptr[uint32](0), GID: ptr[uint32](0),
			HostUID: ptr[uint32](math.MaxUint32 - 1), HostGID: ptr[uint32](1),
			Env: []string{"A=", "B=c=d"}, Cwd: "/src", Timeout: Duration(maxTimeout), KillGrace: Duration(time.Second),
			OutputLimitBytes:  MaxOutputLimitBytes,
			Rlimits:           []Rlimit{{Name: "nofile", Soft: 10, Hard: 10}, {Name: "cpu", Soft: 1, Hard: RlimitInfinity}},
			DisableNamespaces: []string{"net", "time"},
		}, ""},
		{"hostname of 64 characters", Spec{Hostname: strings.Repeat("a", 64)}, ""},
		{"empty env", Spec{Env: []string{}}, ""},
		{"sensitive root allowed", Spec{Root: "/", AllowSensitiveSources: AllowAll}, ""},
		{"disable mount without root or mounts", Spec{DisableNamespaces: []string{"mount", "user"}}, ""},

		{"relative root", Spec{Root: "rootfs"}, "root"},
		{"unclean root", Spec{Root: dir + "/"}, "root"},
		{"missing root", Spec{Root: missing}, "root"},
		{"host root", Spec{Root: "/"}, "root"},
		{"sensitive root", Spec{Root: "/proc"}, "root"},

		{"relative target", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "scratch"}}}, "mounts[0].target"},
		{"target with dotdot", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/a/../b"}}}, "mounts[0].target"},
		{"target is the root", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/"}}}, "mounts[0].target"},
		{"bind over the root", Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/"}}}, "mounts[0].target"},
		{"unknown type", Spec{Mounts: []mounts.Mount{{Type: "overlay", Target: "/x"}}}, "mounts[0].type"},
		{"missing source", Spec{Mounts: []mounts.Mount{{Type: mounts.Bind, Source: missing, Target: "/x"}}}, "mounts[0].source"},
		{"sensitive source", Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: "/proc", Target: "/x"}}}, "mounts[0].source"},
		{"tmpfs with a source", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Source: dir, Target: "/x"}}}, "mounts[0].source"},
		{"negative tmpfs size", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/x", SizeBytes: -1}}}, "mounts[0].size_bytes"},
		{"bind with a size", Spec{Mounts: []mounts.Mount{{Type: mounts.Bind, Source: dir, Target: "/x", SizeBytes: 1}}}, "mounts[0].size_bytes"},
		{"index of the second mount", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/a"}, {Type: mounts.Tmpfs, Target: "b"}}}, "mounts[1].target"},

		{"negative tmp size", Spec{TmpSizeBytes: -1}, "tmp_size_bytes"},
		{"tmp size above 1 TiB", Spec{TmpSizeBytes: mounts.MaxTmpfsBytes + 1}, "tmp_size_bytes"},

		{"hostname with underscore", Spec{Hostname: "a_b"}, "hostname"},
		{"hostname starting with a dash", Spec{Hostname: "-a"}, "hostname"},
		{"hostname ending with a dot", Spec{Hostname: "a."}, "hostname"},
		{"hostname of 65 characters", Spec{Hostname: strings.Repeat("a", 65)}, "hostname"},

		{"uid -1", Spec{UID: ptr[uint32](math.MaxUint32)}, "uid"},
		{"gid -1", Spec{GID: ptr[uint32](math.MaxUint32)}, "gid"},
		{"host uid -1", Spec{HostUID: ptr[uint32](math.MaxUint32)}, "host_uid"},
		{"host gid -1", Spec{HostGID: ptr[uint32](math.MaxUint32)}, "host_gid"},

		{"env without =", Spec{Env: []string{"A=b", "NOVALUE"}}, "env[1]"},
		{"env without key", Spec{Env: []string{"=b"}}, "env[0]"},
		{"env with NUL", Spec{Env: []string{"A=b\x00c"}}, "env[0]"},

		{"relative cwd", Spec{Cwd: "tmp"}, "cwd"},
		{"unclean cwd", Spec{Cwd: "/tmp/"}, "cwd"},

		{"negative timeout", Spec{Timeout: -1}, "timeout"},
		{"timeout above a week", Spec{Timeout: Duration(maxTimeout + time.Second)}, "timeout"},
		{"negative kill grace", Spec{KillGrace: -1}, "kill_grace"},
		{"kill grace above a week", Spec{KillGrace: Duration(maxTimeout + time.Second)}, "kill_grace"},

		{"negative output limit", Spec{OutputLimitBytes: -1}, "output_limit_bytes"},
		{"output limit above 1 GiB", Spec{OutputLimitBytes: MaxOutputLimitBytes + 1}, "output_limit_bytes"},

		{"unknown rlimit", Spec{Rlimits: []Rlimit{{Name: "nofile"}, {Name: "files"}}}, "rlimits[1].name"},
		{"rlimit given twice", Spec{Rlimits: []Rlimit{{Name: "nproc"}, {Name: "nproc"}}}, "rlimits[1].name"},
		{"soft above hard", Spec{Rlimits: []Rlimit{{Name: "nofile", Soft: 2, Hard: 1}}}, "rlimits[0].soft"},

		{"unknown namespace", Spec{DisableNamespaces: []string{"net", "network"}}, "disable_namespaces[1]"},
		{"disable mount with mounts", Spec{DisableNamespaces: []string{"mount"}, Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/x"}}}, "disable_namespaces"},
		{"disable mount with root", Spec{DisableNamespaces: []string{"mount"}, Root: dir}, "disable_namespaces"},

		{"seccomp strict", Spec{Seccomp: "strict", SeccompLog: true}, ""},
		{"seccomp none", Spec{Seccomp: "none"}, ""},
		{"unknown seccomp policy", Spec{Seccomp: "lenient"}, "seccomp"},
		{"missing seccomp file", Spec{Seccomp: missing + ".yaml"}, "seccomp"},
		{"seccomp log without a policy", Spec{Seccomp: "none", SeccompLog: true}, "seccomp_log"},
		{"policy by name and inline", Spec{Seccomp: "strict", SeccompPolicy: &seccomp.Policy{DefaultAction: seccomp.ActAllow}}, "seccomp"},
		{"bad inline policy", Spec{SeccompPolicy: &seccomp.Policy{DefaultAction: "deny"}}, "seccomp_policy"},
		{"network none", Spec{Network: Network{Mode: NetworkNone}}, ""},
		{"network host", Spec{Network: Network{Mode: NetworkHost}}, ""},
		{"network host and no netns", Spec{Network: Network{Mode: NetworkHost}, DisableNamespaces: []string{"net"}}, ""},
		{"egress", Spec{Network: Network{Mode: NetworkEgress, Pool: "10.50.0.0/20",
			Allow: []string{"10.0.0.1:8080", "udp/192.0.2.1:53", "0.0.0.0/0", "example.com:443"}}}, ""},
		{"unknown network mode", Spec{Network: Network{Mode: "bridge"}}, "network.mode"},
		{"network none without netns", Spec{Network: Network{Mode: NetworkNone}, DisableNamespaces: []string{"net"}}, "network.mode"},
		{"egress without netns", Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"10.0.0.1"}}, DisableNamespaces: []string{"net"}}, "network.mode"},
		{"allow without egress", Spec{Network: Network{Allow: []string{"10.0.0.1"}}}, "network.allow"},
		{"pool without egress", Spec{Network: Network{Mode: NetworkNone, Pool: "10.50.0.0/20"}}, "network.pool"},
		{"egress with nothing allowed", Spec{Network: Network{Mode: NetworkEgress}}, "network.allow"},
		{"bad allow entry", Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"10.0.0.1", "10.0.0.1:0"}}}, "network.allow[1]"},
		{"IPv6 allow entry", Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"[2001:db8::1]:443"}}}, "network.allow[0]"},
		{"host name with own root", Spec{Root: dir, Network: Network{Mode: NetworkEgress, Allow: []string{"example.com"}}}, "network.allow[0]"},
		{"bad pool", Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"10.0.0.1"}, Pool: "10.0.0.0/31"}}, "network.pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidSpec)
			var se *SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.field, se.Field, "got field %q, want %q (%v)", se.Field, tc.field, err)
			assert.NotNil(t, se.Err, "got a SpecError without a cause")
		})
	}
}

func TestSpecErrorMatches(t *testing.T) {
	cause := errors.New("cause")
	err := error(&SpecError{Field: "hostname", Value: "-", Err: cause})
	assert.ErrorIs(t, err, ErrInvalidSpec)
	assert.ErrorIs(t, err, cause)
	assert.NotErrorIs(t, err, ErrNotSupported)
	assert.Equal(t, `invalid hostname "-": cause`, err.Error())
}

func TestDurationJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want time.Duration
		err  bool
	}{
		{"string", `"10s"`, 10 * time.Second, false},
		{"compound string", `"1m30s"`, 90 * time.Second, false},
		{"integer seconds", `3`, 3 * time.Second, false},
		{"fractional seconds", `1.5`, 1500 * time.Millisecond, false},
		{"zero", `0`, 0, false},
		{"string without unit", `"10"`, 0, true},
		{"word", `"soon"`, 0, true},
		{"bool", `true`, 0, true},
		{"object", `{}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Duration
			err := json.Unmarshal([]byte(tc.in), &d)
			if tc.err {
				assert.Error(t, err, "got %v, want an error", time.Duration(d))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, time.Duration(d), "got %v, want %v", time.Duration(d), tc.want)
		})
	}

	t.Run("round trip", func(t *testing.T) {
		for _, d := range []time.Duration{0, time.Nanosecond, 10 * time.Second, 90 * time.Minute, maxTimeout} {
			b, err := json.Marshal(Duration(d))
			require.NoError(t, err)
			assert.Equal(t, `"`+d.String()+`"`, string(b))
			var got Duration
			require.NoError(t, json.Unmarshal(b, &got))
			assert.Equal(t, d, time.Duration(got), "got %v, want %v", time.Duration(got), d)
		}
	})

	t.Run("in a spec", func(t *testing.T) {
		var s Spec
		require.NoError(t, json.Unmarshal([]byte(`{"timeout":"10s","kill_grace":3}`), &s))
		assert.Equal(t, 10*time.Second, time.Duration(s.Timeout))
		assert.Equal(t, 3*time.Second, time.Duration(s.KillGrace))
		b, err := json.Marshal(s)
		require.NoError(t, err)
		assert.JSONEq(t, `{"timeout":"10s","kill_grace":"3s"}`, string(b))
		assert.Error(t, json.Unmarshal([]byte(`{"timeout":"ten seconds"}`), &s))
	})
}

func TestRlimitJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Rlimit
		err  bool
	}{
		{"numbers", `{"name":"nofile","soft":1024,"hard":4096}`, Rlimit{"nofile", 1024, 4096}, false},
		{"unlimited", `{"name":"core","soft":0,"hard":"unlimited"}`, Rlimit{"core", 0, RlimitInfinity}, false},
		{"both unlimited", `{"name":"as","soft":"unlimited","hard":"unlimited"}`, Rlimit{"as", RlimitInfinity, RlimitInfinity}, false},
		{"infinity", `{"name":"as","soft":"infinity","hard":"infinity"}`, Rlimit{"as", RlimitInfinity, RlimitInfinity}, false},
		{"number as string", `{"name":"nproc","soft":"10","hard":"20"}`, Rlimit{"nproc", 10, 20}, false},
		{"largest number", `{"name":"cpu","soft":18446744073709551615,"hard":18446744073709551615}`, Rlimit{"cpu", RlimitInfinity, RlimitInfinity}, false},
		{"negative", `{"name":"cpu","soft":-1,"hard":1}`, Rlimit{}, true},
		{"fraction", `{"name":"cpu","soft":1.5,"hard":2}`, Rlimit{}, true},
		{"too large", `{"name":"cpu","soft":18446744073709551616,"hard":1}`, Rlimit{}, true},
		{"word", `{"name":"cpu","soft":"lots","hard":1}`, Rlimit{}, true},
		{"missing hard", `{"name":"cpu","soft":1}`, Rlimit{}, true},
		{"not an object", `[1,2]`, Rlimit{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Rlimit
			err := json.Unmarshal([]byte(tc.in), &got)
			if tc.err {
				assert.Error(t, err, "got %+v, want an error", got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	t.Run("round trip", func(t *testing.T) {
		want := []Rlimit{{"nofile", 1, 2}, {"as", RlimitInfinity, RlimitInfinity}}
		b, err := json.Marshal(want)
		require.NoError(t, err)
		var got []Rlimit
		require.NoError(t, json.Unmarshal(b, &got))
		assert.Equal(t, want, got)
	})
}

func TestParseRlimitValue(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "1024": 1024, "unlimited": RlimitInfinity, "infinity": RlimitInfinity} {
		got, err := ParseRlimitValue(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, "%s: got %d, want %d", in, got, want)
	}
	for _, in := range []string{"", "-1", "1k", "Unlimited", " 1"} {
		_, err := ParseRlimitValue(in)
		assert.Error(t, err, in)
	}
}

func TestSpecJSONRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"zero", Spec{}},
		{"ids", Spec{UID: ptr[uint32](0), GID: ptr[uint32](0), HostUID: ptr[uint32](1234), HostGID: ptr[uint32](5678)}},
		{"mounts and limits", Spec{
			Mounts:  []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/src"}, {Type: mounts.Tmpfs, Target: "/t", SizeBytes: 4096}},
			Timeout: Duration(1500 * time.Millisecond), Rlimits: []Rlimit{{"nofile", 64, RlimitInfinity}},
			DisableNamespaces: []string{"net"}, AllowUnenforced: true,
		}},
		{"env", Spec{Env: []string{"A=b"}}},
		{"empty env", Spec{Env: []string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.spec.Validate())
			b, err := json.Marshal(tc.spec)
			require.NoError(t, err)
			var got Spec
			require.NoError(t, json.Unmarshal(b, &got))
			assert.Equal(t, tc.spec, got, "JSON was %s", b)
		})
	}
}

// FuzzSpecJSON feeds arbitrary JSON to a Spec: Validate must never panic, and
// a Spec that validates must survive a JSON round trip unchanged and still
// validate.
func FuzzSpecJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"root":"/tmp","hostname":"box","uid":0,"gid":0,"host_uid":1000,"host_gid":1000}`,
		`{"mounts":[{"type":"ro-bind","source":"/usr","target":"/usr"},{"type":"tmpfs","target":"/t","size_bytes":1024}]}`,
		`{"mounts":[{"type":"bind","source":"/proc","target":"/"}],"allow_sensitive_sources":true}`,
		`{"env":["A=b"],"cwd":"/tmp","timeout":"10s","kill_grace":2.5,"output_limit_bytes":4096,"tmp_size_bytes":1}`,
		`{"rlimits":[{"name":"nofile","soft":64,"hard":"unlimited"},{"name":"cpu","soft":"1","hard":"infinity"}]}`,
		`{"disable_namespaces":["mount","user","time"],"allow_unenforced":true}`,
		`{"uid":4294967295,"timeout":-1,"rlimits":[null]}`,
		`{"timeout":1e300,"kill_grace":-1e300}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Spec
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			var se *SpecError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("got %T %v, want a *SpecError matching ErrInvalidSpec", err, err)
			}
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal a valid spec: %v", err)
		}
		var again Spec
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("unmarshal %s: %v", out, err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("round trip of %s: got %v, want a valid spec", out, err)
		}
		out2, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if string(out) != string(out2) {
			t.Fatalf("round trip: got %s, want %s", out2, out)
		}
	})
}
