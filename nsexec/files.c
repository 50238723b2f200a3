//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* files.c: "jail:files": the helper that works on a session's files. It
 * joins the jail's user and mount namespaces as "jail:exec" does, becomes
 * the workload's user with the workload's limits and none of its
 * privileges, and then, unlike every other role, returns: the constructor
 * hands the process to the Go runtime, which serves one file operation
 * (package jail, files_linux.go). runc's init does the same after its C
 * nsenter. Part of jail's child stage; nsexec.c has the tables. Never in
 * the standalone stage (stage/): that one has no Go to hand over to.
 *
 * It joins no PID namespace: only a thread's children enter one, and once
 * pid_ns_for_children differs the kernel refuses the runtime's threads.
 * So it stays outside the jail's PID namespace, where no process of the
 * jail can name it, let alone trace it (CVE-2016-9962), and it is
 * non-dumpable besides. Its root and cwd are the jail's: every path it
 * resolves is the jail's, and a symlink the workload planted leads to the
 * jail's own files, never the host's. */
#include "stage.h"

#ifndef JAIL_STAGE_MAIN

int jail_files_role; /* 1 once run_files has succeeded: the Go side serves */

static int files_join_namespaces(struct plan *p)
{
	return setns(EXTRA_FD(p), (int)p->join_ns);
}

static int files_close_join_fds(struct plan *p)
{
	return (int)syscall(SYS_close_range, EXTRA_FD(p), EXTRA_FD(p) + extra_fds(p) - 1, 0);
}

static int files_require_join(struct plan *p)
{
	/* Only the user and mount namespaces: see above. */
	if ((p->flags & PLAN_JOIN) && (p->flags & (PLAN_TIMENS | PLAN_SECCOMP_NOTIFY)) == 0 &&
	    (p->join_ns & ~(uint32_t)(CLONE_NEWUSER | CLONE_NEWNS)) == 0 && (p->join_ns & CLONE_NEWNS))
		return 0;
	errno = EINVAL;
	return -1;
}

static int files_rlimits(struct plan *p)
{
	for (size_t i = 0; i < p->nrlimits; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].lim) < 0) return -1;
	return 0;
}

static int files_credentials(struct plan *p)
{
	if (drop_bounding_set() < 0) return -1;
	if ((p->pflags & PLAN_SETGROUPS) && setgroups(0, NULL) < 0) return -1;
	if (setresgid(p->gid, p->gid, p->gid) < 0 || setresuid(p->uid, p->uid, p->uid) < 0) return -1;
	/* A change of ids resets the parent-death signal, and sets the
	 * dumpable flag from fs.suid_dumpable, which may be 1: both again. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) return -1;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) return -1;
	return clear_capabilities();
}

static int files_no_new_privs(struct plan *p)
{
	(void)p;
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

static int files_landlock(struct plan *p)
{
	return (p->landlock_fs || p->landlock_scoped) ? apply_landlock(p) : 0;
}

/* files_close_fds keeps 0-2 (the data the operation reads and writes) and
 * moves the sync socket to 3, where the Go side serves on it: no other
 * descriptor, and none of the host's file system, stays (runc
 * CVE-2024-21626). */
static int files_close_fds(struct plan *p)
{
	(void)p;
	if (dup3(SYNC_FD, 3, O_CLOEXEC) < 0) return -1;
	return (int)syscall(SYS_close_range, 4, ~0U, 0);
}

static int files_chdir(struct plan *p)
{
	(void)p;
	umask(022);
	return chdir("/");
}

/* run_files joins the jail and becomes its workload's user, in order; it
 * returns 0 with the process ready for the Go runtime, or -1 with the
 * failed step's name in *step. The step order is the workload's (see
 * run_workload): the bounding set before the ids, the ids before the other
 * capability sets, capabilities before no_new_privs. No seccomp filter
 * here: the Go runtime's own start needs calls the helper's filter does
 * not allow, and the Go side loads it, for every thread, before it reads
 * its request. */
static int run_files(struct plan *p, const char **step)
{
	static const struct step steps[] = {
		{"read plan", read_plan, 0, 0},
		{"read plan", files_require_join, 0, 0},
		{"join cgroup", join_cgroup, 0, 0},
		{"join namespaces", files_join_namespaces, 0, 0},
		{"close join descriptors", files_close_join_fds, 0, 0},
		{"wait for parent", wait_for_go, 0, 0},
		{"read process", read_process, 0, 0},
		{"rlimits", files_rlimits, 0, 0},
		{"credentials", files_credentials, 0, 0},
		{"no_new_privs", files_no_new_privs, 0, 0},
		{"landlock", files_landlock, 0, 0},
		{"chdir", files_chdir, 0, 0},
		{"close fds", files_close_fds, 0, 0}, /* last: a failure before it is reported on SYNC_FD */
	};
	if (RUN_STEPS(steps, p, step) < 0) return -1;
	jail_files_role = 1;
	return 0;
}

/* files_main runs the files role and returns to let the Go runtime start,
 * or exits after reporting the failed step as every role does. */
void files_main(void)
{
	static struct plan plan;
	const char *step = "non-dumpable";
	prctl(PR_SET_NAME, "jail:files", 0, 0, 0);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0) {
		step = "parent-death signal";
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0 && run_files(&plan, &step) == 0) return;
	}
	int e = errno;
	/* The sync socket is still SYNC_FD unless "close fds" moved it. */
	struct sync_msg m = {.type = MSG_SETUP_ERROR, .err = e, .index = -1};
	strncpy(m.step, step, sizeof m.step - 1);
	if (send(SYNC_FD, &m, sizeof m, MSG_NOSIGNAL) < 0) (void)!send(3, &m, sizeof m, MSG_NOSIGNAL);
	_exit(1);
}

#endif
