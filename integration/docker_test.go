package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/internal/procfs"
)

// These tests run `jail run --backend docker` against the suite's own
// dockerd (dockerd_test.go) and check what the container had from inside
// it, and what the engine has left afterwards.

// dockerJail runs jail with DOCKER_HOST set to the suite's engine.
func dockerJail(t *testing.T, sock string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := jailCmd(ctx, args...)
	c.Env = append(c.Env, "DOCKER_HOST=unix://"+sock)
	c.Stdin = stdin
	return runJailCmd(t, c)
}

// dockerJSON runs `jail run --json --backend docker --image IMAGE args...`
// and decodes its one document.
func dockerJSON(t *testing.T, sock, image string, args ...string) (jail.Result, result) {
	t.Helper()
	r := dockerJail(t, sock, nil, append([]string{"run", "--json", "--backend", "docker", "--image", image}, args...)...)
	var res jail.Result
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&res), "stdout: %q stderr: %s", r.stdout, r.stderr)
	require.Equal(t, r.code, res.ExitCode, "exit code and report agree")
	require.Equal(t, jail.BackendDocker, res.Isolation.Backend)
	return res, r
}

// requireNoContainers fails if the engine holds a container of jail's.
func requireNoContainers(t *testing.T, sock string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := docker.Connect(ctx, "unix://"+sock)
	require.NoError(t, err)
	list, err := e.List(ctx, docker.LabelManaged)
	require.NoError(t, err)
	require.Empty(t, list, "containers left on the engine")
}

func TestDockerBackendIsolation(t *testing.T) {
	sock, image := testDocker(t)
	res, r := dockerJSON(t, sock, image, "--profile", "strict", "--", "sh", "-c",
		`id; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; hostname
		 touch /rootfile 2>/dev/null && echo root-writable; touch /tmp/f && echo tmp-ok
		 df -k /tmp | tail -n 1
		 ls /sys | wc -l; cat /proc/kcore 2>/dev/null | head -c1 | wc -c; cat /proc/net/dev | tail -n +3 | cut -d: -f1
		 echo to-stderr >&2`)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Equal(t, jail.StatusExited, res.Status)
	out := res.Stdout
	require.Contains(t, out, "uid=1000(user) gid=1000(user)")
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		require.Contains(t, out, c+":\t0000000000000000\n")
	}
	require.Contains(t, out, "NoNewPrivs:\t1\n")
	require.Contains(t, out, "Seccomp:\t2\n", "the strict policy is loaded")
	require.Contains(t, out, "\njail\n", "the Spec's hostname")
	require.NotContains(t, out, "root-writable")
	require.Contains(t, out, "tmp-ok")
	require.Regexp(t, `(?m)^tmpfs +65536 .* /tmp$`, out, "strict's 64 MiB /tmp")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, []string{"0", "0", "lo"}, []string{strings.TrimSpace(lines[len(lines)-3]), strings.TrimSpace(lines[len(lines)-2]), strings.TrimSpace(lines[len(lines)-1])},
		"/sys masked, /proc/kcore masked, lo only: %q", out)
	require.Equal(t, "to-stderr\n", res.Stderr)

	iso := res.Isolation
	require.Equal(t, "image", iso.Root)
	require.Equal(t, image, iso.RootPath)
	require.Equal(t, "strict", iso.Seccomp)
	require.Equal(t, []string{"pid", "mount", "net", "uts", "ipc", "cgroup"}, iso.Namespaces)
	require.Equal(t, jail.NetworkNone, iso.Network.Mode)
	joined := strings.Join(iso.NotEnforced, "\n")
	for _, want := range []string{"time namespace:", "user namespace:", "landlock:", "seccomp kill reporting:"} {
		require.Contains(t, joined, want)
	}
	requireNoContainers(t, sock)
}

