package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LeaseDir holds one lock file per lease index in use: "lease-N", locked
// (flock) by the jail process that holds it for as long as it runs.
const LeaseDir = "/run/jail/net"

// Lease is a lease index held by this process.
type Lease struct {
	Index int
	f     *os.File
	path  string
}

// Acquire takes the lowest free lease index below size. An index whose
// file is left by a process that died is taken over, and what that
// process left (its veth host end) is removed first.
func Acquire(size int) (*Lease, error) {
	if err := os.MkdirAll(LeaseDir, 0o700); err != nil {
		return nil, err
	}
	for i := 0; i < size; i++ {
		l, _, err := tryLease(i)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		// The names are ours while we hold the lease: whatever carries
		// them is a dead holder's or was never cleaned up.
		if err := removeLeftovers(i); err != nil {
			l.keep()
			return nil, fmt.Errorf("lease %d: %w", i, err)
		}
		err = l.f.Truncate(0)
		if err == nil {
			_, err = l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			l.Release()
			return nil, fmt.Errorf("lease %d: %w", i, err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("address pool exhausted: all %d leases are in use (a larger network.pool gives more)", size)
}

// tryLease locks lease file i; nil when another process holds it.
func tryLease(i int) (*Lease, bool, error) {
	path := filepath.Join(LeaseDir, "lease-"+strconv.Itoa(i))
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, false, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if err == unix.EWOULDBLOCK {
				return nil, false, nil
			}
			return nil, false, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		// The holder before may have removed the file between our open
		// and our lock: the lock is ours only if the file is still there.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Lstat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return &Lease{Index: i, f: f, path: path}, a.Size > 0, nil
		}
		f.Close()
	}
}

// Release gives the index back.
func (l *Lease) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path) // while still locked: the next holder makes a new one
	l.f.Close()
	l.f = nil
}

// keep lets the index go but leaves its file, with this process's pid, as
// a dead holder's: what could not be removed is tried again by the next
// holder or Prune.
func (l *Lease) keep() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Close()
	l.f = nil
}

// leaseAlias marks the veths jail makes (ip link's "alias"): only a veth
// with it is ever removed by name.
const leaseAlias = "jail egress lease "

// removeLeftovers removes what the holder of lease i left when it died
// without removing it (SIGKILL): its table, and its veth host end if the
// jail's namespace still holds it. Only a veth of that name is removed.
// (NFT_TABLE_F_OWNER would let the kernel remove the table with its
// socket, but google/nftables v0.3.0 sends no table flags.)
func removeLeftovers(i int) error {
	name := HostIfPrefix + strconv.Itoa(i)
	if link, err := netlink.LinkByName(name); err == nil {
		if link.Type() != "veth" || !strings.HasPrefix(link.Attrs().Alias, leaseAlias) {
			return fmt.Errorf("interface %s exists and is not one of jail's: rename it, or choose another network.pool", name)
		}
		if err := netlink.LinkDel(link); err != nil {
			return fmt.Errorf("left-over veth %s: %w", name, err)
		}
	}
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("left-over table inet %s: %w", name, err)
	}
	return nil
}

// Prune removes what egress jails that died without cleaning up left
// (their leases, veth host ends and tables), and returns one line per
// lease it took back. A lease whose holder is alive is left alone.
func Prune() ([]string, error) {
	entries, err := os.ReadDir(LeaseDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "lease-")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 0 {
			continue
		}
		l, stale, err := tryLease(i)
		if err != nil {
			return removed, err
		}
		if l == nil {
			continue // its jail runs
		}
		if stale {
			if err := removeLeftovers(i); err != nil {
				l.keep()
				return removed, err
			}
			removed = append(removed, fmt.Sprintf("lease %d (veth %s%d, table inet %s%d)", i, HostIfPrefix, i, HostIfPrefix, i))
		}
		l.Release()
	}
	return removed, nil
}

// Link is an egress jail's network as built: the veth pair, the jail's
// addresses and route, and the host's table. Close removes them.
type Link struct {
	e     *Egress
	lease *Lease
	conn  *nftables.Conn
	table *nftables.Table
	veth  bool
}

