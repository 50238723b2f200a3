package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	jail "github.com/jailrt/jail"
)

// userNet runs jail as the unprivileged user unprivUID in the test's
// outer namespace, with /dev/net/tun replaced, in a mount namespace of
// its own, by a node of mode tunMode: this machine's is 0600 (no udev),
// where Debian's udev makes it 0666, and the test must not change the
// machine's. The device is the real one; only who may open it differs.
type userNet struct {
	n   *testNet
	dir string // the test's own files: the tun nodes
}

func newUserNet(t *testing.T) *userNet {
	t.Helper()
	if _, err := exec.LookPath("pasta"); err != nil {
		// Not in README's test command: Ubuntu 22.04 has no passt.
		if os.Getenv("CI") != "" {
			t.Fatal("CI has no pasta for an unprivileged caller's egress (apt-get install passt)")
		}
		t.Skip("needs pasta for an unprivileged caller's egress (apt-get install passt)")
	}
	u := &userNet{n: newTestNet(t), dir: t.TempDir()}
	for name, mode := range map[string]uint32{"tun-0666": 0o666, "tun-0600": 0o600} {
		p := filepath.Join(u.dir, name)
		require.NoError(t, unix.Mknod(p, unix.S_IFCHR|mode, int(unix.Mkdev(10, 200))))
		require.NoError(t, os.Chmod(p, os.FileMode(mode)))
	}
	return u
}

// cmd runs jail ARGS as the unprivileged user, with tun node tun and
// PATH path, and returns what it printed.
func (u *userNet) cmd(t *testing.T, tun, path string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := strconv.Itoa(unprivUID)
	argv := append([]string{"-m", "sh", "-c", `mount --bind "$0" /dev/net/tun && exec "$@"`, filepath.Join(u.dir, tun),
		"nsenter", "--net=/run/netns/" + u.n.outer, "setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups",
		"env", "PATH=" + path, jailBin}, args...)
	c := exec.CommandContext(ctx, "unshare", argv...)
	c.Dir = binDir
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	_ = c.Run()
	return result{stdout: out.String(), stderr: errb.String(), code: c.ProcessState.ExitCode()}
}

// run runs `jail run --json --profile strict` with the probe at /probe.
func (u *userNet) run(t *testing.T, args ...string) (jail.Result, result) {
	t.Helper()
	r := u.cmd(t, "tun-0666", "/usr/bin:/bin:/usr/sbin:/sbin",
		append([]string{"run", "--json", "--profile", "strict", "--ro-bind", binDir + ":/probe"}, args...)...)
	var res jail.Result
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&res), "stdout: %q stderr: %s", r.stdout, r.stderr)
	return res, r
}

// probeLines is testNet.probeLines for the unprivileged caller.
func (u *userNet) probeLines(t *testing.T, allow []string, targets ...string) (jail.Result, map[string]string) {
	t.Helper()
	return probeLinesWith(t, u.run, allow, targets)
}

// pastas lists the pasta processes of the unprivileged user.
func pastas(t *testing.T) []string {
	t.Helper()
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		// Its status, not its /proc directory's owner: pasta makes itself
		// undumpable, which gives that to root.
		comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		status, _ := os.ReadFile("/proc/" + d.Name() + "/status")
		// comm "passt.avx2", what pasta runs where the CPU has AVX2, or
		// "passt" or "pasta".
		if err != nil || !regexp.MustCompile(`^pass?t`).Match(comm) || !regexp.MustCompile(`(?m)^Uid:\s+`+strconv.Itoa(unprivUID)+`\s`).Match(status) {
			continue
		}
		found = append(found, d.Name())
	}
	return found
}

