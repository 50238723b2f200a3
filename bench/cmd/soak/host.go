package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/jailrt/jail/internal/procfs"
)

// host is a snapshot of what jail runs must never leave on the host.
type host struct {
	mounts      int      // lines of /proc/self/mountinfo
	jailMounts  []string // mount points or sources that mention jail
	processes   []string // "PID: CMDLINE" of processes of our jail binary or with our soak marker
	cgroups     []string // per-run cgroup directories ("jail-*") of the jails the soak started
	cgroupTasks int      // processes in those directories
	ptys        int      // /proc/sys/kernel/pty/nr: ptys in use on the host
	ptyHolders  []string // "PID (COMM)" of our processes holding a pty (the ptmx or a /dev/pts/N)
	temp        []string // entries of the temporary directories
	state       []string // entries of /run/jail; nil when it does not exist

	// Not counted: what other jails (another user of this machine, a
	// concurrent test suite) have in the same places.
	otherCgroups, otherStale int      // their groups, and those whose owner is gone
	otherTemp                []string // entries of this repository's other tools (otherTools) or of other users
	otherPtyHolders          int      // other processes holding a pty
}

// otherTools are prefixes of what the go tool and this repository's other
// tests and benchmarks put in /tmp; a concurrent run of them is not a leak
// of the soak's jails.
var otherTools = []string{"go-build", "jail-it-", "jail-bench"}

// stateDir is where jail would keep state on the host, if it ever does.
const stateDir = "/run/jail"

// observer takes snapshots for one soak.
type observer struct {
	jail       string   // our jail binary: its processes are ours
	marker     string   // "soak-<pid>-": the prefix of our workloads' markers
	cgroupDirs []string // where jail makes its per-run groups
	tempDirs   []string // whose entries are watched
	skipTemp   []string // our own entries there (the soak's directory, -o)
	// started says whether the soak started the jail process pid with
	// this start time: its groups are ours.
	started func(pid int, start uint64) bool
	// uids that can own a file our jails create on the host: ours (the
	// jail process) and, run as root, 65534, which jail maps the jail's
	// ids to. An entry of another owner is another user's.
	uids []uint32
}

func (ob *observer) snapshot() host {
	var h host
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	h.mounts = bytes.Count(mi, []byte("\n"))
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, "jail") {
			h.jailMounts = append(h.jailMounts, line)
		}
	}
	h.processes = ob.processes()
	ob.cgroups(&h)
	b, _ := os.ReadFile("/proc/sys/kernel/pty/nr")
	h.ptys, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	if h.ptys > 0 {
		ob.ptyHolders(&h)
	}
	for _, d := range ob.tempDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			switch {
			case slices.Contains(ob.skipTemp, p):
			case slices.ContainsFunc(otherTools, func(pre string) bool { return strings.HasPrefix(e.Name(), pre) }),
				!slices.Contains(ob.uids, ownerOf(p)):
				h.otherTemp = append(h.otherTemp, p)
			default:
				h.temp = append(h.temp, p)
			}
		}
	}
	if ents, err := os.ReadDir(stateDir); err == nil {
		h.state = []string{}
		for _, e := range ents {
			h.state = append(h.state, filepath.Join(stateDir, e.Name()))
		}
	}
	return h
}

// processes lists the processes of our jail binary (the jail and its
// jail:init, which re-executes it) and those whose command line holds our
// soak's marker (the workloads).
func (ob *observer) processes() []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	self := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		pid := filepath.Base(d)
		if pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		line := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		if strings.Contains(line, ob.marker) || exeOf(pid) == ob.jail {
			found = append(found, pid+": "+line)
		}
	}
	return found
}

