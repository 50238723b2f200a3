package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
)

// Update changes the group's memory, swap, pids and CPU bandwidth limits
// from was to to; other fields must be equal. It is how a jail built
// ahead (a warm pool's member) takes the limits of the run it is released
// for. Only what differs is written. A limit whose controller the group
// does not have returns an error wrapping ErrCannotUpdate and changes
// nothing; a write the kernel refuses (a memory limit below what the group
// already uses: EBUSY) returns that error, and the limits written before
// it stay: the caller discards the group then.
//
// On cgroup v1 a raised memory limit raises memory+swap first and a lowered
// one lowers it after (memory.memsw.limit_in_bytes may not be below
// memory.limit_in_bytes), and the TCP buffer limit follows the memory limit
// as New sets it.
func (g *Group) Update(was, to Limits) error {
	if err := to.Validate(); err != nil {
		return err
	}
	w, t := was, to
	w.MemoryMaxBytes, w.SwapMaxBytes, w.PidsMax, w.CPUs = 0, 0, 0, 0
	t.MemoryMaxBytes, t.SwapMaxBytes, t.PidsMax, t.CPUs = 0, 0, 0, 0
	if w != t {
		return fmt.Errorf("cgroup: update: only memory, swap, pids and cpus may change")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	type change struct {
		controller string
		apply      func(d *groupDir) error
	}
	var changes []change
	if was.MemoryMaxBytes != to.MemoryMaxBytes || was.SwapMaxBytes != to.SwapMaxBytes {
		changes = append(changes, change{ControllerMemory, func(d *groupDir) error { return updateMemory(d, was, to) }})
	}
	if was.PidsMax != to.PidsMax {
		changes = append(changes, change{ControllerPids, func(d *groupDir) error {
			return writeFile(path.Join(d.path, "pids.max"), limitValue(to.PidsMax, "max"))
		}})
	}
	if was.CPUs != to.CPUs {
		changes = append(changes, change{ControllerCPU, func(d *groupDir) error {
			if d.hier.V2 {
				v := "max " + strconv.FormatInt(int64(CPUPeriod.Microseconds()), 10)
				if to.CPUs > 0 {
					v = cpuMax(to.CPUs)
				}
				return writeFile(path.Join(d.path, "cpu.max"), v)
			}
			if err := writeFile(path.Join(d.path, "cpu.cfs_period_us"), strconv.FormatInt(int64(CPUPeriod.Microseconds()), 10)); err != nil {
				return err
			}
			q := int64(-1)
			if to.CPUs > 0 {
				q = cpuQuotaMicros(to.CPUs)
			}
			return writeFile(path.Join(d.path, "cpu.cfs_quota_us"), strconv.FormatInt(q, 10))
		}})
	}
	// Every controller first, then the writes: nothing changes when one
	// cannot.
	dirs := make([]*groupDir, len(changes))
	for i, c := range changes {
		if dirs[i] = g.dirServing(c.controller); dirs[i] == nil {
			return fmt.Errorf("cgroup: update %s: %w", c.controller, ErrCannotUpdate)
		}
	}
	for i, c := range changes {
		if err := c.apply(dirs[i]); err != nil {
			return fmt.Errorf("cgroup: update %s: %w", c.controller, err)
		}
	}
	return nil
}

// limitValue is n, or none for 0 (no limit).
func limitValue(n int64, none string) string {
	if n == 0 {
		return none
	}
	return strconv.FormatInt(n, 10)
}

// updateMemory writes the memory (and swap) limits of d, in the order the
// kernel accepts them.
func updateMemory(d *groupDir, was, to Limits) error {
	if d.hier.V2 {
		if err := writeFile(path.Join(d.path, "memory.max"), limitValue(to.MemoryMaxBytes, "max")); err != nil {
			return err
		}
		swap := strconv.FormatInt(to.SwapMaxBytes, 10)
		if to.MemoryMaxBytes == 0 {
			swap = "max"
		}
		if err := writeFile(path.Join(d.path, "memory.swap.max"), swap); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	const unlimited = "-1"
	mem := limitValue(to.MemoryMaxBytes, unlimited)
	writes := []fileValue{{"memory.limit_in_bytes", mem}, {"memory.kmem.tcp.limit_in_bytes", mem}}
	// memsw was set by New only where the host has swap; a file New left
	// unlimited is left alone. It may never be below the memory limit: it
	// goes first when its new value is at least the old limit, else after.
	if b, err := os.ReadFile(path.Join(d.path, "memory.memsw.limit_in_bytes")); err == nil {
		if cur, err := parseSingle(string(b)); err == nil && cur < 1<<62 {
			memsw, first := unlimited, true
			if to.MemoryMaxBytes > 0 {
				memsw = strconv.FormatInt(to.MemoryMaxBytes+to.SwapMaxBytes, 10)
				first = was.MemoryMaxBytes == 0 || to.MemoryMaxBytes+to.SwapMaxBytes >= was.MemoryMaxBytes
			}
			if first {
				writes = append([]fileValue{{"memory.memsw.limit_in_bytes", memsw}}, writes...)
			} else {
				writes = append(writes, fileValue{"memory.memsw.limit_in_bytes", memsw})
			}
		}
	}
	for _, w := range writes {
		if err := writeFile(path.Join(d.path, w.File), w.Value); err != nil {
			return err
		}
	}
	return nil
}
