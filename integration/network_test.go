package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jail "github.com/jailrt/jail"
	"github.com/jailrt/jail/netns"
)

// testNet is a network of namespaces the test makes, so that no packet
// reaches this machine's own network: "outer" stands for the host jail
// runs on, and hosts A (10.99.1.2, also the "metadata" address
// 169.254.169.254 and fd00:99:1::2), B (10.99.2.2) and C (11.99.3.2 on
// the outer host's LAN, and 11.99.4.2 behind it: "the internet") are
// linked to it by veth pairs it forwards to. The outer namespace has no
// other link, and its default route leads to C: 11.99.x is a label inside
// the test's namespaces, never sent anywhere else.
type testNet struct {
	outer, a, b, c string // namespace names, under /run/netns
}

const (
	hostA    = "10.99.1.2"
	hostB    = "10.99.2.2"
	hostC    = "11.99.3.2" // on the outer host's own network
	internet = "11.99.4.2" // C's, behind it: routed, not on-link
	outerA   = "10.99.1.1" // the outer host's own address towards A
	metadata = "169.254.169.254"
	hostA6   = "fd00:99:1::2"
)

func sh(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%v: %s", args, out)
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	p := fmt.Sprintf("jt%d", os.Getpid())
	n := &testNet{outer: p + "-outer", a: p + "-a", b: p + "-b", c: p + "-c"}
	for _, ns := range []string{n.outer, n.a, n.b, n.c} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	for _, l := range []struct{ host, outerIf, hostIf, net string }{{n.a, "to-a", "eth0", "10.99.1"}, {n.b, "to-b", "eth0", "10.99.2"},
		{n.c, "to-c", "eth0", "11.99.3"}} {
		sh(t, "ip", "-n", n.outer, "link", "add", l.outerIf, "type", "veth", "peer", "name", l.hostIf, "netns", l.host)
		sh(t, "ip", "-n", n.outer, "addr", "add", l.net+".1/24", "dev", l.outerIf)
		sh(t, "ip", "-n", n.outer, "link", "set", l.outerIf, "up")
		sh(t, "ip", "-n", l.host, "addr", "add", l.net+".2/24", "dev", l.hostIf)
		sh(t, "ip", "-n", l.host, "link", "set", l.hostIf, "up")
		// The outer host forwards to the test hosts, as a host routing
		// egress jails must (jail turns it on for no interface but its own).
		n.in(t, n.outer, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/"+l.outerIf+"/forwarding")
	}
	sh(t, "ip", "-n", n.c, "addr", "add", internet+"/32", "dev", "eth0")
	sh(t, "ip", "-n", n.outer, "route", "add", "11.99.4.0/24", "via", hostC)
	// A default route, as hosts have: towards C, so that nothing leaves
	// the test's namespaces either way.
	sh(t, "ip", "-n", n.outer, "route", "add", "default", "via", hostC)
	sh(t, "ip", "-n", n.a, "addr", "add", metadata+"/32", "dev", "eth0")
	sh(t, "ip", "-n", n.outer, "route", "add", metadata+"/32", "via", hostA)
	sh(t, "ip", "-n", n.a, "-6", "addr", "add", hostA6+"/64", "dev", "eth0", "nodad")
	sh(t, "ip", "-n", n.outer, "-6", "addr", "add", "fd00:99:1::1/64", "dev", "to-a", "nodad")
	for _, s := range []struct{ ns, proto, addr, port string }{
		{n.a, "tcp", hostA, "8080"}, {n.a, "tcp", hostA, "9090"}, {n.a, "udp", hostA, "5353"}, {n.a, "udp", hostA, "53"},
		{n.a, "tcp", metadata, "80"}, {n.a, "tcp", "::", "8080"},
		{n.b, "tcp", hostB, "8080"}, {n.b, "tcp", hostB, "9090"},
		{n.c, "tcp", hostC, "8080"}, {n.c, "tcp", internet, "443"},
		// The outer host's own listeners: its loopback, its address, any.
		{n.outer, "tcp", "127.0.0.1", "7070"}, {n.outer, "tcp", outerA, "7071"}, {n.outer, "tcp", "0.0.0.0", "7072"},
	} {
		n.serve(t, s.ns, s.proto, s.addr, s.port)
	}
	return n
}

// in runs a command in namespace ns.
func (n *testNet) in(t *testing.T, ns string, args ...string) string {
	t.Helper()
	// The program by its path, found here: busybox's nsenter (the VM of
	// integration/vm) would run its own applet of that name first.
	if p, err := exec.LookPath(args[0]); err == nil {
		args = append([]string{p}, args[1:]...)
	}
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns}, args...)...).CombinedOutput()
	require.NoError(t, err, "%v in %s: %s", args, ns, out)
	return string(out)
}

