package rootfs

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
)

// Config is what the root should contain.
type Config struct {
	// Dir is the host directory used as a read-only root; empty for the
	// default tmpfs root.
	Dir string
	// UID and GID are the workload's ids, written into /etc/passwd and
	// /etc/group of the default root.
	UID, GID uint32
	// Hostname goes into /etc/hosts.
	Hostname string
	// Hosts are more names for /etc/hosts (an egress allow-list's, as
	// resolved on the host): the jail has no resolver.
	Hosts []HostEntry
	// TmpSizeBytes is the size of /tmp.
	TmpSizeBytes int64
	// ShmSizeBytes is the size of /dev/shm; 0 means mounts.DefaultTmpfsBytes.
	ShmSizeBytes int64
	// PtyMax is how many pseudo-terminals the jail's own devpts instance
	// may have at once (its max= option), so that one jail cannot take
	// every pty of the host's shared pool; 0 means DefaultPtyMax.
	PtyMax int
	// Mounts are the caller's mounts, already checked with [mounts.Check]
	// and their sources opened (their Source is the real path), applied
	// after the system mounts in order.
	Mounts []mounts.Mount
	// FileSources holds the sources of Mounts that are not directories:
	// their mount points are files.
	FileSources map[string]bool
	// HostProc binds the host's /proc instead of mounting a new one: a
	// jail without a PID namespace of its own cannot mount proc, and sees
	// the host's processes anyway.
	HostProc bool
	// Overlay, when not nil, makes the default root's system directories
	// writable (see [Overlay]).
	Overlay *Overlay
}

// Overlay makes each system directory the default root binds from the
// host (/usr, see [OverlayDirs]) an overlay: its lower layer is the host directory
// through an id map that shows the host's root-owned files as the
// workload's (a detached mount only the parent can make:
// [nsexec.OpTree]); its upper and work directories are on one tmpfs of
// SizeBytes at [OverlayDir], which also holds the workspace, bound at
// Workspace. That tmpfs is left read-only at OverlayDir (the overlays and
// the workspace bind keep their own writable mounts of it): the workload
// writes its layers only through the overlays. Writes never reach the
// host; the rest of the root stays read-only.
//
// Above the host directory, each overlay has a second lower layer at
// OverlayDir/lower/D: a snapshot's layer tree for D (Lowers), or an
// empty directory, where a restore puts one later (nsexec's
// CTL_RESET_LAYERS).
type Overlay struct {
	SizeBytes int64
	Workspace string
	// Hidden are the host paths below the overlaid directories that the
	// id map would give the workload to read and the host keeps from it
	// (see [OverlayDirs]): each is masked in the jail, a directory by an
	// empty read-only tmpfs, a file by /dev/null.
	Hidden []HiddenPath
	// Lowers maps an overlaid directory to the host directory of a
	// snapshot's layer tree for it: an id-mapped detached mount of it,
	// made by the parent as the host directory's is, is the overlay's
	// upper lower layer, read-only.
	Lowers map[string]string
}

// HiddenPath is a host path an overlay masks; Dir says it is a directory.
type HiddenPath struct {
	Path string
	Dir  bool
}

// OverlayDirs returns the host directories an [Overlay] makes writable
// on host h: the system directories the default root binds (/usr, and
// /lib... where they are not symlinks). /etc's binds (TLS roots and
// private keys among them) stay read-only binds.

func OverlayDirs(h Host) []string {
	var out []string
	for _, d := range systemDirs {
		if _, link := h.Links[d]; !link && h.Exists[d] {
			out = append(out, d)
		}
	}
	return out
}

// OverlayKernel says why a kernel of this release (as `uname -r`) cannot
// have an [Overlay], nil if it can: its upper layer is a tmpfs in the
// jail's user namespace, where an overlay keeps its metadata in user.*
// extended attributes (the userxattr option), which tmpfs has from Linux
// 6.6.
func OverlayKernel(release string) error {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return fmt.Errorf("needs Linux 6.6, and kernel release %q says no version", release)
	}
	if major < 6 || major == 6 && minor < 6 {
		return fmt.Errorf("needs Linux 6.6 (user extended attributes on tmpfs, for the upper layer in a user namespace); this is %s", release)
	}
	return nil
}

// OverlayDir is where an [Overlay]'s tmpfs is, read-only, in the jail:
// the upper layer of a directory D is OverlayDir/upper/D, the mount point
// of its snapshot's lower layer OverlayDir/lower/D, the workspace
// OverlayDir/workspace.
const OverlayDir = "/.overlay"

