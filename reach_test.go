package jail

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
)

// TestWarnings: run as root, a source in a 0700 directory is named with
// the directory, its mode and the fix; one the jail's user can reach is not.
func TestWarnings(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the warning is about a root caller's jail (host uid 65534); an unprivileged caller's jail has its access")
	}
	dir := t.TempDir() // in a 0700 directory of its own: the trap itself
	require.NotEmpty(t, (&Spec{Mounts: []mounts.Mount{{Type: mounts.ROBind, Source: dir, Target: "/t"}}}).Warnings())
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	closed := filepath.Join(dir, "closed")
	require.NoError(t, os.MkdirAll(filepath.Join(closed, "src"), 0o755))
	require.NoError(t, os.Chmod(closed, 0o700))
	open := filepath.Join(dir, "open")
	require.NoError(t, os.MkdirAll(open, 0o755))
	mine := filepath.Join(dir, "mine")
	require.NoError(t, os.MkdirAll(mine, 0o700))
	require.NoError(t, os.Chown(mine, 4242, 4242))

	s := Spec{Mounts: []mounts.Mount{
		{Type: mounts.ROBind, Source: filepath.Join(closed, "src"), Target: "/a"},
		{Type: mounts.ROBind, Source: open, Target: "/b"},
		{Type: mounts.Bind, Source: open, Target: "/c"},
		{Type: mounts.Tmpfs, Target: "/d"},
	}}
	w := s.Warnings()
	require.Len(t, w, 2, "%q", w)
	assert.Contains(t, w[0], `mounts[0].source "`+filepath.Join(closed, "src")+`": the jail's user, host uid 65534, cannot read it: `+closed+" is mode 0700, owned by 0:0 (needs x)")
	assert.Contains(t, w[0], "--host-uid")
	assert.Contains(t, w[1], `mounts[2].source "`+open+`": the jail's user, host uid 65534, cannot write it: it is mode 0755, owned by 0:0 (needs rxw)`)

	uid := uint32(4242)
	s = Spec{HostUID: &uid, HostGID: &uid, Mounts: []mounts.Mount{{Type: mounts.Bind, Source: mine, Target: "/m"}}}
	assert.Empty(t, s.Warnings(), "the owner's id reaches its own directory")
	s.HostUID = nil
	assert.Len(t, s.Warnings(), 1)
	s.DisableNamespaces = []string{"user"}
	assert.Len(t, s.Warnings(), 1, "without a user namespace a root caller's jail runs as the host ids themselves")
}
