// SPDX-License-Identifier: Apache-2.0
/* nsexec.h: the plan and sync-message layouts shared by the C stage and the Go
 * side (protocol.go mirrors every constant; protocol_test.go checks them). */
#ifndef JAIL_NSEXEC_H
#define JAIL_NSEXEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#define INIT_ARG0 "jail:init"
#define EXEC_ARG0 "jail:exec"
#define FILES_ARG0 "jail:files"
#define PLAN_FD 3 /* read end of the plan pipe */
#define SYNC_FD 4 /* our end of the SOCK_SEQPACKET sync socket */
#define CGROUP_FD 5 /* the first cgroup v1 "tasks" file to write "0" to */
#define MAX_CGROUP_FDS 16
/* After the cgroup files come the host sources: O_PATH descriptors the parent
 * opened and checked, source k (1-based) at SOURCE_FD(p, k). */
#define SOURCE_FD(p, k) (CGROUP_FD + (int)(p)->cgroup_fds + (int)(k) - 1)
#define MAX_SOURCE_FDS 512
#define MAX_SYSCTLS 8 /* sysctls one plan writes (TAG_SYSCTL) */
/* After the sources: a session's control socket, or a join helper's pidfd
 * of the jail's PID 1 (then its time_for_children with PLAN_TIMENS, then
 * its process's cgroup.kill with PLAN_JOIN_KILL). */
#define EXTRA_FD(p) SOURCE_FD(p, (p)->source_fds + 1)

#define PLAN_MAGIC 0x314c504aU /* "JPL1" little endian: the jail */
#define PROCESS_MAGIC 0x3150504aU /* "JPP1": the process, sent at GO */
#define PLAN_MAX_BYTES (16U << 20)
#define PLAN_MAX_ITEMS 65536

/* plan flags */
#define PLAN_MOUNTNS 0x01   /* build the root; without it the mount steps are skipped */
#define PLAN_ROOT_RO 0x02   /* make / read-only after pivot_root */
#define PLAN_LOOPBACK 0x04  /* bring lo up */
#define PLAN_TIMENS 0x08    /* unshare(CLONE_NEWTIME) before forking the workload */
#define PLAN_PIDNS 0x10     /* we are PID 1: forward signals with kill(-1) */
#define PLAN_SETGROUPS 0x20 /* setgroups(0) is allowed: drop supplementary groups */
#define PLAN_SECCOMP_NOTIFY 0x40 /* load the filter with a listener and hand it to PID 1 */
#define PLAN_SECCOMP_WAIT_KILLABLE 0x80 /* ... with SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19) */
#define PLAN_CGROUPNS 0x100 /* the jail has its own cgroup namespace: make it again after joining v1 cgroups */
#define PLAN_TTY 0x200 /* the workload gets a new terminal of the jail's devpts; its master goes to the parent */
#define PLAN_INITRAMFS 0x400 /* / is the initramfs: enter a copy of the tree first, so pivot_root can detach it */
#define PLAN_SESSION 0x800 /* PID 1 starts nothing at GO and stays up until its deadlines or a stop */
#define PLAN_JOIN 0x1000   /* the plan of "jail:exec": join a running jail, build nothing */
#define PLAN_NETFILTER 0x2000 /* READY carries a NETLINK_NETFILTER socket made in the jail's network namespace */
#define PLAN_NO_GO 0x4000     /* after READY, go on without waiting for GO: the process plan is in the pipe */
#define PLAN_PREFORK 0x8000   /* after READY, fork the workload from the process plan in the pipe; it sets itself up,
			       * then waits on the pipe for the process it runs (argv, env, cwd, path) */
#define PLAN_JOIN_KILL 0x10000 /* a join helper's last extra descriptor: its process's cgroup.kill, written if the
				* parent goes away while the process runs */
#define PLAN_CGROUP_LATE 0x20000 /* no cgroup v1 "tasks" files are inherited: they come in one MSG_CGROUP on the sync
				  * socket, which the stage reads after its mount plan (the parent makes the v1
				  * directories meanwhile), then joins and makes its cgroup namespace */
