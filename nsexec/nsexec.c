//go:build linux

// SPDX-License-Identifier: Apache-2.0
/*
 * nsexec.c: jail's child stage. It runs as a constructor, before the Go
 * runtime starts, in the process the Go parent cloned into fresh namespaces
 * and re-executed as "jail:init". It decodes the plan the parent computed
 * (protocol.go documents the wire format and the pipes), carries it out step
 * by step, then stays PID 1 of the jail: it forks the workload, reaps
 * orphans, forwards signals and reports the workload's wait status.
 *
 * It decides nothing: every path, flag and id was validated and resolved by
 * the Go parent. On the first failure it reports {step, op index, errno} on
 * the sync socket and exits.
 *
 * Why C: the child must be single-threaded (setns, unshare(CLONE_NEWTIME))
 * and should not pay for a second Go runtime start (~1.7 ms measured here).
 * This is runc's nsenter pattern.
 */
#include "stage.h"

static int32_t reaped_maxrss(const struct plan *p);

/* ---- the sync socket ---- */

int send_msg_ex(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step, int32_t pid,
		       int32_t aux)
{
	struct sync_msg m = {.type = type, .err = err, .status = status, .index = index, .pid = pid, .aux = aux};
	if (step) strncpy(m.step, step, sizeof m.step - 1);
	return send(SYNC_FD, &m, sizeof m, MSG_NOSIGNAL) == sizeof m ? 0 : -1;
}
int send_msg(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step)
{
	return send_msg_ex(type, err, status, index, step, 0, 0);
}

/* send_fd sends a message of type with descriptor fd attached (SCM_RIGHTS)
 * over sock. */
int send_fd(int sock, const void *msg, size_t len, int fd)
{
	struct iovec iov = {(void *)msg, len};
	union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
	memset(&c, 0, sizeof c);
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof fd);
	return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}


/* ---- steps every role shares ---- */

static int set_hostname(struct plan *p)
{
	return p->hostname ? sethostname(p->hostname, p->hostname_len) : 0;
}

/* loopback_up: Equivalent to `ip link set lo up` in the new net namespace. */
static int loopback_up(struct plan *p)
{
	(void)p;
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = -1;
	if (fd < 0) return -1;
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	{ int e = errno; close(fd); errno = e; }
	return r;
}

/* write_sysctls writes the plan's sysctls of the jail's network namespace,
 * before the mounts: the host's /proc is still there, and which
 * namespace's file /proc/sys/net names is decided by the opener's. Each is
 * `sysctl -w KEY=VALUE` in the namespace. */
static int write_sysctls(struct plan *p)
{
	for (size_t i = 0; i < p->nsysctls; i++) {
		char path[160];
		uint32_t n = p->sysctl_val_len[i];
		if (snprintf(path, sizeof path, "/proc/sys/%s", p->sysctl_key[i]) >= (int)sizeof path) {
			errno = ENAMETOOLONG;
			return -1;
		}
		failed_op = (int)i;
		int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) return -1;
		ssize_t w = write(fd, p->sysctl_val[i], n);
		int e = w < 0 ? errno : EIO;
		close(fd);
		if (w != (ssize_t)n) { errno = e; return -1; }
	}
	failed_op = -1;
	return 0;
}

/* new_time_ns: CLONE_NEWTIME cannot be given to clone(2), only to unshare;
 * the workload, our next child, is the first process in it. */
static int new_time_ns(struct plan *p)
{
	(void)p;
	return unshare(CLONE_NEWTIME);
}

/* wait_for_go tells the parent setup is done and waits for its "go" (the
 * parent may still attach cgroups or start capture). EOF: the parent died.
 * With PLAN_NO_GO the parent has nothing to do in between: READY only
 * says so, and the process plan is already in the pipe. */
int wait_for_go(struct plan *p)
{
	(void)p;
	struct sync_msg m;
	if (p->flags & PLAN_NETFILTER) {
		/* A netfilter socket of this network namespace, for a parent that
		 * cannot enter it (an unprivileged one) to load and read rules. */
		struct sync_msg r = {.type = MSG_READY, .index = -1};
		int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
		if (fd < 0) return -1;
		int sent = send_fd(SYNC_FD, &r, sizeof r, fd);
		close(fd);
		if (sent < 0) return -1;
	} else if (send_msg(MSG_READY, 0, 0, -1, NULL) < 0) return -1;
	if (p->flags & (PLAN_NO_GO | PLAN_PREFORK)) return 0;
	ssize_t n;
	while ((n = recv(SYNC_FD, &m, sizeof m, 0)) < 0 && errno == EINTR);
	if (n != sizeof m || m.type != MSG_GO) { errno = n == 0 ? EPIPE : EPROTO; return -1; }
	return 0;
}


