package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/jailrt/jail/netns"
)

// Network modes (Network.Mode).
const (
	// NetworkNone is the jail's own network namespace with lo only: it
	// reaches nothing outside. The default.
	NetworkNone = "none"
	// NetworkHost shares the host's network namespace: the jail reaches
	// whatever the host reaches and listens where the host does. For
	// trusted code only; the report says so (Isolation.Network.Mode).
	NetworkHost = "host"
	// NetworkEgress is the jail's own namespace with a veth pair to the
	// host, through which it reaches the destinations of Network.Allow
	// and nothing else, enforced by nftables rules on the host's end
	// (out of the jail's reach). For an unprivileged caller, pasta's
	// user-mode network (package passt) with the rules in the jail's own
	// namespace, where the workload holds no capability to change them.
	NetworkEgress = "egress"
)

// Network is the jail's network.
type Network struct {
	// Mode is none, host or egress; empty means none, or host when
	// DisableNamespaces has "net" (its older spelling).
	Mode string `json:"mode,omitempty"`
	// Allow lists what an egress jail may reach, each
	// [tcp/|udp/]DEST[:PORT[-PORT]] with DEST an IPv4 address, a CIDR or a
	// host name (see netns.ParseDest): TCP by default, every port when
	// none is given. Host names are resolved once, on the host, before
	// the run, and pinned in the jail's /etc/hosts; the jail has no
	// resolver. Private, link-local (cloud metadata), loopback and other
	// special ranges, this host's own addresses and other jails are
	// refused unless an entry names them (a broader entry such as
	// 0.0.0.0/0 does not open them; this host's addresses only by a single
	// address). Everything else is refused at once: TCP with a reset,
	// the rest with ICMP administratively prohibited. IPv6 is closed.
	Allow []string `json:"allow,omitempty"`
	// Pool is the IPv4 range egress jails take their /30 from; empty
	// means netns.DefaultPool (10.213.0.0/16). It must be private and
	// must not overlap a network of the host's.
	Pool string `json:"pool,omitempty"`
	// LogDenied, for egress, records up to this many distinct refused
	// destinations (address, protocol, port) in the report
	// (NetworkStats.DeniedDestinations): what the code tried to reach and
	// was refused. 0: none; at most 1024.
	LogDenied int `json:"log_denied,omitempty"`
}

// NetworkInfo is the network a run had (Isolation.Network).
type NetworkInfo struct {
	// Mode is none, host or egress.
	Mode string `json:"mode"`
	// Allow is an egress jail's allow-list as resolved; empty otherwise.
	Allow []AllowInfo `json:"allow"`
	// Address is an egress jail's IPv4 address, empty otherwise (and for
	// stack pasta, whose jail has a copy of the host's).
	Address string `json:"address,omitempty"`
	// Stack is how an egress jail reaches out: "veth" (a root caller's:
	// a veth pair to the host, the rules on the host's end) or "pasta"
	// (an unprivileged caller's: pasta's user-mode network, the rules in
	// the jail's namespace). Empty for the other modes.
	Stack string `json:"stack,omitempty"`
}

// Egress network stacks (NetworkInfo.Stack).
const (
	NetworkStackVeth  = "veth"
	NetworkStackPasta = "pasta"
)

// AllowInfo is one allow entry and the addresses it opened.
type AllowInfo struct {
	// Dest is the entry as given.
	Dest string `json:"dest"`
	// Resolved is what the rules opened: the address or CIDR, or a host
	// name's addresses, each with the protocol and ports.
	Resolved []string `json:"resolved"`
}

// NetworkStats is what an egress jail sent and received through the host
// (Result.Network).
type NetworkStats struct {
	BytesOut   int64 `json:"bytes_out"`
	PacketsOut int64 `json:"packets_out"`
	BytesIn    int64 `json:"bytes_in"`
	PacketsIn  int64 `json:"packets_in"`
	// Denied counts the packets the jail sent that the rules refused.
	Denied int64 `json:"denied"`
	// DeniedDestinations are distinct refused destinations, up to
	// Network.LogDenied of them, in no particular order; empty without it.
	DeniedDestinations []DeniedDestination `json:"denied_destinations"`
}

// DeniedDestination is a destination an egress jail was refused.
type DeniedDestination struct {
	// Dst is the IPv4 address.
	Dst string `json:"dst"`
	// Proto is "tcp", "udp", "icmp" or the protocol's number.
	Proto string `json:"proto"`
	// Port is the destination port, 0 for a protocol without ports.
	Port int `json:"port"`
}

// netMode is the Spec's effective network mode.
func (s *Spec) netMode() string {
	if s.Network.Mode != "" {
		return s.Network.Mode
	}
	for _, n := range s.DisableNamespaces {
		if n == "net" {
			return NetworkHost
		}
	}
	return NetworkNone
}

