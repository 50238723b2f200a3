package k8s

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestGolden: the Pod and NetworkPolicy of a strict run with limits, a
// tmpfs and an egress allow-list, as `jail export k8s` prints them (the
// run id replaced). A change to what jail submits shows in review as a
// change of testdata/strict-egress.golden (go test -run TestGolden
// -update); integration's TestK8sExport has the API server validate it.
func TestGolden(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.CPUs = 256<<20, 1.5
	s.Mounts = []mounts.Mount{{Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 8 << 20}}
	s.Network = jail.Network{Mode: jail.NetworkEgress, Allow: []string{"192.0.2.7:443", "udp/198.51.100.0/24:53"}}
	o := withProfile
	o.RuntimeClass = "gvisor"
	p, err := Map(context.Background(), &s, []string{"python3", "-I", "/work/main.py"}, o)
	require.NoError(t, err)
	pod, err := yaml.Marshal(p.Pod)
	require.NoError(t, err)
	pol, err := yaml.Marshal(p.Policy)
	require.NoError(t, err)
	got := strings.ReplaceAll(string(pod)+"---\n"+string(pol), p.RunID, "RUNID")
	const file = "testdata/strict-egress.golden"
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(want), got, "go test -run TestGolden -update rewrites it")
}
