package jail

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// nsInode is the inode of a namespace file: equal inodes, the same namespace.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st), path)
	return st.Ino
}

// TestNetnsPool: jails of a pool each get a namespace of their own, made
// ahead, with only lo and lo up, owned by the host's user namespace, so
// that no process of the jail holds a capability over it; a jail with
// another network (host) takes none; the pool refills and Close leaves
// nothing open.
func TestNetnsPool(t *testing.T) {
	requireJail(t)
	pool, err := NewNetnsPool(2)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pool.Stats().Ready == 2 }, 5*time.Second, time.Millisecond)

	hostNet := nsInode(t, "/proc/self/ns/net")
	hostUser := nsInode(t, "/proc/self/ns/user")
	run := func(spec Spec) (*Cmd, uint64, uint64) {
		t.Helper()
		c := Command(t.Context(), spec, "sh", "-c", "ip -o link; sleep 0.3")
		c.Capture, c.NetnsPool = true, pool
		require.NoError(t, c.Start())
		// The namespaces of the jail's PID 1, while it runs.
		pid := c.child.Pid()
		netIno := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", pid))
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		require.NoError(t, err)
		defer f.Close()
		owner, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
		require.NoError(t, err, "NS_GET_USERNS")
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(owner, &st))
		unix.Close(owner)
		require.NoError(t, c.Wait())
		require.Equal(t, StatusExited, c.Result.Status, "%s", c.Result.Stderr)
		return c, netIno, st.Ino
	}
	c1, net1, owner1 := run(Spec{})
	assert.NotEqual(t, hostNet, net1, "a namespace of its own")
	assert.Equal(t, hostUser, owner1, "the pool's namespace belongs to the host's user namespace, not the jail's")
	links := strings.Split(strings.TrimSpace(c1.Result.Stdout), "\n")
	require.Len(t, links, 1, "only lo: %s", c1.Result.Stdout)
	assert.Contains(t, links[0], "lo: <LOOPBACK,UP,LOWER_UP>", "lo is up")

	_, net2, _ := run(Spec{})
	assert.NotEqual(t, net1, net2, "each jail its own namespace")
	assert.Equal(t, int64(2), pool.Stats().Taken)

	// Without the pool's namespace: --net host takes none.
	c3 := Command(t.Context(), Spec{Network: Network{Mode: NetworkHost}}, "true")
	c3.NetnsPool = pool
	require.NoError(t, c3.Run())
	assert.Equal(t, int64(2), pool.Stats().Taken)

	require.Eventually(t, func() bool { return pool.Stats().Ready == 2 }, 5*time.Second, time.Millisecond, "it refills")
	s := pool.Stats()
	assert.Equal(t, int64(4), s.Made)
	assert.NoError(t, s.Err)
	require.NoError(t, pool.Close())
	assert.Equal(t, 0, pool.Stats().Ready)
	assert.NoError(t, pool.Close(), "twice")

	// A closed pool gives no namespace: the jail makes its own.
	c4 := Command(t.Context(), Spec{}, "true")
	c4.NetnsPool = pool
	require.NoError(t, c4.Run())
	assert.Equal(t, int64(2), pool.Stats().Taken)
}

func TestNetnsPoolSize(t *testing.T) {
	_, err := NewNetnsPool(-1)
	assert.ErrorContains(t, err, "negative")
}
