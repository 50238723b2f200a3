package cgroup

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Fake hosts for the plan tests. Every parent directory is writable unless
// a test says otherwise.
var (
	allV2 = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}
)

// v2Host is a pure cgroup v2 host; the caller runs in self ("0::" path).
func v2Host(t *testing.T, self string, subtree []string) facts {
	l := planLayout(parseMountinfo(readFixture(t, "mountinfo-v2.txt")), parseProcCgroup("0::"+self+"\n"))
	return facts{
		Layout:   l,
		V2Bound:  allV2,
		V2:       dirFacts{Dir: l.V2.Dir(self), Subtree: subtree, HasProcs: self != "/"},
		V1:       map[string]dirFacts{},
		HostSwap: true,
	}
}

// hybridHost is this CI machine: v1 controllers, cgroup2 with hugetlb only.
func hybridHost(t *testing.T) facts {
	l := planLayout(parseMountinfo(readFixture(t, "mountinfo-hybrid.txt")), parseProcCgroup(readFixture(t, "cgroup-hybrid.txt")))
	f := facts{
		Layout:   l,
		V2Bound:  []string{"hugetlb"},
		V2:       dirFacts{Dir: "/sys/fs/cgroup/unified"},
		V1:       map[string]dirFacts{},
		HostSwap: true,
	}
	for _, h := range l.V1 {
		f.V1[h.Name()] = dirFacts{Dir: h.Dir(h.Self)}
	}
	return f
}

// systemdV1Host has cpu,cpuacct joined and a user session's cgroups.
func systemdV1Host(t *testing.T) facts {
	l := planLayout(parseMountinfo(readFixture(t, "mountinfo-v1-systemd.txt")), parseProcCgroup(readFixture(t, "cgroup-v1-systemd.txt")))
	f := facts{Layout: l, V1: map[string]dirFacts{}, HostSwap: false, NoV2: true, EUID: 1000}
	for _, h := range l.V1 {
		f.V1[h.Name()] = dirFacts{Dir: h.Dir(h.Self)}
	}
	return f
}