// ptyHolders fills in who holds the ptys in use. A pty lives as long as a
// descriptor of it, so a pty a jail leaked has a jail process holding it,
// and a pty only other processes hold is theirs (a terminal, a test of
// another suite).
func (ob *observer) ptyHolders(h *host) {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	seen := map[string]bool{}
	for _, fd := range fds {
		pid := strings.Split(fd, "/")[2]
		if seen[pid] {
			continue
		}
		target, _ := os.Readlink(fd)
		if !strings.Contains(target, "ptmx") && !strings.Contains(target, "pts/") {
			continue
		}
		seen[pid] = true
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(string(cmdline), ob.marker) || exeOf(pid) == ob.jail {
			h.ptyHolders = append(h.ptyHolders, fmt.Sprintf("%s (%s)", pid, procfs.Comm(atoi(pid))))
		} else {
			h.otherPtyHolders++
		}
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// exeOf returns the binary process pid runs, without the " (deleted)" the
// kernel appends when it was replaced.
func exeOf(pid string) string {
	exe, _ := os.Readlink("/proc/" + pid + "/exe")
	return strings.TrimSuffix(exe, " (deleted)")
}

// cgroups fills in the per-run groups below our own cgroup in every
// hierarchy: "jail-<pid>-<start time>-<pidns>-<seq>" (cgroup/name.go),
// where pid and start time name the jail process that made it. Those of
// the jails the soak started are ours; the others (another engineer's
// jails, a test suite sharing the hierarchy) are only counted.
func (ob *observer) cgroups(h *host) {
	for _, parent := range ob.cgroupDirs {
		m, _ := filepath.Glob(filepath.Join(parent, "jail-*"))
		for _, d := range m {
			f := strings.Split(strings.TrimPrefix(filepath.Base(d), "jail-"), "-")
			var pid int
			var start uint64
			if len(f) == 4 {
				pid, _ = strconv.Atoi(f[0])
				start, _ = strconv.ParseUint(f[1], 10, 64)
			}
			if ob.started == nil || !ob.started(pid, start) {
				h.otherCgroups++
				if st, ok := procfs.ReadStat(pid); !ok || st.StartTime != start {
					h.otherStale++
				}
				continue
			}
			h.cgroups = append(h.cgroups, d)
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			h.cgroupTasks += len(strings.Fields(string(b)))
		}
	}
}

// leak is one thing the runs left on the host.
type leak struct {
	kind string // one of the leak kinds below
	what string
}

func (l leak) String() string { return l.kind + ": " + l.what }

// Leak kinds.
const (
	leakMount   = "mount"
	leakProcess = "process"
	leakCgroup  = "cgroup"
	leakPty     = "pty"
	leakTemp    = "temp file"
	leakState   = "state"
)

// leaks lists what after holds that before did not.
func leaks(before, after host) []leak {
	var out []leak
	if d := after.mounts - before.mounts; d > 0 {
		out = append(out, leak{leakMount, fmt.Sprintf("%d more mounts in the mount namespace jail ran in", d)})
	}
	for _, s := range []struct {
		kind          string
		before, after []string
	}{
		{leakMount, before.jailMounts, after.jailMounts},
		{leakProcess, before.processes, after.processes},
		{leakCgroup, before.cgroups, after.cgroups},
		{leakTemp, before.temp, after.temp},
		{leakState, before.state, after.state},
	} {
		for _, x := range added(s.before, s.after) {
			if s.kind == leakTemp {
				x += describe(x)
			}
			out = append(out, leak{s.kind, x})
		}
	}
	if d := after.cgroupTasks - before.cgroupTasks; d > 0 {
		out = append(out, leak{leakProcess, fmt.Sprintf("%d processes in the left cgroups", d)})
	}
	// More ptys in use is a leak when a process of ours holds one, or no
	// process is found holding them; not when only others hold theirs.
	if d := after.ptys - before.ptys; d > 0 && (len(after.ptyHolders) > 0 || after.otherPtyHolders == 0) {
		out = append(out, leak{leakPty, fmt.Sprintf("%d more in use (/proc/sys/kernel/pty/nr %d -> %d), held by %v", d, before.ptys, after.ptys, after.ptyHolders)})
	}
	return out
}

// ownerOf returns the uid that owns path, or the largest uid when it is
// gone.
func ownerOf(path string) uint32 {
	fi, err := os.Lstat(path)
	if err != nil {
		return ^uint32(0)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

// describe says who owns path and when it changed last, to tell a file of
// another user of the machine from one a jail left.
func describe(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return " (gone)"
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return ""
	}
	kind := "file"
	switch {
	case fi.IsDir():
		kind = "directory"
	case fi.Mode()&os.ModeSymlink != 0:
		kind = "symlink"
	}
	return fmt.Sprintf(" (%s, uid %d, modified %s UTC)", kind, st.Uid, fi.ModTime().UTC().Format("15:04:05.000"))
}

func added(before, after []string) []string {
	var out []string
	for _, x := range after {
		if !slices.Contains(before, x) {
			out = append(out, x)
		}
	}
	return out
}
