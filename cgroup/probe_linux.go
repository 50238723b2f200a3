package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Probe reports how cgroups are set up and, per controller, whether this
// caller can create a per-run group with it. It changes nothing: it reads
// /proc/self/mountinfo, /proc/self/cgroup and a few cgroup files, and asks
// access(2) about the parent directories.
func Probe() Support {
	f, err := gatherFacts(Options{}, nil)
	if err != nil {
		return Support{Err: err}
	}
	return supportFromFacts(f, swapAccounting(f), favorDynModsAvailable())
}

// mountsCache holds the parsed cgroup mounts: like jail's other host facts,
// they are read once per process (reading mountinfo costs ~0.1 ms).
var mountsCache struct {
	once   sync.Once
	mounts []mount
	err    error
}

func cgroupMounts() ([]mount, error) {
	mountsCache.once.Do(func() {
		b, err := readFile("/proc/self/mountinfo")
		mountsCache.mounts, mountsCache.err = parseMountinfo(b), err
	})
	return mountsCache.mounts, mountsCache.err
}

// gatherFacts reads what [makePlan] needs. need lists the controllers the
// limits use (memory, pids, cpu, io): cgroup2's controller files are read
// only if one is needed; nil means all of them (Probe).
func gatherFacts(o Options, need []string) (facts, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return facts{}, err
	}
	self, err := readFile("/proc/self/cgroup")
	if err != nil {
		return facts{}, err
	}
	f := facts{
		Layout:   planLayout(mounts, parseProcCgroup(self)),
		V1:       map[string]dirFacts{},
		HostSwap: hostHasSwap(),
		EUID:     unix.Geteuid(),
		NoV2:     o.noV2,
	}
	if o.Parent != "" {
		if f.Parent, f.ParentRel, err = parentCgroup(o.Parent, mounts); err != nil {
			return facts{}, err
		}
	}
	if need == nil {
		need = []string{ControllerMemory, ControllerPids, ControllerCPU, ControllerIO}
	}
	if h := f.Layout.V2; h != nil && !f.NoV2 {
		f.V2 = probeDir(f.parentDir(*h))
		if len(need) > 0 {
			if b, err := readFile(path.Join(h.MountPoint, "cgroup.controllers")); err == nil {
				f.V2Bound = strings.Fields(b)
			}
		}
		if f.V2.Err == nil {
			if slices.ContainsFunc(need, func(c string) bool { return slices.Contains(f.V2Bound, c) }) {
				b, err := readFile(path.Join(f.V2.Dir, "cgroup.subtree_control"))
				f.V2.Subtree, f.V2.SubtreeErr = strings.Fields(b), err
			}
			// Only the fix for a missing controller needs to know whether
			// the parent holds processes. The root cgroup is exempt from
			// the no-internal-processes rule (cgroup-v2.rst).
			missing := slices.ContainsFunc(need, func(c string) bool {
				return slices.Contains(f.V2Bound, c) && !slices.Contains(f.V2.Subtree, c)
			})
			if missing && (f.V2.Dir != h.Dir("/") || h.Root != "/") {
				procs, err := readFile(path.Join(f.V2.Dir, "cgroup.procs"))
				f.V2.HasProcs = err == nil && strings.TrimSpace(procs) != ""
			}
			// Children start in this process's cgroup and move into the
			// group: the kernel checks cgroup.procs of the common ancestor.
			ancestor := h.Dir(commonAncestor(h.Self, path.Join(f.parentCg(*h), "x")))
			f.V2MigrateErr = access(path.Join(ancestor, "cgroup.procs"), unix.W_OK)
		}
	}
	for _, h := range f.Layout.V1 {
		if !slices.ContainsFunc(h.Controllers, func(c string) bool {
			return slices.ContainsFunc(controllerNames, func(n string) bool { return v1Name(n) == c })
		}) {
			continue // cpuset, devices, perf_event, ...: never used
		}
		f.V1[h.Name()] = probeDir(f.parentDir(h))
	}
	return f, nil
}

// probeDir says whether this caller may create a cgroup in dir.
func probeDir(dir string) dirFacts {
	d := dirFacts{Dir: dir}
	if dir == "" {
		d.Err = errors.New("this process's cgroup is outside the mounted subtree")
		return d
	}
	d.Err = access(dir, unix.W_OK|unix.X_OK)
	return d
}

// access is access(2) with the effective ids, as the kernel checks them for
// mkdir and write. EROFS is wrapped in errReadOnly.
func access(p string, mode uint32) error {
	err := unix.Faccessat(unix.AT_FDCWD, p, mode, unix.AT_EACCESS)
	if errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%w: %s", errReadOnly, p)
	}
	if err != nil {
		return &os.PathError{Op: "access", Path: p, Err: err}
	}
	return nil
}

// hostHasSwap reports whether the host has swap (sysinfo(2) totalswap).
// If it cannot tell, it assumes swap, so that swap limits fail closed.
func hostHasSwap() bool {
	var si unix.Sysinfo_t
	return unix.Sysinfo(&si) != nil || si.Totalswap > 0
}

// swapAccounting says whether a memory group here can limit swap: "yes",
// "no" or "unknown".
func swapAccounting(f facts) string {
	mem := decide(ControllerMemory, f)
	exists := func(p string) bool { return unix.Access(p, unix.F_OK) == nil }
	switch {
	case mem.Version == 1 && mem.Dir != "":
		// Every v1 memory cgroup, the root too, has the memsw files when
		// swap accounting is on.
		if exists(path.Join(mem.Dir, "memory.memsw.limit_in_bytes")) {
			return "yes"
		}
		return "no"
	case mem.Version == 2 && mem.Dir != "":
		// The root cgroup has no memory.swap.max; look at the parent, then
		// at its children.
		dirs := []string{mem.Dir}
		if entries, err := os.ReadDir(mem.Dir); err == nil {
			for _, e := range entries {
				if e.IsDir() {
					dirs = append(dirs, path.Join(mem.Dir, e.Name()))
				}
			}
		}
		for _, d := range dirs {
			if exists(path.Join(d, "memory.max")) {
				if exists(path.Join(d, "memory.swap.max")) {
					return "yes"
				}
				return "no"
			}
		}
	}
	return "unknown"
}

// favorDynModsAvailable reports whether the kernel lists favordynmods in
// /sys/kernel/cgroup/features.
func favorDynModsAvailable() bool {
	b, err := os.ReadFile("/sys/kernel/cgroup/features")
	return err == nil && slices.Contains(strings.Fields(string(b)), "favordynmods")
}