// HostEntry is a name and its addresses in the jail's /etc/hosts.
type HostEntry struct {
	Name  string
	Addrs []netip.Addr
}

// Host is what the plan needs to know about the host, gathered by [Probe].
type Host struct {
	// Links maps top-level system paths that are symlinks on the host
	// (usr-merge: /bin -> usr/bin) to their link text.
	Links map[string]string
	// Exists holds the paths that exist on the host as files or
	// directories (not symlinks).
	Exists map[string]bool
	// Files holds the paths of Exists that are not directories: binds of
	// them need a file, not a directory, as mount point.
	Files map[string]bool
	// Attach is a host directory the child may mount the new root on.
	Attach string
	// Initramfs says / is the initramfs (rootfs), as in minimal VMs and
	// some CI images: pivot_root refuses it, and the child enters a copy of
	// the tree first (nsexec.FlagInitramfs).
	Initramfs bool
}

// Plan is the root filesystem as nsexec steps.
type Plan struct {
	Root   nsexec.Mount
	Mounts []nsexec.Mount
	Attach string
}

// systemDirs are bound read-only from the host into the default root, or
// recreated as symlinks where the host has symlinks.
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr"}

// overlayRootDirs are the directories of the default root an [Overlay]
// makes writable beside the host's: jail's own /etc, and the places
// software is installed or keeps its state, which the root has not
// otherwise. The root's own directory stays read-only.
var overlayRootDirs = []string{"/etc", "/home", "/mnt", "/opt", "/root", "/srv", "/var"}

// OverlayTargets returns every directory an [Overlay] makes writable on
// host h, in the order of the plan: [OverlayDirs], then /etc, /home,
// /mnt, /opt, /root, /srv and /var.
func OverlayTargets(h Host) []string {
	return append(OverlayDirs(h), overlayRootDirs...)
}

// etcBinds are the host /etc entries programs need, bound read-only when
// present: the loader cache, TLS roots, alternatives (Debian's /usr/bin/awk
// points there), name-service tables and the time zone.
var etcBinds = []string{
	"/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/alternatives",
	"/etc/protocols", "/etc/services", "/etc/localtime", "/etc/mime.types",
}

// maskedPaths and readonlyPaths follow runc's defaults (libcontainer
// specconv): files that leak host state or allow host-wide actions.
var (
	maskedFiles = []string{"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/kallsyms", "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup",
		// Host facts a workload has no use for: the boot's identity and
		// command line, host-wide interrupt, scheduler and lock activity
		// (side channels; /proc/locks names host inodes and pids), the
		// host's disks and swap, other users' key quotas.
		"/proc/cmdline", "/proc/bootconfig", "/proc/interrupts", "/proc/softirqs",
		"/proc/schedstat", "/proc/locks", "/proc/partitions", "/proc/diskstats", "/proc/swaps", "/proc/key-users"}
	// maskedInReadonly are masked on top of the read-only /proc/sys: a mask
	// made before it would be carried into it and listed twice.
	maskedInReadonly = []string{"/proc/sys/kernel/random/boot_id"}
	maskedDirs       = []string{"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/firmware", "/proc/pressure"}
	readonlyPaths    = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	devices          = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
)

const (
	ro       = nsexec.AttrRdonly | nsexec.AttrNosuid | nsexec.AttrNodev
	safe     = nsexec.AttrNosuid | nsexec.AttrNodev
	procAttr = nsexec.AttrNosuid | nsexec.AttrNodev | nsexec.AttrNoexec
)

// LowerAttr are the attributes of an overlay's lower layers, the host's
// directory and a snapshot's layer tree: read-only, nosuid, nodev.
const LowerAttr = ro

// HostPaths lists every host path [Probe] must look at.
func HostPaths() []string {
	return append(append(append([]string{}, systemDirs...), etcBinds...), devices...)
}