/* MAX_REAPS: how many children (ptrace stops of PTRACE_TRACEME ones
 * included) one wait loop of reap_workload reaps or detaches before it
 * polls again. */
#define MAX_REAPS 64

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* reap_workload forks the workload and stays its PID 1: it reaps every
 * child, forwards the parent's signals (to the whole jail when it owns a
 * PID namespace) and reports the workload's wait status. When it exits, the
 * kernel kills whatever is left in the PID namespace. */
int reap_workload(struct plan *p)
{
	sigset_t set;
	int ep[2], sfd, status, lfd = -1;
	if (block_signals(&set) < 0 || (sfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0) return -1;
	/* The exec-error channel, which also carries the seccomp listener. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ep) < 0) return -1;
	if (!(p->flags & (PLAN_PIDNS | PLAN_JOIN))) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	pid_t pid = fork();
	if (pid < 0) return -1;
	if (pid == 0) { close(ep[0]); run_workload(p, ep[1]); }
	close(ep[1]);
	/* A joined process's end is watched through a pidfd as well as
	 * SIGCHLD: one whose leader another process of the session traces
	 * sends no SIGCHLD until its tracer lets go (see kill_tracers). */
	int pfd = -1;
	if ((p->flags & PLAN_JOIN) && (pfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0) {
		kill(pid, SIGKILL);
		return -1;
	}
	if (p->flags & PLAN_PREFORK) close(PLAN_FD); /* the workload's now: the parent's end closed means EOF to it */
	close_rule_fds(p); /* the workload has its own copies */
	close_terminal_slave();

	struct exec_failure f;
	ssize_t n;
	for (;;) { /* the listener (if any), then EOF at execve or a failure */
		if (p->flags & PLAN_JOIN) {
			/* A joined process's helper no longer dies with its parent
			 * (join.c): a parent gone before the workload's execve (a
			 * workload stuck in its set-up, or stopped) ends it here. */
			struct pollfd w[2] = {{ep[0], POLLIN, 0}, {SYNC_FD, POLLIN, 0}};
			if (poll(w, 2, -1) < 0) {
				if (errno == EINTR) continue;
				return -1;
			}
			if (w[1].revents && !w[0].revents) end_joined(pid, pfd);
		}
		union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
		struct iovec iov = {&f, sizeof f};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
		if ((n = recvmsg(ep[0], &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) continue;
		struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
		if (n != sizeof f || f.err != 0 || lfd >= 0 || !h || h->cmsg_type != SCM_RIGHTS) break;
		memcpy(&lfd, CMSG_DATA(h), sizeof lfd);
	}
	close(ep[0]);
	if (n == sizeof f) { /* the workload never ran */
		waitpid(pid, NULL, 0);
		send_msg(MSG_EXEC_ERROR, f.err, 0, -1, f.step);
		_exit(0);
	}
	send_msg(MSG_STARTED, 0, pid, -1, NULL); /* the pid, for a parent that shares our PID namespace */
	if (lfd >= 0 && (p->flags & PLAN_JOIN)) {
		/* A joined process's listener is served by this loop (see
		 * serve_notifications): no thread can be made here. */
		serve_join_listener(p, pid);
	} else if (lfd >= 0 && (!listener_started() || hand_listener(lfd, pid) < 0)) {
		int e = listener_started() ? errno : EPROTO;
		kill(pid, SIGKILL); /* never run without the supervisor the filter needs */
		send_msg(MSG_SETUP_ERROR, e, 0, -1, "seccomp listener");
		_exit(1);
	}

	struct pollfd fds[4] = {{sfd, POLLIN, 0}, {SYNC_FD, POLLIN, 0}, {(p->flags & PLAN_JOIN) ? lfd : -1, POLLIN, 0}, {pfd, POLLIN, 0}};
	/* A joined process that has ended, or was told to die, and is still
	 * not reaped TRACER_GRACE_MS later is traced: see kill_tracers. Due
	 * is checked after every wake-up, so that a busy listener cannot put
	 * it off. Its pidfd polls readable only once every thread has ended,
	 * and a traced thread's zombie outlives the leader's exit_group (the
	 * kernel wakes no pidfd, not even a PIDFD_THREAD one since Linux 6.15,
	 * at a leader's end before its threads'): its leader is looked at every
	 * LEADER_CHECK_MS (check). */
	int64_t due = -1, check = (p->flags & PLAN_JOIN) ? now_ms() + LEADER_CHECK_MS : -1; /* ms, CLOCK_MONOTONIC */
	int killed = 0; /* SIG_KILL_JOINED came */
	int reap_more = 0; /* the last wait loop stopped at MAX_REAPS: go on without a SIGCHLD */
	for (;;) {
		int64_t next = due >= 0 ? due : check, left = next < 0 ? -1 : next - now_ms();
		int n = poll(fds, 4, reap_more ? 0 : next < 0 ? -1 : left > 0 ? (int)left : 0);
		if (n < 0) { if (errno == EINTR) continue; return -1; }
		int64_t now = now_ms();
		if (due >= 0 && now >= due) {
			if (kill_tracers(pid, killed)) due = now_ms() + TRACER_GRACE_MS;
			else due = -1, check = now + LEADER_CHECK_MS; /* it runs on without its leader */
		} else if (due < 0 && check >= 0 && now >= check) {
			if (leader_ended(pid)) due = now + TRACER_GRACE_MS;
			check = now + LEADER_CHECK_MS;
		}
		if (n == 0 && !reap_more) continue;
		if (fds[2].revents && serve_notifications(p, lfd, pid, 0) < 0) fds[2].fd = -1; /* the filter is unused */
		if (fds[1].revents) { /* the parent went away (or spoke out of turn): end the jail, or the joined process */
			if (p->flags & PLAN_JOIN) end_joined(pid, pfd);
			_exit(1);
		}
		if (fds[3].revents) { /* the joined process has ended; its SIGCHLD reports it, unless it is traced */
			fds[3].fd = -1; /* a pidfd stays readable */
			if (due < 0) due = now_ms() + TRACER_GRACE_MS;
		}
		int reap = reap_more;
		struct signalfd_siginfo si;
		if ((fds[0].revents & POLLIN) && read(sfd, &si, sizeof si) == sizeof si) {
			if (si.ssi_signo == SIG_KILL_JOINED) {
				if (p->flags & PLAN_JOIN) {
					kill(-pid, SIGKILL); /* its end is reported when it is reaped */
					killed = 1;
					if (due < 0) due = now_ms() + TRACER_GRACE_MS;
				}
			} else if (si.ssi_signo != SIGCHLD) {
				kill(whole_jail(p) ? -1 : -pid, (int)si.ssi_signo);
			} else {
				reap = 1;
			}
		}
		if (!reap) continue;
		reap_more = 0;
		pid_t r;
		int turns = 0;
		if (p->flags & PLAN_JOIN) {
			/* A joined process that ended takes its process group
			 * with it, as its timeout does: without the command's own
			 * cgroup nothing else would end what it left running (and
			 * the caller would wait for whatever holds its output).
			 * Before the reap, so the group's id cannot be reused. */
			siginfo_t ws = {0};
			if (waitid(P_PID, (id_t)pid, &ws, WEXITED | WNOHANG | WNOWAIT) == 0 && ws.si_pid == pid &&
			    ws.si_code != CLD_TRAPPED && ws.si_code != CLD_STOPPED)
				kill(-pid, SIGKILL);
		}
		while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
			if (WIFSTOPPED(status)) {
				/* A child that made us its tracer (PTRACE_TRACEME,
				 * where the policy allows ptrace): its stops come to
				 * us whatever the wait's options, and are no end. Let
				 * it go on untraced, with the signal that stopped it
				 * but the SIGTRAP of its execve or of a ptrace event. */
				int sig = (status >> 16) || WSTOPSIG(status) == SIGTRAP ? 0 : WSTOPSIG(status);
				ptrace(PTRACE_DETACH, r, NULL, (void *)(intptr_t)sig);
			} else if (r == pid) {
				if (fds[2].fd >= 0) serve_notifications(p, lfd, pid, 1);
				drain_listener();
				send_msg_ex(MSG_EXITED, 0, status, reaped_maxrss(p), NULL, 0, seccomp_event_count());
				/* A joined process's cgroup ends with it, here and not
				 * only in the parent, which may die before it gets to it:
				 * what the process left running with setsid. */
				if (p->flags & PLAN_JOIN) kill_joined_cgroup();
				_exit(0);
			}
			/* Threads that make us their tracer again and again, or a
			 * stream of orphans to reap, could keep this loop going:
			 * the rest waits for the next turn of the poll, after the
			 * parent's word. */
			if (++turns == MAX_REAPS) {
				reap_more = 1;
				break;
			}
		}
	}
}

/* reaped_maxrss returns the largest resident set, in KiB, of the processes
 * this one reaped; for a run, once it has ended and reaped the rest of the
 * jail (which its exit would kill anyway). Its own rusage does not do: the
 * spawn that exec'd it shared the parent's memory, whose high-water mark
 * the exec recorded as ours. -1: unknown. */
static int32_t reaped_maxrss(const struct plan *p)
{
	struct rusage ru;
	if (whole_jail(p)) {
		kill(-1, SIGKILL);
		while (waitpid(-1, NULL, __WALL) > 0 || errno == EINTR) {}
	}
	if (getrusage(RUSAGE_CHILDREN, &ru) < 0 || ru.ru_maxrss > INT32_MAX) return -1;
	return (int32_t)ru.ru_maxrss;
}

/* recv_fds reads one packet of sock into b, with flags (MSG_CMSG_CLOEXEC
 * always), and the descriptors that came with it into fds (*nfds of
 * them; -1 when more came than MAX_RECV_FDS, all closed then). */
ssize_t recv_fds(int sock, void *b, size_t len, int flags, int *fds, int *nfds)
{
	union {
		char buf[CMSG_SPACE(MAX_RECV_FDS * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {b, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
	ssize_t n = recvmsg(sock, &m, flags | MSG_CMSG_CLOEXEC);
	if (n < 0) return n;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
		size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t j = 0; j < k; j++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + j * sizeof(int), sizeof fd);
			if (*nfds >= 0 && *nfds < MAX_RECV_FDS) fds[(*nfds)++] = fd;
			else close(fd);
		}
	}
	if (m.msg_flags & MSG_CTRUNC) {
		while (*nfds > 0) close(fds[--*nfds]);
		*nfds = -1;
	}
	return n;
}

/* join_tasks moves this process, still single-threaded, into the run's
 * cgroup v1 hierarchies by writing "0" to each "tasks" file of fds, and
 * closes them: writing "0" moves the writer without the global lock and
 * RCU grace period that a move by pid waits for (5-15 ms after a quiet
 * spell). The parent opened the files, so its credentials are the ones
 * checked; it verifies the result at READY. */
static int join_tasks(const int *fds, int n)
{
	int err = 0;
	for (int i = 0; i < n; i++) {
		ssize_t w = 0;
		while (!err && (w = write(fds[i], "0", 1)) < 0 && errno == EINTR);
		if (!err && w != 1) err = w < 0 ? errno : EIO;
		close(fds[i]);
	}
	if (err) { errno = err; return -1; }
	return 0;
}

/* join_cgroup joins the cgroup files the stage inherited, as its first
 * step. */
int join_cgroup(struct plan *p)
{
	int fds[MAX_CGROUP_FDS];
	for (uint32_t i = 0; i < p->cgroup_fds; i++) fds[i] = CGROUP_FD + (int)i;
	return join_tasks(fds, (int)p->cgroup_fds);
}

/* join_cgroup_late is join_cgroup for PLAN_CGROUP_LATE: the "tasks" files
 * come in one MSG_CGROUP, which the parent sent once it had made the
 * directories while this stage built the root. This stage is still
 * single-threaded (the seccomp listener comes after it). */
int join_cgroup_late(struct plan *p)
{
	(void)p;
	struct {
		struct sync_msg m;
		char more; /* a longer message is refused, not cut */
	} b;
	int fds[MAX_RECV_FDS], nfds = 0;
	ssize_t n;
	while ((n = recv_fds(SYNC_FD, &b, sizeof b, 0, fds, &nfds)) < 0 && errno == EINTR);
	if (n < 0) return -1;
	if (n != sizeof b.m || b.m.type != MSG_CGROUP || nfds <= 0 || nfds > MAX_CGROUP_FDS) {
		while (nfds > 0) close(fds[--nfds]);
		errno = n == 0 ? EPIPE : EPROTO;
		return -1;
	}
	return join_tasks(fds, nfds);
}

static int read_full(int fd, uint8_t *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = read(fd, buf + off, len - off);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) { if (n == 0) errno = EPIPE; return -1; }
		off += (size_t)n;
	}
	return 0;
}

/* read_record reads one plan from fd and decodes it into p (two passes:
 * count, then fill the arrays of its kind). The buffer and the arrays live
 * until execve replaces this image. */
int read_record(int fd, struct plan *p, int process)
{
	uint8_t hdr[8];
	if (read_full(fd, hdr, sizeof hdr) < 0) return -1;
	uint32_t len = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
	uint32_t magic = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
	if (len > PLAN_MAX_BYTES) { errno = E2BIG; return -1; }
	if (magic != (process ? PROCESS_MAGIC : PLAN_MAGIC)) { errno = EINVAL; return -1; }
	uint8_t *buf = malloc(len + 8);
	if (!buf) return -1;
	memcpy(buf, hdr, 8);
	if (read_full(fd, buf + 8, len) < 0) return -1;
	if (jail_plan_decode(buf, len + 8, p) < 0) { errno = EINVAL; return -1; }
	if (process) {
		p->argv = calloc(p->nargs + 1, sizeof *p->argv); /* NULL-terminated for execve */
		p->envp = calloc(p->nenv + 1, sizeof *p->envp);
		p->path = calloc(p->npath + 1, sizeof *p->path);
		p->rlimits = calloc(p->nrlimits + 1, sizeof *p->rlimits);
		if (!p->argv || !p->envp || !p->path || !p->rlimits) return -1;
	} else {
		p->mounts = calloc(p->nmounts + 1, sizeof *p->mounts);
		p->landlock_rules = calloc(p->nlandlock + 1, sizeof *p->landlock_rules);
		if (!p->mounts || !p->landlock_rules) return -1;
	}
	return jail_plan_decode(buf, len + 8, p) < 0 ? (errno = EINVAL, -1) : 0;
}

/* extra_fds is how many descriptors the plan's role inherits after the
 * host sources (EXTRA_FD). */
uint32_t extra_fds(const struct plan *p)
{
	if (p->flags & PLAN_SESSION) return 1; /* the control socket */
	if (p->flags & PLAN_JOIN) return join_ns_fds(p) + ((p->flags & PLAN_JOIN_KILL) ? 1 : 0); /* then cgroup.kill */
	return 0;
}

/* read_plan reads the jail plan. Only what the parent passed on purpose
 * stays open: a descriptor that jail's caller let jail inherit (one
 * without close-on-exec) would otherwise stay open inside the jail, and a
 * host directory there is runc CVE-2024-21626's way out. PLAN_FD stays
 * open for the process plan. */
int read_plan(struct plan *p)
{
	if (read_record(PLAN_FD, p, 0) < 0) return -1;
	return (int)syscall(SYS_close_range, EXTRA_FD(p) + extra_fds(p), ~0U, 0);
}

/* read_process reads the process plan the parent sent with GO. With
 * PLAN_PREFORK it is the process's template and the pipe stays open: the
 * workload reads what it runs from it (workload.c). */
int read_process(struct plan *p)
{
	int r = read_record(PLAN_FD, p, 1);
	int e = errno;
	if (!(p->flags & PLAN_PREFORK)) close(PLAN_FD);
	errno = e;
	return r;
}

/* ---- the tables ---- */


/* run_steps runs a table in order; on failure *step names the step. */
int run_steps(const struct step *steps, size_t n, struct plan *p, const char **step)
{
	for (size_t i = 0; i < n; i++) {
		if ((p->flags & steps[i].when) != steps[i].when || (p->flags & steps[i].unless)) continue;
		*step = steps[i].name;
		if (steps[i].run(p) < 0) return -1;
	}
	return 0;
}

int cgroup_namespace(struct plan *p)
{
	/* The cgroup namespace was made at clone, before the join: its root is
	 * the caller's cgroup, and /proc/self/cgroup would show the jail's
	 * cgroup name, with jail's host pid in it. Made again here, its root is
	 * the jail's own cgroup. A joined process makes its own, rooted at the
	 * cgroup it joined. */
	if (p->cgroup_fds == 0 && !(p->flags & (PLAN_JOIN | PLAN_CGROUP_LATE))) return 0;
	return unshare(CLONE_NEWCGROUP);
}

int block_signals_step(struct plan *p)
{
	(void)p;
	sigset_t set;
	return block_signals(&set);
}

/* run_process is what happens at GO: a one-shot jail reads its process,
 * makes its terminal and starts it, staying its PID 1; a session starts
 * nothing. Neither returns unless it fails. */
static int run_process(struct plan *p, const char **step)
{
	static const struct step steps[] = {
		{"read process", read_process, 0, 0},
		{"terminal", open_terminal, 0, 0},
	};
	if (p->flags & PLAN_SESSION) {
		*step = "session";
		close(PLAN_FD);
		return session_loop(p);
	}
	if (RUN_STEPS(steps, p, step) < 0) return -1;
	*step = "reap workload";
	return reap_workload(p);
}

/* run_init is the child that builds a jail and stays its PID 1, in order;
 * it returns only on failure, with the failed step's name in *step. */
static int run_init(struct plan *p, const char **step)
{
	static const struct step steps[] = {
		{"read plan", read_plan, 0, 0},
		{"join cgroup", join_cgroup, 0, 0},
		{"cgroup namespace", cgroup_namespace, PLAN_CGROUPNS, PLAN_CGROUP_LATE},
		{"block signals", block_signals_step, 0, 0},
		{"sysctl", write_sysctls, 0, 0},
		{"make / rslave", make_root_rslave, PLAN_MOUNTNS, 0},
		{"open mount sources", open_sources, PLAN_MOUNTNS, 0},
		{"enter a copy of the initramfs", enter_root_copy, PLAN_MOUNTNS | PLAN_INITRAMFS, 0},
		{"build root", build_root, PLAN_MOUNTNS, 0},
		{"close host sources", close_sources, 0, 0},
		{"mount plan", apply_mounts, PLAN_MOUNTNS, 0},
		{"pivot_root", pivot_into_root, PLAN_MOUNTNS, 0},
		{"remount root read-only", remount_root_ro, PLAN_MOUNTNS | PLAN_ROOT_RO, 0},
		{"hostname", set_hostname, 0, 0},
		{"loopback up", loopback_up, PLAN_LOOPBACK, 0},
		{"join cgroup", join_cgroup_late, PLAN_CGROUP_LATE, 0},
		{"cgroup namespace", cgroup_namespace, PLAN_CGROUPNS | PLAN_CGROUP_LATE, 0},
		{"seccomp listener thread", start_listener, PLAN_SECCOMP_NOTIFY, PLAN_SESSION},
		{"time namespace", new_time_ns, PLAN_TIMENS, 0},
		{"wait for parent", wait_for_go, 0, 0},
	};
	if (RUN_STEPS(steps, p, step) < 0) return -1;
	if (p->flags & PLAN_JOIN) { *step = "read plan"; errno = EINVAL; return -1; } /* a join plan for init */
	return run_process(p, step);
}

/* stage_main is where both roles start: non-dumpable first, so that no
 * process of the jail can open /proc/PID/exe or /proc/PID/fd of ours and
 * reach jail's binary or a host descriptor (CVE-2019-5736, CVE-2016-9962). */
static int stage_main(const char *name, int (*run)(struct plan *, const char **))
{
	static struct plan plan;
	const char *step = "non-dumpable";
	prctl(PR_SET_NAME, name, 0, 0, 0);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0) {
		/* The parent's Pdeathsig does not survive the exec that gained us
		 * capabilities; arm it again. A parent that is already gone shows
		 * up as EOF on the sync socket in wait_for_go. */
		step = "parent-death signal";
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0) {
			umask(0);
			if (run(&plan, &step) == 0) return 0;
		}
	}
	send_msg(MSG_SETUP_ERROR, errno, 0, failed_op, step);
	return 1;
}

