// Package jailfs carries out file operations on a jail's files from
// inside the jail: the Go half of a session's files helper ("jail:files"),
// whose C stage has joined the session's user and mount namespaces and
// become its workload's user, with its limits, no capabilities,
// no_new_privs and its Landlock rules, before the Go runtime started.
//
// Every path is the jail's: the helper's root is the jail's root, and
// paths are resolved with openat2(2) RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS from it, so a symlink the workload planted leads
// to the jail's own files, never the host's (the Judge0 and `kubectl cp`
// class of bugs cannot happen: the host never resolves a path of the
// jail). Writes never follow a final symlink and refuse a target that is
// not a regular file; a file is written to an unnamed file (O_TMPFILE)
// and linked in under its name only once all of it is written and synced,
// so a write that fails, runs out of space or is killed leaves no partial
// file. Tar input ([Extract]) refuses absolute names, "..", device nodes,
// FIFOs and links that leave the destination, and resolves every entry
// beneath the destination (RESOLVE_BENEATH); the same code unpacks a
// jail's tar on the host.
//
// The helper loads a seccomp allow-list of its own ([LoadFilter]) before
// it reads its request. The package does not decide what may be done:
// the parent asks, and the kernel, with the workload's credentials,
// answers.
//
// Requires Linux 5.6 (openat2).
package jailfs
