package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// unprivUID is the host uid of the unprivileged re-run: no passwd entry is
// needed, so nothing is added to the host.
const unprivUID = 60123

// TestUnprivileged re-runs this whole suite as an unprivileged user to prove
// the setuid-free path: the jail maps that user's own ids, with no
// newuidmap and no setuid helper.
func TestUnprivileged(t *testing.T) {
	if unprivileged {
		t.Skip("this is the unprivileged run")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(binDir, "integration.test")
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	defer os.Remove(bin)
	work := hostDir(t)

	args := []string{"-test.count=1", "-test.v", "-test.skip", "^TestUnprivileged$"}
	if only := os.Getenv("JAIL_IT_UNPRIVILEGED_RUN"); only != "" { // a developer's shortcut: some tests only
		args = append(args, "-test.run", only)
	}
	c := exec.Command(bin, args...)
	c.Dir = work
	c.Env = []string{"JAIL_IT_UNPRIVILEGED=1", "JAIL_IT_BIN=" + binDir, "PATH=/usr/bin:/bin", "HOME=" + work, "TMPDIR=" + work}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivUID, Gid: unprivUID}}
	out, err := c.CombinedOutput()
	t.Logf("unprivileged run (uid %d):\n%s", unprivUID, out)
	require.NoError(t, err, "the suite failed as an unprivileged user")
	if os.Getenv("JAIL_IT_UNPRIVILEGED_RUN") == "" {
		require.Contains(t, string(out), "--- PASS: TestQuickstart")
	}
}