// serve starts a probe server in namespace ns until the test ends.
func (n *testNet) serve(t *testing.T, ns, proto, addr, port string) {
	t.Helper()
	c := exec.Command("nsenter", "--net=/run/netns/"+ns, probeBin, "serve", proto, addr, port)
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	c.Stderr = os.Stderr
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "probe serve %s %s:%s in %s", proto, addr, port, ns)
	require.Equal(t, "listening\n", line)
}

// run runs `jail run --json ARGS` in the outer namespace, with the probe
// at /probe/probe.
func (n *testNet) run(t *testing.T, args ...string) (jail.Result, result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{"--net=/run/netns/" + n.outer, jailBin, "run", "--json", "--profile", "strict", "--ro-bind", binDir + ":/probe"}, args...)
	c := exec.CommandContext(ctx, "nsenter", argv...)
	c.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	_ = c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), code: c.ProcessState.ExitCode()}
	var res jail.Result
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&res), "stdout: %q stderr: %s", r.stdout, r.stderr)
	return res, r
}

// leftovers lists what egress jails leave in the outer namespace: jail*
// interfaces (veths), and chains and map elements of theirs in the shared
// table (the table itself, with its base chains and empty maps, stays).
func (n *testNet) leftovers(t *testing.T) string {
	t.Helper()
	return strings.Join(append(n.leftVeths(t), n.leftRules(t)...), "; ")
}

func (n *testNet) leftVeths(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, l := range strings.Split(n.in(t, n.outer, "ip", "-br", "link"), "\n") {
		if strings.HasPrefix(l, "jail") {
			left = append(left, l)
		}
	}
	return left
}

func (n *testNet) leftRules(t *testing.T) []string {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		return nil
	}
	out, _ := exec.Command("nsenter", "--net=/run/netns/"+n.outer, nft, "list", "table", "inet", "jail").CombinedOutput()
	return regexp.MustCompile(`chain jail\d+-[a-z-]+|"jail\d+"`).FindAllString(string(out), -1)
}

// requireNoLeftovers requires that nothing of the jails is left: no
// chains, map elements or lease (removed when each run ends), and no veth.
// A veth goes with its jail's namespace, after the run (an explicit delete
// would cost the run an RCU grace period), and the kernel keeps the
// namespace while a TCP connection of the jail still closes: its last
// packets, sent after the rules went, are dropped. With the kernel's
// defaults such a socket lived up to about two minutes (a veth once
// outlived a 150 s wait); netns.JailSysctls bounds it to a second or two,
// and TestNetworkEgressClosedConnectionsEnd checks that alone.
func (n *testNet) requireNoLeftovers(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return len(n.leftRules(t)) == 0 }, 5*time.Second, 20*time.Millisecond, "left: %s", n.leftRules(t))
	entries, _ := os.ReadDir("/run/jail/net")
	for _, e := range entries {
		assert.Fail(t, "a lease is left", e.Name())
	}
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(n.leftVeths(t)) == 0 }, 30*time.Second, 50*time.Millisecond, "left: %s", n.leftVeths(t))
	if d := time.Since(t0); d > 5*time.Second {
		t.Logf("a veth took %v to go with its jail's namespace", d)
	}
}

// TestNetworkEgressClosedConnectionsEnd: a connection the jail closed
// while its peer keeps its end open waits in FIN_WAIT_2, as an orphan that
// holds the jail's network namespace and veth, for tcp_fin_timeout (60 s
// by default). The jail's namespace has netns.JailSysctls, so the veth
// goes within seconds; without them this test fails.
func TestNetworkEgressClosedConnectionsEnd(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	n.serve(t, n.a, "tcp-hold", hostA, "8081")
	res, r := n.run(t, "--net", "egress", "--allow", hostA+":8081", "--", "sh", "-c",
		"/probe/probe net tcp "+hostA+" 8081; cat /proc/sys/net/ipv4/tcp_orphan_retries /proc/sys/net/ipv4/tcp_fin_timeout")
	require.Equal(t, 0, r.code, "%s", r.stderr)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 3, "%q", res.Stdout)
	assert.True(t, strings.HasPrefix(lines[0], "ok hello from "+hostA+":8081"), "the held server answers: %s", lines[0])
	assert.Equal(t, []string{"1", "1"}, lines[1:], "tcp_orphan_retries and tcp_fin_timeout in the jail's namespace")
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(n.leftVeths(t)) == 0 }, 20*time.Second, 50*time.Millisecond,
		"the jail's veth outlives its closed connection: %s", n.leftVeths(t))
	t.Logf("the veth went %v after the run", time.Since(t0).Round(time.Millisecond))
	n.requireNoLeftovers(t)
}

// probeLines runs the probe's net commands in one egress jail and
// returns each one's answer.
func (n *testNet) probeLines(t *testing.T, allow []string, targets ...string) (jail.Result, map[string]string) {
	t.Helper()
	return probeLinesWith(t, n.run, allow, targets)
}

