package netns

import (
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestParseDest(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Dest
	}{
		{"10.0.0.1", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("10.0.0.1/32")}},
		{"10.0.0.1:8080", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("10.0.0.1/32"), PortFrom: 8080, PortTo: 8080}},
		{"udp/10.0.0.1:53", Dest{Proto: UDP, Prefix: netip.MustParsePrefix("10.0.0.1/32"), PortFrom: 53, PortTo: 53}},
		{"tcp/192.168.0.0/16:1000-2000", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("192.168.0.0/16"), PortFrom: 1000, PortTo: 2000}},
		{"0.0.0.0/0", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("0.0.0.0/0")}},
		{"Example.COM.:443", Dest{Proto: TCP, Host: "example.com", PortFrom: 443, PortTo: 443}},
		{"[2001:db8::1]:443", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("2001:db8::1/128"), PortFrom: 443, PortTo: 443}},
		{"2001:db8::/32", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("2001:db8::/32")}},
		{"::ffff:10.0.0.1", Dest{Proto: TCP, Prefix: netip.MustParsePrefix("10.0.0.1/32")}},
	} {
		got, err := ParseDest(c.in)
		require.NoError(t, err, c.in)
		c.want.Raw = c.in
		assert.Equal(t, c.want, got, c.in)
		again, err := ParseDest(got.String())
		require.NoError(t, err, "%s rendered as %s", c.in, got)
		again.Raw = c.in
		assert.Equal(t, got, again, "%s rendered as %s", c.in, got)
	}
	for _, in := range []string{"", "udp/", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:80-70", "10.0.0.1:x",
		"10.0.0.1/33", "10.0.0.1/8", "[::1", "[::1]x", "fe80::1%eth0", "-bad.example", "a..b", "under_score.example",
		"10.0.0.1:", "host:1:2", "2130706433", "0x7f.1", "a.123"} {
		_, err := ParseDest(in)
		assert.Error(t, err, "%q", in)
	}
}

func mustDest(t *testing.T, s string) Dest {
	d, err := ParseDest(s)
	require.NoError(t, err)
	return d
}

func TestPlanAddresses(t *testing.T) {
	pool := netip.MustParsePrefix(DefaultPool)
	e, err := Plan(Config{Pool: pool, Mark: 1})
	require.NoError(t, err)
	assert.Equal(t, "10.213.0.0/30", e.Net.String())
	assert.Equal(t, "10.213.0.1", e.HostAddr.String())
	assert.Equal(t, "10.213.0.2", e.JailAddr.String())
	assert.Equal(t, "jail0", e.HostIf)
	e, err = Plan(Config{Pool: pool, Index: PoolSize(pool) - 1, Mark: 1})
	require.NoError(t, err)
	assert.Equal(t, "10.213.255.252/30", e.Net.String())
	assert.Equal(t, "jail16383", e.HostIf)
	assert.LessOrEqual(t, len(e.HostIf), 15, "IFNAMSIZ")
	_, err = Plan(Config{Pool: pool, Index: PoolSize(pool), Mark: 1})
	assert.Error(t, err)
	_, err = Plan(Config{Pool: netip.MustParsePrefix("10.0.0.0/31"), Mark: 1})
	assert.Error(t, err)
	_, err = Plan(Config{Pool: pool, Allow: []Dest{mustDest(t, "[2001:db8::1]:443")}, Mark: 1})
	assert.ErrorContains(t, err, "IPv6")
	_, err = Plan(Config{Pool: pool, Allow: []Dest{mustDest(t, "example.com")}, Mark: 1})
	assert.ErrorContains(t, err, "not resolved")
}

func TestRanges(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	assert.Equal(t, [][2]uint32{{0x0a000000, 0x0b0000ff}, {0xf0000000, 0xffffffff}},
		Ranges([]netip.Prefix{p("11.0.0.0/24"), p("10.1.0.0/16"), p("240.0.0.0/4"), p("10.0.0.0/8")}), "contained dropped, adjacent merged, sorted")
	assert.Equal(t, [][2]uint32{{0, 0xffffffff}}, Ranges([]netip.Prefix{p("0.0.0.0/0"), p("10.0.0.0/8")}))
}

