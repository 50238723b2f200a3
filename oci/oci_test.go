package oci_test

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/oci"
	"github.com/jailrt/jail/profiles"
)

func strict(t *testing.T) jail.Spec {
	t.Helper()
	p, err := profiles.Load("strict")
	require.NoError(t, err)
	return p.Spec
}

func TestFromSpecStrict(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.SwapMaxBytes, s.PidsMax, s.CPUs, s.CPUWeight, s.IOWeight = 256<<20, 16<<20, 64, 0.5, 200, 100
	s.Mounts = []mounts.Mount{{Type: mounts.ROBind, Source: "/usr", Target: "/opt/usr"}, {Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 1 << 20}}
	m, err := oci.FromSpec(&s, []string{"python3", "-c", "print(1)"})
	require.NoError(t, err)
	o := m.Spec

	require.Equal(t, []string{"python3", "-c", "print(1)"}, o.Process.Args)
	require.Equal(t, specs.User{UID: 1000, GID: 1000}, o.Process.User)
	require.True(t, o.Process.NoNewPrivileges)
	for _, set := range [][]string{o.Process.Capabilities.Bounding, o.Process.Capabilities.Effective,
		o.Process.Capabilities.Permitted, o.Process.Capabilities.Inheritable, o.Process.Capabilities.Ambient} {
		require.Empty(t, set, "no capabilities")
	}
	require.True(t, o.Root.Readonly)
	require.Equal(t, "jail", o.Hostname)
	require.Equal(t, "/tmp", o.Process.Cwd)

	var ns []specs.LinuxNamespaceType
	for _, n := range o.Linux.Namespaces {
		ns = append(ns, n.Type)
	}
	require.ElementsMatch(t, []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.MountNamespace,
		specs.IPCNamespace, specs.UTSNamespace, specs.UserNamespace, specs.CgroupNamespace, specs.TimeNamespace}, ns)
	require.Equal(t, []specs.LinuxIDMapping{{ContainerID: 1000, HostID: 65534, Size: 1}}, o.Linux.UIDMappings)

	// Limits, as the runtime-spec counts them (swap is memory+swap).
	r := o.Linux.Resources
	require.Equal(t, int64(256<<20), *r.Memory.Limit)
	require.Equal(t, int64(272<<20), *r.Memory.Swap)
	require.Equal(t, int64(64), *r.Pids.Limit)
	require.Equal(t, int64(50000), *r.CPU.Quota)
	require.Equal(t, uint64(100000), *r.CPU.Period)
	require.Equal(t, uint64(2048), *r.CPU.Shares)
	require.Equal(t, uint16(500), *r.BlockIO.Weight)

	// The strict profile's rlimits and jail's defaults for the rest.
	rl := map[string]specs.POSIXRlimit{}
	for _, x := range o.Process.Rlimits {
		rl[x.Type] = x
	}
	require.Equal(t, uint64(1024), rl["RLIMIT_NOFILE"].Hard)
	require.Equal(t, uint64(256), rl["RLIMIT_SIGPENDING"].Hard)
	require.Equal(t, uint64(4096), rl["RLIMIT_NPROC"].Hard)

	// Mounts: the system ones with the Spec's sizes, then the Spec's.
	byDst := map[string]specs.Mount{}
	for _, x := range o.Mounts {
		byDst[x.Destination] = x
	}
	require.Contains(t, byDst["/tmp"].Options, "size=67108864")
	require.Contains(t, byDst["/dev/shm"].Options, "size=16777216")
	require.Contains(t, byDst["/dev/pts"].Options, "max=16")
	require.Equal(t, []string{"rbind", "rprivate", "nosuid", "nodev", "ro"}, byDst["/opt/usr"].Options)
	require.Contains(t, byDst["/scratch"].Options, "size=1048576")

	// The strict seccomp policy, kills as SCMP_ACT_KILL_PROCESS.
	require.NotNil(t, o.Linux.Seccomp)
	require.Equal(t, "strict", m.SeccompName)
	require.Contains(t, o.Linux.MaskedPaths, "/proc/kcore")

	// What the runtime-spec has no field for is listed, never dropped.
	require.Len(t, m.NotEnforced, 2)
	require.Contains(t, m.NotEnforced[0], "seccomp rules: ")
	require.Contains(t, m.NotEnforced[0], "kill ioctl if arg1&0xffffffff == 0x5412", "TIOCSTI, whose kill an OCI runtime drops")
	require.Equal(t, "landlock: the runtime-spec has no Landlock ruleset: the mount namespace is the only wall", m.NotEnforced[1])
	require.Equal(t, jail.NetworkNone, m.NetworkMode)
}

func TestFromSpecRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*jail.Spec)
		feature string
	}{
		{"landlock require", func(s *jail.Spec) { s.Landlock = jail.LandlockRequire }, "landlock"},
		{"seccomp log", func(s *jail.Spec) { s.SeccompLog = true }, "seccomp_log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := strict(t)
			tc.edit(&s)
			_, err := oci.FromSpec(&s, []string{"true"})
			var fe *jail.FeatureError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tc.feature, fe.Feature)
			require.ErrorIs(t, err, jail.ErrNotSupported)

			s.AllowUnenforced = true
			m, err := oci.FromSpec(&s, []string{"true"})
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(m.NotEnforced, func(n string) bool { return len(n) > len(tc.feature) && n[:len(tc.feature)] == tc.feature }), "%q", m.NotEnforced)
		})
	}
}

func TestFromSpecInvalid(t *testing.T) {
	s := strict(t)
	_, err := oci.FromSpec(&s, nil)
	require.ErrorIs(t, err, jail.ErrInvalidSpec)
	s.Hostname = "-bad"
	_, err = oci.FromSpec(&s, []string{"true"})
	var se *jail.SpecError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "hostname", se.Field)
}

func TestDisabledNamespaces(t *testing.T) {
	s := strict(t)
	s.DisableNamespaces = []string{"user", "time"}
	s.Network.Mode = jail.NetworkHost
	m, err := oci.FromSpec(&s, []string{"true"})
	require.NoError(t, err)
	for _, n := range m.Spec.Linux.Namespaces {
		require.NotContains(t, []specs.LinuxNamespaceType{specs.UserNamespace, specs.TimeNamespace, specs.NetworkNamespace}, n.Type)
	}
	require.Empty(t, m.Spec.Linux.UIDMappings)
	require.Equal(t, jail.NetworkHost, m.NetworkMode)
}

func TestConversions(t *testing.T) {
	require.Equal(t, "RLIMIT_NOFILE", oci.RlimitType("nofile"))
	require.Equal(t, uint64(1024), oci.CPUShares(100))
	require.Equal(t, uint64(10), oci.CPUShares(1))
	require.Equal(t, uint64(262144), oci.CPUShares(100000))
	require.Equal(t, uint16(500), oci.BlkioWeight(100))
	require.Equal(t, uint16(10), oci.BlkioWeight(1))
	require.Equal(t, uint16(1000), oci.BlkioWeight(10000))
}

// TestSystemTargets: a mount of the Spec's on the runtime's own /proc,
// /dev or /sys is refused, never dropped (found by review: a bind on
// /dev/shm became ShmSize 0).
func TestSystemTargets(t *testing.T) {
	for _, target := range []string{"/proc", "/dev", "/dev/shm", "/dev/pts", "/sys/fs"} {
		s := strict(t)
		s.Mounts = []mounts.Mount{{Type: mounts.Tmpfs, Target: target}}
		_, err := oci.FromSpec(&s, []string{"true"})
		var fe *jail.FeatureError
		require.ErrorAs(t, err, &fe, target)
		require.Contains(t, fe.Feature, target)
	}
}
