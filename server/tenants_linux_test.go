package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

// TestBindRootsAlias: other paths to the server's state directory, made
// with bind mounts under the tenant's bind root, are the state directory
// all the same: an alias of the directory above it (the state directory
// through it, a directory under it, the alias itself), a bind of a
// directory within it, a directory holding such a bind (binds are
// recursive), and an alias of / when the state directory is on /'s file
// system. A sibling directory may still be bound.
func TestBindRootsAlias(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes bind mounts: needs root")
	}
	if os.Getenv("JAIL_TEST_OWN_MOUNTS") == "" {
		// Its bind mounts are made in a mount namespace of its own: the
		// integration tests, which may run meanwhile, compare the host's
		// mount table before and after theirs.
		self, err := os.Executable()
		require.NoError(t, err)
		c := exec.Command("unshare", "--mount", "--propagation", "private", self, "-test.run", "^TestBindRootsAlias$", "-test.v", "-test.count", "1")
		c.Env = append(os.Environ(), "JAIL_TEST_OWN_MOUNTS=1")
		out, err := c.CombinedOutput()
		t.Logf("in a mount namespace of its own:\n%s", out)
		require.NoError(t, err)
		require.Contains(t, string(out), "--- PASS: TestBindRootsAlias")
		return
	}
	base := t.TempDir()
	root := filepath.Join(base, "root")
	real := filepath.Join(base, "real")
	alias, inner, box, host := filepath.Join(root, "alias"), filepath.Join(root, "inner"), filepath.Join(root, "box"), filepath.Join(root, "host")
	for _, d := range []string{filepath.Join(real, "state", "tenants"), filepath.Join(real, "data"), alias, inner, filepath.Join(box, "in"), host} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	for _, b := range [][2]string{{real, alias}, {filepath.Join(real, "state", "tenants"), inner}, {filepath.Join(real, "state"), filepath.Join(box, "in")}, {"/", host}} {
		require.NoError(t, unix.Mount(b[0], b[1], "", unix.MS_BIND, ""), "bind %s at %s", b[0], b[1])
		t.Cleanup(func() { _ = unix.Unmount(b[1], unix.MNT_DETACH) })
	}
	user := uidTenant(1000, 4242, &Policy{Default: &TenantPolicy{BindRoots: []BindRoot{{Path: root}}}})
	user.private = privatePaths([]string{filepath.Join(real, "state")})
	spec := func(src string) *jail.Spec {
		return &jail.Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: src, Target: "/x"}}}
	}
	refused := []string{alias + "/state", alias + "/state/tenants", alias, inner, box}
	var st, rst unix.Stat_t
	require.NoError(t, unix.Stat(real, &st))
	require.NoError(t, unix.Stat("/", &rst))
	if st.Dev == rst.Dev {
		refused = append(refused, host) // / shows the state directory
	} else {
		t.Logf("%s is not on /'s file system: an alias of / does not show it", real)
	}
	for _, src := range refused {
		e := checkSpec(user, spec(src), "spec")
		if assert.NotNil(t, e, src) {
			assert.Contains(t, e.Message, "no jail may reach the server", src)
		}
	}
	assert.Nil(t, checkSpec(user, spec(alias+"/data"), "spec"), "beside it")
}
