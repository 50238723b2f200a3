//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* mount.c: building the new root: mount steps relative to root_fd,
 * pivot_root. Part of jail's child stage; nsexec.c has the tables. */
#include "stage.h"

#include <linux/stat.h>

static int root_fd = -1;
int failed_op = -1;

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

/* The directory the last OPF_NEW op made its target in, kept open for the
 * next one: ops that make targets side by side in a file system the plan
 * made (/dev's nodes, /etc's files) look their directory up once. Only an
 * OPF_NEW op in the same directory reuses it; apply_mounts drops it before
 * any other op. What an OPF_NEW op makes or mounts is in the directory,
 * which changes nothing about what the directory's path resolves to;
 * another op could (a mount on the directory or above it). */
static struct { char path[4096]; int fd; } new_dir = {.fd = -1};

static void drop_new_dir(void)
{
	if (new_dir.fd >= 0) close(new_dir.fd);
	new_dir.fd = -1;
}

/* makes_new reports whether op m makes its target as OPF_NEW says:
 * without looking for it first, in new_dir. */
static int makes_new(const struct mount_op *m)
{
	if (!(m->flags & OPF_NEW)) return 0;
	if (m->kind == OP_BIND || m->kind == OP_FS) return (m->flags & OPF_CREATE) != 0;
	return m->kind != OP_SETATTR;
}

/* open_dir opens the directory op m makes its target in and points *name
 * at the target's last component. For an op that makes_new, that is
 * new_dir's descriptor (*own = 0), the directory as the plan made it;
 * else one the caller closes (*own = 1), made first if missing. */
static int open_dir(const struct mount_op *m, const char **name, int *own)
{
	char buf[4096];
	if ((*own = !makes_new(m))) return parent_dir(m->target, buf, sizeof buf, name);
	const char *slash = strrchr(m->target, '/'); /* decode.c: targets are absolute */
	size_t len = (size_t)(slash - m->target);
	*name = slash + 1;
	if (len >= sizeof new_dir.path) { errno = ENAMETOOLONG; return -1; }
	if (new_dir.fd >= 0 && strncmp(new_dir.path, m->target, len) == 0 && new_dir.path[len] == 0) return new_dir.fd;
	drop_new_dir();
	memcpy(new_dir.path, m->target, len);
	new_dir.path[len] = 0;
	return new_dir.fd = open_in_root(len ? new_dir.path : "/", O_PATH | O_DIRECTORY, 0);
}

static void close_dir(int fd, int own)
{
	if (own) { int e = errno; close(fd); errno = e; }
}

/* open_target opens a mount point, creating it (a directory, or an empty file
 * for OPF_FILE) when OPF_CREATE is set, after looking for it unless the op
 * makes_new. What it creates it opens beneath the directory it created it
 * in, without following a symlink: nothing but a race (another jail
 * renaming a directory both share) could have put one there, and then the
 * op fails. Only a mount point that was there already is opened again by
 * its whole path, resolved as the plan resolves it. */
