package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Limits are the per-run limits. The zero value of every field means "no
// limit"; the zero Limits still gives a group that can be killed as a whole
// and measured.
type Limits struct {
	// MemoryMaxBytes caps the group's memory (memory.max on v2,
	// memory.limit_in_bytes on v1). At least [MinMemoryBytes]. On v1, TCP
	// socket buffers are counted apart from the rest and get a limit of
	// the same size (memory.kmem.tcp.limit_in_bytes): the jail's total can
	// then reach twice it.
	MemoryMaxBytes int64 `json:"memory_max_bytes,omitempty"`
	// SwapMaxBytes is the swap the group may use beyond MemoryMaxBytes. With
	// a memory limit, 0 means no swap at all (memory.swap.max 0 on v2;
	// memory.memsw.limit_in_bytes equal to the memory limit on v1). Needs
	// MemoryMaxBytes.
	SwapMaxBytes int64 `json:"swap_max_bytes,omitempty"`
	// PidsMax caps the number of tasks (processes and threads) in the group
	// (pids.max). At most [MaxPids].
	PidsMax int64 `json:"pids_max,omitempty"`
	// CPUs is the CPU bandwidth in CPUs, e.g. 0.5 for half of one CPU,
	// enforced over a [CPUPeriod] window (cpu.max on v2,
	// cpu.cfs_quota_us/cpu.cfs_period_us on v1). At least [MinCPUs].
	CPUs float64 `json:"cpus,omitempty"`
	// CPUWeight is the group's share of contended CPU time, 1 to 10000 with
	// 100 the default, in cgroup v2 terms (cpu.weight). On v1 it is converted
	// to cpu.shares as runc and crun do (100 is 1024 shares).
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// IOWeight is the group's share of contended block I/O, 1 to 10000 with
	// 100 the default, in cgroup v2 terms (io.weight, or io.bfq.weight where
	// only BFQ offers weights). On v1 it is converted for blkio.bfq.weight
	// (1..1000) or blkio.weight (10..1000). A weight only matters on devices
	// whose scheduler is BFQ or that have io.cost enabled.
	IOWeight uint64 `json:"io_weight,omitempty"`
	// CPUTime is the total CPU time the group may use. The group does not
	// enforce it by itself: the caller polls [Group.CPUUsage] and kills the
	// group when it is exceeded. New only makes sure the usage can be read,
	// so that a CPU-time limit fails closed like the others.
	CPUTime time.Duration `json:"cpu_time,omitempty"`
}

// Bounds of the limits, as [Limits.Validate] checks them.
const (
	// MinMemoryBytes is the smallest memory limit accepted: below it, not
	// even a static shell starts.
	MinMemoryBytes = 1 << 20
	// MaxPids is the largest pids.max the kernel accepts (PID_MAX_LIMIT).
	MaxPids = 4 << 20
	// MinCPUs gives the kernel's smallest quota, 1 ms per [CPUPeriod].
	MinCPUs = 0.01
	// MaxCPUs is far above any machine; it keeps the quota in range.
	MaxCPUs = 1 << 20
	// MaxWeight is the largest cpu.weight and io.weight.
	MaxWeight = 10000
	// CPUPeriod is the CFS bandwidth period jail uses (the kernel's default).
	CPUPeriod = 100 * time.Millisecond
)

// LimitError says which limit is invalid and why.
type LimitError struct {
	// Field is the name of the [Limits] field, e.g. "MemoryMaxBytes".
	Field string
	// Value is the rejected value, formatted.
	Value string
	// Reason says what is wanted, e.g. "want at least 1048576".
	Reason string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("cgroup limit %s: got %s, %s", e.Field, e.Value, e.Reason)
}

// Validate checks every limit against its bounds. It returns nil or the
// errors.Join of one *[LimitError] per bad field.
func (l Limits) Validate() error {
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &LimitError{Field: field, Value: value, Reason: reason})
	}
	switch {
	case l.MemoryMaxBytes < 0:
		bad("MemoryMaxBytes", strconv.FormatInt(l.MemoryMaxBytes, 10), "want 0 (no limit) or a positive size")
	case l.MemoryMaxBytes > 0 && l.MemoryMaxBytes < MinMemoryBytes:
		bad("MemoryMaxBytes", strconv.FormatInt(l.MemoryMaxBytes, 10), fmt.Sprintf("want at least %d (1 MiB)", MinMemoryBytes))
	}
	switch {
	case l.SwapMaxBytes < 0:
		bad("SwapMaxBytes", strconv.FormatInt(l.SwapMaxBytes, 10), "want 0 (no swap) or a positive size")
	case l.SwapMaxBytes > 0 && l.MemoryMaxBytes == 0:
		bad("SwapMaxBytes", strconv.FormatInt(l.SwapMaxBytes, 10), "want a MemoryMaxBytes as well (swap is allowed beyond the memory limit)")
	case l.MemoryMaxBytes > 0 && l.SwapMaxBytes > math.MaxInt64-l.MemoryMaxBytes:
		bad("SwapMaxBytes", strconv.FormatInt(l.SwapMaxBytes, 10), "want memory plus swap to fit in 64 bits")
	}
	if l.PidsMax < 0 || l.PidsMax > MaxPids {
		bad("PidsMax", strconv.FormatInt(l.PidsMax, 10), fmt.Sprintf("want 0 (no limit) or 1 to %d", MaxPids))
	}
	if c := l.CPUs; math.IsNaN(c) || c < 0 || (c > 0 && c < MinCPUs) || c > MaxCPUs {
		bad("CPUs", strconv.FormatFloat(c, 'g', -1, 64), fmt.Sprintf("want 0 (no limit) or %g to %d", MinCPUs, MaxCPUs))
	}
	if l.CPUWeight > MaxWeight {
		bad("CPUWeight", strconv.FormatUint(l.CPUWeight, 10), fmt.Sprintf("want 0 (default) or 1 to %d", MaxWeight))
	}
	if l.IOWeight > MaxWeight {
		bad("IOWeight", strconv.FormatUint(l.IOWeight, 10), fmt.Sprintf("want 0 (default) or 1 to %d", MaxWeight))
	}
	if l.CPUTime < 0 {
		bad("CPUTime", l.CPUTime.String(), "want 0 (no limit) or a positive duration")
	}
	return errors.Join(errs...)
}

