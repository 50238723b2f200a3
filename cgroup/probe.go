package cgroup

import "strings"

// Support is what [Probe] found: how cgroups are set up and what this
// caller can do with them.
type Support struct {
	// Err is non-nil if /proc/self/mountinfo or /proc/self/cgroup could not
	// be read; the rest is then empty.
	Err error `json:"-"`
	// Mode is how the host mounts cgroups.
	Mode Mode `json:"mode"`
	// Controllers has one entry per controller jail uses, in the order
	// memory, pids, cpu, cpuacct, io, freezer.
	Controllers []Controller `json:"controllers"`
	// SwapAccounting says whether a group's swap can be limited: "yes"
	// (memory.memsw.limit_in_bytes or memory.swap.max exists), "no", or
	// "unknown" (cgroup2 with only the root cgroup to look at).
	SwapAccounting string `json:"swap_accounting"`
	// HostSwap is true if the host has swap. Without swap, "no swap" holds
	// trivially even where swap cannot be limited.
	HostSwap bool `json:"host_swap"`
	// FavorDynMods is true if a cgroup hierarchy is mounted with
	// favordynmods. Without it, moving a process between cgroups by pid
	// (cgroup.procs) waits for an RCU grace period after a quiet spell
	// (5 to 15 ms measured on 6.18): CLONE_INTO_CGROUP on v2 and
	// [Group.AttachFiles] on v1 avoid the wait, [Group.Attach] does not.
	FavorDynMods bool `json:"favordynmods"`
	// FavorDynModsAvailable is true if the kernel knows the favordynmods
	// mount option (/sys/kernel/cgroup/features, Linux 6.0).
	FavorDynModsAvailable bool `json:"favordynmods_available"`
	// FavorDynModsCommand turns favordynmods on by remounting cgroup2 with
	// its current options (the kernel's cgroup_threadgroup_rwsem is global,
	// so this also speeds up v1 hierarchies); empty if it is on, or the
	// kernel or the mounts cannot (a v1 remount may not change flags).
	FavorDynModsCommand string `json:"favordynmods_command,omitempty"`
}

// SlowAttach reports whether a limit would use a v1 hierarchy while
// favordynmods is off, so that moving a process in by pid
// ([Group.Attach]) waits for an RCU grace period.
func (s Support) SlowAttach() bool {
	if s.FavorDynMods {
		return false
	}
	for _, c := range s.Controllers {
		if c.Version == 1 && c.Usable && !coreOnV2(c.Name) {
			return true
		}
	}
	return false
}

// Controller is where one controller is and whether this caller can create
// a per-run group with it.
type Controller struct {
	// Name is one of memory, pids, cpu, cpuacct, io, freezer. On cgroup v2,
	// cpuacct and freezer stand for cpu.stat and cgroup.kill, which every
	// v2 group has.
	Name string `json:"name"`
	// Version is 1 or 2, or 0 if the host does not have the controller.
	Version int `json:"version"`
	// Dir is the directory a per-run group would be created in.
	Dir string `json:"dir,omitempty"`
	// Usable is true if this caller can create a group there with the
	// controller and write its limits.
	Usable bool `json:"usable"`
	// Reason says why not, when not Usable.
	Reason string `json:"reason,omitempty"`
	// Fix says how to make it usable.
	Fix string `json:"fix,omitempty"`
}

// Controller returns the entry for name, and false if there is none.
func (s Support) Controller(name string) (Controller, bool) {
	for _, c := range s.Controllers {
		if c.Name == name {
			return c, true
		}
	}
	return Controller{}, false
}

// supportFromFacts builds the report from the probe's facts. swapAccounting
// is "yes", "no" or "unknown" as the probe found it.
func supportFromFacts(f facts, swapAccounting string, favorAvailable bool) Support {
	s := Support{
		Mode:                  f.Layout.Mode,
		SwapAccounting:        swapAccounting,
		HostSwap:              f.HostSwap,
		FavorDynMods:          f.Layout.FavorDynMods,
		FavorDynModsAvailable: favorAvailable,
	}
	for _, name := range controllerNames {
		s.Controllers = append(s.Controllers, decide(name, f))
	}
	if h := f.Layout.V2; h != nil && favorAvailable && !f.Layout.FavorDynMods {
		s.FavorDynModsCommand = "mount -o " + strings.Join(append(append([]string{"remount"}, h.Flags...), "favordynmods"), ",") +
			" " + h.MountPoint
	}
	return s
}
