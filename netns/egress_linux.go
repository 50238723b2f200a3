package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/procfs"
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

// Acquire takes a free lease index below size, looking from a random one:
// the index a jail just gave back may still have its veth, which the
// kernel removes with that jail's namespace shortly after, and taking it
// over would mean deleting it and waiting for that (about 20 ms). An index
// whose file is left by a process that died is taken over, and what that
// process left is removed first.
func Acquire(size int) (*Lease, error) {
	if err := os.MkdirAll(LeaseDir, 0o700); err != nil {
		return nil, err
	}
	start := rand.IntN(size)
	for k := 0; k < size; k++ {
		i := (start + k) % size
		l, stale, err := tryLease(i, nil)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		// The names are ours while we hold the lease: whatever carries
		// them is a dead holder's or was never cleaned up.
		if err := removeLeftovers(i, stale); err != nil {
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

// tryLease locks lease file i; nil when another process holds it, or a
// session's PID 1 that may still run (see sessionAlive; gone, if not nil,
// is one whose end the caller has seen).
func tryLease(i int, gone *sessionOwner) (*Lease, bool, error) {
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
			if sessionAlive(f, gone) {
				f.Close() // a session's, whose PID 1 holds it without a lock
				return nil, false, nil
			}
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

// Hand gives the lease to a long-lived process that does not hold its
// lock, a session's PID 1: its file names the process (pid and start
// time, and the PID namespace the pid is ours in), and the lease is in use
// for as long as that process lives. The caller keeps nothing.
func (l *Lease) Hand(pid int, start uint64) error {
	if l == nil || l.f == nil {
		return errors.New("lease: not held")
	}
	pidns, err := procfs.SelfPIDNS()
	if err != nil {
		return err
	}
	err = l.f.Truncate(0)
	if err == nil {
		_, err = l.f.WriteAt([]byte(fmt.Sprintf("%d %d session %d\n", pid, start, pidns)), 0)
	}
	if err == nil {
		err = l.f.Sync()
	}
	l.f.Close()
	l.f = nil
	return err
}

// sessionAlive reports whether lease file f names a session's PID 1 that
// still runs, or may: one whose pid is of another PID namespace than ours
// (unshare -p, a container sharing /run/jail) is never judged gone here,
// but for gone, a PID 1 whose end the caller has seen (through its
// control socket: ReleaseSession) and which still runs only if a process
// of ours has its pid and start time.
func sessionAlive(f *os.File, gone *sessionOwner) bool {
	b := make([]byte, 96)
	n, _ := f.ReadAt(b, 0)
	pid, start, ok := parseSessionOwner(string(b[:n]))
	if !ok {
		return false
	}
	if ns := sessionPIDNS(string(b[:n])); ns != 0 && (gone == nil || gone.pid != pid || gone.start != start) {
		if self, err := procfs.SelfPIDNS(); err != nil || self != ns {
			return true
		}
	}
	return processStart(pid) == start
}

// parseSessionOwner reads a lease file Hand wrote: "PID START session
// [PIDNS]" (without PIDNS from before it was recorded).
func parseSessionOwner(s string) (int, uint64, bool) {
	f := strings.Fields(s)
	if (len(f) != 3 && len(f) != 4) || f[2] != "session" {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	return pid, start, err1 == nil && err2 == nil && pid > 0
}

// sessionOwner is a session's PID 1 as a lease file names it.
type sessionOwner struct {
	pid   int
	start uint64
}

// sessionPIDNS is the PID namespace of a lease file's session owner, 0
// when it does not say.
func sessionPIDNS(s string) uint64 {
	f := strings.Fields(s)
	if len(f) != 4 {
		return 0
	}
	ns, _ := strconv.ParseUint(f[3], 10, 64)
	return ns
}

// processStart is the start time (field 22 of /proc/PID/stat) of a live
// process, 0 when there is none.
func processStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// ReleaseSession removes what a session's egress network left once its
// PID 1 (pid, start) is gone: its chains, map elements and set of refused
// destinations, its veth if the kernel has not yet, and its lease — only
// if the lease still names that process (another jail may have taken it
// over after it died).
func ReleaseSession(index, pid int, start uint64) error {
	l, _, err := tryLease(index, &sessionOwner{pid, start})
	if err != nil {
		return err
	}
	if l == nil { // in use: by the session still, or by another jail
		if processStart(pid) == start {
			return fmt.Errorf("the session's PID 1 (%d) still runs: its network stays", pid)
		}
		return nil
	}
	b := make([]byte, 64)
	n, _ := l.f.ReadAt(b, 0)
	if p, st, ok := parseSessionOwner(string(b[:n])); !ok || p != pid || st != start {
		if n == 0 {
			l.Release() // made just now by tryLease: no one's
		} else {
			l.keep() // not ours any more: another's, or a dead holder's for Prune
		}
		return nil
	}
	if err := removeLeftovers(index, true); err != nil {
		l.keep()
		return err
	}
	l.Release()
	return nil
}

// Abandon removes the network of e that Detach handed to a session's PID
// 1 whose creation failed (PID 1 is being killed, and no command has run
// in it): its veth, chains and lease file.
func Abandon(e *Egress) error {
	if err := removeLeftovers(e.Index, true); err != nil {
		return err
	}
	return os.Remove(filepath.Join(LeaseDir, "lease-"+strconv.Itoa(e.Index)))
}

// Detach leaves the network in place for a session's PID 1 (pid, start),
// handing it the lease: ReleaseSession removes it once that process is
// gone. It returns the plan, whose Index and Mark Replace needs.
func (l *Link) Detach(pid int, start uint64) (*Egress, error) {
	l.veth, l.chains = false, false
	return l.e, l.lease.Hand(pid, start)
}

// Replace swaps the rules of a running jail for e's (the same lease and
// mark, another allow-list), in one transaction: no packet sees a mix,
// and a connection to a destination no longer listed is refused at its
// next packet (what the jail sends is judged by the list alone).
func Replace(e *Egress, pid int, start uint64) error {
	// Under the lease's lock, and only while it names the session's PID
	// 1, alive: never another jail's chains, should the session have
	// ended and its index been taken since.
	path := filepath.Join(LeaseDir, "lease-"+strconv.Itoa(e.Index))
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the session's lease %d: %w", e.Index, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("the session's lease %d is another jail's now", e.Index)
	}
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	if p, st, ok := parseSessionOwner(string(b[:n])); !ok || p != pid || st != start || processStart(pid) != start {
		return fmt.Errorf("the session's lease %d is not its own any more (its PID 1 is gone)", e.Index)
	}
	return withNft(func(conn *nftables.Conn) error {
		for _, d := range Dispatches {
			if _, err := conn.ListChain(table, e.ChainName(d.Chain)); err != nil {
				return fmt.Errorf("chain %s: %w", e.ChainName(d.Chain), err)
			}
		}
		l := &Link{e: e}
		return l.loadRulesOn(conn)
	})
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
func removeLeftovers(i int, stale bool) error {
	name := HostIfPrefix + strconv.Itoa(i)
	if link, err := netlink.LinkByName(name); err == nil {
		if link.Type() != "veth" || !strings.HasPrefix(link.Attrs().Alias, leaseAlias) {
			return fmt.Errorf("interface %s exists and is not one of jail's: rename it, or choose another network.pool", name)
		}
		if err := netlink.LinkDel(link); err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("left-over veth %s: %w", name, err)
		}
	}
	if !stale {
		return nil // a holder that ended well took its chains away
	}
	return withNft(func(conn *nftables.Conn) error {
		e := &Egress{HostIf: name}
		if _, err := conn.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
			return nil // no table: nothing of it left
		}
		err := removeRules(conn, e)
		conn.DelSet(&nftables.Set{Table: table, Name: e.DeniedSet()}) // if it recorded refusals
		_ = conn.Flush()
		if err == nil || !errors.Is(err, unix.ENOENT) {
			return err
		}
		// Some of them are gone: remove the rest one at a time.
		for _, d := range Dispatches {
			_ = conn.SetDeleteElements(dispatchMap(d), []nftables.SetElement{{Key: ifname(name)}})
			_ = conn.Flush()
		}
		for _, d := range Dispatches {
			conn.DelChain(&nftables.Chain{Name: e.ChainName(d.Chain), Table: table})
			if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("left-over chain %s: %w", e.ChainName(d.Chain), err)
			}
		}
		conn.DelSet(&nftables.Set{Table: table, Name: e.DeniedSet()}) // once no chain refers to it
		if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("left-over set %s: %w", e.DeniedSet(), err)
		}
		return nil
	})
}

// Prune removes what egress jails that died without cleaning up left
// (their leases, veth host ends, chains and map elements), and returns one
// line per lease it took back. A lease whose holder is alive is left
// alone, and so is the shared table.
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
		l, stale, err := tryLease(i, nil)
		if err != nil {
			return removed, err
		}
		if l == nil {
			continue // its jail runs
		}
		if stale {
			if err := removeLeftovers(i, true); err != nil {
				l.keep()
				return removed, err
			}
			removed = append(removed, fmt.Sprintf("lease %d (veth %s%d, chains %s%d-* of table inet %s)", i, HostIfPrefix, i, HostIfPrefix, i, TableName))
		}
		l.Release()
	}
	return removed, nil
}

