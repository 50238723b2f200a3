package server

import (
	"strconv"
	"strings"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/profiles"
)

// Tenant is who asks: the peer's uid on the unix socket (SO_PEERCRED).
type Tenant struct {
	UID uint32 `json:"uid"`
	// Admin: the server's own user or root. An admin may set every field;
	// the others may not set those that use the server's privilege on
	// the host (checkSpec), since the server's jails are made with it.
	Admin bool `json:"admin"`
}

// checkProfile refuses a profile that is not a built-in one: a path would
// read a file of the server's disk.
func checkProfile(name, field string) *Error {
	if name == "" {
		return nil
	}
	for _, n := range profiles.Names() {
		if n == name {
			return nil
		}
	}
	return apiErr(CodeBadRequest, field, "profile %q: want a built-in profile (%s); a server reads no profile file", name, strings.Join(profiles.Names(), ", "))
}

// checkSpec refuses, for a tenant who is not an admin, every field of s
// that uses the server's privilege on the host: host paths (a root
// directory, bind sources), host ids, a namespace less, the host's
// network or a pool of its addresses, a cgroup parent, a weaker seccomp
// or Landlock, unenforced settings. Otherwise the socket would be a root
// shell, as docker.sock is. field is s's name in the request ("spec").
func checkSpec(t Tenant, s *jail.Spec, field string) *Error {
	if t.Admin {
		return nil
	}
	deny := func(f, why string) *Error {
		return apiErr(CodeForbidden, field+"."+f, "%s.%s: %s; only the server's own user or root may set it", field, f, why)
	}
	switch {
	case s.Root != "":
		return deny("root", "a directory of the server's host")
	case s.AllowSensitiveSources:
		return deny("allow_sensitive_sources", "opens sensitive host paths")
	case s.HostUID != nil:
		return deny("host_uid", "a host user id")
	case s.HostGID != nil:
		return deny("host_gid", "a host group id")
	case len(s.DisableNamespaces) > 0:
		return deny("disable_namespaces", "shares a namespace of the server's host")
	case s.Network.Mode == jail.NetworkHost:
		return deny("network.mode", "the server's host network")
	case s.Network.Pool != "":
		return deny("network.pool", "addresses of the server's host")
	case s.CgroupParent != "":
		return deny("cgroup_parent", "a cgroup of the server's host")
	case s.Seccomp == "none" || s.Seccomp == "log":
		return deny("seccomp", "a weaker seccomp filter")
	case s.SeccompPolicy != nil:
		return deny("seccomp_policy", "a seccomp policy of the caller's")
	case s.Landlock == jail.LandlockOff:
		return deny("landlock", "turns Landlock off")
	case s.AllowUnenforced:
		return deny("allow_unenforced", "runs without what the host cannot enforce")
	}
	for i, m := range s.Mounts {
		if m.Type != mounts.Tmpfs {
			return deny("mounts["+strconv.Itoa(i)+"]", "a bind of a host path")
		}
	}
	return nil
}

// checkWorkspace refuses a dir workspace (a directory of the server's
// disk) to a tenant who is not an admin.
func checkWorkspace(t Tenant, w jail.Workspace) *Error {
	if !t.Admin && w.Type == jail.WorkspaceDir {
		return apiErr(CodeForbidden, "workspace.type", "workspace.type dir: a directory of the server's disk; only the server's own user or root may set it (tmpfs is the default)")
	}
	return nil
}
