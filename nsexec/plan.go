package nsexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Flags select optional child steps.
type Flags uint32

// Plan flags; nsexec.h has the same values.
const (
	FlagMountNS   Flags = 0x01 // build and pivot into the new root
	FlagRootRO    Flags = 0x02 // make / read-only after pivot_root
	FlagLoopback  Flags = 0x04 // bring lo up in the new net namespace
	FlagTimeNS    Flags = 0x08 // unshare(CLONE_NEWTIME) before forking the workload
	FlagPIDNS     Flags = 0x10 // the child is PID 1: forward signals to every process
	FlagSetgroups Flags = 0x20 // drop supplementary groups with setgroups(0)
	// FlagSeccompNotify: the seccomp filter can return
	// SECCOMP_RET_USER_NOTIF, so the workload loads it with a listener and
	// hands the listener to PID 1.
	FlagSeccompNotify Flags = 0x40
	// FlagSeccompWaitKillable loads the filter with
	// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19): a call PID 1
	// has received cannot be interrupted by a signal before it is killed.
	FlagSeccompWaitKillable Flags = 0x80
	// FlagCgroupNS: the jail has its own cgroup namespace, made again
	// after the child joins its cgroup v1 hierarchies.
	FlagCgroupNS Flags = 0x100
	// FlagTTY gives the workload a new pty of the jail's devpts as its
	// stdin, stdout, stderr and controlling terminal; the child sends the
	// master to the parent (MsgPTY) before MsgReady.
	FlagTTY Flags = 0x200
	// FlagInitramfs: / is the initramfs (rootfs), which pivot_root
	// refuses; the child enters a copy of the tree first.
	FlagInitramfs Flags = 0x400
	// FlagSession: PID 1 starts no process at GO. It stays up, reaping,
	// until its deadlines (Plan.TTL, Plan.IdleTimeout) pass or it is
	// told to stop; processes join it with a join plan.
	FlagSession Flags = 0x800
	// FlagJoin: the plan of "jail:exec", a helper that joins a running
	// jail (Plan.JoinNS) instead of building one; it has no mounts.
	FlagJoin Flags = 0x1000
	// FlagNetfilter: MsgReady carries a NETLINK_NETFILTER socket the
	// child made in the jail's network namespace (Child.Recv returns it),
	// through which a parent that cannot enter that namespace loads and
	// reads the jail's rules there.
	FlagNetfilter Flags = 0x2000
	// FlagNoGo has the child go on after READY without waiting for GO:
	// for a run whose parent has nothing to do in between (no cgroup to
	// verify, no network to build, no terminal), with the process plan
	// sent at the start (Config.Process). It saves a round trip.
	FlagNoGo Flags = 0x4000
	// FlagPrefork has the child fork the workload right after READY from
	// the process plan the parent sends then (a template: ids, limits,
	// flags); the workload sets itself up (all but its seccomp filter,
	// which no call of jail's own runs under) and waits on the plan pipe
	// for a second process plan, of which it takes argv, env, search path
	// and cwd, then changes directory, loads the filter and execs. For a
	// prepared jail: what is left at its release is those three.
	FlagPrefork Flags = 0x8000
	// FlagJoinKill: a join helper's last extra descriptor is its
	// process's cgroup2 cgroup.kill, opened for writing by the parent. If
	// the parent goes away while the process runs, the helper kills the
	// process's group and then writes "1" to it: what left the group with
	// setsid dies too (the helper with it).
	FlagJoinKill Flags = 0x10000
	// FlagCgroupLate: the child inherits no cgroup v1 "tasks" files
	// (CgroupFDs is 0). The parent makes the v1 directories while the
	// child builds the root and sends their tasks files in one MsgCgroup
	// ([Child.SendFiles]); the child reads it after its mount plan, still
	// single-threaded, joins, and then makes its cgroup namespace
	// (FlagCgroupNS). The parent verifies the join at READY as before.
	// Not with a mount plan that mounts a cgroup file system, whose root
	// is the cgroup namespace's at the mount.
	FlagCgroupLate Flags = 0x20000

	// processFlags are the flags of a Process; the others are a Plan's.
	processFlags = FlagSetgroups | FlagTTY
)

// OpKind is what a mount op does.
type OpKind uint8

