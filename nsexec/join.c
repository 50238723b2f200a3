//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* join.c: "jail:exec": joining a running jail (a session) to run one process
 * in it. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"

static int pid_depth(int dir, const char *name);

/* open_host_proc opens the /proc of the helper's own PID namespace, before
 * it enters the jail: its children's pids, the seccomp notifications' and
 * those kill_tracers reads in status files are numbered there. A /proc of
 * another namespace (a container's /proc over the host's PID namespace,
 * or the reverse) would name other processes by those numbers, and
 * kill_tracers could not tell the jail's tracers: refused. It is ours when
 * it shows us by our pid, and by that one only. */
static int open_host_proc(struct plan *p)
{
	(void)p;
	char self[16], want[16];
	if ((host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return -1;
	ssize_t n = readlinkat(host_proc, "self", self, sizeof self);
	if (n < 0) return -1;
	int w = snprintf(want, sizeof want, "%d", (int)getpid());
	/* Our pid there, and one only: an ancestor's /proc shows more. */
	if (n == w && memcmp(self, want, (size_t)n) == 0 && pid_depth(host_proc, "self") == 1) return 0;
	errno = EXDEV;
	return -1;
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
		if (waitid(P_PID, (id_t)pid, &ws, WEXITED | WNOHANG) == 0 && ws.si_pid == pid &&
		    ws.si_code != CLD_TRAPPED && ws.si_code != CLD_STOPPED) /* a stop of a PTRACE_TRACEME child */
			_exit(1);
		kill_tracers(pid, 1); /* it is traced, or not dead yet */
	}
}

/* status_line finds the line of dir/name/status that starts with key (as
 * "TracerPid:") and copies the rest of it, up to size - 1 bytes, into buf;
 * it returns buf, or NULL. It reads on to the end of the file if need be:
 * a long Groups: line (hundreds of groups, or one gid set thousands of
 * times) comes before NSpid:. */
static const char *status_line(int dir, const char *name, const char *key, char *buf, size_t size)
{
	char path[64], chunk[1024];
	snprintf(path, sizeof path, "%s/status", name);
	int fd = openat(dir, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return NULL;
	size_t klen = strlen(key), col = 0, out = 0;
	int match = 1, found = 0; /* match: the line so far agrees with key */
	ssize_t n;
	while (!found && (n = read(fd, chunk, sizeof chunk)) > 0)
		for (ssize_t i = 0; i < n && !found; i++) {
			if (chunk[i] == '\n') {
				found = match && col >= klen;
				if (!found) col = out = 0, match = 1;
				continue;
			}
			if (col < klen) match = match && chunk[i] == key[col];
			else if (match && out < size - 1) buf[out++] = chunk[i];
			col++;
		}
	close(fd);
	buf[out] = 0;
	return found || (match && col >= klen) ? buf : NULL;
}

/* status_field returns the number after key in dir/name/status, or -1. */
static pid_t status_field(int dir, const char *name, const char *key)
{
	char buf[64];
	const char *f = status_line(dir, name, key, buf, sizeof buf);
	if (!f) return -1;
	long v = 0;
	for (; *f == ' ' || *f == '\t'; f++) {}
	for (; *f >= '0' && *f <= '9' && v < 1 << 22; f++) v = v * 10 + (*f - '0');
	return (pid_t)v;
}

/* pid_depth returns in how many PID namespaces, from our /proc's down to
 * its own, the thread dir/name has a pid (the numbers on its status's
 * NSpid: line), or -1. Status files are world-readable, unlike ns links. */
static int pid_depth(int dir, const char *name)
{
	char buf[512]; /* 32 levels of pids at most */
	const char *f = status_line(dir, name, "NSpid:", buf, sizeof buf);
	if (!f) return -1;
	int d = 0;
	for (;;) {
		for (; *f == ' ' || *f == '\t'; f++) {}
		if (*f < '0' || *f > '9') return d;
		for (d++; *f >= '0' && *f <= '9'; f++) {}
	}
}

/* same_link says whether the /proc links a (our host /proc's) and b lead
 * to the same namespace: 1, 0, or -1 when one cannot be read (ns links
 * need ptrace access to their process). */
static int same_link(const char *a, const char *b)
{
	char la[64], lb[64];
	ssize_t na = readlinkat(host_proc, a, la, sizeof la), nb = readlinkat(host_proc, b, lb, sizeof lb);
	if (na <= 0 || nb <= 0) return -1;
	return na == nb && memcmp(la, lb, (size_t)na) == 0;
}

/* leader_ended says whether the thread pid, our unreaped child, has ended:
 * its state in /proc/pid/stat (after the name's last ')') is a zombie's. */
int leader_ended(pid_t pid)
{
	char path[32], buf[512];
	snprintf(path, sizeof path, "%d/stat", (int)pid);
	int fd = openat(host_proc, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return 0;
	buf[n] = 0;
	char *r = strrchr(buf, ')');
	return r && r[1] == ' ' && (r[2] == 'Z' || r[2] == 'X');
}

/* each_thread calls f for each thread of pid (its /proc/pid/task
 * entries) until f returns non-zero, and returns that, or 0; -1 when the
 * process has no task directory (reaped). */
static int each_thread(pid_t pid, int (*f)(int dfd, const char *tid))
{
	char path[32];
	snprintf(path, sizeof path, "%d/task", (int)pid);
	int dfd = openat(host_proc, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	if (dfd < 0) return -1;
	static char dents[2048]; /* struct linux_dirent64s: ino 8, off 8, reclen 2, type 1, name */
	long n;
	while (r == 0 && (n = syscall(SYS_getdents64, dfd, dents, sizeof dents)) > 0)
		for (long off = 0; r == 0 && off < n;) {
			const char *tid = dents + off + 19;
			unsigned short reclen;
			memcpy(&reclen, dents + off + 16, sizeof reclen);
			off += reclen;
			if (*tid >= '0' && *tid <= '9') r = f(dfd, tid);
		}
	close(dfd);
	return r;
}

/* runs_on says whether the thread dfd/tid has not ended: neither a zombie
 * nor dead. */
static int runs_on(int dfd, const char *tid)
{
	char buf[64];
	const char *st = status_line(dfd, tid, "State:", buf, sizeof buf);
	if (!st) return 0; /* gone */
	for (; *st == ' ' || *st == '\t'; st++) {}
	return *st != 'Z' && *st != 'X';
}

/* kill_tracer kills the tracer of the thread dfd/tid if it is a process of
 * the jail. */
static int kill_tracer(int dfd, const char *tid)
{
	pid_t t = status_field(dfd, tid, "TracerPid:"), g;
	if (t <= 0) return 0;
	int depth = pid_depth(dfd, tid);
	/* The tracer is a thread: its process, the one a pidfd takes. */
	char tracer[16], task[32], path[64];
	snprintf(tracer, sizeof tracer, "%d", (int)t);
	if ((g = status_field(host_proc, tracer, "Tgid:")) <= 0) return 0;
	int tfd = (int)syscall(SYS_pidfd_open, g, 0);
	if (tfd < 0) return 0;
	/* Checked once the pidfd holds g: t still traces the thread and is a
	 * thread of g, in the jail (our children's PID namespace is the
	 * jail's). */
	snprintf(task, sizeof task, "%d/task/%d", (int)g, (int)t);
	snprintf(path, sizeof path, "%s/ns/pid", task);
	if (status_field(dfd, tid, "TracerPid:") == t && depth > 0 && pid_depth(host_proc, task) == depth &&
	    same_link(path, "self/ns/pid_for_children") != 0)
		syscall(SYS_pidfd_send_signal, tfd, SIGKILL, NULL, 0);
	close(tfd);
	return 0;
}

/* kill_tracers kills the processes of the jail that trace a thread of
 * pid, the joined process, once it was told to die (killed) or has ended
 * and is still not ours to reap TRACER_GRACE_MS later; it returns 0, and
 * kills none, when the process runs on. A traced zombie is its
 * tracer's to wait for first: until the tracer lets go, its parent gets no
 * SIGCHLD and cannot reap it, and a tracer that never does (a process the
 * command started, PTRACE_SEIZE from outside its process group, under a
 * policy that allows ptrace) would hold the command's end, and its
 * caller, for good, timeout or not. Its death hands the zombie back, and
 * the helper reaps it and reports its own status. Only tracers in the
 * jail's PID namespace are killed (a debugger on the host lets go at
 * once), each through a pidfd of its process taken while it still traces
 * the thread: never a recycled pid. The namespace is told by depth (a
 * tracer has as many pids as the thread it traces: a shallower one is
 * outside the jail, and no deeper one can name the thread) and, where
 * the ns links can be read, by identity. */
int kill_tracers(pid_t pid, int killed)
{
	/* A leader that ended alone (SYS_exit, as pthread_exit does) leaves
	 * its process running, traced or not (strace -f, a debugger): only
	 * one all of whose threads have ended is over. A thread a tracer
	 * holds in its exit stop (PTRACE_O_TRACEEXIT) has not, and waits for
	 * the timeout's kill. */
	if (!killed && each_thread(pid, runs_on) != 0) return 0;
	each_thread(pid, kill_tracer);
	return 1;
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
