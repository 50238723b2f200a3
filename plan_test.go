package jail

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/landlock"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
)

const allCloneFlags = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet

// testHost is a host with every namespace and a caller with euid and egid.
func testHost(euid, egid int, without ...string) hostFacts {
	h := hostFacts{euid: euid, egid: egid, namespaces: map[string]bool{}, fs: rootfs.Host{Attach: "/tmp"}, seccompWaitKillable: true, landlockABI: 7}
	for _, ns := range Namespaces {
		h.namespaces[ns] = true
	}
	for _, ns := range without {
		delete(h.namespaces, ns)
	}
	return h
}

// TestNewLaunchUserEgress: an unprivileged caller's egress goes through
// pasta, whose rules the parent loads through the child's netfilter socket.
func TestNewLaunchUserEgress(t *testing.T) {
	h := testHost(1000, 1000)
	h.userStack = func() (string, error) { return "/usr/bin/pasta", nil }
	s := Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"10.0.0.1:80"}}}
	l, err := newLaunch(&s, []string{"id"}, h)
	require.NoError(t, err)
	defer l.checked.close()
	assert.Equal(t, "/usr/bin/pasta", l.pasta)
	assert.Equal(t, NetworkStackPasta, l.iso.Network.Stack)
	assert.NotZero(t, l.plan.Flags&nsexec.FlagNetfilter)

	h.userStack = func() (string, error) { return "", errors.New("pasta, which is not installed") }
	_, err = newLaunch(&s, []string{"id"}, h)
	var fe *FeatureError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "egress network", fe.Feature)
	assert.Contains(t, fe.Reason, "not installed")
}

func withLandlock(h hostFacts, abi int) hostFacts {
	h.landlockABI = abi
	return h
}

func noWaitKillable(h hostFacts) hostFacts {
	h.seccompWaitKillable = false
	return h
}