// Mount op kinds.
const (
	OpBind      OpKind = 1 // recursive bind of Source (open_tree + mount_setattr + move_mount)
	OpFS        OpKind = 2 // new filesystem of FSType with Data options (fsopen + fsmount)
	OpMkdir     OpKind = 3 // mkdir -p Target with Mode
	OpWriteFile OpKind = 4 // create Target with Mode and contents Data
	OpSymlink   OpKind = 5 // Target is a symlink to Data
	OpSetattr   OpKind = 6 // set Attr on the mount at Target
)

// OpFlags modify a mount op.
type OpFlags uint8

// Mount op flags.
const (
	OpOptional   OpFlags = 0x01 // skip when the source or target does not exist
	OpCreate     OpFlags = 0x02 // create a missing mount point
	OpFileTarget OpFlags = 0x04 // the mount point is a regular file
	OpSrcInRoot  OpFlags = 0x08 // Source is a path inside the new root
	OpRecursive  OpFlags = 0x10 // OpSetattr applies to the whole subtree
	// OpNew: nothing is at Target yet, and its directory is in a file
	// system the plan made (a tmpfs no one else can reach before the
	// workload runs). The child makes the target (OpCreate, OpMkdir,
	// OpWriteFile, OpSymlink) without looking for it first, in the
	// directory the op before it used when both share it; the op fails
	// with EEXIST if something is there after all.
	OpNew OpFlags = 0x20
	// OpTree: the source descriptor of an OpBind is not a path the
	// child looks up again but a detached mount the parent made
	// (open_tree and mount_setattr with an id map, which needs the
	// host's privilege): the child attaches it as it is, once, with the
	// attributes the parent set (Attr says what they are).
	OpTree OpFlags = 0x40
	// OpLayers: the lowerdir, upperdir and workdir options of an OpFS
	// overlay are paths in the new root, which the child opens there and
	// hands to the kernel as descriptors.
	OpLayers     OpFlags = 0x80
	validOpFlags         = OpOptional | OpCreate | OpFileTarget | OpSrcInRoot | OpRecursive | OpNew | OpTree | OpLayers
)

// Mount attributes (MOUNT_ATTR_* of mount_setattr(2) and fsmount(2)).
const (
	AttrRdonly     uint64 = 0x01
	AttrNosuid     uint64 = 0x02
	AttrNodev      uint64 = 0x04
	AttrNoexec     uint64 = 0x08
	AttrNoatime    uint64 = 0x10
	AttrNodiratime uint64 = 0x80
)

// Mount is one step of the mount plan. Target is always an absolute path
// inside the new root; the child resolves it with RESOLVE_IN_ROOT.
type Mount struct {
	Kind  OpKind
	Flags OpFlags
	// Mode is the permission bits for OpMkdir and OpWriteFile.
	Mode uint32
	// Attr is the MOUNT_ATTR_* set on the new mount.
	Attr uint64
	// Src is the host source of an OpBind from the host: k names the k-th
	// descriptor the child inherits after the cgroup files (see
	// Plan.Sources). The child opens Source again without following
	// symlinks and refuses it unless it is the same inode. 0 for every
	// other op.
	Src uint32
	// Source is a host path for OpBind (or a path in the root with OpSrcInRoot).
	Source string
	// Target is the absolute path in the new root.
	Target string
	// FSType is the filesystem of an OpFS mount, e.g. "tmpfs".
	FSType string
	// Data is the options of an OpFS mount ("key=value" or "flag", each
	// NUL-terminated), the contents of an OpWriteFile, the link of an OpSymlink.
	Data []byte
}

// IsCgroupFS says whether m mounts a cgroup file system (cgroup, cgroup2,
// or v1's cpuset), whose root is the cgroup namespace's at the mount.
func (m Mount) IsCgroupFS() bool {
	return m.Kind == OpFS && (m.FSType == "cgroup" || m.FSType == "cgroup2" || m.FSType == "cpuset")
}

