/*
 * spawn.c: the host side's spawn of a child stage. It runs in the Go parent,
 * on the thread nsexec.Start locked, not in the stage.
 *
 * os/exec cannot vfork a child that gets a new user namespace (the parent
 * writes its id maps while it waits), so it copies the whole address space
 * of the Go process with fork. Here the child shares the parent's memory
 * (CLONE_VM, as vfork) but not its stack, and the parent goes on while it
 * waits: writes the maps, releases it, then waits for the exec. The child
 * runs only raw system calls: it shares the parent's memory and its
 * thread-local storage (errno), which is why it starts with every signal
 * blocked and every caught one back to its default (CLONE_CLEAR_SIGHAND),
 * and touches nothing of the parent's but the request it reads.
 */
#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL /* Linux 5.5 */
#endif

struct rlimit jail_nofile_at_start;

/* For TestSpawnParentKilled only: the parent SIGKILLs itself right after
 * the clone, before it writes the maps and releases the child. */
int jail_spawn_test_kill_after_clone;

/* Before main, so before the Go runtime raises the soft limit. */
__attribute__((constructor)) static void save_nofile(void)
{
	if (getrlimit(RLIMIT_NOFILE, &jail_nofile_at_start) < 0) jail_nofile_at_start.rlim_cur = 0;
}

/* raw6 makes a system call without touching errno, which in the child is
 * the parent thread's: it returns -errno on failure. */
#if defined(__x86_64__)
const int jail_spawn_supported = 1;
static inline long raw6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/* clone3_run is clone3 whose child calls fn(arg) on the new stack and
 * exits with its result; the parent gets the pid or -errno. */
