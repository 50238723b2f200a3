//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* join.c: "jail:exec": joining a running jail (a session) to run one process
 * in it. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"

static int open_host_proc(struct plan *p)
{
	(void)p;
	return (host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ? -1 : 0;
}

/* join_namespaces enters the jail's namespaces at once through a pidfd of
 * its PID 1 (setns(2) with a pidfd, Linux 5.8): the user namespace first
 * in the kernel's order, so the others are joined with its capabilities.
 * Joining the PID namespace makes our next child a process of the jail;
 * joining the mount namespace sets our root and cwd to the jail's root. */
static int join_namespaces(struct plan *p)
{
	return setns(EXTRA_FD(p), (int)p->join_ns);
}

/* join_time enters the jail's time namespace, the one its PID 1 made for
 * its children (ns/time_for_children), for our next child. After this no
 * thread can be made on some kernels, hence after the listener. */
static int join_time(struct plan *p)
{
	return setns(EXTRA_FD(p) + 1, CLONE_NEWTIME);
}


/* join_ns_fds is how many of the extra descriptors are namespaces: the
 * pidfd, and time_for_children with PLAN_TIMENS. */
uint32_t join_ns_fds(const struct plan *p)
{
	return (p->flags & PLAN_TIMENS) ? 2 : 1;
}

/* kill_fd is the joined process's cgroup2 cgroup.kill (PLAN_JOIN_KILL),
 * or -1. The workload does not inherit it: it closes every descriptor
 * above its stdio and error channel before its execve (workload.c). */
static int kill_fd = -1;

/* close_join_fds closes the namespaces once joined, and keeps cgroup.kill. */
static int close_join_fds(struct plan *p)
{
	if (p->flags & PLAN_JOIN_KILL) kill_fd = EXTRA_FD(p) + (int)join_ns_fds(p);
	return (int)syscall(SYS_close_range, EXTRA_FD(p), EXTRA_FD(p) + join_ns_fds(p) - 1, 0);
}

/* kill_joined_cgroup writes "1" to the joined process's cgroup.kill
 * (PLAN_JOIN_KILL): everything in its cgroup dies, what left its process
 * group with setsid and this helper too. It returns only without that
 * descriptor, or if the write failed. */
void kill_joined_cgroup(void)
{
	if (kill_fd >= 0) (void)!write(kill_fd, "1", 1);
}

/* end_joined ends the joined process pid when the parent went away: its
 * process group (pid is its leader from its first instruction on, see
 * run_workload), then, with PLAN_JOIN_KILL, everything in its cgroup and
 * this helper. Without that descriptor what left the group runs on in the
 * session until it ends. The helper waits for pid's death through pidfd,
 * not wait(2): a zombie that another process of the session traces cannot
 * be reaped until its tracer lets go, and the helper would wait for good.
 * Left unreaped, it goes to the jail's PID 1 with our exit. */
void end_joined(pid_t pid, int pidfd)
{
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	kill_joined_cgroup();
	struct pollfd w = {pidfd, POLLIN, 0};
	while (poll(&w, 1, -1) < 0 && errno == EINTR) {}
	waitpid(pid, NULL, WNOHANG);
	_exit(1);
}

/* zombie_status reads the wait status of our child pid, a zombie that we
 * cannot reap: another process traces it (PTRACE_SEIZE from a process that
 * left its group), and a traced zombie is its tracer's to wait for first.
 * /proc/PID/stat gives it (exit_code, field 52, in waitpid's form) to
 * whoever may ptrace-read pid, which this helper may: it holds every
 * capability in the jail's user namespace and a zombie has no mm to be
 * non-dumpable. To anyone else the field reads 0, indistinguishable from
 * a clean exit; wchan (field 35) tells: 1 for a task that is not running
 * to those permitted, 0 otherwise. -1: not known, and the caller waits on. */
/* decimal parses the unsigned decimal at s, up to 0xffffff; -1 if none
 * (strtol would bring in 3 KB of musl's stdio for two fields). */
static long decimal(const char *s)
{
	long v = 0;
	if (*s < '0' || *s > '9') return -1;
	for (; *s >= '0' && *s <= '9'; s++)
		if ((v = v * 10 + (*s - '0')) > 0xffffff) return -1;
	return v;
}

int zombie_status(pid_t pid, int32_t *status)
{
	char path[32], buf[1024];
	snprintf(path, sizeof path, "%d/stat", (int)pid);
	int fd = openat(host_proc, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return -1;
	buf[n] = 0;
	char *f = strrchr(buf, ')'); /* the command name may hold anything */
	if (!f) return -1;
	long wchan = -1, code = -1;
	/* Fields from 3 (the state) on, each after a space. */
	for (int i = 3; i <= 52 && (f = strchr(f, ' ')); i++) {
		f++;
		if (i == 35) wchan = decimal(f);
		if (i == 52) code = decimal(f);
	}
	if (wchan != 1 || code < 0 || code > 0xffff) return -1;
	*status = (int32_t)code;
	return 0;
}

static int require_join(struct plan *p)
{
	if (p->flags & PLAN_JOIN) return 0;
	errno = EINVAL;
	return -1;
}

/* run_join is "jail:exec": it joins a running jail and runs one process in
 * it, as PID 1 does for a one-shot jail: the same workload steps, the
 * same reports. It stays outside the jail's PID namespace (only its child
 * enters it), non-dumpable and under another uid than the jail's
 * processes, which can neither see nor trace it (CVE-2016-9962). */
int run_join(struct plan *p, const char **step)
{
	static const struct step steps[] = {
		{"read plan", read_plan, 0, 0},
		{"read plan", require_join, 0, 0},
		{"open /proc", open_host_proc, 0, 0},
		{"join cgroup", join_cgroup, 0, 0},
		{"join namespaces", join_namespaces, 0, 0},
		{"cgroup namespace", cgroup_namespace, PLAN_CGROUPNS, 0},
		{"block signals", block_signals_step, 0, 0},
		{"seccomp buffers", seccomp_buffers, PLAN_SECCOMP_NOTIFY, 0},
		{"time namespace", join_time, PLAN_TIMENS, 0},
		{"close join descriptors", close_join_fds, 0, 0},
		{"wait for parent", wait_for_go, 0, 0},
		{"read process", read_process, 0, 0},
		{"terminal", open_terminal, 0, 0},
	};
	if (RUN_STEPS(steps, p, step) < 0) return -1;
	/* From here on this process outlives its parent: killed with it (the
	 * parent-death SIGKILL the spawn set), it would leave the joined
	 * process's children running in the session, unsupervised and past
	 * their timeout. reap_workload's loop sees the sync socket hang up
	 * instead and kills the joined process's group first. Before this a
	 * parent's death kills us with nothing started. */
	*step = "parent-death signal";
	if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0) return -1;
	*step = "reap workload";
	return reap_workload(p);
}
