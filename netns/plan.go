package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/jailrt/jail/nsexec"
)

// DefaultPool is the range egress jails take their addresses from when
// the Spec names none: a /30 each (the host's end, the jail's), so 16,384
// jails at once.
const DefaultPool = "10.213.0.0/16"

// JailIf is the name of the jail's end of its veth pair, in its namespace.
const JailIf = "eth0"

// HostIfPrefix starts the name of the host's end of a jail's veth pair and
// of its nftables table; the lease index follows ("jail42").
const HostIfPrefix = "jail"

// JailSysctls are the settings of an egress jail's own network namespace
// (its child stage writes them before anything runs there). A TCP
// connection the jail closed goes on as an orphan socket, which holds the
// namespace, and with it the veth, until it ends; its last packets, sent
// once the run has removed the jail's rules, are dropped, so with the
// defaults it retransmits for up to about two minutes (tcp_orphan_retries
// 0 means 8 retries with backoff; tcp_fin_timeout 60 s in FIN_WAIT_2).
// Under load the integration tests saw a veth outlive its run by over
// 150 s that way. Both settings only bound sockets nothing holds any more:
// what the workload has open keeps the kernel's defaults.
var JailSysctls = []nsexec.Sysctl{
	{Key: "net/ipv4/tcp_orphan_retries", Value: "1"},
	{Key: "net/ipv4/tcp_fin_timeout", Value: "1"},
}

// Special ranges: an egress jail reaches none of them unless an allow
// entry lies inside one (names it explicitly): this host's own networks,
// other machines on private networks, link-local (cloud metadata at
// 169.254.169.254), loopback, documentation, multicast and reserved
// space. An entry like
// 0.0.0.0/0 opens the internet, not these.
var specialRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Egress is the plan of one egress jail's network: the lease's addresses,
// the interface names, the allow-list as resolved, and the host's rules.
type Egress struct {
	// Index is the lease's number in the pool.
	Index int
	// Pool is the range the lease is from.
	Pool netip.Prefix
	// Net is the jail's /30; HostAddr its host end, JailAddr the jail's.
	Net                netip.Prefix
	HostAddr, JailAddr netip.Addr
	// HostIf is the host end's name, and the nftables table's.
	HostIf string
	// Allow is the allow-list, every entry with its address(es).
	Allow []Dest
	// HostNets are the networks this host is on (its connected routes):
	// refused like the special ranges unless an entry lies inside one, so
	// 0.0.0.0/0 does not open the host's own LAN.
	HostNets []netip.Prefix
	// Mark is this jail's conntrack mark: set on every connection it
	// opens or the host opens to it, and required of every answer let in,
	// so that nothing of an earlier jail of the same address (its
	// connections' late answers) reaches this one. Nonzero; random.
	Mark uint32
	// LogDenied is the size of the set of refused destinations (address,
	// protocol, port) the rules record, 0 for none.
	LogDenied int
	// Rules are the host's rules, in chain order.
	Rules []Rule
}

// Chain is one of a jail's chains in the shared table "inet jail": the
// base chains there only send each packet to the chains of the jail whose
// veth it comes from or goes to, through verdict maps keyed by interface
// name, so a jail adds and removes chains and map elements and never a
// hook (registering or unregistering one waits for an RCU grace period,
// milliseconds on every run).
type Chain string

// A jail's chains (named HostIf-chain, "jail7-fwd-from").
const (
	FwdFrom Chain = "fwd-from" // forwarded from the jail
	FwdTo   Chain = "fwd-to"   // forwarded to the jail
	Input   Chain = "input"    // from the jail to this host
	Output  Chain = "output"   // from this host to the jail
	Post    Chain = "post"     // postrouting of what the jail sends: source NAT
)

// TableName is the shared table of egress jails (family inet).
const TableName = "jail"

// Dispatch is a base chain's rule of the shared table: packets whose
// input (or output, ByOIF) interface is a key of Map go to the chain the
// map names for it.
type Dispatch struct {
	Base, Hook string // the base chain and its nft(8) declaration
	Map        string
	ByOIF      bool
	Chain      Chain // the jail's chain its element jumps to
}

