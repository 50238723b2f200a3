/*
 * spawn.h: the host side's spawn of a child stage (spawn.c). Unlike the
 * rest of this directory it runs in the Go parent, on a thread locked by
 * nsexec.Start, not in the stage.
 */
#ifndef JAIL_SPAWN_H
#define JAIL_SPAWN_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

struct spawn_req {
	const char *path;
	int exec_fd; /* >= 0: execveat(exec_fd, "", AT_EMPTY_PATH) instead of path */
	char *const *argv;
	char *const *envp;
	/* fds[i] becomes descriptor i of the child; the rest of the child's
	 * table is the parent's, all close-on-exec (Go opens everything so). */
	const int *fds;
	int nfds;
	uint64_t clone_flags; /* namespaces (CLONE_NEW*) only */
	int cgroup_fd;	      /* >= 0: CLONE_INTO_CGROUP */
	/* With CLONE_NEWUSER: written by the parent to /proc/PID/... while
	 * the child waits. NULL: not written. */
	const char *uid_map, *gid_map;
	int setgroups_allow;
	/* Credentials set in the child before exec: uid, gid, and setgroups(0)
	 * unless no_setgroups; ambient capabilities raised (a bit per cap). */
	int set_cred, no_setgroups;
	uid_t uid;
	gid_t gid;
	uint64_t ambient;
	int pdeathsig;
};

/* jail_spawn starts req->path in a child made by clone3(CLONE_VM) on a
 * stack of its own, without copying the parent's address space. Returns
 * the child's pid and its pidfd (*pidfd), or -errno; *child_err is set
 * when the child itself failed (then it has exited, and must be reaped). */
long jail_spawn(const struct spawn_req *req, int *pidfd, int *child_err);

extern int jail_spawn_test_kill_after_clone;

/* jail_spawn_supported is 0 on architectures without the clone3 trampoline. */
extern const int jail_spawn_supported;

/* jail_nofile_at_start is RLIMIT_NOFILE as the process started, before the
 * Go runtime raised its soft limit; children get it back. */
extern struct rlimit jail_nofile_at_start;

#endif
