package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jailrt/jail/internal/procfs"
)

// testImage is the image testDocker imports into the private daemon.
const testImage = "jail-test:latest"

// testImageApplets are the busybox applets the image links in /bin.
var testImageApplets = []string{
	"sh", "cat", "echo", "id", "ls", "sleep", "head", "true", "false",
	"env", "mount", "touch", "hostname", "grep", "wc", "seq", "yes", "cut", "tail", "kill",
}

// privateDocker is the suite's private Docker daemon, started by the first
// testDocker and stopped by stopDocker.
var privateDocker struct {
	once   sync.Once
	err    error  // why the daemon or its image is missing
	dir    string // the daemon's state, socket and log; removed by stopDocker
	sock   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when dockerd has ended and been waited for
}

// dockerCgroup is the daemon's --cgroup-parent. It is relative, so
// containers land below this process's own cgroup in every hierarchy, where
// the suite may make groups; the pid keeps two suites running at once
// apart.
var dockerCgroup = "jailtest-docker-" + strconv.Itoa(os.Getpid())

// dockerdInit runs as pid 1 of the daemon's new mount, network and pid
// namespaces and then becomes dockerd. It makes the mount namespace private
// before mounting anything, so that no mount reaches the host; mounts a
// /proc for the new pid namespace; and hides /run and /opt behind empty
// tmpfs, where dockerd and containerd otherwise leave directories on the host
// (/run/containerd/s for shim sockets, /run/docker/plugins,
// /opt/containerd). It also hides /run/systemd, so the daemon never looks
// for systemd. Containers of network mode host share the new network
// namespace, whose loopback starts down.
const dockerdInit = `set -e
mount -n --make-rprivate /
mount -n -t proc proc /proc
mount -n -t tmpfs -o mode=755 tmpfs /run
if [ -d /opt ]; then mount -n -t tmpfs -o mode=755 tmpfs /opt; fi
ip link set lo up
exec "$@"`

// dockerPATH is the daemon's PATH, where it finds containerd and runc: the
// suite's own and the sbin directories sudo's may lack.
var dockerPATH = os.Getenv("PATH") + ":/usr/local/sbin:/usr/sbin:/sbin"

// testDocker returns the unix socket of the suite's private dockerd and the
// name of an image ("jail-test:latest") with busybox, /probe, an
// /etc/passwd with root and user 1000, and empty /tmp, /proc, /sys, /dev,
// /etc and /work. The daemon starts on the first call; stopDocker stops it.
// The test is skipped in the unprivileged run and where dockerd is not
// installed.
func testDocker(t *testing.T) (sock, image string) {
	t.Helper()
	if unprivileged {
		t.Skip("the private dockerd needs root; it runs only in the root run of the suite")
	}
	dockerd := lookDockerPath("dockerd")
	if dockerd == "" {
		t.Skip("needs dockerd for a private Docker engine (apt-get install docker.io busybox-static)")
	}
	privateDocker.once.Do(func() { privateDocker.err = startDocker(t, dockerd) })
	if privateDocker.err != nil {
		t.Fatalf("private dockerd: %v", privateDocker.err)
	}
	return privateDocker.sock, testImage
}

// lookDockerPath returns the path of the executable name in dockerPATH, or
// "" when there is none.
func lookDockerPath(name string) string {
	for _, d := range filepath.SplitList(dockerPATH) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// startDocker starts dockerd with everything it keeps in a new temp
// directory, waits until it answers and imports the test image.
func startDocker(t *testing.T, dockerd string) error {
	tarball, err := testImageTar()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "jail-it-docker-")
	if err != nil {
		return err
	}
	privateDocker.dir = dir
	privateDocker.sock = filepath.Join(dir, "privateDocker.sock")
	// An own config file, so that the host's /etc/docker/daemon.json does
	// not apply, with the identity key out of /etc/docker.
	cfg, err := json.Marshal(map[string]string{"deprecated-key-path": filepath.Join(dir, "key.json")})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), cfg, 0o600); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()

	cmd := exec.Command("/bin/sh", "-c", dockerdInit, "sh", dockerd,
		"--config-file", filepath.Join(dir, "daemon.json"),
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--host", "unix://"+privateDocker.sock,
		"--containerd-namespace", "jailtest",
		"--containerd-plugins-namespace", "jailtest-plugins",
		// Tests use the network modes none and host only: no docker0, no
		// NAT rules.
		"--bridge=none", "--iptables=false", "--ip6tables=false",
		// The systemd driver would make systemd units, and on cgroup v2
		// docker 20.10 picks it when systemd runs.
		"--exec-opt", "native.cgroupdriver=cgroupfs",
		"--cgroup-parent", dockerCgroup,
	)
	cmd.Env = []string{"PATH=" + dockerPATH, "TMPDIR=" + filepath.Join(dir, "tmp")}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		// dockerd is pid 1 of its namespace: when it dies, the kernel
		// kills containerd, the shims and the containers too. It dies
		// with this process, even when a test timeout ends it without
		// stopDocker.
		Pdeathsig: syscall.SIGKILL,
	}
	started := make(chan error)
	privateDocker.exited = make(chan struct{})
	go func() {
		// Pdeathsig follows the thread that started the process, not the
		// process: keep that thread for the daemon's life.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(privateDocker.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting dockerd: %w", err)
	}
	privateDocker.cmd = cmd

	t0 := time.Now()
	if err := waitDocker(30 * time.Second); err != nil {
		return fmt.Errorf("%w\nlast lines of %s:\n%s", err, logf.Name(), logTail(logf.Name(), 30))
	}
	ready := time.Since(t0)
	t0 = time.Now()
	if err := importTestImage(tarball); err != nil {
		return err
	}
	t.Logf("private dockerd ready in %v, %s imported in %v", ready.Round(time.Millisecond), testImage, time.Since(t0).Round(time.Millisecond))
	return nil
}