static int open_target(const struct mount_op *m)
{
	int fd, own;
	if (!makes_new(m) && ((fd = open_in_root(m->target, O_PATH, 0)) >= 0 || errno != ENOENT || !(m->flags & OPF_CREATE)))
		return fd;
	const char *name;
	int dfd = open_dir(m, &name, &own);
	if (dfd < 0) return -1;
	if (m->flags & OPF_FILE) /* the new file is the mount point: move_mount takes any descriptor of it */
		fd = openat(dfd, name, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	else
		fd = mkdirat(dfd, name, 0755) < 0 ? -1 : openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close_dir(dfd, own);
	if (fd >= 0 || errno != EEXIST || !own) return fd; /* EEXIST for a new target: the plan was wrong */
	return open_in_root(m->target, O_PATH, 0); /* made since we looked */
}

/* is_layer says whether option key names an overlay layer: with
 * OPF_LAYERS, its value is a path in the new root. */
static int is_layer(const char *key)
{
	return strcmp(key, "lowerdir") == 0 || strcmp(key, "upperdir") == 0 || strcmp(key, "workdir") == 0;
}

/* fs_mount creates a detached filesystem mount (fsopen, fsconfig, fsmount).
 * m->data is a NUL-separated list of "key=value" or "flag" options. With
 * OPF_LAYERS, an overlay's layers are paths in the new root (lowerdir a
 * ':'-separated list of them, the topmost first): each is opened there
 * (RESOLVE_IN_ROOT) and given to the kernel as /proc/self/fd/N, which
 * names that very directory whatever the path means from here, and stays
 * open until the mount is made. */
#define MAX_LAYER_FDS 8
static int fs_mount(const struct mount_op *m)
{
	int fd = (int)syscall(SYS_fsopen, m->fstype, FSOPEN_CLOEXEC), mfd = -1, layers[MAX_LAYER_FDS], nl = 0;
	if (fd < 0) return -1;
	for (const char *o = m->data; o < m->data + m->data_len; o += strlen(o) + 1) {
		char key[64], val[MAX_LAYER_FDS * 24];
		const char *eq = strchr(o, '=');
		size_t klen = eq ? (size_t)(eq - o) : strlen(o);
		if (klen == 0) continue;
		if (klen >= sizeof key) { errno = EINVAL; goto out; }
		memcpy(key, o, klen);
		key[klen] = 0;
		const char *v = eq ? eq + 1 : NULL;
		if (v && (m->flags & OPF_LAYERS) && is_layer(key)) {
			size_t off = 0;
			for (const char *p = v;;) {
				char one[4096];
				const char *end = strchr(p, ':');
				size_t len = end ? (size_t)(end - p) : strlen(p);
				if (nl == MAX_LAYER_FDS || len == 0 || len >= sizeof one || (end && strcmp(key, "lowerdir") != 0)) { errno = EINVAL; goto out; }
				memcpy(one, p, len);
				one[len] = 0;
				if ((layers[nl] = open_in_root(one, O_PATH | O_DIRECTORY, 0)) < 0) goto out;
				off += (size_t)snprintf(val + off, sizeof val - off, "%s/proc/self/fd/%d", off ? ":" : "", layers[nl++]);
				if (!end) break;
				p = end + 1;
			}
			v = val;
		}
		if (syscall(SYS_fsconfig, fd, v ? FSCONFIG_SET_STRING : FSCONFIG_SET_FLAG, key, v, 0) < 0)
			goto out;
	}
	if (syscall(SYS_fsconfig, fd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		mfd = (int)syscall(SYS_fsmount, fd, FSMOUNT_CLOEXEC, (unsigned)m->attr);
out:
	{
		int e = errno;
		close(fd);
		while (nl > 0) close(layers[--nl]);
		errno = e;
	}
	return mfd;
}

/* open_host opens a host path the parent opened and checked before us, as
 * source k, and makes sure it is the same object: the path is resolved again
 * here (an O_PATH descriptor from the parent's mount namespace cannot be
 * cloned in ours: open_tree refuses a mount of another namespace), without
 * following any symlink, and refused with ESTALE unless it is the very inode
 * the parent checked. So a path swapped between the check and the mount
 * (a directory renamed, a component replaced by a symlink by the workload of
 * another jail) never reaches the mount. *file, unless file is NULL, says
 * whether it is something other than a directory. */
static int open_host(const struct plan *p, const char *path, uint32_t k, uint8_t *file)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
	if (fd < 0) return -1;
	struct stat ours, checked;
	if (fstat(fd, &ours) < 0 || fstat(SOURCE_FD(p, k), &checked) < 0) { int e = errno; close(fd); errno = e; return -1; }
	if (ours.st_dev != checked.st_dev || ours.st_ino != checked.st_ino) { close(fd); errno = ESTALE; return -1; }
	if (file) *file = !S_ISDIR(ours.st_mode);
	return fd;
}

/* The host sources open_host opened and checked, by source number: one
 * source serves many ops (/dev/null masks a dozen /proc files), and is
 * opened and checked once. open_sources closes a directory's once it has
 * cloned it for every op; a file's (host_file) stays open until
 * apply_mounts ends, and each op clones it when it runs (see open_sources). */
static int host_fds[MAX_SOURCE_FDS + 1];
static uint8_t host_file[MAX_SOURCE_FDS + 1];

/* host_source opens and checks the host source of bind m, once. */
static int host_source(const struct plan *p, const struct mount_op *m)
{
	int *sfd = &host_fds[m->src];
	if (*sfd < 0) *sfd = open_host(p, m->source, m->src, &host_file[m->src]);
	return *sfd;
}

/* clone_tree makes the detached tree of a bind: a recursive clone
 * (open_tree, like mount --rbind) of what fd names. */
static int clone_tree(int fd)
{
	return sys_open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
}

static void close_host_files(void)
{
	for (size_t k = 0; k < sizeof host_fds / sizeof host_fds[0]; k++)
		if (host_fds[k] >= 0) { close(host_fds[k]); host_fds[k] = -1; }
}

/* detached_tree returns a mount fd for op m, not yet attached anywhere (it
 * goes on tfd): a new file system, or a bind (cloned from the host, by
 * open_sources or now, or from a path in the new root) whose attributes
 * (read-only, nosuid, nodev, private) are set on the whole detached tree
 * before anyone can see it: no window where a read-only bind is writable,
 * and locked flags are kept because mount_setattr only adds. */
static int detached_tree(struct mount_op *m, int tfd)
{
	if (m->kind == OP_FS) return fs_mount(m);
	int fd = m->tree_fd;
	m->tree_fd = -1;
	if (fd < 0 && (m->flags & (OPF_SRC_IN_ROOT | OPF_CREATE)) == OPF_SRC_IN_ROOT && strcmp(m->source, m->target) == 0) {
		fd = clone_tree(tfd); /* /proc/sys on itself: the target, just looked up, is the source */
	} else if (fd < 0 && (m->flags & OPF_SRC_IN_ROOT)) {
		int sfd = open_in_root(m->source, O_PATH, 0);
		if (sfd < 0) return -1;
		fd = clone_tree(sfd);
		close(sfd);
	} else if (fd < 0 && host_fds[m->src] >= 0) {
		fd = clone_tree(host_fds[m->src]); /* a file, cloned as its op runs */
	} else if (fd < 0) {
		errno = EBADF; /* a host bind open_sources neither cloned nor kept: cannot happen */
	}
	if (fd < 0) return -1;
	if (m->flags & OPF_TREE) return fd; /* the parent set its attributes, with its id map */
	if (sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, m->attr) < 0) { close(fd); return -1; }
	return fd;
}

/* keep_rule_fd gives the Landlock rules for target what the mount plan has
 * just made there: *fd, a mount, or with *fd -1 target opened again at
 * once, resolved as the plan resolved it. With take set, the first rule
 * takes *fd itself and *fd becomes -1 (the caller is done with it); other
 * rules get a duplicate. apply_landlock adds the rules on these
 * descriptors, not by path: by then a directory shared with another jail
 * could have been renamed and a symlink put in its place, and a rule
 * meant for a bind would land on whatever the symlink names. */
static int keep_rule_fd(struct plan *p, const char *target, int *fd, int take)
{
	int src = *fd;
	for (size_t i = 0; i < p->nlandlock; i++) {
		struct landlock_op *l = &p->landlock_rules[i];
		if (strcmp(l->path, target) != 0) continue;
		int nfd;
		if (src < 0) nfd = open_in_root(target, O_PATH | O_NOFOLLOW, 0);
		else if (take && *fd >= 0) nfd = src, *fd = -1;
		else nfd = fcntl(src, F_DUPFD_CLOEXEC, 0);
		if (nfd < 0) return -1;
		if (l->fd >= 0) close(l->fd); /* a later op on the same target covers the earlier one */
		l->fd = nfd;
	}
	return 0;
}

void close_rule_fds(struct plan *p)
{
	for (size_t i = 0; i < p->nlandlock; i++)
		if (p->landlock_rules[i].fd >= 0) { close(p->landlock_rules[i].fd); p->landlock_rules[i].fd = -1; }
}

/* write_file creates a regular file with the op's contents (the minimal /etc). */
static int write_file(const struct mount_op *m)
{
	const char *name;
	int own, dfd = open_dir(m, &name, &own);
	if (dfd < 0) return -1;
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, m->mode);
	close_dir(dfd, own);
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

/* apply_op's result for an op it did not carry out because it is optional
 * and what it needs does not exist. */
#define SKIPPED 1

/* gone_source settles a bind from the host whose optional source
 * open_sources found gone (removed since the parent checked it). An op that
 * makes its mount point is skipped before it makes it. One that does not,
 * a mask, is skipped only if there is nothing to mask either: a file that
 * exists is never left unmasked; that fails the run (fail closed). */
static int gone_source(const struct mount_op *m)
{
	if (m->flags & OPF_CREATE) return SKIPPED;
	int fd = open_in_root(m->target, O_PATH, 0);
	if (fd < 0) return errno == ENOENT ? SKIPPED : -1;
	close(fd);
	errno = ENOENT; /* the source's */
	return -1;
}

/* make_path carries out an op that makes a path, or sets attributes on a
 * mount: no mount of its own. */
static int make_path(struct plan *p, const struct mount_op *m)
{
	const char *name;
	int fd, r, own, none = -1; /* keep_rule_fd opens what was made again */
	switch (m->kind) {
	case OP_MKDIR:
		if (!makes_new(m)) r = mkdir_p(m->target, m->mode);
		else if ((fd = open_dir(m, &name, &own)) < 0) return -1;
		else r = mkdirat(fd, name, m->mode);
		return r < 0 ? -1 : keep_rule_fd(p, m->target, &none, 0);
	case OP_FILE: return write_file(m) < 0 ? -1 : keep_rule_fd(p, m->target, &none, 0);
	case OP_SYMLINK:
		if ((fd = open_dir(m, &name, &own)) < 0) return -1;
		r = symlinkat(m->data, fd, name);
		close_dir(fd, own);
		return r;
	default: /* OP_SETATTR */
		if ((fd = open_in_root(m->target, O_PATH, 0)) < 0) return -1;
		r = sys_mount_setattr(fd, "", AT_EMPTY_PATH | ((m->flags & OPF_RECURSIVE) ? AT_RECURSIVE : 0), m->attr);
		{ int e = errno; close(fd); errno = e; }
		return r;
	}
}

/* apply_op carries out op m; it returns SKIPPED for an optional op it
 * skipped. An optional mount is skipped only when its target does not
 * exist (or, see gone_source, its host source): the target is looked up
 * before a source is cloned or a file system made, so an absent one costs
 * that lookup alone. Once the target is found, every failure fails the
 * op: an ENOENT from a later step never passes for an absent target. */
static int apply_op(struct plan *p, struct mount_op *m)
{
	int fd, tfd, r;
	if (m->kind != OP_BIND && m->kind != OP_FS) {
		r = make_path(p, m);
		return r < 0 && errno == ENOENT && (m->flags & OPF_OPTIONAL) ? SKIPPED : r;
	}
	if (m->kind == OP_BIND && !(m->flags & OPF_SRC_IN_ROOT) && m->tree_fd < 0 && host_fds[m->src] < 0)
		return (m->flags & OPF_OPTIONAL) ? gone_source(m) : (errno = EBADF, -1);
	if ((tfd = open_target(m)) < 0)
		return errno == ENOENT && (m->flags & (OPF_OPTIONAL | OPF_CREATE)) == OPF_OPTIONAL ? SKIPPED : -1;
	if ((fd = detached_tree(m, tfd)) < 0) { r = -1; goto out; }
	r = sys_move_mount(fd, "", tfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
	if (r == 0) r = keep_rule_fd(p, m->target, &fd, 1);
	if (fd >= 0) { int e = errno; close(fd); errno = e; }
out:
	{ int e = errno; close(tfd); errno = e; }
	return r;
}

/* ---- the steps, in order ---- */

/* make_root_rslave: our mounts must not propagate back to the host. The
 * kernel copied the host's mount table at clone time with its propagation,
 * so a shared / would leak. Equivalent to `mount --make-rslave /`. */
int make_root_rslave(struct plan *p)
{
	(void)p;
	return mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
}

/* open_sources opens and checks every host bind source while the host
 * tree is still fully visible (attaching the new root later covers its
 * attach point). It clones each directory, and a directory root, at once:
 * a recursive clone taken later of a directory that holds the attach point
 * would hold the new root too. A file holds no mount point but itself, so
 * it is cloned only when its op runs, and only if that op's target exists:
 * a mask of a /proc file this kernel lacks then costs one lookup. A clone
 * made in advance and closed unused costs an RCU grace period
 * (namespace_unlock), 40 us here, milliseconds on a busy machine. */
int open_sources(struct plan *p)
{
	int r = 0;
	for (size_t k = 0; k < sizeof host_fds / sizeof host_fds[0]; k++) { host_fds[k] = -1; host_file[k] = 0; }
	if (p->root.kind == OP_BIND && (host_source(p, &p->root) < 0 || (p->root.tree_fd = clone_tree(host_fds[p->root.src])) < 0))
		r = -1;
	for (size_t i = 0; r == 0 && i < p->nmounts; i++) {
		struct mount_op *m = &p->mounts[i];
		if (m->kind != OP_BIND || (m->flags & OPF_SRC_IN_ROOT)) continue;
		if (m->flags & OPF_TREE) { /* the parent's detached mount: moved, never cloned or looked up */
			if ((m->tree_fd = fcntl(SOURCE_FD(p, m->src), F_DUPFD_CLOEXEC, 0)) < 0) { failed_op = (int)i; r = -1; }
			continue;
		}
		if (host_source(p, m) < 0) {
			if (errno == ENOENT && (m->flags & OPF_OPTIONAL)) continue; /* see gone_source */
			failed_op = (int)i;
			r = -1;
		} else if (!host_file[m->src] && (m->tree_fd = clone_tree(host_fds[m->src])) < 0) {
			failed_op = (int)i;
			r = -1;
		}
	}
	int e = errno;
	for (uint32_t k = 0; k <= p->source_fds; k++)
		if (host_fds[k] >= 0 && (r < 0 || !host_file[k])) { close(host_fds[k]); host_fds[k] = -1; }
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
int enter_root_copy(struct plan *p)
{
	(void)p;
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
int build_root(struct plan *p)
{
	int fd = detached_tree(&p->root, -1), afd = -1;
	if (fd < 0) return -1;
	if ((afd = open_host(p, p->attach, p->attach_src, NULL)) < 0 ||
	    sys_move_mount(fd, "", afd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
		int e = errno;
		close(fd);
		if (afd >= 0) close(afd);
		errno = e;
		return -1;
	}
	close(afd);
	root_fd = fd;
	return keep_rule_fd(p, "/", &root_fd, 0);
}

/* close_sources closes the descriptors the parent passed: PID 1 keeps
 * only its own, checked, of the files apply_mounts binds, and closes them
 * when it is done (see open_sources). */
int close_sources(struct plan *p)
{
	if (p->source_fds == 0) return 0;
	return (int)syscall(SYS_close_range, SOURCE_FD(p, 1), SOURCE_FD(p, p->source_fds), 0);
}

/* apply_mounts carries out the mount ops in order; then PID 1 holds no
 * host source, nor new_dir, any more. */
int apply_mounts(struct plan *p)
{
	for (size_t i = 0; i < p->nmounts; i++) {
		struct mount_op *m = &p->mounts[i];
		if (!makes_new(m)) drop_new_dir();
		int r = apply_op(p, m), e = errno;
		m->applied = r == 0;
		if (m->tree_fd >= 0) { close(m->tree_fd); m->tree_fd = -1; } /* not consumed: the op failed or was skipped */
		if (r < 0) {
			failed_op = (int)i;
			drop_new_dir();
			close_host_files();
			errno = e;
			return -1;
		}
	}
	drop_new_dir();
	close_host_files();
	return 0;
}

/* pivot_into_root makes the new root "/" and detaches the host's tree, the
 * pivot_root(".", ".") way (see pivot_root(2), runc, bubblewrap). */
int pivot_into_root(struct plan *p)
{
	(void)p;
	if (fchdir(root_fd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) return -1;
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) return -1;
	close(root_fd);
	return 0;
}

int remount_root_ro(struct plan *p)
{
	(void)p;
	return sys_mount_setattr(AT_FDCWD, "/", 0, MOUNT_ATTR_RDONLY);
}

/* ---- a session's restore ---- */

/* clear_tree removes everything below the directory dfd (never following
 * a symlink), and closes dfd. It reads with getdents64 into one static
 * buffer, not readdir: closedir's free() would link musl's full malloc,
 * 10 KB more of every jail's PID 1 (its pages are mapped by fault-around
 * whether they run or not). A subdirectory's removal reuses the buffer,
 * so the directory is read again from its start after each, until it
 * reads empty. */
static char dents[4096];
#define CLEAR_DEPTH 128 /* deeper, clear_tree gives up (ELOOP): each level holds a descriptor */
__attribute__((cold)) static int clear_tree(int dfd, int depth)
{
	int r = 0;
	if (depth > CLEAR_DEPTH) { close(dfd); errno = ELOOP; return -1; }
	for (int again = 1; r == 0 && again;) {
		again = 0;
		long n = lseek(dfd, 0, SEEK_SET) < 0 ? -1 : syscall(SYS_getdents64, dfd, dents, sizeof dents);
		if (n < 0) { r = -1; break; }
		for (long off = 0; r == 0 && off < n;) {
			const char *name = dents + off + 19; /* struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name */
			unsigned short reclen;
			memcpy(&reclen, dents + off + 16, sizeof reclen);
			off += reclen;
			if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
			again = 1;
			struct stat st;
			if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) { r = errno == ENOENT ? 0 : -1; continue; }
			if (!S_ISDIR(st.st_mode)) {
				if (unlinkat(dfd, name, 0) < 0) r = -1;
				continue;
			}
			int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			char keep[256];
			size_t len = strlen(name);
			if (sub < 0 || len >= sizeof keep) { r = -1; if (sub >= 0) close(sub); break; }
			memcpy(keep, name, len + 1); /* the buffer is the subdirectory's now */
			if (clear_tree(sub, depth + 1) < 0 || unlinkat(dfd, keep, AT_REMOVEDIR) < 0) r = -1;
			break; /* read this directory again */
		}
	}
	int e = errno;
	close(dfd);
	errno = e;
	return r;
}

/* set_aside moves the directory path (a layer's upper or work directory)
 * aside, to the first free name path.oldK in *old (its last element), and
 * makes path again, empty, 0755, as the plan made it. The move is one
 * rename whatever the directory holds. */
__attribute__((cold)) static int set_aside(const char *path, char old[static 300])
{
	char buf[4096];
	const char *name;
	int dfd = parent_dir(path, buf, sizeof buf, &name), r = -1;
	if (dfd < 0) return -1;
	errno = EEXIST;
	for (int k = 0; r < 0 && errno == EEXIST && k < 100; k++) {
		if (snprintf(old, 300, "%s.old%d", name, k) >= 300) { errno = ENAMETOOLONG; break; }
		r = (int)syscall(SYS_renameat2, dfd, name, dfd, old, RENAME_NOREPLACE);
	}
	if (r == 0 && mkdirat(dfd, name, 0755) < 0) r = -1;
	int e = errno;
	close(dfd);
	errno = e;
	return r;
}

/* drop_aside removes what set_aside moved aside for path, best effort: a
 * tree the workload nested deeper than clear_tree goes stays there (in
 * the session's own space, read-only to it). */
__attribute__((cold)) static void drop_aside(const char *path, const char *old)
{
	char buf[4096];
	const char *name;
	int dfd = parent_dir(path, buf, sizeof buf, &name);
	if (dfd < 0) return;
	int sub = openat(dfd, old, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub >= 0 && clear_tree(sub, 0) == 0) (void)unlinkat(dfd, old, AT_REMOVEDIR);
	close(dfd);
}

/* layer_dir returns the value of option key (upperdir, workdir) of an
 * overlay op, or NULL. */
__attribute__((cold)) static const char *layer_dir(const struct mount_op *m, const char *key)
{
	size_t k = strlen(key);
	for (const char *o = m->data; o < m->data + m->data_len; o += strlen(o) + 1)
		if (strncmp(o, key, k) == 0 && o[k] == '=') return o + k + 1;
	return NULL;
}

/* layers_mount returns the target of the plan's read-only OP_SETATTR op
 * on the mount that holds path (the overlays' tmpfs: made read-only at the
 * end of the plan), or NULL. */
__attribute__((cold)) static const char *layers_mount(const struct plan *p, const char *path)
{
	for (size_t i = 0; i < p->nmounts; i++) {
		const struct mount_op *m = &p->mounts[i];
		size_t n = strlen(m->target);
		if (m->kind == OP_SETATTR && (m->attr & MOUNT_ATTR_RDONLY) && strncmp(path, m->target, n) == 0 && path[n] == '/')
			return m->target;
	}
	errno = ENOENT;
	return NULL;
}

/* set_ro makes the mount at path read-only (on) or writable. */
__attribute__((cold)) static int set_ro(const char *path, int on)
{
	if (!path) return -1;
	int fd = open_in_root(path, O_PATH | O_DIRECTORY, 0);
	if (fd < 0) return -1;
	struct mount_attr a = {.attr_set = on ? MOUNT_ATTR_RDONLY : 0, .attr_clr = on ? 0 : MOUNT_ATTR_RDONLY};
	int r = (int)syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof a), e = errno;
	close(fd);
	errno = e;
	return r;
}

/* The mounts the plan made below one overlay, kept by keep_submounts
 * across its reset: a detached recursive clone of each and its op. */
#define MAX_KEPT 256
static int kept_fd[MAX_KEPT];
static const struct mount_op *kept_op[MAX_KEPT];

__attribute__((cold)) static void drop_kept(int n)
{
	while (n > 0) close(kept_fd[--n]);
}

/* open_kept opens, for keep_submounts, the mount an op made at path below
 * an overlay as the plan made it: with no symlink on the way (the plan's
 * targets there have none; the workload makes its own in its layers, and
 * could point one at any mount of the jail, "/" included) and at the
 * root of a mount. Anything else fails with ENOENT. */
__attribute__((cold)) static int open_kept(const char *path)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS};
	int fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof how);
	if (fd < 0) return -1;
	struct statx stx;
	if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, 0, &stx) < 0 ||
	    !(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) || !(stx.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
		close(fd);
		errno = ENOENT;
		return -1;
	}
	return fd;
}

