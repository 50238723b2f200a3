package hostcheck

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// More feature names, in the order Run reports them (after the mount API).
const (
	nameSpawn       = "clone3, pidfd"
	nameIntoCgroup  = "CLONE_INTO_CGROUP"
	nameEgress      = "egress network"
	nameEnvironment = "environment"
)

// spawnFacts are what probing clone3(2) and pidfd_open(2) found: nil when
// the call is there.
type spawnFacts struct {
	Clone3, Pidfd error
}

// fixSeccompedContainer is the fix when a container runtime's seccomp
// profile hides the calls jail needs.
const fixSeccompedContainer = "run the container with --security-opt seccomp=unconfined (Docker's default profile answers clone3 with ENOSYS and refuses unshare without CAP_SYS_ADMIN), or with jail's own policy as the container's"

// spawnFeature judges clone3 and pidfd_open: jail's C stage creates the
// jail with clone3 (CLONE_INTO_CGROUP where it can) and waits on a pidfd.
// Both are in every kernel jail supports (5.12); ENOSYS or EPERM mean a
// seccomp filter of a container runtime hides them.
func spawnFeature(s spawnFacts, inContainer string) Feature {
	f := Feature{Name: nameSpawn, Verdict: OK, Detail: "clone3 and pidfd_open present"}
	var missing []string
	if s.Clone3 != nil {
		missing = append(missing, fmt.Sprintf("clone3: %v", s.Clone3))
	}
	if s.Pidfd != nil {
		missing = append(missing, fmt.Sprintf("pidfd_open: %v", s.Pidfd))
	}
	if len(missing) == 0 {
		return f
	}
	f.Verdict, f.Detail = Missing, strings.Join(missing, "; ")
	filtered := errors.Is(s.Clone3, syscall.ENOSYS) || errors.Is(s.Clone3, syscall.EPERM) || errors.Is(s.Pidfd, syscall.EPERM)
	switch {
	case filtered && inContainer != "":
		f.Fix = fixSeccompedContainer
	case filtered:
		f.Fix = "a seccomp filter on this process hides them (Seccomp: 2 in /proc/self/status): run jail outside it"
	default:
		f.Fix = "use Linux 5.12 or later"
	}
	return f
}

// intoCgroupFeature says whether a jail is created straight in its cgroup
// (CLONE_INTO_CGROUP: cgroup v2 and clone3), or moved into it by pid after
// the clone (cgroup v1, where a move may wait for an RCU grace period).
func intoCgroupFeature(unified bool, s spawnFacts) Feature {
	f := Feature{Name: nameIntoCgroup}
	switch {
	case unified && s.Clone3 == nil:
		f.Verdict, f.Detail = OK, "cgroup v2: a jail is created in its own cgroup, never outside it"
	case !unified:
		f.Verdict, f.Detail = Warn, "cgroup v1 controllers: a jail is moved into its cgroups by pid right after the clone, before it runs anything"
		f.Fix = "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2"
	default:
		f.Verdict, f.Detail = Warn, "no clone3: a jail is moved into its cgroup by pid right after the clone, before it runs anything"
		f.Fix = "see " + nameSpawn
	}
	return f
}

// egressFeature says how an egress jail (--net egress) reaches out for
// this caller: root's veth, or an unprivileged caller's pasta.
func egressFeature(root bool, pasta string, pastaErr error) Feature {
	f := Feature{Name: nameEgress}
	switch {
	case root:
		f.Verdict, f.Detail = OK, "root: a veth per egress jail, the allow-list in nftables on its host end (see nftables)"
	case pastaErr == nil:
		f.Verdict, f.Detail = OK, "unprivileged: pasta ("+pasta+"), the allow-list in nftables in the jail's namespace"
	default:
		f.Verdict, f.Detail = Warn, "unprivileged: no pasta on PATH: --net egress is refused (none and host work)"
		f.Fix = "install passt (apt-get install passt: Debian 12, Ubuntu 23.04 and later), which has pasta"
	}
	return f
}

// environmentFacts are the signs that jail runs in a container.
type environmentFacts struct {
	// Container names the runtime whose marks were found (docker,
	// podman, kubernetes, lxc, or what /run/systemd/container says); ""
	// when none were.
	Container string
	// Filtered is true when a seccomp filter is already on this process.
	Filtered bool
}

// environmentFeature says whether jail runs in a container, which decides
// what the user namespace and clone3 fixes are.
func environmentFeature(e environmentFacts, usernsOK bool) Feature {
	f := Feature{Name: nameEnvironment, Verdict: OK}
	switch {
	case e.Container == "":
		f.Detail = "not in a container (no /.dockerenv, /run/.containerenv, /run/systemd/container or container cgroup)"
	case usernsOK:
		f.Detail = "marks of a container (" + e.Container + "); jail makes its namespaces here all the same"
	default:
		f.Verdict = Warn
		f.Detail = "in a container (" + e.Container + ")"
		if e.Filtered {
			f.Detail += " with a seccomp filter"
		}
		f.Detail += ", which keeps jail from making a user namespace"
		f.Fix = fixSeccompedContainer + "; and --security-opt apparmor=unconfined where AppArmor confines it"
	}
	return f
}

// containerFromMarks names the container runtime from what the probe
// read: the files that exist, /run/systemd/container's content and
// /proc/self/cgroup.
func containerFromMarks(dockerenv, containerenv bool, systemdContainer, cgroups string, kubernetes bool) string {
	switch {
	case kubernetes:
		return "kubernetes: $KUBERNETES_SERVICE_HOST"
	case dockerenv:
		return "docker: /.dockerenv"
	case containerenv:
		return "podman: /run/.containerenv"
	case systemdContainer != "":
		return systemdContainer + ": /run/systemd/container"
	}
	for _, mark := range []struct{ in, name string }{{"kubepods", "kubernetes"}, {"/docker/", "docker"}, {"docker-", "docker"}, {"/lxc/", "lxc"}, {"libpod", "podman"}} {
		if strings.Contains(cgroups, mark.in) {
			return mark.name + ": /proc/self/cgroup"
		}
	}
	return ""
}
