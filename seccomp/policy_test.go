package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRejects(t *testing.T) {
	tests := []struct {
		what, policy, want string
	}{
		{"unknown field", "default_action: errno\nrules: []\nfoo: 1", "unknown field"},
		{"unknown action", "default_action: deny\nrules: []", `default_action: unknown action "deny"`},
		{"unknown rule action", "default_action: errno\nrules: [{names: [read], action: notify}]", `rules[0].action: unknown action "notify"`},
		{"unknown errno", "default_action: errno\ndefault_errno: EWHAT\nrules: []", `unknown errno "EWHAT"`},
		{"errno out of range", "default_action: errno\ndefault_errno: '5000'\nrules: []", "out of range"},
		{"errno on allow", "default_action: errno\nrules: [{names: [read], action: allow, errno: EPERM}]", "errno EPERM given"},
		{"no names", "default_action: errno\nrules: [{names: [], action: allow}]", "no syscall names"},
		{"bad name", "default_action: errno\nrules: [{names: ['re ad'], action: allow}]", "is not a syscall name"},
		{"bad index", "default_action: errno\nrules: [{names: [read], action: allow, args: [{index: 6, op: eq, value: 1}]}]", "index 6"},
		{"bad op", "default_action: errno\nrules: [{names: [read], action: allow, args: [{index: 0, op: in, value: 1}]}]", `unknown op "in"`},
		{"two conditions on one argument", "default_action: errno\nrules: [{names: [read], action: allow, args: [{index: 0, op: gt, value: 1}, {index: 0, op: lt, value: 9}]}]", "a second condition on argument 0"},
		{"mask without masked_eq", "default_action: errno\nrules: [{names: [read], action: allow, args: [{index: 0, op: eq, value: 1, mask: 3}]}]", "mask is only for masked_eq"},
		{"unknown constant", "default_action: errno\nrules: [{names: [socket], action: allow, args: [{index: 0, op: eq, value: AF_UNICORN}]}]", `"AF_UNICORN" is neither`},
		{"negative value", "default_action: errno\nrules: [{names: [socket], action: allow, args: [{index: 0, op: eq, value: -1}]}]", "not an unsigned"},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			_, err := Parse([]byte(tt.policy))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in   string
		want Value
	}{
		{"AF_UNIX", 1},
		{"0x5412", 0x5412},
		{"CLONE_NEWUSER|CLONE_NEWNS", 0x10020000},
		{" 8 | 0x20000 ", 0x20008},
	}
	for _, tt := range tests {
		got, err := ParseValue(tt.in)
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, "ParseValue(%q)", tt.in)
	}
}

func TestBuiltinsLoad(t *testing.T) {
	assert.Equal(t, []string{"default", "none", "strict"}, Names())
	for _, name := range []string{"default", "strict"} {
		p, err := Load(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, p.Name)
		assert.NotEmpty(t, p.Description)
	}
	p, err := Load(None)
	assert.NoError(t, err)
	assert.Nil(t, p)
	_, err = Load("lenient")
	assert.ErrorContains(t, err, `no built-in seccomp policy "lenient" (built-in: default, none, strict)`)
}

// TestOCIRoundTrip: the exported runtime-spec JSON, loaded back, compiles
// to the same program.
func TestOCIRoundTrip(t *testing.T) {
	for _, name := range []string{"default", "strict"} {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			require.NoError(t, err)
			oci, err := p.OCI()
			require.NoError(t, err)
			b, err := json.Marshal(oci)
			require.NoError(t, err)
			assert.Contains(t, string(b), `"SCMP_ACT_`)
			var spec specs.LinuxSeccomp
			require.NoError(t, json.Unmarshal(b, &spec))
			q, err := FromOCI(&spec)
			require.NoError(t, err)
			q.Name = p.Name
			a, err := Compile(p, Options{})
			require.NoError(t, err)
			c, err := Compile(q, Options{})
			require.NoError(t, err)
			assert.True(t, bytes.Equal(a.Filter, c.Filter), "the round trip changed the program")
		})
	}
}

// FuzzParse: the loader never panics, and whatever it accepts validates,
// exports, and either compiles or is refused with an error, within
// seconds. It calls compile, not Compile: the cache would keep every
// input, and a hung compile would hold its lock.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"default", "strict"} {
		b, err := Builtin(name)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"default_action":"errno","rules":[{"names":["ioctl"],"action":"kill","args":[{"index":1,"op":"masked_eq","mask":4294967295,"value":"TIOCSTI"}]}]}`))
	// libseccomp loops forever on these two rules (see checkLooping).
	f.Add([]byte("default_action: allow\nrules:\n- {names: [read], action: errno, args: [{index: 0, op: gt, value: 5}, {index: 1, op: eq, value: 1}]}\n- {names: [read], action: errno, args: [{index: 0, op: gt, value: 5}, {index: 2, op: eq, value: 7}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		require.NoError(t, p.Validate())
		_, err = p.OCI()
		require.NoError(t, err)
		// A call into libseccomp cannot be interrupted: a hang is only
		// reported, with its input, if the fuzz function returns.
		panicked := make(chan string, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					panicked <- fmt.Sprintf("%v\n%s", r, debug.Stack())
				}
				close(panicked)
			}()
			_, _ = compile(p, Options{}, binaryTree)
		}()
		select {
		case msg, ok := <-panicked:
			if ok {
				t.Fatalf("compile panics: %s", msg)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("compile has not returned after 3 s")
		}
	})
}

// BenchmarkCompile measures a cold compile of each built-in policy: what
// the first jail of a process pays (later ones hit the cache).
func BenchmarkCompile(b *testing.B) {
	for _, name := range []string{"default", "strict"} {
		p, err := Load(name)
		require.NoError(b, err)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := compile(p, Options{}, binaryTree); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	p, err := Load("strict")
	require.NoError(b, err)
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := Compile(p, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
