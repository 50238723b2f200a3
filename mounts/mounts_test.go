package mounts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	for _, tc := range []struct {
		name  string
		m     Mount
		field string // empty: no error
	}{
		{"good bind", Mount{Type: Bind, Source: "/srv", Target: "/work"}, ""},
		{"relative source is fine", Mount{Type: Bind, Source: "job", Target: "/work"}, ""},
		{"no source", Mount{Type: Bind, Target: "/x"}, "source"},
		{"relative target", Mount{Type: ROBind, Source: "/srv", Target: "x"}, "target"},
		{"dotdot target", Mount{Type: ROBind, Source: "/srv", Target: "/a/../../etc"}, "target"},
		{"tmpfs with source", Mount{Type: Tmpfs, Source: "/x", Target: "/t"}, "source"},
		{"bind with size", Mount{Type: Bind, Source: "/srv", Target: "/t", SizeBytes: 1}, "size_bytes"},
		{"unknown type", Mount{Type: "overlay", Target: "/t"}, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.m)
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

// table is a host like this one: a root file system, /run and /dev/shm
// tmpfs, proc and sysfs, and the bind mounts an operator (or an attacker
// with host root, which is out of scope) might have made.
var table = Table{
	{ID: 1, Major: 8, Minor: 1, Root: "/", Mountpoint: "/", FSType: "ext4"},
	{ID: 2, Major: 0, Minor: 22, Root: "/", Mountpoint: "/proc", FSType: "proc"},
	{ID: 3, Major: 0, Minor: 23, Root: "/", Mountpoint: "/sys", FSType: "sysfs"},
	{ID: 4, Major: 0, Minor: 25, Root: "/", Mountpoint: "/run", FSType: "tmpfs"},
	{ID: 5, Major: 0, Minor: 26, Root: "/", Mountpoint: "/tmp", FSType: "tmpfs"},
	{ID: 6, Major: 0, Minor: 25, Root: "/user/1000", Mountpoint: "/srv/innocent", FSType: "tmpfs"}, // a bind of /run/user/1000
	{ID: 7, Major: 8, Minor: 1, Root: "/etc", Mountpoint: "/srv/config", FSType: "ext4"},           // a bind of /etc
	{ID: 8, Major: 0, Minor: 25, Root: "/", Mountpoint: "/srv/jobs/7/run", FSType: "tmpfs"},        // /run below a job dir
	{ID: 9, Major: 0, Minor: 22, Root: "/", Mountpoint: "/srv/jobs/8/p", FSType: "proc"},           // a proc below a job dir
	{ID: 10, Major: 0, Minor: 27, Root: "/", Mountpoint: "/srv/jobs/9/scratch", FSType: "tmpfs"},   // a harmless submount
	{ID: 11, Major: 8, Minor: 1, Root: "/", Mountpoint: "/mnt/host", FSType: "ext4"},               // the root, bound again
}

func TestExposes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mntID int
		path  string
		dir   bool
		want  string // a phrase of the verdict; empty: nothing sensitive
	}{
		{"a plain directory", 1, "/srv/jobs/1", true, ""},
		{"a file of /etc", 1, "/etc/hostname", false, ""},
		{"/etc itself", 1, "/etc", true, "is sensitive (/etc)"},
		{"below /run", 4, "/run/user", true, "is sensitive (below /run)"},
		{"a bind of /run/user/1000 elsewhere", 6, "/srv/innocent", true, "the host's /run/user/1000 (below /run)"},
		{"inside that bind", 6, "/srv/innocent/bus", false, "the host's /run/user/1000/bus"},
		{"a bind of /etc elsewhere", 7, "/srv/config", true, "the host's /etc"},
		{"a file inside the /etc bind is fine", 7, "/srv/config/hostname", false, ""},
		{"the root bound again", 11, "/mnt/host", true, "the host's /"},
		{"a directory carrying /run", 1, "/srv/jobs/7", true, "carries the mount at /srv/jobs/7/run, which is the host's /run"},
		{"a directory carrying a proc", 1, "/srv/jobs", true, "carries the mount at /srv/jobs/7/run"},
		{"a directory carrying proc", 1, "/srv/jobs/8", true, "carries the mount at /srv/jobs/8/p, which is a proc file system"},
		{"a harmless submount", 1, "/srv/jobs/9", true, ""},
		{"a file is not recursive", 1, "/srv/jobs/7", false, ""},
		{"mount id unknown: longest prefix", 0, "/srv/innocent/x", false, "the host's /run/user/1000/x"},
		{"proc by path", 2, "/proc/self", true, "is sensitive (below /proc)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := table.Exposes(tc.mntID, tc.path, tc.dir)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
		})
	}
}