// Rlimit is one resource limit for the workload.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Plan is the jail: everything the child stage builds before it starts a
// process, resolved by the parent. The child makes no decisions: it
// executes the plan in the order of nsexec.c's init table. What runs in
// the jail is a [Process], sent at GO.
type Plan struct {
	Flags Flags
	// Attach is an existing host directory on which the child mounts the new
	// root before pivot_root, inside its own mount namespace; AttachSrc is
	// its host source (see Mount.Src). Only with FlagMountNS.
	Attach    string
	AttachSrc uint32
	// Root is the new root: an OpFS tmpfs or an OpBind of a directory.
	Root Mount
	// Mounts are applied in order inside the new root.
	Mounts []Mount
	// Hostname, when not empty, is set in the new UTS namespace.
	Hostname string
	// Seccomp is the BPF program (struct sock_filter[], native endian) the
	// workload loads as its last step before execve; none when empty.
	Seccomp []byte
	// CgroupFDs is how many cgroup v1 "tasks" files the child inherits at
	// fds CgroupFD, CgroupFD+1...; it writes "0" to each as its first step,
	// which moves it, single-threaded, into the run's cgroup without the
	// RCU grace period a move by pid waits for.
	CgroupFDs uint32
	// Sources is how many host sources (O_PATH descriptors the parent
	// opened and checked) the child inherits, at SourceFD(CgroupFDs, 1)...
	Sources uint32
	// LandlockFS and LandlockScoped are the handled filesystem rights and
	// the scopes of the Landlock ruleset the workload restricts itself
	// with, after no_new_privs and before seccomp (landlock(7)); none when
	// both are 0. LandlockRules grant rights beneath paths of the jail.
	LandlockFS, LandlockScoped uint64
	LandlockRules              []LandlockRule
	// SeccompRules is the program PID 1 runs on each seccomp notification
	// to find the errno to answer with; without it, every notification is
	// a kill.
	SeccompRules []byte
	// TTL and IdleTimeout bound a session (FlagSession): PID 1 exits,
	// and the kernel ends the jail, TTL after GO, or IdleTimeout after
	// the last joined process ended (the last connection to its control
	// socket closed). Zero: no bound. Millisecond resolution.
	TTL, IdleTimeout time.Duration
	// JoinNS is what a join plan (FlagJoin) enters with setns(pidfd):
	// CLONE_NEW* flags of the jail's namespaces, never CLONE_NEWCGROUP
	// (the helper makes its own, rooted at its cgroup) or CLONE_NEWTIME
	// (joined through PID 1's time_for_children).
	JoinNS uint32
	// Sysctls are written, in order, by the child in its own network
	// namespace before it builds the root (net/ keys only: those are the
	// namespace's own); at most MaxSysctls.
	Sysctls []Sysctl
}

// Sysctl is a sysctl of the jail's network namespace: Key is its path
// below /proc/sys ("net/ipv4/tcp_fin_timeout"), Value what is written.
// Equivalent to `sysctl -w net.ipv4.tcp_fin_timeout=1` in the namespace.
type Sysctl struct {
	Key, Value string
}

// MaxSysctls is how many sysctls one plan may write.
const MaxSysctls = maxSysctls

// checkSysctl refuses keys outside the network namespace's own net/
// tree, or that could name another file (.., empty components), and
// values that are empty or not one line.
func checkSysctl(s Sysctl) error {
	if !strings.HasPrefix(s.Key, "net/") || strings.HasSuffix(s.Key, "/") || strings.Contains(s.Key, "//") ||
		strings.Contains(s.Key, "..") || strings.Trim(s.Key, "abcdefghijklmnopqrstuvwxyz0123456789_/.-") != "" || len(s.Key) > 128 {
		return fmt.Errorf("sysctl %q: want a key below net/", s.Key)
	}
	if s.Value == "" || strings.ContainsAny(s.Value, "\n\x00") || len(s.Value) > 64 {
		return fmt.Errorf("sysctl %s: value %q: want one line of at most 64 bytes", s.Key, s.Value)
	}
	return nil
}

// Process is what runs in a jail: sent after READY for a one-shot run, and
// with each join plan. Its encoding is separate from the Plan's, so a jail
// can be built before anyone knows what will run in it.
type Process struct {
	// Flags may hold FlagSetgroups and FlagTTY only.
	Flags Flags
	// UID and GID are the process's ids inside the user namespace.
	UID, GID uint32
	Rlimits  []Rlimit
	// Argv is the argument vector; Argv[0] without a slash is searched in
	// Path as execvp(3) does.
	Argv []string
	// Env is the whole environment; nothing is inherited.
	Env  []string
	Path []string
	// Cwd is the working directory, resolved inside the jail.
	Cwd string
}