// Build returns the mount plan for c on host h.
func Build(c Config, h Host) (Plan, error) {
	if h.Attach == "" {
		return Plan{}, fmt.Errorf("no directory to attach the new root on (need /tmp or /mnt on the host)")
	}
	p := Plan{Attach: h.Attach}
	add := func(m nsexec.Mount) { p.Mounts = append(p.Mounts, m) }
	if c.Overlay != nil && c.Dir != "" {
		return Plan{}, fmt.Errorf("an overlay is made over the default root's system directories, and a root directory has none")
	}
	// layered mounts an overlay on d, over what the plan put there (its
	// lower layer) and a snapshot's tree, if it has one.
	layered := func(d string) {
		upper, work, lower := path.Join(OverlayDir, "upper", d), path.Join(OverlayDir, "work", d), path.Join(OverlayDir, "lower", d)
		add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: upper, Mode: 0o755})
		add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: work, Mode: 0o755})
		add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: lower, Mode: 0o755})
		if tree, ok := c.Overlay.Lowers[d]; ok {
			add(nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpTree, Source: tree, Target: lower, Attr: LowerAttr})
		}
		add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpLayers, FSType: "overlay", Target: d, Attr: safe,
			Data: nsexec.FSOptions("lowerdir="+lower+":"+d, "upperdir="+upper, "workdir="+work, "userxattr")})
	}
	// covered says a mount of the Spec's is on d itself: d is not
	// overlaid (the mount hides whatever is below it).
	covered := func(d string) bool {
		return slices.ContainsFunc(c.Mounts, func(m mounts.Mount) bool { return path.Clean(m.Target) == d })
	}
	// system binds a host directory read-only, or with an overlay over it.
	system := func(d string, file bool) {
		m := bindOp(d, d, ro, file)
		if c.Overlay == nil || file || covered(d) {
			add(m)
			return
		}
		m.Flags |= nsexec.OpTree
		add(m)
		layered(d)
		for _, hp := range c.Overlay.Hidden {
			if !strings.HasPrefix(hp.Path, d+"/") {
				continue
			}
			if hp.Dir {
				add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpOptional, FSType: "tmpfs", Target: hp.Path, Attr: ro | nsexec.AttrNoexec,
					Data: nsexec.FSOptions("size=0", "mode=0")})
			} else {
				m := maskOp(hp.Path)
				m.Attr |= nsexec.AttrNodev
				add(m)
			}
		}
	}
	if c.Dir == "" {
		p.Root = nsexec.Mount{Kind: nsexec.OpFS, FSType: "tmpfs", Target: "/", Attr: safe,
			Data: nsexec.FSOptions("mode=0755", "size=4m", "nr_inodes=4096")}
		if c.Overlay != nil {
			add(tmpfsOp(OverlayDir, c.Overlay.SizeBytes, "0755", safe))
			add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: path.Join(OverlayDir, "workspace"), Mode: 0o755})
		}
		for _, d := range systemDirs {
			if link, ok := h.Links[d]; ok {
				add(nsexec.Mount{Kind: nsexec.OpSymlink, Target: d, Data: []byte(link)})
			} else if h.Exists[d] {
				system(d, false)
			}
		}
		for _, f := range etcFiles(c) {
			add(f)
		}
		for _, e := range etcBinds {
			switch _, link := h.Links[e]; {
			case link:
				add(nsexec.Mount{Kind: nsexec.OpSymlink, Target: e, Data: []byte(h.Links[e])})
			case c.Overlay != nil && h.Exists[e] && h.IsFile(e):
				add(nsexec.Mount{Kind: nsexec.OpWriteFile, Target: e, Mode: 0o644}) // the bind's mount point
			case c.Overlay != nil && h.Exists[e]:
				add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: e, Mode: 0o755})
			}
		}
		if c.Overlay != nil {
			// Writable too: jail's own /etc, with all the above as its
			// lower layer (the host's files it binds stay read-only
			// binds, on top), and the places software is installed or
			// keeps its state, empty below.
			for _, d := range overlayRootDirs {
				if covered(d) {
					continue
				}
				if d != "/etc" {
					add(nsexec.Mount{Kind: nsexec.OpMkdir, Target: d, Mode: 0o755})
				}
				layered(d)
			}
		}
		for _, e := range etcBinds {
			if _, link := h.Links[e]; !link && h.Exists[e] {
				add(bindOp(e, e, ro, h.IsFile(e)))
			}
		}
	} else {
		p.Root = nsexec.Mount{Kind: nsexec.OpBind, Source: c.Dir, Target: "/", Attr: ro}
	}
	addProc(add, c.HostProc)
	addDev(add, c, h)
	add(tmpfsOp("/tmp", c.TmpSizeBytes, "1777", safe))
	for _, m := range c.Mounts {
		switch m.Type {
		case mounts.Tmpfs:
			add(tmpfsOp(m.Target, m.SizeBytes, "0755", safe))
		case mounts.ROBind:
			add(bindOp(m.Source, m.Target, ro, c.FileSources[m.Source]))
		case mounts.Bind:
			add(bindOp(m.Source, m.Target, safe, c.FileSources[m.Source]))
		default:
			return Plan{}, fmt.Errorf("mount %s: unknown type %q", m.Target, m.Type)
		}
	}
	if c.Overlay != nil {
		add(nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate | nsexec.OpSrcInRoot, Source: path.Join(OverlayDir, "workspace"),
			Target: c.Overlay.Workspace, Attr: safe})
		add(nsexec.Mount{Kind: nsexec.OpSetattr, Target: OverlayDir, Attr: nsexec.AttrRdonly})
	}
	markNew(p.Mounts, p.Root.Kind == nsexec.OpFS && p.Root.FSType == "tmpfs")
	return p, nil
}