// Names of the limits in [Unenforced.Limit], as jail's flags name them.
const (
	LimitMemory = "memory"
	// LimitTCPMemory is the v1 limit of the TCP socket buffers, which
	// v1 counts apart from the rest of the memory.
	LimitTCPMemory = "memory for TCP buffers"
	LimitSwap      = "swap"
	LimitPids      = "pids"
	LimitCPUs      = "cpus"
	LimitCPUWeight = "cpu-weight"
	LimitIOWeight  = "io-weight"
	LimitCPUTime   = "cpu-time"
)

// controllers returns the controllers the limits need, of memory, pids,
// cpu and io; never nil.
func (l Limits) controllers() []string {
	need := []string{}
	if l.MemoryMaxBytes > 0 {
		need = append(need, ControllerMemory)
	}
	if l.PidsMax > 0 {
		need = append(need, ControllerPids)
	}
	if l.CPUs > 0 || l.CPUWeight > 0 {
		need = append(need, ControllerCPU)
	}
	if l.IOWeight > 0 {
		need = append(need, ControllerIO)
	}
	return need
}

// cpuQuotaMicros converts CPUs to a CFS quota in microseconds per
// [CPUPeriod], rounded to the nearest microsecond.
func cpuQuotaMicros(cpus float64) int64 {
	return int64(math.Round(cpus * float64(CPUPeriod/time.Microsecond)))
}

// cpuMax is the cgroup v2 cpu.max value for cpus: "$QUOTA $PERIOD".
func cpuMax(cpus float64) string {
	return fmt.Sprintf("%d %d", cpuQuotaMicros(cpus), CPUPeriod/time.Microsecond)
}

// cpuWeightToShares converts a cgroup v2 cpu.weight (1..10000) to v1
// cpu.shares (2..262144) by inverting the conversion runc (1.3.2) and crun
// (1.23) use since 2025 (opencontainers/runc#4785, containers/crun#1767):
//
//	weight = 10^((l² + 125·l)/612 − 7/34), l = log2(shares)
//
// It maps the ends and the defaults onto each other: 1 ↔ 2, 100 ↔ 1024,
// 10000 ↔ 262144. (The older linear formula mapped 1024 shares to weight 39.)
func cpuWeightToShares(weight uint64) uint64 {
	w := min(max(weight, 1), MaxWeight)
	// Solve l² + 125·l − 612·(log10(w) + 7/34) = 0 for the positive root.
	c := 612 * (math.Log10(float64(w)) + 7.0/34.0)
	l := (-125 + math.Sqrt(125*125+4*c)) / 2
	shares := uint64(math.Round(math.Exp2(l)))
	return min(max(shares, 2), 262144)
}

// cpuSharesToWeight is the runc/crun conversion from v1 shares to v2
// weight, kept for tests of [cpuWeightToShares].
func cpuSharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	l := math.Log2(float64(shares))
	exponent := (l*l+125*l)/612 - 7.0/34.0
	return min(max(uint64(math.Ceil(math.Pow(10, exponent))), 1), MaxWeight)
}

// ioWeightToBFQ converts an io.weight (1..10000, default 100) to a BFQ
// weight (1..1000, default 100), piecewise linearly so that the ends and the
// defaults match, as systemd does for io.bfq.weight.
func ioWeightToBFQ(weight uint64) uint64 {
	w := min(max(weight, 1), MaxWeight)
	if w <= 100 {
		return w
	}
	return 100 + (w-100)*900/(MaxWeight-100)
}

// ioWeightToBlkio converts an io.weight (1..10000, default 100) to a legacy
// CFQ blkio.weight (10..1000, default 500), piecewise linearly so that the
// ends and the defaults match. CFQ left the kernel in 5.0, so only kernels
// with out-of-tree schedulers still have blkio.weight.
func ioWeightToBlkio(weight uint64) uint64 {
	w := min(max(weight, 1), MaxWeight)
	if w <= 100 {
		return 10 + (w-1)*490/99
	}
	return 500 + (w-100)*500/(MaxWeight-100)
}
