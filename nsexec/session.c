//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* session.c: a session's PID 1: no process of its own, deadlines, a control
 * socket. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"

#define MAX_CONNS 256

/* arm sets timerfd fd to fire once, ms from now; 0 disarms it. */
static int arm(int fd, uint64_t ms)
{
	struct itimerspec it = {{0, 0}, {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L}};
	return timerfd_settime(fd, 0, &it, NULL);
}

/* session_loop is a session's PID 1 after GO. It reaps the orphans of
 * joined processes and keeps the jail up until it must end: its TTL
 * passes, it has been idle (no connection to its control socket: each
 * joined process holds one while it runs) for its idle timeout, or a
 * SIGTERM, SIGINT or SIGHUP comes from outside the jail. Then it exits and
 * the kernel kills every process of the jail and tears its namespaces
 * down. The deadlines are kernel timers of this process, so they hold with
 * no jail process running on the host; a CTL_DEADLINES packet on a control
 * connection (from the host: the socket is in the state directory) changes
 * them, a CTL_RESET_LAYERS one makes its overlays new (a restore), and a
 * CTL_PROBE one only asks whether it listens (the idle timeout runs on). */
int session_loop(struct plan *p)
{
	sigset_t set;
	int sfd, ctl = EXTRA_FD(p), ttl, idle, conns[MAX_CONNS], nconns = 0;
	uint64_t idle_left = 0; /* ms of the idle timeout left when the first connection came (CTL_PROBE) */
	int idle_fresh = 0;     /* since then a command's connection closed, or CTL_DEADLINES set it */
	if (block_signals(&set) < 0 || (sfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0) return -1;
	if ((ttl = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC)) < 0 || (idle = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC)) < 0)
		return -1;
	if ((p->ttl_ms && arm(ttl, p->ttl_ms) < 0) || (p->idle_ms && arm(idle, p->idle_ms) < 0)) return -1;
	if (fcntl(ctl, F_SETFD, FD_CLOEXEC) < 0 || fcntl(ctl, F_SETFL, O_NONBLOCK) < 0) return -1;
	/* The session outlives whoever created it: no parent-death signal, and
	 * the sync socket is closed after the report that it is up. */
	if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0) return -1;
	if (send_msg(MSG_STARTED, 0, 0, -1, NULL) < 0) return -1;
	close(SYNC_FD);
	for (;;) {
		struct pollfd fds[4 + MAX_CONNS] = {{sfd, POLLIN, 0}, {ctl, POLLIN, 0}, {ttl, POLLIN, 0}, {idle, POLLIN, 0}};
		for (int i = 0; i < nconns; i++) fds[4 + i] = (struct pollfd){conns[i], POLLIN, 0};
		if (poll(fds, (nfds_t)(4 + nconns), -1) < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		/* A deadline passed. An idle timeout does not end a session that
		 * a command is connecting to right now. */
		if (fds[2].revents || (fds[3].revents && !(fds[1].revents & POLLIN))) _exit(0);
		if (fds[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) == sizeof si) {
				/* Only a signal from outside the jail (no sender pid in our
				 * namespace) stops it: its own processes may not. */
				if (si.ssi_signo != SIGCHLD && si.ssi_pid == 0 &&
				    (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP))
					_exit(0);
				while (waitpid(-1, NULL, WNOHANG) > 0);
			}
		}
		for (int i = nconns - 1; i >= 0; i--) {
			if (!fds[4 + i].revents) continue;
			unsigned char b[32];
			int fds[MAX_RECV_FDS], nfds = 0;
			ssize_t n = recv_fds(conns[i], b, sizeof b, MSG_DONTWAIT, fds, &nfds);
			/* A peer that closed with our ack unread resets the
			 * connection: the error comes first, once, then what it
			 * sent (a probe's byte). */
			if (n < 0 && errno == ECONNRESET) n = recv_fds(conns[i], b, sizeof b, MSG_DONTWAIT, fds, &nfds);
			if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
			if ((n == CTL_DEADLINES_LEN && b[0] == CTL_DEADLINES) || (n == 1 && b[0] == CTL_PROBE))
				while (nfds > 0) close(fds[--nfds]); /* none belong with these */
			if (n == CTL_DEADLINES_LEN && b[0] == CTL_DEADLINES) {
				uint64_t t, d;
				memcpy(&t, b + 1, 8);
				memcpy(&d, b + 9, 8);
				/* The idle timer is disarmed while this connection
				 * is held; its end arms it with the new timeout. */
				if (t != CTL_KEEP && arm(ttl, t) < 0) return -1;
				if (d != CTL_KEEP) p->idle_ms = d, idle_fresh = 1;
				(void)send(conns[i], "1", 1, MSG_NOSIGNAL);
				continue;
			}
			if (n == 1 && b[0] == CTL_PROBE) {
				/* The last to close: the idle timeout runs on from
				 * where it was, unless a command's connection (or a
				 * new timeout) since restarted it. */
				close(conns[i]);
				conns[i] = conns[--nconns];
				uint64_t ms = idle_fresh ? p->idle_ms : idle_left ? idle_left : 1;
				if (nconns == 0 && p->idle_ms && arm(idle, ms) < 0) return -1;
				continue;
			}
			if (n == 1 && b[0] == CTL_RESET_LAYERS) {
				int ok = nfds >= 0 && reset_layers(p, fds, nfds) == 0;
				while (nfds > 0) close(fds[--nfds]);
				(void)send(conns[i], ok ? "1" : "0", 1, MSG_NOSIGNAL);
				/* An overlay made again without every mask the plan put
				 * on it would show the host's private files: the
				 * session ends (fail closed). */
				if (!ok) _exit(1);
				continue;
			}
			while (nfds > 0) close(fds[--nfds]);
			if (n > 0) continue; /* nothing else is said on it */
			close(conns[i]);
			conns[i] = conns[--nconns];
			idle_fresh = 1;
			if (nconns == 0 && p->idle_ms && arm(idle, p->idle_ms) < 0) return -1;
		}
		if (fds[1].revents & POLLIN) {
			int c = accept4(ctl, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (c < 0) continue;
			/* The ack says the session took the connection: a joined
			 * process runs only while it is counted. */
			if (nconns == MAX_CONNS || send(c, "1", 1, MSG_NOSIGNAL) != 1) { close(c); continue; }
			struct itimerspec left;
			if (nconns == 0 && timerfd_gettime(idle, &left) == 0) {
				idle_left = (uint64_t)left.it_value.tv_sec * 1000 + (uint64_t)left.it_value.tv_nsec / 1000000;
				idle_fresh = 0;
			}
			conns[nconns++] = c;
			if (arm(idle, 0) < 0) return -1;
		}
	}
}