// probeLinesWith runs, with run, one egress jail allowed allow that runs
// the probe's net command of each target, and returns each one's answer.
func probeLinesWith(t *testing.T, run func(*testing.T, ...string) (jail.Result, result), allow, targets []string) (jail.Result, map[string]string) {
	t.Helper()
	args := []string{"--net", "egress"}
	for _, a := range allow {
		args = append(args, "--allow", a)
	}
	script := ""
	for _, tg := range targets {
		f := strings.Fields(tg)
		script += fmt.Sprintf("echo \"%s => $(/probe/probe net %s %s %s)\"\n", tg, f[0], f[1], f[2])
	}
	res, r := run(t, append(args, "--", "sh", "-c", script)...)
	require.Equal(t, jail.StatusExited, res.Status, "stderr: %s", r.stderr)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " => ")
		got[k] = v
	}
	require.Len(t, got, len(targets), "stdout: %s", res.Stdout)
	return res, got
}

// refusedFast checks an answer is an error that came within 100 ms: the
// rules reject, they do not let a program hang.
func refusedFast(t *testing.T, what, answer string) {
	t.Helper()
	if !assert.True(t, strings.HasPrefix(answer, "errno "), "%s: got %q, want refused", what, answer) {
		return
	}
	var ms int
	f := strings.Fields(answer)
	_, err := fmt.Sscanf(f[len(f)-1], "%dms", &ms)
	require.NoError(t, err, answer)
	// Refused, not dropped: a dropped packet waits out the probe's 2 s.
	// (Not 100 ms: one stall of the host is more than that.)
	assert.Less(t, ms, 1000, "%s refused after %d ms: %q", what, ms, answer)
}

func TestNetworkEgressAllowList(t *testing.T) {
	if unprivileged {
		// Here, in this machine's own network namespace, only whether it
		// is refused when pasta cannot run; TestNetworkEgressPasta (a
		// root test) runs an unprivileged caller's egress in the test's
		// namespaces.
		if _, err := netns.UserStack(); err == nil {
			t.Log("pasta can run here: the refusal is checked by TestNetworkEgressPastaRefused")
			return
		}
		r := runJail(t, "run", "--net", "egress", "--allow", "10.0.0.1:80", "--", "true")
		assert.Equal(t, 125, r.code)
		assert.Contains(t, r.stderr, "pasta", "the refusal says what is missing")
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
		return
	}
	n := newTestNet(t)

	// A jail whose root cannot be made reports that, not the network
	// step's failure that its death causes.
	bad, badr := n.run(t, "--tmpfs", "/etc/hostname", "--net", "egress", "--allow", hostA+":8080", "--", "true")
	assert.Equal(t, jail.StatusSetupError, bad.Status)
	assert.Contains(t, badr.stderr, "mount plan (tmpfs on /etc/hostname)")

	res, got := n.probeLines(t, []string{hostA + ":8080"},
		"tcp "+hostA+" 8080", "tcp "+hostA+" 9090", "tcp "+hostB+" 8080", "udp "+hostA+" 5353", "udp "+hostA+" 53",
		"tcp "+metadata+" 80", "tcp "+outerA+" 7071", "tcp gateway 7072", "tcp 127.0.0.1 7070", "tcp "+hostA6+" 8080")
	assert.Equal(t, "ok hello from "+hostA+":8080", strings.Fields(got["tcp "+hostA+" 8080"])[0]+" "+
		strings.Join(strings.Fields(got["tcp "+hostA+" 8080"])[1:4], " "), "the allowed destination answers")
	for _, denied := range []string{"tcp " + hostA + " 9090", "tcp " + hostB + " 8080", "udp " + hostA + " 5353", "udp " + hostA + " 53",
		"tcp " + metadata + " 80", "tcp " + outerA + " 7071", "tcp gateway 7072"} {
		refusedFast(t, denied, got[denied])
	}
	// The jail's own loopback is its own: nothing listens there.
	assert.Contains(t, got["tcp 127.0.0.1 7070"], "Connection refused")
	// IPv6 has no route out of the jail.
	assert.True(t, strings.HasPrefix(got["tcp "+hostA6+" 8080"], "errno "), "IPv6: %s", got["tcp "+hostA6+" 8080"])

	require.NotNil(t, res.Network, "egress counters")
	assert.GreaterOrEqual(t, res.Network.Denied, int64(7), "each refused attempt is counted")
	assert.Positive(t, res.Network.BytesOut)
	assert.Positive(t, res.Network.PacketsIn)
	assert.Equal(t, jail.NetworkEgress, res.Isolation.Network.Mode)
	assert.Equal(t, []jail.AllowInfo{{Dest: hostA + ":8080", Resolved: []string{hostA + ":8080"}}}, res.Isolation.Network.Allow)
	assert.NotEmpty(t, res.Isolation.Network.Address)

	// With --net-log, the report names what was refused.
	res, r := n.run(t, "--net", "egress", "--allow", hostA+":8080", "--net-log", "16", "--", "sh", "-c",
		"/probe/probe net tcp "+hostA+" 9090; /probe/probe net udp "+hostA+" 5353; /probe/probe net tcp "+metadata+" 80; "+
			"/probe/probe net tcp "+hostA+" 9090; /probe/probe net tcp "+hostA+" 8080")
	require.Equal(t, jail.StatusExited, res.Status, "stderr: %s", r.stderr)
	require.NotNil(t, res.Network)
	assert.ElementsMatch(t, []jail.DeniedDestination{{Dst: hostA, Proto: "tcp", Port: 9090}, {Dst: hostA, Proto: "udp", Port: 5353},
		{Dst: metadata, Proto: "tcp", Port: 80}}, res.Network.DeniedDestinations, "each refused destination once; the allowed one not")
	res, _ = n.run(t, "--net", "egress", "--allow", hostA+":8080", "--", "/probe/probe", "net", "tcp", hostA, "9090")
	assert.Empty(t, res.Network.DeniedDestinations, "nothing recorded without --net-log")
	assert.Positive(t, res.Network.Denied)

	// A whole host, every TCP port; and a UDP port.
	_, got = n.probeLines(t, []string{hostB, "udp/" + hostA + ":5353"},
		"tcp "+hostB+" 8080", "tcp "+hostB+" 9090", "tcp "+hostA+" 8080", "udp "+hostA+" 5353")
	assert.Contains(t, got["tcp "+hostB+" 8080"], "ok hello")
	assert.Contains(t, got["tcp "+hostB+" 9090"], "ok hello")
	assert.Contains(t, got["udp "+hostA+" 5353"], "ok hello")
	refusedFast(t, "A:8080 when only B and UDP to A are allowed", got["tcp "+hostA+" 8080"])

	// 0.0.0.0/0 opens the internet, but neither private networks, nor the
	// metadata address, nor this host, nor the host's own LAN.
	_, got = n.probeLines(t, []string{"0.0.0.0/0"}, "tcp "+internet+" 443", "tcp "+hostA+" 8080", "tcp "+metadata+" 80",
		"tcp "+outerA+" 7071", "tcp "+hostC+" 8080")
	assert.Contains(t, got["tcp "+internet+" 443"], "ok hello")
	delete(got, "tcp "+internet+" 443")
	for k, v := range got {
		refusedFast(t, k+" under 0.0.0.0/0", v)
	}
	// Named, the LAN's host is reachable.
	_, got = n.probeLines(t, []string{hostC + ":8080"}, "tcp "+hostC+" 8080")
	assert.Contains(t, got["tcp "+hostC+" 8080"], "ok hello")
	n.requireNoLeftovers(t)
}

