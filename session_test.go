package jail

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSessionSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ss    SessionSpec
		field string // "" when valid
	}{
		{"generated id", SessionSpec{}, ""},
		{"an id", SessionSpec{ID: "agent-7.run_2"}, ""},
		{"id with a slash", SessionSpec{ID: "a/b"}, "id"},
		{"id starting with a dot", SessionSpec{ID: ".hidden"}, "id"},
		{"id too long", SessionSpec{ID: string(make([]byte, 64))}, "id"},
		{"a label", SessionSpec{Labels: map[string]string{"team": "a b"}}, ""},
		{"an empty label key", SessionSpec{Labels: map[string]string{"": "x"}}, "labels"},
		{"negative ttl", SessionSpec{TTL: -time.Second}, "ttl"},
		{"negative idle timeout", SessionSpec{IdleTimeout: -time.Second}, "idle_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ss.validate()
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			var se *SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.field, se.Field)
		})
	}
}

func TestCommandSpec(t *testing.T) {
	session := Spec{MemoryMaxBytes: 64 << 20, Hostname: "box", Env: []string{"A=1"}, Timeout: Duration(time.Minute)}
	for _, tc := range []struct {
		name  string
		edit  func(*Spec)
		field string // "" when accepted
	}{
		{"unchanged", func(*Spec) {}, ""},
		{"what a command may set", func(s *Spec) {
			s.Env, s.Cwd, s.Timeout, s.CPUTime = []string{"B=2"}, "/work", Duration(time.Second), Duration(time.Second)
			s.KillGrace, s.OutputLimitBytes = Duration(time.Second), 1024
		}, ""},
		{"the session's memory", func(s *Spec) { s.MemoryMaxBytes = 1 << 30 }, "memory_max_bytes"},
		{"the session's hostname", func(s *Spec) { s.Hostname = "other" }, "hostname"},
		{"the session's namespaces", func(s *Spec) { s.DisableNamespaces = []string{"net"} }, "disable_namespaces"},
		{"a relative cwd", func(s *Spec) { s.Cwd = "work" }, "cwd"},
		{"an env entry without =", func(s *Spec) { s.Env = []string{"B"} }, "env[0]"},
		{"a negative timeout", func(s *Spec) { s.Timeout = Duration(-time.Second) }, "timeout"},
		{"a negative cpu time", func(s *Spec) { s.CPUTime = Duration(-time.Second) }, "cpu_time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := session
			tc.edit(&cmd)
			got, err := commandSpec(session, cmd)
			if tc.field == "" {
				require.NoError(t, err)
				assert.Equal(t, cmd, got)
				return
			}
			var se *SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.field, se.Field)
		})
	}

	// The overlay's fields are not a caller's: a Spec read from the
	// state file has them zero, the session being made has them set.
	made := session
	made.overlayBytes, made.overlayTree = 1<<20, "/layers"
	got, err := commandSpec(made, session)
	require.NoError(t, err)
	assert.Equal(t, made, got)
	other := session
	other.Hostname = "other"
	_, err = commandSpec(made, other)
	var se *SpecError
	require.ErrorAs(t, err, &se, "the exported field that differs is named, never an unexported one")
	assert.Equal(t, "hostname", se.Field)
}