static long clone3_run(struct clone_args *args, int (*fn)(void *), void *arg)
{
	long ret;
	register void *r12 __asm__("r12") = (void *)fn;
	register void *r13 __asm__("r13") = arg;
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r13, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %%eax, %%edi\n\t"
			 "mov %[exit], %%eax\n\t"
			 "syscall\n\t"
			 "hlt\n"
			 "1:"
			 : "=a"(ret)
			 : "a"((long)SYS_clone3), "D"(args), "S"(sizeof *args), "r"(r12), "r"(r13), [exit] "i"(SYS_exit)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
const int jail_spawn_supported = 0;
static inline long raw6(long n, long a, long b, long c, long d, long e, long f)
{
	(void)n, (void)a, (void)b, (void)c, (void)d, (void)e, (void)f;
	return -ENOSYS;
}
static long clone3_run(struct clone_args *args, int (*fn)(void *), void *arg)
{
	(void)args, (void)fn, (void)arg;
	return -ENOSYS;
}
#endif

#define raw0(n) raw6(n, 0, 0, 0, 0, 0, 0)
#define raw1(n, a) raw6(n, (long)(a), 0, 0, 0, 0, 0)
#define raw2(n, a, b) raw6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define raw3(n, a, b, c) raw6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define raw4(n, a, b, c, d) raw6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* What the child reads: the request, and its own scratch copy of the fd
 * layout, allocated by the parent. */
struct child_ctx {
	const struct spawn_req *req;
	int *fd;
	int release_fd, release_w, err_fd;
	pid_t ppid;
};

#define STACK_BYTES (64 * 1024)

/* child runs in the new process, on its own stack, until execve. */
static int child(void *arg)
{
	struct child_ctx *c = arg;
	const struct spawn_req *r = c->req;
	long e = 0;
	int i, nextfd, errfd = c->err_fd, exec_fd = r->exec_fd;

	if (r->ambient && (e = raw2(SYS_prctl, PR_SET_KEEPCAPS, 1)) < 0) goto fail;
	if (c->release_fd >= 0) {
		char b = 0;
		/* Our copy of the write end: without closing it a parent killed
		 * before it releases us would leave us waiting for ever. */
		raw1(SYS_close, c->release_w);
		do e = raw3(SYS_read, c->release_fd, &b, 1);
		while (e == -EINTR);
		if (e != 1) return 126; /* the parent gave up on us and reports why */
	}
	if (r->set_cred) {
		if (!r->no_setgroups && (e = raw2(SYS_setgroups, 0, NULL)) < 0) goto fail;
		if ((e = raw1(SYS_setgid, r->gid)) < 0) goto fail;
		if ((e = raw1(SYS_setuid, r->uid)) < 0) goto fail;
	}
	if (r->ambient) {
		struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct d[2];
		if ((e = raw2(SYS_capget, &h, d)) < 0) goto fail;
		for (i = 0; i < 64; i++) {
			if (!(r->ambient & (1ULL << i))) continue;
			d[i / 32].permitted |= 1U << (i % 32);
			d[i / 32].inheritable |= 1U << (i % 32);
		}
		if ((e = raw2(SYS_capset, &h, d)) < 0) goto fail;
		for (i = 0; i < 64; i++)
			if ((r->ambient & (1ULL << i)) && (e = raw4(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, i, 0)) < 0) goto fail;
	}
	if (r->pdeathsig) {
		if ((e = raw2(SYS_prctl, PR_SET_PDEATHSIG, r->pdeathsig)) < 0) goto fail;
		/* A parent that died before that is seen here, unless we are in a
		 * new PID namespace, where getppid is 0: then the stage sees it as
		 * EOF on the sync socket. */
		if (!(r->clone_flags & CLONE_NEWPID) && raw0(SYS_getppid) != c->ppid) {
			e = -ESRCH;
			goto fail;
		}
	}
	/* The fd layout, as os/exec does it: first move every source that a
	 * lower target would overwrite above all of them, then dup each into
	 * place (without close-on-exec). */
	nextfd = r->nfds > errfd ? r->nfds : errfd + 1;
	for (i = 0; i < r->nfds; i++)
		if (c->fd[i] >= nextfd) nextfd = c->fd[i] + 1;
	if (r->exec_fd >= nextfd) nextfd = r->exec_fd + 1;
	/* The error pipe and the executable move above them all first, where
	 * nothing lands. */
	if ((e = raw3(SYS_dup3, errfd, nextfd, O_CLOEXEC)) < 0) goto fail;
	errfd = nextfd++;
	if (exec_fd >= 0) {
		if ((e = raw3(SYS_dup3, exec_fd, nextfd, O_CLOEXEC)) < 0) goto fail;
		exec_fd = nextfd++;
	}
	for (i = 0; i < r->nfds; i++) {
		if (c->fd[i] >= 0 && c->fd[i] < i) {
			if ((e = raw3(SYS_dup3, c->fd[i], nextfd, O_CLOEXEC)) < 0) goto fail;
			c->fd[i] = nextfd++;
		}
	}
	for (i = 0; i < r->nfds; i++) {
		if (c->fd[i] < 0) raw1(SYS_close, i);
		else if (c->fd[i] == i) {
			if ((e = raw3(SYS_fcntl, i, F_SETFD, 0)) < 0) goto fail;
		} else if ((e = raw3(SYS_dup3, c->fd[i], i, 0)) < 0) goto fail;
	}
	if (jail_nofile_at_start.rlim_cur) raw4(SYS_prlimit64, 0, RLIMIT_NOFILE, &jail_nofile_at_start, NULL);
	{
		uint64_t none = 0;
		if ((e = raw4(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none)) < 0) goto fail;
	}
	if (exec_fd >= 0) e = raw6(SYS_execveat, exec_fd, (long)"", (long)r->argv, (long)r->envp, AT_EMPTY_PATH, 0);
	else e = raw3(SYS_execve, r->path, r->argv, r->envp);
fail: {
	int err = (int)-e;
	raw3(SYS_write, errfd, &err, sizeof err);
	return 127;
}
}

static int write_file(pid_t pid, const char *name, const char *data)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) return -errno;
	size_t n = strlen(data);
	ssize_t w = write(fd, data, n);
	int err = w < 0 ? -errno : ((size_t)w != n ? -EIO : 0);
	close(fd);
	return err;
}

static void reap(pid_t pid, int pidfd, int kill_it)
{
	if (kill_it) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR) {}
	close(pidfd);
}