func TestNetworkEgressJailCannotChangeIt(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	// The workload holds no capability: it can change neither its routes
	// and addresses nor a firewall (its namespace's or the host's), nor
	// send from a forged address.
	// Nor can it go around the list below TCP and UDP: no raw socket
	// (forged sources, any protocol), no packet socket (frames below IP),
	// no ICMP echo socket, under either seccomp policy or none.
	res, r := n.run(t, "--net", "egress", "--allow", hostA+":8080", "--", "sh", "-c",
		"ip link set eth0 down; echo link=$?; ip addr add 10.99.1.77/32 dev eth0; echo addr=$?; "+
			"ip route add 10.99.2.0/24 dev eth0; echo route=$?; nft flush ruleset; echo nft=$?; "+
			"/probe/probe sys raw-socket >/dev/null; echo raw=$?; /probe/probe sys packet-socket >/dev/null; echo packet=$?; "+
			"/probe/probe sys ping-socket >/dev/null; echo ping=$?; "+
			"/probe/probe net tcp "+hostA+" 8080")
	require.Equal(t, jail.StatusExited, res.Status, "stderr: %s", r.stderr)
	for _, k := range []string{"link", "addr", "route", "nft", "raw", "packet", "ping"} {
		assert.Regexp(t, k+`=[1-9]`, res.Stdout, "%s must fail", k)
	}
	assert.Contains(t, res.Stdout, "ok hello", "the network still works after the attempts")
	res, r = n.run(t, "--net", "egress", "--allow", hostA+":8080", "--seccomp", "none", "--", "sh", "-c",
		"/probe/probe sys raw-socket; /probe/probe sys packet-socket; /probe/probe sys ping-socket; exit 0")
	require.Equal(t, jail.StatusExited, res.Status, "stderr: %s", r.stderr)
	assert.Equal(t, 3, strings.Count(res.Stdout, "errno "), "without seccomp, the missing capabilities refuse them: %s", res.Stdout)
}