func TestParsePool(t *testing.T) {
	p, err := ParsePool("10.50.0.0/20")
	require.NoError(t, err)
	assert.Equal(t, 1024, PoolSize(p))
	for _, bad := range []string{"", "10.50.0.1/20", "10.0.0.0/31", "2001:db8::/64", "10.0.0.0/7", "x", "1.1.1.0/24", "10.0.0.0/8x"} {
		_, err := ParsePool(bad)
		assert.Error(t, err, bad)
	}
}

// TestRuleset compares the rules of a jail allowed one internet port, a
// private address, a UDP port and the whole internet with
// testdata/ruleset.nft, and has the kernel's nftables check them.
func TestRuleset(t *testing.T) {
	var allow []Dest
	for _, s := range []string{"93.184.215.14:443", "10.1.2.3:8080", "udp/192.0.2.53:53", "0.0.0.0/0", "10.9.0.0/16:22-23"} {
		allow = append(allow, mustDest(t, s))
	}
	named := mustDest(t, "192.168.1.9:80") // as if resolved from a name: opens no private range
	named.FromName = "svc.example"
	allow = append(allow, named)
	e, err := Plan(Config{Pool: netip.MustParsePrefix(DefaultPool), Index: 7, Allow: allow,
		HostNets: []netip.Prefix{netip.MustParsePrefix("198.51.7.0/24"), netip.MustParsePrefix("10.213.0.0/30")}, Mark: 0x5eed, LogDenied: 64})
	require.NoError(t, err)
	got := e.Ruleset()
	golden := "testdata/ruleset.nft"
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)

	// The private entries come before the private ranges' rejection, the
	// internet after it: 0.0.0.0/0 must not open 10.0.0.0/8.
	i10, iReject, iAll := strings.Index(got, "10.1.2.3 tcp dport 8080 ct mark set 0x00005eed accept"), strings.Index(got, "ip daddr { 0.0.0.0/8, 10.0.0.0/8,"),
		strings.Index(got, "ip daddr 0.0.0.0/0 meta l4proto tcp ct mark set 0x00005eed accept")
	assert.True(t, i10 > 0 && iReject > i10 && iAll > iReject, "order: explicit private, private rejected, the rest")
	// Another jail is rejected before any entry.
	assert.Less(t, strings.Index(got, "ip daddr 10.213.0.0/16"), i10)
	// The host's network is refused like a private one; a resolved
	// address comes after the refusals, and never opens this host.
	assert.Contains(t, got, "192.168.0.0/16, 198.18.0.0/15, 198.51.7.0/24, 198.51.100.0/24", "the host's network is in the refused set")
	assert.Greater(t, strings.Index(got, "ip daddr 192.168.1.9 tcp dport 80 ct mark set 0x00005eed accept"), iReject)
	assert.Equal(t, 1, strings.Count(got, "192.168.1.9"), "not in the input chain")
	// What the jail sends is never accepted by connection state, and
	// answers only to connections of this jail's mark.
	assert.NotContains(t, got, `iifname "jail7" ct state established,related`)
	assert.Contains(t, got, `oifname "jail7" ct state established,related ct mark 0x00005eed accept`)
	_, err = Plan(Config{Pool: netip.MustParsePrefix(DefaultPool), Index: 7})
	assert.Error(t, err, "mark 0")
	_, err = Plan(Config{Pool: netip.MustParsePrefix(DefaultPool), Mark: 1, LogDenied: MaxLogDenied + 1})
	assert.Error(t, err, "a log too large")
	// Every refusal is preceded by a rule that records it.
	// (one for a TCP refusal; three, TCP, UDP and the rest, for one of any
	// protocol), and only TCP and UDP record a port.
	var logs int
	for _, l := range strings.Split(got, "\n") {
		switch {
		case strings.Contains(l, `comment "denied"`) && strings.Contains(l, "meta l4proto tcp"):
			logs++
		case strings.Contains(l, `comment "denied"`):
			logs += 3
		}
	}
	assert.Equal(t, logs, strings.Count(got, "add @jail7-denied"))
	assert.Equal(t, strings.Count(got, "meta l4proto != { tcp, udp }"), strings.Count(got, "meta l4proto . 0 }"))

	nft, err := exec.LookPath("nft")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI has no nft (apt-get install nftables) to check the ruleset with")
		}
		t.Skip("no nft to check the ruleset with")
	}
	cmd := exec.Command("unshare", "-rn", nft, "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(got)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "nft -c:\n%s", out)
}