// Dispatches are the shared table's base rules, in order.
var Dispatches = []Dispatch{
	{"forward", "type filter hook forward priority filter; policy accept;", "fwd_from", false, FwdFrom},
	{"forward", "type filter hook forward priority filter; policy accept;", "fwd_to", true, FwdTo},
	{"input", "type filter hook input priority filter; policy accept;", "input_from", false, Input},
	{"output", "type filter hook output priority filter; policy accept;", "output_to", true, Output},
	{"postrouting", "type nat hook postrouting priority srcnat; policy accept;", "post_from", false, Post},
}

// CatchAll is a base chain's rule after the dispatch: it drops what an
// interface named jail* (ByOIF: to one) carries that no jail's chain took.
type CatchAll struct {
	Base  string
	ByOIF bool
}

// CatchAlls are the shared table's rules after the dispatch, in order.
var CatchAlls = []CatchAll{{"forward", false}, {"forward", true}, {"input", false}, {"output", true}}

// ChainName is the name of the jail's chain c.
func (e *Egress) ChainName(c Chain) string { return e.HostIf + "-" + string(c) }

// Verdict is what a rule does with a packet it matches.
type Verdict string

// Verdicts. Reject answers a TCP segment with a reset and anything else
// with ICMP administratively prohibited, so a program fails at once; "" is
// none (a counter that lets the packet go on).
const (
	Accept     Verdict = "accept"
	Drop       Verdict = "drop"
	Reject     Verdict = "reject"
	RejectTCP  Verdict = "reject with tcp reset"
	Masquerade Verdict = "masquerade"
	Continue   Verdict = ""
)

// Rule is one nftables rule of a jail's table. Every field set must match.
type Rule struct {
	Chain Chain
	// IIF and OIF match the input or output interface; NotOIF inverts OIF.
	IIF, OIF string
	NotOIF   bool
	// Established matches ct state established,related;
	// EstablishedOnly ct state established.
	Established, EstablishedOnly bool
	// NotSAddr matches IPv4 packets whose source is not this address;
	// SAddr those whose source is.
	NotSAddr, SAddr netip.Addr
	// DAddr matches IPv4 packets to this prefix; DAddrs to any of these
	// (an anonymous interval set: one rule, one lookup).
	DAddr  netip.Prefix
	DAddrs []netip.Prefix
	// Proto matches the transport protocol, "" any; TCPOnly is the same
	// as Proto TCP with any port, for the reset rule.
	Proto Proto
	// PortFrom and PortTo match the destination port range (with Proto).
	PortFrom, PortTo uint16
	// Mark matches connections whose conntrack mark is Egress.Mark;
	// SetMark sets it.
	Mark, SetMark bool
	// Log adds the packet's destination (address, protocol, port: 0
	// unless Proto is TCP or UDP) to the jail's set of refused
	// destinations.
	Log bool
	// OtherProto matches protocols other than TCP and UDP.
	OtherProto bool
	// Counter counts the packets and bytes the rule matches; Name says
	// what for (the apply side reads the counters by it).
	Counter bool
	Name    string
	Verdict Verdict
}

// Counters are what a jail sent and was sent through this host, from
// the host table's counters, and the packets it sent that were refused.
type Counters struct {
	BytesOut, PacketsOut uint64
	BytesIn, PacketsIn   uint64
	Denied               uint64
	// DeniedTo are refused destinations, when the plan records them.
	DeniedTo []Denied
}

// Denied is a refused destination.
type Denied struct {
	Dst   netip.Addr
	Proto uint8
	Port  uint16 // 0 unless Proto is TCP or UDP
}

// Counter names: what each counted rule stands for.
const (
	CountOut    = "out"    // packets the jail sent
	CountIn     = "in"     // packets sent to the jail
	CountDenied = "denied" // packets of the jail refused
)

