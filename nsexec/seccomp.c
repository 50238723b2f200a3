//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* seccomp.c: the filter the workload loads, and the supervisor that answers
 * its notifications. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"

/* jail_bpf_run runs a classic BPF seccomp program on a struct seccomp_data,
 * as the kernel would (the instructions seccomp_check_filter accepts), and
 * returns its SECCOMP_RET_* value. PID 1 uses it in log mode to find the
 * policy's errno for a notification. Anything malformed returns
 * SECCOMP_RET_KILL_PROCESS: a wrong answer must never be "allow". */
uint32_t jail_bpf_run(const uint8_t *prog, uint32_t len, const void *data)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0}, n = len / 8;
	const uint8_t *d = data;
	for (uint32_t pc = 0; pc < n; pc++) {
		struct sock_filter in;
		memcpy(&in, prog + 8 * pc, sizeof in);
		uint32_t k = in.k, src = BPF_SRC(in.code) == BPF_X ? x : k;
		switch (BPF_CLASS(in.code)) {
		case BPF_LD:
			if (in.code == (BPF_LD | BPF_W | BPF_ABS) && k % 4 == 0 && k < sizeof(struct seccomp_data)) memcpy(&a, d + k, 4);
			else if (in.code == (BPF_LD | BPF_W | BPF_LEN)) a = sizeof(struct seccomp_data);
			else if (in.code == (BPF_LD | BPF_IMM)) a = k;
			else if (in.code == (BPF_LD | BPF_MEM) && k < BPF_MEMWORDS) a = mem[k];
			else return SECCOMP_RET_KILL_PROCESS;
			break;
		case BPF_LDX:
			if (in.code == (BPF_LDX | BPF_W | BPF_LEN)) x = sizeof(struct seccomp_data);
			else if (in.code == (BPF_LDX | BPF_IMM)) x = k;
			else if (in.code == (BPF_LDX | BPF_MEM) && k < BPF_MEMWORDS) x = mem[k];
			else return SECCOMP_RET_KILL_PROCESS;
			break;
		case BPF_ST: if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS; mem[k] = a; break;
		case BPF_STX: if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS; mem[k] = x; break;
		case BPF_ALU:
			switch (BPF_OP(in.code)) {
			case BPF_ADD: a += src; break;
			case BPF_SUB: a -= src; break;
			case BPF_MUL: a *= src; break;
			case BPF_DIV: if (!src) return SECCOMP_RET_KILL_PROCESS; a /= src; break;
			case BPF_MOD: if (!src) return SECCOMP_RET_KILL_PROCESS; a %= src; break;
			case BPF_AND: a &= src; break;
			case BPF_OR: a |= src; break;
			case BPF_XOR: a ^= src; break;
			case BPF_LSH: a = src >= 32 ? 0 : a << src; break;
			case BPF_RSH: a = src >= 32 ? 0 : a >> src; break;
			case BPF_NEG: a = -a; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP: {
			uint32_t off;
			switch (BPF_OP(in.code)) {
			case BPF_JA: off = k; break;
			case BPF_JEQ: off = a == src ? in.jt : in.jf; break;
			case BPF_JGT: off = a > src ? in.jt : in.jf; break;
			case BPF_JGE: off = a >= src ? in.jt : in.jf; break;
			case BPF_JSET: off = (a & src) ? in.jt : in.jf; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			if (off >= n - pc - 1) return SECCOMP_RET_KILL_PROCESS; /* must land inside */
			pc += off;
			break;
		}
		case BPF_RET: return BPF_RVAL(in.code) == BPF_A ? a : k;
		case BPF_MISC:
			if (in.code == (BPF_MISC | BPF_TAX)) x = a;
			else if (in.code == (BPF_MISC | BPF_TXA)) a = x;
			else return SECCOMP_RET_KILL_PROCESS;
			break;
		default: return SECCOMP_RET_KILL_PROCESS;
		}
	}
	return SECCOMP_RET_KILL_PROCESS; /* fell off the end */
}

/* load_seccomp loads the plan's filter: the workload's last step before
 * execve, after no_new_privs and the capability drop (seccomp(2)). With
 * PLAN_SECCOMP_NOTIFY the kernel returns a listener, which goes to PID 1
 * over the exec-error socket; it is O_CLOEXEC, so execve takes it from the
 * workload. TSYNC is moot in this single-threaded process but keeps the
 * promise if that ever changes. */
int load_seccomp(const struct plan *p, int errfd)
{
	struct sock_fprog prog = {.len = (unsigned short)(p->seccomp_len / 8), .filter = (struct sock_filter *)p->seccomp};
	unsigned long flags = SECCOMP_FILTER_FLAG_TSYNC;
	int notify = p->flags & PLAN_SECCOMP_NOTIFY;
	if (notify) flags |= SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC_ESRCH;
	/* Once PID 1 has received a notification, the caller waits for the
	 * answer killably: a signal can no longer make the call return EINTR
	 * before PID 1 kills it (without this, most interrupted kills were
	 * dodged and never reported). */
	if (p->flags & PLAN_SECCOMP_WAIT_KILLABLE) flags |= SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
	int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
	if (fd < 0 || !notify) return fd < 0 ? -1 : 0;
	struct exec_failure hello = {0, "seccomp listener"};
	/* Not closed: no call of jail's own runs under the filter but execve
	 * (a policy may kill close); it is close-on-exec. */
	return send_fd(errfd, &hello, sizeof hello, fd);
}

/* The notification buffers, sized by the running kernel (the structs may
 * grow: seccomp_unotify(2)). */
static struct seccomp_notif *notif_req;
static struct seccomp_notif_resp *notif_resp;
static size_t notif_req_size, notif_resp_size;
static int32_t seccomp_events;

static int notif_buffers(void)
{
	struct seccomp_notif_sizes sz;
	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0) return -1;
	notif_req_size = sz.seccomp_notif > sizeof *notif_req ? sz.seccomp_notif : sizeof *notif_req;
	notif_resp_size = sz.seccomp_notif_resp > sizeof *notif_resp ? sz.seccomp_notif_resp : sizeof *notif_resp;
	notif_req = malloc(notif_req_size);
	notif_resp = malloc(notif_resp_size);
	return notif_req && notif_resp ? 0 : -1;
}