// TestUserRuleset compares the rules of a user-mode egress jail with
// testdata/user.nft, and has the kernel's nftables check them.
func TestUserRuleset(t *testing.T) {
	var allow []Dest
	for _, s := range []string{"93.184.215.14:443", "10.1.2.3:8080", "udp/192.0.2.53:53", "0.0.0.0/0"} {
		allow = append(allow, mustDest(t, s))
	}
	allow = append(allow, mustDest(t, "10.213.0.0/16")) // another jail: never opened
	u, err := PlanUser(UserConfig{Allow: allow, HostNets: []netip.Prefix{netip.MustParsePrefix("198.51.7.9/24"), netip.MustParsePrefix("203.0.114.5/32")},
		Jails: []netip.Prefix{netip.MustParsePrefix(DefaultPool)}, LogDenied: 16})
	require.NoError(t, err)
	got := u.Ruleset()
	golden := "testdata/user.nft"
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)

	// The base chains drop what no rule takes; loopback is the jail's.
	assert.Contains(t, got, "oifname \"lo\" accept\n\t\tcounter comment \"out\"")
	// The private entry before the refused ranges (with the host's
	// network), the internet after them.
	i10, iReject, iAll := strings.Index(got, "ip daddr 10.1.2.3 tcp dport 8080 accept"), strings.Index(got, "ip daddr { 0.0.0.0/8, 10.0.0.0/8,"),
		strings.Index(got, "ip daddr 0.0.0.0/0 meta l4proto tcp accept")
	assert.True(t, i10 > 0 && iReject > i10 && iAll > iReject, "order: explicit private, private rejected, the rest")
	assert.Contains(t, got, "198.51.7.0/24", "the host's network is refused")
	assert.Contains(t, got, "203.0.114.5", "the host's own address, wherever it is, is refused")
	// Other jails are refused before any entry, even one naming them.
	assert.Less(t, strings.Index(got, "ip daddr { 10.213.0.0/16 } meta l4proto tcp counter reject"), i10)
	assert.Equal(t, 3, strings.Count(got, "policy drop;"), "out, in and forward")
	// What the jail sends is judged by the list alone; what comes in only
	// as an answer.
	out, in, _ := strings.Cut(got, "chain in {")
	assert.NotContains(t, out, "ct state")
	assert.Contains(t, in, "ct state established,related accept\n\t\tdrop\n")
	assert.Equal(t, strings.Count(got, "meta l4proto != { tcp, udp }"), strings.Count(got, "meta l4proto . 0 }"))

	_, err = PlanUser(UserConfig{Allow: []Dest{mustDest(t, "[2001:db8::1]:443")}})
	assert.ErrorContains(t, err, "IPv6")
	_, err = PlanUser(UserConfig{LogDenied: -1})
	assert.Error(t, err)

	nft, err := exec.LookPath("nft")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI has no nft (apt-get install nftables) to check the ruleset with")
		}
		t.Skip("no nft to check the ruleset with")
	}
	cmd := exec.Command("unshare", "-rn", nft, "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(got)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "nft -c:\n%s", b)
}
