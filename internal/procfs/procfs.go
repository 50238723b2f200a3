// Package procfs reads the few /proc files jail and its tools look at: a
// process's children, command name and start time.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