func TestDockerBackendLimits(t *testing.T) {
	sock, image := testDocker(t)
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res, _ := dockerJSON(t, sock, image, "--timeout", "1s", "--", "sleep", "30")
		require.Equal(t, jail.StatusTimedOut, res.Status)
		require.Equal(t, jail.ExitTimedOut, res.ExitCode)
		require.Equal(t, []string{"timeout"}, res.LimitsHit)
		require.Less(t, time.Since(start), 15*time.Second)
	})
	t.Run("memory", func(t *testing.T) {
		res, _ := dockerJSON(t, sock, image, "--memory", "32M", "--", "/probe", "hog", "256")
		require.Equal(t, jail.StatusOOMKilled, res.Status, "stderr: %s", res.Stderr)
		require.Equal(t, 137, res.ExitCode)
		require.Equal(t, []string{"memory"}, res.LimitsHit)
		require.Equal(t, "v1", res.Isolation.Cgroup) // this host; the cgroup-v2 VM runs no Docker
	})
	t.Run("cgroup files", func(t *testing.T) {
		// The limits as the kernel has them, read on the host in the
		// container's cgroup (below the daemon's --cgroup-parent).
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := jailCmd(ctx, "run", "--backend", "docker", "--image", image, "--memory", "48M", "--pids", "20", "--cpus", "0.5", "--", "sleep", "30")
		c.Env = append(c.Env, "DOCKER_HOST=unix://"+sock)
		require.NoError(t, c.Start())
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		e, err := docker.Connect(ctx, "unix://"+sock)
		require.NoError(t, err)
		var id string
		require.Eventually(t, func() bool {
			list, err := e.List(ctx, docker.LabelManaged)
			if err != nil || len(list) != 1 || list[0].State != "running" {
				return false
			}
			id = list[0].ID
			return true
		}, 30*time.Second, 50*time.Millisecond)
		want := map[string]string{"memory.limit_in_bytes": "50331648", "memory.memsw.limit_in_bytes": "50331648", "pids.max": "20",
			"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}
		found := map[string]string{}
		for _, d := range procfs.OwnCgroupDirs() {
			for f := range want {
				if b, err := os.ReadFile(filepath.Join(d, dockerCgroup, id, f)); err == nil {
					found[f] = strings.TrimSpace(string(b))
				}
			}
		}
		require.Equal(t, want, found)
		require.NoError(t, c.Process.Signal(syscall.SIGTERM))
		_ = c.Wait()
	})
	t.Run("pids", func(t *testing.T) {
		res, _ := dockerJSON(t, sock, image, "--pids", "8", "--", "sh", "-c", "for i in $(seq 1 20); do sleep 5 & done; wait")
		require.Contains(t, res.Stderr, "can't fork")
	})
	t.Run("seccomp kill", func(t *testing.T) {
		res, _ := dockerJSON(t, sock, image, "--profile", "strict", "--", "/probe", "sys", "ptrace")
		require.Equal(t, jail.StatusSeccompKilled, res.Status)
		require.Equal(t, 128+int(syscall.SIGSYS), res.ExitCode)
		require.Equal(t, "SYS", res.Signal)
		require.Equal(t, 1, res.SeccompDenialsTotal)
	})
	t.Run("cpu time", func(t *testing.T) {
		res, _ := dockerJSON(t, sock, image, "--cpu-time", "1s", "--timeout", "30s", "--", "/probe", "spin", "2")
		require.Equal(t, jail.StatusCPUTimeExceeded, res.Status)
		require.Equal(t, []string{"cpu_time"}, res.LimitsHit)
		require.Contains(t, strings.Join(res.Isolation.NotEnforced, "\n"), "cpu_time exactness:")
	})
	t.Run("exit codes", func(t *testing.T) {
		for _, tc := range []struct {
			cmd  []string
			code int
		}{{[]string{"sh", "-c", "exit 3"}, 3}, {[]string{"/nonexistent"}, 127}, {[]string{"/etc/passwd"}, 126}, {[]string{"sh", "-c", "kill -TERM $$"}, 143}} {
			res, _ := dockerJSON(t, sock, image, append([]string{"--"}, tc.cmd...)...)
			require.Equal(t, tc.code, res.ExitCode, "%v: %+v", tc.cmd, res.Error)
		}
	})
	requireNoContainers(t, sock)
}

func TestDockerBackendIO(t *testing.T) {
	sock, image := testDocker(t)
	dir := hostDir(t)
	secret := dir + "/data"
	require.NoError(t, os.WriteFile(secret, []byte("bound\n"), 0o644))
	r := dockerJail(t, sock, strings.NewReader("from-stdin\n"), "run", "--backend", "docker", "--image", image,
		"--ro-bind", dir+":/work", "--", "sh", "-c", "cat; cat /work/data; echo x > /work/data 2>/dev/null || echo ro-refused")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Equal(t, "from-stdin\nbound\nro-refused\n", r.stdout)

	// Output over the limit: head and tail kept, the rest counted.
	res, _ := dockerJSON(t, sock, image, "--output-limit", "1K", "--", "sh", "-c", "yes | head -c 100000")
	require.True(t, res.StdoutTruncated)
	require.Equal(t, int64(100000), res.StdoutBytes)
	requireNoContainers(t, sock)
}

