package jail

import (
	"fmt"
	"os"

	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/mounts"
)

// Warnings says, one line each, what in s will likely fail inside the jail
// though the run starts: today, bind sources (and a Root) that the jail's
// user cannot reach. Run as root, a jail's ids map to HostUID and HostGID
// (65534 unless given), so a source in a 0700 directory (`mktemp -d`, a
// home directory) is shut out, and the workload meets a bare EACCES. The
// CLI prints these before the run; nothing is refused, as the workload may
// not need the source.
func (s *Spec) Warnings() []string {
	if os.Geteuid() != 0 {
		return nil // an unprivileged caller's jail has the caller's own access
	}
	// Root's jail runs as the host ids: mapped to them in a user
	// namespace, or set to them without one.
	uid, gid := s.hostIDs()
	var out []string
	check := func(field, path string, write bool) {
		why := hostfs.Unreachable(path, uid, gid, write)
		if why == "" {
			return
		}
		verb := "read"
		if write {
			verb = "write"
		}
		out = append(out, fmt.Sprintf("%s %q: the jail's user, host uid %d, cannot %s it: %s (make it reachable, e.g. chmod o+rx, or give --host-uid/host_uid an id that may: never 0 for code you do not trust)", field, path, uid, verb, why))
	}
	if s.Root != "" {
		check("root", s.Root, false)
	}
	for i, m := range s.Mounts {
		if m.Type == mounts.Bind || m.Type == mounts.ROBind {
			check(fmt.Sprintf("mounts[%d].source", i), m.Source, m.Type == mounts.Bind)
		}
	}
	return out
}