// TestNetworkEgressPasta is TestNetworkEgressAllowList for an unprivileged
// caller: pasta carries the jail's traffic, and the rules in the jail's
// own namespace hold it to the list.
func TestNetworkEgressPasta(t *testing.T) {
	requireRoot(t)
	u := newUserNet(t)

	res, got := u.probeLines(t, []string{hostA + ":8080"},
		"tcp "+hostA+" 8080", "tcp "+hostA+" 9090", "tcp "+hostB+" 8080", "udp "+hostA+" 5353", "udp "+hostA+" 53",
		"tcp "+metadata+" 80", "tcp "+outerA+" 7071", "tcp gateway 7072", "tcp 127.0.0.1 7070", "tcp "+hostA6+" 8080")
	assert.Contains(t, got["tcp "+hostA+" 8080"], "ok hello from "+hostA+":8080", "the allowed destination answers")
	for _, denied := range []string{"tcp " + hostA + " 9090", "tcp " + hostB + " 8080", "udp " + hostA + " 5353", "udp " + hostA + " 53",
		"tcp " + metadata + " 80", "tcp " + outerA + " 7071", "tcp gateway 7072"} {
		refusedFast(t, denied, got[denied])
	}
	// The jail's loopback is its own (pasta maps nothing of the host's
	// there), and IPv6 is closed.
	assert.Contains(t, got["tcp 127.0.0.1 7070"], "Connection refused")
	assert.True(t, strings.HasPrefix(got["tcp "+hostA6+" 8080"], "errno "), "IPv6: %s", got["tcp "+hostA6+" 8080"])
	require.NotNil(t, res.Network, "egress counters")
	assert.GreaterOrEqual(t, res.Network.Denied, int64(7), "each refused attempt is counted")
	assert.Positive(t, res.Network.BytesOut)
	assert.Positive(t, res.Network.PacketsIn)
	assert.Equal(t, jail.NetworkStackPasta, res.Isolation.Network.Stack)
	assert.Equal(t, []jail.IDMap{{InsideID: 1000, OutsideID: unprivUID, Count: 1}}, res.Isolation.UIDMap, "an unprivileged caller's jail")

	// 0.0.0.0/0 opens the internet, not the private networks, the
	// metadata address, this host or the host's own LAN, nor an address
	// of the host's with no network of its own (a /32 on lo, as a
	// floating address is): pasta's connections come from the host, where
	// it is local. Named, that one address is open.
	const hostVIP = "11.99.5.5"
	sh(t, "ip", "-n", u.n.outer, "addr", "add", hostVIP+"/32", "dev", "lo")
	u.n.serve(t, u.n.outer, "tcp", hostVIP, "7073")
	_, got = u.probeLines(t, []string{"0.0.0.0/0"}, "tcp "+internet+" 443", "tcp "+hostA+" 8080", "tcp "+metadata+" 80",
		"tcp "+outerA+" 7071", "tcp "+hostC+" 8080", "tcp "+hostVIP+" 7073")
	assert.Contains(t, got["tcp "+internet+" 443"], "ok hello")
	delete(got, "tcp "+internet+" 443")
	for k, v := range got {
		refusedFast(t, k+" under 0.0.0.0/0", v)
	}
	_, got = u.probeLines(t, []string{hostVIP + ":7073"}, "tcp "+hostVIP+" 7073")
	assert.Contains(t, got["tcp "+hostVIP+" 7073"], "ok hello", "the host's address, named")

	// A root caller's egress jail serving on its address: another jail,
	// even one allowed all of 10.0.0.0/8, does not reach it.
	server := exec.Command("nsenter", "--net=/run/netns/"+u.n.outer, jailBin, "run", "--profile", "strict", "--ro-bind", binDir+":/probe",
		"--net", "egress", "--allow", hostA+":8080", "--timeout", "20s", "--", "/probe/probe", "serve", "tcp", "eth0", "8000")
	require.NoError(t, server.Start())
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	var serverAddr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(u.n.in(t, u.n.outer, "ip", "-4", "-o", "route"), "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[2], "jail") {
				serverAddr = jailAddr(strings.TrimSuffix(f[0], "/30"))
				out, _ := exec.Command("nsenter", "--net=/run/netns/"+u.n.outer, probeBin, "net", "tcp", serverAddr, "8000").Output()
				return strings.HasPrefix(string(out), "ok hello") // the host reaches it: it is up
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the serving jail answers the host")
	_, got = u.probeLines(t, []string{"10.0.0.0/8", serverAddr + ":8000"}, "tcp "+serverAddr+" 8000")
	refusedFast(t, "a root caller's jail", got["tcp "+serverAddr+" 8000"])
	// SIGTERM: the server's jail ends its workload and removes its
	// network (SIGKILL would leave its lease to jail check --clean).
	require.NoError(t, server.Process.Signal(syscall.SIGTERM))
	_ = server.Wait()
	u.n.requireNoLeftovers(t)

	// The workload can change neither its rules nor its interface, and
	// cannot go below TCP and UDP.
	res, r := u.run(t, "--net", "egress", "--allow", hostA+":8080", "--net-log", "8", "--", "sh", "-c",
		"ip link set eth0 down; echo link=$?; ip route add 10.99.2.0/24 dev eth0; echo route=$?; nft flush ruleset; echo nft=$?; "+
			"/probe/probe sys raw-socket >/dev/null; echo raw=$?; /probe/probe sys packet-socket >/dev/null; echo packet=$?; "+
			"/probe/probe net tcp "+hostB+" 8080 >/dev/null; /probe/probe net tcp "+hostA+" 8080")
	require.Equal(t, jail.StatusExited, res.Status, "stderr: %s", r.stderr)
	for _, k := range []string{"link", "route", "nft", "raw", "packet"} {
		assert.Regexp(t, k+`=[1-9]`, res.Stdout, "%s must fail", k)
	}
	assert.Contains(t, res.Stdout, "ok hello", "the network still works after the attempts")
	require.NotNil(t, res.Network)
	assert.Equal(t, []jail.DeniedDestination{{Dst: hostB, Proto: "tcp", Port: 8080}}, res.Network.DeniedDestinations)

	// Nothing is left: pasta goes with the run (killed at its end, and
	// gone a moment later: its exit waits for the kernel to unregister the
	// jail's interface), also when jail is killed.
	require.Eventually(t, func() bool { return len(pastas(t)) == 0 }, 30*time.Second, 10*time.Millisecond, "a pasta process is left")
	// Killed once its workload runs, so pasta is ready (the workload
	// waits for that): a jail killed before would leave pasta's pid FIFO
	// directory, named for it, which `jail check --clean` removes
	// (netns.PruneUser, tested in its package).
	marker, script := sleepMarker(2)
	c := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$0" /dev/net/tun && exec "$@"`, filepath.Join(u.dir, "tun-0666"),
		"nsenter", "--net=/run/netns/"+u.n.outer, "setpriv", "--reuid="+strconv.Itoa(unprivUID), "--regid="+strconv.Itoa(unprivUID),
		"--clear-groups", "env", "PATH=/usr/bin:/bin", jailBin, "run", "--net", "egress", "--allow", hostA+":8080", "--", "sh", "-c", script)
	c.Dir = binDir
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	requireRunning(t, marker, 1)
	require.Len(t, pastas(t), 1, "pasta runs with the jail")
	require.NoError(t, c.Process.Kill()) // unshare execs nsenter, which execs setpriv, env, then jail: this is jail
	_ = c.Wait()
	require.Eventually(t, func() bool { return len(pastas(t)) == 0 }, 30*time.Second, 10*time.Millisecond, "pasta dies with a killed jail")
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("jail-pasta-%d-*", c.Process.Pid)))
	assert.Empty(t, left, "a jail killed once pasta was ready leaves no FIFO directory")
}

