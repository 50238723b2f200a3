package landlock

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
	"github.com/jailrt/jail/rootfs"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func debianHost() rootfs.Host {
	h := rootfs.Host{Attach: "/tmp",
		Links:  map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"},
		Exists: map[string]bool{"/usr": true, "/etc/ld.so.cache": true, "/etc/ssl": true},
		Files:  map[string]bool{"/etc/ld.so.cache": true},
	}
	for _, d := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"} {
		h.Exists[d], h.Files[d] = true, true
	}
	return h
}

// TestFromMountsGolden renders the rules of the plans rootfs builds, one
// rule per line, for a reviewer.
func TestFromMountsGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    rootfs.Config
	}{
		{"default", rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail"}},
		{"user-mounts", rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail", Mounts: []mounts.Mount{
			{Type: mounts.Bind, Source: "/srv/work", Target: "/work"},
			{Type: mounts.ROBind, Source: "/srv/data", Target: "/data"},
			{Type: mounts.ROBind, Source: "/srv/in.txt", Target: "/in.txt"},
			{Type: mounts.Tmpfs, Target: "/scratch"},
		}, FileSources: map[string]bool{"/srv/in.txt": true}}},
		{"rootfs-dir", rootfs.Config{Dir: "/srv/rootfs", UID: 1000, GID: 1000, Hostname: "jail"}},
		{"host-proc", rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail", HostProc: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := rootfs.Build(tc.c, debianHost())
			require.NoError(t, err)
			var b strings.Builder
			for _, r := range FromMounts(p.Root, p.Mounts) {
				b.WriteString(r.String() + "\n")
			}
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, string(want), b.String())
		})
	}
}

// TestFromMountsIntent checks the properties the golden files show.
func TestFromMountsIntent(t *testing.T) {
	p, err := rootfs.Build(rootfs.Config{UID: 1000, GID: 1000, Hostname: "jail", Mounts: []mounts.Mount{
		{Type: mounts.ROBind, Source: "/srv/data", Target: "/data"}}}, debianHost())
	require.NoError(t, err)
	rules := map[string]Rule{}
	for _, r := range FromMounts(p.Root, p.Mounts) {
		rules[r.Path] = r
	}
	assert.Equal(t, ReadDir, rules["/"].Access, "the default root: listing only, so nothing mounted by mistake is readable")
	assert.Equal(t, readExec, rules["/usr"].Access)
	assert.Equal(t, readExec, rules["/data"].Access, "a read-only bind: no write, no unix sockets by path")
	assert.Zero(t, rules["/data"].Access&ResolveUnix)
	assert.NotZero(t, rules["/tmp"].Access&WriteFile)
	assert.NotZero(t, rules["/tmp"].Access&ResolveUnix, "sockets the jail makes itself")
	assert.Zero(t, rules["/dev/shm"].Access&Execute, "noexec")
	assert.Zero(t, rules["/proc"].Access&Execute)
	assert.NotZero(t, rules["/dev"].Access&IoctlDev)
	assert.Zero(t, rules["/usr"].Access&IoctlDev)
	for _, r := range rules {
		assert.Zero(t, r.Access&(MakeChar|MakeBlock), "no rule makes device nodes: %s", r.Path)
		if r.File {
			assert.Zero(t, r.Access&^fileRights, "a rule on a file holds file rights only: %s", r.Path)
		}
	}
}

func TestABIs(t *testing.T) {
	assert.Zero(t, HandledFS(0))
	assert.Equal(t, Access(1<<13-1), HandledFS(1))
	assert.Equal(t, Access(1<<16-1), HandledFS(6), "ABI 6: all but resolve_unix")
	assert.Equal(t, Access(1<<17-1), HandledFS(9))
	assert.Zero(t, Scopes(5))
	assert.Equal(t, ScopeAbstractUnixSocket|ScopeSignal, Scopes(6))
	assert.Equal(t, []string{"fs", "refer", "truncate", "ioctl_dev", "signal", "abstract_unix_socket"}, Enforced(7))
	assert.Equal(t, []string{"landlock unix_socket_path: unix sockets reached by path, such as a host socket below a read-only bind need Landlock ABI 9 (this kernel has 7)"}, Missing(7))
	assert.Len(t, Missing(0), len(Features))
	_ = nsexec.OpBind
}