func TestNewLaunch(t *testing.T) {
	argv := []string{"sh", "-c", "id"}
	rootDir := t.TempDir()
	realRootDir, err := filepath.EvalSymlinks(rootDir)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		spec  Spec
		host  hostFacts
		check func(t *testing.T, l *launch)
	}{
		{"root caller maps to nobody", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.True(t, l.userns)
			assert.Equal(t, []IDMap{{1000, 65534, 1}}, l.uidMap)
			assert.Equal(t, []IDMap{{1000, 65534, 1}}, l.gidMap)
			assert.Equal(t, l.uidMap, l.iso.UIDMap)
			assert.Equal(t, l.gidMap, l.iso.GIDMap)
			assert.True(t, l.setgroups)
			assert.NotZero(t, l.proc.Flags&nsexec.FlagSetgroups, "got flags %#x, want FlagSetgroups", l.proc.Flags)
			assert.Equal(t, uint32(1000), l.proc.UID)
			assert.Equal(t, uint32(1000), l.proc.GID)
			assert.Equal(t, uint32(1000), l.iso.UID)
			assert.Equal(t, uint32(1000), l.iso.GID)
		}},
		{"root caller with host ids", Spec{UID: ptr[uint32](0), GID: ptr[uint32](7), HostUID: ptr[uint32](1234), HostGID: ptr[uint32](5678)}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, []IDMap{{0, 1234, 1}}, l.uidMap)
			assert.Equal(t, []IDMap{{7, 5678, 1}}, l.gidMap)
			assert.True(t, l.setgroups)
			assert.Equal(t, uint32(0), l.iso.UID)
			assert.Equal(t, uint32(7), l.iso.GID)
		}},
		{"every namespace", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, uintptr(allCloneFlags), l.cloneflags, "got clone flags %#x, want %#x", l.cloneflags, allCloneFlags)
			assert.Equal(t, Namespaces, l.iso.Namespaces)
			assert.Empty(t, l.iso.NotEnforced)
			want := nsexec.FlagTimeNS | nsexec.FlagLoopback | nsexec.FlagPIDNS | nsexec.FlagMountNS | nsexec.FlagRootRO | nsexec.FlagSeccompNotify | nsexec.FlagSeccompWaitKillable | nsexec.FlagCgroupNS
			assert.Equal(t, want, l.plan.Flags, "got flags %#x, want %#x", l.plan.Flags, want)
		}},
		{"default seccomp policy", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "default", l.iso.Seccomp)
			assert.NotEmpty(t, l.plan.Seccomp)
			assert.Empty(t, l.plan.SeccompRules)
			assert.NotZero(t, l.plan.Flags&nsexec.FlagSeccompNotify)
		}},
		{"no seccomp", Spec{Seccomp: "none"}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "none", l.iso.Seccomp)
			assert.Empty(t, l.plan.Seccomp)
			assert.Zero(t, l.plan.Flags&nsexec.FlagSeccompNotify)
		}},
		{"seccomp kills on a kernel without WAIT_KILLABLE_RECV, allowed", Spec{AllowUnenforced: true}, noWaitKillable(testHost(0, 0)), func(t *testing.T, l *launch) {
			assert.Zero(t, l.plan.Flags&nsexec.FlagSeccompWaitKillable)
			require.Len(t, l.iso.NotEnforced, 1)
			assert.Contains(t, l.iso.NotEnforced[0], "seccomp kills: a signal can make a call")
		}},
		{"landlock from the mount plan", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, 7, l.iso.Landlock.ABI)
			assert.Equal(t, uint64(landlock.HandledFS(7)), l.plan.LandlockFS)
			assert.Equal(t, landlock.Scopes(7), l.plan.LandlockScoped)
			assert.NotEmpty(t, l.plan.LandlockRules)
			assert.Contains(t, l.iso.Landlock.Enforced, "signal")
			require.Len(t, l.iso.Landlock.Missing, 1)
			assert.Contains(t, l.iso.Landlock.Missing[0], "unix_socket_path")
			assert.Empty(t, l.iso.NotEnforced, "auto: what the kernel lacks is reported, not refused")
		}},
		{"landlock on a kernel without it", Spec{}, withLandlock(testHost(0, 0), 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.plan.LandlockFS)
			assert.Empty(t, l.plan.LandlockRules)
			assert.Equal(t, []string{"landlock: this kernel has none (Linux 5.13, with landlock in lsm=)"}, l.iso.Landlock.Missing)
		}},
		{"landlock required below ABI 6, allowed", Spec{Landlock: LandlockRequire, AllowUnenforced: true}, withLandlock(testHost(0, 0), 4), func(t *testing.T, l *launch) {
			assert.Equal(t, 4, l.iso.Landlock.ABI)
			require.Len(t, l.iso.NotEnforced, 1)
			assert.Contains(t, l.iso.NotEnforced[0], "requires Landlock ABI 6")
		}},
		{"landlock off", Spec{Landlock: LandlockOff}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.plan.LandlockFS)
			assert.Zero(t, l.iso.Landlock.ABI)
		}},
		{"seccomp log mode", Spec{Seccomp: "strict", SeccompLog: true}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "strict", l.iso.Seccomp)
			assert.NotEmpty(t, l.plan.SeccompRules)
		}},
		{"defaults", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, argv, l.proc.Argv)
			assert.Equal(t, DefaultHostname, l.plan.Hostname)
			assert.Equal(t, DefaultCwd, l.proc.Cwd)
			assert.Equal(t, "tmpfs", l.iso.Root)
			assert.Empty(t, l.iso.RootPath)
			assert.Equal(t, "/tmp", l.plan.Attach)
			assert.Equal(t, nsexec.OpFS, l.plan.Root.Kind)
			assert.Equal(t, "tmpfs", l.plan.Root.FSType)
		}},
		{"unprivileged caller maps its own ids", Spec{HostUID: ptr[uint32](0)}, testHost(1000, 1001), func(t *testing.T, l *launch) {
			assert.True(t, l.userns)
			assert.Equal(t, []IDMap{{1000, 1000, 1}}, l.uidMap)
			assert.Equal(t, []IDMap{{1000, 1001, 1}}, l.gidMap)
			assert.False(t, l.setgroups)
			assert.Zero(t, l.proc.Flags&nsexec.FlagSetgroups, "got flags %#x, want no FlagSetgroups", l.proc.Flags)
		}},
		{"unprivileged caller chooses inside ids", Spec{UID: ptr[uint32](0), GID: ptr[uint32](0)}, testHost(1000, 1001), func(t *testing.T, l *launch) {
			assert.Equal(t, []IDMap{{0, 1000, 1}}, l.uidMap)
			assert.Equal(t, []IDMap{{0, 1001, 1}}, l.gidMap)
			assert.Equal(t, uint32(0), l.proc.UID)
		}},
		{"kernel without time namespace", Spec{}, testHost(1000, 1000, "time"), func(t *testing.T, l *launch) {
			assert.Zero(t, l.plan.Flags&nsexec.FlagTimeNS, "got flags %#x, want no FlagTimeNS", l.plan.Flags)
			assert.NotContains(t, l.iso.Namespaces, "time")
			require.Len(t, l.iso.NotEnforced, 1)
			assert.Contains(t, l.iso.NotEnforced[0], "time namespace")
			assert.Equal(t, uintptr(allCloneFlags), l.cloneflags)
		}},
		{"kernel without cgroup namespace, allowed", Spec{AllowUnenforced: true}, testHost(0, 0, "cgroup"), func(t *testing.T, l *launch) {
			assert.Zero(t, l.cloneflags&cloneNewCgroup, "got clone flags %#x, want no CLONE_NEWCGROUP", l.cloneflags)
			assert.NotContains(t, l.iso.Namespaces, "cgroup")
			require.Len(t, l.iso.NotEnforced, 1)
			assert.True(t, strings.HasPrefix(l.iso.NotEnforced[0], "cgroup namespace: "), "got %q, want a cgroup namespace entry", l.iso.NotEnforced[0])
		}},
		{"net disabled", Spec{DisableNamespaces: []string{"net"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.cloneflags&cloneNewNet, "got clone flags %#x, want no CLONE_NEWNET", l.cloneflags)
			assert.Zero(t, l.plan.Flags&nsexec.FlagLoopback, "got flags %#x, want no FlagLoopback", l.plan.Flags)
			assert.NotContains(t, l.iso.Namespaces, "net")
			assert.Empty(t, l.iso.NotEnforced, "a disabled namespace is not an unenforced one")
		}},
		{"uts disabled keeps the host name", Spec{Hostname: "box", DisableNamespaces: []string{"uts"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.cloneflags&cloneNewUTS)
			assert.Empty(t, l.plan.Hostname)
		}},
		{"pid disabled", Spec{DisableNamespaces: []string{"pid"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.cloneflags&cloneNewPID)
			assert.Zero(t, l.plan.Flags&nsexec.FlagPIDNS)
		}},
		{"time disabled", Spec{DisableNamespaces: []string{"time"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.plan.Flags&nsexec.FlagTimeNS)
			assert.Empty(t, l.iso.NotEnforced)
		}},
		{"root caller without user namespace", Spec{DisableNamespaces: []string{"user"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.False(t, l.userns)
			assert.Zero(t, l.cloneflags&cloneNewUser)
			assert.Empty(t, l.uidMap)
			assert.Equal(t, []IDMap{}, l.iso.UIDMap, "the report has an empty map, not null")
			assert.Equal(t, []IDMap{}, l.iso.GIDMap)
			assert.Equal(t, uint32(65534), l.proc.UID)
			assert.Equal(t, uint32(65534), l.proc.GID)
			assert.Equal(t, uint32(65534), l.iso.UID)
			assert.NotZero(t, l.proc.Flags&nsexec.FlagSetgroups)
		}},
		{"root caller without user namespace uses host ids", Spec{DisableNamespaces: []string{"user"}, UID: ptr[uint32](5), HostUID: ptr[uint32](1234), HostGID: ptr[uint32](5678)}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, uint32(1234), l.proc.UID)
			assert.Equal(t, uint32(5678), l.proc.GID)
			assert.Equal(t, uint32(1234), l.iso.UID)
		}},
		{"root caller on a kernel without user namespace, allowed", Spec{AllowUnenforced: true}, testHost(0, 0, "user"), func(t *testing.T, l *launch) {
			assert.False(t, l.userns)
			assert.Equal(t, uint32(65534), l.proc.UID)
			require.Len(t, l.iso.NotEnforced, 1)
			assert.Contains(t, l.iso.NotEnforced[0], "user namespace")
		}},
		{"mount disabled", Spec{DisableNamespaces: []string{"mount"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Zero(t, l.cloneflags&cloneNewNS)
			assert.Equal(t, "host", l.iso.Root)
			assert.Zero(t, l.plan.Flags&(nsexec.FlagMountNS|nsexec.FlagRootRO), "got flags %#x, want no mount steps", l.plan.Flags)
			assert.Empty(t, l.plan.Mounts)
			assert.Empty(t, l.plan.Attach, "no root to attach")
			assert.Empty(t, l.sources, "no host source to pass")
			assert.Equal(t, "/", l.proc.Cwd, "the host has no jail /tmp to start in")
		}},
		{"mount disabled keeps an explicit cwd", Spec{Cwd: "/tmp", DisableNamespaces: []string{"mount"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "/tmp", l.proc.Cwd)
		}},
		{"directory root", Spec{Root: rootDir}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "directory", l.iso.Root)
			assert.Equal(t, rootDir, l.iso.RootPath)
			assert.Equal(t, nsexec.OpBind, l.plan.Root.Kind)
			assert.Equal(t, realRootDir, l.plan.Root.Source)
			require.NotZero(t, l.plan.Root.Src)
			assert.Equal(t, realRootDir, l.sources[l.plan.Root.Src-1].path, "the root is a checked host source")
			assert.NotNil(t, l.sources[l.plan.Root.Src-1].file, "opened by validation")
		}},
		{"mounts are planned after the system mounts", Spec{Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/scratch"}, {Type: mounts.ROBind, Source: rootDir, Target: "/src"}}}, testHost(0, 0), func(t *testing.T, l *launch) {
			n := len(l.plan.Mounts)
			require.GreaterOrEqual(t, n, 2)
			assert.Equal(t, "/scratch", l.plan.Mounts[n-2].Target)
			assert.Equal(t, "/src", l.plan.Mounts[n-1].Target)
			assert.Equal(t, realRootDir, l.plan.Mounts[n-1].Source)
			assert.Equal(t, "bind "+realRootDir+" on /src", l.failedItem("mount plan", int32(n-1)))
		}},
		{"env nil", Spec{}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, DefaultEnv, l.proc.Env)
			assert.Equal(t, []string{"/usr/local/bin", "/usr/bin", "/bin"}, l.proc.Path)
		}},
		{"env with PATH", Spec{Env: []string{"A=b", "PATH=/opt/bin:/x"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, []string{"A=b", "PATH=/opt/bin:/x"}, l.proc.Env)
			assert.Equal(t, []string{"/opt/bin", "/x"}, l.proc.Path)
		}},
		{"env without PATH", Spec{Env: []string{"A=b"}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, []string{"A=b"}, l.proc.Env)
			assert.Equal(t, []string{"/usr/local/bin", "/usr/bin", "/bin"}, l.proc.Path, "got %v, want execvp's default path", l.proc.Path)
		}},
		{"empty env", Spec{Env: []string{}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Empty(t, l.proc.Env)
			assert.Equal(t, []string{"/usr/local/bin", "/usr/bin", "/bin"}, l.proc.Path)
		}},
		{"rlimits", Spec{Rlimits: []Rlimit{{"nofile", 64, 128}, {"core", 0, RlimitInfinity}}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, []nsexec.Rlimit{{Resource: 7, Cur: 64, Max: 128}, {Resource: 4, Cur: 0, Max: RlimitInfinity},
				{Resource: 11, Cur: 256, Max: 256}, {Resource: 12, Cur: 64 << 10, Max: 64 << 10},
				{Resource: 8, Cur: 1 << 20, Max: 1 << 20}, {Resource: 6, Cur: 4096, Max: 4096}}, l.proc.Rlimits,
				"the Spec's, then the defaults for per-user budgets")
		}},
		{"rlimits override a default", Spec{Rlimits: []Rlimit{{"sigpending", 10, 20}}}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, nsexec.Rlimit{Resource: 11, Cur: 10, Max: 20}, l.proc.Rlimits[0])
			for _, r := range l.proc.Rlimits[1:] {
				assert.NotEqual(t, 11, r.Resource, "sigpending once, the Spec's")
			}
		}},
		{"defaults lowered to jail's own hard limits", Spec{Rlimits: []Rlimit{{"nproc", 10, 20}}}, func() hostFacts {
			h := testHost(0, 0)
			h.rlimitHard = map[string]uint64{"memlock": 64 << 10, "sigpending": 1 << 20, "nproc": 5}
			return h
		}(), func(t *testing.T, l *launch) {
			assert.Contains(t, l.proc.Rlimits, nsexec.Rlimit{Resource: 8, Cur: 64 << 10, Max: 64 << 10}, "memlock: the host's 64 KiB, not 1 MiB")
			assert.Contains(t, l.proc.Rlimits, nsexec.Rlimit{Resource: 11, Cur: 256, Max: 256}, "sigpending: the default, below the hard limit")
			assert.Contains(t, l.proc.Rlimits, nsexec.Rlimit{Resource: 6, Cur: 10, Max: 20}, "nproc: the Spec's own, as asked")
		}},
		{"hostname and cwd", Spec{Hostname: "box", Cwd: "/work"}, testHost(0, 0), func(t *testing.T, l *launch) {
			assert.Equal(t, "box", l.plan.Hostname)
			assert.Equal(t, "/work", l.proc.Cwd)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.spec.Validate())
			l, err := newLaunch(&tc.spec, argv, tc.host)
			require.NoError(t, err)
			t.Cleanup(l.closeSources)
			tc.check(t, l)
			_, err = l.plan.Encode()
			assert.NoError(t, err, "the plan must encode")
		})
	}
}

func TestNewLaunchRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    Spec
		argv    []string
		host    hostFacts
		feature string // the FeatureError's Feature; "" for a SpecError
	}{
		{"kernel without cgroup namespace", Spec{}, []string{"id"}, testHost(0, 0, "cgroup"), "cgroup namespace"},
		{"kernel without net namespace", Spec{}, []string{"id"}, testHost(1000, 1000, "net"), "net namespace"},
		{"kernel without time and cgroup namespaces", Spec{}, []string{"id"}, testHost(0, 0, "time", "cgroup"), "cgroup namespace"},
		{"unprivileged caller without user namespace", Spec{DisableNamespaces: []string{"user"}}, []string{"id"}, testHost(1000, 1000), "user namespace"},
		{"unprivileged caller on a kernel without user namespace", Spec{}, []string{"id"}, testHost(1000, 1000, "user"), "user namespace"},
		{"unprivileged caller on a kernel without user namespace, allowed", Spec{AllowUnenforced: true}, []string{"id"}, testHost(1000, 1000, "user"), "user namespace"},
		{"seccomp kills on a kernel without WAIT_KILLABLE_RECV", Spec{}, []string{"id"}, noWaitKillable(testHost(0, 0)), "seccomp kills"},
		{"landlock required below ABI 6", Spec{Landlock: LandlockRequire}, []string{"id"}, withLandlock(testHost(0, 0), 5), "landlock"},
		{"egress for an unprivileged caller without pasta", Spec{Network: Network{Mode: NetworkEgress, Allow: []string{"10.0.0.1"}}}, []string{"id"}, testHost(1000, 1000), "egress network"},
		{"no argv", Spec{}, nil, testHost(0, 0), ""},
		{"empty command", Spec{}, []string{""}, testHost(0, 0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := newLaunch(&tc.spec, tc.argv, tc.host)
			require.Error(t, err, "got a launch %+v, want an error", l)
			assert.Nil(t, l)
			if tc.feature == "" {
				var se *SpecError
				require.ErrorAs(t, err, &se)
				assert.ErrorIs(t, err, ErrInvalidSpec)
				assert.Equal(t, "command", se.Field)
				return
			}
			var fe *FeatureError
			require.ErrorAs(t, err, &fe)
			assert.ErrorIs(t, err, ErrNotSupported)
			assert.NotErrorIs(t, err, ErrInvalidSpec)
			assert.Equal(t, tc.feature, fe.Feature, "got feature %q, want %q", fe.Feature, tc.feature)
			assert.NotEmpty(t, fe.Reason)
		})
	}
}

