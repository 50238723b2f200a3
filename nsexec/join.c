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
 * session until it ends, but for what traces pid (see kill_tracers): the
 * helper waits for pid's death on its pidfd and with WNOHANG, not in
 * wait(2), and kills pid's tracers in the jail until it can reap it. */
void end_joined(pid_t pid, int pidfd)
{
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	kill_joined_cgroup();
	struct pollfd w = {pidfd, POLLIN, 0};
	for (;;) {
		if (poll(&w, 1, TRACER_GRACE_MS) > 0) w.fd = -1; /* it has ended; a pidfd stays readable */
		siginfo_t ws = {0};
		if (waitid(P_PID, (id_t)pid, &ws, WEXITED | WNOHANG) == 0 && ws.si_pid == pid) _exit(1);
		kill_tracers(pid); /* it is traced, or not dead yet */
	}
}

/* status_field returns the number after key (as "\nTracerPid:") in the
 * status file dir/name/status, or -1. */
static pid_t status_field(int dir, const char *name, const char *key)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "%s/status", name);
	int fd = openat(dir, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return -1;
	buf[n] = 0;
	char *f = strstr(buf, key);
	if (!f) return -1;
	long v = 0;
	for (f += strlen(key); *f == ' ' || *f == '\t'; f++) {}
	for (; *f >= '0' && *f <= '9' && v < 1 << 22; f++) v = v * 10 + (*f - '0');
	return (pid_t)v;
}

/* same_link says whether the /proc links a (our host /proc's) and b lead
 * to the same namespace. */
static int same_link(const char *a, const char *b)
{
	char la[64], lb[64];
	ssize_t na = readlinkat(host_proc, a, la, sizeof la), nb = readlinkat(host_proc, b, lb, sizeof lb);
	return na > 0 && na == nb && memcmp(la, lb, (size_t)na) == 0;
}

/* kill_tracers kills the processes of the jail that trace a thread of
 * pid, the joined process, once it has ended or was told to die and is
 * still not ours to reap TRACER_GRACE_MS later. A traced zombie is its
 * tracer's to wait for first: until the tracer lets go, its parent gets no
 * SIGCHLD and cannot reap it, and a tracer that never does (a process the
 * command started, PTRACE_SEIZE from outside its process group, under a
 * policy that allows ptrace) would hold the command's end, and its
 * caller, for good, timeout or not. Its death hands the zombie back, and
 * the helper reaps it and reports its own status. Only tracers in the
 * jail's PID namespace are killed (a debugger on the host lets go at
 * once), each through a pidfd of its process taken while it still traces
 * the thread: never a recycled pid. */
void kill_tracers(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "%d/task", (int)pid);
	int dfd = openat(host_proc, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) return;
	static char dents[2048]; /* struct linux_dirent64s: ino 8, off 8, reclen 2, type 1, name */
	long n;
	while ((n = syscall(SYS_getdents64, dfd, dents, sizeof dents)) > 0)
		for (long off = 0; off < n;) {
			const char *tid = dents + off + 19;
			unsigned short reclen;
			memcpy(&reclen, dents + off + 16, sizeof reclen);
			off += reclen;
			if (*tid < '0' || *tid > '9') continue;
			pid_t t = status_field(dfd, tid, "\nTracerPid:"), g;
			if (t <= 0) continue;
			/* The tracer is a thread: its process, the one a pidfd takes. */
			char tracer[16];
			snprintf(tracer, sizeof tracer, "%d", (int)t);
			if ((g = status_field(host_proc, tracer, "\nTgid:")) <= 0) continue;
			int tfd = (int)syscall(SYS_pidfd_open, g, 0);
			if (tfd < 0) continue;
			/* Checked once the pidfd holds g: t still traces the thread
			 * and is a thread of g, in the jail (our children's PID
			 * namespace is the jail's). */
			snprintf(path, sizeof path, "%d/task/%d/ns/pid", (int)g, (int)t);
			if (status_field(dfd, tid, "\nTracerPid:") == t && same_link(path, "self/ns/pid_for_children"))
				syscall(SYS_pidfd_send_signal, tfd, SIGKILL, NULL, 0);
			close(tfd);
		}
	close(dfd);
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