// Setup builds e's network for the jail whose network namespace is open
// as jailNS: the veth pair (its jail end, eth0, made directly in the
// jail's namespace), the addresses, the jail's default route, forwarding
// on the host end, and the host's table. The lease is the Link's to
// release. On error, whatever Setup made is removed (the lease is not
// released: the caller's).
//
// Equivalent to: ip link add jailN type veth peer name eth0 netns JAIL;
// ip addr add HOST/30 dev jailN; ip link set jailN up; sysctl
// net.ipv4.conf.jailN.forwarding=1; in the jail: ip addr add JAIL/30 dev
// eth0; ip link set eth0 up; ip route add default via HOST; then nft -f of
// e.Ruleset().
func Setup(e *Egress, lease *Lease, jailNS int) (_ *Link, retErr error) {
	l := &Link{e: e, lease: lease}
	defer func() {
		if retErr != nil {
			l.remove()
		}
	}()
	if err := checkRoutes(e); err != nil {
		return nil, err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e.HostIf}, PeerName: JailIf, PeerNamespace: netlink.NsFd(jailNS)}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("veth %s: %w", e.HostIf, err)
	}
	l.veth = true
	host, err := netlink.LinkByName(e.HostIf)
	if err != nil {
		return nil, fmt.Errorf("veth %s: %w", e.HostIf, err)
	}
	if err := netlink.LinkSetAlias(host, leaseAlias+strconv.Itoa(e.Index)+" pid "+strconv.Itoa(os.Getpid())); err != nil {
		return nil, fmt.Errorf("veth %s alias: %w", e.HostIf, err)
	}
	// Connection tracking of an earlier jail of this address must not
	// carry over to this one (answers to its flows, its NAT bindings).
	if err := flushConntrack(e.JailAddr); err != nil {
		return nil, err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(e.HostAddr, e.Net.Bits())}); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", e.HostAddr, e.HostIf, err)
	}
	// Forwarding for what comes in on this jail's end only; Linux
	// forwards IPv4 by the input interface's setting. No IPv6 on the
	// host's end: nothing the jail sends (router advertisements, neighbour
	// discovery) configures the host, whatever the rules.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+e.HostIf+"/forwarding", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("forwarding on %s: %w", e.HostIf, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+e.HostIf+"/disable_ipv6", []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("disable IPv6 on %s: %w", e.HostIf, err)
	}
	if err := l.loadRules(); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, fmt.Errorf("veth %s up: %w", e.HostIf, err)
	}
	if err := configureJail(e, jailNS); err != nil {
		return nil, err
	}
	return l, nil
}

// configureJail sets the jail's end up through a netlink handle made in
// its namespace.
func configureJail(e *Egress, jailNS int) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(jailNS))
	if err != nil {
		return fmt.Errorf("netlink in the jail's namespace: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(JailIf)
	if err != nil {
		return fmt.Errorf("the jail's %s: %w", JailIf, err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipNet(e.JailAddr, e.Net.Bits())}); err != nil {
		return fmt.Errorf("the jail's address %s: %w", e.JailAddr, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("the jail's %s up: %w", JailIf, err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: e.HostAddr.AsSlice()}); err != nil {
		return fmt.Errorf("the jail's default route via %s: %w", e.HostAddr, err)
	}
	return nil
}

// flushConntrack removes the conntrack entries of flows to or from a.
// Equivalent to: conntrack -D -s A; conntrack -D -d A.
func flushConntrack(a netip.Addr) error {
	var src, dst netlink.ConntrackFilter
	if err := src.AddIP(netlink.ConntrackOrigSrcIP, a.AsSlice()); err != nil {
		return err
	}
	if err := dst.AddIP(netlink.ConntrackOrigDstIP, a.AsSlice()); err != nil {
		return err
	}
	if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, &src, &dst); err != nil {
		return fmt.Errorf("conntrack entries of %s: %w", a, err)
	}
	return nil
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

// checkRoutes refuses a jail whose /30 overlaps a route of the host's
// (another jail's, or a network of the host's own when the pool was
// chosen badly), and an allowed destination this host would not forward
// to: no route, or one through an interface whose forwarding is off.
// jail changes no machine-wide setting.
func checkRoutes(e *Egress) error {
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		p, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		if !ok {
			continue
		}
		dst := netip.PrefixFrom(p.Unmap(), ones)
		if !dst.Overlaps(e.Pool) {
			continue
		}
		link, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue // its interface is gone: another jail's, ended meanwhile
		}
		name := link.Attrs().Name
		if dst.Overlaps(e.Net) {
			return fmt.Errorf("the jail's network %s overlaps the host's route to %s (dev %s): choose another network.pool", e.Net, dst, name)
		}
		if !strings.HasPrefix(link.Attrs().Alias, leaseAlias) {
			return fmt.Errorf("address pool %s overlaps the host's route to %s (dev %s): choose another network.pool", e.Pool, dst, name)
		}
	}
	for _, d := range e.Allow {
		probe := d.Prefix.Addr()
		if !d.Prefix.IsSingleIP() {
			probe = probe.Next() // a host of the network: a lookup, nothing is sent
		}
		rs, err := netlink.RouteGet(probe.AsSlice())
		if err != nil || len(rs) == 0 {
			if !d.Prefix.IsSingleIP() {
				continue // a network with no route to this one of its hosts: nothing to judge
			}
			return fmt.Errorf("allow %s: this host has no route to %s", d.Raw, probe)
		}
		name, _ := linkName(rs[0].LinkIndex)
		if name == "lo" || rs[0].Type == unix.RTN_LOCAL {
			continue // an address of this host's: the input chain
		}
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/forwarding")
		if err != nil {
			return fmt.Errorf("allow %s: forwarding of %s: %w", d.Raw, name, err)
		}
		if strings.TrimSpace(string(b)) != "1" {
			return fmt.Errorf("allow %s: the way there is dev %s, which does not forward (net.ipv4.conf.%s.forwarding=0); jail changes no host-wide setting: enable it (sysctl -w net.ipv4.conf.%s.forwarding=1, or net.ipv4.ip_forward=1)", d.Raw, name, name, name)
		}
	}
	return nil
}

