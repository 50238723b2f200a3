package cgroup

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jailrt/jail/internal/procfs"
)

// namePrefix starts the name of every per-run group, so that [Prune]
// touches nothing else.
const namePrefix = "jail-"

// owner identifies the process that created a per-run group. A pid alone
// could be reused after the owner died; its start time cannot (two processes
// with one pid cannot start in the same clock tick). The pid namespace
// tells which /proc can answer.
type owner struct {
	// PID is the owner's pid in PIDNS.
	PID int
	// StartTime is field 22 of /proc/PID/stat: clock ticks after boot.
	StartTime uint64
	// PIDNS is the inode number of the owner's pid namespace.
	PIDNS uint64
	// Seq numbers the owner's groups.
	Seq uint64
}

// name returns the group's directory name:
// "jail-<pid>-<start time>-<pidns inode>-<seq>".
func (o owner) name() string { return o.nameWith(namePrefix) }

// nameWith is name with another prefix.
func (o owner) nameWith(prefix string) string {
	return fmt.Sprintf("%s%d-%d-%d-%d", prefix, o.PID, o.StartTime, o.PIDNS, o.Seq)
}

// parseName decodes a directory name made by [owner.name].
func parseName(name string) (owner, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return owner{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 4 {
		return owner{}, false
	}
	var nums [4]uint64
	for i, p := range parts {
		// Digits only: ParseUint would also take "+1" or leading zeros we
		// never write.
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.TrimLeft(p, "0123456789") != "" {
			return owner{}, false
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return owner{}, false
		}
		nums[i] = n
	}
	if nums[0] == 0 || nums[0] > 1<<22 {
		return owner{}, false
	}
	return owner{PID: int(nums[0]), StartTime: nums[1], PIDNS: nums[2], Seq: nums[3]}, true
}

// parseStatStartTime returns field 22 (starttime) of /proc/PID/stat.
func parseStatStartTime(stat string) (uint64, error) {
	st, ok := procfs.ParseStat([]byte(stat))
	if !ok {
		return 0, fmt.Errorf("parse /proc/PID/stat: %.40q", stat)
	}
	return st.StartTime, nil
}

// parseNameOK reports whether name is one [Prune] would take as a per-run
// group's.
func parseNameOK(name string) bool {
	_, ok := parseName(name)
	return ok
}
