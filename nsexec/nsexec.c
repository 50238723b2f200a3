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
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41) /* Linux 4.13 */
#endif

static int sys_open_tree(int dfd, const char *path, unsigned flags) { return syscall(SYS_open_tree, dfd, path, flags); }
static int sys_move_mount(int from, const char *fp, int to, const char *tp, unsigned flags)
{
	return syscall(SYS_move_mount, from, fp, to, tp, flags);
}
static int sys_mount_setattr(int dfd, const char *path, unsigned flags, uint64_t set)
{
	struct mount_attr a = {.attr_set = set, .propagation = MS_PRIVATE};
	return syscall(SYS_mount_setattr, dfd, path, flags, &a, sizeof a);
}

/* ---- plan decoding: a dumb, bounds-checked reader over the parent's bytes ---- */

struct reader { const uint8_t *p, *end; int bad; };

static const uint8_t *take(struct reader *r, size_t n)
{
	if (r->bad || (size_t)(r->end - r->p) < n) { r->bad = 1; return NULL; }
	const uint8_t *q = r->p;
	r->p += n;
	return q;
}
static uint64_t get_uint(struct reader *r, size_t n)
{
	const uint8_t *q = take(r, n);
	uint64_t v = 0;
	for (size_t i = 0; q && i < n; i++) v |= (uint64_t)q[i] << (8 * i); /* little endian */
	return v;
}
/* get_str reads a u32 length and that many bytes, which must end in NUL and
 * contain no other NUL unless blob is set (file contents, option lists). */
static const char *get_str(struct reader *r, uint32_t *len, int blob)
{
	uint32_t n = (uint32_t)get_uint(r, 4);
	const uint8_t *q = take(r, n);
	if (!q || n == 0 || q[n - 1] != 0 || (!blob && memchr(q, 0, n - 1))) { r->bad = 1; return NULL; }
	if (len) *len = n - 1;
	return (const char *)q;
}

/* process_tag reports whether tag belongs to a process plan. */
static int process_tag(uint32_t tag)
{
	return tag == TAG_IDS || tag == TAG_RLIMIT || tag == TAG_ARG || tag == TAG_ENV || tag == TAG_PATH || tag == TAG_CWD;
}

/* jail_plan_decode parses buf, a jail plan (PLAN_MAGIC) or a process plan
 * (PROCESS_MAGIC), into p; a record of the other kind is malformed. Pointers
 * in p point into buf. It returns 0, or -1 on any malformed input. When the
 * arrays of the kind (p->mounts etc., p->argv etc.) are NULL it only counts;
 * the caller allocates and calls again (two passes, no realloc). */
