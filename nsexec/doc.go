// Package nsexec is jail's re-exec plumbing: the plan the Go parent hands to
// its re-executed child, the wire format that carries it, the sync messages,
// and the C stage (nsexec.c and the files beside it) that carries the plan out before the Go runtime
// starts.
//
// # The child stage
//
// On amd64, [Start] runs the stage from a small static binary embedded in
// this package (stage/build.sh links the C files with musl; `go generate
// ./nsexec` rebuilds it, reproducibly), from a memfd sealed against any
// change, with execveat. The same C code is also linked into every binary
// that imports this package as a cgo constructor that runs before main when
// argv[0] is "jail:init" or "jail:exec": that is the stage where none is
// embedded, or when [Config.Path] names a program. Importing the root
// package github.com/jailrt/jail links it; a program that starts jails with
// a helper binary that does not import jail must import this package for
// its side effect, as runc does with nsenter:
//
//	import _ "github.com/jailrt/jail/nsexec"
//
// The stage is started by spawn.c with clone3(CLONE_VM) on a stack of its
// own, so that the parent's memory is not copied for each jail; see
// ARCHITECTURE.md.
//
// The package knows nothing about policy: it does not decide which mounts,
// ids or limits a jail gets, it only encodes what the caller computed and
// executes it. Requires Linux 5.12 (mount_setattr, openat2, the new mount
// API) and cgo.
//
// # Pipes
//
//	parent (Go)                                 child "jail:init" (C, PID 1 of the jail)
//	 plan pipe  W ──── jail plan (JPL1) ──────▶ fd 3  decoded; the pipe stays open
//	 sync sock  ◀──── READY ───────────────────  fd 4  after the root is built; with FlagNetfilter
//	                                                    a NETLINK_NETFILTER socket of the jail's
//	                                                    network namespace rides on it (SCM_RIGHTS)
//	 plan pipe  W ──── process plan (JPP1) ───▶       written before GO, read after it
//	            ───── GO ──────────────────────▶        (parent: cgroups, capture ready)
//	            ◀──── PTY + master (SCM_RIGHTS)         with FlagTTY, made after GO
//	            ◀──── SETUP_ERROR{step,errno} ──        any step failed: child exits
//	            ◀──── EXEC_ERROR{step,errno} ───        workload could not be executed
//	            ◀──── STARTED ──────────────────        workload execve succeeded
//	            ◀──── SECCOMP{nr,arch,pid} ─────        a call the filter killed or denied
//	            ◀──── EXITED{wait status} ──────        workload ended; child exits and the
//	                                                    kernel kills the rest of the jail
//	 cgroup v1 "tasks" files ─────────────────▶ fd 5...  the child writes "0" to each, first
//	 sync sock  ───── CGROUP + "tasks" files ─▶ fd 4   with FlagCgroupLate instead: read after the
//	                                                    mount plan, then the same writes (SCM_RIGHTS)
//	 host sources (O_PATH) ───────────────────▶ SourceFD(n, 1)...  checked by inode, then closed
//	 extra descriptors ───────────────────────▶ ExtraFD(n, m)...  by role, below
//
// A session (FlagSession) gets no process plan: at GO its PID 1 sends
// STARTED, closes the sync socket and stays up, reaping, until its TTL or
// idle timeout (timerfds) or a SIGTERM from outside the jail. Its extra
// descriptor is a listening control socket in the session's state
// directory; each command holds a connection to it while it runs (PID 1
// answers one byte when it takes it), which is what "not idle" means.
//
// A command of a session is "jail:exec" with a join plan (FlagJoin): the
// same pipes and messages, no mounts; its extra descriptors are a pidfd of
// the session's PID 1, with FlagTimeNS PID 1's time_for_children, and with
// FlagJoinKill the process's cgroup.kill. It enters the namespaces with
// setns(pidfd), forks the process into the jail's PID namespace and
// reports on it as PID 1 does for a run. EOF on its sync socket while the
// process runs kills the process's group, then its cgroup.
//
// The sync socket is SOCK_SEQPACKET, so every message is one datagram of
// [MsgSize] bytes; descriptors ride on MsgPTY, on MsgReady with
// FlagNetfilter, and on MsgCgroup (to the child), only. EOF on the child's end
// means the parent is gone: the child exits and takes the jail (or the
// joined process) with it; a session's PID 1 no longer listens by then.
package nsexec
