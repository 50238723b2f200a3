package hostcheck

import (
	"fmt"
	"strings"

	"github.com/jailrt/jail/cgroup"
)

// limitControllers are the controllers jail's limits and teardown need:
// memory, pids and cpu for --memory, --pids and --cpus, cpuacct for
// --cpu-time (cpu.stat on v2), freezer for an atomic kill (cgroup.kill on
// v2). io is only for --io-weight and is reported, not required.
var limitControllers = []string{
	cgroup.ControllerMemory, cgroup.ControllerPids, cgroup.ControllerCPU,
	cgroup.ControllerCPUAcct, cgroup.ControllerFreezer,
}

// cgroupFeature judges what [cgroup.Probe] found: which controllers this
// caller can use and on which version, swap accounting, and whether moving
// a process into a v1 cgroup would wait for an RCU grace period.
func cgroupFeature(s cgroup.Support) Feature {
	f := Feature{Name: nameCgroups}
	if s.Err != nil {
		f.Verdict = Missing
		f.Detail = s.Err.Error()
		f.Fix = "mount procfs at /proc"
		return f
	}
	if s.Mode == cgroup.ModeNone {
		f.Verdict = Missing
		f.Detail = "no cgroup or cgroup2 mount in /proc/self/mountinfo"
		f.Fix = "mount cgroup2: `mount -t cgroup2 none /sys/fs/cgroup`"
		return f
	}

	var usable, unusable []string
	var firstUnusable *cgroup.Controller
	for i, c := range s.Controllers {
		switch {
		case c.Usable:
			usable = append(usable, fmt.Sprintf("%s v%d", c.Name, c.Version))
		case c.Version == 0:
			unusable = append(unusable, c.Name+" missing")
		default:
			unusable = append(unusable, fmt.Sprintf("%s v%d not usable (%s)", c.Name, c.Version, c.Reason))
		}
		if !c.Usable && firstUnusable == nil && isLimitController(c.Name) {
			firstUnusable = &s.Controllers[i]
		}
	}
	parts := []string{s.Mode.String()}
	if len(usable) > 0 {
		parts = append(parts, "usable by this caller: "+strings.Join(usable, ", "))
	}
	parts = append(parts, unusable...)
	parts = append(parts, "swap accounting "+s.SwapAccounting)
	if s.SlowAttach() {
		parts = append(parts, "favordynmods off: moving a process into a v1 cgroup by pid waits for an RCU grace period (5-15 ms)")
	}
	f.Detail = strings.Join(parts, "; ")

	switch {
	case firstUnusable != nil:
		f.Verdict = Warn
		f.Fix = firstUnusable.Fix
		if f.Fix == "" {
			f.Fix = firstUnusable.Reason
		}
	case s.SlowAttach() && s.FavorDynModsCommand != "":
		f.Verdict = Warn
		f.Fix = "`" + s.FavorDynModsCommand + "` (or boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2)"
	case s.Mode != cgroup.ModeUnified:
		f.Verdict = Warn
		f.Fix = "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2"
	default:
		f.Verdict = OK
	}
	return f
}

func isLimitController(name string) bool {
	for _, c := range limitControllers {
		if c == name {
			return true
		}
	}
	return false
}

// snapshotFeature says whether this caller's sessions can be snapshotted:
// a snapshot stops the session's processes with the freezer (cgroup.freeze
// on v2, the freezer controller on v1) while it copies the workspace, and
// is refused without one. It also says what a snapshot is not.
func snapshotFeature(s cgroup.Support) Feature {
	f := Feature{Name: nameSnapshots}
	const what = "files only: the workspace, copied while the session's processes are frozen; no memory or process checkpoint (`session pause` keeps those, until resume)"
	for _, c := range s.Controllers {
		if c.Name != cgroup.ControllerFreezer {
			continue
		}
		if c.Usable {
			f.Verdict, f.Detail = OK, what
			return f
		}
		f.Verdict = Warn
		f.Detail = "this caller cannot freeze a session (" + c.Reason + "): session snapshot, restore and fork are refused; a snapshot is " + what
		f.Fix = c.Fix
		if f.Fix == "" {
			f.Fix = "run as root, or with a delegated cgroup"
		}
		return f
	}
	f.Verdict = Warn
	f.Detail = "no freezer: session snapshot, restore and fork are refused"
	f.Fix = "mount cgroup2 (or the v1 freezer hierarchy)"
	return f
}