// HostNets returns the IPv4 networks this host is on: the destinations of
// its link-scope routes, but those of jail's own veths.
func HostNets() ([]netip.Prefix, error) {
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	var nets []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil || r.Scope != netlink.SCOPE_LINK {
			continue
		}
		if l, err := netlink.LinkByIndex(r.LinkIndex); err != nil || strings.HasPrefix(l.Attrs().Alias, leaseAlias) {
			continue
		}
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		if ok {
			nets = append(nets, netip.PrefixFrom(a.Unmap(), ones).Masked())
		}
	}
	return nets, nil
}

// linkName is the name of interface index; false when there is none.
func linkName(index int) (string, bool) {
	if l, err := netlink.LinkByIndex(index); err == nil {
		return l.Attrs().Name, true
	}
	return "#" + strconv.Itoa(index), false
}

// loadRules loads e's table in one transaction.
func (l *Link) loadRules() error {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	l.conn = conn
	// Exclusive: a table of that name left by anyone fails the run
	// rather than have this jail's rules appended to its.
	l.table = conn.CreateTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: l.e.HostIf})
	chains := map[Chain]*nftables.Chain{}
	policy := nftables.ChainPolicyAccept
	for _, c := range []struct {
		name Chain
		typ  nftables.ChainType
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
	}{{Forward, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter},
		{Input, nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter},
		{Postrouting, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource}} {
		chains[c.name] = conn.AddChain(&nftables.Chain{Name: string(c.name), Table: l.table, Type: c.typ, Hooknum: c.hook, Priority: c.prio, Policy: &policy})
	}
	for _, r := range l.e.Rules {
		nr := &nftables.Rule{Table: l.table, Chain: chains[r.Chain], Exprs: exprs(r)}
		if r.Name != "" {
			nr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Name)
		}
		conn.AddRule(nr)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables table inet %s: %w", l.e.HostIf, err)
	}
	return nil
}

