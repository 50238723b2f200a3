package cgroup

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stats is what a group used. A section is nil when the group does not have
// the controller (on v1, memory and pids are only joined for their limits).
type Stats struct {
	CPU    *CPUStats    `json:"cpu,omitempty"`
	Memory *MemoryStats `json:"memory,omitempty"`
	Pids   *PidsStats   `json:"pids,omitempty"`
}

// CPUStats is the group's CPU time (v2 cpu.stat; v1 cpuacct.usage,
// cpuacct.usage_user, cpuacct.usage_sys and cpu.stat).
type CPUStats struct {
	// Usage is the total CPU time, user plus system.
	Usage  time.Duration `json:"usage"`
	User   time.Duration `json:"user"`
	System time.Duration `json:"system"`
	// ThrottledPeriods counts the periods in which the CPUs limit stopped
	// the group (nr_throttled); 0 without a CPUs limit.
	ThrottledPeriods int64 `json:"throttled_periods"`
	// ThrottledTime is how long the group was stopped by the CPUs limit.
	ThrottledTime time.Duration `json:"throttled_time"`
}

// MemoryStats is the group's memory use.
type MemoryStats struct {
	// PeakBytes is the high-water mark (v2 memory.peak, Linux 5.19; v1
	// memory.max_usage_in_bytes), nil where the kernel does not say.
	PeakBytes *int64 `json:"peak_bytes,omitempty"`
	// OOMKills counts processes the OOM killer killed in the group
	// (oom_kill in v2 memory.events and in v1 memory.oom_control).
	OOMKills int64 `json:"oom_kills"`
	// MaxHits counts the times usage hit the limit (v2 memory.events max;
	// v1 memory.failcnt plus memory.memsw.failcnt). On v1 with swap limited
	// (memsw set, on hosts with swap) Linux 6.x counts no hit: charges fail
	// on memsw first, and memsw.failcnt is no longer tracked.
	MaxHits int64 `json:"max_hits"`
}

// PidsStats is the group's task count.
type PidsStats struct {
	// Peak is the most tasks the group had at once (pids.peak, about 6.1),
	// nil where the kernel does not say.
	Peak *int64 `json:"peak,omitempty"`
	// MaxHits counts forks refused by pids.max (pids.events max).
	MaxHits int64 `json:"max_hits"`
}

// parseFlatKeyed parses a "key value" per line file (cpu.stat,
// memory.events, pids.events, memory.oom_control, cpuacct.stat).
func parseFlatKeyed(text string) (map[string]int64, error) {
	m := map[string]int64{}
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			if strings.TrimSpace(line) == "" {
				continue
			}
			return nil, fmt.Errorf("parse %q: want \"key value\"", strings.TrimSpace(line))
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", strings.TrimSpace(line), err)
		}
		m[k] = n
	}
	return m, nil
}

// parseSingle parses a file holding one integer, such as memory.peak. "max"
// is not a valid value here.
func parseSingle(text string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", strings.TrimSpace(text), err)
	}
	return n, nil
}

// cpuStatsV2 reads CPU figures from v2 cpu.stat (microseconds).
func cpuStatsV2(cpuStat map[string]int64) CPUStats {
	us := func(k string) time.Duration { return time.Duration(cpuStat[k]) * time.Microsecond }
	return CPUStats{
		Usage:            us("usage_usec"),
		User:             us("user_usec"),
		System:           us("system_usec"),
		ThrottledPeriods: cpuStat["nr_throttled"],
		ThrottledTime:    us("throttled_usec"),
	}
}

// userHZ is the unit of cpuacct.stat: USER_HZ, 100 on every architecture
// Linux supports for userspace ABI purposes (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// cpuStatsV1 builds CPU figures from v1 files: cpuacct.usage (ns), and
// either cpuacct.usage_user/usage_sys (ns, Linux 4.7) or cpuacct.stat (in
// USER_HZ ticks) when those are absent (userNS < 0). Throttling comes from
// the cpu controller's cpu.stat, see [cpuThrottlingV1].
func cpuStatsV1(usageNS, userNS, sysNS int64, acctStat map[string]int64) CPUStats {
	s := CPUStats{Usage: time.Duration(usageNS)}
	if userNS >= 0 && sysNS >= 0 {
		s.User, s.System = time.Duration(userNS), time.Duration(sysNS)
	} else {
		tick := time.Second / userHZ
		s.User, s.System = time.Duration(acctStat["user"])*tick, time.Duration(acctStat["system"])*tick
	}
	return s
}

// cpuThrottlingV1 reads throttling from v1 cpu.stat (throttled_time in ns).
func cpuThrottlingV1(s *CPUStats, cpuStat map[string]int64) {
	s.ThrottledPeriods = cpuStat["nr_throttled"]
	s.ThrottledTime = time.Duration(cpuStat["throttled_time"])
}