// Link is an egress jail's network as built: the veth pair, the jail's
// addresses and route, and the host's table. Close removes them.
type Link struct {
	e      *Egress
	lease  *Lease
	chains bool // loadRules sent its chains (or tried)
	veth   bool
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
	// Route netlink only: without families the handle opens a socket of
	// every family the library knows, and a kernel without one (xfrm_user
	// is a module Debian's kernel does not load by itself) refuses the
	// whole handle with EPROTONOSUPPORT.
	h, err := netlink.NewHandleAt(netns.NsHandle(jailNS), unix.NETLINK_ROUTE)
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

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

// ErrUnroutable says an allow-list entry cannot be reached from this host
// as it is (no route, or a way out that does not forward): the host
// cannot enforce it, which is no failure of the setup.
var ErrUnroutable = errors.New("not reachable from this host")

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
		if dst.Bits() == 0 || !dst.Overlaps(e.Pool) {
			continue // a default route covers everything and claims nothing
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
			return fmt.Errorf("allow %s: this host has no route to %s: %w", d.Raw, probe, ErrUnroutable)
		}
		name := linkName(rs[0].LinkIndex)
		if name == "lo" || rs[0].Type == unix.RTN_LOCAL {
			continue // an address of this host's: the input chain
		}
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/forwarding")
		if err != nil {
			return fmt.Errorf("allow %s: forwarding of %s: %w", d.Raw, name, err)
		}
		if strings.TrimSpace(string(b)) != "1" {
			return fmt.Errorf("allow %s: the way there is dev %s, which does not forward (net.ipv4.conf.%s.forwarding=0); jail changes no host-wide setting: enable it (sysctl -w net.ipv4.conf.%s.forwarding=1, or net.ipv4.ip_forward=1): %w", d.Raw, name, name, name, ErrUnroutable)
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
		if ok && ones > 0 { // "default dev wg0" is not a network of the host's
			nets = append(nets, netip.PrefixFrom(a.Unmap(), ones).Masked())
		}
	}
	return nets, nil
}