long jail_spawn(const struct spawn_req *r, int *pidfd, int *child_err)
{
	int errp[2] = {-1, -1}, rel[2] = {-1, -1};
	struct child_ctx c = {.req = r, .release_fd = -1, .ppid = getpid()};
	char *stack = MAP_FAILED;
	long pid, ret = 0;

	*child_err = 0;
	*pidfd = -1;
	if (!jail_spawn_supported) return -ENOSYS;
	c.fd = calloc(r->nfds ? r->nfds : 1, sizeof *c.fd);
	if (!c.fd) return -ENOMEM;
	memcpy(c.fd, r->fds, r->nfds * sizeof *c.fd);
	if (pipe2(errp, O_CLOEXEC) < 0) goto fail_errno;
	if ((r->uid_map || r->gid_map) && pipe2(rel, O_CLOEXEC) < 0) goto fail_errno;
	c.release_fd = rel[0];
	c.release_w = rel[1];
	c.err_fd = errp[1];
	stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) goto fail_errno;
	if (mprotect(stack, 4096, PROT_NONE) < 0) goto fail_errno; /* a guard page */

	/* CLONE_CLEAR_SIGHAND: every caught signal is back to its default in
	 * the child from the start, as glibc's posix_spawn does by hand (114
	 * rt_sigaction calls here, about 0.12 ms on a PVM guest). The child
	 * runs on the parent's memory and thread pointer: a handler of the
	 * parent's (the Go runtime's, cmd/jail's sigpipe) run in it for a
	 * signal sent to the process group (SIGWINCH on a resize, SIGINT)
	 * would run on the parent's state and could hang it for good. Ignored
	 * signals stay ignored, as across execve. */
	struct clone_args args = {
		.flags = r->clone_flags | CLONE_VM | CLONE_PIDFD | CLONE_CLEAR_SIGHAND,
		.pidfd = (uint64_t)(uintptr_t)pidfd,
		.exit_signal = SIGCHLD,
		.stack = (uint64_t)(uintptr_t)stack,
		.stack_size = STACK_BYTES,
	};
	if (r->cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)r->cgroup_fd;
	}
	/* The child starts with every signal blocked until its mask opens
	 * right before the exec, by when no handler is left to run. */
	uint64_t all = ~0ULL, old = 0;
	if ((ret = raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof all)) < 0) goto fail;
	pid = clone3_run(&args, child, &c);
	raw4(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old);
	if (pid < 0) {
		ret = pid;
		goto fail;
	}
	close(errp[1]);
	errp[1] = -1;
	if (jail_spawn_test_kill_after_clone) kill(getpid(), SIGKILL);
	if (rel[0] >= 0) {
		close(rel[0]);
		rel[0] = -1;
		if (r->uid_map && (ret = write_file(pid, "uid_map", r->uid_map)) < 0) goto fail_child;
		if (r->gid_map) {
			if ((ret = write_file(pid, "setgroups", r->setgroups_allow ? "allow" : "deny")) < 0) goto fail_child;
			if ((ret = write_file(pid, "gid_map", r->gid_map)) < 0) goto fail_child;
		}
		if (write(rel[1], "", 1) != 1) {
			ret = -errno;
			goto fail_child;
		}
	}
	/* EOF: the exec went through (or the child died, which Wait reports);
	 * until then the child may still be on our stack. */
	int cerr = 0;
	ssize_t n;
	do n = read(errp[0], &cerr, sizeof cerr);
	while (n < 0 && errno == EINTR);
	if (n == sizeof cerr) {
		*child_err = 1;
		ret = -cerr;
		reap(pid, *pidfd, 0);
		*pidfd = -1;
		goto fail;
	}
	ret = pid;
	goto out;

fail_child:
	reap(pid, *pidfd, 1);
	*pidfd = -1;
	goto fail;
fail_errno:
	ret = -errno;
fail:
out:
	if (stack != MAP_FAILED) munmap(stack, STACK_BYTES);
	for (int i = 0; i < 2; i++) {
		if (errp[i] >= 0) close(errp[i]);
		if (rel[i] >= 0) close(rel[i]);
	}
	free(c.fd);
	return ret;
}