func TestMakePlan(t *testing.T) {
	full := Limits{MemoryMaxBytes: 64 << 20, PidsMax: 32, CPUs: 0.5, CPUWeight: 100, IOWeight: 100}
	tests := []struct {
		name   string
		facts  func(t *testing.T) facts
		limits Limits
		want   string
	}{
		{
			name:   "v2 root cgroup, every limit",
			facts:  func(t *testing.T) facts { return v2Host(t, "/", allV2) },
			limits: full,
			want: "unified /sys/fs/cgroup [memory pids cpu io cpuacct freezer]" +
				" memory.max=67108864 memory.swap.max=0 memory.oom.group=1? pids.max=32" +
				" cpu.max=50000 100000 cpu.weight=100 io.weight=default 100|io.bfq.weight=100\n",
		},
		{
			name:   "v2 swap allowed, host without swap",
			facts:  func(t *testing.T) facts { f := v2Host(t, "/", allV2); f.HostSwap = false; return f },
			limits: Limits{MemoryMaxBytes: 256 << 20, SwapMaxBytes: 1 << 30},
			want: "unified /sys/fs/cgroup [memory cpuacct freezer]" +
				" memory.max=268435456 memory.swap.max=1073741824? memory.oom.group=1?\n",
		},
		{
			name:   "v2 no limits: a group to kill and measure",
			facts:  func(t *testing.T) facts { return v2Host(t, "/", allV2) },
			limits: Limits{CPUTime: time.Second},
			want:   "unified /sys/fs/cgroup [cpuacct freezer]\n",
		},
		{
			name:   "v2 own cgroup holds processes",
			facts:  func(t *testing.T) facts { return v2Host(t, "/user.slice/session-1.scope", nil) },
			limits: Limits{MemoryMaxBytes: 64 << 20, CPUTime: time.Second},
			want: "unified /sys/fs/cgroup/user.slice/session-1.scope [cpuacct freezer]\n" +
				"unenforced memory: memory is not enabled in /sys/fs/cgroup/user.slice/session-1.scope/cgroup.subtree_control " +
				"(fix: /sys/fs/cgroup/user.slice/session-1.scope holds processes (jail itself), so no controller can be enabled below it: " +
				"give jail a parent cgroup without processes whose cgroup.subtree_control has +memory " +
				"(e.g. the scope of `systemd-run --scope -p Delegate=yes -p DelegateSubgroup=supervisor`), or run jail in the root cgroup)\n" +
				"unenforced swap: memory is not enabled in /sys/fs/cgroup/user.slice/session-1.scope/cgroup.subtree_control " +
				"(fix: /sys/fs/cgroup/user.slice/session-1.scope holds processes (jail itself), so no controller can be enabled below it: " +
				"give jail a parent cgroup without processes whose cgroup.subtree_control has +memory " +
				"(e.g. the scope of `systemd-run --scope -p Delegate=yes -p DelegateSubgroup=supervisor`), or run jail in the root cgroup)\n",
		},
		{
			name: "v2 parent without processes lacks pids",
			facts: func(t *testing.T) facts {
				f := v2Host(t, "/", []string{"memory"})
				f.Parent = "/jail"
				f.V2.Dir, f.V2.HasProcs = "/sys/fs/cgroup/jail", false
				return f
			},
			limits: Limits{PidsMax: 10},
			want: "unified /sys/fs/cgroup/jail [cpuacct freezer]\n" +
				"unenforced pids: pids is not enabled in /sys/fs/cgroup/jail/cgroup.subtree_control " +
				"(fix: echo +pids > /sys/fs/cgroup/jail/cgroup.subtree_control)\n",
		},
		{
			name: "v2 unprivileged without delegation",
			facts: func(t *testing.T) facts {
				f := v2Host(t, "/user.slice", allV2)
				f.EUID, f.V2.Err = 1000, &fs.PathError{Op: "access", Path: "/sys/fs/cgroup/user.slice", Err: fs.ErrPermission}
				return f
			},
			limits: Limits{CPUs: 1, CPUTime: time.Second},
			want: "unenforced cpus: cgroup v2 directory /sys/fs/cgroup/user.slice is not writable by uid 1000 " +
				"(fix: run as root, or delegate it: chown 1000 /sys/fs/cgroup/user.slice /sys/fs/cgroup/user.slice/cgroup.procs " +
				"/sys/fs/cgroup/user.slice/cgroup.subtree_control (systemd does this for a unit with Delegate=yes))\n" +
				"unenforced cpu-time: cgroup v2 directory /sys/fs/cgroup/user.slice is not writable by uid 1000 " +
				"(fix: run as root, or delegate it: chown 1000 /sys/fs/cgroup/user.slice /sys/fs/cgroup/user.slice/cgroup.procs " +
				"/sys/fs/cgroup/user.slice/cgroup.subtree_control (systemd does this for a unit with Delegate=yes))\n",
		},
		{
			name:   "hybrid: limits on v1, cgroup2 for kill and CPU time",
			facts:  hybridHost,
			limits: full,
			want: "unified /sys/fs/cgroup/unified [cpuacct freezer]\n" +
				"memory /sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c [memory]" +
				" memory.limit_in_bytes=67108864 memory.kmem.tcp.limit_in_bytes=67108864 memory.memsw.limit_in_bytes=67108864\n" +
				"pids /sys/fs/cgroup/pids [pids] pids.max=32\n" +
				"cpu /sys/fs/cgroup/cpu [cpu] cpu.cfs_period_us=100000 cpu.cfs_quota_us=50000 cpu.shares=1024\n" +
				"blkio /sys/fs/cgroup/blkio [io] blkio.bfq.weight=100|blkio.weight=500\n",
		},
		{
			name:   "hybrid: only the hierarchies asked for",
			facts:  hybridHost,
			limits: Limits{PidsMax: 64},
			want:   "unified /sys/fs/cgroup/unified [cpuacct freezer]\npids /sys/fs/cgroup/pids [pids] pids.max=64\n",
		},
		{
			name:   "hybrid without cgroup2: cpuacct and freezer on v1",
			facts:  func(t *testing.T) facts { f := hybridHost(t); f.NoV2 = true; return f },
			limits: Limits{MemoryMaxBytes: 16 << 20, SwapMaxBytes: 16 << 20},
			want: "memory /sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c [memory]" +
				" memory.limit_in_bytes=16777216 memory.kmem.tcp.limit_in_bytes=16777216 memory.memsw.limit_in_bytes=33554432\n" +
				"cpuacct /sys/fs/cgroup/cpuacct [cpuacct]\n" +
				"freezer /sys/fs/cgroup/freezer [freezer]\n",
		},
		{
			name: "hybrid with cgroup2 not writable: falls back to v1",
			facts: func(t *testing.T) facts {
				f := hybridHost(t)
				f.V2.Err = fs.ErrPermission
				return f
			},
			limits: Limits{PidsMax: 8},
			want: "pids /sys/fs/cgroup/pids [pids] pids.max=8\n" +
				"cpuacct /sys/fs/cgroup/cpuacct [cpuacct]\nfreezer /sys/fs/cgroup/freezer [freezer]\n",
		},
		{
			name:   "systemd v1: cpu,cpuacct joined, no swap on the host",
			facts:  systemdV1Host,
			limits: Limits{MemoryMaxBytes: 1 << 30, CPUs: 2, CPUWeight: 10000},
			want: "memory /sys/fs/cgroup/memory/user.slice/user-1000.slice/session-3.scope [memory]" +
				" memory.limit_in_bytes=1073741824 memory.kmem.tcp.limit_in_bytes=1073741824\n" +
				"cpu,cpuacct /sys/fs/cgroup/cpu,cpuacct/user.slice [cpu cpuacct]" +
				" cpu.cfs_period_us=100000 cpu.cfs_quota_us=200000 cpu.shares=262144\n" +
				"freezer /sys/fs/cgroup/freezer/user.slice [freezer]\n",
		},
		{
			name: "v1 memory not delegated to an unprivileged caller",
			facts: func(t *testing.T) facts {
				f := systemdV1Host(t)
				d := f.V1["memory"]
				d.Err = &fs.PathError{Op: "access", Path: d.Dir, Err: fs.ErrPermission}
				f.V1["memory"] = d
				return f
			},
			limits: Limits{MemoryMaxBytes: 1 << 30},
			want: "cpu,cpuacct /sys/fs/cgroup/cpu,cpuacct/user.slice [cpuacct]\n" +
				"freezer /sys/fs/cgroup/freezer/user.slice [freezer]\n" +
				"unenforced memory: cgroup v1 memory directory /sys/fs/cgroup/memory/user.slice/user-1000.slice/session-3.scope " +
				"is not writable by uid 1000 (fix: run as root, or delegate it: chown 1000 /sys/fs/cgroup/memory/user.slice/user-1000.slice/session-3.scope)\n",
		},
		{
			name: "read-only cgroup mount in a container",
			facts: func(t *testing.T) facts {
				f := v2Host(t, "/", allV2)
				f.V2.Err = fmt.Errorf("%w: /sys/fs/cgroup", errReadOnly)
				return f
			},
			limits: Limits{PidsMax: 8},
			want: "unenforced pids: cgroup v2 directory /sys/fs/cgroup is on a read-only mount " +
				"(fix: mount the cgroup filesystem read-write where jail runs (in a container: a writable, delegated cgroup))\n",
		},
		{
			name: "no cgroups at all",
			facts: func(t *testing.T) facts {
				return facts{Layout: planLayout(nil, nil), V1: map[string]dirFacts{}}
			},
			limits: Limits{PidsMax: 8, CPUTime: time.Second},
			want: "unenforced pids: no pids controller: not on cgroup2 and no cgroup v1 hierarchy mounted " +
				"(fix: use a kernel with the pids controller and mount cgroup2 at /sys/fs/cgroup)\n" +
				"unenforced cpu-time: no cpuacct controller: not on cgroup2 and no cgroup v1 hierarchy mounted " +
				"(fix: use a kernel with the cpuacct controller and mount cgroup2 at /sys/fs/cgroup)\n",
		},
		{
			name: "v2 caller may not migrate into the parent",
			facts: func(t *testing.T) facts {
				f := v2Host(t, "/user.slice/u.service/app.scope", nil)
				f.Parent, f.EUID = "/jail", 1000
				f.V2.Dir, f.V2.Subtree, f.V2.HasProcs = "/sys/fs/cgroup/jail", allV2, false
				f.V2MigrateErr = fs.ErrPermission
				return f
			},
			limits: Limits{MemoryMaxBytes: 8 << 20},
			want: "unenforced memory: uid 1000 may not move processes into /sys/fs/cgroup/jail (permission denied) " +
				"(fix: run as root, or use a parent cgroup inside the subtree delegated to you that also holds jail itself)\n" +
				"unenforced swap: uid 1000 may not move processes into /sys/fs/cgroup/jail (permission denied) " +
				"(fix: run as root, or use a parent cgroup inside the subtree delegated to you that also holds jail itself)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := makePlan(tt.limits, tt.facts(t)).String()
			assert.Equal(t, tt.want, got, "got:\n%s", got)
		})
	}
}