int jail_plan_decode(const uint8_t *buf, size_t len, struct plan *p)
{
	struct reader r = {buf, buf + len, 0};
	size_t nm = 0, na = 0, ne = 0, np = 0, nr = 0, nl = 0;
	int have_root = 0, have_flags = 0;
	uint32_t max_src = 0; /* checked against source_fds, which may come later */
	uint64_t rule_access = 0; /* every landlock rule's rights, checked against the ruleset's */
	uint32_t magic = (uint32_t)get_uint(&r, 4);
	int process = magic == PROCESS_MAGIC;
	if ((magic != PLAN_MAGIC && !process) || get_uint(&r, 4) != len - 8) return -1;
	while (!r.bad && r.p < r.end) {
		uint32_t tag = (uint32_t)get_uint(&r, 4), n = (uint32_t)get_uint(&r, 4);
		const uint8_t *body = take(&r, n);
		if (!body) break;
		struct reader b = {body, body + n, 0};
		if (tag != TAG_FLAGS && process_tag(tag) != process) b.bad = 1;
		switch (b.bad ? 0 : tag) {
		case TAG_FLAGS:
			if (process) p->pflags = (uint32_t)get_uint(&b, 4);
			else p->flags = (uint32_t)get_uint(&b, 4);
			have_flags = 1;
			break;
		case TAG_SESSION: p->ttl_ms = get_uint(&b, 8); p->idle_ms = get_uint(&b, 8); break;
		case TAG_JOIN: p->join_ns = (uint32_t)get_uint(&b, 4); break;
		case TAG_IDS: p->uid = (uint32_t)get_uint(&b, 4); p->gid = (uint32_t)get_uint(&b, 4); break;
		case TAG_ATTACH:
			p->attach = get_str(&b, NULL, 0);
			p->attach_src = (uint32_t)get_uint(&b, 4);
			if (p->attach_src == 0) b.bad = 1;
			if (p->attach_src > max_src) max_src = p->attach_src;
			break;
		case TAG_HOSTNAME: p->hostname = get_str(&b, &p->hostname_len, 0); break;
		case TAG_CWD: p->cwd = get_str(&b, NULL, 0); break;
		case TAG_CGROUP_FDS:
			p->cgroup_fds = (uint32_t)get_uint(&b, 4);
			if (p->cgroup_fds > MAX_CGROUP_FDS) b.bad = 1;
			break;
		case TAG_SOURCE_FDS:
			p->source_fds = (uint32_t)get_uint(&b, 4);
			if (p->source_fds > MAX_SOURCE_FDS) b.bad = 1;
			break;
		case TAG_SECCOMP: case TAG_SECCOMP_RULES: {
			uint32_t n = 0;
			const uint8_t *prog = (const uint8_t *)get_str(&b, &n, 1);
			if (n == 0 || n % 8 || n > 8 * BPF_MAX_INSNS) b.bad = 1;
			if (tag == TAG_SECCOMP) { p->seccomp = prog; p->seccomp_len = n; }
			else { p->seccomp_rules = prog; p->seccomp_rules_len = n; }
			break;
		}
		case TAG_ARG: { const char *s = get_str(&b, NULL, 0); if (p->argv) p->argv[na] = s; na++; break; }
		case TAG_ENV: { const char *s = get_str(&b, NULL, 0); if (p->envp) p->envp[ne] = s; ne++; break; }
		case TAG_PATH: { const char *s = get_str(&b, NULL, 0); if (p->path) p->path[np] = s; np++; break; }
		case TAG_RLIMIT: {
			struct rlim_op rl = {(int)get_uint(&b, 4), {get_uint(&b, 8), get_uint(&b, 8)}};
			if (p->rlimits) p->rlimits[nr] = rl;
			nr++;
			break;
		}
		case TAG_LANDLOCK:
			p->landlock_fs = get_uint(&b, 8);
			p->landlock_scoped = get_uint(&b, 8);
			break;
		case TAG_LANDLOCK_RULE: {
			struct landlock_op l = {get_uint(&b, 8), NULL, -1};
			rule_access |= l.access;
			l.path = get_str(&b, NULL, 0);
			if (l.path && l.path[0] != '/') b.bad = 1;
			if (p->landlock_rules) p->landlock_rules[nl] = l;
			nl++;
			break;
		}
		case TAG_ROOT: case TAG_MOUNT: {
			struct mount_op m = {0};
			m.kind = (uint8_t)get_uint(&b, 1);
			m.flags = (uint8_t)get_uint(&b, 1);
			m.mode = (uint32_t)get_uint(&b, 4);
			m.attr = get_uint(&b, 8);
			m.src = (uint32_t)get_uint(&b, 4);
			m.source = get_str(&b, NULL, 0);
			m.target = get_str(&b, NULL, 0);
			m.fstype = get_str(&b, NULL, 0);
			m.data = get_str(&b, &m.data_len, 1);
			m.tree_fd = -1;
			if (m.kind < OP_BIND || m.kind > OP_SETATTR || (m.flags & ~OPF_ALL) || (m.target && m.target[0] != '/'))
				b.bad = 1;
			/* A bind from the host names its source descriptor; nothing else has one. */
			if ((m.kind == OP_BIND && !(m.flags & OPF_SRC_IN_ROOT)) != (m.src != 0)) b.bad = 1;
			if (m.src > max_src) max_src = m.src;
			if (tag == TAG_ROOT) { if (!b.bad) p->root = m; have_root = 1; break; }
			if (p->mounts) p->mounts[nm] = m;
			nm++;
			break;
		}
		default: b.bad = 1; /* unknown tag: parent and child are the same binary */
		}
		if (b.bad || b.p != b.end) r.bad = 1;
	}
	if (r.bad || !have_flags) return -1;
	if (process) {
		if (na == 0 || (p->pflags & ~PROCESS_FLAGS) || na > PLAN_MAX_ITEMS || ne > PLAN_MAX_ITEMS ||
		    np > PLAN_MAX_ITEMS || nr > PLAN_MAX_ITEMS)
			return -1;
		p->nargs = na; p->nenv = ne; p->npath = np; p->nrlimits = nr;
		return 0;
	}
	if (p->flags & PROCESS_FLAGS) return -1;
	if ((p->flags & PLAN_SECCOMP_NOTIFY) && !p->seccomp) return -1;
	if (max_src > p->source_fds) return -1;
	if (nl > 0 && !p->landlock_fs) return -1; /* rules without a ruleset */
	if (rule_access & ~p->landlock_fs) return -1; /* a right the ruleset does not handle: EINVAL later */
	if ((p->flags & PLAN_MOUNTNS) && (!p->attach || !have_root)) return -1;
	if (!(p->flags & PLAN_SESSION) && (p->ttl_ms || p->idle_ms)) return -1;
	if (p->ttl_ms > MAX_DEADLINE_MS || p->idle_ms > MAX_DEADLINE_MS) return -1;
	if (p->flags & PLAN_JOIN) {
		if ((p->flags & (PLAN_MOUNTNS | PLAN_SESSION | PLAN_INITRAMFS)) || p->attach || nm || p->hostname ||
		    p->source_fds || !p->join_ns || (p->join_ns & ~JOINABLE_NS))
			return -1;
	} else if (p->join_ns) {
		return -1;
	}
	if (nm > PLAN_MAX_ITEMS || nl > PLAN_MAX_ITEMS) return -1;
	p->nmounts = nm; p->nlandlock = nl;
	return 0;
}