// LandlockRule grants Access (LANDLOCK_ACCESS_FS_*) beneath Path, a path
// in the jail; the child skips a Path that does not exist.
type LandlockRule struct {
	Path   string
	Access uint64
}

// FSOptions encodes mount options for Mount.Data of an OpFS mount.
func FSOptions(opts ...string) []byte {
	var b []byte
	for _, o := range opts {
		b = append(b, o...)
		b = append(b, 0)
	}
	return b
}

const (
	tagFlags = iota + 1
	tagIDs
	tagAttach
	tagRoot
	tagMount
	tagHostname
	tagRlimit
	tagArg
	tagEnv
	tagPath
	tagCwd
	tagSeccomp
	tagSeccompRules
	tagCgroupFDs
	tagSourceFDs
	tagLandlock
	tagLandlockRule
	tagSession
	tagJoin
	tagSysctl
)

type encoder struct {
	b   []byte
	err error
}

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// str appends a NUL-terminated string; the child rejects interior NULs.
func (e *encoder) str(what, s string) {
	if strings.IndexByte(s, 0) >= 0 && e.err == nil {
		e.err = fmt.Errorf("%s %q contains a NUL byte", what, s)
	}
	e.u32(uint32(len(s) + 1))
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
}

func (e *encoder) blob(b []byte) {
	e.u32(uint32(len(b) + 1))
	e.b = append(e.b, b...)
	e.b = append(e.b, 0)
}

// record appends a tag, a length and the body that fn writes.
func (e *encoder) record(tag uint32, fn func()) {
	e.u32(tag)
	at := len(e.b)
	e.u32(0)
	fn()
	binary.LittleEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
}

func (e *encoder) mount(tag uint32, m Mount) {
	if m.Kind < OpBind || m.Kind > OpSetattr {
		e.err = errors.Join(e.err, fmt.Errorf("mount op %d: unknown kind", m.Kind))
	}
	if host := m.Kind == OpBind && m.Flags&OpSrcInRoot == 0; host != (m.Src != 0) {
		e.err = errors.Join(e.err, fmt.Errorf("mount op on %q: a bind from the host needs a source descriptor, and nothing else has one", m.Target))
	}
	if m.Flags&OpTree != 0 && (m.Kind != OpBind || m.Flags&(OpSrcInRoot|OpOptional) != 0 || tag == tagRoot) {
		e.err = errors.Join(e.err, fmt.Errorf("mount op on %q: a tree is a required bind from the host, not the root", m.Target))
	}
	if m.Flags&OpLayers != 0 && m.Kind != OpFS {
		e.err = errors.Join(e.err, fmt.Errorf("mount op on %q: layers belong to a new file system", m.Target))
	}
	if m.Flags&^validOpFlags != 0 {
		e.err = errors.Join(e.err, fmt.Errorf("mount op on %q: unknown flags %#x", m.Target, m.Flags))
	}
	if !strings.HasPrefix(m.Target, "/") {
		e.err = errors.Join(e.err, fmt.Errorf("mount target %q is not absolute", m.Target))
	}
	e.record(tag, func() {
		e.u8(uint8(m.Kind))
		e.u8(uint8(m.Flags))
		e.u32(m.Mode)
		e.u64(m.Attr)
		e.u32(m.Src)
		e.str("mount source", m.Source)
		e.str("mount target", m.Target)
		e.str("fstype", m.FSType)
		e.blob(m.Data)
	})
}