// waitDocker polls /_ping until the daemon answers, it exits or timeout
// passes.
func waitDocker(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, err := dockerRequest(ctx, privateDocker.sock, http.MethodGet, "/_ping", "", nil)
		cancel()
		if err == nil && string(b) == "OK" {
			return nil
		}
		select {
		case <-privateDocker.exited:
			return fmt.Errorf("dockerd exited: %v", privateDocker.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dockerd did not answer on %s within %v: %v", privateDocker.sock, timeout, err)
		}
	}
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// importTestImage imports the rootfs tarball as testImage (docker import).
func importTestImage(tarball []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	repo, tag, _ := strings.Cut(testImage, ":")
	b, err := dockerRequest(ctx, privateDocker.sock, http.MethodPost, "/images/create?fromSrc=-&repo="+repo+"&tag="+tag,
		"application/x-tar", bytes.NewReader(tarball))
	if err != nil {
		return fmt.Errorf("importing %s: %w", testImage, err)
	}
	// The answer is a stream of JSON progress messages; a failure is a
	// message with "error", after the 200 status.
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("importing %s: %w: %s", testImage, err, b)
		}
		if msg.Error != "" {
			return fmt.Errorf("importing %s: %s", testImage, msg.Error)
		}
	}
}

// testImageTar returns the image's root file system as a tar archive.
func testImageTar() ([]byte, error) {
	busybox, err := staticBusybox()
	if err != nil {
		return nil, err
	}
	probe, err := os.ReadFile(probeBin)
	if err != nil {
		return nil, err
	}
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	dir := func(name string, mode int64) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
	}
	file := func(name string, mode int64, data []byte) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	entries := []entry{
		dir("bin", 0o755), dir("dev", 0o755), dir("etc", 0o755), dir("proc", 0o755),
		dir("sys", 0o755), dir("tmp", 0o1777), dir("work", 0o755),
		file("bin/busybox", 0o755, busybox),
		file("probe", 0o755, probe),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/:/bin/sh\nuser:x:1000:1000:user:/work:/bin/sh\n")),
		file("etc/group", 0o644, []byte("root:x:0:\nuser:x:1000:\n")),
	}
	for _, a := range testImageApplets {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// staticBusybox returns the busybox binary for the image. The image has no
// libc, where a dynamically linked busybox would fail with a puzzling "no
// such file or directory".
func staticBusybox() ([]byte, error) {
	const hint = "the test image needs a static busybox (apt-get install busybox-static)"
	path, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hint, err)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hint, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s: %s is dynamically linked", hint, path)
		}
	}
	return os.ReadFile(path)
}

// stopDocker stops the private daemon, if a test started it, and removes
// its cgroups and directory. Its mounts went with its mount namespace and
// its processes with its pid namespace.
func stopDocker() {
	if privateDocker.dir == "" {
		return
	}
	var errs []error
	if privateDocker.cmd != nil {
		// On SIGTERM dockerd gives each running container its stop
		// timeout (10 s); killing them first keeps the shutdown short.
		removeDockerContainers()
		privateDocker.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-privateDocker.exited:
		case <-time.After(20 * time.Second):
			errs = append(errs, errors.New("dockerd still running 20 s after SIGTERM; killed it"))
			privateDocker.cmd.Process.Kill()
			<-privateDocker.exited
		}
	}
	errs = append(errs, removeDockerCgroups(), os.RemoveAll(privateDocker.dir))
	if err := errors.Join(errs...); err != nil {
		fmt.Printf("integration: stopping the private dockerd: %v\n", err)
	}
}

// removeDockerContainers force-removes every container of the daemon, as
// far as it answers within a few seconds.
func removeDockerContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := dockerRequest(ctx, privateDocker.sock, http.MethodGet, "/containers/json?all=1", "", nil)
	if err != nil {
		return
	}
	var list []struct {
		ID string `json:"Id"`
	}
	if json.Unmarshal(b, &list) != nil {
		return
	}
	for _, c := range list {
		dockerRequest(ctx, privateDocker.sock, http.MethodDelete, "/containers/"+c.ID+"?force=1", "", nil)
	}
}

// removeDockerCgroups removes dockerCgroup and the groups below it, the
// deepest first, in every hierarchy. runc leaves the parent behind, and the
// containers' own groups too when the daemon was killed.
func removeDockerCgroups() error {
	var errs []error
	for _, d := range procfs.OwnCgroupDirs() {
		var tree []string
		filepath.WalkDir(filepath.Join(d, dockerCgroup), func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		for _, p := range slices.Backward(tree) {
			errs = append(errs, rmdirCgroup(p))
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup removes the cgroup directory p, waiting up to 2 s for the
// kernel to let go of processes that just exited.
func rmdirCgroup(p string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(p)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("rmdir %s: %w", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dockerClient returns an HTTP client for the Engine API at the unix
// socket sock. Every request has its own connection, so that none outlives
// the daemon.
func dockerClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
}

// dockerRequest sends one Engine API request (path without a version
// prefix) and returns the body of the answer; a status of 300 or more is an
// error.
func dockerRequest(ctx context.Context, sock, method, path, contentType string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := dockerClient(sock).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return b, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}
