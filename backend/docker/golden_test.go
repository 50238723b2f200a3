package docker

import (
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestGolden: the create body of a strict run with limits, a bind and a
// tmpfs, as `jail export docker` prints it. A change to what jail submits
// shows in review as a change of testdata/strict.golden (go test -run
// TestGolden -update); TestBodyIsTheEngines checks it against the official
// types, and the integration tests run it on a real engine.
func TestGolden(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.PidsMax, s.CPUs = 256<<20, 64, 1.5
	s.Mounts = []mounts.Mount{{Type: mounts.ROBind, Source: "/usr/share", Target: "/data"}, {Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 8 << 20}}
	p, err := Map(&s, []string{"python3", "-I", "/work/main.py"})
	require.NoError(t, err)
	got, err := json.MarshalIndent(p.Body, "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	const file = "testdata/strict.golden"
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(file, got, 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "go test -run TestGolden -update rewrites it")
}