func TestNewLaunchEgress(t *testing.T) {
	h := testHost(0, 0)
	h.resolved = map[string][]netip.Addr{"svc.test": {netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("192.0.2.8")}}
	s := Spec{Network: Network{Mode: NetworkEgress, Pool: "10.50.0.0/20", Allow: []string{"10.0.0.1:80", "udp/svc.test:53"}}}
	l, err := newLaunch(&s, []string{"id"}, h)
	require.NoError(t, err)
	defer l.checked.close()
	assert.Contains(t, l.iso.Namespaces, "net")
	assert.Equal(t, NetworkInfo{Mode: NetworkEgress, Allow: []AllowInfo{
		{Dest: "10.0.0.1:80", Resolved: []string{"10.0.0.1:80"}},
		{Dest: "udp/svc.test:53", Resolved: []string{"udp/192.0.2.7:53", "udp/192.0.2.8:53"}},
	}, Stack: NetworkStackVeth}, l.iso.Network)
	require.Len(t, l.egress, 3, "one entry per address")
	assert.Zero(t, l.plan.Flags&nsexec.FlagNetfilter, "a root caller's rules are on the host")
	assert.Equal(t, "10.50.0.0/20", l.pool.String())
	var hosts string
	for _, m := range l.plan.Mounts {
		if m.Target == "/etc/hosts" {
			hosts = string(m.Data)
		}
	}
	assert.Contains(t, hosts, "192.0.2.7\tsvc.test\n192.0.2.8\tsvc.test\n", "the names are pinned")

	for mode, ns := range map[string]bool{NetworkNone: true, NetworkHost: false, "": true} {
		l, err := newLaunch(&Spec{Network: Network{Mode: mode}}, []string{"id"}, h)
		require.NoError(t, err)
		l.checked.close()
		assert.Equal(t, ns, slices.Contains(l.iso.Namespaces, "net"), "mode %q", mode)
		assert.Nil(t, l.egress)
	}
}

