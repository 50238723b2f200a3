package hostcheck

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Sysctl files that gate unprivileged user namespaces.
const (
	// maxUserNamespacesPath is user.max_user_namespaces; 0 disables user
	// namespaces for everyone, root included.
	maxUserNamespacesPath = "/proc/sys/user/max_user_namespaces"
	// unprivilegedUsernsClonePath is kernel.unprivileged_userns_clone, a
	// Debian (and older Ubuntu) patch; 0 refuses callers without CAP_SYS_ADMIN.
	unprivilegedUsernsClonePath = "/proc/sys/kernel/unprivileged_userns_clone"
	// apparmorRestrictPath is kernel.apparmor_restrict_unprivileged_userns,
	// Ubuntu 23.10 and later; 1 lets unconfined callers create a user
	// namespace but denies them every capability in it, so the mount
	// namespace or the id map that follows fails with EPERM or EACCES.
	apparmorRestrictPath = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
)

// Fixes for the causes of a failed user namespace probe.
const (
	// fixAppArmor is the fix on Ubuntu 23.10 and later. The profile marks the
	// jail binary unconfined but allowed to create user namespaces with
	// capabilities, as Ubuntu ships for other sandboxes (bwrap-userns-restrict).
	fixAppArmor = "install an AppArmor profile that grants `userns,` to the jail binary: contrib/apparmor/jail of jail's source " +
		"(`install -m 644 contrib/apparmor/jail /etc/apparmor.d/jail`), or write " +
		"`abi <abi/4.0>, include <tunables/global> profile jail /usr/local/bin/jail flags=(unconfined) { userns, }` " +
		"to /etc/apparmor.d/jail (either with your jail's path), then run `apparmor_parser -r /etc/apparmor.d/jail`; " +
		"or run `sysctl kernel.apparmor_restrict_unprivileged_userns=0` (for every program)"
	fixMaxUserNamespaces = "run `sysctl -w user.max_user_namespaces=15000` (persist it in /etc/sysctl.d/)"
	fixUnprivilegedClone = "run `sysctl -w kernel.unprivileged_userns_clone=1` (persist it in /etc/sysctl.d/)"
	fixNoUserNS          = "use a kernel built with CONFIG_USER_NS=y"
	fixContainer         = "if jail runs in a container, let it create user namespaces " +
		"(docker: --security-opt seccomp=unconfined --security-opt apparmor=unconfined)"
	fixProbeBinary = "install coreutils so /bin/true exists, then check again"
)

// usernsFacts is what the user namespace probe found.
type usernsFacts struct {
	// Root is true if the caller's euid is 0.
	Root bool
	// ProbeErr is nil if a child could be started in a new user namespace
	// (with a mount namespace and the caller's id mapped, as jail does), and
	// otherwise the error the start returned.
	ProbeErr error
	// ProbeBinaryErr is non-nil if the probe binary could not run even
	// without new namespaces, so ProbeErr says nothing about namespaces.
	ProbeBinaryErr error
	// ProbeBinary is the path of the probe binary.
	ProbeBinary string
	// MaxUserNamespaces, UnprivilegedClone and AppArmorRestrict hold the
	// trimmed contents of the sysctl files, or "" if the file is absent.
	MaxUserNamespaces string
	UnprivilegedClone string
	AppArmorRestrict  string
}

// sysctls renders the sysctls that were found, for the detail line.
func (u usernsFacts) sysctls() string {
	var s []string
	for _, kv := range []struct{ name, value string }{
		{"max_user_namespaces", u.MaxUserNamespaces},
		{"unprivileged_userns_clone", u.UnprivilegedClone},
		{"apparmor_restrict_unprivileged_userns", u.AppArmorRestrict},
	} {
		if kv.value != "" {
			s = append(s, kv.name+"="+kv.value)
		}
	}
	if len(s) == 0 {
		return "no userns sysctls"
	}
	return strings.Join(s, ", ")
}

// usernsFeature judges the user namespace probe and picks the fix for the
// most likely cause of a failure.
func usernsFeature(u usernsFacts) Feature {
	f := Feature{Name: nameUserNS}
	if u.ProbeErr == nil {
		f.Verdict = OK
		f.Detail = "created one (" + u.sysctls() + ")"
		return f
	}
	if u.ProbeBinaryErr != nil {
		f.Verdict = Warn
		f.Detail = fmt.Sprintf("cannot tell: probe %s does not run: %v (%s)", u.ProbeBinary, u.ProbeBinaryErr, u.sysctls())
		f.Fix = fixProbeBinary
		return f
	}
	f.Verdict = Missing
	f.Detail = fmt.Sprintf("clone(CLONE_NEWUSER|CLONE_NEWNS): %v (%s)", u.ProbeErr, u.sysctls())
	denied := errors.Is(u.ProbeErr, syscall.EPERM) || errors.Is(u.ProbeErr, syscall.EACCES)
	switch {
	case u.MaxUserNamespaces == "0":
		f.Fix = fixMaxUserNamespaces
	case errors.Is(u.ProbeErr, syscall.ENOSPC):
		// The caller already owns max_user_namespaces of them.
		f.Fix = fixMaxUserNamespaces
	case errors.Is(u.ProbeErr, syscall.EINVAL) || errors.Is(u.ProbeErr, syscall.ENOSYS):
		f.Fix = fixNoUserNS
	case !u.Root && denied && u.UnprivilegedClone == "0":
		f.Fix = fixUnprivilegedClone
	case !u.Root && denied && u.AppArmorRestrict == "1":
		f.Fix = fixAppArmor
	default:
		f.Fix = fixContainer
	}
	return f
}
