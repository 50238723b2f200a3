package cgroup

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name       string
		limits     Limits
		wantFields []string
	}{
		{name: "zero is no limit", limits: Limits{}},
		{name: "all set", limits: Limits{MemoryMaxBytes: 64 << 20, SwapMaxBytes: 1 << 30, PidsMax: 64, CPUs: 0.5,
			CPUWeight: 100, IOWeight: 10000, CPUTime: time.Second}},
		{name: "smallest values", limits: Limits{MemoryMaxBytes: MinMemoryBytes, PidsMax: 1, CPUs: MinCPUs, CPUWeight: 1, IOWeight: 1}},
		{name: "negative memory", limits: Limits{MemoryMaxBytes: -1}, wantFields: []string{"MemoryMaxBytes"}},
		{name: "memory below 1 MiB", limits: Limits{MemoryMaxBytes: 4096}, wantFields: []string{"MemoryMaxBytes"}},
		{name: "swap without memory", limits: Limits{SwapMaxBytes: 1 << 20}, wantFields: []string{"SwapMaxBytes"}},
		{name: "negative swap", limits: Limits{MemoryMaxBytes: 64 << 20, SwapMaxBytes: -1}, wantFields: []string{"SwapMaxBytes"}},
		{name: "memory plus swap overflows", limits: Limits{MemoryMaxBytes: math.MaxInt64 - 10, SwapMaxBytes: 11},
			wantFields: []string{"SwapMaxBytes"}},
		{name: "pids above PID_MAX_LIMIT", limits: Limits{PidsMax: MaxPids + 1}, wantFields: []string{"PidsMax"}},
		{name: "negative pids", limits: Limits{PidsMax: -5}, wantFields: []string{"PidsMax"}},
		{name: "cpus below 1 ms per period", limits: Limits{CPUs: 0.005}, wantFields: []string{"CPUs"}},
		{name: "cpus NaN", limits: Limits{CPUs: math.NaN()}, wantFields: []string{"CPUs"}},
		{name: "cpus infinite", limits: Limits{CPUs: math.Inf(1)}, wantFields: []string{"CPUs"}},
		{name: "cpus negative", limits: Limits{CPUs: -1}, wantFields: []string{"CPUs"}},
		{name: "weights above 10000", limits: Limits{CPUWeight: 10001, IOWeight: 20000}, wantFields: []string{"CPUWeight", "IOWeight"}},
		{name: "negative cpu time", limits: Limits{CPUTime: -time.Second}, wantFields: []string{"CPUTime"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.Validate()
			if len(tt.wantFields) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			var fields []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				le, ok := errors.AsType[*LimitError](e)
				require.True(t, ok, "got %T, want *LimitError", e)
				fields = append(fields, le.Field)
				assert.Contains(t, le.Error(), "cgroup limit "+le.Field+": got ")
			}
			assert.Equal(t, tt.wantFields, fields)
		})
	}
}

func TestCPUMax(t *testing.T) {
	tests := []struct {
		cpus float64
		want string
	}{
		{0.5, "50000 100000"},
		{1, "100000 100000"},
		{2.5, "250000 100000"},
		{MinCPUs, "1000 100000"},
		{0.3333333, "33333 100000"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, cpuMax(tt.cpus))
		})
	}
}

func TestCPUWeightToShares(t *testing.T) {
	tests := []struct {
		weight, shares uint64
	}{
		{1, 2},
		{100, 1024},
		{10000, 262144},
		{0, 2},          // clamped as 1
		{20000, 262144}, // clamped as 10000
		{50, 421},       // runc: ceil(10^((l²+125l)/612 − 7/34)) = ceil(49.96)
		{1000, 17615},   // ceil(999.6)
	}
	for _, tt := range tests {
		t.Run("", func(t *testing.T) {
			assert.Equal(t, tt.shares, cpuWeightToShares(tt.weight), "weight %d", tt.weight)
		})
	}
	t.Run("round trip through runc's formula", func(t *testing.T) {
		prev := uint64(0)
		for w := uint64(1); w <= MaxWeight; w++ {
			shares := cpuWeightToShares(w)
			assert.GreaterOrEqual(t, shares, prev, "not monotonic at weight %d", w)
			prev = shares
			// Where the shares are fine-grained enough, runc maps them back.
			if w >= 10 {
				back := cpuSharesToWeight(shares)
				assert.InDelta(t, float64(w), float64(back), math.Max(1, float64(w)*0.002),
					"weight %d → shares %d → weight %d", w, shares, back)
			}
		}
	})
}

func TestIOWeightConversions(t *testing.T) {
	tests := []struct {
		weight, bfq, blkio uint64
	}{
		{1, 1, 10},
		{50, 50, 252},
		{100, 100, 500},
		{5050, 550, 750},
		{10000, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run("", func(t *testing.T) {
			assert.Equal(t, tt.bfq, ioWeightToBFQ(tt.weight), "bfq weight for %d", tt.weight)
			assert.Equal(t, tt.blkio, ioWeightToBlkio(tt.weight), "blkio weight for %d", tt.weight)
		})
	}
}

func TestUnenforcedError(t *testing.T) {
	err := error(&UnenforcedError{Limits: []Unenforced{
		{Limit: LimitMemory, Reason: "cgroup v1 memory directory /sys/fs/cgroup/memory/a is not writable by uid 1000",
			Fix: "run as root, or delegate it: chown 1000 /sys/fs/cgroup/memory/a"},
		{Limit: LimitPids, Reason: "no pids controller"},
	}})
	assert.Equal(t, "cgroup: cannot enforce memory: cgroup v1 memory directory /sys/fs/cgroup/memory/a is not writable by uid 1000 "+
		"(fix: run as root, or delegate it: chown 1000 /sys/fs/cgroup/memory/a); pids: no pids controller", err.Error())
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotContains(t, err.Error(), "\n")
}