/* ---- the sync socket ---- */

static int send_msg_ex(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step, int32_t pid,
		       int32_t aux)
{
	struct sync_msg m = {.type = type, .err = err, .status = status, .index = index, .pid = pid, .aux = aux};
	if (step) strncpy(m.step, step, sizeof m.step - 1);
	return send(SYNC_FD, &m, sizeof m, MSG_NOSIGNAL) == sizeof m ? 0 : -1;
}
static int send_msg(uint32_t type, int32_t err, int32_t status, int32_t index, const char *step)
{
	return send_msg_ex(type, err, status, index, step, 0, 0);
}

/* send_fd sends a message of type with descriptor fd attached (SCM_RIGHTS)
 * over sock. */
static int send_fd(int sock, const void *msg, size_t len, int fd)
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

/* ---- mount steps: everything happens relative to root_fd, the new root ---- */

static int root_fd = -1;
static int failed_op = -1; /* index of the mount op that failed, for the report */

/* open_in_root opens path inside the new root; symlinks, including absolute
 * ones and "..", cannot leave it (openat2 RESOLVE_IN_ROOT, Linux 5.6). */
static int open_in_root(const char *path, int flags, mode_t mode)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .mode = (flags & O_CREAT) ? mode : 0,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	return (int)syscall(SYS_openat2, root_fd, path, &how, sizeof how);
}

/* mkdir_p creates path and its parents inside the new root (mkdir -p). */
static int mkdir_p(const char *path, mode_t mode)
{
	char buf[4096];
	if (strlen(path) >= sizeof buf) { errno = ENAMETOOLONG; return -1; }
	strcpy(buf, path);
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != 0) continue;
		char c = *p, *slash;
		*p = 0;
		slash = strrchr(buf, '/');
		*slash = 0;
		int dfd = open_in_root(slash == buf ? "/" : buf, O_PATH | O_DIRECTORY, 0);
		*slash = '/';
		int r = dfd < 0 ? -1 : mkdirat(dfd, slash + 1, mode);
		if (dfd >= 0) close(dfd);
		if (r < 0 && errno != EEXIST) return -1;
		if (!c) return 0;
		*p = c;
	}
}

/* parent_dir creates the directory that will hold path and opens it; *name
 * points at the last component of path. */
static int parent_dir(const char *path, char *buf, size_t size, const char **name)
{
	if (strlen(path) >= size) { errno = ENAMETOOLONG; return -1; }
	strcpy(buf, path);
	char *slash = strrchr(buf, '/');
	*name = path + (slash - buf) + 1;
	*slash = 0;
	int fd = open_in_root(buf[0] ? buf : "/", O_PATH | O_DIRECTORY, 0);
	if (fd >= 0 || errno != ENOENT) return fd; /* the usual case: one openat2 */
	if (mkdir_p(buf, 0755) < 0) return -1;
	return open_in_root(buf, O_PATH | O_DIRECTORY, 0);
}

/* open_target opens a mount point, creating it (a directory, or an empty file
 * for OPF_FILE) when OPF_CREATE is set. */
static int open_target(const struct mount_op *m)
{
	int fd = open_in_root(m->target, O_PATH, 0);
	if (fd >= 0 || errno != ENOENT || !(m->flags & OPF_CREATE)) return fd;
	char buf[4096];
	const char *name;
	int dfd = parent_dir(m->target, buf, sizeof buf, &name);
	if (dfd < 0) return -1;
	int r = (m->flags & OPF_FILE) ? openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)
				      : mkdirat(dfd, name, 0755);
	close(dfd);
	if (r < 0 && errno != EEXIST) return -1;
	if (r > 0) close(r);
	return open_in_root(m->target, O_PATH, 0);
}

/* fs_mount creates a detached filesystem mount (fsopen, fsconfig, fsmount).
 * m->data is a NUL-separated list of "key=value" or "flag" options. */