/* jail_stage_main runs the stage, and never returns, when argv[0] names
 * a role ("jail:init" or "jail:exec"); else it returns at once. The files
 * role ("jail:files", files.c) returns once it has joined, for the Go
 * runtime to serve the operation; it exists only where there is one. */
void jail_stage_main(int argc, char **argv)
{
	if (argc < 1 || argv == NULL || argv[0] == NULL) return;
	if (strcmp(argv[0], INIT_ARG0) == 0) _exit(stage_main("jail:init", run_init));
	if (strcmp(argv[0], EXEC_ARG0) == 0) _exit(stage_main("jail:exec", run_join));
#ifndef JAIL_STAGE_MAIN
	if (strcmp(argv[0], FILES_ARG0) == 0) files_main();
#endif
}

#ifndef JAIL_STAGE_MAIN
/* nsexec runs before main (and before the Go runtime) in every binary that
 * links this package; the standalone stage (stage/) calls jail_stage_main
 * from its main instead. argv[0] is program_invocation_name, which glibc
 * and musl both set before constructors run: only glibc passes (argc,
 * argv, envp) to a constructor, and jail's release build is linked with
 * musl (build.sh). */
__attribute__((constructor)) static void nsexec(void)
{
	char *argv[] = {program_invocation_name, NULL};
	jail_stage_main(1, argv);
}
#endif