// TestNetworkEgressPastaRefused: an unprivileged caller's egress that
// cannot be built is refused before anything starts, with the reason.
func TestNetworkEgressPastaRefused(t *testing.T) {
	requireRoot(t)
	u := newUserNet(t)
	r := u.cmd(t, "tun-0600", "/usr/bin:/bin", "run", "--net", "egress", "--allow", hostA+":8080", "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "/dev/net/tun readable and writable by uid "+strconv.Itoa(unprivUID)+" (mode 0600")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)

	empty := openDir(t)
	r = u.cmd(t, "tun-0666", empty, "run", "--net", "egress", "--allow", hostA+":8080", "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "pasta, which is not installed (apt-get install passt)")

	// pasta itself fails (no route out of the namespace jail runs in):
	// the run fails with pasta's reason and leaves nothing.
	bare := fmt.Sprintf("jt%d-bare", os.Getpid())
	sh(t, "ip", "netns", "add", bare)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", bare).Run() })
	bareNet := &userNet{n: &testNet{outer: bare}, dir: u.dir}
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "jail-pasta-*"))
	r = bareNet.cmd(t, "tun-0666", "/usr/bin:/bin", "run", "--json", "--net", "egress", "--allow", hostA+":8080", "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "pasta: No external routable interface")
	assert.Contains(t, r.stdout, `"step": "network"`)
	require.Eventually(t, func() bool { return len(pastas(t)) == 0 }, 30*time.Second, 10*time.Millisecond, "a pasta process is left")
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "jail-pasta-*"))
	assert.Equal(t, before, left, "the failed run's pasta FIFO directory is left")

	state := filepath.Join(openDir(t), "state")
	r = u.cmd(t, "tun-0666", "/usr/bin:/bin", "session", "create", "--state-dir", state, "--net", "egress", "--allow", hostA+":8080")
	assert.Equal(t, 125, r.code, "stdout: %s stderr: %s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, "cannot have one yet")
	entries, _ := os.ReadDir(state)
	assert.Empty(t, entries, "a refused session leaves nothing")
	assert.Empty(t, pastas(t))
}

// openDir is a new empty directory every user may write to (t.TempDir's
// parent is root's alone).
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "jail-it-open-")
	require.NoError(t, err)
	t.Cleanup(func() {
		rememberStateDirs(d) // jail serve's, for the end's leak check
		os.RemoveAll(d)
	})
	require.NoError(t, os.Chmod(d, 0o777))
	return d
}