func TestDockerBackendRefuses(t *testing.T) {
	sock, image := testDocker(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--net", "egress", "--allow", "192.0.2.1:80"}, "network.mode egress"},
		{[]string{"--host-uid", "1234"}, "host_uid"},
		{[]string{"--cgroup-parent", "x"}, "cgroup_parent"},
		{[]string{"--landlock", "require"}, "landlock"},
		{[]string{"--image", "no-such-image:1"}, `image "no-such-image:1"`},
		{[]string{"--image", ""}, "image"},
		{[]string{"--uid", "0"}, "uid 0 without a user namespace"},
	} {
		args := append([]string{"run", "--backend", "docker", "--image", image}, tc.args...)
		r := dockerJail(t, sock, nil, append(args, "--", "true")...)
		require.Equal(t, jail.ExitSetupError, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	requireNoContainers(t, sock)
}

// TestDockerBackendKilledJail: a jail killed with SIGKILL cannot remove
// its container; `jail check --clean` does, and only that one: a live
// jail's container is left to it, and it still ends and removes it.
func TestDockerBackendKilledJail(t *testing.T) {
	sock, image := testDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := func() *exec.Cmd {
		c := jailCmd(ctx, "run", "--backend", "docker", "--image", image, "--", "sleep", "60")
		c.Env = append(c.Env, "DOCKER_HOST=unix://"+sock)
		require.NoError(t, c.Start())
		return c
	}
	e, err := docker.Connect(ctx, "unix://"+sock)
	require.NoError(t, err)
	running := func(n int) []docker.Container {
		var list []docker.Container
		require.Eventually(t, func() bool {
			list, err = e.List(ctx, docker.LabelManaged)
			up := 0
			for _, c := range list {
				if c.State == "running" {
					up++
				}
			}
			return err == nil && up == n
		}, 30*time.Second, 50*time.Millisecond)
		return list
	}
	killed := start()
	victim := running(1)[0].ID
	live := start()
	running(2)
	// A live jail in another PID namespace (a container sharing the
	// engine's socket): its pid means nothing here, so it is left alone.
	other := exec.CommandContext(ctx, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child", jailBin, "run", "--backend", "docker", "--image", image, "--", "sleep", "60")
	other.Env = []string{"PATH=/usr/bin:/bin", "DOCKER_HOST=unix://" + sock}
	require.NoError(t, other.Start())
	t.Cleanup(func() {
		_ = other.Process.Kill()
		_ = other.Wait()
		_ = e.Remove(context.Background(), otherID(t, e, victim))
	})
	running(3)
	require.NoError(t, killed.Process.Kill())
	_ = killed.Wait()

	r := dockerJail(t, sock, nil, "check", "--clean")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "removed docker container "+victim)
	require.Equal(t, 1, strings.Count(r.stdout, "removed docker container"), "only the killed jail's: %s", r.stdout)
	running(2)
	require.NoError(t, other.Process.Kill()) // its jail dies with unshare (--kill-child): its container stays
	_ = other.Wait()
	require.NoError(t, e.Remove(ctx, otherID(t, e, victim)))
	left := running(1)
	require.NotEqual(t, victim, left[0].ID)

	// The live jail passes SIGTERM on, and removes its container.
	require.NoError(t, live.Process.Signal(syscall.SIGTERM))
	err = live.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 128+int(syscall.SIGTERM), ee.ExitCode())
	requireNoContainers(t, sock)
}

func TestDockerExport(t *testing.T) {
	sock, image := testDocker(t)
	r := dockerJail(t, sock, nil, "export", "docker", "--profile", "strict", "--image", image, "--memory", "64M", "--", "sh", "-c", "echo hi")
	require.Equal(t, 0, r.code, r.stderr)
	var body docker.CreateBody
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body))
	require.Equal(t, []string{"sh"}, body.Entrypoint)
	require.Equal(t, int64(64<<20), body.HostConfig.Memory)
	require.True(t, body.HostConfig.ReadonlyRootfs)
	require.Contains(t, r.stderr, "not enforced: time namespace")
	requireNoContainers(t, sock) // nothing was made
}

