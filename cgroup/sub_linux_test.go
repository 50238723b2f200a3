package cgroup

import (
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSubMeasuresAndKillsApart: a sub-group of a delegated group has the
// parent's controllers (cgroup2), is where its processes are counted, and
// is killed and destroyed apart; the parent's limit bounds it; destroying
// the parent destroys it.
func TestSubMeasuresAndKillsApart(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{PidsMax: 64, MemoryMaxBytes: 64 << 20}, Options{})
	require.NoError(t, g.Delegate())
	a, err := g.Sub("a")
	require.NoError(t, err)
	b, err := g.Sub("b")
	require.NoError(t, err)
	require.Len(t, a.dirs, len(g.dirs))
	for i, d := range a.dirs {
		assert.Equal(t, path.Join(g.dirs[i].path, "a"), d.path)
		assert.DirExists(t, d.path)
	}
	if d := g.v2Dir(); d != nil {
		have, err := os.ReadFile(path.Join(d.path, "cgroup.controllers"))
		require.NoError(t, err)
		on, err := os.ReadFile(path.Join(d.path, "cgroup.subtree_control"))
		require.NoError(t, err)
		for _, c := range strings.Fields(string(have)) {
			if c == ControllerMemory || c == ControllerPids || c == ControllerCPU {
				assert.Contains(t, strings.Fields(string(on)), c, "delegated to the sub-groups")
			}
		}
		if oom, err := os.ReadFile(path.Join(d.path, "memory.oom.group")); err == nil {
			assert.Equal(t, "0\n", string(oom), "the parent is not the unit of an OOM kill")
			sub, err := os.ReadFile(path.Join(a.v2Dir().path, "memory.oom.group"))
			require.NoError(t, err)
			assert.Equal(t, "1\n", string(sub), "the sub-group is")
		}
	}

	ca := startIn(t, a, nil, "/bin/sh", "-c", `read x; echo started; sleep 1000`)
	cb := startIn(t, b, nil, "/bin/sh", "-c", `read x; echo started; sleep 1000`)
	ca.release(t)
	cb.release(t)
	require.Equal(t, "started", ca.readLine(t))
	require.Equal(t, "started", cb.readLine(t))
	pa, err := a.Procs()
	require.NoError(t, err)
	pg, err := g.Procs()
	require.NoError(t, err)
	assert.Contains(t, pa, ca.cmd.Process.Pid)
	assert.NotContains(t, pa, cb.cmd.Process.Pid)
	assert.Contains(t, pg, ca.cmd.Process.Pid, "the parent counts its sub-groups")
	assert.Contains(t, pg, cb.cmd.Process.Pid)

	require.NoError(t, a.Kill())
	assert.ErrorContains(t, ca.cmd.Wait(), "signal: killed")
	pb, err := b.Procs()
	require.NoError(t, err)
	assert.Contains(t, pb, cb.cmd.Process.Pid, "killing one sub-group leaves the other")
	require.NoError(t, a.Destroy())
	for _, d := range a.dirs {
		assert.NoDirExists(t, d.path)
	}
	require.NoError(t, g.Destroy())
	for _, d := range b.dirs {
		assert.NoDirExists(t, d.path, "destroying the parent destroys its sub-groups")
	}
	assert.ErrorContains(t, cb.cmd.Wait(), "signal: killed")
	b.Close()

	_, err = g.Sub("c")
	assert.Error(t, err, "a destroyed group has no sub-groups")
	for _, bad := range []string{"", ".", "..", "a/b"} {
		_, err := newGroup(t, Limits{}, Options{}).Sub(bad)
		assert.Error(t, err, "name %q", bad)
	}
}

// TestChildName: this process's child names carry its pid and start time,
// and two are never alike.
func TestChildName(t *testing.T) {
	a, err := ChildName("exec-")
	require.NoError(t, err)
	b, err := ChildName("exec-")
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	o, ok := parseName("jail-" + strings.TrimPrefix(a, "exec-"))
	require.True(t, ok, a)
	assert.Equal(t, os.Getpid(), o.PID)
	assert.Equal(t, self.own.StartTime, o.StartTime)
}