// Config is what an egress jail's plan is made from.
type Config struct {
	// Pool is the address pool, Index the lease's number in it.
	Pool  netip.Prefix
	Index int
	// Allow is the allow-list, resolved: every Dest has its Prefix.
	Allow []Dest
	// HostNets are the networks this host is on (HostNets).
	HostNets []netip.Prefix
	// Mark is the jail's conntrack mark: nonzero, and random.
	Mark uint32
	// LogDenied is how many distinct refused destinations to record (0:
	// none; at most MaxLogDenied).
	LogDenied int
}

// MaxLogDenied bounds Config.LogDenied.
const MaxLogDenied = 1024

// Plan works out the network of an egress jail. It refuses IPv6 entries:
// the jail has no IPv6 route, and the host rejects every IPv6 packet it
// sends.
func Plan(c Config) (*Egress, error) {
	pool, index, allow, hostNets, mark := c.Pool, c.Index, c.Allow, c.HostNets, c.Mark
	if mark == 0 {
		return nil, errors.New("conntrack mark 0: want a jail's own")
	}
	if c.LogDenied < 0 || c.LogDenied > MaxLogDenied {
		return nil, fmt.Errorf("log of %d refused destinations: want 0 to %d", c.LogDenied, MaxLogDenied)
	}
	if !pool.Addr().Is4() || pool != pool.Masked() || pool.Bits() > 30 {
		return nil, fmt.Errorf("address pool %s: want an IPv4 network of /30 or larger", pool)
	}
	if index < 0 || index >= PoolSize(pool) {
		return nil, fmt.Errorf("lease %d: the pool %s has %d", index, pool, PoolSize(pool))
	}
	base := pool.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(index) * 4
	netAddr := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	e := &Egress{Index: index, Pool: pool, Net: netip.PrefixFrom(netAddr, 30), HostIf: HostIfPrefix + strconv.Itoa(index), Mark: mark, LogDenied: c.LogDenied}
	e.HostAddr = netAddr.Next()
	e.JailAddr = e.HostAddr.Next()
	for _, d := range allow {
		if !d.Prefix.IsValid() {
			return nil, fmt.Errorf("allow %s: not resolved", d.Raw)
		}
		if !d.Prefix.Addr().Is4() {
			return nil, fmt.Errorf("allow %s: IPv6 destinations are not supported yet (the jail has no IPv6 route; every IPv6 packet is rejected)", d.Raw)
		}
	}
	e.Allow = allow
	for _, n := range hostNets {
		if n.Addr().Is4() && !n.Overlaps(pool) {
			e.HostNets = append(e.HostNets, n.Masked())
		}
	}
	e.Rules = e.rules()
	return e, nil
}

// PoolSize is how many jails pool has room for.
func PoolSize(pool netip.Prefix) int {
	if pool.Bits() > 30 {
		return 0
	}
	return 1 << (30 - pool.Bits())
}

// explicit reports whether d names an address inside special range r (or
// r itself or a part of it): then it is allowed, ahead of r's rejection.
// An address a host name resolved to never is: a DNS answer must not open
// the metadata address or a private network.
func explicit(d Dest, r netip.Prefix) bool {
	return d.FromName == "" && r.Bits() <= d.Prefix.Bits() && r.Contains(d.Prefix.Addr())
}