/* The host's /proc, opened by a join helper before it enters the jail: the
 * pids it sees (its children's, seccomp notifications') are host pids. */
int host_proc = -1;

/* is_workload reports whether thread tid belongs to the workload process. */
static int is_workload(const struct plan *p, pid_t workload, pid_t tid)
{
	if (tid == workload) return 1;
	char path[64];
	snprintf(path, sizeof path, "%d/task/%d", (int)workload, (int)tid);
	if (p->flags & PLAN_JOIN) return host_proc >= 0 && faccessat(host_proc, path, F_OK, 0) == 0;
	/* /proc shows our PID namespace only when we mounted it, or share the host's. */
	if (!(p->flags & PLAN_MOUNTNS) && (p->flags & PLAN_PIDNS)) return 0;
	snprintf(path, sizeof path, "/proc/%d/task/%d", (int)workload, (int)tid);
	return access(path, F_OK) == 0;
}


/* answer_notification handles one seccomp notification: the call never
 * runs. In log mode (rules present) an errno verdict of the policy's own
 * program is answered with that errno; every other verdict, and every
 * notification without rules, is a kill of the calling process. */
static void answer_notification(const struct plan *p, int lfd, pid_t workload)
{
	uint32_t verdict = SECCOMP_RET_KILL_PROCESS;
	if (p->seccomp_rules) verdict = jail_bpf_run(p->seccomp_rules, p->seccomp_rules_len, &notif_req->data);
	int32_t err = 0, aux = is_workload(p, workload, (pid_t)notif_req->pid) ? SECCOMP_EV_WORKLOAD : 0;
	if ((verdict & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO) {
		err = (int32_t)(verdict & SECCOMP_RET_DATA);
		memset(notif_resp, 0, notif_resp_size);
		notif_resp->id = notif_req->id;
		notif_resp->error = -err;
		ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, notif_resp);
	} else {
		aux |= SECCOMP_EV_KILLED;
		/* A valid id means the caller still waits in the syscall, so its
		 * tid cannot have been reused. kill(2) of a tid ends its process. */
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_ID_VALID, &notif_req->id) == 0) kill((pid_t)notif_req->pid, SIGKILL);
	}
	/* Past the cap, the kill that ends the workload is still reported:
	 * throw-away denials must not hide it. */
	if (++seccomp_events <= MAX_SECCOMP_EVENTS || (aux & SECCOMP_EV_KILLED && aux & SECCOMP_EV_WORKLOAD))
		send_msg_ex(MSG_SECCOMP, err, notif_req->data.nr, (int32_t)notif_req->data.arch, NULL, (int32_t)notif_req->pid, aux);
}

/* The listener thread: PID 1 receives notifications on a thread of its own,
 * blocked in SECCOMP_IOCTL_NOTIF_RECV. Every notification the kernel queues
 * ups a counting semaphore that RECV downs, so each one wakes exactly one
 * RECV, which returns it, or ENOENT when its caller took it back before we
 * could read it: a signal interrupted the call (and the caller lives, with
 * EINTR), or the caller is dying. poll(2) on the listener cannot see those:
 * it reports only notifications still queued. Once received, a call waits
 * killably (PLAN_SECCOMP_WAIT_KILLABLE), so a received kill always lands. */
static struct {
	const struct plan *p;
	int lfd, done[2], handoff[2];
	pid_t workload;
	pthread_t thread;
	int started;
	volatile sig_atomic_t draining;
} listener = {.lfd = -1, .done = {-1, -1}, .handoff = {-1, -1}};

/* The signal that ends a blocked RECV when the listener is drained: a
 * real-time one glibc does not use, outside the set PID 1 forwards. */
#define SIG_DRAIN (SIGRTMIN + 3)

static void on_drain(int sig) { (void)sig; }

