package hostcheck

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSpawnFeature(t *testing.T) {
	assert.Equal(t, OK, spawnFeature(spawnFacts{}, "").Verdict)
	f := spawnFeature(spawnFacts{Clone3: os.NewSyscallError("clone3", syscall.ENOSYS)}, "docker")
	assert.Equal(t, Missing, f.Verdict)
	assert.Contains(t, f.Detail, "clone3: clone3: function not implemented")
	assert.Contains(t, f.Fix, "seccomp=unconfined")
	f = spawnFeature(spawnFacts{Pidfd: syscall.EPERM}, "")
	assert.Contains(t, f.Fix, "a seccomp filter on this process")
	f = spawnFeature(spawnFacts{Pidfd: errors.New("odd")}, "")
	assert.Equal(t, "use Linux 5.12 or later", f.Fix)
}

func TestIntoCgroupFeature(t *testing.T) {
	assert.Equal(t, OK, intoCgroupFeature(true, spawnFacts{}).Verdict)
	f := intoCgroupFeature(false, spawnFacts{})
	assert.Equal(t, Warn, f.Verdict)
	assert.Contains(t, f.Detail, "cgroup v1")
	assert.Equal(t, Warn, intoCgroupFeature(true, spawnFacts{Clone3: syscall.ENOSYS}).Verdict)
}

func TestEgressFeature(t *testing.T) {
	assert.Equal(t, OK, egressFeature(true, "", errors.New("none")).Verdict, "root needs no pasta")
	assert.Equal(t, OK, egressFeature(false, "/usr/bin/pasta", nil).Verdict)
	f := egressFeature(false, "", errors.New("not found"))
	assert.Equal(t, Warn, f.Verdict)
	assert.Contains(t, f.Fix, "apt-get install passt")
}

func TestEnvironmentFeature(t *testing.T) {
	assert.Equal(t, OK, environmentFeature(environmentFacts{}, false).Verdict)
	assert.Equal(t, OK, environmentFeature(environmentFacts{Container: "docker"}, true).Verdict)
	f := environmentFeature(environmentFacts{Container: "docker: /.dockerenv", Filtered: true}, false)
	assert.Equal(t, Warn, f.Verdict)
	assert.Contains(t, f.Detail, "in a container (docker: /.dockerenv) with a seccomp filter")
	assert.Contains(t, f.Fix, "seccomp=unconfined")

	for _, tc := range []struct {
		dockerenv, containerenv, k8s bool
		systemd, cgroups, want       string
	}{
		{false, false, false, "", "0::/user.slice/user-0.slice/session-1.scope\n", ""},
		{true, false, false, "", "", "docker: /.dockerenv"},
		{false, true, false, "", "", "podman: /run/.containerenv"},
		{false, false, true, "", "", "kubernetes: $KUBERNETES_SERVICE_HOST"},
		{false, false, false, "lxc", "", "lxc: /run/systemd/container"},
		{false, false, false, "", "0::/kubepods/besteffort/pod1/abc\n", "kubernetes: /proc/self/cgroup"},
		{false, false, false, "", "12:pids:/docker/0123abcd\n", "docker: /proc/self/cgroup"},
		{false, false, false, "", "0::/system.slice/docker-0123.scope\n", "docker: /proc/self/cgroup"},
	} {
		assert.Equal(t, tc.want, containerFromMarks(tc.dockerenv, tc.containerenv, tc.systemd, tc.cgroups, tc.k8s), "%+v", tc)
	}
}
