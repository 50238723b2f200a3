package nsexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"
)

// Fixed facts of the child protocol. nsexec.h holds the same values;
// TestConstantsMatchC checks them.
const (
	// InitArg0 is argv[0] of the re-executed child that builds a jail and
	// stays its PID 1; it selects that role.
	InitArg0 = "jail:init"
	// ExecArg0 is argv[0] of the helper that joins a running jail (a
	// session) and runs one process in it.
	ExecArg0 = "jail:exec"
	// FilesArg0 is argv[0] of the helper that joins a session's user and
	// mount namespaces as its workload's user and hands over to the Go
	// runtime, which serves one file operation ([FilesHelper]). It is only
	// ever a re-execution of a Go program that links this package.
	FilesArg0 = "jail:files"
	// PlanFD is the child's fd for the read end of the plan pipe.
	PlanFD = 3
	// SyncFD is the child's end of the sync socket.
	SyncFD = 4
	// CgroupFD is the child's first cgroup "tasks" file (Plan.CgroupFDs).
	CgroupFD     = 5
	maxCgroupFDs = 16
	maxSourceFDs = 512
	maxSysctls   = 8

	planMagic    = 0x314c504a // "JPL1"
	processMagic = 0x3150504a // "JPP1"
	maxPlanBytes = 16 << 20
	maxPlanItems = 65536
	maxBPFInsns  = 4096 // BPF_MAXINSNS
)

// SourceFD is the child's descriptor of host source k (1-based, see
// Mount.Src) when it inherits cgroupFDs cgroup files before the sources.
func SourceFD(cgroupFDs, k uint32) int { return CgroupFD + int(cgroupFDs) + int(k) - 1 }

// MaxSources is how many host sources one plan may pass.
const MaxSources = maxSourceFDs

// ExtraFD is the child's first descriptor after the cgroup files and the
// host sources: a session's control socket (FlagSession), or a join
// helper's pidfd of the jail's PID 1, followed by PID 1's
// time_for_children namespace with FlagTimeNS, then its process's
// cgroup.kill with FlagJoinKill (FlagJoin).
func ExtraFD(cgroupFDs, sources uint32) int { return CgroupFD + int(cgroupFDs) + int(sources) }

// KillJoinedSignal asks a join helper (FlagJoin) to SIGKILL its process's
// process group and then report its end as usual: how the parent ends a
// session's command, whose processes a SIGKILL of the helper alone would
// leave running, reparented to the session's PID 1.
const KillJoinedSignal = syscall.Signal(62)

// Deadlines is the packet that changes a session's deadlines, sent on a
// connection to its control socket; its PID 1 answers "1" once they hold.
// A nil duration leaves that deadline as it is, 0 ends it; ttl counts
// from now. Durations are rounded up to whole milliseconds: never earlier.
func Deadlines(ttl, idle *time.Duration) []byte {
	b := make([]byte, ctlDeadlinesLen)
	b[0] = ctlDeadlines
	for i, d := range []*time.Duration{ttl, idle} {
		v := uint64(ctlKeep)
		if d != nil {
			v = uint64((*d + time.Millisecond - 1) / time.Millisecond)
		}
		binary.NativeEndian.PutUint64(b[1+8*i:], v)
	}
	return b
}

// ResetLayers is the packet that has a session's PID 1 make its overlays
// (an overlay workspace's) again with empty upper layers, once every
// process of the session is gone: it answers "1" when done, "0" when it
// failed, and then ends the session. Sent with descriptors (SCM_RIGHTS),
// one detached mount per overlay in the order of the plan (at most
// MaxLayerTrees), each becomes its overlay's upper lower layer, in place
// of the one before (a snapshot's layer tree, restored).
func ResetLayers() []byte { return []byte{ctlResetLayers} }

// Probe is the packet of a connection that only asks whether a session's
// PID 1 listens: PID 1 closes it, and its idle timeout runs on from where
// it was (any other connection restarts it when it closes).
func Probe() []byte { return []byte{ctlProbe} }

// MaxLayerTrees is how many layer trees a ResetLayers packet may carry.
const MaxLayerTrees = 16

const (
	ctlDeadlines    = 'D'
	ctlDeadlinesLen = 17
	ctlKeep         = math.MaxUint64
	ctlResetLayers  = 'L'
	ctlProbe        = 'P'
)

// Namespace flags a join plan may enter (Plan.JoinNS), as clone(2) names them.
const (
	CloneNewNS   = 0x00020000
	CloneNewUTS  = 0x04000000
	CloneNewIPC  = 0x08000000
	CloneNewUser = 0x10000000
	CloneNewPID  = 0x20000000
	CloneNewNet  = 0x40000000
	joinableNS   = CloneNewNS | CloneNewUTS | CloneNewIPC | CloneNewUser | CloneNewPID | CloneNewNet
)

