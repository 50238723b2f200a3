// Package k8s runs a jail [jail.Spec] as a Pod of a Kubernetes cluster,
// with a NetworkPolicy that selects it, and reports it as a
// jail.result/v1 document, like a native run. The Spec is mapped through
// package oci on to the Pod; what a Pod cannot say is refused when the
// Spec asks for it, and otherwise listed in the report's
// isolation.not_enforced. It speaks the Kubernetes REST API itself (see
// types.go for why).
package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/oci"
)

// Labels and annotations jail puts on its objects. LabelRun, a random id
// per run, is what the run's NetworkPolicy selects. AnnotationOwner is
// procfs.OwnerTag of the jail process that made them (boot id, PID
// namespace, pid, start time), so that `jail check --clean` removes only
// what a jail process of this machine left when it was killed.
const (
	LabelManaged    = "org.jailrt.jail"
	LabelRun        = "org.jailrt.jail.run"
	AnnotationOwner = "org.jailrt.jail/owner"
	containerName   = "jail"
)

// Options are the run's Kubernetes settings, which are not the Spec's:
// where it runs rather than what it may do.
type Options struct {
	// Namespace is the namespace of the Pod and its NetworkPolicy; empty
	// means the kubeconfig context's, else "default".
	Namespace string
	// RuntimeClass is the Pod's runtimeClassName (e.g. gvisor), or "".
	RuntimeClass string
	// SeccompProfile is the path, relative to the kubelet's seccomp
	// directory, at which the nodes hold the Spec's policy as `jail
	// seccomp export` writes it (e.g. "jail/strict.json"). Empty: the
	// runtime's default profile, which is not the Spec's policy and is
	// refused unless the Spec allows unenforced settings.
	SeccompProfile string
	// Resolve looks up the host names of an egress allow-list; nil uses
	// the system's resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Plan is a Spec mapped on to a Pod and a NetworkPolicy.
type Plan struct {
	*oci.Mapping
	Pod    Pod
	Policy NetworkPolicy
	// Namespaces are those the Pod has, in the report's order.
	Namespaces []string
	// Allow is the egress allow-list as resolved.
	Allow []jail.AllowInfo
	// RunID names the run: the Pod and the policy are jail-RUNID, and
	// the policy selects the label LabelRun=RUNID.
	RunID string
}

// Map maps s, argv and o on to a Pod and its NetworkPolicy. It reads no
// cluster state; host names of an egress allow-list are resolved here,
// once, and pinned in the Pod's /etc/hosts.
func Map(ctx context.Context, s *jail.Spec, argv []string, o Options) (*Plan, error) {
	if s.Root != "" {
		return nil, &jail.FeatureError{Feature: "root", Reason: "the k8s backend runs an image (image, --image)"}
	}
	if s.Image == "" {
		return nil, &jail.SpecError{Field: "image", Err: fmt.Errorf("the k8s backend needs an image (--image)")}
	}
	m, err := oci.FromSpec(s, argv)
	if err != nil {
		return nil, err
	}
	rs := m.Spec
	p := &Plan{Mapping: m}
	gap := func(field string, asked bool, why string) error { return oci.Gap(s, &m.NotEnforced, field, asked, why) }

	// Namespaces. A Pod has its own pid, mount, net, ipc and uts
	// namespaces unless told to share the node's (uts goes with net);
	// a user namespace with hostUsers: false; its cgroup namespace is the
	// runtime's; it has no time namespace.
	has := map[specs.LinuxNamespaceType]bool{}
	for _, n := range rs.Linux.Namespaces {
		has[n.Type] = true
	}
	if !has[specs.MountNamespace] {
		return nil, &jail.FeatureError{Feature: "disable_namespaces mount", Reason: "a container always has its own mount namespace"}
	}
	if has[specs.NetworkNamespace] != has[specs.UTSNamespace] {
		return nil, &jail.FeatureError{Feature: "disable_namespaces uts, net", Reason: "a Pod shares the node's uts namespace exactly when it shares its network"}
	}
	if !has[specs.CgroupNamespace] {
		return nil, &jail.FeatureError{Feature: "disable_namespaces cgroup", Reason: "a Pod's cgroup namespace is its runtime's"}
	}
	for _, n := range []struct {
		name string
		t    specs.LinuxNamespaceType
	}{{"user", specs.UserNamespace}, {"pid", specs.PIDNamespace}, {"mount", specs.MountNamespace}, {"net", specs.NetworkNamespace},
		{"uts", specs.UTSNamespace}, {"ipc", specs.IPCNamespace}, {"cgroup", specs.CgroupNamespace}} {
		if has[n.t] {
			p.Namespaces = append(p.Namespaces, n.name)
		}
	}
	if has[specs.TimeNamespace] {
		if err := gap("time namespace", false, "a Pod has none: the workload shares the node's clocks"); err != nil {
			return nil, err
		}
	}
	if s.HostUID != nil || s.HostGID != nil {
		return nil, &jail.FeatureError{Feature: "host_uid, host_gid", Reason: "the kubelet chooses the node ids of a Pod's user namespace"}
	}
	if s.CgroupParent != "" {
		return nil, &jail.FeatureError{Feature: "cgroup_parent", Reason: "the kubelet places a Pod's cgroups"}
	}
	if err := gap("pty_max", s.PtyMax != 0 && s.PtyMax != jail.DefaultPtyMax, "the runtime mounts /dev/pts itself, without a limit of its ptys"); err != nil {
		return nil, err
	}

	uid, gid := int64(rs.Process.User.UID), int64(rs.Process.User.GID)
	f, t := false, true
	grace := int64(math.Ceil(m.KillGrace.Seconds()))
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	p.RunID = hex.EncodeToString(rnd[:])
	pod := Pod{APIVersion: "v1", Kind: "Pod"}
	pod.Metadata.Name = "jail-" + p.RunID
	pod.Metadata.Labels = map[string]string{LabelManaged: "1", LabelRun: p.RunID}
	ps := &pod.Spec
	ps.RestartPolicy = "Never"
	ps.AutomountServiceAccountToken, ps.EnableServiceLinks = &f, &f
	ps.TerminationGracePeriodSeconds = &grace
	if has[specs.UserNamespace] {
		ps.HostUsers = &f
	}
	ps.HostPID, ps.HostIPC, ps.HostNetwork = !has[specs.PIDNamespace], !has[specs.IPCNamespace], !has[specs.NetworkNamespace]
	if has[specs.UTSNamespace] {
		ps.Hostname = rs.Hostname
	}
	if m.Timeout > 0 {
		d := int64(math.Ceil(m.Timeout.Seconds()))
		ps.ActiveDeadlineSeconds = &d
	}
	if o.RuntimeClass != "" {
		rc := o.RuntimeClass
		ps.RuntimeClassName = &rc
	}
	ps.SecurityContext = &PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid}
	nonRoot := uid != 0
	ps.SecurityContext.RunAsNonRoot = &nonRoot

	// Seccomp: the Spec's policy when the nodes hold it, else the
	// runtime's default, which is another policy.
	switch {
	case rs.Linux.Seccomp == nil:
		ps.SecurityContext.SeccompProfile = &SeccompProfile{Type: "Unconfined"}
	case o.SeccompProfile != "":
		lp := o.SeccompProfile
		ps.SecurityContext.SeccompProfile = &SeccompProfile{Type: "Localhost", LocalhostProfile: &lp}
	default:
		if err := gap("seccomp", true, fmt.Sprintf("the nodes must hold the %s policy: install `jail seccomp export %s` as a file below the kubelet's seccomp directory (/var/lib/kubelet/seccomp) on every node and name it with --k8s-seccomp-profile; otherwise the runtime's default profile applies", m.SeccompName, m.SeccompName)); err != nil {
			return nil, err
		}
		ps.SecurityContext.SeccompProfile = &SeccompProfile{Type: "RuntimeDefault"}
	}

	procDefault := "Default"
	c := Container{Name: containerName, Image: s.Image, Command: escape(rs.Process.Args[:1]), Args: escape(rs.Process.Args[1:]), WorkingDir: rs.Process.Cwd,
		SecurityContext: &ContainerSecurityCtx{ReadOnlyRootFilesystem: &t, AllowPrivilegeEscalation: &f, Privileged: &f,
			Capabilities: &Capabilities{Drop: []string{"ALL"}}, ProcMount: &procDefault}}
	for _, e := range rs.Process.Env {
		k, v, _ := cutEnv(e)
		c.Env = append(c.Env, EnvVar{Name: k, Value: escapeRef(v)})
	}

	// Mounts: /tmp, /dev/shm and tmpfs mounts as memory emptyDirs; binds
	// are refused: a hostPath would give the Pod the node's files.
	sized := false
	for i, mt := range rs.Mounts {
		switch {
		case i < m.SystemMounts && (mt.Destination == "/proc" || mt.Destination == "/dev" || mt.Destination == "/dev/pts"):
		case mt.Type == "bind":
			return nil, &jail.FeatureError{Feature: fmt.Sprintf("mounts (bind %s)", mt.Source), Reason: "a Pod cannot bind a path of this host; a hostPath would bind the node's"}
		case mt.Type == "tmpfs":
			name := "tmp-" + strconv.Itoa(i)
			ps.Volumes = append(ps.Volumes, Volume{Name: name, EmptyDir: &EmptyDirSource{Medium: "Memory", SizeLimit: strconv.FormatInt(sizeOf(mt.Options), 10)}})
			c.VolumeMounts = append(c.VolumeMounts, VolumeMount{Name: name, MountPath: mt.Destination})
			sized = true
		}
	}
	if sized {
		if err := gap("tmpfs sizes", false, "a memory emptyDir's sizeLimit evicts the Pod when it is passed; it is not a hard cap (ENOSPC)"); err != nil {
			return nil, err
		}
	}

	// Limits: requests equal limits, so the Pod is scheduled for what it
	// may use.
	r := rs.Linux.Resources
	if r.Memory != nil || r.CPU != nil && r.CPU.Quota != nil {
		c.Resources.Limits, c.Resources.Requests = map[string]string{}, map[string]string{}
		if r.Memory != nil {
			c.Resources.Limits["memory"] = strconv.FormatInt(*r.Memory.Limit, 10)
		}
		if r.CPU != nil && r.CPU.Quota != nil {
			c.Resources.Limits["cpu"] = strconv.FormatInt(int64(math.Ceil(s.CPUs*1000)), 10) + "m"
		}
		for k, v := range c.Resources.Limits {
			c.Resources.Requests[k] = v
		}
	}
	for _, g := range []struct {
		field string
		asked bool
		why   string
	}{
		{"swap_max_bytes", s.SwapMaxBytes > 0, "a Pod's swap is the node's setting"},
		{"pids_max", s.PidsMax > 0, "a Pod's pids limit is the kubelet's setting (podPidsLimit), not the Pod's"},
		{"cpu_weight", s.CPUWeight > 0, "a Pod's CPU weight follows its requests"},
		{"io_weight", s.IOWeight > 0, "a Pod has no block I/O weight"},
		{"cpu_time", s.CPUTime > 0, "Kubernetes has no CPU time limit, and jail cannot read a Pod's usage through the API"},
	} {
		if g.asked {
			if err := gap(g.field, true, g.why); err != nil {
				return nil, err
			}
		}
	}
	if err := gap("rlimits", false, "a Pod has no rlimits: the runtime's defaults apply"); err != nil {
		return nil, err
	}
	for _, g := range []struct{ field, why string }{
		{"image configuration", "the runtime applies the image's ENV and VOLUMEs, which jail cannot read through the API: a VOLUME is a writable directory on the node's disk, without a size"},
		{"supplementary groups", "the runtime may add the groups the image's /etc/group gives the uid"},
		{"ephemeral storage", "a VOLUME of the image and /dev/termination-log are on the node's disk, without an ephemeral-storage limit"},
	} {
		if err := gap(g.field, false, g.why); err != nil {
			return nil, err
		}
	}

	// The network: a NetworkPolicy that selects the Pod denies all, or
	// allows the egress list; name lookups are pinned, DNS is not open.
	ps.Containers = []Container{c}
	p.Pod = pod
	p.Policy = NetworkPolicy{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
	p.Policy.Metadata.Name = pod.Metadata.Name
	p.Policy.Metadata.Labels = map[string]string{LabelManaged: "1", LabelRun: p.RunID}
	p.Policy.Spec.PodSelector.MatchLabels = map[string]string{LabelRun: p.RunID} // this Pod, never {} (every Pod)
	p.Policy.Spec.PolicyTypes = []string{"Ingress", "Egress"}
	switch m.NetworkMode {
	case jail.NetworkHost:
		if err := gap("network", false, "host: the Pod shares its node's network"); err != nil {
			return nil, err
		}
	case jail.NetworkEgress:
		if s.Network.LogDenied > 0 {
			if err := gap("network.log_denied", true, "a NetworkPolicy reports no refused destinations"); err != nil {
				return nil, err
			}
		}
		if err := p.mapEgress(ctx, s, o); err != nil {
			return nil, err
		}
		fallthrough
	default:
		if err := gap("network policy", false, "a NetworkPolicy is enforced only by a network plugin that implements it, and other policies that select the Pod (a namespace-wide allow, a cluster-wide policy) add to what it may reach; jail sees neither"); err != nil {
			return nil, err
		}
	}
	if m.NetworkMode == jail.NetworkHost {
		p.Policy = NetworkPolicy{} // a host-network Pod is not selected by policies
	}
	return p, nil
}

// mapEgress makes the policy's egress rules and the Pod's host aliases.
func (p *Plan) mapEgress(ctx context.Context, s *jail.Spec, o Options) error {
	resolve := o.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
		}
	}
	aliases := map[string][]string{}
	for i, raw := range s.Network.Allow {
		d, err := netns.ParseDest(raw)
		if err != nil {
			return &jail.SpecError{Field: fmt.Sprintf("network.allow[%d]", i), Value: raw, Err: err}
		}
		field := fmt.Sprintf("network.allow[%d]", i)
		var prefixes []netip.Prefix
		if d.Host != "" {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			addrs, err := resolve(lctx, d.Host)
			cancel()
			if err != nil || len(addrs) == 0 {
				return &jail.SpecError{Field: field, Value: raw, Err: fmt.Errorf("cannot resolve %s: %v", d.Host, err)}
			}
			for _, a := range addrs {
				a = a.Unmap()
				// A DNS answer never opens a special range (the metadata
				// address, a private network), as natively.
				if r, special := netns.SpecialRange(a); special {
					return &jail.SpecError{Field: field, Value: raw, Err: fmt.Errorf("%s resolves to %s, in the special range %s: name the address itself to open it", d.Host, a, r)}
				}
				prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
				aliases[a.String()] = append(aliases[a.String()], d.Host)
			}
		} else {
			prefixes = []netip.Prefix{d.Prefix} // IPv4: Spec.Validate refuses IPv6
		}
		rule := NetworkPolicyRule{}
		info := jail.AllowInfo{Dest: raw, Resolved: []string{}}
		for _, pr := range prefixes {
			// A broader entry opens the internet, not the special ranges
			// inside it (0.0.0.0/0 is not 169.254.169.254), unless it lies
			// inside one itself: those are named explicitly.
			rule.To = append(rule.To, NetworkPolicyPeer{IPBlock: &IPBlock{CIDR: pr.String(), Except: netns.SpecialRangesIn(pr)}})
			r := netns.Dest{Proto: d.Proto, Prefix: pr, PortFrom: d.PortFrom, PortTo: d.PortTo}
			info.Resolved = append(info.Resolved, r.String())
		}
		proto := "TCP"
		if d.Proto == netns.UDP {
			proto = "UDP"
		}
		port := NetworkPolicyPort{Protocol: proto}
		if !d.AnyPort() {
			from := int32(d.PortFrom)
			port.Port = &from
			if d.PortTo != d.PortFrom {
				to := int32(d.PortTo)
				port.EndPort = &to
			}
		}
		rule.Ports = []NetworkPolicyPort{port}
		p.Policy.Spec.Egress = append(p.Policy.Spec.Egress, rule)
		p.Allow = append(p.Allow, info)
	}
	ips := make([]string, 0, len(aliases))
	for ip := range aliases {
		ips = append(ips, ip)
	}
	slices.Sort(ips)
	for _, ip := range ips {
		names := slices.Compact(slices.Sorted(slices.Values(aliases[ip])))
		p.Pod.Spec.HostAliases = append(p.Pod.Spec.HostAliases, HostAlias{IP: ip, Hostnames: names})
	}
	return nil
}

// escapeRef keeps s as it is through the kubelet, which expands $(VAR)
// in a container's command, args and env values and reads $$ as $.
func escapeRef(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func escape(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = escapeRef(a)
	}
	return out
}

func cutEnv(e string) (k, v string, ok bool) {
	for i := range len(e) {
		if e[i] == '=' {
			return e[:i], e[i+1:], true
		}
	}
	return e, "", false
}

// sizeOf reads a tmpfs mount's size= option.
func sizeOf(opts []string) int64 {
	for _, o := range opts {
		if len(o) > 5 && o[:5] == "size=" {
			n, _ := strconv.ParseInt(o[5:], 10, 64)
			return n
		}
	}
	return 0
}