// Encode returns the plan in the wire format decode.c decodes: an 8-byte
// header (magic, length of the rest) and records of (tag u32, length u32,
// body), integers little endian, strings as (length u32, bytes, NUL).
func (p *Plan) Encode() ([]byte, error) {
	if p.Flags&processFlags != 0 {
		return nil, fmt.Errorf("plan has process flags %#x", p.Flags&processFlags)
	}
	if join := p.Flags&FlagJoin != 0; join {
		if p.Flags&(FlagMountNS|FlagSession|FlagInitramfs) != 0 || p.Attach != "" || len(p.Mounts) > 0 || p.Hostname != "" || p.Sources > 0 {
			return nil, errors.New("a join plan builds nothing: no mounts, root, hostname or host sources")
		}
		if p.JoinNS == 0 || p.JoinNS&^joinableNS != 0 {
			return nil, fmt.Errorf("join plan enters namespaces %#x, want a non-empty subset of %#x", p.JoinNS, joinableNS)
		}
	} else if p.JoinNS != 0 {
		return nil, errors.New("plan has namespaces to join but is no join plan")
	} else if p.Flags&FlagJoinKill != 0 {
		return nil, errors.New("plan has a join helper's cgroup.kill but is no join plan")
	}
	if p.Flags&FlagCgroupLate != 0 {
		if p.CgroupFDs > 0 || p.Flags&(FlagJoin|FlagSession) != 0 {
			return nil, errors.New("a plan whose cgroup files come late inherits none, and is no join plan or session")
		}
		for _, m := range append([]Mount{p.Root}, p.Mounts...) {
			if m.IsCgroupFS() {
				return nil, fmt.Errorf("mount op on %q: a cgroup file system needs the cgroup joined before the mount plan (no FlagCgroupLate)", m.Target)
			}
		}
	}
	if len(p.Sysctls) > 0 && p.Flags&FlagJoin != 0 {
		return nil, errors.New("a join plan writes no sysctls: it makes no network namespace")
	}
	if len(p.Sysctls) > maxSysctls {
		return nil, fmt.Errorf("plan has %d sysctls, more than %d", len(p.Sysctls), maxSysctls)
	}
	for _, s := range p.Sysctls {
		if err := checkSysctl(s); err != nil {
			return nil, err
		}
	}
	if p.Flags&FlagSession == 0 && (p.TTL != 0 || p.IdleTimeout != 0) {
		return nil, errors.New("plan has session deadlines but is no session")
	}
	if p.TTL < 0 || p.IdleTimeout < 0 || p.TTL%time.Millisecond != 0 || p.IdleTimeout%time.Millisecond != 0 {
		return nil, errors.New("plan has a session deadline that is negative or not whole milliseconds")
	}
	if p.Flags&FlagMountNS != 0 && (p.Attach == "" || p.AttachSrc == 0) {
		return nil, errors.New("plan has a mount namespace but no attach point")
	}
	if p.Flags&FlagMountNS != 0 && p.Root.Kind == 0 {
		return nil, errors.New("plan has a mount namespace but no root")
	}
	for _, n := range []int{len(p.Mounts), len(p.LandlockRules)} {
		if n > maxPlanItems {
			return nil, fmt.Errorf("plan has %d items in a list, more than %d", n, maxPlanItems)
		}
	}
	e := &encoder{b: make([]byte, 8, 4096)}
	e.record(tagFlags, func() { e.u32(uint32(p.Flags)) })
	if p.Flags&FlagSession != 0 {
		e.record(tagSession, func() { e.u64(uint64(p.TTL.Milliseconds())); e.u64(uint64(p.IdleTimeout.Milliseconds())) })
	}
	if p.JoinNS != 0 {
		e.record(tagJoin, func() { e.u32(p.JoinNS) })
	}
	if p.Attach != "" {
		e.record(tagAttach, func() { e.str("attach point", p.Attach); e.u32(p.AttachSrc) })
	}
	if p.Root.Kind != 0 { // without a mount namespace there is no new root
		e.mount(tagRoot, p.Root)
	}
	for _, m := range p.Mounts {
		e.mount(tagMount, m)
	}
	if p.Hostname != "" {
		e.record(tagHostname, func() { e.str("hostname", p.Hostname) })
	}
	for _, s := range p.Sysctls {
		e.record(tagSysctl, func() { e.str("sysctl", s.Key); e.str("sysctl value", s.Value) })
	}
	for _, f := range []struct {
		tag  uint32
		what string
		prog []byte
	}{{tagSeccomp, "seccomp filter", p.Seccomp}, {tagSeccompRules, "seccomp rules", p.SeccompRules}} {
		if len(f.prog) == 0 {
			continue
		}
		if len(f.prog)%8 != 0 || len(f.prog) > 8*maxBPFInsns {
			e.err = errors.Join(e.err, fmt.Errorf("%s of %d bytes is not a BPF program", f.what, len(f.prog)))
		}
		e.record(f.tag, func() { e.blob(f.prog) })
	}
	if p.CgroupFDs > 0 {
		if p.CgroupFDs > maxCgroupFDs {
			e.err = errors.Join(e.err, fmt.Errorf("plan has %d cgroup files, more than %d", p.CgroupFDs, maxCgroupFDs))
		}
		e.record(tagCgroupFDs, func() { e.u32(p.CgroupFDs) })
	}
	if p.LandlockFS != 0 || p.LandlockScoped != 0 {
		e.record(tagLandlock, func() { e.u64(p.LandlockFS); e.u64(p.LandlockScoped) })
		for _, r := range p.LandlockRules {
			if r.Access&^p.LandlockFS != 0 {
				e.err = errors.Join(e.err, fmt.Errorf("landlock rule on %q grants rights the ruleset does not handle", r.Path))
			}
			e.record(tagLandlockRule, func() { e.u64(r.Access); e.str("landlock path", r.Path) })
		}
	} else if len(p.LandlockRules) > 0 {
		e.err = errors.Join(e.err, errors.New("plan has landlock rules but no ruleset"))
	}
	if p.Sources > 0 {
		if p.Sources > maxSourceFDs {
			e.err = errors.Join(e.err, fmt.Errorf("plan has %d host sources, more than %d", p.Sources, maxSourceFDs))
		}
		e.record(tagSourceFDs, func() { e.u32(p.Sources) })
	}
	for _, m := range append([]Mount{p.Root}, p.Mounts...) {
		if m.Src > p.Sources {
			e.err = errors.Join(e.err, fmt.Errorf("mount op on %q names host source %d of %d", m.Target, m.Src, p.Sources))
		}
	}
	if p.AttachSrc > p.Sources {
		e.err = errors.Join(e.err, fmt.Errorf("attach point names host source %d of %d", p.AttachSrc, p.Sources))
	}
	if p.Flags&FlagSeccompNotify != 0 && len(p.Seccomp) == 0 {
		e.err = errors.Join(e.err, errors.New("plan has a seccomp listener but no filter"))
	}
	return e.finish(planMagic)
}

