package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Controller names, as [Support] reports them. cpuacct and freezer are the
// v1 names of what cgroup v2 has in every group: cpu.stat and
// cgroup.kill/cgroup.freeze. io is blkio on v1.
const (
	ControllerMemory  = "memory"
	ControllerPids    = "pids"
	ControllerCPU     = "cpu"
	ControllerCPUAcct = "cpuacct"
	ControllerIO      = "io"
	ControllerFreezer = "freezer"
)

// controllerNames lists the controllers jail uses, in report order.
var controllerNames = []string{
	ControllerMemory, ControllerPids, ControllerCPU, ControllerCPUAcct, ControllerIO, ControllerFreezer,
}

// v1Name returns the v1 name of a controller.
func v1Name(controller string) string {
	if controller == ControllerIO {
		return "blkio"
	}
	return controller
}

// coreOnV2 reports whether cgroup v2 provides the controller's function in
// every cgroup, without enabling anything.
func coreOnV2(controller string) bool {
	return controller == ControllerCPUAcct || controller == ControllerFreezer
}

// dirFacts is what the probe found about the directory a per-run group
// would be created in, in one hierarchy.
type dirFacts struct {
	// Dir is the directory.
	Dir string
	// Err is nil if this caller may create a cgroup in Dir: it exists and
	// access(2) grants W_OK|X_OK.
	Err error
	// Subtree is the content of Dir/cgroup.subtree_control (v2 only): the
	// controllers a child of Dir gets.
	Subtree []string
	// SubtreeErr is the error reading it.
	SubtreeErr error
	// HasProcs is true if Dir itself holds processes (v2 only), which keeps
	// controllers from being enabled below it.
	HasProcs bool
}

// facts is everything the plan depends on, gathered by the probe.
type facts struct {
	Layout layout
	// Parent is the cgroup path of Options.Parent, "" for this process's own
	// cgroups. If ParentRel, it is relative to this process's cgroup in
	// each hierarchy.
	Parent    string
	ParentRel bool
	// V2Bound lists the controllers bound to cgroup2 (its root's
	// cgroup.controllers).
	V2Bound []string
	// V2 is about the cgroup2 parent directory; meaningful if Layout.V2 != nil.
	V2 dirFacts
	// V2MigrateErr is non-nil if this caller may not move its children from
	// its own cgroup into a group under V2.Dir: the kernel wants write access
	// to cgroup.procs of their common ancestor (cgroup-v2.rst, "Delegation
	// Containment").
	V2MigrateErr error
	// V1 is about the parent directory in each v1 hierarchy, by
	// hierarchy name.
	V1 map[string]dirFacts
	// HostSwap is true if the host has swap (SwapTotal > 0 in /proc/meminfo).
	HostSwap bool
	// EUID is the caller's effective uid.
	EUID int
	// NoV2 makes the plan ignore cgroup2 (tests of the v1 paths on hybrid hosts).
	NoV2 bool
}

// parentCg returns the cgroup path in h where per-run groups go.
func (f facts) parentCg(h hierarchy) string {
	switch {
	case f.Parent == "":
		return h.Self
	case f.ParentRel:
		return path.Join(h.Self, f.Parent)
	default:
		return f.Parent
	}
}

// parentDir returns the directory in h where per-run groups go.
func (f facts) parentDir(h hierarchy) string {
	return h.Dir(f.parentCg(h))
}

// v2Usable reports whether a per-run group can be created on cgroup2, and
// why not.
func (f facts) v2Usable() (bool, Controller) {
	c := Controller{Version: 2}
	switch {
	case f.NoV2:
		c.Reason = "cgroup v2 not used"
	case f.Layout.V2 == nil && f.Layout.Mode == ModeUnified:
		c.Reason = "this process's cgroup is not visible in the cgroup2 mount"
		c.Fix = "mount cgroup2 inside the cgroup namespace jail runs in"
	case f.Layout.V2 == nil:
		c.Version = 0
		c.Reason = "no cgroup2 mount"
	default:
		c.Dir = f.V2.Dir
		if f.V2.Err != nil {
			c.Reason, c.Fix = dirReasonFix("cgroup v2", f.V2.Dir, f.V2.Err, f.EUID, true)
			return false, c
		}
		if f.V2MigrateErr != nil {
			c.Reason = fmt.Sprintf("uid %d may not move processes into %s (%v)", f.EUID, f.V2.Dir, f.V2MigrateErr)
			c.Fix = "run as root, or use a parent cgroup inside the subtree delegated to you that also holds jail itself"
			return false, c
		}
		c.Usable = true
	}
	return c.Usable, c
}