func TestNetworkEgressBaseChainsRestored(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatal("needs nft (apt-get install nftables)")
	}
	n := newTestNet(t)
	_, got := n.probeLines(t, []string{hostA + ":8080"}, "tcp "+hostA+" 8080")
	require.Contains(t, got["tcp "+hostA+" 8080"], "ok hello")
	// Someone empties the shared table's base chains: the next egress run
	// puts them back before its jail sends anything.
	for _, c := range []string{"forward", "input", "output", "postrouting"} {
		n.in(t, n.outer, "nft", "flush", "chain", "inet", "jail", c)
	}
	_, got = n.probeLines(t, []string{hostA + ":8080"}, "tcp "+hostA+" 8080", "tcp "+hostB+" 8080", "tcp "+metadata+" 80")
	assert.Contains(t, got["tcp "+hostA+" 8080"], "ok hello")
	refusedFast(t, "B after the base chains were flushed", got["tcp "+hostB+" 8080"])
	refusedFast(t, "metadata after the base chains were flushed", got["tcp "+metadata+" 80"])
	fwd := n.in(t, n.outer, "nft", "list", "chain", "inet", "jail", "forward")
	assert.Contains(t, fwd, "iifname vmap @fwd_from")
	assert.Contains(t, fwd, `iifname "jail*" drop`)
	n.requireNoLeftovers(t)
}

func TestNetworkEgressHostname(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	// Names come from a hosts file the test controls (a mount namespace of
	// its own over /etc/hosts); the resolver file points nowhere, so no
	// name can be looked up beyond this machine.
	dir := t.TempDir()
	hosts, resolv := filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+internet+" svc.test\n"+hostA+" private.test\n"+metadata+" meta.test\n"), 0o644))
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script := `mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && shift 2 && exec "$@"`
	c := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", hosts, resolv,
		"nsenter", "--net=/run/netns/"+n.outer, jailBin, "run", "--json", "--profile", "strict", "--ro-bind", binDir+":/probe",
		"--net", "egress", "--allow", "svc.test:443", "--", "sh", "-c", "cat /etc/hosts; ls /etc/resolv.conf; /probe/probe net tcp "+internet+" 443")
	out, err := c.Output()
	require.NoError(t, err)
	var res jail.Result
	require.NoError(t, json.Unmarshal(out, &res))
	assert.Contains(t, res.Stdout, internet+"\tsvc.test\n", "the name is pinned in the jail's /etc/hosts")
	assert.Contains(t, res.Stderr, "No such file", "no resolver in the jail")
	assert.Contains(t, res.Stdout, "ok hello")
	assert.Equal(t, []jail.AllowInfo{{Dest: "svc.test:443", Resolved: []string{internet + ":443"}}}, res.Isolation.Network.Allow)

	// A name that does not resolve, or resolves to a private or the
	// metadata address, refuses the run, and makes nothing.
	for name, why := range map[string]string{"nothere.test": "does not resolve", "private.test": "10.0.0.0/8", "meta.test": "169.254.0.0/16"} {
		c = exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", hosts, resolv,
			"nsenter", "--net=/run/netns/"+n.outer, jailBin, "run", "--net", "egress", "--allow", name, "--", "true")
		var errb bytes.Buffer
		c.Stderr = &errb
		err = c.Run()
		require.Error(t, err)
		assert.Equal(t, 125, c.ProcessState.ExitCode())
		assert.Contains(t, errb.String(), `network.allow[0] "`+name+`"`)
		assert.Contains(t, errb.String(), why)
	}
	n.requireNoLeftovers(t)
}