static int fs_mount(const struct mount_op *m)
{
	int fd = (int)syscall(SYS_fsopen, m->fstype, FSOPEN_CLOEXEC), mfd = -1;
	if (fd < 0) return -1;
	for (const char *o = m->data; o < m->data + m->data_len; o += strlen(o) + 1) {
		char key[64];
		const char *eq = strchr(o, '=');
		size_t klen = eq ? (size_t)(eq - o) : strlen(o);
		if (klen == 0) continue;
		if (klen >= sizeof key) { errno = EINVAL; goto out; }
		memcpy(key, o, klen);
		key[klen] = 0;
		if (syscall(SYS_fsconfig, fd, eq ? FSCONFIG_SET_STRING : FSCONFIG_SET_FLAG, key, eq ? eq + 1 : NULL, 0) < 0)
			goto out;
	}
	if (syscall(SYS_fsconfig, fd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		mfd = (int)syscall(SYS_fsmount, fd, FSMOUNT_CLOEXEC, (unsigned)m->attr);
out:
	{ int e = errno; close(fd); errno = e; }
	return mfd;
}

/* open_host opens a host path the parent opened and checked before us, as
 * source k, and makes sure it is the same object: the path is resolved again
 * here (an O_PATH descriptor from the parent's mount namespace cannot be
 * cloned in ours: open_tree refuses a mount of another namespace), without
 * following any symlink, and refused with ESTALE unless it is the very inode
 * the parent checked. So a path swapped between the check and the mount
 * (a directory renamed, a component replaced by a symlink by the workload of
 * another jail) never reaches the mount. */
static int open_host(const struct plan *p, const char *path, uint32_t k)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
	if (fd < 0) return -1;
	struct stat ours, checked;
	if (fstat(fd, &ours) < 0 || fstat(SOURCE_FD(p, k), &checked) < 0) { int e = errno; close(fd); errno = e; return -1; }
	if (ours.st_dev != checked.st_dev || ours.st_ino != checked.st_ino) { close(fd); errno = ESTALE; return -1; }
	return fd;
}

/* The host sources open_host opened and checked, by source number, while
 * open_sources runs: one source serves many ops (/dev/null masks a dozen
 * /proc files), and is opened and checked once. */
static int host_fds[MAX_SOURCE_FDS + 1];

/* clone_source makes the detached tree of a bind from the host: a recursive
 * clone (open_tree, like mount --rbind) of the checked source. */
static int clone_source(const struct plan *p, const struct mount_op *m)
{
	int *sfd = &host_fds[m->src];
	if (*sfd < 0 && (*sfd = open_host(p, m->source, m->src)) < 0) return -1;
	return sys_open_tree(*sfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
}

/* detached_tree returns a mount fd for op m, not yet attached anywhere: a
 * new file system, or a bind (cloned from the host by open_sources, or from
 * a path in the new root) whose attributes (read-only, nosuid, nodev,
 * private) are set on the whole detached tree before anyone can see it: no
 * window where a read-only bind is writable, and locked flags are kept
 * because mount_setattr only adds. */
static int detached_tree(struct mount_op *m)
{
	if (m->kind == OP_FS) return fs_mount(m);
	int fd = m->tree_fd;
	m->tree_fd = -1;
	if (fd < 0 && (m->flags & OPF_SRC_IN_ROOT)) {
		int sfd = open_in_root(m->source, O_PATH, 0);
		if (sfd < 0) return -1;
		fd = sys_open_tree(sfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
		close(sfd);
	} else if (fd < 0) {
		errno = EBADF; /* a host bind open_sources did not clone: cannot happen */
	}
	if (fd < 0) return -1;
	if (sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, m->attr) < 0) { close(fd); return -1; }
	return fd;
}

/* keep_rule_fd gives the Landlock rules for target what the mount plan has
 * just made there: fd, a mount (duplicated), or with fd -1 target opened
 * again at once, resolved as the plan resolved it. apply_landlock adds the
 * rules on these descriptors, not by path: by then a directory shared with
 * another jail could have been renamed and a symlink put in its place, and
 * a rule meant for a bind would land on whatever the symlink names. */
static int keep_rule_fd(struct plan *p, const char *target, int fd)
{
	for (size_t i = 0; i < p->nlandlock; i++) {
		struct landlock_op *l = &p->landlock_rules[i];
		if (strcmp(l->path, target) != 0) continue;
		int nfd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : open_in_root(target, O_PATH | O_NOFOLLOW, 0);
		if (nfd < 0) return -1;
		if (l->fd >= 0) close(l->fd); /* a later op on the same target covers the earlier one */
		l->fd = nfd;
	}
	return 0;
}

static void close_rule_fds(struct plan *p)
{
	for (size_t i = 0; i < p->nlandlock; i++)
		if (p->landlock_rules[i].fd >= 0) { close(p->landlock_rules[i].fd); p->landlock_rules[i].fd = -1; }
}

/* write_file creates a regular file with the op's contents (the minimal /etc). */
static int write_file(const struct mount_op *m)
{
	char buf[4096];
	const char *name;
	int dfd = parent_dir(m->target, buf, sizeof buf, &name);
	if (dfd < 0) return -1;
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, m->mode);
	close(dfd);
	if (fd < 0) return -1;
	size_t off = 0;
	while (off < m->data_len) {
		ssize_t n = write(fd, m->data + off, m->data_len - off);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) { close(fd); return -1; }
		off += (size_t)n;
	}
	return close(fd);
}