func TestNewLaunchNoAttachPoint(t *testing.T) {
	h := testHost(0, 0)
	h.fs.Attach = ""
	_, err := newLaunch(&Spec{}, []string{"id"}, h)
	var ie *InitError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "plan root", ie.Step)

	_, err = newLaunch(&Spec{DisableNamespaces: []string{"mount"}}, []string{"id"}, h)
	assert.NoError(t, err, "without a mount namespace nothing is attached")
}

func TestDescribeOp(t *testing.T) {
	for _, tc := range []struct {
		op   nsexec.Mount
		want string
	}{
		{nsexec.Mount{Kind: nsexec.OpBind, Source: "/usr", Target: "/usr"}, "bind /usr on /usr"},
		{nsexec.Mount{Kind: nsexec.OpFS, FSType: "proc", Target: "/proc"}, "proc on /proc"},
		{nsexec.Mount{Kind: nsexec.OpMkdir, Target: "/etc"}, "mkdir /etc"},
		{nsexec.Mount{Kind: nsexec.OpWriteFile, Target: "/etc/passwd"}, "write /etc/passwd"},
		{nsexec.Mount{Kind: nsexec.OpSymlink, Target: "/bin"}, "symlink /bin"},
		{nsexec.Mount{Kind: nsexec.OpSetattr, Target: "/dev"}, "mount attributes of /dev"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got := describeOp(tc.op)
			assert.Equal(t, tc.want, got, "got %q, want %q", got, tc.want)
		})
	}
}