// dirReasonFix explains why a parent directory cannot be used.
func dirReasonFix(what, dir string, err error, euid int, v2 bool) (reason, fix string) {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s directory %s does not exist", what, dir), "create it, or use an existing parent cgroup"
	}
	if errors.Is(err, errReadOnly) {
		return fmt.Sprintf("%s directory %s is on a read-only mount", what, dir),
			"mount the cgroup filesystem read-write where jail runs (in a container: a writable, delegated cgroup)"
	}
	if errors.Is(err, fs.ErrPermission) {
		reason = fmt.Sprintf("%s directory %s is not writable by uid %d", what, dir, euid)
		if v2 {
			return reason, fmt.Sprintf("run as root, or delegate it: chown %d %s %s/cgroup.procs %s/cgroup.subtree_control "+
				"(systemd does this for a unit with Delegate=yes)", euid, dir, dir, dir)
		}
		return reason, fmt.Sprintf("run as root, or delegate it: chown %d %s", euid, dir)
	}
	return fmt.Sprintf("%s directory %s: %v", what, dir, err), "run as root"
}

// errReadOnly stands for EROFS from access(2) (a read-only cgroup mount, as
// in a container).
var errReadOnly = errors.New("read-only file system")

// decide says on which version and in which directory this caller can
// create a per-run group with controller, or why not.
func decide(controller string, f facts) Controller {
	c := Controller{Name: controller}
	v2ok, v2 := f.v2Usable()
	if coreOnV2(controller) && v2ok {
		c.Version, c.Dir, c.Usable = 2, v2.Dir, true
		return c
	}
	if !coreOnV2(controller) && f.Layout.V2 != nil && !f.NoV2 && slices.Contains(f.V2Bound, controller) {
		c.Version, c.Dir = 2, f.V2.Dir
		switch {
		case !v2ok:
			c.Reason, c.Fix = v2.Reason, v2.Fix
		case f.V2.SubtreeErr != nil:
			c.Reason = fmt.Sprintf("read %s/cgroup.subtree_control: %v", f.V2.Dir, f.V2.SubtreeErr)
			c.Fix = "run as root"
		case !slices.Contains(f.V2.Subtree, controller):
			c.Reason = fmt.Sprintf("%s is not enabled in %s/cgroup.subtree_control", controller, f.V2.Dir)
			c.Fix = enableFix(controller, f)
		default:
			c.Usable = true
		}
		return c
	}
	if h := f.Layout.v1Hierarchy(v1Name(controller)); h != nil {
		d := f.V1[h.Name()]
		c.Version, c.Dir = 1, d.Dir
		if d.Err != nil {
			c.Reason, c.Fix = dirReasonFix("cgroup v1 "+h.Name(), d.Dir, d.Err, f.EUID, false)
			return c
		}
		c.Usable = true
		return c
	}
	if coreOnV2(controller) && v2.Version == 2 {
		c.Version, c.Dir, c.Reason, c.Fix = 2, v2.Dir, v2.Reason, v2.Fix
		return c
	}
	c.Reason = fmt.Sprintf("no %s controller: not on cgroup2 and no cgroup v1 hierarchy mounted", controller)
	c.Fix = fmt.Sprintf("use a kernel with the %s controller and mount cgroup2 at %s", controller, defaultMountPoint)
	return c
}

// enableFix says how to enable controller below the v2 parent.
func enableFix(controller string, f facts) string {
	dir := f.V2.Dir
	if f.V2.HasProcs {
		return fmt.Sprintf("%s holds processes (jail itself), so no controller can be enabled below it: "+
			"give jail a parent cgroup without processes whose cgroup.subtree_control has +%s "+
			"(e.g. the scope of `systemd-run --scope -p Delegate=yes -p DelegateSubgroup=supervisor`), "+
			"or run jail in the root cgroup", dir, controller)
	}
	return fmt.Sprintf("echo +%s > %s/cgroup.subtree_control", controller, dir)
}

// fileValue is a value for one control file.
type fileValue struct {
	File, Value string
}

// write is one setting of a limit. Candidates are alternatives: the first
// file that exists in the new group gets its value.
type write struct {
	// Limit is the limit the write enforces; "" for settings that are not
	// limits (memory.oom.group).
	Limit      string
	Candidates []fileValue
	// Optional writes are skipped when no candidate exists, e.g. swap where
	// the host has no swap: with no swap device, no swap is trivially
	// enforced.
	Optional bool
}