// markNew sets [nsexec.OpNew] on the ops that make their target in a
// directory of a tmpfs the plan made (the root when freshRoot, or a tmpfs
// op's target, or a directory an OpNew mkdir made there) where no earlier
// op put anything at that path. The child stage then makes such a target
// without looking for it first, in the directory the op before it used,
// when both share it. Nothing outside the jail can reach such a tmpfs
// before the workload runs; a wrong guess fails the run (EEXIST), never
// lands somewhere else.
func markNew(ops []nsexec.Mount, freshRoot bool) {
	// What the plan made at a path holds until a later mount covers the
	// path or one of its parents: each fact records the op that set it,
	// and mountAt the last op that mounted on each target. (Deleting the
	// facts below a mount as it comes is quadratic: 60 % of planning a
	// strict run.)
	type fact struct {
		at    int
		fresh bool
	}
	fresh := make(map[string]fact, len(ops))  // directories as the plan made them
	taken := make(map[string]int, 2*len(ops)) // paths something is at
	mountAt := make(map[string]int, len(ops))
	fresh["/"], taken["/"] = fact{-1, freshRoot}, -1
	holds := func(p string, at int) bool { // no mount after op at covers p
		for {
			if m, ok := mountAt[p]; ok && m > at {
				return false
			}
			if p == "/" {
				return true
			}
			p = path.Dir(p)
		}
	}
	for i := range ops {
		m := &ops[i]
		makes := m.Kind == nsexec.OpMkdir || m.Kind == nsexec.OpWriteFile || m.Kind == nsexec.OpSymlink ||
			(m.Kind == nsexec.OpBind || m.Kind == nsexec.OpFS) && m.Flags&nsexec.OpCreate != 0
		if makes && m.Target == path.Clean(m.Target) {
			dir := path.Dir(m.Target)
			f, isFresh := fresh[dir]
			t, isTaken := taken[m.Target]
			if isFresh && f.fresh && holds(dir, f.at) && !(isTaken && holds(m.Target, t)) {
				m.Flags |= nsexec.OpNew
			}
		}
		if m.Kind == nsexec.OpBind || m.Kind == nsexec.OpFS {
			// The mount covers whatever the plan made at and below its target.
			mountAt[m.Target] = i
			fresh[m.Target] = fact{i, m.Kind == nsexec.OpFS && m.FSType == "tmpfs" && m.Flags&nsexec.OpOptional == 0} // an optional one may be skipped
		} else if m.Kind == nsexec.OpMkdir && m.Flags&nsexec.OpNew != 0 {
			fresh[m.Target] = fact{i, true}
		}
		for p := m.Target; ; p = path.Dir(p) { // the target and every parent made on the way (mkdir -p)
			taken[p] = i
			if p == "/" {
				break
			}
		}
	}
}

// bindOp binds a host path, on a file mount point when it is not a directory.
func bindOp(src, dst string, attr uint64, file bool) nsexec.Mount {
	m := nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate, Source: src, Target: dst, Attr: attr}
	if file {
		m.Flags |= nsexec.OpFileTarget
	}
	return m
}

func tmpfsOp(target string, size int64, mode string, attr uint64) nsexec.Mount {
	if size == 0 {
		size = mounts.DefaultTmpfsBytes
	}
	return nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate, FSType: "tmpfs", Target: target, Attr: attr,
		Data: nsexec.FSOptions("mode="+mode, "size="+strconv.FormatInt(size, 10))}
}

