// Package landlock plans jail's second wall: a Landlock ruleset
// (landlock(7), Linux 5.13) the workload restricts itself with, after
// no_new_privs and before seccomp, so that a bug in the mount plan or the
// seccomp policy alone is not enough to reach what the plan did not mean
// to expose.
//
// The rules come from the plan's intent, mount by mount ([FromMounts]):
// read and execute beneath read-only binds, also write beneath writable
// ones, read and write (no execute) in /proc and /dev, directory listing
// only for the root of the default tmpfs root. Everything the running
// kernel's Landlock ABI can restrict is handled; what it cannot is named
// ([Missing]): truncate (ABI 3), device ioctls (ABI 5), signals and
// abstract unix sockets outside the jail (ABI 6, scopes), unix sockets
// reached by path, such as a host socket below a read-only bind (ABI 9).
//
// Landlock rules hold for whole subtrees, so the rule that lets a workload
// list the default root's / also lets it list the names in a mount the plan
// did not mean; their contents stay refused.
//
// The package plans; nsexec's C stage carries the rules out, on what each
// op of the mount plan made at a rule's path (kept as a descriptor when it
// was made, so a symlink planted later is not followed), in the workload
// just before seccomp. It needs no privilege.
package landlock