#define PROCESS_FLAGS (PLAN_SETGROUPS | PLAN_TTY) /* the flags a process plan carries */
/* What a join plan may enter with setns(pidfd): CLONE_NEWNS|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET. */
#define JOINABLE_NS 0x7c020000U
/* The longest session deadline, in ms: what a Go time.Duration holds. */
#define MAX_DEADLINE_MS 9223372036854ULL

/* SIG_KILL_JOINED asks a join helper to SIGKILL its process's process
 * group, then report its end as usual: the parent's way to end a session's
 * command, whose processes a SIGKILL of the helper alone would leave to the
 * session's PID 1. A real-time signal no program sends by chance. */
#define SIG_KILL_JOINED 62

/* record tags */
enum { TAG_FLAGS = 1, TAG_IDS, TAG_ATTACH, TAG_ROOT, TAG_MOUNT, TAG_HOSTNAME, TAG_RLIMIT, TAG_ARG, TAG_ENV, TAG_PATH, TAG_CWD,
       TAG_SECCOMP, TAG_SECCOMP_RULES, TAG_CGROUP_FDS, TAG_SOURCE_FDS, TAG_LANDLOCK, TAG_LANDLOCK_RULE, TAG_SESSION,
       TAG_JOIN, TAG_SYSCTL };
#define BPF_MAX_INSNS 4096

/* mount op kinds and flags */
enum { OP_BIND = 1, OP_FS, OP_MKDIR, OP_FILE, OP_SYMLINK, OP_SETATTR };
#define OPF_OPTIONAL 0x01    /* skip when the source or target does not exist */
#define OPF_CREATE 0x02      /* create a missing mount point */
#define OPF_FILE 0x04        /* the mount point is a file */
#define OPF_SRC_IN_ROOT 0x08 /* the bind source is a path in the new root */
#define OPF_RECURSIVE 0x10   /* OP_SETATTR applies to the whole subtree */
#define OPF_NEW 0x20         /* nothing is at the target yet, in a directory of a file system the plan made:
			      * make it without looking for it first (EEXIST if the plan is wrong) */
#define OPF_TREE 0x40        /* OP_BIND: the source descriptor is a detached mount the parent made (an
			      * idmapped clone), attached as it is: no path, no clone, no attributes */
#define OPF_LAYERS 0x80      /* OP_FS: the lowerdir, upperdir and workdir options are paths in the new root */
#define OPF_ALL 0xff

struct mount_op {
	uint8_t kind, flags;
	uint8_t applied; /* set once apply_mounts has carried the op out (not skipped) */
	uint32_t mode;
	uint64_t attr; /* MOUNT_ATTR_* to set */
	uint32_t src;  /* the host source (SOURCE_FD) of a bind from the host; 0: none */
	const char *source, *target, *fstype, *data;
	uint32_t data_len;
	int tree_fd; /* the detached tree of a bind, once cloned */
};

struct landlock_op {
	uint64_t access; /* LANDLOCK_ACCESS_FS_* granted beneath path */
	const char *path;
	int fd; /* what the mount plan made at path, kept as it made it; -1: not yet */
};

struct rlim_op {
	int resource;
	struct rlimit lim;
};

/* plan holds a jail plan and, once it has come, the process plan. */
struct plan {
	uint32_t flags;         /* the jail's PLAN_* */
	uint32_t pflags;        /* the process's: PROCESS_FLAGS only */
	uint32_t uid, gid;      /* the process's ids */
	uint64_t ttl_ms, idle_ms; /* session deadlines; 0: none */
	uint32_t join_ns;       /* CLONE_NEW* a join plan enters */
	const char *attach, *hostname, *cwd;
	uint32_t attach_src; /* the host source of the attach point */
	uint32_t hostname_len;
	struct mount_op root;
	struct mount_op *mounts;
	const char **argv, **envp, **path;
	struct rlim_op *rlimits;
	size_t nmounts, nargs, nenv, npath, nrlimits;
	const uint8_t *seccomp, *seccomp_rules; /* struct sock_filter[], maybe unaligned */
	uint32_t seccomp_len, seccomp_rules_len; /* in bytes */
	uint32_t cgroup_fds; /* cgroup tasks files at CGROUP_FD... */
	uint32_t source_fds; /* host sources at SOURCE_FD(p, 1)... */
	uint64_t landlock_fs, landlock_scoped; /* the ruleset's handled rights and scopes; 0, 0: none */
	struct landlock_op *landlock_rules;
	size_t nlandlock;
	const char *sysctl_key[MAX_SYSCTLS], *sysctl_val[MAX_SYSCTLS]; /* below /proc/sys; written as they are */
	uint32_t sysctl_val_len[MAX_SYSCTLS];                         /* without the NUL */
	size_t nsysctls;
};

