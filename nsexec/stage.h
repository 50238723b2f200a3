// SPDX-License-Identifier: Apache-2.0
/* stage.h: what the files of jail's child stage share (internal; nsexec.h
 * is the contract with the Go side). Everything here is hidden: none of it
 * is visible outside the binary's own C objects. */
#ifndef JAIL_STAGE_H
#define JAIL_STAGE_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nsexec.h"

/* The new mount API (Linux 5.2; mount_setattr 5.12) through syscall(2), so
 * the stage builds against glibc versions that lack the wrappers. */
#ifndef MOUNT_ATTR_RDONLY
struct mount_attr { uint64_t attr_set, attr_clr, propagation, userns_fd; };
#define MOUNT_ATTR_RDONLY 0x1
#define OPEN_TREE_CLONE 1
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#define MOVE_MOUNT_F_EMPTY_PATH 0x4
#define MOVE_MOUNT_T_EMPTY_PATH 0x40
#define FSOPEN_CLOEXEC 0x1
#define FSMOUNT_CLOEXEC 0x1
#define FSCONFIG_SET_FLAG 0
#define FSCONFIG_SET_STRING 1
#define FSCONFIG_CMD_CREATE 6
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x80
#endif
#ifndef SECCOMP_FILTER_FLAG_TSYNC_ESRCH
#define SECCOMP_FILTER_FLAG_TSYNC_ESRCH (1UL << 4) /* Linux 5.7 */
#endif
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5) /* Linux 5.19 */
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* renameat2, Linux 3.15 */
#endif
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41) /* Linux 4.13 */
#endif

static inline int sys_open_tree(int dfd, const char *path, unsigned flags) { return syscall(SYS_open_tree, dfd, path, flags); }
static inline int sys_move_mount(int from, const char *fp, int to, const char *tp, unsigned flags)
{
	return syscall(SYS_move_mount, from, fp, to, tp, flags);
}
static inline int sys_mount_setattr(int dfd, const char *path, unsigned flags, uint64_t set)
{
	struct mount_attr a = {.attr_set = set, .propagation = MS_PRIVATE};
	return syscall(SYS_mount_setattr, dfd, path, flags, &a, sizeof a);
}

#pragma GCC visibility push(hidden)

/* A step of a table: run only if every flag of when is set and none of
 * unless. One way of gating a step, everywhere. */
struct step {
	const char *name;
	int (*run)(struct plan *);
	uint32_t when;
	uint32_t unless;
};
int run_steps(const struct step *steps, size_t n, struct plan *p, const char **step);
#define RUN_STEPS(t, p, step) run_steps(t, sizeof t / sizeof t[0], p, step)

/* nsexec.c: the sync socket, and the steps every role shares */
int send_msg_ex(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step, int32_t pid, int32_t aux);
int send_msg(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step);
int send_fd(int sock, const void *msg, size_t len, int fd);
int read_plan(struct plan *p);
int read_process(struct plan *p);
int read_record(int fd, struct plan *p, int process);
int join_cgroup(struct plan *p);
int join_cgroup_late(struct plan *p);
ssize_t recv_fds(int sock, void *b, size_t len, int flags, int *fds, int *nfds);
int cgroup_namespace(struct plan *p);
int block_signals_step(struct plan *p);
int wait_for_go(struct plan *p);
int reap_workload(struct plan *p);
uint32_t extra_fds(const struct plan *p);
uint32_t join_ns_fds(const struct plan *p);
void end_joined(pid_t pid, int pidfd) __attribute__((noreturn));
int kill_tracers(pid_t pid, int killed);
int leader_ended(pid_t pid);
/* TRACER_GRACE_MS: how long a joined process that ended or was killed may
 * stay unreapable (traced) before its tracers in the jail are killed.
 * LEADER_CHECK_MS: how often a helper looks whether the joined process's
 * leader thread has ended while the process has not. */
#define TRACER_GRACE_MS 100
#define LEADER_CHECK_MS 1000
void kill_joined_cgroup(void);
extern int failed_op; /* index of the mount op that failed, for the report */

/* mount.c */
int make_root_rslave(struct plan *p);
int open_sources(struct plan *p);
int enter_root_copy(struct plan *p);
int build_root(struct plan *p);
int close_sources(struct plan *p);
int apply_mounts(struct plan *p);
int pivot_into_root(struct plan *p);
int remount_root_ro(struct plan *p);
void close_rule_fds(struct plan *p);
int reset_layers(struct plan *p, const int *trees, int ntrees);

/* seccomp.c */
int load_seccomp(const struct plan *p, int errfd);
int start_listener(struct plan *p);
int listener_started(void);
int hand_listener(int lfd, pid_t workload);
void drain_listener(void);
int seccomp_buffers(struct plan *p);
void serve_join_listener(struct plan *p, pid_t workload);
int serve_notifications(struct plan *p, int lfd, pid_t workload, int drain);
int32_t seccomp_event_count(void);
extern int host_proc; /* a join helper's host /proc, opened before it enters the jail */

/* workload.c */
int open_terminal(struct plan *p);
void close_terminal_slave(void);
void run_workload(struct plan *p, int errfd) __attribute__((noreturn));
int drop_bounding_set(void);
int clear_capabilities(void);
int apply_landlock(const struct plan *p);

/* files.c (not in the standalone stage) */
void files_main(void);

/* session.c */
int session_loop(struct plan *p);

/* join.c */
int run_join(struct plan *p, const char **step);

/* whole_jail reports whether a signal for the workload goes to every
 * process of the jail (kill(-1) by its PID 1) or to the workload's own
 * process group: a joined process never touches the rest of its session. */
static inline int whole_jail(const struct plan *p) { return (p->flags & PLAN_PIDNS) && !(p->flags & PLAN_JOIN); }

/* block_signals blocks the signals PID 1 forwards, so that they queue from
 * the start: the init of a PID namespace drops a signal from its parent
 * namespace that it neither handles nor blocks (pid_namespaces(7)), and the
 * parent may signal the jail as soon as Start returns. */
static inline int block_signals(sigset_t *set)
{
	static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIG_KILL_JOINED};
	sigemptyset(set);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(set, sigs[i]);
	return sigprocmask(SIG_BLOCK, set, NULL);
}

/* jail_stage_main is the stage's entry (nsexec.c): the constructor's, or
 * the standalone binary's main (stage/main.c). */
void jail_stage_main(int argc, char **argv);

#pragma GCC visibility pop

#endif
