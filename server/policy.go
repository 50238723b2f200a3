package server

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/profiles"
	"github.com/jailrt/jail/seccomp"
)

// Tenant is who asks: a unix socket's peer, by its uid (SO_PEERCRED), or
// the tenant of a TCP client's bearer token.
type Tenant struct {
	// Name is the uid in decimal for a unix peer, the token's tenant for
	// a TCP client; its state is under --state-dir/tenants/NAME.
	Name string `json:"name"`
	// UID is a unix peer's uid; null for a token.
	UID *uint32 `json:"uid"`
	// Admin: root, the server's own user, or a tenant the policy makes
	// one. An admin may set every field; the others may not set those
	// that use the server's privilege on the host (checkSpec), since the
	// server's jails are made with it, unless the policy allows them.
	Admin  bool     `json:"admin"`
	Scopes []string `json:"scopes"`
	// Policy is the tenant's policy (Config.Policy).
	Policy TenantPolicy `json:"-"`
	// private are the server's own paths (Server.private), which none of
	// the tenant's bind mounts may reach.
	private []string
}

// uidTenant is the tenant of a unix peer.
func uidTenant(uid, serverUID uint32, p *Policy) Tenant {
	name := strconv.FormatUint(uint64(uid), 10)
	tp := p.policyOf(name)
	scopes := allScopes
	if len(tp.Scopes) > 0 {
		scopes = tp.Scopes
	}
	return Tenant{Name: name, UID: &uid, Admin: uid == 0 || uid == serverUID || tp.Admin, Scopes: scopes, Policy: tp}
}

// tokenTenant is the tenant of a TCP client's token.
func tokenTenant(tok *Token, p *Policy) Tenant {
	tp := p.policyOf(tok.Tenant)
	return Tenant{Name: tok.Tenant, Admin: tp.Admin, Scopes: tok.Scopes, Policy: tp}
}

func (t Tenant) has(scope string) bool { return slices.Contains(t.Scopes, scope) }

// checkProfile refuses a profile that is not a built-in one (a path would
// read a file of the server's disk) or that the tenant's policy does not
// list.
func checkProfile(t Tenant, name, field string) *Error {
	if name == "" {
		return nil
	}
	if !slices.Contains(profiles.Names(), name) {
		return apiErr(CodeBadRequest, field, "profile %q: want a built-in profile (%s); a server reads no profile file", name, strings.Join(profiles.Names(), ", "))
	}
	if !t.Admin && len(t.Policy.Profiles) > 0 && !slices.Contains(t.Policy.Profiles, name) {
		return apiErr(CodeForbidden, field, "profile %q: tenant %s may use %s", name, t.Name, strings.Join(t.Policy.Profiles, ", "))
	}
	return nil
}

// privilegedFields are the fields checkSpec refuses to a tenant who is not
// an admin, as a policy's allow_fields names them.
var privilegedFields = []string{"root", "allow_sensitive_sources", "host_uid", "host_gid", "disable_namespaces", "network.mode",
	"network.pool", "cgroup_parent", "seccomp", "seccomp_policy", "landlock", "allow_unenforced", "workspace.type"}

