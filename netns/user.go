package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// User-mode egress is egress for a caller that cannot make a veth in the
// host's namespace (an unprivileged one): pasta (package passt) attaches
// to the jail's network namespace, makes its interface there (JailIf,
// with a copy of the host's address and routes) and carries what the
// jail sends as its own connections on the host, as the caller. pasta
// forwards anything; the allow-list is enforced by rules in the jail's
// own namespace, table inet jail, loaded by the parent before the
// workload starts. They are out of the workload's reach: it holds no
// capability (CAP_NET_ADMIN) in its user namespace, and a user namespace
// it makes owns no part of this network namespace.
//
// The user-mode table's chains: base chains of their own in the jail's
// namespace, policy drop.
const (
	UserOut Chain = "out" // hook output: what the jail sends
	UserIn  Chain = "in"  // hook input: what it is sent
)

// UserChains are the user-mode table's chains with their nft(8) hooks, in
// order.
var UserChains = []struct {
	Chain Chain
	Hook  string
}{
	{UserOut, "type filter hook output priority filter; policy drop;"},
	{UserIn, "type filter hook input priority filter; policy drop;"},
	// Nothing is routed through the jail (a new namespace copies the
	// host's ip_forward): no rules, policy drop.
	{UserFwd, "type filter hook forward priority filter; policy drop;"},
}

// UserFwd is the user-mode table's forward chain.
const UserFwd Chain = "forward"

// UserDeniedSet is the user-mode table's set of refused destinations.
const UserDeniedSet = "denied"

// UserEgress is the plan of a user-mode egress jail's rules.
type UserEgress struct {
	// Allow is the allow-list, every entry with its address(es).
	Allow []Dest
	// HostNets are the networks the host is on and its own addresses
	// (UserGuards), refused as the special ranges are, unless an entry
	// names one: pasta's connections come from the host.
	HostNets []netip.Prefix
	// Jails are refused whatever the list says: other jails (UserGuards).
	Jails []netip.Prefix
	// LogDenied is the size of the set of refused destinations, 0 for none.
	LogDenied int
	// Rules are the rules, in chain order.
	Rules []Rule
}

// UserConfig is what a user-mode egress jail's plan is made from.
type UserConfig struct {
	Allow           []Dest
	HostNets, Jails []netip.Prefix
	LogDenied       int
}

// PlanUser works out the rules of a user-mode egress jail. As Plan, it
// refuses IPv6 entries: every IPv6 packet but loopback is refused.
func PlanUser(c UserConfig) (*UserEgress, error) {
	if c.LogDenied < 0 || c.LogDenied > MaxLogDenied {
		return nil, fmt.Errorf("log of %d refused destinations: want 0 to %d", c.LogDenied, MaxLogDenied)
	}
	for _, d := range c.Allow {
		if !d.Prefix.IsValid() {
			return nil, fmt.Errorf("allow %s: not resolved", d.Raw)
		}
		if !d.Prefix.Addr().Is4() {
			return nil, errors.New("allow " + d.Raw + ": IPv6 destinations are not supported yet (every IPv6 packet is rejected)")
		}
	}
	u := &UserEgress{Allow: c.Allow, LogDenied: c.LogDenied}
	for _, n := range c.HostNets {
		if n.Addr().Is4() {
			u.HostNets = append(u.HostNets, n.Masked())
		}
	}
	for _, n := range c.Jails {
		if n.Addr().Is4() {
			u.Jails = append(u.Jails, n.Masked())
		}
	}
	rs := []Rule{
		// The jail's loopback is its own.
		{Chain: UserOut, OIF: "lo", Verdict: Accept},
		{Chain: UserOut, Counter: true, Name: CountOut},
	}
	if len(u.Jails) > 0 {
		// Other jails, whatever the list says.
		set := mergePrefixes(u.Jails)
		rs = append(rs, Rule{Chain: UserOut, DAddrs: set, Proto: TCP, Counter: true, Name: CountDenied, Verdict: RejectTCP},
			Rule{Chain: UserOut, DAddrs: set, Counter: true, Name: CountDenied, Verdict: Reject})
	}
	rs = append(rs, allowRules(UserOut, "", u.Allow, u.HostNets, false)...)
	rs = append(rs,
		Rule{Chain: UserIn, IIF: "lo", Verdict: Accept},
		Rule{Chain: UserIn, Counter: true, Name: CountIn},
		// Answers to the jail's connections; nothing new comes in.
		Rule{Chain: UserIn, Established: true, Verdict: Accept},
		Rule{Chain: UserIn, Verdict: Drop},
	)
	u.Rules = withLog(rs, u.LogDenied)
	return u, nil
}

// Ruleset renders the user-mode table in nft(8) syntax, for review and
// the golden test (which loads it with `nft -c`).
func (u *UserEgress) Ruleset() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", TableName)
	if u.LogDenied > 0 {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype ipv4_addr . inet_proto . inet_service\n\t\tsize %d\n\t\tflags dynamic\n\t}\n", UserDeniedSet, u.LogDenied)
	}
	for _, c := range UserChains {
		fmt.Fprintf(&b, "\tchain %s {\n\t\t%s\n", c.Chain, c.Hook)
		for _, r := range u.Rules {
			if r.Chain == c.Chain {
				fmt.Fprintf(&b, "\t\t%s\n", r.render(0, UserDeniedSet))
			}
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}