// UserGuards returns what an unprivileged caller's egress jail is refused
// beyond the special ranges. pasta's connections come from this host, so
// host is every IPv4 network it is on (HostNets) and each of its own
// addresses as a /32, wherever it is (a /32 with no route of its own, an
// address on lo): refused unless an entry names one, as for a root
// caller's. jails is what no entry opens: the default pool and the
// networks of root callers' jails' veths. Both are this moment's: an
// address the host gains while the jail runs is not in them.
func UserGuards() (host, jails []netip.Prefix, err error) {
	if host, err = HostNets(); err != nil {
		return nil, nil, err
	}
	addrs, err := netlink.AddrList(nil, unix.AF_INET)
	if err != nil {
		return nil, nil, fmt.Errorf("addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			host = append(host, netip.PrefixFrom(ip.Unmap(), 32))
		}
	}
	jails = []netip.Prefix{netip.MustParsePrefix(DefaultPool)}
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		return nil, nil, fmt.Errorf("routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Scope != netlink.SCOPE_LINK {
			continue
		}
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && strings.HasPrefix(l.Attrs().Alias, leaseAlias) {
			if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				ones, _ := r.Dst.Mask.Size()
				jails = append(jails, netip.PrefixFrom(a.Unmap(), ones).Masked())
			}
		}
	}
	return host, jails, nil
}

// linkName is the name of interface index, or "#index".
func linkName(index int) string {
	if l, err := netlink.LinkByIndex(index); err == nil {
		return l.Attrs().Name
	}
	return "#" + strconv.Itoa(index)
}