// checkSpec refuses, for a tenant who is not an admin, every field of s
// that uses the server's privilege on the host and that the tenant's
// policy does not allow: host paths (a root directory, bind sources
// outside its bind roots), host ids, a namespace less, the host's network
// or a pool of its addresses, a cgroup parent, a weaker seccomp or
// Landlock, a seccomp policy file (never, whatever the policy allows),
// unenforced settings. Otherwise the socket would be a root
// shell, as docker.sock is. It then applies the tenant's memory quota. A
// bind's source is replaced by the path its symlinks resolve to, the one
// that was checked. field is s's name in the request ("spec").
func checkSpec(t Tenant, s *jail.Spec, field string) *Error {
	if t.Admin {
		return nil
	}
	deny := func(f, why string) *Error {
		return apiErr(CodeForbidden, field+"."+f, "%s.%s: %s; only the server's own user, root or a tenant its policy allows may set it", field, f, why)
	}
	allowed := func(f string) bool { return slices.Contains(t.Policy.AllowFields, f) }
	checks := []struct {
		field, why string
		set        bool
	}{
		{"root", "a directory of the server's host", s.Root != ""},
		{"allow_sensitive_sources", "opens sensitive host paths", !s.AllowSensitiveSources.IsZero()},
		{"host_uid", "a host user id", s.HostUID != nil},
		{"host_gid", "a host group id", s.HostGID != nil},
		{"disable_namespaces", "shares a namespace of the server's host", len(s.DisableNamespaces) > 0},
		{"network.mode", "the server's host network", s.Network.Mode == jail.NetworkHost},
		{"network.pool", "addresses of the server's host", s.Network.Pool != ""},
		{"cgroup_parent", "a cgroup of the server's host", s.CgroupParent != ""},
		{"seccomp", "a weaker seccomp filter", s.Seccomp == "none" || s.Seccomp == "log"},
		{"seccomp_policy", "a seccomp policy of the caller's", s.SeccompPolicy != nil},
		{"landlock", "turns Landlock off", s.Landlock == jail.LandlockOff},
		{"allow_unenforced", "runs without what the host cannot enforce", s.AllowUnenforced},
	}
	for _, c := range checks {
		if c.set && !allowed(c.field) {
			return deny(c.field, c.why)
		}
	}
	// A policy file would be read from the server's disk, with the
	// server's privilege: any file, its text quoted back in a parse
	// error, and any filter it says (default_action: allow). As for
	// profiles, a tenant names built-in policies only, whatever it is
	// allowed; its own policy goes inline, in seccomp_policy.
	if s.Seccomp != "" && !seccomp.IsBuiltin(s.Seccomp) {
		return apiErr(CodeForbidden, field+".seccomp", "%s.seccomp %q: want a built-in policy (%s); a server reads no policy file for a tenant (seccomp_policy takes one inline)",
			field, s.Seccomp, strings.Join(seccomp.Names(), ", "))
	}
	for i, m := range s.Mounts {
		if m.Type == mounts.Tmpfs {
			continue
		}
		f := "mounts[" + strconv.Itoa(i) + "]"
		hostPath, e := t.Policy.bindSource(m, t.private)
		if e != "" {
			return apiErr(CodeForbidden, field+"."+f+".source", "%s.%s.source %q: %s", field, f, m.Source, e)
		}
		s.Mounts[i].Source = hostPath
	}
	if q := t.Policy.Quotas.MemoryMaxBytes; q > 0 {
		switch {
		case s.MemoryMaxBytes == 0:
			s.MemoryMaxBytes = q
		case s.MemoryMaxBytes > q:
			return apiErr(CodeForbidden, field+".memory_max_bytes", "%s.memory_max_bytes %d: above tenant %s's quota of %d", field, s.MemoryMaxBytes, t.Name, q)
		}
	}
	return nil
}

func (tp *TenantPolicy) specAllowed() bool { return tp.Spec == nil || *tp.Spec }

// bindSource resolves a bind mount's source on the host and returns it if
// it lies under one of the policy's bind roots that allows the bind's
// kind (read-only or not) and neither is, lies under nor contains one of
// the server's private paths, or why not.
func (tp *TenantPolicy) bindSource(m mounts.Mount, private []string) (string, string) {
	if len(tp.BindRoots) == 0 {
		return "", "a bind of a host path; the tenant's policy has no bind_roots"
	}
	if !filepath.IsAbs(m.Source) {
		return "", "want an absolute path"
	}
	hostPath, err := filepath.EvalSymlinks(m.Source)
	if err != nil {
		if os.IsNotExist(err) {
			return "", "does not exist"
		}
		return "", err.Error()
	}
	// A jail that reaches the server's socket or state (other tenants'
	// sessions, their control sockets, the tokens) is past every wall of
	// the server's. By path, and by place in the file system: another
	// path to the same directory (a bind mount of it, of a directory
	// above it or within it, of /) is the same.
	var mis []*mountinfo.Info
	if len(private) > 0 {
		var err error
		if mis, err = mountinfo.GetMounts(nil); err != nil {
			return "", "the server cannot read its mounts to check it: " + err.Error()
		}
	}
	src, srcOK := placeOf(mis, hostPath)
	for _, p := range private {
		pp, ok := placeOf(mis, p)
		if within(hostPath, p) || within(p, hostPath) || !srcOK || ok && reaches(mis, hostPath, src, pp) {
			return "", "the server's own " + p + " is there: no jail may reach the server"
		}
	}
	for _, root := range tp.BindRoots {
		if hostPath != root.Path && !strings.HasPrefix(hostPath, root.Path+"/") {
			continue
		}
		if m.Type != mounts.ROBind && !root.Writable {
			return "", "under bind root " + root.Path + ", which allows only read-only binds (type ro-bind)"
		}
		return hostPath, ""
	}
	roots := make([]string, len(tp.BindRoots))
	for i, r := range tp.BindRoots {
		roots[i] = r.Path
	}
	return "", "resolves to " + hostPath + ", under none of the tenant's bind roots (" + strings.Join(roots, ", ") + ")"
}

// checkWorkspace refuses a dir workspace (a directory of the server's
// disk) to a tenant who is not an admin or allowed workspace.type, and a
// workspace above the tenant's quota; a workspace of the default size
// gets the quota when that is smaller.
func checkWorkspace(t Tenant, w *jail.Workspace) *Error {
	if t.Admin {
		return nil
	}
	if w.Type == jail.WorkspaceDir && !slices.Contains(t.Policy.AllowFields, "workspace.type") {
		return apiErr(CodeForbidden, "workspace.type", "workspace.type dir: a directory of the server's disk; only the server's own user, root or a tenant its policy allows may set it (tmpfs is the default)")
	}
	q := t.Policy.Quotas.WorkspaceBytes
	if q <= 0 || w.Type == jail.WorkspaceNone {
		return nil
	}
	switch {
	case w.SizeBytes > q:
		return apiErr(CodeForbidden, "workspace.size_bytes", "workspace.size_bytes %d: above tenant %s's quota of %d", w.SizeBytes, t.Name, q)
	case w.SizeBytes == 0:
		def := int64(jail.DefaultWorkspaceBytes)
		if w.Type == jail.WorkspaceDir {
			def = jail.DefaultDirWorkspaceBytes
		}
		w.SizeBytes = min(def, q)
	}
	return nil
}