// dirPlan is the per-run group in one hierarchy.
type dirPlan struct {
	Hierarchy hierarchy
	// Parent is the directory to create the group in.
	Parent string
	// Serves are the controllers this directory is for: those of
	// controllerNames that the group uses in this hierarchy.
	Serves []string
	Writes []write
}

// plan is what New creates: at most one cgroup2 directory and one directory
// per v1 hierarchy, with the values to write.
type plan struct {
	V2 *dirPlan
	V1 []dirPlan
	// Unenforced lists the limits that cannot be enforced.
	Unenforced []Unenforced
}

// dirFor returns the plan's directory for controller c (decided), adding it
// if needed.
func (p *plan) dirFor(c Controller, f facts) *dirPlan {
	if c.Version == 2 {
		if p.V2 == nil {
			p.V2 = &dirPlan{Hierarchy: *f.Layout.V2, Parent: f.V2.Dir}
		}
		p.V2.Serves = appendUnique(p.V2.Serves, c.Name)
		return p.V2
	}
	h := f.Layout.v1Hierarchy(v1Name(c.Name))
	for i := range p.V1 {
		if p.V1[i].Hierarchy.Name() == h.Name() {
			p.V1[i].Serves = appendUnique(p.V1[i].Serves, c.Name)
			return &p.V1[i]
		}
	}
	p.V1 = append(p.V1, dirPlan{Hierarchy: *h, Parent: c.Dir, Serves: []string{c.Name}})
	return &p.V1[len(p.V1)-1]
}

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// makePlan works out the per-run group for limits l. It decides, per
// controller, the version and directory, and lists the limits it cannot
// enforce. Only the v1 hierarchies the limits need are used: memory, pids,
// cpu, blkio for the limits, and, where there is no usable cgroup2 (which
// has cpu.stat and cgroup.kill in every group), cpuacct for CPU usage and
// freezer for an atomic kill.
func makePlan(l Limits, f facts) plan {
	var p plan
	unenforced := func(limit string, c Controller) {
		p.Unenforced = append(p.Unenforced, Unenforced{Limit: limit, Reason: c.Reason, Fix: c.Fix})
	}

	if l.MemoryMaxBytes > 0 {
		c := decide(ControllerMemory, f)
		if !c.Usable {
			unenforced(LimitMemory, c)
			// Without swap on the host, no swap holds anyway.
			if f.HostSwap {
				unenforced(LimitSwap, c)
			}
		} else {
			d := p.dirFor(c, f)
			mem := strconv.FormatInt(l.MemoryMaxBytes, 10)
			if c.Version == 2 {
				d.Writes = append(d.Writes,
					write{Limit: LimitMemory, Candidates: []fileValue{{"memory.max", mem}}},
					write{Limit: LimitSwap, Candidates: []fileValue{{"memory.swap.max", strconv.FormatInt(l.SwapMaxBytes, 10)}}, Optional: !f.HostSwap},
					// An OOM kill takes the whole group, not one process
					// (Linux 4.19).
					write{Candidates: []fileValue{{"memory.oom.group", "1"}}, Optional: true})
			} else {
				// v1 has no group OOM kill: the kernel kills one process and
				// Destroy kills the rest.
				d.Writes = append(d.Writes, write{Limit: LimitMemory, Candidates: []fileValue{{"memory.limit_in_bytes", mem}}},
					// TCP socket buffers are charged to a v1 group only once
					// its TCP limit is set (tcpmem_active, memcontrol.c), and
					// then to a counter of their own: without this a jail
					// held 400 MiB of loopback buffers under a 64 MiB
					// limit, paid from the host-wide TCP budget. v2
					// charges them to the group's memory anyway.
					write{Limit: LimitTCPMemory, Candidates: []fileValue{{"memory.kmem.tcp.limit_in_bytes", mem}}})
				// memsw is memory plus swap, set after the memory limit it
				// may not be below. Without swap on the host it would equal
				// the memory usage anyway, so it is left alone: a charge
				// refused by memsw is not counted in memory.failcnt, and
				// Linux 6.x no longer counts memsw.failcnt.
				if f.HostSwap {
					d.Writes = append(d.Writes, write{Limit: LimitSwap, Candidates: []fileValue{{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryMaxBytes+l.SwapMaxBytes, 10)}}})
				}
			}
		}
	}

	if l.PidsMax > 0 {
		c := decide(ControllerPids, f)
		if !c.Usable {
			unenforced(LimitPids, c)
		} else {
			d := p.dirFor(c, f)
			d.Writes = append(d.Writes, write{Limit: LimitPids, Candidates: []fileValue{{"pids.max", strconv.FormatInt(l.PidsMax, 10)}}})
		}
	}

	if l.CPUs > 0 || l.CPUWeight > 0 {
		c := decide(ControllerCPU, f)
		switch {
		case !c.Usable:
			if l.CPUs > 0 {
				unenforced(LimitCPUs, c)
			}
			if l.CPUWeight > 0 {
				unenforced(LimitCPUWeight, c)
			}
		case c.Version == 2:
			d := p.dirFor(c, f)
			if l.CPUs > 0 {
				d.Writes = append(d.Writes, write{Limit: LimitCPUs, Candidates: []fileValue{{"cpu.max", cpuMax(l.CPUs)}}})
			}
			if l.CPUWeight > 0 {
				d.Writes = append(d.Writes, write{Limit: LimitCPUWeight, Candidates: []fileValue{{"cpu.weight", strconv.FormatUint(l.CPUWeight, 10)}}})
			}
		default:
			d := p.dirFor(c, f)
			if l.CPUs > 0 {
				// The period first: the quota is checked against it.
				d.Writes = append(d.Writes,
					write{Limit: LimitCPUs, Candidates: []fileValue{{"cpu.cfs_period_us", strconv.FormatInt(int64(CPUPeriod.Microseconds()), 10)}}},
					write{Limit: LimitCPUs, Candidates: []fileValue{{"cpu.cfs_quota_us", strconv.FormatInt(cpuQuotaMicros(l.CPUs), 10)}}})
			}
			if l.CPUWeight > 0 {
				d.Writes = append(d.Writes, write{Limit: LimitCPUWeight, Candidates: []fileValue{{"cpu.shares", strconv.FormatUint(cpuWeightToShares(l.CPUWeight), 10)}}})
			}
		}
	}

	if l.IOWeight > 0 {
		c := decide(ControllerIO, f)
		bfq := strconv.FormatUint(ioWeightToBFQ(l.IOWeight), 10)
		switch {
		case !c.Usable:
			unenforced(LimitIOWeight, c)
		case c.Version == 2:
			// io.weight is io.cost's; BFQ has its own file.
			d := p.dirFor(c, f)
			d.Writes = append(d.Writes, write{Limit: LimitIOWeight, Candidates: []fileValue{
				{"io.weight", "default " + strconv.FormatUint(l.IOWeight, 10)}, {"io.bfq.weight", bfq}}})
		default:
			d := p.dirFor(c, f)
			d.Writes = append(d.Writes, write{Limit: LimitIOWeight, Candidates: []fileValue{
				{"blkio.bfq.weight", bfq}, {"blkio.weight", strconv.FormatUint(ioWeightToBlkio(l.IOWeight), 10)}}})
		}
	}

	// A cgroup2 group costs one mkdir and gives cpu.stat, cgroup.kill and
	// cgroup.events in every group, also on hybrid hosts where cgroup2 holds
	// no controller: use it whenever this caller can.
	if ok, _ := f.v2Usable(); ok && p.V2 == nil {
		p.V2 = &dirPlan{Hierarchy: *f.Layout.V2, Parent: f.V2.Dir}
	}
	if p.V2 != nil {
		p.V2.Serves = appendUnique(appendUnique(p.V2.Serves, ControllerCPUAcct), ControllerFreezer)
	} else {
		if c := decide(ControllerCPUAcct, f); c.Usable {
			p.dirFor(c, f)
		} else if l.CPUTime > 0 {
			unenforced(LimitCPUTime, c)
		}
		// Without a freezer, Destroy kills by pid until the group is empty.
		if c := decide(ControllerFreezer, f); c.Usable {
			p.dirFor(c, f)
		}
	}
	return p
}

// String renders the plan, one directory per line, for tests and debugging.
func (p plan) String() string {
	var b strings.Builder
	dirs := p.V1
	if p.V2 != nil {
		dirs = append([]dirPlan{*p.V2}, dirs...)
	}
	for _, d := range dirs {
		fmt.Fprintf(&b, "%s %s [%s]", d.Hierarchy.Name(), path.Clean(d.Parent), strings.Join(d.Serves, " "))
		for _, w := range d.Writes {
			var alts []string
			for _, c := range w.Candidates {
				alts = append(alts, c.File+"="+c.Value)
			}
			opt := ""
			if w.Optional {
				opt = "?"
			}
			fmt.Fprintf(&b, " %s%s", strings.Join(alts, "|"), opt)
		}
		b.WriteByte('\n')
	}
	for _, u := range p.Unenforced {
		fmt.Fprintf(&b, "unenforced %s\n", u)
	}
	return b.String()
}
