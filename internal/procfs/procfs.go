// Package procfs reads the few /proc files jail and its tools look at: a
// process's children, command name and start time, and this process's
// cgroup directories.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Children lists pid's children from /proc/PID/task/*/children
// (CONFIG_PROC_CHILDREN), or by scanning every /proc/N/stat for the parent
// pid when the kernel lacks it.
func Children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if len(tasks) > 0 {
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := ReadStat(n); ok && st.PPID == pid {
			out = append(out, n)
		}
	}
	return out
}

// Comm returns the command name of pid (/proc/PID/comm), or "" when it is
// gone.
func Comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// Stat is what the bench tools use of /proc/PID/stat.
type Stat struct {
	// State is field 3: R, S, D, Z (zombie), X (dead), ...
	State byte
	// PPID is field 4.
	PPID int
	// StartTime is field 22, in clock ticks after boot. A pid can be
	// reused; pid and start time together name one process.
	StartTime uint64
}

// ReadStat reads /proc/PID/stat; ok is false when the process is gone or
// the file cannot be parsed.
func ReadStat(pid int) (st Stat, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, false
	}
	return ParseStat(b)
}

// ParseStat parses the contents of /proc/PID/stat. The command name, field
// 2, is in parentheses and may itself hold blanks and parentheses, so the
// fields are counted after the last ')'.
func ParseStat(b []byte) (st Stat, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, StartTime: start}, true
}

// OwnCgroupDirs returns this process's cgroup directory in each hierarchy
// mounted at the usual places (/sys/fs/cgroup/<controller>, the cgroup2
// tree at /sys/fs/cgroup or /sys/fs/cgroup/unified), from
// /proc/self/cgroup: where jail, run from this process without
// --cgroup-parent, makes its per-run groups. The soak and the integration
// tests look there for leaked groups (and check that they find a running
// jail's, so that a host laid out otherwise fails rather than hides them).
func OwnCgroupDirs() []string {
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

// Identity tells a process apart from a later one with the same pid: a pid
// can be reused, a pid with its start time cannot (two processes with one
// pid cannot start in the same clock tick), and the PID namespace says
// which /proc can answer.
type Identity struct {
	// StartTime is field 22 of /proc/PID/stat, in clock ticks after boot.
	StartTime uint64
	// PIDNS is the inode number of the process's PID namespace.
	PIDNS uint64
	// State is field 3 of /proc/PID/stat: 'Z' for a zombie.
	State byte
}

// ReadIdentity reads the identity of proc, a pid or "self".
func ReadIdentity(proc string) (Identity, error) {
	p := "/proc/" + proc + "/stat"
	b, err := os.ReadFile(p)
	if err != nil {
		return Identity{}, err
	}
	st, ok := ParseStat(b)
	if !ok {
		return Identity{}, fmt.Errorf("parse %s: %.40q", p, b)
	}
	ns := "/proc/" + proc + "/ns/pid"
	fi, err := os.Stat(ns)
	if err != nil {
		return Identity{}, err
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Identity{}, fmt.Errorf("stat %s: no inode", ns)
	}
	return Identity{StartTime: st.StartTime, PIDNS: sys.Ino, State: st.State}, nil
}

// SelfPIDNS returns the inode of this process's PID namespace, the one
// the pids it sees are numbered in, and an error if /proc is another PID
// namespace's (unshare -p without its own /proc), whose pids would name
// other processes. /proc is ours when it shows us by our pid, and by that
// one only (an ancestor's shows one per namespace level: NSpid).
func SelfPIDNS() (uint64, error) {
	self, err := os.Readlink("/proc/self")
	if err == nil && self == strconv.Itoa(os.Getpid()) {
		var status []byte
		if status, err = os.ReadFile("/proc/self/status"); err == nil {
			for _, line := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, "NSpid:"); ok && len(strings.Fields(v)) == 1 {
					id, err := ReadIdentity("self")
					return id.PIDNS, err
				}
			}
		}
	}
	return 0, fmt.Errorf("/proc is not this process's PID namespace's (/proc/self is %q, this process %d)", self, os.Getpid())
}

// OwnerTag names this process on objects it makes that outlive it
// elsewhere (a container, a Pod): "BOOT:PIDNS:PID:START", the boot id, the
// inode of its PID namespace, its pid there and its start time.
func OwnerTag() string {
	id, err := ReadIdentity("self")
	if err != nil {
		return ""
	}
	// A /proc of another PID namespace (unshare -p without its own
	// /proc) names this process by another pid: no tag, which no one
	// can judge gone.
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(os.Getpid()) {
		return ""
	}
	return bootID() + ":" + strconv.FormatUint(id.PIDNS, 10) + ":" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatUint(id.StartTime, 10)
}

// OwnerGone reports whether the process an OwnerTag names has certainly
// ended: its pid is free, or holds another process, or a zombie. Whatever
// this process cannot judge counts as alive: a malformed tag, another PID
// namespace than its own (a jail in a container sharing the engine), a
// /proc it may not read. A tag of another boot is gone when otherBootGone
// (the engine runs on this machine, which has rebooted since) and alive
// otherwise (a cluster's objects made by another machine).
func OwnerGone(tag string, otherBootGone bool) bool {
	f := strings.Split(tag, ":")
	if len(f) != 4 || f[0] == "" {
		return false
	}
	if f[0] != bootID() {
		return otherBootGone
	}
	self, err := ReadIdentity("self")
	if err != nil || strconv.FormatUint(self.PIDNS, 10) != f[1] {
		return false
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil || pid <= 0 {
		return false
	}
	id, err := ReadIdentity(f[2])
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Unless /proc hides other users' processes (hidepid): then
		// pid 1 is hidden too, and a missing pid says nothing.
		_, err := os.Stat("/proc/1/stat")
		return err == nil
	case err != nil:
		return false
	}
	return strconv.FormatUint(id.StartTime, 10) != f[3] || id.State == 'Z'
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