/* note_interrupted handles a notification taken back before it was read:
 * a call the policy kills was made and its caller could not be killed, nor
 * even named. Fail closed: end the whole jail, and report it. */
static void note_interrupted(void)
{
	static int noted;
	if (++seccomp_events <= MAX_SECCOMP_EVENTS || !noted++)
		send_msg_ex(MSG_SECCOMP, 0, -1, 0, NULL, 0, SECCOMP_EV_KILLED | SECCOMP_EV_INTERRUPTED);
	kill(whole_jail(listener.p) ? -1 : -listener.workload, SIGKILL);
}

/* filter_unused reports whether no task uses the filter any more: then
 * RECV returns ENOENT at once, with nothing taken back (Linux 6.6's
 * recv_wait_event), and the listener polls POLLHUP. */
static int filter_unused(void)
{
	struct pollfd pd = {listener.lfd, POLLIN, 0};
	return poll(&pd, 1, 0) > 0 && (pd.revents & POLLHUP);
}

static void *listen_seccomp(void *arg)
{
	(void)arg;
	/* Wait for the listener and the workload's pid: the thread is made
	 * before PID 1 unshares its time namespace, after which it could make
	 * no thread (clone with CLONE_VM fails with EINVAL on such kernels). */
	pid_t w[2];
	for (size_t got = 0; got < sizeof w;) {
		ssize_t n = read(listener.handoff[0], (char *)w + got, sizeof w - got);
		if (n < 0 && errno == EINTR && !listener.draining) continue;
		if (n <= 0) goto out;
		got += (size_t)n;
	}
	listener.lfd = w[0], listener.workload = w[1];
	for (;;) {
		memset(notif_req, 0, notif_req_size);
		if (ioctl(listener.lfd, SECCOMP_IOCTL_NOTIF_RECV, notif_req) == 0)
			answer_notification(listener.p, listener.lfd, listener.workload);
		else if (errno == ENOENT && !filter_unused())
			note_interrupted();
		else if (errno != EINTR || listener.draining)
			break;
	}
out:
	(void)!write(listener.done[1], "", 1);
	return NULL;
}

/* start_listener starts the listener thread, which waits for the
 * listener (hand_listener); a step of run_init, before the time namespace. */
int start_listener(struct plan *p)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_drain; /* no SA_RESTART: the signal ends a blocked RECV with EINTR */
	listener.p = p;
	if (notif_buffers() < 0 || sigaction(SIG_DRAIN, &sa, NULL) < 0 || pipe2(listener.done, O_CLOEXEC) < 0 ||
	    pipe2(listener.handoff, O_CLOEXEC) < 0)
		return -1;
	if ((errno = pthread_create(&listener.thread, NULL, listen_seccomp, NULL)) != 0) return -1;
	listener.started = 1;
	return 0;
}

/* hand_listener gives the thread the listener and the workload's pid. */
int hand_listener(int lfd, pid_t workload)
{
	pid_t w[2] = {lfd, workload};
	return write(listener.handoff[1], w, sizeof w) == (ssize_t)sizeof w ? 0 : -1;
}

/* drain_listener waits until the listener has handled every notification
 * the kernel queued, so that the workload's report comes after all of its
 * seccomp events. Called once the workload has exited. */
void drain_listener(void)
{
	if (!listener.started) return;
	listener.draining = 1;
	for (;;) {
		pthread_kill(listener.thread, SIG_DRAIN);
		struct pollfd pd = {listener.done[0], POLLIN, 0};
		if (poll(&pd, 1, 2) > 0) return; /* else the signal came between two RECVs: again */
	}
}

/* serve_notifications answers the notifications queued on a joined
 * process's listener from the reaper's poll loop (all of them when drain
 * is set, else one). Each queued notification ups a semaphore RECV downs,
 * so after POLLIN a RECV returns at once: the notification, or ENOENT for
 * one a signal took back, which fails closed as the thread does. It
 * returns -1 once no task uses the filter. */
int serve_notifications(struct plan *p, int lfd, pid_t workload, int drain)
{
	do {
		struct pollfd pd = {lfd, POLLIN, 0};
		if (poll(&pd, 1, 0) <= 0) return 0;
		if (!(pd.revents & POLLIN)) return (pd.revents & POLLHUP) ? -1 : 0;
		memset(notif_req, 0, notif_req_size);
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, notif_req) == 0) {
			answer_notification(p, lfd, workload);
		} else if (errno == ENOENT) {
			listener.lfd = lfd;
			if (!filter_unused()) note_interrupted();
		}
	} while (drain);
	return 0;
}

int seccomp_buffers(struct plan *p)
{
	listener.p = p;
	return notif_buffers();
}

/* listener_started reports whether PID 1's listener thread runs. */
int listener_started(void) { return listener.started; }

/* serve_join_listener readies a joined process's listener, served by the
 * helper's poll loop (serve_notifications): no thread can be made there. */
void serve_join_listener(struct plan *p, pid_t workload)
{
	listener.p = p;
	listener.workload = workload;
}

/* seccomp_event_count counts the events, reported or not. */
int32_t seccomp_event_count(void) { return seccomp_events; }
