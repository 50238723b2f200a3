package profiles

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
)

func TestBuiltins(t *testing.T) {
	assert.Equal(t, []string{"default", "strict"}, Names())
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

	def, err := Load("default")
	require.NoError(t, err)
	assert.Equal(t, jail.Duration(60*time.Second), def.Timeout)
	assert.Contains(t, def.Rlimits, jail.Rlimit{Name: "stack", Soft: 8 << 20, Hard: jail.RlimitInfinity})
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"unknown field", "timeout: 1s\nmemroy: 5\n"},
		{"bad duration", "timeout: soon\n"},
		{"negative timeout", "timeout: -1s\n"},
		{"unknown rlimit", "rlimits: [{name: bogus, soft: 1, hard: 1}]\n"},
		{"soft above hard", "rlimits: [{name: nofile, soft: 10, hard: 1}]\n"},
		{"relative mount target", "mounts: [{type: tmpfs, target: x}]\n"},
		{"unknown namespace", "disable_namespaces: [pids]\n"},
		{"not yaml", "{{{"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			assert.Error(t, err)
		})
	}
	_, err := Load("nonexistent")
	assert.ErrorContains(t, err, "unknown profile")
}

// FuzzParse: whatever parses must validate, and nothing may panic.
func FuzzParse(f *testing.F) {
	for _, n := range Names() {
		b, err := os.ReadFile(n + ".yaml")
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"timeout": 3, "env": ["A=b"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		assert.NoError(t, p.Spec.Validate())
	})
}