// exprs translates a Rule into nftables expressions, as nft(8) would.
func exprs(r Rule) []expr.Any {
	var x []expr.Any
	cmp := func(op expr.CmpOp, data []byte) { x = append(x, &expr.Cmp{Op: op, Register: 1, Data: data}) }
	if r.IIF != "" {
		x = append(x, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1})
		cmp(expr.CmpOpEq, ifname(r.IIF))
	}
	if r.OIF != "" {
		x = append(x, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1})
		op := expr.CmpOpEq
		if r.NotOIF {
			op = expr.CmpOpNeq
		}
		cmp(op, ifname(r.OIF))
	}
	if r.Established || r.EstablishedOnly {
		state := uint32(expr.CtStateBitESTABLISHED)
		if r.Established {
			state |= expr.CtStateBitRELATED
		}
		x = append(x, &expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(state), Xor: make([]byte, 4)})
		cmp(expr.CmpOpNeq, make([]byte, 4))
	}
	if r.SAddr.IsValid() || r.NotSAddr.IsValid() || r.DAddr.IsValid() {
		x = append(x, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1})
		cmp(expr.CmpOpEq, []byte{unix.NFPROTO_IPV4})
	}
	if r.SAddr.IsValid() || r.NotSAddr.IsValid() {
		x = append(x, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4})
		if r.SAddr.IsValid() {
			cmp(expr.CmpOpEq, r.SAddr.AsSlice())
		} else {
			cmp(expr.CmpOpNeq, r.NotSAddr.AsSlice())
		}
	}
	if r.DAddr.IsValid() && r.DAddr.Bits() > 0 {
		x = append(x, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4})
		if r.DAddr.Bits() < 32 {
			x = append(x, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: net.CIDRMask(r.DAddr.Bits(), 32), Xor: make([]byte, 4)})
		}
		cmp(expr.CmpOpEq, r.DAddr.Addr().AsSlice())
	}
	if r.Proto != "" {
		proto := byte(unix.IPPROTO_TCP)
		if r.Proto == UDP {
			proto = unix.IPPROTO_UDP
		}
		x = append(x, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1})
		cmp(expr.CmpOpEq, []byte{proto})
		if r.PortFrom != 0 || r.PortTo != 0 {
			x = append(x, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if r.PortFrom == r.PortTo {
				cmp(expr.CmpOpEq, binaryutil.BigEndian.PutUint16(r.PortFrom))
			} else {
				x = append(x, &expr.Range{Op: expr.CmpOpEq, Register: 1,
					FromData: binaryutil.BigEndian.PutUint16(r.PortFrom), ToData: binaryutil.BigEndian.PutUint16(r.PortTo)})
			}
		}
	}
	if r.Counter {
		x = append(x, &expr.Counter{})
	}
	switch r.Verdict {
	case Accept:
		x = append(x, &expr.Verdict{Kind: expr.VerdictAccept})
	case Drop:
		x = append(x, &expr.Verdict{Kind: expr.VerdictDrop})
	case RejectTCP:
		x = append(x, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	case Reject:
		x = append(x, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})
	case Masquerade:
		x = append(x, &expr.Masq{})
	}
	return x
}

// ifname is an interface name as the kernel compares it: NUL-padded to
// IFNAMSIZ.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// Counters reads the host table's counters.
func (l *Link) Counters() (Counters, error) {
	var c Counters
	for _, chain := range []Chain{Forward, Input} {
		rules, err := l.conn.GetRules(l.table, &nftables.Chain{Name: string(chain), Table: l.table})
		if err != nil {
			return c, fmt.Errorf("nftables rules of %s: %w", chain, err)
		}
		for _, r := range rules {
			name, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			for _, e := range r.Exprs {
				n, ok := e.(*expr.Counter)
				if !ok {
					continue
				}
				switch name {
				case CountOut:
					c.BytesOut, c.PacketsOut = c.BytesOut+n.Bytes, c.PacketsOut+n.Packets
				case CountIn:
					c.BytesIn, c.PacketsIn = c.BytesIn+n.Bytes, c.PacketsIn+n.Packets
				case CountDenied:
					c.Denied += n.Packets
				}
			}
		}
	}
	return c, nil
}

// Close removes the veth pair (if the jail's namespace has not taken it
// already), the table and the jail address's conntrack entries, and
// releases the lease; if something could not be removed, the lease is
// left as a dead holder's, for the next holder or Prune to finish.
func (l *Link) Close() error {
	err := l.remove()
	if err == nil {
		err = flushConntrack(l.e.JailAddr)
	}
	if err != nil {
		l.lease.keep()
		return err
	}
	l.lease.Release()
	return nil
}

// remove takes the veth away first, then the rules: never is the veth up
// without them.
func (l *Link) remove() error {
	var errs []error
	if l.veth {
		if link, err := netlink.LinkByName(l.e.HostIf); err == nil && link.Type() == "veth" {
			if err := netlink.LinkDel(link); err != nil {
				errs = append(errs, fmt.Errorf("veth %s: %w", l.e.HostIf, err))
			}
		}
		l.veth = len(errs) > 0
	}
	if l.conn != nil && len(errs) == 0 {
		l.conn.DelTable(l.table)
		if err := l.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("nftables table %s: %w", l.e.HostIf, err))
		}
		_ = l.conn.CloseLasting()
		l.conn = nil
	}
	return errors.Join(errs...)
}
