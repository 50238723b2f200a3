package jail_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jailrt/jail"
)

// This example embeds jail in a program: it runs a shell command in a jail,
// captures its output and prints the report. It has no Output line because
// it needs root or unprivileged user namespaces; it is compiled, not run.
//
// Importing jail, directly or through another package, links the child
// stage: a cgo constructor in package nsexec that takes over the process
// before main when jail re-executes the binary as "jail:init". Nothing else
// is needed, and main never sees that run. A separate helper binary named in
// Cmd.HelperPath that does not import jail must link the child stage for its
// side effect, as runc's binaries import nsenter:
//
//	import _ "github.com/jailrt/jail/nsexec"
//
// Either way the binary needs cgo (CGO_ENABLED=1).
func ExampleCommand() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	spec := jail.Spec{
		Hostname: "box",
		Timeout:  jail.Duration(2 * time.Second),
	}
	c := jail.Command(ctx, spec, "sh", "-c", "echo hello from $(hostname)")
	c.Capture = true
	if err := c.Run(); err != nil {
		// jail could not run the command at all; c.Result says the same
		// with status setup_error.
		switch {
		case errors.Is(err, jail.ErrInvalidSpec):
			fmt.Println("bad spec:", err)
		case errors.Is(err, jail.ErrNotSupported):
			fmt.Println("this host cannot provide the jail:", err)
		default:
			fmt.Println("jail failed:", err)
		}
		return
	}
	// Run returns nil whenever the workload ran: its outcome is in Result.
	fmt.Println(c.Result.Status, c.Result.ExitCode)
	fmt.Print(c.Result.Stdout)
	// A root caller would see:
	//	exited 0
	//	hello from box
}

// This example keeps a jail up as a session and runs commands in it, as an
// agent's code-execution backend would: the files one command writes are
// there for the next. Compiled, not run (it needs root or unprivileged user
// namespaces).
func ExampleSessions() {
	ctx := context.Background()
	m := &jail.Sessions{} // state in /run/jail, or $XDG_RUNTIME_DIR/jail
	s, err := m.Create(ctx, jail.SessionSpec{
		IdleTimeout: 10 * time.Minute, // PID 1 ends the session after 10 idle minutes
		Spec:        jail.Spec{MemoryMaxBytes: 512 << 20, Timeout: jail.Duration(30 * time.Second)},
	})
	if err != nil {
		fmt.Println("create:", err)
		return
	}
	defer s.Remove()

	for _, script := range []string{"echo 6*7 > /tmp/q", "echo $(( $(cat /tmp/q) ))"} {
		c := s.Command(ctx, "sh", "-c", script)
		c.Capture = true
		if err := c.Run(); err != nil {
			fmt.Println("exec:", err)
			return
		}
		// The report is a run's: its own CPU time, memory peak, OOM kills.
		fmt.Print(c.Result.Status, " ", c.Result.Stdout)
	}

	// Later, perhaps from another process:
	if _, err := m.Get(s.ID()); errors.Is(err, jail.ErrNotFound) {
		fmt.Println("the session has ended")
	}
}