/* keep_submounts clones what the ops after overlay op i mounted below its
 * target: the masks of the host's private files (rootfs.Overlay.Hidden)
 * and any bind the Spec put there. Detaching the overlay takes them with
 * it, and the new one must have them before anyone can look: without its
 * masks, the id map would show the host's root-private files to the
 * workload. Each is cloned where it is visible now, with every mount
 * below it (AT_RECURSIVE) and the attributes it has; an op whose target
 * lies below one already kept comes with that one. A mask its path no
 * longer leads to (open_kept) is not kept, and counts as not applied:
 * mask_again looks for its target in the new overlay; any other op fails
 * the reset. It returns how many it kept (in kept_fd, kept_op), or -1. */
__attribute__((cold)) static int keep_submounts(struct plan *p, size_t i)
{
	const char *t = p->mounts[i].target;
	size_t tl = strlen(t);
	int n = 0;
	for (size_t j = i + 1; j < p->nmounts; j++) {
		struct mount_op *m = &p->mounts[j];
		if ((m->kind != OP_BIND && m->kind != OP_FS) || !m->applied || strncmp(m->target, t, tl) != 0) continue;
		if (m->target[tl] == 0) { drop_kept(n); errno = EBUSY; return -1; } /* on the overlay itself: the plan never does this */
		if (m->target[tl] != '/') continue;
		int covered = 0;
		for (int k = 0; k < n && !covered; k++) {
			size_t kl = strlen(kept_op[k]->target);
			covered = strncmp(m->target, kept_op[k]->target, kl) == 0 && (m->target[kl] == 0 || m->target[kl] == '/');
		}
		if (covered) continue;
		if (n == MAX_KEPT) { drop_kept(n); errno = E2BIG; return -1; }
		int fd = open_kept(m->target);
		if (fd < 0 && (m->flags & OPF_OPTIONAL)) {
			m->applied = 0;
			continue;
		}
		kept_fd[n] = fd < 0 ? -1 : clone_tree(fd);
		if (fd >= 0) { int e = errno; close(fd); errno = e; }
		if (kept_fd[n] < 0) { drop_kept(n); return -1; }
		kept_op[n++] = m;
	}
	return n;
}

