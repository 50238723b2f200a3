//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* workload.c: the workload's own steps: terminal, capabilities, Landlock,
 * credentials, execve. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"
/* ---- the terminal of --tty ---- */

static int tty_slave = -1;

/* close_terminal_slave closes PID 1's copy of the terminal's other side:
 * the master reads EIO once the jail is gone. */
void close_terminal_slave(void)
{
	if (tty_slave >= 0) close(tty_slave);
	tty_slave = -1;
}

/* open_terminal makes the workload's terminal, a new pty of the jail's own
 * devpts instance, and sends its master to the parent, which relays it to
 * the caller's terminal: that one never enters the jail. */
int open_terminal(struct plan *p)
{
	if (!(p->pflags & PLAN_TTY)) return 0;
	int m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC), unlock = 0;
	if (m < 0 && errno == ENOENT) m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0) return -1;
	struct sync_msg msg = {.type = MSG_PTY, .index = -1};
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0 ||
	    (tty_slave = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    send_fd(SYNC_FD, &msg, sizeof msg, m) < 0) {
		int e = errno;
		close(m);
		errno = e;
		return -1;
	}
	close(m);
	return 0;
}

/* ---- the workload: drop everything, then exec ---- */

/* drop_bounding_set empties the bounding and ambient sets. It needs
 * CAP_SETPCAP, so it runs before the ids change: setresuid from a real root
 * (no user namespace) to another id clears the permitted set. */
int drop_bounding_set(void)
{
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL) return -1;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* clear_capabilities empties the effective, permitted and inheritable sets. */
int clear_capabilities(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2] = {{0}};
	return (int)syscall(SYS_capset, &h, d);
}

/* ---- Landlock: the second wall ---- */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define LL_RULE_PATH_BENEATH 1
/* The rights that mean something on a file; a rule on a file holds only these. */
#define LL_FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))

/* apply_landlock restricts the workload to the plan's rules: rights the
 * ruleset handles are refused wherever no rule grants them. The attr
 * carries every field jail knows; a kernel that knows fewer takes it as
 * long as the fields it does not know are zero (the parent plans by the
 * kernel's ABI). Each rule is added on what the mount plan made at its
 * path (keep_rule_fd); a rule the plan made nothing for (an optional op
 * skipped, no mount namespace) opens its path, never through a symlink,
 * and is skipped if the path does not exist or is out of our reach: a rule
 * left out grants less. */
int apply_landlock(const struct plan *p)
{
	struct { uint64_t handled_access_fs, handled_access_net, scoped; } attr = {p->landlock_fs, 0, p->landlock_scoped};
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (rfd < 0) return -1;
	for (size_t i = 0; i < p->nlandlock; i++) {
		struct { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed)) pb;
		struct stat st;
		int fd = p->landlock_rules[i].fd;
		p->landlock_rules[i].fd = -1;
		if (fd < 0) {
			struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
			fd = (int)syscall(SYS_openat2, AT_FDCWD, p->landlock_rules[i].path, &how, sizeof how);
			if (fd < 0 && (errno == ENOENT || errno == EACCES)) continue;
		}
		if (fd < 0 || fstat(fd, &st) < 0) goto fail;
		pb.allowed_access = p->landlock_rules[i].access;
		if (!S_ISDIR(st.st_mode)) pb.allowed_access &= LL_FILE_RIGHTS;
		pb.parent_fd = fd;
		int r = (int)syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0);
		{ int e = errno; close(fd); errno = e; }
		if (r < 0) goto fail;
	}
	if (syscall(SYS_landlock_restrict_self, rfd, 0) < 0) goto fail;
	close(rfd);
	return 0;
fail:
	{ int e = errno; close(rfd); errno = e; }
	return -1;
}

/* exec_workload searches the plan's PATH as execvp(3) does and returns the
 * errno that explains the failure. */
static int exec_workload(struct plan *p)
{
	const char *file = p->argv[0];
	char **argv = (char **)p->argv, **envp = (char **)p->envp;
	if (strchr(file, '/') || p->npath == 0) { execve(file, argv, envp); return errno; }
	int err = ENOENT;
	for (size_t i = 0; i < p->npath; i++) {
		char path[4096];
		if (strlen(p->path[i]) + strlen(file) + 2 > sizeof path) continue;
		strcpy(path, p->path[i]);
		strcat(path, "/");
		strcat(path, file);
		execve(path, argv, envp);
		if (errno == EACCES) err = EACCES;
		else if (errno != ENOENT && errno != ENOTDIR) return errno;
	}
	return err;
}

/* PREFORK_FD is where a preforked workload keeps the plan pipe, after the
 * exec-error socket at 3. */
#define PREFORK_FD 4

