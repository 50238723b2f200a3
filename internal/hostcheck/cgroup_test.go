package hostcheck

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/jailrt/jail/cgroup"
)

func TestCgroupFeature(t *testing.T) {
	// This CI machine: v1 controllers, cgroup2 with hugetlb only, root.
	hybrid := cgroup.Support{
		Mode: cgroup.ModeHybrid,
		Controllers: []cgroup.Controller{
			{Name: "memory", Version: 1, Dir: "/sys/fs/cgroup/memory/a", Usable: true},
			{Name: "pids", Version: 1, Dir: "/sys/fs/cgroup/pids", Usable: true},
			{Name: "cpu", Version: 1, Dir: "/sys/fs/cgroup/cpu", Usable: true},
			{Name: "cpuacct", Version: 2, Dir: "/sys/fs/cgroup/unified", Usable: true},
			{Name: "io", Version: 1, Dir: "/sys/fs/cgroup/blkio", Usable: true},
			{Name: "freezer", Version: 2, Dir: "/sys/fs/cgroup/unified", Usable: true},
		},
		SwapAccounting:        "yes",
		FavorDynModsAvailable: true,
		FavorDynModsCommand:   "mount -o remount,favordynmods /sys/fs/cgroup/unified",
	}
	hybridFavor := hybrid
	hybridFavor.FavorDynMods, hybridFavor.FavorDynModsCommand = true, ""

	v2 := cgroup.Support{
		Mode: cgroup.ModeUnified,
		Controllers: []cgroup.Controller{
			{Name: "memory", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
			{Name: "pids", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
			{Name: "cpu", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
			{Name: "cpuacct", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
			{Name: "io", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
			{Name: "freezer", Version: 2, Dir: "/sys/fs/cgroup", Usable: true},
		},
		SwapAccounting: "unknown",
	}
	scope := "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"
	v2Session := cgroup.Support{
		Mode: cgroup.ModeUnified,
		Controllers: []cgroup.Controller{
			{Name: "memory", Version: 2, Dir: scope, Reason: "memory is not enabled in " + scope + "/cgroup.subtree_control",
				Fix: "give jail a parent cgroup without processes whose cgroup.subtree_control has +memory"},
			{Name: "pids", Version: 2, Dir: scope, Reason: "pids is not enabled in " + scope + "/cgroup.subtree_control",
				Fix: "give jail a parent cgroup without processes whose cgroup.subtree_control has +pids"},
			{Name: "cpu", Version: 2, Dir: scope, Reason: "cpu is not enabled in " + scope + "/cgroup.subtree_control"},
			{Name: "cpuacct", Version: 2, Dir: scope, Usable: true},
			{Name: "io", Version: 0, Reason: "no io controller"},
			{Name: "freezer", Version: 2, Dir: scope, Usable: true},
		},
		SwapAccounting: "yes",
	}

	tests := []struct {
		name        string
		support     cgroup.Support
		wantVerdict Verdict
		wantDetail  string
		wantFix     string
	}{
		{
			name:        "hybrid host without favordynmods",
			support:     hybrid,
			wantVerdict: Warn,
			wantDetail: "hybrid; usable by this caller: memory v1, pids v1, cpu v1, cpuacct v2, io v1, freezer v2; swap accounting yes; " +
				"favordynmods off: moving a process into a v1 cgroup by pid waits for an RCU grace period (5-15 ms)",
			wantFix: "`mount -o remount,favordynmods /sys/fs/cgroup/unified` (or boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2)",
		},
		{
			name:        "hybrid host with favordynmods",
			support:     hybridFavor,
			wantVerdict: Warn,
			wantDetail:  "hybrid; usable by this caller: memory v1, pids v1, cpu v1, cpuacct v2, io v1, freezer v2; swap accounting yes",
			wantFix:     "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2",
		},
		{
			name:        "v2 root cgroup",
			support:     v2,
			wantVerdict: OK,
			wantDetail:  "v2; usable by this caller: memory v2, pids v2, cpu v2, cpuacct v2, io v2, freezer v2; swap accounting unknown",
		},
		{
			name:        "v2 session scope without delegation",
			support:     v2Session,
			wantVerdict: Warn,
			wantDetail: "v2; usable by this caller: cpuacct v2, freezer v2; " +
				"memory v2 not usable (memory is not enabled in " + scope + "/cgroup.subtree_control); " +
				"pids v2 not usable (pids is not enabled in " + scope + "/cgroup.subtree_control); " +
				"cpu v2 not usable (cpu is not enabled in " + scope + "/cgroup.subtree_control); io missing; swap accounting yes",
			wantFix: "give jail a parent cgroup without processes whose cgroup.subtree_control has +memory",
		},
		{
			name:        "none",
			support:     cgroup.Support{},
			wantVerdict: Missing,
			wantDetail:  "no cgroup or cgroup2 mount in /proc/self/mountinfo",
			wantFix:     "mount cgroup2: `mount -t cgroup2 none /sys/fs/cgroup`",
		},
		{
			name:        "proc unreadable",
			support:     cgroup.Support{Err: errors.New("open /proc/self/mountinfo: no such file or directory")},
			wantVerdict: Missing,
			wantDetail:  "open /proc/self/mountinfo: no such file or directory",
			wantFix:     "mount procfs at /proc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cgroupFeature(tt.support)
			assert.Equal(t, Feature{Name: nameCgroups, Verdict: tt.wantVerdict, Detail: tt.wantDetail, Fix: tt.wantFix}, got)
		})
	}
}