/* A connection to a session's control socket may send one CTL_DEADLINES
 * packet: the byte 'D', then the TTL from now and the idle timeout, each a
 * uint64 of milliseconds in host byte order, CTL_KEEP to leave it as it is,
 * 0 for none. PID 1 answers "1" once they hold. */
#define CTL_DEADLINES 'D'
#define CTL_DEADLINES_LEN 17
#define CTL_KEEP UINT64_MAX
/* A CTL_RESET_LAYERS packet (the byte alone) has PID 1 make the plan's
 * overlays again with empty upper layers (reset_layers): a restore, once
 * the parent has killed every process of the session. It may carry
 * (SCM_RIGHTS) one detached mount per overlay of the plan, in the plan's
 * order: each is put at the mount point of its overlay's upper lower
 * layer (the first of its lowerdir), in place of what was there. PID 1
 * answers "1" when it is done, "0" when it failed, and then ends the
 * session: an overlay may be left without the masks the plan put on it. */
#define CTL_RESET_LAYERS 'L'
/* A CTL_PROBE packet (the byte alone) says the connection only asks
 * whether PID 1 listens (a caller in another PID namespace, which cannot
 * see it): PID 1 closes it, and an idle timeout runs on from where it was,
 * not anew. */
#define CTL_PROBE 'P'
#define MAX_LAYER_TREES 16
/* The most descriptors one packet brings the stage (recv_fds). */
#define MAX_RECV_FDS 16
_Static_assert(MAX_CGROUP_FDS <= MAX_RECV_FDS && MAX_LAYER_TREES == MAX_RECV_FDS, "recv_fds holds every packet's descriptors, a restore's no more");

/* sync messages, both directions, one per SOCK_SEQPACKET datagram */
enum { MSG_READY = 1, MSG_GO, MSG_SETUP_ERROR, MSG_EXEC_ERROR, MSG_STARTED, MSG_EXITED, MSG_SECCOMP, MSG_PTY, MSG_CGROUP };
#define SECCOMP_EV_KILLED 1   /* MSG_SECCOMP aux: PID 1 killed the caller */
#define SECCOMP_EV_WORKLOAD 2 /* MSG_SECCOMP aux: the caller is the workload itself */
#define SECCOMP_EV_INTERRUPTED 4 /* MSG_SECCOMP aux: the call was taken back before PID 1 could read it; the jail was killed */
#define MAX_SECCOMP_EVENTS 32 /* then only the kill that ends the workload is still sent */

struct sync_msg {
	uint32_t type;
	int32_t err;    /* errno, for the error messages */
	int32_t status; /* wait status for MSG_EXITED; the workload's pid for MSG_STARTED */
	int32_t index;  /* mount op index for a failed "mount plan" step, else -1; audit arch for MSG_SECCOMP;
			 * MSG_EXITED: the largest resident set (KiB) of the processes reaped, -1 unknown */
	char step[40];
	int32_t pid; /* MSG_SECCOMP: the calling thread */
	int32_t aux; /* MSG_SECCOMP: SECCOMP_EV_*; MSG_EXITED: number of seccomp events */
};

struct exec_failure {
	int err;
	char step[28];
};

int jail_plan_decode(const uint8_t *buf, size_t len, struct plan *p);
uint32_t jail_bpf_run(const uint8_t *prog, uint32_t len, const void *seccomp_data);

#endif
