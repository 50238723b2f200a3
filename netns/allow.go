// Package netns plans and builds a jail's network: none (its own network
// namespace with only lo), or egress, where a veth pair links the jail's
// namespace to the host's and nftables rules on the host end let through
// exactly the destinations of an allow-list.
//
// The plan (this file, plan.go) is pure and tested without root: the
// allow-list as parsed, the addresses of a lease, the interface names and
// the rules. The apply side (*_linux.go) works only through namespace file
// descriptors: a netlink handle made for the jail's namespace, an
// nftables connection in the host's. It never calls setns itself and never
// runs ip or nft.
package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Proto is the transport protocol an allow entry opens.
type Proto string

// Protocols an entry may name: "tcp/" (the default) or "udp/" before the
// destination.
const (
	TCP Proto = "tcp"
	UDP Proto = "udp"
)

// Dest is one entry of an allow-list, as parsed: a prefix or a host name,
// a protocol, and a port range (0-0: every port).
type Dest struct {
	// Raw is the entry as given.
	Raw string
	// Proto is TCP or UDP.
	Proto Proto
	// Prefix is the destination when it is an address or a CIDR.
	Prefix netip.Prefix
	// Host is the destination when it is a name; Prefix is then unset
	// until the name is resolved.
	Host string
	// FromName is the host name an address was resolved from: such an
	// entry opens neither a special range, a network of the host's, nor
	// the host itself.
	FromName string
	// PortFrom and PortTo bound the destination port, both 0 for any.
	PortFrom, PortTo uint16
}

// AnyPort reports whether d opens every port.
func (d Dest) AnyPort() bool { return d.PortFrom == 0 && d.PortTo == 0 }

// ParseDest parses an allow entry: [tcp/|udp/]DEST[:PORT[-PORT]] where
// DEST is an IPv4 address, a CIDR, a host name, or an IPv6 address or
// CIDR in brackets when a port follows ("[2001:db8::1]:443"). A bare
// IPv6 address or CIDR without brackets takes no port.
func ParseDest(unsafeEntry string) (Dest, error) {
	d := Dest{Raw: unsafeEntry, Proto: TCP}
	s := unsafeEntry
	if p, rest, ok := strings.Cut(s, "/"); ok && (p == "tcp" || p == "udp") {
		d.Proto, s = Proto(p), rest
	}
	if s == "" {
		return Dest{}, errors.New("no destination")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return Dest{}, errors.New("unclosed [")
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return Dest{}, fmt.Errorf("%q after ]: want :PORT", rest)
			}
			port = rest[1:]
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		// A bare IPv6 address or CIDR.
		host, port = s, ""
	}
	if port != "" || strings.HasSuffix(s, ":") {
		from, to, err := parsePorts(port)
		if err != nil {
			return Dest{}, err
		}
		d.PortFrom, d.PortTo = from, to
	}
	if p, err := netip.ParsePrefix(host); err == nil {
		if p != p.Masked() {
			return Dest{}, fmt.Errorf("%s has host bits set (the network is %s)", host, p.Masked())
		}
		d.Prefix = p
		return d, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Dest{}, fmt.Errorf("%s: an address with a zone", host)
		}
		a = a.Unmap()
		d.Prefix = netip.PrefixFrom(a, a.BitLen())
		return d, nil
	}
	if strings.HasPrefix(s, "[") || strings.Contains(host, "/") {
		return Dest{}, fmt.Errorf("%q is not an address or CIDR", host)
	}
	if err := checkHostname(host); err != nil {
		return Dest{}, err
	}
	d.Host = strings.ToLower(strings.TrimSuffix(host, "."))
	return d, nil
}

func parsePorts(s string) (uint16, uint16, error) {
	a, b, isRange := strings.Cut(s, "-")
	from, err := parsePort(a)
	if err != nil {
		return 0, 0, err
	}
	to := from
	if isRange {
		if to, err = parsePort(b); err != nil {
			return 0, 0, err
		}
		if to < from {
			return 0, 0, fmt.Errorf("port range %s ends before it starts", s)
		}
	}
	return from, to, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(n), nil
}

// checkHostname accepts a DNS name: labels of letters, digits and hyphens,
// not starting or ending with a hyphen, 253 characters at most.
func checkHostname(h string) error {
	name := strings.TrimSuffix(h, ".")
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is not an address, a CIDR or a host name", h)
	}
	labels := strings.Split(name, ".")
	if last := strings.ToLower(labels[len(labels)-1]); strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		// 2130706433 or 0x7f.1: what some resolvers read as an address.
		return fmt.Errorf("%q is not an address, a CIDR or a host name (a name's last label is not a number)", h)
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not an address, a CIDR or a host name", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("%q is not an address, a CIDR or a host name", h)
			}
		}
	}
	return nil
}

// String renders d as it would be parsed back.
func (d Dest) String() string {
	var b strings.Builder
	if d.Proto == UDP {
		b.WriteString("udp/")
	}
	dst := d.Host
	if d.Host == "" {
		dst = d.Prefix.String()
		if d.Prefix.IsSingleIP() {
			dst = d.Prefix.Addr().String()
		}
	}
	if d.Prefix.Addr().Is6() && d.Host == "" && !d.AnyPort() {
		dst = "[" + dst + "]"
	}
	b.WriteString(dst)
	if !d.AnyPort() {
		b.WriteString(":" + strconv.Itoa(int(d.PortFrom)))
		if d.PortTo != d.PortFrom {
			b.WriteString("-" + strconv.Itoa(int(d.PortTo)))
		}
	}
	return b.String()
}