func TestNewLaunchInitramfs(t *testing.T) {
	h := testHost(0, 0)
	h.fs.Initramfs = true
	l, err := newLaunch(&Spec{}, []string{"id"}, h)
	require.NoError(t, err)
	assert.NotZero(t, l.plan.Flags&nsexec.FlagInitramfs, "enter a copy of the tree before pivot_root")
	l, err = newLaunch(&Spec{}, []string{"id"}, testHost(0, 0))
	require.NoError(t, err)
	assert.Zero(t, l.plan.Flags&nsexec.FlagInitramfs)
}

// BenchmarkNewLaunch: planning a run (validation, the mount plan, Landlock
// rules, the built-in seccomp program) on this host, as Start does before
// the clone.
func BenchmarkNewLaunch(b *testing.B) {
	spec := Spec{Seccomp: "strict"}
	h := currentHost()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newLaunch(&spec, []string{"/bin/true"}, h); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNewLaunchOverlay: an overlay workspace is root's on a kernel that
// can have it; each of its lower layers is a source of its own (a tree
// the parent id-maps and the child moves once), never shared with
// another bind of the same path; Landlock lets the workload write
// through the overlays.
func TestNewLaunchOverlay(t *testing.T) {
	h := testHost(0, 0)
	h.fs.Exists = map[string]bool{"/usr": true, "/etc/ssl": true}
	h.overlay = func() error { return nil }
	var asked []string
	h.private = func(dirs []string) ([]rootfs.HiddenPath, error) {
		asked = dirs
		return []rootfs.HiddenPath{{Path: "/usr/key"}, {Path: "/usr/private", Dir: true}}, nil
	}
	s, err := Workspace{Type: WorkspaceOverlay, SizeBytes: 8 << 20}.apply(Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: "/usr", Target: "/opt/usr"}}}, "")
	require.NoError(t, err)
	assert.Equal(t, WorkspacePath, s.Cwd)
	l, err := newLaunch(&s, []string{"id"}, h)
	require.NoError(t, err)
	defer l.checked.close()
	trees := map[string]bool{}
	for _, m := range l.plan.Mounts {
		if m.Flags&nsexec.OpTree != 0 {
			src := l.sources[m.Src-1]
			assert.True(t, src.tree, m.Target)
			assert.Equal(t, m.Source, src.path)
			trees[m.Target] = true
		}
		if m.Target == "/opt/usr" {
			assert.False(t, l.sources[m.Src-1].tree, "the caller's bind of /usr is a bind, not the overlay's tree")
		}
	}
	assert.Equal(t, map[string]bool{"/usr": true}, trees)
	assert.Equal(t, []string{"/usr"}, asked, "what the id map would expose is looked for in the overlaid directories")
	masks := map[string]bool{}
	for _, m := range l.plan.Mounts {
		if m.Target == "/usr/key" || m.Target == "/usr/private" {
			masks[m.Target] = m.Attr&nsexec.AttrRdonly != 0
		}
	}
	assert.Equal(t, map[string]bool{"/usr/key": true, "/usr/private": true}, masks, "masked read-only")
	writable := false
	for _, r := range l.plan.LandlockRules {
		if r.Path == "/usr" && r.Access&uint64(landlock.WriteFile) != 0 {
			writable = true
		}
	}
	assert.True(t, writable, "Landlock lets the workload write /usr")

	for _, tc := range []struct {
		h    hostFacts
		want string
	}{
		{testHost(1000, 1000), "needs root"},
		{func() hostFacts {
			h := testHost(0, 0)
			h.overlay = func() error { return errors.New("needs Linux 6.6") }
			return h
		}(), "needs Linux 6.6"},
		{testHost(0, 0), "not on this platform"},
	} {
		if tc.h.euid == 0 && tc.h.overlay != nil {
			tc.h.private = h.private
		}
		_, err := newLaunch(&s, []string{"id"}, tc.h)
		var fe *FeatureError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, "overlay workspace", fe.Feature)
		assert.Contains(t, fe.Reason, tc.want)
	}
	_, err = Workspace{Type: WorkspaceOverlay}.apply(Spec{Root: "/srv/root"}, "")
	assert.ErrorContains(t, err, "a root directory has none")
	h.private = func([]string) ([]rootfs.HiddenPath, error) { return nil, errors.New("permission denied") }
	_, err = newLaunch(&s, []string{"id"}, h)
	assert.ErrorContains(t, err, "what its id map would expose", "fail closed: never an overlay it could not check")
}