// MsgType is the kind of a sync message.
type MsgType uint32

// Sync message types, in the order they normally flow.
const (
	MsgReady      MsgType = 1 // child → parent: setup done, waiting for MsgGo
	MsgGo         MsgType = 2 // parent → child: start the workload
	MsgSetupError MsgType = 3 // child → parent: a setup step failed
	MsgExecError  MsgType = 4 // child → parent: the workload could not be executed
	MsgStarted    MsgType = 5 // child → parent: the workload's execve succeeded
	MsgExited     MsgType = 6 // child → parent: the workload's wait status
	MsgSeccomp    MsgType = 7 // child → parent: the seccomp filter denied or killed a call
	MsgPTY        MsgType = 8 // child → parent: the master of the workload's terminal, attached (SCM_RIGHTS)
	MsgCgroup     MsgType = 9 // parent → child: the cgroup v1 "tasks" files to join, attached (FlagCgroupLate)
)

// MsgSize is the size of one sync message on the wire; stepSize of it is
// the step name.
const (
	MsgSize  = 64
	stepSize = 40
)

// Msg is one sync message.
type Msg struct {
	Type MsgType
	// Errno is the error number, for MsgSetupError and MsgExecError.
	Errno int32
	// Status is the workload's wait status for MsgExited, and its pid in
	// the child's PID namespace for MsgStarted.
	Status int32
	// Index is the failed mount op's index for the "mount plan" and
	// "open mount sources" steps, else -1. For MsgExited it is the
	// largest resident set, in KiB, of the processes the stage reaped: the
	// workload and, in a run, every other process of the jail (-1:
	// unknown). The stage's own is not among them.
	Index int32
	// Step names the step that failed.
	Step string
	// PID is the calling thread of a MsgSeccomp event, in the jail's PID
	// namespace.
	PID int32
	// Aux is SeccompKilled|SeccompWorkload for a MsgSeccomp event, and the
	// number of seccomp events (reported or not) for MsgExited.
	Aux int32
}

// Flags of a MsgSeccomp event in Msg.Aux. A MsgSeccomp event carries the
// syscall number in Status, its audit arch in Index and the errno answered
// in Errno (0 when the caller was killed).
const (
	SeccompKilled   = 1 // PID 1 killed the calling process
	SeccompWorkload = 2 // the calling process is the workload itself
	// SeccompInterrupted: a signal made the caller take the call back
	// before PID 1 could read it (the syscall is unknown, Status -1); PID 1
	// killed every process of the jail.
	SeccompInterrupted = 4
)

// MaxSeccompEvents is how many MsgSeccomp events PID 1 sends; it counts
// the rest, and sends the kill that ends the workload whatever the count.
const MaxSeccompEvents = 32

// MarshalBinary encodes m as one wire message.
func (m Msg) MarshalBinary() ([]byte, error) {
	b := make([]byte, MsgSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(m.Type))
	binary.LittleEndian.PutUint32(b[4:], uint32(m.Errno))
	binary.LittleEndian.PutUint32(b[8:], uint32(m.Status))
	binary.LittleEndian.PutUint32(b[12:], uint32(m.Index))
	if len(m.Step) > stepSize-1 {
		return nil, fmt.Errorf("sync message step %q longer than %d bytes", m.Step, stepSize-1)
	}
	copy(b[16:], m.Step)
	binary.LittleEndian.PutUint32(b[16+stepSize:], uint32(m.PID))
	binary.LittleEndian.PutUint32(b[20+stepSize:], uint32(m.Aux))
	return b, nil
}

// UnmarshalBinary decodes one wire message.
func (m *Msg) UnmarshalBinary(b []byte) error {
	if len(b) != MsgSize {
		return fmt.Errorf("sync message of %d bytes, want %d", len(b), MsgSize)
	}
	m.Type = MsgType(binary.LittleEndian.Uint32(b[0:]))
	m.Errno = int32(binary.LittleEndian.Uint32(b[4:]))
	m.Status = int32(binary.LittleEndian.Uint32(b[8:]))
	m.Index = int32(binary.LittleEndian.Uint32(b[12:]))
	step := b[16 : 16+stepSize]
	m.PID = int32(binary.LittleEndian.Uint32(b[16+stepSize:]))
	m.Aux = int32(binary.LittleEndian.Uint32(b[20+stepSize:]))
	for i, c := range step {
		if c == 0 {
			step = step[:i]
			break
		}
	}
	m.Step = string(step)
	if m.Type < MsgReady || m.Type > MsgPTY {
		return errors.New("sync message of unknown type " + fmt.Sprint(m.Type))
	}
	return nil
}
