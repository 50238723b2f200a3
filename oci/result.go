package oci

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
)

// Frame is the start of a container backend's report: what is known of a
// run before it ends. m is nil when the Spec could not be mapped;
// namespaces are those the container has, in the report's order.
func Frame(s *jail.Spec, m *Mapping, backend, reason string, capture bool, namespaces []string) *jail.Result {
	r := &jail.Result{Schema: jail.Schema, Output: "streamed", StdoutEncoding: "utf-8", StderrEncoding: "utf-8",
		SeccompDenials: []jail.SeccompDenial{}, LimitsHit: []string{}}
	if capture {
		r.Output = "captured"
	}
	iso := &r.Isolation
	iso.Backend, iso.BackendReason = backend, reason
	iso.Namespaces, iso.UIDMap, iso.GIDMap, iso.NotEnforced = []string{}, []jail.IDMap{}, []jail.IDMap{}, []string{}
	iso.Landlock = jail.LandlockInfo{Enforced: []string{}, Missing: []string{}}
	iso.Network = jail.NetworkInfo{Mode: jail.NetworkNone, Allow: []jail.AllowInfo{}}
	iso.Root, iso.RootPath, iso.Cgroup = "image", s.Image, "none"
	iso.UID, iso.GID = jail.DefaultUID, jail.DefaultUID
	if m != nil {
		if namespaces != nil {
			iso.Namespaces = namespaces
		}
		iso.NotEnforced = append(iso.NotEnforced, m.NotEnforced...)
		iso.Seccomp = m.SeccompName
		iso.Network.Mode = m.NetworkMode
		iso.UID, iso.GID = m.Spec.Process.User.UID, m.Spec.Process.User.GID
	}
	if s.Landlock != jail.LandlockOff {
		iso.Landlock.Missing = []string{"fs: the runtime-spec has no Landlock ruleset"}
	}
	return r
}

// Signaled judges a death by signal sig, as a runtime reports it (exit
// status 128+sig): a SIGSYS under a seccomp policy is its kill, whose call
// the runtime does not name.
func Signaled(r *jail.Result, sig syscall.Signal, m *Mapping) {
	r.Status, r.ExitCode, r.Signal = jail.StatusSignaled, 128+int(sig), strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if sig == syscall.SIGSYS && m.Spec.Linux.Seccomp != nil {
		r.Status = jail.StatusSeccompKilled
		r.SeccompDenials = append(r.SeccompDenials, jail.SeccompDenial{Syscall: "unknown", Action: "kill", Workload: true})
		r.SeccompDenialsTotal = 1
	}
}
