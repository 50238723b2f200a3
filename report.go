package jail

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// outcome is what is known of a run (or a command of a session) once it
// has ended: the facts its report is judged from. Wait gathers them; judge
// turns them into a status without looking at anything else.
type outcome struct {
	// KillReason is why jail killed it (timed_out, cpu_time_exceeded,
	// canceled), or "".
	KillReason Status
	// Cause is the context's cause, for a canceled run.
	Cause error
	// Exited is the workload's wait status, when its supervisor reported it.
	Exited *syscall.WaitStatus
	// ExecFailed says the workload could not be executed: at ExecStep,
	// with ExecErrno, running Command.
	ExecFailed bool
	ExecStep   string
	ExecErrno  syscall.Errno
	Command    string
	// SeccompKilled: the seccomp policy killed the workload (or, a call
	// taken back, the whole jail). OOMKilled: the cgroup counted an OOM
	// kill. KillSent: the caller sent SIGKILL (Cmd.Signal).
	SeccompKilled, OOMKilled, KillSent bool
	// Lost says how the supervisor ended after the workload started, or
	// was let go to start, when it did so without a report.
	Lost string
	// Failed is a step of PID 1's that failed after GO, before the
	// workload ran (its process plan, the terminal, the fork).
	Failed *InitError
	// Died explains a stage that ended before any report.
	Died error
}

// verdict is the report's judgement of an outcome.
type verdict struct {
	Status         Status
	ExitCode       int
	Signal         string
	SupervisorLost bool
	Error          *ErrorInfo
	// Err is what Wait returns: non-nil only when the workload never ran.
	Err error
}

// judge decides how a run ended. The order is the point: a kill jail
// decided wins over the SIGKILL it caused; a reported status over what the
// cgroup saw; a SIGKILL is a seccomp kill or an OOM kill only when those
// were seen.
func judge(o outcome) verdict {
	killed := func(v verdict) verdict {
		v.ExitCode, v.Signal = 128+int(syscall.SIGKILL), signalName(syscall.SIGKILL)
		return v
	}
	switch {
	case o.KillReason == StatusCanceled:
		return verdict{Status: StatusCanceled, ExitCode: ExitSetupError,
			Error: &ErrorInfo{Step: "run", Message: "canceled: " + fmt.Sprint(o.Cause)}}
	case o.KillReason != "":
		// The kill was decided before the workload's end was known: PID 1
		// may still report the SIGKILL that the kill caused.
		return verdict{Status: o.KillReason, ExitCode: ExitTimedOut}
	case o.Exited != nil && o.Exited.Signaled():
		sig := o.Exited.Signal()
		v := verdict{Status: StatusSignaled, ExitCode: 128 + int(sig), Signal: signalName(sig)}
		switch {
		case o.SeccompKilled && sig == syscall.SIGKILL:
			v.Status = StatusSeccompKilled
		case o.OOMKilled && sig == syscall.SIGKILL:
			v.Status = StatusOOMKilled
		}
		return v
	case o.Exited != nil:
		return verdict{Status: StatusExited, ExitCode: o.Exited.ExitStatus()}
	case o.ExecFailed:
		err := &InitError{Step: o.ExecStep, Detail: o.Command, Err: o.ExecErrno}
		v := verdict{Status: StatusSetupError, ExitCode: ExitNotExecutable, Err: err,
			Error: &ErrorInfo{Step: err.Step, Errno: errnoName(err.Err), Message: err.Error()}}
		if o.ExecErrno == syscall.ENOENT {
			v.ExitCode = ExitNotFound
		}
		return v
	case o.OOMKilled:
		// memory.oom.group took PID 1 with the workload, before its report.
		return killed(verdict{Status: StatusOOMKilled})
	case o.KillSent:
		return killed(verdict{Status: StatusSignaled})
	case o.Failed != nil:
		return verdict{Status: StatusSetupError, ExitCode: ExitSetupError, Err: o.Failed,
			Error: &ErrorInfo{Step: o.Failed.Step, Errno: errnoName(o.Failed.Err), Message: o.Failed.Error()}}
	case o.Lost != "":
		// PID 1 died under the workload, which the kernel killed with it
		// (the PID namespace, or its parent-death signal): what is known
		// of the workload is that it ran and was killed.
		return killed(verdict{Status: StatusSignaled, SupervisorLost: true,
			Error: &ErrorInfo{Step: "supervisor", Message: o.Lost + "; the workload was killed with it"}})
	default:
		err := &InitError{Step: "init", Err: o.Died}
		return verdict{Status: StatusSetupError, ExitCode: ExitSetupError, Err: err,
			Error: &ErrorInfo{Step: "init", Message: err.Error()}}
	}
}

// signalName returns "KILL" for SIGKILL.
func signalName(s syscall.Signal) string {
	return strings.TrimPrefix(unix.SignalName(s), "SIG")
}