func TestNetworkEgressConcurrentAndKilled(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	// A jail that serves on its own address, which another jail, allowed
	// the whole pool's network and more, cannot reach.
	server := exec.Command("nsenter", "--net=/run/netns/"+n.outer, jailBin, "run", "--json", "--profile", "strict", "--ro-bind", binDir+":/probe",
		"--net", "egress", "--allow", hostA+":8080", "--timeout", "6s", "--", "sh", "-c",
		"/probe/probe serve tcp eth0 8000")
	require.NoError(t, server.Start())
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	var serverAddr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(n.in(t, n.outer, "ip", "-4", "-o", "route"), "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[2], "jail") {
				serverAddr = strings.TrimSuffix(f[0], "/30")
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the serving jail's route appears")
	// The host itself reaches it (what proves the server is up): only
	// other jails are kept away.
	require.Eventually(t, func() bool {
		out, _ := exec.Command("nsenter", "--net=/run/netns/"+n.outer, probeBin, "net", "tcp", jailAddr(serverAddr), "8000").Output()
		return strings.HasPrefix(string(out), "ok hello")
	}, 10*time.Second, 50*time.Millisecond, "the serving jail answers the host")

	const jails = 50
	var wg sync.WaitGroup
	outs := make([]string, jails)
	for i := range jails {
		wg.Go(func() {
			res, r := n.run(t, "--net", "egress", "--allow", hostA+":8080", "--allow", "10.0.0.0/8", "--", "sh", "-c",
				"/probe/probe net tcp "+hostA+" 8080; /probe/probe net tcp "+jailAddr(serverAddr)+" 8000")
			outs[i] = res.Stdout + r.stderr
		})
	}
	wg.Wait()
	for i := range jails {
		lines := strings.Split(strings.TrimSpace(outs[i]), "\n")
		require.Len(t, lines, 2, "jail %d: %s", i, outs[i])
		assert.Contains(t, lines[0], "ok hello from "+hostA, "jail %d", i)
		// Refused; how fast is checked alone above (50 jails on 2 CPUs
		// wait for one).
		assert.True(t, strings.HasPrefix(lines[1], "errno "), "jail %d reached another jail: %s", i, lines[1])
	}
	_ = server.Wait() // its timeout ends it
	assert.Equal(t, 124, server.ProcessState.ExitCode())
	n.requireNoLeftovers(t)

	// A jail killed with SIGKILL: its veth goes with its namespace; its
	// table and lease stay until `jail check --clean` (or the next run
	// that takes the lease) removes them.
	// Killed once its workload runs: its network is all made by then.
	marker, script := sleepMarker(1)
	c := exec.Command("nsenter", "--net=/run/netns/"+n.outer, jailBin, "run", "--net", "egress", "--allow", hostA+":8080", "--", "sh", "-c", script)
	require.NoError(t, c.Start())
	requireRunning(t, marker, 1)
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	require.Eventually(t, func() bool { return !strings.Contains(n.in(t, n.outer, "ip", "-br", "link"), "jail") },
		10*time.Second, 50*time.Millisecond, "the veth goes with the jail's namespace")
	assert.Contains(t, n.leftovers(t), "chain jail", "the dead jail's chains are left")
	clean := n.in(t, n.outer, jailBin, "check", "--clean")
	assert.Regexp(t, `removed lease \d+ \(veth jail\d+, chains jail\d+-\* of table inet jail\)`, clean)
	n.requireNoLeftovers(t)
	assert.NotContains(t, n.in(t, n.outer, jailBin, "check", "--clean"), "lease", "nothing left to remove")
	_, got := n.probeLines(t, []string{hostA + ":8080"}, "tcp "+hostA+" 8080")
	assert.Contains(t, got["tcp "+hostA+" 8080"], "ok hello")
	entries, _ := os.ReadDir("/run/jail/net")
	for _, e := range entries {
		assert.Fail(t, "a lease is left", e.Name())
	}
}

// jailAddr is the jail's address in the /30 whose network address is
// network: the network's +2.
func jailAddr(network string) string {
	i := strings.LastIndex(network, ".")
	var last int
	fmt.Sscanf(network[i+1:], "%d", &last)
	return fmt.Sprintf("%s.%d", network[:i], last+2)
}

func TestNetworkModes(t *testing.T) {
	// none: lo only; host: the host's interfaces, and the report says so.
	res, r := runJSON(t, "--net", "none", "--", "sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1")
	require.Equal(t, 0, res.ExitCode, r.stderr)
	assert.Equal(t, "lo", strings.TrimSpace(res.Stdout))
	assert.Equal(t, jail.NetworkNone, res.Isolation.Network.Mode)
	assert.Nil(t, res.Network)
	assert.Contains(t, res.Isolation.Namespaces, "net")

	res, r = runJSON(t, "--net", "host", "--", "true")
	require.Equal(t, 0, res.ExitCode, r.stderr)
	assert.Equal(t, jail.NetworkHost, res.Isolation.Network.Mode)
	assert.NotContains(t, res.Isolation.Namespaces, "net")
	res, _ = runJSON(t, "--no-netns", "--", "true")
	assert.Equal(t, jail.NetworkHost, res.Isolation.Network.Mode, "--no-netns is --net host")

	for _, bad := range [][]string{
		{"--no-netns", "--net", "none"},
		{"--allow", "10.0.0.1"},
		{"--net", "egress"},
		{"--net", "egress", "--allow", "10.0.0.1:70000"},
		{"--net", "bridge"},
		{"--net", "egress", "--allow", "[2001:db8::1]:443"},
		{"--net-log", "5"},
		{"--net", "egress", "--allow", "10.0.0.1", "--net-log", "5000"},
		{"--net", "egress", "--allow", "10.0.0.1", "--net-pool", "8.8.0.0/16"},
	} {
		r := runJail(t, append(append([]string{"run"}, bad...), "--", "true")...)
		assert.Equal(t, 125, r.code, "%v", bad)
		assert.Contains(t, r.stderr, "network", "%v names the field", bad)
	}
}

// outerSess runs `jail session SUB --state-dir DIR args...` in the outer
// namespace.
func (n *testNet) outerSess(t *testing.T, dir, sub string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.outer, jailBin, "session", sub, "--state-dir", dir}, args...)...)
	c.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	_ = c.Run()
	return result{stdout: out.String(), stderr: errb.String(), code: c.ProcessState.ExitCode()}
}