// TestExposedByIDMap: what an id map making 0 the workload's would open
// to it: anything of a root owner's others may not read (or, a
// directory, read and search: the owner may chmod), and read or search
// bits of a root group beyond others'.
func TestExposedByIDMap(t *testing.T) {
	for _, tc := range []struct {
		mode, uid, gid uint32
		dir, want      bool
	}{
		{0o644, 0, 0, false, false}, // world-readable
		{0o755, 0, 0, true, false},
		{0o600, 0, 0, false, true},   // a key
		{0o640, 0, 103, false, true}, // root-owned, group ssl-cert
		{0o710, 0, 103, true, true},  // a directory others cannot search
		{0o4754, 0, 102, false, false},
		{0o4750, 0, 102, false, true},
		{0o640, 105, 0, false, true},  // group root may read
		{0o600, 105, 0, false, false}, // another user's: the map does not give it
		{0o622, 0, 0, false, true},    // write bits do not matter, read ones do
		{0o1777, 0, 0, true, false},   // /tmp-like
		{0o711, 0, 0, true, true},     // listing, beyond search
		{0o711, 0, 0, false, true},    // a file others may run, not read
		{0o000, 0, 0, false, true},    // the owner may chmod
		{0o200, 0, 0, false, true},
		{0o744, 0, 0, true, true}, // a directory others may list, not search
		{0o700, 1000, 1000, true, false},
	} {
		assert.Equal(t, tc.want, exposedByIDMap(tc.mode, tc.uid, tc.gid, tc.dir), "%o %d:%d dir=%v", tc.mode, tc.uid, tc.gid, tc.dir)
	}
}