// nft is this process's one nftables connection, shared by its jails
// and never closed: nf_tables makes the release of a netfilter netlink
// socket wait for the destruction work of the transactions before it (an
// RCU grace period, about 10 ms here), so a connection per jail would
// cost each jail that. A process that exits (the CLI) still pays it once,
// at its exit. nftMu serializes the batches built on it.
var (
	nftMu   sync.Mutex
	nftConn *nftables.Conn
)

// withNft runs f with the process's nftables connection, made on first
// use, and the lock that keeps one batch at a time on it.
func withNft(f func(*nftables.Conn) error) error {
	nftMu.Lock()
	defer nftMu.Unlock()
	if nftConn == nil {
		// Every message of a batch is acknowledged: room for a few
		// thousand acks, not the default's few hundred.
		c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(c *mdnetlink.Conn) error { return c.SetReadBuffer(4 << 20) }))
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		nftConn = c
	}
	err := f(nftConn)
	if err != nil {
		// What a failed batch left queued, or a sticky error of the
		// library's, must not reach the next batch: start afresh.
		_ = nftConn.CloseLasting()
		nftConn = nil
	}
	return err
}

// table is the shared table of egress jails.
var table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

// assertTable queues, at the head of a batch, the shared table as it must
// be: the table, its base chains, its maps, and the base chains' rules
// put back (flushed and added again: no hook is registered again, and a
// base chain someone flushed, or a table someone deleted, is whole again
// in the same transaction as the jail's own rules). After the dispatch,
// any packet of an interface named jail* that no jail's chain took is
// dropped: a veth whose chains are gone, or not yet there, carries
// nothing.
func assertTable(conn *nftables.Conn) error {
	conn.AddTable(table)
	policy := nftables.ChainPolicyAccept
	bases := map[string]*nftables.Chain{}
	for _, b := range []struct {
		name string
		typ  nftables.ChainType
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
	}{{"forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter},
		{"input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter},
		{"output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter},
		{"postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource}} {
		c := conn.AddChain(&nftables.Chain{Name: b.name, Table: table, Type: b.typ, Hooknum: b.hook, Priority: b.prio, Policy: &policy})
		conn.FlushChain(c)
		bases[b.name] = c
	}
	for _, d := range Dispatches {
		m := dispatchMap(d)
		if err := conn.AddSet(m, nil); err != nil {
			return err
		}
		key := expr.MetaKeyIIFNAME
		if d.ByOIF {
			key = expr.MetaKeyOIFNAME
		}
		conn.AddRule(&nftables.Rule{Table: table, Chain: bases[d.Base], Exprs: []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: m.Name, SetID: m.ID, DestRegister: 0, IsDestRegSet: true},
		}})
	}
	for _, c := range CatchAlls {
		key := expr.MetaKeyIIFNAME
		if c.ByOIF {
			key = expr.MetaKeyOIFNAME
		}
		conn.AddRule(&nftables.Rule{Table: table, Chain: bases[c.Base], Exprs: []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(HostIfPrefix)}, // a prefix: "jail*"
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	return nil
}

// baseIntact reports whether the shared table's base chains hold their
// rules as assertTable makes them: the dispatch, then the catch-alls, in
// order, and nothing else. A read, no transaction: putting them back on
// every run would cost each run a commit of four base chains (measured:
// about +6 ms a run), so that is done only when they are not whole.
func baseIntact(conn *nftables.Conn) bool {
	for _, base := range []string{"forward", "input", "output", "postrouting"} {
		rules, err := conn.GetRules(table, &nftables.Chain{Name: base, Table: table})
		if err != nil {
			return false
		}
		var want []string // what each rule must be: a lookup in a map, or a drop
		for _, d := range Dispatches {
			if d.Base == base {
				want = append(want, d.Map)
			}
		}
		for _, c := range CatchAlls {
			if c.Base == base {
				want = append(want, "drop")
			}
		}
		if len(rules) != len(want) {
			return false
		}
		for i, r := range rules {
			if !ruleIs(r, want[i]) {
				return false
			}
		}
	}
	return true
}

// ruleIs reports whether r is a dispatch through map what, or (what
// "drop") a catch-all of jail's interfaces.
func ruleIs(r *nftables.Rule, what string) bool {
	if len(r.Exprs) == 0 {
		return false
	}
	if what == "drop" {
		if len(r.Exprs) != 3 {
			return false
		}
		c, ok1 := r.Exprs[1].(*expr.Cmp)
		v, ok2 := r.Exprs[2].(*expr.Verdict)
		return ok1 && ok2 && c.Op == expr.CmpOpEq && string(c.Data) == HostIfPrefix && v.Kind == expr.VerdictDrop
	}
	if len(r.Exprs) != 2 {
		return false
	}
	lk, ok := r.Exprs[1].(*expr.Lookup)
	return ok && lk.SetName == what && lk.IsDestRegSet && lk.DestRegister == 0 && !lk.Invert
}

// dispatchMap is the shared table's map of d.
func dispatchMap(d Dispatch) *nftables.Set {
	return &nftables.Set{Table: table, Name: d.Map, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// loadRules adds e's chains and rules to the shared table, and the map
// elements that send its veth's packets to them, in one transaction.
// Chains of its names left by anyone are flushed in the same transaction:
// this jail's rules are never appended to others'.
func (l *Link) loadRules() error {
	return withNft(func(conn *nftables.Conn) error { return l.loadRulesOn(conn) })
}

func (l *Link) loadRulesOn(conn *nftables.Conn) error {
	if !baseIntact(conn) {
		if err := assertTable(conn); err != nil {
			return err
		}
	}
	var denied *nftables.Set
	if l.e.LogDenied > 0 {
		denied = &nftables.Set{Table: table, Name: l.e.DeniedSet(), Dynamic: true, Concatenation: true, Size: uint32(l.e.LogDenied),
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
		// A set of that name left behind is kept, and emptied.
		if err := conn.AddSet(denied, nil); err != nil {
			return err
		}
		conn.FlushSet(denied)
	}
	chains := map[Chain]*nftables.Chain{}
	for _, d := range Dispatches {
		c := conn.AddChain(&nftables.Chain{Name: l.e.ChainName(d.Chain), Table: table})
		conn.FlushChain(c)
		chains[d.Chain] = c
	}
	for _, r := range l.e.Rules {
		var set *nftables.Set
		if len(r.DAddrs) > 0 {
			set = &nftables.Set{Table: table, Anonymous: true, Constant: true, Interval: true, KeyType: nftables.TypeIPAddr}
			if err := conn.AddSet(set, intervalElements(Ranges(r.DAddrs))); err != nil {
				return err
			}
		}
		nr := &nftables.Rule{Table: table, Chain: chains[r.Chain], Exprs: exprs(r, l.e.Mark, set, denied)}
		if r.Name != "" {
			nr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Name)
		}
		conn.AddRule(nr)
	}
	l.chains = true
	for _, d := range Dispatches {
		el := []nftables.SetElement{{Key: ifname(l.e.HostIf), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: l.e.ChainName(d.Chain)}}}
		if err := conn.SetAddElements(dispatchMap(d), el); err != nil {
			return err
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables chains of %s in table inet %s: %w", l.e.HostIf, TableName, err)
	}
	return nil
}

// removeRules removes the map elements and chains of the jail whose host
// end is hostIf, in one transaction (the elements first: they hold the
// chains).
func removeRules(conn *nftables.Conn, e *Egress) error {
	for _, d := range Dispatches {
		if err := conn.SetDeleteElements(dispatchMap(d), []nftables.SetElement{{Key: ifname(e.HostIf)}}); err != nil {
			return err
		}
	}
	for _, d := range Dispatches {
		conn.DelChain(&nftables.Chain{Name: e.ChainName(d.Chain), Table: table})
	}
	if e.LogDenied > 0 {
		conn.DelSet(&nftables.Set{Table: table, Name: e.DeniedSet()})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables chains of %s in table inet %s: %w", e.HostIf, TableName, err)
	}
	return nil
}

// intervalElements are the elements of an interval set of IPv4 ranges:
// each range's first address, and the address after its last flagged as
// an interval's end (none after 255.255.255.255).
func intervalElements(rs [][2]uint32) []nftables.SetElement {
	var els []nftables.SetElement
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: binaryutil.BigEndian.PutUint32(r[0])})
		if r[1] != ^uint32(0) {
			els = append(els, nftables.SetElement{Key: binaryutil.BigEndian.PutUint32(r[1] + 1), IntervalEnd: true})
		}
	}
	return els
}

// exprs translates a Rule into nftables expressions, as nft(8) would,
// with conntrack mark mark; set is the anonymous set made for DAddrs,
// denied the set of refused destinations.
func exprs(r Rule, mark uint32, set, denied *nftables.Set) []expr.Any {
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
	if r.SAddr.IsValid() || r.NotSAddr.IsValid() || r.DAddr.IsValid() || set != nil {
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
	if set != nil {
		x = append(x, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID})
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
	if r.Mark {
		x = append(x, &expr.Ct{Register: 1, Key: expr.CtKeyMARK})
		cmp(expr.CmpOpEq, binaryutil.NativeEndian.PutUint32(mark))
	}
	if r.OtherProto {
		x = append(x, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1})
		cmp(expr.CmpOpNeq, []byte{unix.IPPROTO_TCP})
		cmp(expr.CmpOpNeq, []byte{unix.IPPROTO_UDP})
	}
	if r.Log && denied != nil {
		// The key in the 32-bit registers 8, 9, 10, as nft concatenates;
		// the port only for TCP and UDP.
		port := expr.Any(&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
		if r.Proto == "" {
			port = &expr.Immediate{Register: 10, Data: make([]byte, 4)}
		}
		x = append(x,
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
			port,
			&expr.Dynset{SrcRegKey: 8, SetName: denied.Name, SetID: denied.ID, Operation: unix.NFT_DYNSET_OP_ADD})
	}
	if r.Counter {
		x = append(x, &expr.Counter{})
	}
	if r.SetMark {
		x = append(x, &expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
			&expr.Ct{Register: 1, SourceRegister: true, Key: expr.CtKeyMARK})
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
	set := ""
	if l.e.LogDenied > 0 {
		set = l.e.DeniedSet()
	}
	return readCounters(withNft, []string{l.e.ChainName(FwdFrom), l.e.ChainName(FwdTo), l.e.ChainName(Input)}, set)
}

// readCounters adds up the counters of the named chains of the table
// "inet jail" (by the rules' comments: CountOut, CountIn, CountDenied),
// and reads the set of refused destinations when set is not empty, each
// read through with (a connection of the host's, or of a jail's
// namespace).
func readCounters(with func(func(*nftables.Conn) error) error, chains []string, set string) (Counters, error) {
	var c Counters
	for _, chain := range chains {
		var rules []*nftables.Rule
		err := with(func(conn *nftables.Conn) (err error) {
			rules, err = conn.GetRules(table, &nftables.Chain{Name: chain, Table: table})
			return err
		})
		if err != nil {
			return c, fmt.Errorf("nftables rules of %s: %w", chain, err)
		}
		for _, r := range rules {
			name, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			for _, e := range r.Exprs {
				if n, ok := e.(*expr.Counter); ok {
					c.add(name, n)
				}
			}
		}
	}
	if set != "" {
		var els []nftables.SetElement
		err := with(func(conn *nftables.Conn) (err error) {
			els, err = conn.GetSetElements(&nftables.Set{Table: table, Name: set,
				KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)})
			return err
		})
		if err != nil {
			return c, fmt.Errorf("nftables set %s: %w", set, err)
		}
		c.DeniedTo = deniedOf(els)
	}
	return c, nil
}

// Close removes the veth pair (if the jail's namespace has not taken it
// already) and the table, and releases the lease; if something could not be removed, the lease is
// left as a dead holder's, for the next holder or Prune to finish.
func (l *Link) Close() error {
	if err := l.remove(); err != nil {
		l.lease.keep()
		return err
	}
	l.lease.Release()
	return nil
}

// CloseAfterExit is Close once nothing of the jail's workload is left
// (every process of its PID namespace but its PID 1, jail's own, which
// sends nothing, has been killed and reaped): the rules go and the veth is
// left to the kernel, which removes it with the namespace, off this
// caller's path (deleting it here waits for an RCU grace period, about
// 20 ms).
func (l *Link) CloseAfterExit() error {
	// Nothing is forwarded from the veth any more, whatever might still
	// hold its namespace; the catch-all rules drop the rest.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+l.e.HostIf+"/forwarding", []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("forwarding on %s: %w", l.e.HostIf, err)
	}
	l.veth = false
	return l.Close()
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
	if l.chains && len(errs) == 0 {
		if err := withNft(func(conn *nftables.Conn) error { return removeRules(conn, l.e) }); err != nil {
			errs = append(errs, err)
		}
		l.chains = false
	}
	return errors.Join(errs...)
}