func TestNetworkEgressSession(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	dir := sessionDir(t)
	t.Cleanup(func() { n.outerSess(t, dir, "rm", "net"); n.outerSess(t, dir, "rm", "short") }) // when the test fails midway
	r := n.outerSess(t, dir, "create", "--id", "net", "--profile", "strict", "--ro-bind", binDir+":/probe",
		"--net", "egress", "--allow", hostA+":8080")
	require.Equal(t, 0, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	// Every command of the session is held to the list, and the network
	// outlives the command that made the session.
	for i := 0; i < 2; i++ {
		r = n.outerSess(t, dir, "exec", "net", "--", "sh", "-c",
			"/probe/probe net tcp "+hostA+" 8080; /probe/probe net tcp "+hostB+" 8080; /probe/probe net tcp "+metadata+" 80; exit 0")
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 3, r.stdout)
		assert.Contains(t, lines[0], "ok hello from "+hostA)
		refusedFast(t, "B from the session", lines[1])
		refusedFast(t, "metadata from the session", lines[2])
	}
	var info jail.SessionInfo
	r = n.outerSess(t, dir, "inspect", "--json", "net")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &info), r.stderr)
	assert.Equal(t, jail.NetworkEgress, info.Isolation.Network.Mode)
	assert.NotEmpty(t, info.Isolation.Network.Address)
	assert.NotEmpty(t, n.leftovers(t), "the session's network is there while it runs")
	// jail check --clean leaves a live session's network alone.
	assert.NotContains(t, n.in(t, n.outer, jailBin, "check", "--clean"), "lease")
	r = n.outerSess(t, dir, "exec", "net", "--", "/probe/probe", "net", "tcp", hostA, "8080")
	assert.Contains(t, r.stdout, "ok hello")

	// The list changes while the session runs: B now, A no more.
	r = n.outerSess(t, dir, "update", "net", "--allow", hostB+":8080")
	require.Equal(t, 0, r.code, r.stderr)
	r = n.outerSess(t, dir, "exec", "net", "--", "sh", "-c",
		"/probe/probe net tcp "+hostB+" 8080; /probe/probe net tcp "+hostA+" 8080; exit 0")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout+r.stderr)
	assert.Contains(t, lines[0], "ok hello from "+hostB, "newly allowed")
	refusedFast(t, "A after the update", lines[1])
	r = n.outerSess(t, dir, "inspect", "--json", "net")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &info), r.stderr)
	assert.Equal(t, []jail.AllowInfo{{Dest: hostB + ":8080", Resolved: []string{hostB + ":8080"}}}, info.Isolation.Network.Allow)
	for _, bad := range [][]string{{"--allow", "new.example"}, {"--allow", "10.0.0.1:0"}, {}} {
		r = n.outerSess(t, dir, "update", append([]string{"net"}, bad...)...)
		assert.Equal(t, 125, r.code, "%v: %s", bad, r.stderr)
	}

	r = n.outerSess(t, dir, "rm", "net")
	require.Equal(t, 0, r.code, r.stderr)
	n.requireNoLeftovers(t)

	// A session whose making fails (its root cannot be made: a tmpfs over
	// a file; the child dies while the network is being built) leaves
	// nothing of its network.
	r = n.outerSess(t, dir, "create", "--id", "broken", "--tmpfs", "/etc/hostname", "--net", "egress", "--allow", hostA+":8080")
	require.Equal(t, 125, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "mount plan (tmpfs on /etc/hostname)", "the child's error, not the network's that followed it")
	n.requireNoLeftovers(t)

	// A session that ends by its TTL: whoever looks next removes its
	// network.
	r = n.outerSess(t, dir, "create", "--id", "short", "--ttl", "1s", "--net", "egress", "--allow", hostA+":8080")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r = n.outerSess(t, dir, "list")
		return r.code == 0 && !strings.Contains(r.stdout, "short")
	}, 15*time.Second, 200*time.Millisecond, "a session past its TTL is listed: %s %s", r.stdout, r.stderr)
	n.requireNoLeftovers(t)
}

// TestNetworkEgressUnroutable: an allow-list entry this host has no way
// to (here: no route at all, in a network namespace of the test's own)
// is something the host cannot enforce, refused as such (exit 125, and
// the server's 422 UNENFORCEABLE: a FeatureError), not a failed setup.
func TestNetworkEgressUnroutable(t *testing.T) {
	if unprivileged {
		t.Skip("an unprivileged caller's egress goes through pasta, which has no host route to check")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "unshare", "--net", jailBin, "run", "--net", "egress", "--allow", "192.0.2.1:80", "--", "/bin/true")
	var errb bytes.Buffer
	c.Stderr = &errb
	err := c.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, errb.String())
	assert.Equal(t, 125, ee.ExitCode())
	assert.Contains(t, errb.String(), "egress network: allow 192.0.2.1:80: this host has no route to 192.0.2.1")
}

