// Package nsexec is jail's re-exec plumbing: the plan the Go parent hands to
// its re-executed child, the wire format that carries it, the sync messages,
// and the C stage (nsexec.c) that carries the plan out before the Go runtime
// starts.
//
// # Linking the child stage
//
// The child role is taken by a cgo constructor that runs before main in every
// binary that links this package, when argv[0] is "jail:init". Importing the
// root package github.com/jailrt/jail links it; a program that starts jails
// from a binary that does not import jail must import this package for its
// side effect, as runc does with nsenter:
//
//	import _ "github.com/jailrt/jail/nsexec"
//
// The package knows nothing about policy: it does not decide which mounts,
// ids or limits a jail gets, it only encodes what the caller computed and
// executes it. Requires Linux 5.12 (mount_setattr, openat2, the new mount
// API) and cgo.
//
// # Pipes
//
//	parent (Go)                                 child "jail:init" (C, PID 1 of the jail)
//	 plan pipe  W ──── header + records ──────▶ fd 3  read to the end, decoded, closed
//	 sync sock  ◀──── PTY + master (SCM_RIGHTS)  fd 4  with FlagTTY, before READY
//	            ◀──── READY ───────────────────        after the root is built
//	            ───── GO ──────────────────────▶        (parent: cgroups, capture ready)
//	            ◀──── SETUP_ERROR{step,errno} ──        any step failed: child exits
//	            ◀──── EXEC_ERROR{step,errno} ───        workload could not be executed
//	            ◀──── STARTED ──────────────────        workload execve succeeded
//	            ◀──── SECCOMP{nr,arch,pid} ─────        a call the filter killed or denied
//	            ◀──── EXITED{wait status} ──────        workload ended; child exits and the
//	                                                    kernel kills the rest of the jail
//	 cgroup v1 "tasks" files ─────────────────▶ fd 5...  the child writes "0" to each, first
//	 host sources (O_PATH) ───────────────────▶ SourceFD(n, 1)...  checked by inode, then closed
//
// The sync socket is SOCK_SEQPACKET, so every message is one datagram of
// [MsgSize] bytes; a descriptor rides on MsgPTY only. EOF on the child's end
// means the parent is gone: the child exits and takes the jail with it.
package nsexec
