package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

// TestBindRootsAlias: a second path to the server's state directory (a
// bind mount of the directory above it, under the tenant's bind root) is
// the state directory all the same: neither it, what lies under it, nor
// the alias of the directory above it may be bound; the rest of that
// directory may.
func TestBindRootsAlias(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes a bind mount: needs root")
	}
	base := t.TempDir()
	real, alias := filepath.Join(base, "real"), filepath.Join(base, "root", "alias")
	for _, d := range []string{filepath.Join(real, "state", "tenants"), filepath.Join(real, "data"), alias} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, unix.Mount(real, alias, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(alias, unix.MNT_DETACH) })
	user := uidTenant(1000, 4242, &Policy{Default: &TenantPolicy{BindRoots: []BindRoot{{Path: filepath.Join(base, "root")}}}})
	user.private = privatePaths([]string{filepath.Join(real, "state")})
	spec := func(src string) *jail.Spec {
		return &jail.Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: src, Target: "/x"}}}
	}
	for _, src := range []string{alias + "/state", alias + "/state/tenants", alias} {
		e := checkSpec(user, spec(src), "spec")
		if assert.NotNil(t, e, src) {
			assert.Contains(t, e.Message, "no jail may reach the server", src)
		}
	}
	assert.Nil(t, checkSpec(user, spec(alias+"/data"), "spec"), "beside it")
}
