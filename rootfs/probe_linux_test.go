package rootfs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
)

// TestMayBeInitramfs: statfs's answer agrees with mountinfo's file system
// type for every mount of this host that is on top of its mount point, so
// that RootIsInitramfs's shortcut never says no where mountinfo says
// rootfs. integration/vm runs TestRootOfTheHost on an initramfs root.
func TestMayBeInitramfs(t *testing.T) {
	table, err := mounts.ReadTable()
	require.NoError(t, err)
	top := map[string]string{} // mount point -> the type of the last mount on it
	for _, m := range table {
		top[m.Mountpoint] = m.FSType
	}
	require.Equal(t, "proc", top["/proc"])
	for mp, fs := range top {
		// devtmpfs is a tmpfs inside (statfs says TMPFS_MAGIC): a
		// "maybe", which only costs the mountinfo read.
		want := fs == "rootfs" || fs == "ramfs" || fs == "tmpfs" || fs == "devtmpfs"
		assert.Equal(t, want, mayBeInitramfs(mp), "%s (%s)", mp, fs)
	}
	assert.False(t, mayBeInitramfs("/proc/self"))
	assert.True(t, mayBeInitramfs("/does/not/exist"), "unknown: mountinfo decides")
}