// TestKillFile: "1" written to the file KillFile opened kills what runs in
// the group, with the group's own handle closed (a session command's
// helper writes it after its parent died).
func TestKillFile(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{PidsMax: 64}, Options{})
	f, err := g.KillFile()
	require.NoError(t, err)
	if g.v2Dir() == nil {
		assert.Nil(t, f, "no cgroup2 directory, no cgroup.kill")
		return
	}
	require.NotNil(t, f, "a cgroup2 directory on Linux 5.14 or later has cgroup.kill")
	defer f.Close()
	c := startIn(t, g, nil, "/bin/sh", "-c", `read x; echo started; setsid sleep 1000 & sleep 1000`)
	c.release(t)
	require.Equal(t, "started", c.readLine(t))
	g.Close()
	_, err = f.Write([]byte("1"))
	require.NoError(t, err)
	assert.ErrorContains(t, c.cmd.Wait(), "signal: killed")
	require.Eventually(t, func() bool {
		pids, err := g.Procs()
		return err == nil && len(pids) == 0
	}, 5*time.Second, 10*time.Millisecond, "the setsid'd sleep is killed too")
}

// TestLoadRefusesWhatIsNotTheGroup: Load takes back what State saved, and
// refuses a state pointing anywhere else.
func TestLoadRefusesWhatIsNotTheGroup(t *testing.T) {
	requireRoot(t)
	name := "jail-test-load-" + strconv.Itoa(os.Getpid())
	g := newGroup(t, Limits{PidsMax: 8}, Options{Name: name})
	st := g.State()
	require.NotEmpty(t, st)
	loaded, err := Load(st, name)
	require.NoError(t, err)
	assert.Equal(t, g.Paths(), loaded.Paths())
	_, err = loaded.Stats()
	assert.NoError(t, err)
	loaded.Close()

	for _, tc := range []struct {
		name string
		edit func([]DirState) ([]DirState, string)
	}{
		{"another name", func(s []DirState) ([]DirState, string) { return s, "jail-other" }},
		{"a directory that is no cgroup", func(s []DirState) ([]DirState, string) {
			d := t.TempDir()
			s[0].Path, s[0].Cgroup = path.Join(d, name), "/"+name
			require.NoError(t, os.Mkdir(s[0].Path, 0o755))
			return s, name
		}},
		{"a path with ..", func(s []DirState) ([]DirState, string) {
			s[0].Path = path.Join(path.Dir(s[0].Path), "..", name)
			return s, name
		}},
		{"a relative path", func(s []DirState) ([]DirState, string) { s[0].Path = name; return s, name }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, n := tc.edit(append([]DirState{}, st...))
			_, err := Load(s, n)
			assert.Error(t, err)
		})
	}
	_, err = New(Limits{}, Options{Name: "jail-1-2-3-4"})
	assert.Error(t, err, "a name Prune would take for a run's")
}

// TestFreezeThaw: a frozen group's processes use no CPU; thawed, they go on.
func TestFreezeThaw(t *testing.T) {
	requireRoot(t)
	g := newGroup(t, Limits{PidsMax: 8}, Options{})
	c := startIn(t, g, nil, "/bin/sh", "-c", `read x; echo started; while :; do :; done`)
	c.release(t)
	require.Equal(t, "started", c.readLine(t))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, g.Freeze())
	// The counter may still grow a little once Freeze has returned (in
	// CI's cgroup v2 VM, once: by 5.9 ms over the next 200 ms), with CPU
	// time run before the freeze and counted late. It settles: two reads
	// 50 ms apart agree, which a running loop never lets them do.
	var u1 time.Duration
	settled := false
	for deadline := time.Now().Add(5 * time.Second); !settled && time.Now().Before(deadline); {
		a, err := g.CPUUsage()
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		u1, err = g.CPUUsage()
		require.NoError(t, err)
		settled = a == u1
	}
	require.True(t, settled, "CPU time went on after Freeze")
	time.Sleep(200 * time.Millisecond)
	u2, err := g.CPUUsage()
	require.NoError(t, err)
	assert.Equal(t, u1, u2, "CPU time went on while frozen")
	require.NoError(t, g.Thaw())
	// Thawed, the loop uses CPU again: 100 ms of it, however loaded the
	// machine (a fixed 200 ms wait gave it 88 ms once, with CI's other
	// packages and daemons running).
	assert.Eventually(t, func() bool {
		u3, err := g.CPUUsage()
		return err == nil && u3-u2 > 100*time.Millisecond
	}, 10*time.Second, 50*time.Millisecond, "the loop did not go on after Thaw")
}