// finish checks the encoding and writes its header.
func (e *encoder) finish(magic uint32) ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	if len(e.b) > maxPlanBytes {
		return nil, fmt.Errorf("plan is %d bytes, more than %d", len(e.b), maxPlanBytes)
	}
	binary.LittleEndian.PutUint32(e.b[0:], magic)
	binary.LittleEndian.PutUint32(e.b[4:], uint32(len(e.b)-8))
	return e.b, nil
}

// Encode returns the process in the wire format decode.c decodes, as
// [Plan.Encode] does, with a magic of its own: a process is never taken
// for a jail.
func (p *Process) Encode() ([]byte, error) {
	if len(p.Argv) == 0 {
		return nil, errors.New("process has no argv")
	}
	if p.Flags&^processFlags != 0 {
		return nil, fmt.Errorf("process has jail flags %#x", p.Flags&^processFlags)
	}
	for _, n := range []int{len(p.Argv), len(p.Env), len(p.Path), len(p.Rlimits)} {
		if n > maxPlanItems {
			return nil, fmt.Errorf("process has %d items in a list, more than %d", n, maxPlanItems)
		}
	}
	e := &encoder{b: make([]byte, 8, 1024)}
	e.record(tagFlags, func() { e.u32(uint32(p.Flags)) })
	e.record(tagIDs, func() { e.u32(p.UID); e.u32(p.GID) })
	for _, r := range p.Rlimits {
		e.record(tagRlimit, func() { e.u32(uint32(r.Resource)); e.u64(r.Cur); e.u64(r.Max) })
	}
	for _, s := range p.Argv {
		e.record(tagArg, func() { e.str("argument", s) })
	}
	for _, s := range p.Env {
		e.record(tagEnv, func() { e.str("environment variable", s) })
	}
	for _, s := range p.Path {
		e.record(tagPath, func() { e.str("PATH entry", s) })
	}
	if p.Cwd != "" {
		e.record(tagCwd, func() { e.str("working directory", p.Cwd) })
	}
	return e.finish(processMagic)
}