// validateNetwork checks Network and returns the allow-list as parsed.
func (s *Spec) validateNetwork() ([]netns.Dest, error) {
	n := &s.Network
	switch n.Mode {
	case "", NetworkNone, NetworkHost, NetworkEgress:
	default:
		return nil, badField("network.mode", n.Mode, "want none, host or egress")
	}
	netDisabled := slices.Contains(s.DisableNamespaces, "net")
	if netDisabled && (n.Mode == NetworkNone || n.Mode == NetworkEgress) {
		return nil, badField("network.mode", n.Mode, "needs a network namespace, and disable_namespaces has net (--no-netns is network mode host)")
	}
	if n.Mode != NetworkEgress {
		if len(n.Allow) > 0 {
			return nil, badField("network.allow", n.Allow[0], "needs network mode egress")
		}
		if n.Pool != "" {
			return nil, badField("network.pool", n.Pool, "needs network mode egress")
		}
		if n.LogDenied != 0 {
			return nil, badField("network.log_denied", strconv.Itoa(n.LogDenied), "needs network mode egress")
		}
		return nil, nil
	}
	if len(n.Allow) == 0 {
		return nil, badField("network.allow", "", "egress needs at least one destination (or use network mode none)")
	}
	if slices.Contains(s.DisableNamespaces, "pid") {
		// Nothing of the jail may outlive its PID 1 on the veth when
		// the rules go.
		return nil, badField("network.mode", n.Mode, "needs a PID namespace, and disable_namespaces has pid")
	}
	if n.LogDenied < 0 || n.LogDenied > netns.MaxLogDenied {
		return nil, badField("network.log_denied", strconv.Itoa(n.LogDenied), "want 0 (none) to %d", netns.MaxLogDenied)
	}
	if n.Pool != "" {
		if _, err := netns.ParsePool(n.Pool); err != nil {
			return nil, badField("network.pool", n.Pool, "%v", err)
		}
	}
	dests := make([]netns.Dest, 0, len(n.Allow))
	for i, a := range n.Allow {
		d, err := netns.ParseDest(a)
		field := fmt.Sprintf("network.allow[%d]", i)
		if err != nil {
			return nil, badField(field, a, "%v", err)
		}
		if d.Host == "" && !d.Prefix.Addr().Is4() {
			return nil, badField(field, a, "IPv6 destinations are not supported yet: an egress jail has IPv4 only, and every IPv6 packet it sends is refused")
		}
		if d.Host != "" && s.Root != "" {
			return nil, badField(field, a, "a host name is pinned in the default root's /etc/hosts, and this Spec has its own root: give addresses")
		}
		dests = append(dests, d)
	}
	return dests, nil
}

// pool is the egress address pool.
func (n *Network) pool() netip.Prefix {
	p, err := netns.ParsePool(n.Pool)
	if err != nil {
		p = netip.MustParsePrefix(netns.DefaultPool)
	}
	return p
}

// resolveTimeout bounds the resolution of an allow-list's host names.
const resolveTimeout = 5 * time.Second

// resolveAllow resolves the host names of an egress Spec's allow-list on
// the host (IPv4 addresses only), before anything is made: a name that
// does not resolve refuses the run, naming its entry.
func resolveAllow(ctx context.Context, s *Spec) (map[string][]netip.Addr, error) {
	if s.Network.Mode != NetworkEgress {
		return nil, nil
	}
	out := map[string][]netip.Addr{}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	for i, a := range s.Network.Allow {
		d, err := netns.ParseDest(a)
		if err != nil || d.Host == "" {
			continue // validation reports it
		}
		if _, ok := out[d.Host]; ok {
			continue
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", d.Host)
		if err != nil {
			var de *net.DNSError
			if errors.As(err, &de) && de.IsNotFound {
				err = errors.New("no such host")
			}
			return nil, badField(fmt.Sprintf("network.allow[%d]", i), a, "does not resolve to an IPv4 address: %v", err)
		}
		for j := range addrs {
			addrs[j] = addrs[j].Unmap()
			// A DNS answer must not open what only an address may:
			// the metadata address, a private network, loopback.
			if r, special := netns.SpecialRange(addrs[j]); special {
				return nil, badField(fmt.Sprintf("network.allow[%d]", i), a, "resolves to %s, in %s, which a host name cannot open: give the address instead", addrs[j], r)
			}
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		out[d.Host] = slices.Compact(addrs)
	}
	return out, nil
}

// egressDests expands host names into one Dest per address, and describes
// what each entry opened.
func egressDests(dests []netns.Dest, resolved map[string][]netip.Addr) ([]netns.Dest, []AllowInfo) {
	var out []netns.Dest
	info := make([]AllowInfo, 0, len(dests))
	for _, d := range dests {
		ai := AllowInfo{Dest: d.Raw, Resolved: []string{}}
		if d.Host == "" {
			out = append(out, d)
			ai.Resolved = append(ai.Resolved, d.String())
		}
		for _, a := range resolved[d.Host] {
			e := d
			e.Host, e.FromName, e.Prefix = "", d.Host, netip.PrefixFrom(a, 32)
			out = append(out, e)
			ai.Resolved = append(ai.Resolved, e.String())
		}
		info = append(info, ai)
	}
	return out, info
}

// badField is a SpecError naming field and value.
func badField(field, value, format string, args ...any) error {
	return &SpecError{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
}
