package mounts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		arg  string
		want Mount
		err  bool
	}{
		{"bind same path", Bind, "/src", Mount{Type: Bind, Source: "/src", Target: "/src"}, false},
		{"bind to target", ROBind, "/a:/b", Mount{Type: ROBind, Source: "/a", Target: "/b"}, false},
		{"tmpfs", Tmpfs, "/t", Mount{Type: Tmpfs, Target: "/t"}, false},
		{"tmpfs size", Tmpfs, "/t:size=64M", Mount{Type: Tmpfs, Target: "/t", SizeBytes: 64 << 20}, false},
		{"tmpfs bad option", Tmpfs, "/t:mode=777", Mount{}, true},
		{"tmpfs bad size", Tmpfs, "/t:size=lots", Mount{}, true},
		{"empty", Bind, "", Mount{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.typ, tc.arg)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "1k": 1024, "64M": 64 << 20, "2G": 2 << 30, "1GiB": 1 << 30, "3MB": 3 << 20} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "M", "1X", "99999999999T"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
}

func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"/", "/tmp", "/a/b.c/d"} {
		assert.NoError(t, CheckTarget(ok), ok)
	}
	for _, bad := range []string{"", "tmp", "./x", "/a/../b", "/..", "/a/", "/a//b", "/a/./b"} {
		assert.Error(t, CheckTarget(bad), bad)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "proc-link")
	require.NoError(t, os.Symlink("/proc/self", link))
	for _, tc := range []struct {
		name      string
		m         Mount
		sensitive bool
		field     string // empty: no error
	}{
		{"good bind", Mount{Type: Bind, Source: dir, Target: "/work"}, false, ""},
		{"missing source", Mount{Type: Bind, Source: dir + "/nope", Target: "/x"}, false, "source"},
		{"relative target", Mount{Type: ROBind, Source: dir, Target: "x"}, false, "target"},
		{"dotdot target", Mount{Type: ROBind, Source: dir, Target: "/a/../../etc"}, false, "target"},
		{"proc source", Mount{Type: Bind, Source: "/proc", Target: "/p"}, false, "source"},
		{"symlink into proc", Mount{Type: Bind, Source: link, Target: "/p"}, false, "source"},
		{"host etc", Mount{Type: ROBind, Source: "/etc", Target: "/e"}, false, "source"},
		{"host root", Mount{Type: ROBind, Source: "/", Target: "/host"}, false, "source"},
		{"one etc file is fine", Mount{Type: ROBind, Source: "/etc/hostname", Target: "/h"}, false, ""},
		{"allowed sensitive", Mount{Type: ROBind, Source: "/proc", Target: "/p"}, true, ""},
		{"tmpfs with source", Mount{Type: Tmpfs, Source: "/x", Target: "/t"}, false, "source"},
		{"bind with size", Mount{Type: Bind, Source: dir, Target: "/t", SizeBytes: 1}, false, "size_bytes"},
		{"unknown type", Mount{Type: "overlay", Target: "/t"}, false, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.m, tc.sensitive)
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			var me *Error
			require.ErrorAs(t, err, &me)
			assert.Equal(t, tc.field, me.Field)
		})
	}
}