func TestSupportFromFacts(t *testing.T) {
	s := supportFromFacts(hybridHost(t), "yes", true)
	var lines []string
	for _, c := range s.Controllers {
		lines = append(lines, c.Name+" v"+string(rune('0'+c.Version))+" "+c.Dir)
		assert.True(t, c.Usable, "%s: got unusable (%s)", c.Name, c.Reason)
	}
	assert.Equal(t, []string{
		"memory v1 /sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c",
		"pids v1 /sys/fs/cgroup/pids",
		"cpu v1 /sys/fs/cgroup/cpu",
		"cpuacct v2 /sys/fs/cgroup/unified",
		"io v1 /sys/fs/cgroup/blkio",
		"freezer v2 /sys/fs/cgroup/unified",
	}, lines)
	assert.Equal(t, ModeHybrid, s.Mode)
	assert.Equal(t, "yes", s.SwapAccounting)
	assert.False(t, s.FavorDynMods)
	assert.True(t, s.SlowAttach())
	assert.Equal(t, "mount -o remount,favordynmods /sys/fs/cgroup/unified", s.FavorDynModsCommand)

	v2 := supportFromFacts(v2Host(t, "/", allV2), "yes", true)
	assert.False(t, v2.SlowAttach())
	assert.Equal(t, "mount -o remount,nsdelegate,memory_recursiveprot,favordynmods /sys/fs/cgroup", v2.FavorDynModsCommand)
	assert.Empty(t, supportFromFacts(v2Host(t, "/", allV2), "yes", false).FavorDynModsCommand, "kernel without favordynmods")
	c, ok := s.Controller(ControllerIO)
	assert.True(t, ok)
	assert.Equal(t, 1, c.Version)
	assert.False(t, strings.Contains(c.Dir, "unified"))
}