// TestSessionsAPI drives sessions through the Go API: typed errors, a
// command's Cmd as a run's, Inspect, Pause refusing commands, Remove.
func TestSessionsAPI(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	m := &Sessions{Dir: t.TempDir()}
	cctx, cancel := context.WithCancel(ctx)
	s, err := m.Create(cctx, SessionSpec{ID: "api", Labels: map[string]string{"k": "v"},
		Spec: Spec{PidsMax: 64, Timeout: Duration(300 * time.Millisecond)}})
	require.NoError(t, err)
	defer s.Remove()
	// Neither the Spec's timeout (each command's) nor the context of the
	// creation ends the session.
	cancel()
	time.Sleep(500 * time.Millisecond)
	info, err := s.Inspect()
	require.NoError(t, err)
	assert.Equal(t, SessionRunning, info.State)

	// A Spec timeout shorter than the creation itself takes is still
	// each command's only: it does not end the session once made (it
	// did, on a loaded machine).
	short, err := m.Create(ctx, SessionSpec{ID: "short", Spec: Spec{Timeout: Duration(time.Millisecond)}})
	require.NoError(t, err)
	defer short.Remove()
	time.Sleep(100 * time.Millisecond)
	info, err = short.Inspect()
	require.NoError(t, err)
	assert.Equal(t, SessionRunning, info.State)

	_, err = m.Create(ctx, SessionSpec{ID: "api"})
	assert.ErrorIs(t, err, ErrExists)
	_, err = m.Get("nope")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = m.Create(ctx, SessionSpec{ID: "../x"})
	assert.ErrorIs(t, err, ErrInvalidSpec)

	c := s.Command(ctx, "sh", "-c", "echo $$ > /tmp/pid; echo hi")
	c.Capture = true
	require.NoError(t, c.Run())
	assert.Equal(t, StatusExited, c.Result.Status)
	assert.Equal(t, "hi\n", c.Result.Stdout)
	assert.Equal(t, "api", c.Result.SessionID)
	assert.NotEmpty(t, c.Result.ExecID)
	assert.NotNil(t, c.Result.PidsPeak, "the command's own cgroup counts its processes")

	c = s.Command(ctx, "cat", "/tmp/pid")
	c.Capture = true
	require.NoError(t, c.Run())
	assert.NotEmpty(t, c.Result.Stdout, "a file of the previous command")

	// WorkloadPID is the command's pid in the session, as it sees its own.
	c = s.Command(ctx, "sh", "-c", "echo $$; sleep 0.1")
	c.Capture = true
	assert.Zero(t, c.WorkloadPID(), "before Start")
	require.NoError(t, c.Start())
	pid := c.WorkloadPID()
	require.NoError(t, c.Wait())
	assert.Greater(t, pid, 1)
	assert.Equal(t, fmt.Sprintf("%d\n", pid), c.Result.Stdout)

	c = s.Command(ctx, "true")
	c.Spec.Hostname = "other"
	assert.ErrorIs(t, c.Run(), ErrInvalidSpec, "a command cannot change the jail")

	list, err := m.List(map[string]string{"k": "v"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	info, err = list[0].Inspect()
	require.NoError(t, err)
	assert.Equal(t, SessionRunning, info.State)
	assert.NotNil(t, info.Usage)

	require.NoError(t, s.Pause())
	assert.ErrorIs(t, s.Command(ctx, "true").Run(), ErrNotRunning)
	require.NoError(t, s.Resume())
	require.NoError(t, s.Command(ctx, "true").Run())

	_, err = s.Remove()
	require.NoError(t, err)
	_, err = m.Get("api")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, s.Command(ctx, "true").Run(), ErrNotFound)
}

func TestValidSessionID(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	for _, id := range []string{"", "a", "A9", "_a", "-a", ".a", "a_b.c-d", "a/b", "a b", "é", "a\x00", strings.Repeat("x", 63), strings.Repeat("x", 64), "9" + strings.Repeat("-", 62)} {
		assert.Equal(t, re.MatchString(id), validSessionID(id), "%q", id)
	}
}

func TestParseWorkspace(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Workspace
		err  string
	}{
		{"tmpfs", Workspace{Type: WorkspaceTmpfs}, ""},
		{"tmpfs:1M", Workspace{Type: WorkspaceTmpfs, SizeBytes: 1 << 20}, ""},
		{"dir", Workspace{Type: WorkspaceDir}, ""},
		{"dir:2G", Workspace{Type: WorkspaceDir, SizeBytes: 2 << 30}, ""},
		{"none", Workspace{Type: WorkspaceNone}, ""},
		{"none:1M", Workspace{}, "a size needs a workspace"},
		{"overlay", Workspace{Type: WorkspaceOverlay}, ""},
		{"overlay:64M", Workspace{Type: WorkspaceOverlay, SizeBytes: 64 << 20}, ""},
		{"nfs", Workspace{}, "want tmpfs, dir, overlay or none"},
		{"tmpfs:lots", Workspace{}, "workspace"},
	} {
		got, err := ParseWorkspace(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			assert.ErrorIs(t, err, ErrInvalidSpec, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	assert.EqualValues(t, DefaultDirWorkspaceBytes, Workspace{Type: WorkspaceDir}.size())
	assert.EqualValues(t, DefaultWorkspaceBytes, Workspace{}.size())
}

// TestReadSharedState: a shared read decodes a state file once, and a new
// version (written as writeState does: a new file renamed over it) is
// read anew; readState always decodes, so a caller may change its copy.
func TestReadSharedState(t *testing.T) {
	dir := t.TempDir()
	st := &sessionState{Schema: sessionStateSchema, ID: "s1", PID: 1, Labels: map[string]string{"v": "1"}}
	require.NoError(t, writeState(dir, st))
	a, err := readSharedState(dir, "s1")
	require.NoError(t, err)
	b, err := readSharedState(dir, "s1")
	require.NoError(t, err)
	assert.Same(t, a, b, "decoded once")
	c, err := readState(dir, "s1")
	require.NoError(t, err)
	assert.NotSame(t, a, c, "a copy of its own")
	st.Labels["v"] = "2"
	require.NoError(t, writeState(dir, st))
	d, err := readSharedState(dir, "s1")
	require.NoError(t, err)
	assert.Equal(t, "2", d.Labels["v"], "the new version")
	_, err = readSharedState(dir, "s2")
	assert.Error(t, err, "another session's id")
}

// BenchmarkReadState: decoding a strict session's state (about 9 KB,
// most of it the join plan), against a shared read of an unchanged file.
func BenchmarkReadState(b *testing.B) {
	dir := b.TempDir()
	st := &sessionState{Schema: sessionStateSchema, ID: "s1", PID: 1}
	l, err := newLaunch(&Spec{Seccomp: "strict"}, []string{"/bin/true"}, currentHost())
	require.NoError(b, err)
	st.Join, st.Process, st.Isolation = l.plan, l.proc, l.iso
	require.NoError(b, writeState(dir, st))
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "decode", true: "shared"}[shared], func(b *testing.B) {
			for b.Loop() {
				if _, err := readStateMemo(dir, "s1", shared); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