/* await_process is a preforked workload's wait (PLAN_PREFORK): set up as
 * the template said, all but the seccomp filter, it reads from the plan
 * pipe the process it runs and takes its argv, env, search path and cwd
 * (the parent checked that nothing else differs). EOF: the jail was
 * discarded. The filter comes after it, as for every workload: no call of
 * jail's own (read, malloc, close, chdir) runs under it, where a policy
 * that kills one would leave the run waiting on a listener PID 1 serves
 * only after the exec. */
static int await_process(struct plan *p)
{
	static struct plan q;
	int r = read_record(PREFORK_FD, &q, 1);
	int e = errno;
	close(PREFORK_FD);
	errno = e;
	if (r < 0) return -1;
	p->argv = q.argv, p->nargs = q.nargs, p->envp = q.envp, p->nenv = q.nenv;
	p->path = q.path, p->npath = q.npath, p->cwd = q.cwd;
	return 0;
}

/* run_workload is the forked child: it never returns. Order matters: the
 * bounding set before the ids (it needs CAP_SETPCAP), ids before the other
 * capability sets (setresuid needs CAP_SETUID), capabilities before
 * no_new_privs, fds closed so that errors can still be reported, and the
 * seccomp filter last, right before execve: nothing of jail's own runs
 * under it. A preforked workload (PLAN_PREFORK) waits, with everything
 * but the filter done, for what it runs: its chdir, the filter and the
 * exec are what is left when the parent releases it. */
void run_workload(struct plan *p, int errfd)
{
	int prefork = (p->flags & PLAN_PREFORK) != 0, planfd = -1;
	const char *step = "setsid";
	sigset_t none;
	sigemptyset(&none);
	for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	umask(022);
	/* A session of its own: the caller's terminal is never its controlling
	 * terminal (TIOCSTI). With --tty, the jail's own pty is. */
	if (setsid() < 0) goto fail;
	step = "terminal";
	if (tty_slave >= 0) {
		for (int fd = 0; fd <= 2; fd++)
			if (dup2(tty_slave, fd) < 0) goto fail;
		if (ioctl(0, TIOCSCTTY, 0) < 0) goto fail;
		if (tty_slave > 2) close(tty_slave);
	}
	step = "rlimits";
	for (size_t i = 0; i < p->nrlimits; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].lim) < 0) goto fail;
	step = "drop bounding set";
	if (drop_bounding_set() < 0) goto fail;
	step = "credentials";
	if ((p->pflags & PLAN_SETGROUPS) && setgroups(0, NULL) < 0) goto fail;
	if (setresgid(p->gid, p->gid, p->gid) < 0 || setresuid(p->uid, p->uid, p->uid) < 0) goto fail;
	/* The id change made us dumpable again where fs.suid_dumpable is 1:
	 * until "close fds" below we hold PID 1's or the join helper's
	 * descriptors (the sync socket, the host's /proc, cgroup.kill), which
	 * a process of the same uid in a session could otherwise take
	 * through /proc/PID/fd. execve sets it anew for the workload. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) goto fail;
	/* Without a PID namespace nothing kills us when PID 1 dies: ask the
	 * kernel to (after setresuid, which clears the parent-death signal). */
	if (!whole_jail(p) && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) goto fail;
	step = "drop capabilities";
	if (clear_capabilities() < 0) goto fail;
	step = "no_new_privs";
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) goto fail;
	step = "landlock";
	if ((p->landlock_fs || p->landlock_scoped) && apply_landlock(p) < 0) goto fail;
	step = "close fds";
	/* Keep 0-2 and the exec-error pipe at 3 (and, preforked, the plan
	 * pipe at 4); runc CVE-2024-21626. */
	if (prefork && (planfd = fcntl(PLAN_FD, F_DUPFD_CLOEXEC, 16)) < 0) goto fail;
	if (errfd != 3 && dup3(errfd, 3, O_CLOEXEC) < 0) goto fail;
	errfd = 3;
	if (prefork && dup3(planfd, PREFORK_FD, O_CLOEXEC) < 0) goto fail;
	if (syscall(SYS_close_range, prefork ? PREFORK_FD + 1 : 4, ~0U, 0) < 0) goto fail;
	if (prefork) {
		step = "read process";
		if (await_process(p) < 0) goto fail;
	}
	step = "chdir";
	if (chdir(p->cwd ? p->cwd : "/") < 0) goto fail;
	step = "seccomp";
	if (p->seccomp && load_seccomp(p, errfd) < 0) goto fail;
	step = "execve";
	errno = exec_workload(p);
fail:;
	struct exec_failure f = {errno, {0}};
	strncpy(f.step, step, sizeof f.step - 1);
	(void)!write(errfd, &f, sizeof f);
	_exit(127);
}