/* put_back_kept mounts the n mounts keep_submounts kept on their targets
 * in the new overlay, making a target its op made (OPF_CREATE) again; a
 * target an optional op masks that is gone (removed from the host since)
 * needs no mask. It closes every kept descriptor. */
__attribute__((cold)) static int put_back_kept(int n)
{
	int r = 0;
	for (int k = 0; r == 0 && k < n; k++) {
		struct mount_op m = *kept_op[k];
		m.flags &= (uint8_t)~OPF_NEW; /* looked up, and made by path if missing */
		int tfd = open_target(&m);
		if (tfd < 0 && errno == ENOENT && (m.flags & (OPF_OPTIONAL | OPF_CREATE)) == OPF_OPTIONAL) continue;
		if (tfd < 0 || sys_move_mount(kept_fd[k], "", tfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) r = -1;
		if (tfd >= 0) { int e = errno; close(tfd); errno = e; }
	}
	{ int e = errno; drop_kept(n); errno = e; }
	return r;
}

/* mask_again mounts the optional ops (the masks of the host's private
 * files) after overlay op i, below its target, that the plan skipped
 * because their target did not exist then: with another lower layer it
 * may now (a snapshot's tree no longer shadowing it). A file's mask is a
 * clone of the jail's /dev/null, checked to be the device: the host's,
 * which the plan bound, is closed by now. */
__attribute__((cold)) static int mask_again(struct plan *p, size_t i)
{
	const char *t = p->mounts[i].target;
	size_t tl = strlen(t);
	for (size_t j = i + 1; j < p->nmounts; j++) {
		struct mount_op *m = &p->mounts[j];
		if (m->applied || !(m->flags & OPF_OPTIONAL) || (m->kind != OP_BIND && m->kind != OP_FS) ||
		    strncmp(m->target, t, tl) != 0 || m->target[tl] != '/')
			continue;
		int tfd = open_in_root(m->target, O_PATH, 0), fd = -1, r = -1;
		if (tfd < 0) {
			if (errno == ENOENT) continue; /* nothing to mask */
			return -1;
		}
		if (m->kind == OP_FS) {
			fd = fs_mount(m);
		} else {
			struct stat st;
			int nfd = open_in_root("/dev/null", O_PATH | O_NOFOLLOW, 0);
			if (nfd >= 0 && fstat(nfd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)) fd = clone_tree(nfd);
			else if (nfd >= 0) errno = EPERM;
			if (nfd >= 0) { int e = errno; close(nfd); errno = e; }
			if (fd >= 0 && sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, m->attr) < 0) { int e = errno; close(fd); fd = -1; errno = e; }
		}
		if (fd >= 0) r = sys_move_mount(fd, "", tfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
		int e = errno;
		if (fd >= 0) close(fd);
		close(tfd);
		errno = e;
		if (r < 0) return -1;
		m->applied = 1; /* kept by the next reset */
	}
	return 0;
}

/* put_tree puts the detached mount tree at the mount point of overlay
 * op m's upper lower layer (the first path of its lowerdir), detaching
 * what was mounted there. */
__attribute__((cold)) static int put_tree(const struct mount_op *m, int tree)
{
	const char *low = layer_dir(m, "lowerdir"), *colon = low ? strchr(low, ':') : NULL;
	char path[4096];
	if (!colon || (size_t)(colon - low) >= sizeof path) { errno = EINVAL; return -1; }
	memcpy(path, low, (size_t)(colon - low));
	path[colon - low] = 0;
	if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL) return -1; /* EINVAL: nothing mounted there yet */
	int fd = open_in_root(path, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0), r = -1;
	if (fd >= 0) r = sys_move_mount(tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
	if (fd >= 0) { int e = errno; close(fd); errno = e; }
	return r;
}

/* reset_layers makes each overlay of the plan (an OP_FS op with
 * OPF_LAYERS) again with empty upper and work directories, for a
 * session's restore: the parent has killed every process that could hold
 * a file of the old ones. The old overlay is detached (and gone once
 * nothing holds it); its directories are moved aside and made again, the
 * new overlay mounted, and what was moved aside removed, best effort;
 * the layers' file system, read-only at its own mount point, is writable
 * meanwhile. In the order of the plan, with the same options as at the
 * start; what the plan mounted below an overlay (keep_submounts) is on
 * the new one before its layers' file system is read-only again, and so
 * is every mask the plan skipped whose target is there now (mask_again).
 * With
 * ntrees (one per overlay, in order), each tree becomes its overlay's
 * upper lower layer (put_tree): a snapshot's, restored. On
 * failure, the caller ends the session: an overlay may have been left
 * without its masks. */
__attribute__((cold)) int reset_layers(struct plan *p, const int *trees, int ntrees)
{
	int r = 0, k = 0;
	for (size_t i = 0; ntrees && i < p->nmounts; i++)
		if (p->mounts[i].kind == OP_FS && (p->mounts[i].flags & OPF_LAYERS)) k++;
	if (ntrees && k != ntrees) { errno = EINVAL; return -1; } /* nothing changed */
	if ((root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return -1;
	k = 0;
	for (size_t i = 0; r == 0 && i < p->nmounts; i++) {
		struct mount_op *m = &p->mounts[i];
		const char *upper = layer_dir(m, "upperdir"), *work = layer_dir(m, "workdir");
		if (m->kind != OP_FS || !(m->flags & OPF_LAYERS) || !upper || !work) continue;
		const char *lm = layers_mount(p, upper);
		int kept = keep_submounts(p, i);
		if (kept < 0) { r = -1; break; }
		if (umount2(m->target, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 || set_ro(lm, 0) < 0) { drop_kept(kept); r = -1; break; }
		if (ntrees && put_tree(m, trees[k++]) < 0) { drop_kept(kept); r = -1; break; }
		char old_upper[300], old_work[300];
		if (set_aside(upper, old_upper) < 0 || set_aside(work, old_work) < 0) r = -1;
		/* The new overlay takes its upper layer's mount writable, as
		 * at the start, and keeps its own: read-only again after. */
		int fd = r < 0 ? -1 : fs_mount(m), tfd = fd < 0 ? -1 : open_in_root(m->target, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0);
		if (tfd < 0 || sys_move_mount(fd, "", tfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) r = -1;
		int e = errno;
		if (fd >= 0) close(fd);
		if (tfd >= 0) close(tfd);
		if (r == 0 && put_back_kept(kept) < 0) r = -1, e = errno;
		else if (r < 0) drop_kept(kept);
		if (r == 0 && mask_again(p, i) < 0) r = -1, e = errno;
		if (r == 0) {
			drop_aside(upper, old_upper);
			drop_aside(work, old_work);
		}
		if (set_ro(lm, 1) < 0 && r == 0) r = -1, e = errno;
		errno = e;
	}
	int e = errno;
	close(root_fd);
	root_fd = -1;
	errno = e;
	return r;
}
