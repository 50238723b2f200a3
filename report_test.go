package jail

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func exitedWith(code int) *syscall.WaitStatus {
	ws := syscall.WaitStatus(code << 8)
	return &ws
}

func killedBy(sig syscall.Signal) *syscall.WaitStatus {
	ws := syscall.WaitStatus(sig)
	return &ws
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      outcome
		status Status
		code   int
		signal string
		step   string // Error.Step, "" for none
		err    bool   // Wait returns an error: the command never ran
		lost   bool
	}{
		{"exited 0", outcome{Exited: exitedWith(0)}, StatusExited, 0, "", "", false, false},
		{"exited 3", outcome{Exited: exitedWith(3)}, StatusExited, 3, "", "", false, false},
		{"killed by TERM", outcome{Exited: killedBy(syscall.SIGTERM)}, StatusSignaled, 143, "TERM", "", false, false},
		{"a SIGKILL alone is a signal", outcome{Exited: killedBy(syscall.SIGKILL)}, StatusSignaled, 137, "KILL", "", false, false},
		{"seccomp kill", outcome{Exited: killedBy(syscall.SIGKILL), SeccompKilled: true}, StatusSeccompKilled, 137, "KILL", "", false, false},
		{"seccomp names only a SIGKILL", outcome{Exited: killedBy(syscall.SIGSEGV), SeccompKilled: true}, StatusSignaled, 139, "SEGV", "", false, false},
		{"OOM kill reported", outcome{Exited: killedBy(syscall.SIGKILL), OOMKilled: true}, StatusOOMKilled, 137, "KILL", "", false, false},
		{"seccomp before OOM", outcome{Exited: killedBy(syscall.SIGKILL), SeccompKilled: true, OOMKilled: true}, StatusSeccompKilled, 137, "KILL", "", false, false},
		{"an OOM that exits 0 is an exit", outcome{Exited: exitedWith(0), OOMKilled: true}, StatusExited, 0, "", "", false, false},
		{"OOM took PID 1 before its report", outcome{OOMKilled: true}, StatusOOMKilled, 137, "KILL", "", false, false},
		{"timeout beats the KILL it caused", outcome{KillReason: StatusTimedOut, Exited: killedBy(syscall.SIGKILL)}, StatusTimedOut, 124, "", "", false, false},
		{"timeout beats an OOM", outcome{KillReason: StatusTimedOut, OOMKilled: true}, StatusTimedOut, 124, "", "", false, false},
		{"cpu time", outcome{KillReason: StatusCPUTimeExceeded}, StatusCPUTimeExceeded, 124, "", "", false, false},
		{"canceled", outcome{KillReason: StatusCanceled, Cause: errors.New("bye")}, StatusCanceled, 125, "", "run", false, false},
		{"not found", outcome{ExecFailed: true, ExecStep: "execve", ExecErrno: syscall.ENOENT, Command: "nope"}, StatusSetupError, 127, "", "execve", true, false},
		{"not executable", outcome{ExecFailed: true, ExecStep: "execve", ExecErrno: syscall.EACCES, Command: "x"}, StatusSetupError, 126, "", "execve", true, false},
		{"a failed workload step", outcome{ExecFailed: true, ExecStep: "rlimits", ExecErrno: syscall.EPERM}, StatusSetupError, 126, "", "rlimits", true, false},
		{"the caller's SIGKILL", outcome{KillSent: true}, StatusSignaled, 137, "KILL", "", false, false},
		{"supervisor lost", outcome{Lost: "jail init ended"}, StatusSignaled, 137, "KILL", "supervisor", false, true},
		{"the caller's kill beats a lost supervisor", outcome{KillSent: true, Lost: "jail init ended"}, StatusSignaled, 137, "KILL", "", false, false},
		{"a step of PID 1's after GO", outcome{Failed: &InitError{Step: "reap workload", Err: syscall.EAGAIN}}, StatusSetupError, 125, "", "reap workload", true, false},
		{"the caller's kill beats a failed step", outcome{KillSent: true, Failed: &InitError{Step: "reap workload", Err: syscall.EAGAIN}}, StatusSignaled, 137, "KILL", "", false, false},
		{"died before any report", outcome{Died: errors.New("EOF")}, StatusSetupError, 125, "", "init", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.o)
			assert.Equal(t, tc.status, v.Status)
			assert.Equal(t, tc.code, v.ExitCode)
			assert.Equal(t, tc.signal, v.Signal)
			assert.Equal(t, tc.lost, v.SupervisorLost)
			assert.Equal(t, tc.err, v.Err != nil, "got err %v", v.Err)
			if tc.step == "" {
				assert.Nil(t, v.Error)
			} else if assert.NotNil(t, v.Error) {
				assert.Equal(t, tc.step, v.Error.Step)
			}
		})
	}
}
