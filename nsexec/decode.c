//go:build linux

// SPDX-License-Identifier: Apache-2.0
/* decode.c: the plan decoder: a dumb, bounds-checked reader over the
 * parent's bytes, fuzzed from Go (FuzzDecode). Part of jail's child stage;
 * nsexec.c has the tables. */
#include "stage.h"

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

/* sysctl_ok makes the checks of plan.go's checkSysctl: a key below net/
 * (the network namespace's own) that names no other file, and a value of
 * one line, 1 to 64 bytes (vlen, without the NUL). */
static int sysctl_ok(const char *key, const char *val, uint32_t vlen)
{
	size_t n = key ? strlen(key) : 0;
	if (n == 0 || n > 128 || strncmp(key, "net/", 4) != 0 || key[n - 1] == '/' || strstr(key, "//") || strstr(key, ".."))
		return 0;
	if (strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_/.-") != n) return 0;
	return val && vlen >= 1 && vlen <= 64 && !strchr(val, '\n');
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
	size_t nm = 0, na = 0, ne = 0, np = 0, nr = 0, nl = 0, ns = 0;
	int have_root = 0, have_flags = 0, cgroup_fs = 0;
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
		case TAG_SYSCTL:
			if (ns >= MAX_SYSCTLS) { b.bad = 1; break; }
			p->sysctl_key[ns] = get_str(&b, NULL, 0);
			p->sysctl_val[ns] = get_str(&b, &p->sysctl_val_len[ns], 0);
			if (!sysctl_ok(p->sysctl_key[ns], p->sysctl_val[ns], p->sysctl_val_len[ns])) b.bad = 1;
			ns++;
			break;
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
			if ((m.flags & OPF_TREE) && (m.kind != OP_BIND || (m.flags & (OPF_SRC_IN_ROOT | OPF_OPTIONAL)) || tag == TAG_ROOT)) b.bad = 1;
			if ((m.flags & OPF_LAYERS) && m.kind != OP_FS) b.bad = 1;
			if (m.src > max_src) max_src = m.src;
			if (m.kind == OP_FS && m.fstype && (!strcmp(m.fstype, "cgroup") || !strcmp(m.fstype, "cgroup2") || !strcmp(m.fstype, "cpuset")))
				cgroup_fs = 1;
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
		if ((p->flags & (PLAN_MOUNTNS | PLAN_SESSION | PLAN_INITRAMFS)) || p->attach || nm || p->hostname || ns ||
		    p->source_fds || !p->join_ns || (p->join_ns & ~JOINABLE_NS))
			return -1;
	} else if (p->join_ns || (p->flags & PLAN_JOIN_KILL)) {
		return -1;
	}
	/* A late join comes after the mount plan: a cgroup file system mounted
	 * before it would be rooted at the caller's cgroup. */
	if ((p->flags & PLAN_CGROUP_LATE) && (p->cgroup_fds || cgroup_fs || (p->flags & (PLAN_JOIN | PLAN_SESSION)))) return -1;
	if (nm > PLAN_MAX_ITEMS || nl > PLAN_MAX_ITEMS) return -1;
	p->nmounts = nm; p->nlandlock = nl; p->nsysctls = ns;
	return 0;
}