// checkReach refuses, for every tenant, an egress allow entry that would
// open one of this host's own addresses on a TCP port the server listens
// on: no jail reaches the server. The egress rules open this host only to
// an entry of one of its addresses, so that is what is refused, and, to
// be safe, an entry that names the special range such an address lies in
// (127.0.0.0/8, a private network); an entry that lies in no such range,
// 0.0.0.0/0 for one, opens the internet and not this host, and is taken.
// (Host names resolved to this host open nothing of it.) The host network
// (admins only) reaches the server, as it reaches everything of the host.
func (s *Server) checkReach(spec *jail.Spec, field string) *Error {
	if spec.Network.Mode != jail.NetworkEgress {
		return nil
	}
	return s.checkAllow(spec.Network.Allow, field+".network.allow")
}

// checkAllow is checkReach's for an allow-list, field its name in the
// request.
func (s *Server) checkAllow(allow []string, field string) *Error {
	if len(s.cfg.TCPPorts) == 0 {
		return nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return apiErr(CodeInternal, "", "this host's addresses: %v", err)
	}
	for i, entry := range allow {
		d, err := netns.ParseDest(entry)
		if err != nil || !d.Prefix.IsValid() || d.Proto != netns.TCP {
			continue // a bad entry is the spec's validation's; a name opens no host address
		}
		for _, port := range s.cfg.TCPPorts {
			if !d.AnyPort() && (port < d.PortFrom || port > d.PortTo) {
				continue
			}
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				ip, ok := netip.AddrFromSlice(ipn.IP)
				if !ok || !d.Prefix.Contains(ip.Unmap()) {
					continue
				}
				r, special := netns.SpecialRange(ip.Unmap())
				if d.Prefix.IsSingleIP() || special && r.Bits() <= d.Prefix.Bits() {
					f := field + "[" + strconv.Itoa(i) + "]"
					return apiErr(CodeForbidden, f, "%s %q: opens this host's %s on port %d, where jail serve listens: no jail may reach the server", f, entry, ip.Unmap(), port)
				}
			}
		}
	}
	return nil
}

// fsPlace is where a path is in its file system: the file system (the
// device of its mount, as mountinfo gives it) and the path from that file
// system's root. Two paths with the same place are the same directory,
// whatever bind mounts lead to it.
type fsPlace struct {
	dev  string // major:minor
	path string // absolute, clean, from the file system's root
}

// placeOf finds p's place through the mounts mis (this process's
// mount namespace), from the mount p lies under that is deepest: its
// root within its file system, and what of p is below its mount point. p
// is absolute and clean, its symlinks resolved; it need not exist (a
// socket not made yet).
func placeOf(mis []*mountinfo.Info, p string) (fsPlace, bool) {
	var best *mountinfo.Info
	for _, m := range mis {
		if within(p, m.Mountpoint) && (best == nil || len(m.Mountpoint) >= len(best.Mountpoint)) {
			best = m // the later of two mounts at one point is on top
		}
	}
	if best == nil {
		return fsPlace{}, false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(p, best.Mountpoint), "/")
	return fsPlace{fmt.Sprintf("%d:%d", best.Major, best.Minor), filepath.Join(best.Root, rest)}, true
}

// reaches says whether a bind of source (at place src) would show the
// place private: at the source itself (the same file system, one within
// the other there), or through a mount below it, which a bind carries
// along (binds are recursive).
func reaches(mis []*mountinfo.Info, source string, src, private fsPlace) bool {
	overlaps := func(a fsPlace) bool {
		return a.dev == private.dev && (within(a.path, private.path) || within(private.path, a.path))
	}
	if overlaps(src) {
		return true
	}
	for _, m := range mis {
		if m.Mountpoint != source && within(m.Mountpoint, source) && overlaps(fsPlace{fmt.Sprintf("%d:%d", m.Major, m.Minor), m.Root}) {
			return true
		}
	}
	return false
}

// within says whether path is dir or lies under it (both absolute, clean).
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// privatePaths makes the server's own paths absolute, clean and, where
// they exist, resolved, so that bindSource compares them with resolved
// sources; the path as given is kept too (a socket made later).
func privatePaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		out = append(out, abs)
		r, err := filepath.EvalSymlinks(abs)
		if err != nil { // not there yet (a socket): its directory's
			if d, derr := filepath.EvalSymlinks(filepath.Dir(abs)); derr == nil {
				r, err = filepath.Join(d, filepath.Base(abs)), nil
			}
		}
		if err == nil && r != abs {
			out = append(out, r)
		}
	}
	return out
}
