package cgroup

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerName(t *testing.T) {
	o := owner{PID: 4242, StartTime: 987654, PIDNS: 4026531836, Seq: 7}
	assert.Equal(t, "jail-4242-987654-4026531836-7", o.name())
	got, ok := parseName(o.name())
	require.True(t, ok)
	assert.Equal(t, o, got)
	assert.Equal(t, "exec-4242-987654-4026531836-7", o.nameWith("exec-"))
	// A later process with the same pid (pids come back) names its
	// groups apart from what the first one left.
	later := o
	later.StartTime++
	assert.NotEqual(t, o.nameWith("exec-"), later.nameWith("exec-"))
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want owner
		ok   bool
	}{
		{name: "valid", in: "jail-1-2-3-4", want: owner{PID: 1, StartTime: 2, PIDNS: 3, Seq: 4}, ok: true},
		{name: "zero start time and seq", in: "jail-10-0-3-0", want: owner{PID: 10, PIDNS: 3}, ok: true},
		{name: "other prefix", in: "runc-1-2-3-4"},
		{name: "system cgroup", in: "user.slice"},
		{name: "missing field", in: "jail-1-2-3"},
		{name: "extra field", in: "jail-1-2-3-4-5"},
		{name: "sign", in: "jail-+1-2-3-4"},
		{name: "leading zero", in: "jail-01-2-3-4"},
		{name: "pid zero", in: "jail-0-2-3-4"},
		{name: "pid above PID_MAX_LIMIT", in: "jail-4194305-2-3-4"},
		{name: "overflow", in: "jail-1-99999999999999999999-3-4"},
		{name: "empty field", in: "jail-1--3-4"},
		{name: "letters", in: "jail-1-2-3-x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseName(tt.in)
			assert.Equal(t, tt.ok, ok, "parseName(%q): got ok %v, want %v", tt.in, ok, tt.ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("jail-1-2-3-4")
	f.Add("jail-4194304-18446744073709551615-1-1")
	f.Fuzz(func(t *testing.T, s string) {
		o, ok := parseName(s)
		if ok {
			// Whatever parses is what name() writes.
			assert.Equal(t, s, o.name())
		}
	})
}

func TestParseStatStartTime(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    uint64
		wantErr bool
	}{
		{
			name: "sleep",
			stat: "1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 5555 8192 100 18446744073709551615",
			want: 5555,
		},
		{
			name: "command with spaces and parentheses",
			stat: "77 (a b) (c)) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 31337 0 0",
			want: 31337,
		},
		{name: "truncated", stat: "1 (x) S 1 2 3", wantErr: true},
		{name: "no command", stat: "garbage", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatStartTime(tt.stat)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