// TestACLGives: a named user or group entry for id 0 with read or search
// bits beyond other's opens the file to the workload.
func TestACLGives(t *testing.T) {
	acl := func(entries ...[3]uint32) []byte {
		b := []byte{2, 0, 0, 0}
		for _, e := range entries {
			b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
			b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
			b = binary.LittleEndian.AppendUint32(b, e[2])
		}
		return b
	}
	const none = 0xffffffff
	base := [][3]uint32{{0x01, 6, none}, {0x04, 4, none}, {0x10, 4, none}, {0x20, 0, none}}
	assert.False(t, aclGives(acl(base...), 0))
	assert.True(t, aclGives(acl(append(base, [3]uint32{0x08, 4, 0})...), 0), "group 0 may read")
	assert.True(t, aclGives(acl(append(base, [3]uint32{0x02, 5, 0})...), 0), "user 0 may read")
	assert.False(t, aclGives(acl(append(base, [3]uint32{0x02, 4, 0})...), 4), "no more than other")
	assert.False(t, aclGives(acl(append(base, [3]uint32{0x08, 4, 1000})...), 0), "another group")
	assert.True(t, aclGives([]byte{2}, 0), "unparsable: masked")
	assert.True(t, aclMayGive(0o640, 1, 1))
	assert.False(t, aclMayGive(0o644, 1, 1))
	assert.False(t, aclMayGive(0o640, 0, 1), "root's: decided by its mode")
}