// SpecialRange returns the special range a lies in, if any.
func SpecialRange(a netip.Addr) (netip.Prefix, bool) {
	for _, r := range specialRanges {
		if r.Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// SpecialRangesIn lists, as CIDRs, the special ranges strictly inside p
// that an entry of p does not open (see explicit): what a policy that
// allows p must except. None when p lies inside a special range (it names
// that part of it explicitly).
func SpecialRangesIn(p netip.Prefix) []string {
	var out []string
	for _, r := range specialRanges {
		if p.Bits() < r.Bits() && p.Contains(r.Addr()) {
			out = append(out, r.String())
		}
	}
	return out
}

func (e *Egress) rules() []Rule {
	j := e.HostIf
	allow := func(c Chain, d Dest) Rule {
		r := Rule{Chain: c, IIF: j, DAddr: d.Prefix, Proto: d.Proto, PortFrom: d.PortFrom, PortTo: d.PortTo, SetMark: true, Verdict: Accept}
		return r
	}
	rs := []Rule{
		// What passes through, counted before anything decides.
		{Chain: FwdFrom, IIF: j, Counter: true, Name: CountOut},
		{Chain: FwdTo, OIF: j, Counter: true, Name: CountIn},
		// Answers to the jail's own connections (this jail's: the mark);
		// nothing new comes in.
		{Chain: FwdTo, OIF: j, Established: true, Mark: true, Verdict: Accept},
		{Chain: FwdTo, OIF: j, Verdict: Drop},
		// A forged source address goes no further.
		{Chain: FwdFrom, IIF: j, NotSAddr: e.JailAddr, Counter: true, Name: CountDenied, Verdict: Drop},
		// Other jails, whatever the list says.
		{Chain: FwdFrom, IIF: j, DAddr: e.Pool, Counter: true, Name: CountDenied, Verdict: Reject},
	}
	// What the jail sends: the list (allowRules).
	rs = append(rs, allowRules(FwdFrom, j, e.Allow, e.HostNets, true)...)
	rs = append(rs,
		// This host: its own addresses (the veth's end, its loopback
		// services bound to any address) only where an entry names one
		// address; never another jail's end.
		Rule{Chain: Input, IIF: j, Counter: true, Name: CountOut},
		Rule{Chain: Input, IIF: j, NotSAddr: e.JailAddr, Counter: true, Name: CountDenied, Verdict: Drop},
		// Answers to what this host opened towards this jail.
		Rule{Chain: Input, IIF: j, EstablishedOnly: true, Mark: true, Verdict: Accept},
		Rule{Chain: Input, IIF: j, DAddr: e.Pool, Counter: true, Name: CountDenied, Verdict: Reject},
	)
	for _, d := range e.Allow {
		if d.Prefix.IsSingleIP() && d.FromName == "" {
			rs = append(rs, allow(Input, d))
		}
	}
	rs = append(rs,
		Rule{Chain: Input, IIF: j, Proto: TCP, Counter: true, Name: CountDenied, Verdict: RejectTCP},
		Rule{Chain: Input, IIF: j, Counter: true, Name: CountDenied, Verdict: Reject},
		Rule{Chain: Output, OIF: j, SetMark: true, Verdict: Accept},
		Rule{Chain: Post, SAddr: e.JailAddr, OIF: j, NotOIF: true, Verdict: Masquerade},
	)
	return withLog(rs, e.LogDenied)
}

// withLog returns rs with, when logDenied is not 0, rules of their own
// before each refusal that record the destination: loading a port can
// fail (no transport header), which ends that rule only, never the
// refusal after it. A port only for TCP and UDP; 0 for the rest.
func withLog(rs []Rule, logDenied int) []Rule {
	if logDenied == 0 {
		return rs
	}
	logged := make([]Rule, 0, 3*len(rs))
	for _, r := range rs {
		if r.Name == CountDenied {
			l := r
			l.Counter, l.Name, l.Verdict, l.Log = false, "", Continue, true
			if r.Proto != "" {
				logged = append(logged, l)
			} else {
				tcp, udp, other := l, l, l
				tcp.Proto, udp.Proto, other.OtherProto = TCP, UDP, true
				logged = append(logged, tcp, udp, other)
			}
		}
		logged = append(logged, r)
	}
	return logged
}

// allowRules are the rules that judge what a jail sends, in chain c, for
// packets of interface iif ("" any): the allow-list alone, never
// connection state, so that no state the jail did not make itself (a
// conntrack entry of an earlier jail of its address, an expectation of a
// conntrack helper) opens anything. Entries inside a special range or a
// network of the host's come first, then those ranges are refused, then
// the rest of the entries, then everything else: 0.0.0.0/0 opens the
// internet, not the private networks.
func allowRules(c Chain, iif string, allow []Dest, hostNets []netip.Prefix, setMark bool) []Rule {
	accept := func(d Dest) Rule {
		return Rule{Chain: c, IIF: iif, DAddr: d.Prefix, Proto: d.Proto, PortFrom: d.PortFrom, PortTo: d.PortTo, SetMark: setMark, Verdict: Accept}
	}
	guarded := append(append([]netip.Prefix{}, specialRanges...), hostNets...)
	var rs []Rule
	for _, d := range allow {
		for _, r := range guarded {
			if explicit(d, r) {
				rs = append(rs, accept(d))
				break
			}
		}
	}
	set := mergePrefixes(guarded)
	rs = append(rs, Rule{Chain: c, IIF: iif, DAddrs: set, Proto: TCP, Counter: true, Name: CountDenied, Verdict: RejectTCP},
		Rule{Chain: c, IIF: iif, DAddrs: set, Counter: true, Name: CountDenied, Verdict: Reject})
	for _, d := range allow {
		special := false
		for _, r := range guarded {
			special = special || explicit(d, r)
		}
		if !special {
			rs = append(rs, accept(d))
		}
	}
	return append(rs,
		Rule{Chain: c, IIF: iif, Proto: TCP, Counter: true, Name: CountDenied, Verdict: RejectTCP},
		Rule{Chain: c, IIF: iif, Counter: true, Name: CountDenied, Verdict: Reject})
}

// DeniedSet is the name of the jail's set of refused destinations.
func (e *Egress) DeniedSet() string { return e.HostIf + "-denied" }

// Ruleset renders the jail's part of the shared table in nft(8) syntax,
// with the base chains and the maps' elements for this jail: near
// enough to what `nft list table inet jail` prints to load with `nft -f`
// (the tests check it does), for review and for the golden test.
func (e *Egress) Ruleset() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", TableName)
	if e.LogDenied > 0 {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype ipv4_addr . inet_proto . inet_service\n\t\tsize %d\n\t\tflags dynamic\n\t}\n", e.DeniedSet(), e.LogDenied)
	}
	for _, d := range Dispatches {
		fmt.Fprintf(&b, "\tchain %s {\n", e.ChainName(d.Chain))
		for _, r := range e.Rules {
			if r.Chain == d.Chain {
				fmt.Fprintf(&b, "\t\t%s\n", r.render(e.Mark, e.DeniedSet()))
			}
		}
		b.WriteString("\t}\n")
	}
	for _, d := range Dispatches {
		fmt.Fprintf(&b, "\tmap %s {\n\t\ttype ifname : verdict\n\t\telements = { %q : jump %s }\n\t}\n", d.Map, e.HostIf, e.ChainName(d.Chain))
	}
	for i, d := range Dispatches {
		if i == 0 || Dispatches[i-1].Base != d.Base {
			fmt.Fprintf(&b, "\tchain %s {\n\t\t%s\n", d.Base, d.Hook)
		}
		dir := "iifname"
		if d.ByOIF {
			dir = "oifname"
		}
		fmt.Fprintf(&b, "\t\t%s vmap @%s\n", dir, d.Map)
		if i == len(Dispatches)-1 || Dispatches[i+1].Base != d.Base {
			for _, c := range CatchAlls {
				if c.Base == d.Base {
					dir := "iifname"
					if c.ByOIF {
						dir = "oifname"
					}
					fmt.Fprintf(&b, "\t\t%s %q drop\n", dir, HostIfPrefix+"*")
				}
			}
			b.WriteString("\t}\n")
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// render renders r as an nft(8) rule, with conntrack mark mark and set of
// refused destinations setName.
func (r Rule) render(mark uint32, setName string) string {
	var w []string
	if r.IIF != "" {
		w = append(w, fmt.Sprintf("iifname %q", r.IIF))
	}
	if r.OIF != "" {
		op := ""
		if r.NotOIF {
			op = "!= "
		}
		w = append(w, fmt.Sprintf("oifname %s%q", op, r.OIF))
	}
	if r.Established {
		w = append(w, "ct state established,related")
	}
	if r.EstablishedOnly {
		w = append(w, "ct state established")
	}
	if r.Mark {
		w = append(w, fmt.Sprintf("ct mark 0x%08x", mark))
	}
	if r.SAddr.IsValid() {
		w = append(w, "ip saddr "+r.SAddr.String())
	}
	if r.NotSAddr.IsValid() {
		w = append(w, "ip saddr != "+r.NotSAddr.String())
	}
	if r.DAddr.IsValid() {
		w = append(w, "ip daddr "+prefixString(r.DAddr))
	}
	if len(r.DAddrs) > 0 {
		ps := make([]string, len(r.DAddrs))
		for i, p := range r.DAddrs {
			ps[i] = prefixString(p)
		}
		w = append(w, "ip daddr { "+strings.Join(ps, ", ")+" }")
	}
	switch {
	case r.Proto != "" && (r.PortFrom != 0 || r.PortTo != 0):
		ports := strconv.Itoa(int(r.PortFrom))
		if r.PortTo != r.PortFrom {
			ports += "-" + strconv.Itoa(int(r.PortTo))
		}
		w = append(w, string(r.Proto)+" dport "+ports)
	case r.Proto != "":
		w = append(w, "meta l4proto "+string(r.Proto))
	case r.OtherProto:
		w = append(w, "meta l4proto != { tcp, udp }")
	}
	if r.Counter {
		w = append(w, "counter")
	}
	if r.SetMark {
		w = append(w, fmt.Sprintf("ct mark set 0x%08x", mark))
	}
	if r.Log && r.Proto != "" {
		w = append(w, "meta nfproto ipv4 add @"+setName+" { ip daddr . meta l4proto . th dport }")
	} else if r.Log {
		w = append(w, "meta nfproto ipv4 add @"+setName+" { ip daddr . meta l4proto . 0 }")
	}
	if r.Verdict == Reject {
		w = append(w, "reject with icmpx admin-prohibited")
	} else if r.Verdict != Continue {
		w = append(w, string(r.Verdict))
	}
	if r.Name != "" {
		w = append(w, "comment "+strconv.Quote(r.Name))
	}
	return strings.Join(w, " ")
}

// mergePrefixes sorts IPv4 prefixes and drops those inside another.
func mergePrefixes(ps []netip.Prefix) []netip.Prefix {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Ranges returns IPv4 prefixes as inclusive address ranges, sorted, with
// overlapping and adjacent ones merged: the elements of an interval set.
func Ranges(ps []netip.Prefix) [][2]uint32 {
	var rs [][2]uint32
	for _, p := range mergePrefixes(ps) {
		a := p.Masked().Addr().As4()
		lo := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		hi := lo | (uint32(1)<<(32-p.Bits()) - 1)
		if p.Bits() == 0 {
			hi = ^uint32(0)
		}
		if n := len(rs); n > 0 && uint64(lo) <= uint64(rs[n-1][1])+1 {
			rs[n-1][1] = max(rs[n-1][1], hi)
			continue
		}
		rs = append(rs, [2]uint32{lo, hi})
	}
	return rs
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// privatePools are where a pool may lie: addresses no one on the
// internet has, so a pool never captures the host's own traffic.
var privatePools = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("100.64.0.0/10"),
}

// ParsePool parses an address pool: an IPv4 network of /8 to /30 inside
// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10.
func ParsePool(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want an IPv4 CIDR such as " + DefaultPool)
	}
	if !p.Addr().Is4() || p != p.Masked() || p.Bits() > 30 || p.Bits() < 8 {
		return netip.Prefix{}, fmt.Errorf("want an IPv4 network from /8 to /30 (its address with no host bits, e.g. %s)", DefaultPool)
	}
	for _, r := range privatePools {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("want a private network: inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10")
}
