package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jailrt/jail/bench/internal/procfs"
)

// host is a snapshot of what jail runs must never leave on the host.
type host struct {
	mounts      int      // lines of /proc/self/mountinfo
	jailMounts  []string // mount points or sources that mention jail
	processes   []string // "PID: CMDLINE" of processes of our jail binary or with our soak marker
	cgroups     []string // per-run cgroup directories ("jail-*") of our jail binary or of a dead owner
	cgroupTasks int      // processes in those directories
	ptys        int      // /proc/sys/kernel/pty/nr: ptys in use on the host
	temp        []string // entries of the temporary directories
	state       []string // entries of /run/jail; nil when it does not exist
}

// stateDir is where jail would keep state on the host, if it ever does.
const stateDir = "/run/jail"

// observer takes snapshots for one soak.
type observer struct {
	jail       string   // our jail binary: its processes are ours
	marker     string   // "soak-<pid>-": the prefix of our workloads' markers
	cgroupDirs []string // where jail makes its per-run groups
	tempDirs   []string // whose entries are watched
	skipTemp   []string // our own entries there (the soak's directory, -o)
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
	for _, d := range ob.cgroups() {
		h.cgroups = append(h.cgroups, d)
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		h.cgroupTasks += len(strings.Fields(string(b)))
	}
	b, _ := os.ReadFile("/proc/sys/kernel/pty/nr")
	h.ptys, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	for _, d := range ob.tempDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if !slices.Contains(ob.skipTemp, p) && !strings.HasPrefix(e.Name(), "go-build") { // the go tool's, e.g. a concurrent build
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

// exeOf returns the binary process pid runs, without the " (deleted)" the
// kernel appends when it was replaced.
func exeOf(pid string) string {
	exe, _ := os.Readlink("/proc/" + pid + "/exe")
	return strings.TrimSuffix(exe, " (deleted)")
}

// cgroups lists the per-run groups below our own cgroup in every
// hierarchy that are ours to count: those whose owner (the jail process
// named in "jail-<pid>-<start time>-<pidns>-<seq>", see cgroup/name.go) is
// our jail binary or gone. A live owner that is another binary (another
// engineer's jail or tests sharing the cgroup) is left out.
func (ob *observer) cgroups() []string {
	var ours []string
	for _, parent := range ob.cgroupDirs {
		m, _ := filepath.Glob(filepath.Join(parent, "jail-*"))
		for _, d := range m {
			f := strings.Split(strings.TrimPrefix(filepath.Base(d), "jail-"), "-")
			if len(f) == 4 {
				pid, _ := strconv.Atoi(f[0])
				start, _ := strconv.ParseUint(f[1], 10, 64)
				if st, ok := procfs.ReadStat(pid); ok && st.StartTime == start && exeOf(f[0]) != ob.jail {
					continue
				}
			}
			ours = append(ours, d)
		}
	}
	return ours
}

// ownCgroupDirs returns this process's cgroup directory in each hierarchy,
// as integration/main_test.go's allJailCgroups finds them: jail creates
// its per-run groups below the cgroup it runs in (without
// --cgroup-parent), and the soak's jails run in the soak's.
func ownCgroupDirs() []string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		cands := []string{"/sys/fs/cgroup" + parts[2], "/sys/fs/cgroup/unified" + parts[2]}
		if parts[1] != "" {
			cands = []string{"/sys/fs/cgroup/" + strings.TrimPrefix(parts[1], "name=") + parts[2]}
		}
		for _, d := range cands {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// leaks lists what after holds that before did not.
func leaks(before, after host) []string {
	var out []string
	if d := after.mounts - before.mounts; d > 0 {
		out = append(out, fmt.Sprintf("%d more mounts in the host's mount namespace", d))
	}
	for _, s := range []struct {
		what          string
		before, after []string
	}{
		{"mount mentioning jail", before.jailMounts, after.jailMounts},
		{"process", before.processes, after.processes},
		{"cgroup", before.cgroups, after.cgroups},
		{"temp file", before.temp, after.temp},
		{"state", before.state, after.state},
	} {
		for _, x := range added(s.before, s.after) {
			out = append(out, s.what+": "+x)
		}
	}
	if d := after.cgroupTasks - before.cgroupTasks; d > 0 {
		out = append(out, fmt.Sprintf("%d processes in left cgroups", d))
	}
	if d := after.ptys - before.ptys; d > 0 {
		out = append(out, fmt.Sprintf("%d more ptys in use (/proc/sys/kernel/pty/nr %d -> %d)", d, before.ptys, after.ptys))
	}
	return out
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
