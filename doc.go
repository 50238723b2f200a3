// Package jail runs untrusted commands in Linux jails and reports exactly
// what happened.
//
// # Threat model
//
// The workload is hostile: it may try to read host files, signal or trace
// host processes, reach the network, regain privileges, exhaust resources or
// escape through jail's own binary. jail puts it in fresh user, pid, mount,
// net, uts, ipc, cgroup and (where the kernel has it) time namespaces, over
// a read-only root that holds only read-only system directories, a minimal
// /etc, a masked /proc and a minimal /dev; its ids map to an unprivileged
// host id (or, for an unprivileged caller, to the caller's own); it runs
// with no capabilities, no_new_privs, no controlling terminal and no
// inherited file descriptors beyond 0-2, under rlimits and a wall-clock
// timeout that kills every process of the jail. jail needs no setuid helper.
// It does not defend against kernel bugs reachable from an unprivileged user
// namespace; the seccomp filters (see the seccomp package) narrow that
// surface. Anything a Spec asks for that the host cannot provide refuses the
// run, unless the caller allows unenforced settings and reads the report.
//
// # Use
//
//	spec := jail.Spec{Timeout: jail.Duration(2 * time.Second)}
//	c := jail.Command(ctx, spec, "python3", "-c", "print(6*7)")
//	c.Capture = true
//	if err := c.Run(); err != nil { ... } // jail could not run it
//	fmt.Println(c.Result.Status, c.Result.Stdout)
//
// Importing this package links the child stage (package nsexec): on amd64
// a small C binary embedded in it, run from a sealed memfd, and everywhere a
// cgo constructor that takes over the process before main when jail
// re-executes the binary as "jail:init" (other architectures, or
// Cmd.HelperPath). A program that embeds jail therefore needs cgo and must
// not strip the constructor; it needs nothing else.
package jail