// TestServeSessionAllowPatch: PATCH /v1/sessions/{id} with `allow`
// changes an egress session's allow-list live, through a real jail serve
// in the test's network: B reachable and A no more at once; a session
// without egress, a name it was not made with and a bad entry are
// refused, naming the entry.
func TestServeSessionAllowPatch(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	s := serveIn(t, []string{"nsenter", "--net=/run/netns/" + n.outer}, openDir(t))
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "net", "profile": "strict"}`)
	require.Equal(t, http.StatusCreated, code, "%s", b) // no egress: the profile's network
	code, b = s.do(t, "PATCH", "/v1/sessions/net", `{"allow": ["`+hostA+`:8080"]}`)
	assert.Equal(t, http.StatusBadRequest, code, "%s", b)
	assert.Equal(t, "allow", apiError(t, b).Field)
	code, _ = s.do(t, "DELETE", "/v1/sessions/net", "")
	require.Equal(t, http.StatusOK, code)

	spec := fmt.Sprintf(`{"seccomp": "strict", "network": {"mode": "egress", "allow": [%q]}, "mounts": [{"type": "bind", "source": %q, "target": "/probe"}]}`, hostA+":8080", binDir)
	code, b = s.do(t, "POST", "/v1/sessions", `{"id": "net", "spec": `+spec+`}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.do(t, "DELETE", "/v1/sessions/net", "")
	probe := func() []string {
		t.Helper()
		code, b := s.do(t, "POST", "/v1/sessions/net/exec", `{"shell": "/probe/probe net tcp `+hostA+` 8080; /probe/probe net tcp `+hostB+` 8080; exit 0"}`)
		require.Equal(t, http.StatusOK, code, "%s", b)
		var res jail.Result
		require.NoError(t, json.Unmarshal(b, &res))
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		require.Len(t, lines, 2, "%s", b)
		return lines
	}
	lines := probe()
	assert.Contains(t, lines[0], "ok hello from "+hostA)
	refusedFast(t, "B before the PATCH", lines[1])

	code, b = s.do(t, "PATCH", "/v1/sessions/net", `{"allow": ["`+hostB+`:8080"]}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var info jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, []jail.AllowInfo{{Dest: hostB + ":8080", Resolved: []string{hostB + ":8080"}}}, info.Isolation.Network.Allow, "the answer is the session after")
	lines = probe()
	refusedFast(t, "A after the PATCH", lines[0])
	assert.Contains(t, lines[1], "ok hello from "+hostB, "newly allowed")

	for body, field := range map[string]string{
		`{"allow": ["new.example"]}`:           "allow[0]",
		`{"allow": ["` + hostB + `:0"]}`:       "allow[0]",
		`{"allow": ["` + hostA + `", "bad/"]}`: "allow[1]",
	} {
		code, b = s.do(t, "PATCH", "/v1/sessions/net", body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", body, b)
		assert.Equal(t, field, apiError(t, b).Field, body)
	}
	lines = probe()
	assert.Contains(t, lines[1], "ok hello from "+hostB, "a refused PATCH changes nothing")
}

// TestServeAllowPatchReach: PATCH `allow` may no more open the server's
// own TCP port to a session than a create may
// (TestServeUnreachableFromJails). With jail serve also on a TCP port in
// the test's network namespace, an entry naming one of that namespace's
// addresses and the port, or a range of ports holding it, is refused,
// naming the entry, and the session's list stays as it was.
func TestServeAllowPatchReach(t *testing.T) {
	requireRoot(t)
	n := newTestNet(t)
	dir := openDir(t)
	tokens := filepath.Join(dir, "tokens.yaml")
	newToken(t, tokens, "ci", "run")
	port := strconv.Itoa(freePort(t))
	s := serveIn(t, []string{"nsenter", "--net=/run/netns/" + n.outer}, openDir(t),
		"--listen", "tcp://127.0.0.1:"+port, "--insecure-plaintext", "--tokens", tokens)
	code, b := s.do(t, "POST", "/v1/sessions", `{"id": "net", "spec": {"network": {"mode": "egress", "allow": ["`+hostA+`:8080"]}}}`)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	defer s.do(t, "DELETE", "/v1/sessions/net", "")
	for _, entry := range []string{outerA + ":" + port, outerA, "tcp/" + outerA + ":1-65535"} {
		code, b = s.do(t, "PATCH", "/v1/sessions/net", `{"allow": ["`+hostB+`:8080", "`+entry+`"]}`)
		assert.Equal(t, http.StatusForbidden, code, "%s: %s", entry, b)
		assert.Equal(t, "allow[1]", apiError(t, b).Field, entry)
		assert.Contains(t, apiError(t, b).Message, "no jail may reach the server", entry)
	}
	code, b = s.do(t, "GET", "/v1/sessions/net", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	var info jail.SessionInfo
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, []jail.AllowInfo{{Dest: hostA + ":8080", Resolved: []string{hostA + ":8080"}}}, info.Isolation.Network.Allow, "a refused PATCH changes nothing")
	// The same list without the server's port is taken.
	code, b = s.do(t, "PATCH", "/v1/sessions/net", `{"allow": ["`+hostB+`:8080", "`+outerA+`:1"]}`)
	assert.Equal(t, http.StatusOK, code, "%s", b)
}