static int apply_op(struct plan *p, struct mount_op *m)
{
	char buf[4096];
	const char *name;
	int fd, tfd, r;
	switch (m->kind) {
	case OP_MKDIR: return mkdir_p(m->target, m->mode) < 0 ? -1 : keep_rule_fd(p, m->target, -1);
	case OP_FILE: return write_file(m) < 0 ? -1 : keep_rule_fd(p, m->target, -1);
	case OP_SYMLINK:
		if ((fd = parent_dir(m->target, buf, sizeof buf, &name)) < 0) return -1;
		r = symlinkat(m->data, fd, name);
		close(fd);
		return r;
	case OP_SETATTR:
		if ((fd = open_in_root(m->target, O_PATH, 0)) < 0) return -1;
		r = sys_mount_setattr(fd, "", AT_EMPTY_PATH | ((m->flags & OPF_RECURSIVE) ? AT_RECURSIVE : 0), m->attr);
		close(fd);
		return r;
	}
	if (m->kind == OP_BIND && !(m->flags & OPF_SRC_IN_ROOT) && m->tree_fd < 0) {
		/* open_sources skipped it: an optional source gone since the
		 * parent checked it. Skipped here too, before its target is made. */
		errno = (m->flags & OPF_OPTIONAL) ? ENOENT : EBADF;
		return -1;
	}
	if ((tfd = open_target(m)) < 0) return -1;
	if ((fd = detached_tree(m)) < 0) { r = -1; goto out; }
	r = sys_move_mount(fd, "", tfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
	if (r == 0) r = keep_rule_fd(p, m->target, fd);
	{ int e = errno; close(fd); errno = e; }
out:
	{ int e = errno; close(tfd); errno = e; }
	return r;
}

/* ---- the steps, in order ---- */

/* make_root_rslave: our mounts must not propagate back to the host. The
 * kernel copied the host's mount table at clone time with its propagation,
 * so a shared / would leak. Equivalent to `mount --make-rslave /`. */
static int make_root_rslave(struct plan *p)
{
	(void)p;
	return mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
}

/* open_sources clones every host bind source, and a directory root, while
 * the host tree is still fully visible (attaching the new root later covers
 * its attach point). */
static int open_sources(struct plan *p)
{
	int r = 0;
	for (uint32_t k = 0; k <= p->source_fds; k++) host_fds[k] = -1;
	if (p->root.kind == OP_BIND && (p->root.tree_fd = clone_source(p, &p->root)) < 0) r = -1;
	for (size_t i = 0; r == 0 && i < p->nmounts; i++) {
		struct mount_op *m = &p->mounts[i];
		if (m->kind != OP_BIND || (m->flags & OPF_SRC_IN_ROOT)) continue;
		m->tree_fd = clone_source(p, m);
		if (m->tree_fd < 0 && !(errno == ENOENT && (m->flags & OPF_OPTIONAL))) { failed_op = (int)i; r = -1; }
	}
	int e = errno;
	for (uint32_t k = 0; k <= p->source_fds; k++)
		if (host_fds[k] >= 0) close(host_fds[k]);
	errno = e;
	return r;
}

/* enter_root_copy runs when / is the initramfs (rootfs), which has no
 * parent mount, so pivot_root refuses it (EINVAL) and nothing could detach
 * the host's tree. It clones the whole tree, attaches the clone on top of
 * the initramfs and enters it: the clone has a parent, pivot_root works on
 * it, and the host's tree goes with it when the old root is detached, as on
 * any other host. (Unmounting the host's mounts one by one is not an option
 * in a user namespace: they came over as one locked tree.) */
static int enter_root_copy(struct plan *p)
{
	if (!(p->flags & PLAN_INITRAMFS)) return 0;
	int fd = sys_open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (fd < 0) return -1;
	int r = sys_move_mount(fd, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH);
	if (r == 0) r = fchdir(fd);
	if (r == 0) r = chroot(".");
	{ int e = errno; close(fd); errno = e; }
	return r;
}

/* build_root makes the new root (a tmpfs, or the read-only clone of a
 * directory) and attaches it on the plan's attach point, a host directory,
 * inside our mount namespace. The mount's own descriptor is the root from
 * now on. */
static int build_root(struct plan *p)
{
	int fd = detached_tree(&p->root), afd = -1;
	if (fd < 0) return -1;
	if ((afd = open_host(p, p->attach, p->attach_src)) < 0 ||
	    sys_move_mount(fd, "", afd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
		int e = errno;
		close(fd);
		if (afd >= 0) close(afd);
		errno = e;
		return -1;
	}
	close(afd);
	root_fd = fd;
	return keep_rule_fd(p, "/", root_fd);
}

/* close_sources closes the host descriptors: from here on, PID 1 holds
 * nothing of the host's file system. */
static int close_sources(struct plan *p)
{
	if (p->source_fds == 0) return 0;
	return (int)syscall(SYS_close_range, SOURCE_FD(p, 1), SOURCE_FD(p, p->source_fds), 0);
}

static int apply_mounts(struct plan *p)
{
	for (size_t i = 0; i < p->nmounts; i++) {
		struct mount_op *m = &p->mounts[i];
		int r = apply_op(p, m), e = errno;
		if (m->tree_fd >= 0) { close(m->tree_fd); m->tree_fd = -1; } /* not consumed: the op failed or was skipped */
		errno = e;
		if (r < 0) {
			if (errno == ENOENT && (m->flags & OPF_OPTIONAL)) continue;
			failed_op = (int)i;
			return -1;
		}
	}
	return 0;
}

/* pivot_into_root makes the new root "/" and detaches the host's tree, the
 * pivot_root(".", ".") way (see pivot_root(2), runc, bubblewrap). */
static int pivot_into_root(struct plan *p)
{
	(void)p;
	if (fchdir(root_fd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) return -1;
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) return -1;
	close(root_fd);
	return 0;
}

static int remount_root_ro(struct plan *p)
{
	if (!(p->flags & PLAN_ROOT_RO)) return 0;
	return sys_mount_setattr(AT_FDCWD, "/", 0, MOUNT_ATTR_RDONLY);
}

static int set_hostname(struct plan *p)
{
	return p->hostname ? sethostname(p->hostname, p->hostname_len) : 0;
}

/* loopback_up: Equivalent to `ip link set lo up` in the new net namespace. */
static int loopback_up(struct plan *p)
{
	if (!(p->flags & PLAN_LOOPBACK)) return 0;
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

/* new_time_ns: CLONE_NEWTIME cannot be given to clone(2), only to unshare;
 * the workload, our next child, is the first process in it. */
static int new_time_ns(struct plan *p)
{
	return (p->flags & PLAN_TIMENS) ? unshare(CLONE_NEWTIME) : 0;
}

/* wait_for_go tells the parent setup is done and waits for its "go" (the
 * parent may still attach cgroups or start capture). EOF: the parent died. */
static int wait_for_go(struct plan *p)
{
	(void)p;
	struct sync_msg m;
	if (send_msg(MSG_READY, 0, 0, -1, NULL) < 0) return -1;
	ssize_t n;
	while ((n = recv(SYNC_FD, &m, sizeof m, 0)) < 0 && errno == EINTR);
	if (n != sizeof m || m.type != MSG_GO) { errno = n == 0 ? EPIPE : EPROTO; return -1; }
	return 0;
}

/* ---- seccomp: the workload loads the parent's program; PID 1 answers ---- */

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
static int load_seccomp(const struct plan *p, int errfd)
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
static int host_proc = -1;

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

/* whole_jail reports whether a signal for the workload goes to every
 * process of the jail (kill(-1) by its PID 1) or to the workload's own
 * process group: a joined process never touches the rest of its session. */
static int whole_jail(const struct plan *p) { return (p->flags & PLAN_PIDNS) && !(p->flags & PLAN_JOIN); }

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
 * listener (hand_listener); a step of run_child, before the time namespace. */
static int start_listener(struct plan *p)
{
	if (!(p->flags & PLAN_SECCOMP_NOTIFY)) return 0;
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
static int hand_listener(int lfd, pid_t workload)
{
	pid_t w[2] = {lfd, workload};
	return write(listener.handoff[1], w, sizeof w) == (ssize_t)sizeof w ? 0 : -1;
}

/* drain_listener waits until the listener has handled every notification
 * the kernel queued, so that the workload's report comes after all of its
 * seccomp events. Called once the workload has exited. */
static void drain_listener(void)
{
	if (!listener.started) return;
	listener.draining = 1;
	for (;;) {
		pthread_kill(listener.thread, SIG_DRAIN);
		struct pollfd pd = {listener.done[0], POLLIN, 0};
		if (poll(&pd, 1, 2) > 0) return; /* else the signal came between two RECVs: again */
	}
}

/* ---- the terminal of --tty ---- */

static int tty_slave = -1;

/* open_terminal makes the workload's terminal, a new pty of the jail's own
 * devpts instance, and sends its master to the parent, which relays it to
 * the caller's terminal: that one never enters the jail. */
static int open_terminal(struct plan *p)
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
static int drop_bounding_set(void)
{
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL) return -1;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* clear_capabilities empties the effective, permitted and inheritable sets. */
static int clear_capabilities(void)
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
static int apply_landlock(const struct plan *p)
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

/* run_workload is the forked child: it never returns. Order matters: the
 * bounding set before the ids (it needs CAP_SETPCAP), ids before the other
 * capability sets (setresuid needs CAP_SETUID), capabilities before
 * no_new_privs, fds closed so that errors can still be reported, and the
 * seccomp filter last, right before execve: nothing of jail's own runs
 * under it. */
static void run_workload(struct plan *p, int errfd)
{
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
	/* Keep 0-2 and the exec-error pipe at 3; runc CVE-2024-21626. */
	if (errfd != 3 && dup3(errfd, 3, O_CLOEXEC) < 0) goto fail;
	errfd = 3;
	if (syscall(SYS_close_range, 4, ~0U, 0) < 0) goto fail;
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

/* block_signals blocks the signals PID 1 forwards, so that they queue from
 * the start: the init of a PID namespace drops a signal from its parent
 * namespace that it neither handles nor blocks (pid_namespaces(7)), and the
 * parent may signal the jail as soon as Start returns. */
static int block_signals(sigset_t *set)
{
	static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	sigemptyset(set);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(set, sigs[i]);
	return sigprocmask(SIG_BLOCK, set, NULL);
}

/* serve_notifications answers the notifications queued on a joined
 * process's listener from the reaper's poll loop (all of them when drain
 * is set, else one). Each queued notification ups a semaphore RECV downs,
 * so after POLLIN a RECV returns at once: the notification, or ENOENT for
 * one a signal took back, which fails closed as the thread does. It
 * returns -1 once no task uses the filter. */
static int serve_notifications(struct plan *p, int lfd, pid_t workload, int drain)
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

/* reap_workload forks the workload and stays its PID 1: it reaps every
 * child, forwards the parent's signals (to the whole jail when it owns a
 * PID namespace) and reports the workload's wait status. When it exits, the
 * kernel kills whatever is left in the PID namespace. */
static int reap_workload(struct plan *p)
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
	close_rule_fds(p); /* the workload has its own copies */
	if (tty_slave >= 0) close(tty_slave); /* the master reads EIO once the jail is gone */

	struct exec_failure f;
	ssize_t n;
	for (;;) { /* the listener (if any), then EOF at execve or a failure */
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
		listener.p = p;
		listener.workload = pid;
	} else if (lfd >= 0 && (!listener.started || hand_listener(lfd, pid) < 0)) {
		int e = listener.started ? errno : EPROTO;
		kill(pid, SIGKILL); /* never run without the supervisor the filter needs */
		send_msg(MSG_SETUP_ERROR, e, 0, -1, "seccomp listener");
		_exit(1);
	}

	struct pollfd fds[3] = {{sfd, POLLIN, 0}, {SYNC_FD, POLLIN, 0}, {(p->flags & PLAN_JOIN) ? lfd : -1, POLLIN, 0}};
	for (;;) {
		if (poll(fds, 3, -1) < 0) { if (errno == EINTR) continue; return -1; }
		if (fds[2].revents && serve_notifications(p, lfd, pid, 0) < 0) fds[2].fd = -1; /* the filter is unused */
		if (fds[1].revents) { /* the parent went away (or spoke out of turn): end the jail, or the joined process */
			if (p->flags & PLAN_JOIN) kill(-pid, SIGKILL);
			_exit(1);
		}
		if (!(fds[0].revents & POLLIN)) continue;
		struct signalfd_siginfo si;
		if (read(sfd, &si, sizeof si) != sizeof si) continue;
		if (si.ssi_signo != SIGCHLD) {
			kill(whole_jail(p) ? -1 : -pid, (int)si.ssi_signo);
			continue;
		}
		pid_t r;
		while ((r = waitpid(-1, &status, WNOHANG)) > 0)
			if (r == pid) {
				if (fds[2].fd >= 0) serve_notifications(p, lfd, pid, 1);
				drain_listener();
				send_msg_ex(MSG_EXITED, 0, status, -1, NULL, 0, seccomp_events);
				_exit(0);
			}
	}
}

/* join_cgroup moves this process, still single-threaded, into the run's
 * cgroup v1 hierarchies: writing "0" to a "tasks" file moves the writer
 * without the global lock and RCU grace period that a move by pid waits
 * for (5-15 ms after a quiet spell). The parent opened the files, so its
 * credentials are the ones checked; it verifies the result at READY. */
static int join_cgroup(struct plan *p)
{
	for (uint32_t i = 0; i < p->cgroup_fds; i++) {
		int fd = CGROUP_FD + (int)i;
		ssize_t n;
		while ((n = write(fd, "0", 1)) < 0 && errno == EINTR);
		if (n != 1) return -1;
		close(fd);
	}
	return 0;
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

/* read_record reads one plan from PLAN_FD and decodes it into p (two
 * passes: count, then fill the arrays of its kind). The buffer and the
 * arrays live until execve replaces this image. */
static int read_record(struct plan *p, int process)
{
	uint8_t hdr[8];
	if (read_full(PLAN_FD, hdr, sizeof hdr) < 0) return -1;
	uint32_t len = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
	uint32_t magic = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
	if (len > PLAN_MAX_BYTES) { errno = E2BIG; return -1; }
	if (magic != (process ? PROCESS_MAGIC : PLAN_MAGIC)) { errno = EINVAL; return -1; }
	uint8_t *buf = malloc(len + 8);
	if (!buf) return -1;
	memcpy(buf, hdr, 8);
	if (read_full(PLAN_FD, buf + 8, len) < 0) return -1;
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
static uint32_t extra_fds(const struct plan *p)
{
	if (p->flags & PLAN_SESSION) return 1; /* the control socket */
	if (p->flags & PLAN_JOIN) return (p->flags & PLAN_TIMENS) ? 2 : 1; /* pidfd, time_for_children */
	return 0;
}

/* read_plan reads the jail plan. Only what the parent passed on purpose
 * stays open: a descriptor that jail's caller let jail inherit (one
 * without close-on-exec) would otherwise stay open inside the jail, and a
 * host directory there is runc CVE-2024-21626's way out. PLAN_FD stays
 * open for the process plan. */
static int read_plan(struct plan *p)
{
	if (read_record(p, 0) < 0) return -1;
	return (int)syscall(SYS_close_range, EXTRA_FD(p) + extra_fds(p), ~0U, 0);
}

/* read_process reads the process plan the parent sent with GO. */
static int read_process(struct plan *p)
{
	int r = read_record(p, 1);
	int e = errno;
	close(PLAN_FD);
	errno = e;
	return r;
}

/* ---- a session: PID 1 with no process of its own ---- */

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
 * no jail process running on the host. */
static int session_loop(struct plan *p)
{
	sigset_t set;
	int sfd, ctl = EXTRA_FD(p), ttl, idle, conns[MAX_CONNS], nconns = 0;
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
			char c;
			if (recv(conns[i], &c, 1, MSG_DONTWAIT) > 0) continue; /* nothing is said on it */
			close(conns[i]);
			conns[i] = conns[--nconns];
			if (nconns == 0 && p->idle_ms && arm(idle, p->idle_ms) < 0) return -1;
		}
		if (fds[1].revents & POLLIN) {
			int c = accept4(ctl, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (c < 0) continue;
			/* The ack says the session took the connection: a joined
			 * process runs only while it is counted. */
			if (nconns == MAX_CONNS || send(c, "1", 1, MSG_NOSIGNAL) != 1) { close(c); continue; }
			conns[nconns++] = c;
			if (arm(idle, 0) < 0) return -1;
		}
	}
}

/* ---- the tables ---- */

struct step {
	const char *name;
	int (*run)(struct plan *);
	uint32_t when; /* run only if every one of these plan flags is set; 0: always */
	uint32_t unless; /* skip if any of these is set */
};

/* run_steps runs a table in order; on failure *step names the step. */
static int run_steps(const struct step *steps, size_t n, struct plan *p, const char **step)
{
	for (size_t i = 0; i < n; i++) {
		if ((p->flags & steps[i].when) != steps[i].when || (p->flags & steps[i].unless)) continue;
		*step = steps[i].name;
		if (steps[i].run(p) < 0) return -1;
	}
	return 0;
}
#define RUN_STEPS(t, p, step) run_steps(t, sizeof t / sizeof t[0], p, step)

static int cgroup_namespace(struct plan *p)
{
	/* The cgroup namespace was made at clone, before the join: its root is
	 * the caller's cgroup, and /proc/self/cgroup would show the jail's
	 * cgroup name, with jail's host pid in it. Made again here, its root is
	 * the jail's own cgroup. A joined process makes its own, rooted at the
	 * cgroup it joined. */
	if (p->cgroup_fds == 0 && !(p->flags & PLAN_JOIN)) return 0;
	return unshare(CLONE_NEWCGROUP);
}

static int block_signals_step(struct plan *p)
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
		{"cgroup namespace", cgroup_namespace, PLAN_CGROUPNS, 0},
		{"block signals", block_signals_step, 0, 0},
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
		{"seccomp listener thread", start_listener, PLAN_SECCOMP_NOTIFY, PLAN_SESSION},
		{"time namespace", new_time_ns, PLAN_TIMENS, 0},
		{"wait for parent", wait_for_go, 0, 0},
	};
	if (RUN_STEPS(steps, p, step) < 0) return -1;
	if (p->flags & PLAN_JOIN) { *step = "read plan"; errno = EINVAL; return -1; } /* a join plan for init */
	return run_process(p, step);
}

/* ---- joining a running jail ---- */

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

static int seccomp_buffers(struct plan *p)
{
	listener.p = p;
	return notif_buffers();
}

static int close_join_fds(struct plan *p)
{
	return (int)syscall(SYS_close_range, EXTRA_FD(p), EXTRA_FD(p) + extra_fds(p) - 1, 0);
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
static int run_join(struct plan *p, const char **step)
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
	*step = "reap workload";
	return reap_workload(p);
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

/* nsexec runs before main (and before the Go runtime) in every binary that
 * links this package; it does nothing unless argv[0] is "jail:init" or
 * "jail:exec". glibc passes (argc, argv, envp) to constructors. */
__attribute__((constructor)) static void nsexec(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc < 1 || argv == NULL || argv[0] == NULL) return;
	if (strcmp(argv[0], INIT_ARG0) == 0) _exit(stage_main("jail:init", run_init));
	if (strcmp(argv[0], EXEC_ARG0) == 0) _exit(stage_main("jail:exec", run_join));
}