// addProc mounts a proc for the jail's PID namespace and hides or freezes
// the host-wide files in it. Masks are optional: kernels differ in which of
// these files exist.
func addProc(add func(nsexec.Mount), hostProc bool) {
	if hostProc {
		add(nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate, Source: "/proc", Target: "/proc", Attr: procAttr})
	} else {
		add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate, FSType: "proc", Target: "/proc", Attr: procAttr})
	}
	for _, f := range maskedFiles {
		add(maskOp(f))
	}
	for _, d := range maskedDirs {
		add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpOptional, FSType: "tmpfs", Target: d, Attr: ro | nsexec.AttrNoexec,
			Data: nsexec.FSOptions("size=0", "mode=0555")})
	}
	for _, r := range readonlyPaths {
		add(nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpOptional | nsexec.OpSrcInRoot, Source: r, Target: r, Attr: ro | nsexec.AttrNoexec})
	}
	for _, f := range maskedInReadonly {
		add(maskOp(f))
	}
}

// maskOp hides a /proc file under /dev/null, as runc does: it reads empty.
// The mount is read-only, nosuid and noexec but not nodev, or the device
// could not be opened at all.
func maskOp(target string) nsexec.Mount {
	return nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpOptional, Source: "/dev/null", Target: target,
		Attr: nsexec.AttrRdonly | nsexec.AttrNosuid | nsexec.AttrNoexec}
}

// DefaultPtyMax is the pty limit of a jail whose Config.PtyMax is 0.
const DefaultPtyMax = 16

// addDev builds a minimal /dev on a tmpfs that is made read-only at the end;
// /dev/shm and /dev/pts stay writable.
func addDev(add func(nsexec.Mount), c Config, h Host) {
	add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate, FSType: "tmpfs", Target: "/dev", Attr: nsexec.AttrNosuid | nsexec.AttrNoexec,
		Data: nsexec.FSOptions("mode=0755", "size=64k", "nr_inodes=64")})
	for _, d := range devices {
		if h.Exists[d] {
			add(nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate | nsexec.OpFileTarget, Source: d, Target: d,
				Attr: nsexec.AttrNosuid | nsexec.AttrNoexec})
		}
	}
	ptyMax := c.PtyMax
	if ptyMax == 0 {
		ptyMax = DefaultPtyMax
	}
	add(nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate, FSType: "devpts", Target: "/dev/pts", Attr: nsexec.AttrNosuid | nsexec.AttrNoexec,
		Data: nsexec.FSOptions("newinstance", "ptmxmode=0666", "mode=0620", "max="+strconv.Itoa(ptyMax))})
	add(tmpfsOp("/dev/shm", c.ShmSizeBytes, "1777", safe|nsexec.AttrNoexec))
	for _, l := range [][2]string{{"/dev/ptmx", "pts/ptmx"}, {"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"},
		{"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}} {
		add(nsexec.Mount{Kind: nsexec.OpSymlink, Target: l[0], Data: []byte(l[1])})
	}
	add(nsexec.Mount{Kind: nsexec.OpSetattr, Target: "/dev", Attr: nsexec.AttrRdonly})
}

// etcFiles writes the few /etc files the default root makes up itself.
func etcFiles(c Config) []nsexec.Mount {
	uid, gid := strconv.FormatUint(uint64(c.UID), 10), strconv.FormatUint(uint64(c.GID), 10)
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	group := "root:x:0:\n"
	if c.UID != 0 && c.UID != 65534 {
		passwd += "jail:x:" + uid + ":" + gid + ":jail:/tmp:/bin/sh\n"
	}
	if c.GID != 0 && c.GID != 65534 {
		group += "jail:x:" + gid + ":\n"
	}
	passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group += "nogroup:x:65534:\n"
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if c.Hostname != "" && c.Hostname != "localhost" {
		hosts = strings.Replace(hosts, "localhost\n", "localhost "+c.Hostname+"\n", 1)
	}
	for _, h := range c.Hosts {
		for _, a := range h.Addrs {
			hosts += a.String() + "\t" + h.Name + "\n"
		}
	}
	files := []struct{ name, data string }{
		{"passwd", passwd}, {"group", group}, {"hosts", hosts}, {"hostname", c.Hostname + "\n"},
		{"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
	out := []nsexec.Mount{{Kind: nsexec.OpMkdir, Target: "/etc", Mode: 0o755}}
	for _, f := range files {
		out = append(out, nsexec.Mount{Kind: nsexec.OpWriteFile, Target: path.Join("/etc", f.name), Mode: 0o644, Data: []byte(f.data)})
	}
	return out
}

// IsFile reports whether the host path p is not a directory, as [Probe]
// recorded it.
func (h Host) IsFile(p string) bool { return h.Files[p] }
