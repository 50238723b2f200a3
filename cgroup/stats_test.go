package cgroup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlatKeyed(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    map[string]int64
		wantErr bool
	}{
		{
			name: "v2 memory.events",
			text: "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n",
			want: map[string]int64{"low": 0, "high": 0, "max": 12, "oom": 1, "oom_kill": 1, "oom_group_kill": 1},
		},
		{
			name: "v1 memory.oom_control on 6.18",
			text: "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			want: map[string]int64{"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 3},
		},
		{name: "blank lines", text: "\nmax 2\n\n", want: map[string]int64{"max": 2}},
		{name: "not a number", text: "max max\n", wantErr: true},
		{name: "no value", text: "populated\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlatKeyed(tt.text)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCPUStats(t *testing.T) {
	v2, err := parseFlatKeyed("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnice_usec 0\n" +
		"nr_periods 20\nnr_throttled 10\nthrottled_usec 250000\nnr_bursts 0\nburst_usec 0\n")
	require.NoError(t, err)
	acct, err := parseFlatKeyed("user 150\nsystem 25\n")
	require.NoError(t, err)
	cpuV1, err := parseFlatKeyed("nr_periods 20\nnr_throttled 4\nthrottled_time 300000000\nnr_bursts 0\nburst_time 0\n")
	require.NoError(t, err)

	tests := []struct {
		name string
		got  CPUStats
		want CPUStats
	}{
		{
			name: "v2 cpu.stat",
			got:  cpuStatsV2(v2),
			want: CPUStats{Usage: 1500 * time.Millisecond, User: time.Second, System: 500 * time.Millisecond,
				ThrottledPeriods: 10, ThrottledTime: 250 * time.Millisecond},
		},
		{
			name: "v1 usage_user and usage_sys in ns",
			got:  func() CPUStats { s := cpuStatsV1(2e9, 15e8, 5e8, nil); cpuThrottlingV1(&s, cpuV1); return s }(),
			want: CPUStats{Usage: 2 * time.Second, User: 1500 * time.Millisecond, System: 500 * time.Millisecond,
				ThrottledPeriods: 4, ThrottledTime: 300 * time.Millisecond},
		},
		{
			name: "v1 cpuacct.stat in USER_HZ ticks, no cpu controller",
			got:  cpuStatsV1(1750e6, -1, -1, acct),
			want: CPUStats{Usage: 1750 * time.Millisecond, User: 1500 * time.Millisecond, System: 250 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.got)
		})
	}
}

func TestParseSingle(t *testing.T) {
	n, err := parseSingle("16777216\n")
	require.NoError(t, err)
	assert.Equal(t, int64(16777216), n)
	_, err = parseSingle("max\n")
	assert.Error(t, err)
}
