package nsexec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Fixed facts of the child protocol. nsexec.h holds the same values;
// TestConstantsMatchC checks them.
const (
	// InitArg0 is argv[0] of the re-executed child; it selects the child role.
	InitArg0 = "jail:init"
	// PlanFD is the child's fd for the read end of the plan pipe.
	PlanFD = 3
	// SyncFD is the child's end of the sync socket.
	SyncFD = 4

	planMagic    = 0x314c504a // "JPL1"
	maxPlanBytes = 16 << 20
	maxPlanItems = 65536
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
)

// MsgSize is the size of one sync message on the wire.
const MsgSize = 64

// Msg is one sync message.
type Msg struct {
	Type MsgType
	// Errno is the error number, for MsgSetupError and MsgExecError.
	Errno int32
	// Status is the workload's wait status for MsgExited, and its pid in
	// the child's PID namespace for MsgStarted.
	Status int32
	// Index is the failed mount op's index for the "mount plan" and
	// "open mount sources" steps, else -1.
	Index int32
	// Step names the step that failed.
	Step string
}

// MarshalBinary encodes m as one wire message.
func (m Msg) MarshalBinary() ([]byte, error) {
	b := make([]byte, MsgSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(m.Type))
	binary.LittleEndian.PutUint32(b[4:], uint32(m.Errno))
	binary.LittleEndian.PutUint32(b[8:], uint32(m.Status))
	binary.LittleEndian.PutUint32(b[12:], uint32(m.Index))
	if len(m.Step) > 47 {
		return nil, fmt.Errorf("sync message step %q longer than 47 bytes", m.Step)
	}
	copy(b[16:], m.Step)
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
	step := b[16:]
	for i, c := range step {
		if c == 0 {
			step = step[:i]
			break
		}
	}
	m.Step = string(step)
	if m.Type < MsgReady || m.Type > MsgExited {
		return errors.New("sync message of unknown type " + fmt.Sprint(m.Type))
	}
	return nil
}