// TestOpenSource runs on this host: symlinks are refused, a real path is
// opened and named by its real path, sensitive paths are refused unless
// allowed.
func TestOpenSource(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "real"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink("/proc/self", filepath.Join(dir, "proc-link")))
	home := filepath.Join(dir, "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("secret"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(home, "project"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cloud", ".config", "gcloud"), 0o700))
	only := func(paths ...string) func(string) bool {
		return func(p string) bool {
			for _, a := range paths {
				if a == "/" || p == a || strings.HasPrefix(p, a+"/") {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name  string
		path  string
		allow func(string) bool
		want  string // an error phrase; empty: opens
		says  string // what Source.Sensitive says of an allowed one
	}{
		{"a directory", filepath.Join(dir, "real"), nil, "", ""},
		{"a symlink", filepath.Join(dir, "link"), nil, "is a symlink", ""},
		{"a symlink into proc", filepath.Join(dir, "proc-link"), nil, "is a symlink", ""},
		{"missing", filepath.Join(dir, "nope"), nil, "does not exist", ""},
		{"proc", "/proc", nil, "is sensitive (/proc)", ""},
		{"host root", "/", nil, "is sensitive (/)", ""},
		{"host etc", "/etc", nil, "is sensitive (/etc)", ""},
		{"shadow", "/etc/shadow", nil, "is sensitive (/etc/shadow)", ""},
		{"host home", "/home", nil, "is sensitive (/home)", ""},
		{"one etc file is fine", "/etc/hostname", nil, "", ""},
		{"a home directory", home, nil, "holds .ssh (a home directory)", ""},
		{"a key", filepath.Join(home, ".ssh", "id_ed25519"), nil, "is sensitive (below " + filepath.Join(home, ".ssh") + ")", ""},
		{"gcloud", filepath.Join(dir, "cloud", ".config", "gcloud"), nil, "is sensitive (" + filepath.Join(dir, "cloud", ".config", "gcloud") + ")", ""},
		{"a project in a home is fine", filepath.Join(home, "project"), nil, "", ""},
		{"allowed sensitive", "/proc", only("/"), "", "is sensitive (/proc)"},
		{"allowed below a listed path", filepath.Join(home, ".ssh", "id_ed25519"), only(filepath.Join(home, ".ssh")), "", "is sensitive"},
		{"another path listed", "/proc", only("/sys"), "refused unless allowed", ""},
		{"a listed path does not allow its parent", home, only(filepath.Join(home, ".ssh")), "holds .ssh", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenSource(tc.path, tc.allow, ReadTable)
			if tc.want != "" {
				var me *Error
				require.ErrorAs(t, err, &me)
				assert.Equal(t, "source", me.Field)
				assert.Contains(t, err.Error(), tc.want)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, tc.path, s.Path)
			if tc.says == "" {
				assert.Empty(t, s.Sensitive)
			} else {
				assert.Contains(t, s.Sensitive, tc.says)
			}
		})
	}
}

// BenchmarkExposesManyMounts: a directory source with 5,000 mounts below it
// (a container host's /var), each on a file system of its own.
func BenchmarkExposesManyMounts(b *testing.B) {
	t := Table{{ID: 1, Major: 8, Minor: 1, Root: "/", Mountpoint: "/", FSType: "ext4"}}
	for i := range 5000 {
		t = append(t, MountInfo{ID: 100 + i, Major: 0, Minor: 100 + i, Root: "/", Mountpoint: fmt.Sprintf("/var/lib/kubelet/pods/%d/volume", i), FSType: "tmpfs"})
	}
	for b.Loop() {
		if what := t.Exposes(1, "/var", true); what != "" {
			b.Fatal(what)
		}
	}
}

// TestHoldsSensitive: a directory source above a sensitive tree that
// exists carries it into the jail (a bind of /var carries
// /var/lib/docker); one above a tree this host lacks, or beside one, does
// not. (This host has no /var/lib/docker: the trees are the test's own.)
func TestHoldsSensitive(t *testing.T) {
	dir := t.TempDir()
	docker := filepath.Join(dir, "var", "lib", "docker")
	require.NoError(t, os.MkdirAll(docker, 0o700))
	trees := []string{docker, filepath.Join(dir, "var", "lib", "kubelet")}
	assert.Equal(t, "holds "+docker, holdsSensitive(filepath.Join(dir, "var"), trees))
	assert.Equal(t, "holds "+docker, holdsSensitive(filepath.Join(dir, "var", "lib"), trees))
	assert.Empty(t, holdsSensitive(filepath.Join(dir, "var", "lib", "dock"), trees), "a prefix of a name is not a parent")
	assert.Empty(t, holdsSensitive(filepath.Join(dir, "srv"), trees))
	require.NoError(t, os.RemoveAll(docker))
	assert.Empty(t, holdsSensitive(filepath.Join(dir, "var"), trees), "a tree this host lacks")
}