// TestBackendAuto: auto runs native where this host can (here it can),
// and a Spec with an image on a container backend; the report says why.
func TestBackendAuto(t *testing.T) {
	sock, image := testDocker(t)
	r := dockerJail(t, sock, nil, "run", "--json", "--backend", "auto", "--", "true")
	require.Equal(t, 0, r.code, r.stderr)
	var res jail.Result
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Equal(t, jail.BackendNative, res.Isolation.Backend)
	require.Contains(t, res.Isolation.BackendReason, "every kernel feature jail needs")

	res, _ = dockerJSON(t, sock, image, "--backend", "auto", "--", "true")
	require.Equal(t, jail.StatusExited, res.Status)
	require.Contains(t, res.Isolation.BackendReason, "image")
	requireNoContainers(t, sock)
}

// otherID is the id of a container of jail's that the live jail of
// TestDockerBackendKilledJail did not make: the one in another PID
// namespace (its owner tag's namespace is not this one's).
func otherID(t *testing.T, e *docker.Engine, skip string) string {
	t.Helper()
	list, err := e.List(context.Background(), docker.LabelManaged)
	require.NoError(t, err)
	self := strings.Split(procfs.OwnerTag(), ":")
	for _, c := range list {
		f := strings.Split(c.Labels[docker.LabelOwner], ":")
		if c.ID != skip && len(f) == 4 && f[1] != self[1] {
			return c.ID
		}
	}
	return ""
}

// TestDockerBackendImageConfig: what an image's configuration adds to its
// containers does not pass silently (found by review). A VOLUME becomes a
// tmpfs of the Spec's /tmp size, not a writable directory on the engine's
// disk; the ENV keys the engine merges in are listed.
func TestDockerBackendImageConfig(t *testing.T) {
	sock, _ := testDocker(t)
	tarball, err := testImageTar()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := "fromSrc=-&repo=jail-test-config&tag=1&changes=" + url.QueryEscape("VOLUME /data") + "&changes=" + url.QueryEscape("ENV INJECTED=from-image")
	_, err = dockerRequest(ctx, sock, http.MethodPost, "/images/create?"+q, "application/x-tar", bytes.NewReader(tarball))
	require.NoError(t, err)

	res, _ := dockerJSON(t, sock, "jail-test-config:1", "--profile", "strict", "--", "sh", "-c", `grep " /data " /proc/mounts; env | grep INJECTED`)
	require.Equal(t, jail.StatusExited, res.Status, res.Stderr)
	require.Regexp(t, `(?m)^tmpfs /data tmpfs .*size=65536k`, res.Stdout)
	require.Contains(t, res.Stdout, "INJECTED=from-image")
	joined := strings.Join(res.Isolation.NotEnforced, "\n")
	require.Contains(t, joined, "image volumes: the image's VOLUME /data are tmpfs of 67108864 bytes")
	require.Contains(t, joined, "env: the engine adds the image's INJECTED")

	// A VOLUME the Spec binds something on is the Spec's bind (found by
	// review: the tmpfs took its place, and writes went to memory).
	dir := hostDir(t)
	r := dockerJail(t, sock, nil, "run", "--backend", "docker", "--image", "jail-test-config:1", "--bind", dir+":/data", "--", "sh", "-c", "echo kept > /data/out")
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	require.NoError(t, err)
	require.Equal(t, "kept\n", string(b))
	// A VOLUME made a tmpfs is the workload's, as the image's directory.
	res, _ = dockerJSON(t, sock, "jail-test-config:1", "--", "sh", "-c", "ls -ldn /data; touch /data/f && echo writable")
	require.Regexp(t, `(?m)^d\S+ +\d+ 1000 +1000 .*/data$`, res.Stdout)
	require.Contains(t, res.Stdout, "writable")
	requireNoContainers(t, sock)
}

// TestDockerBackendReadOnlyBelow: a read-only bind is read-only below its
// top too, natively; an engine before API 1.44 makes only its top so, and
// a bind whose source carries a mount is refused there (found by review).
func TestDockerBackendReadOnlyBelow(t *testing.T) {
	sock, image := testDocker(t)
	dir := hostDir(t)
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	require.NoError(t, syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = syscall.Unmount(sub, syscall.MNT_DETACH) })
	for _, src := range []string{dir, dir + "/", dir + "/."} { // spelled any way (found by review)
		r := dockerJail(t, sock, nil, "run", "--backend", "docker", "--image", image, "--ro-bind", src+":/work", "--", "true")
		require.Equal(t, jail.ExitSetupError, r.code, r.stderr)
		require.Contains(t, r.stderr, "read-only bind "+dir+": it carries the mount "+sub)
	}
	requireNoContainers(t, sock)
}
