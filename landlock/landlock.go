package landlock

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/jailrt/jail/nsexec"
)

// Access is a set of LANDLOCK_ACCESS_FS_* rights (linux/landlock.h).
type Access uint64

// Filesystem rights, by the ABI that brought them.
const (
	Execute    Access = 1 << 0
	WriteFile  Access = 1 << 1
	ReadFile   Access = 1 << 2
	ReadDir    Access = 1 << 3
	RemoveDir  Access = 1 << 4
	RemoveFile Access = 1 << 5
	MakeChar   Access = 1 << 6
	MakeDir    Access = 1 << 7
	MakeReg    Access = 1 << 8
	MakeSock   Access = 1 << 9
	MakeFifo   Access = 1 << 10
	MakeBlock  Access = 1 << 11
	MakeSym    Access = 1 << 12
	Refer      Access = 1 << 13 // ABI 2: rename and link across directories
	Truncate   Access = 1 << 14 // ABI 3
	IoctlDev   Access = 1 << 15 // ABI 5: ioctl on device files
	// ResolveUnix (ABI 9, Linux 7.1) is connect(2) and sendmsg(2) to a
	// unix socket by its path: without it, a read-only bind does not stop a
	// workload from talking to a host socket below it.
	ResolveUnix Access = 1 << 16
)

// Scopes (ABI 6): what a domain may not reach outside itself.
const (
	ScopeAbstractUnixSocket uint64 = 1 << 0
	ScopeSignal             uint64 = 1 << 1
)

// The rights a rule gives.
const (
	read     = ReadFile | ReadDir
	readExec = read | Execute
	// write is everything that changes a tree, but making device nodes,
	// which no workload can (it holds no CAP_MKNOD).
	write = WriteFile | RemoveDir | RemoveFile | MakeDir | MakeReg | MakeSock | MakeFifo | MakeSym | Refer | Truncate | ResolveUnix
	// fileRights are the rights that mean something on a file rather than
	// a directory; a rule on a file may hold only these.
	fileRights = Execute | WriteFile | ReadFile | Truncate | IoctlDev
)

// HandledFS returns the filesystem rights ABI abi knows: all of them are
// handled, so that what no rule grants is refused.
func HandledFS(abi int) Access {
	var a Access
	if abi >= 1 {
		a |= 1<<13 - 1
	}
	if abi >= 2 {
		a |= Refer
	}
	if abi >= 3 {
		a |= Truncate
	}
	if abi >= 5 {
		a |= IoctlDev
	}
	if abi >= 9 {
		a |= ResolveUnix
	}
	return a
}

// Scopes returns the scopes ABI abi knows.
func Scopes(abi int) uint64 {
	if abi >= 6 {
		return ScopeAbstractUnixSocket | ScopeSignal
	}
	return 0
}

// Feature is one thing jail's rules restrict, and the ABI it needs.
type Feature struct {
	Name string // as the report names it
	ABI  int
	What string // for Missing
}

// Features are what jail's rules restrict, in report order.
var Features = []Feature{
	{"fs", 1, "reads, writes and executes outside the mount plan"},
	{"refer", 2, "renames and links across the plan's mounts"},
	{"truncate", 3, "truncating files outside the writable mounts"},
	{"ioctl_dev", 5, "device ioctls outside /dev"},
	{"signal", 6, "signals to processes outside the jail's domain, such as its PID 1"},
	{"abstract_unix_socket", 6, "abstract unix sockets outside the jail's domain"},
	{"unix_socket_path", 9, "unix sockets reached by path, such as a host socket below a read-only bind"},
}

// Enforced names the features ABI abi restricts.
func Enforced(abi int) []string {
	out := []string{}
	for _, f := range Features {
		if abi >= f.ABI {
			out = append(out, f.Name)
		}
	}
	return out
}

// Missing names, as "what: why", the features ABI abi cannot restrict.
func Missing(abi int) []string {
	out := []string{}
	for _, f := range Features {
		if abi < f.ABI {
			out = append(out, fmt.Sprintf("landlock %s: %s need Landlock ABI %d (this kernel has %d)", f.Name, f.What, f.ABI, abi))
		}
	}
	return out
}

// Rule grants Access beneath Path, a path in the jail.
type Rule struct {
	Path   string
	Access Access
	// File says Path is a file (a file bind): only file rights apply.
	File bool
}

// FromMounts returns the rules for a jail built from root and ops (a
// rootfs plan): the rights each mount of the plan means to give, and
// nothing beyond. A directory root (--rootfs) is the caller's whole tree:
// read and execute beneath /. The default tmpfs root holds only mount
// points and jail's own /etc: listing directories, and reading /etc.
func FromMounts(root nsexec.Mount, ops []nsexec.Mount) []Rule {
	rights := map[string]Access{}
	files := map[string]bool{}
	grant := func(p string, a Access) { rights[p] |= a }
	if root.Kind == nsexec.OpBind {
		grant("/", readExec)
	} else {
		grant("/", ReadDir)
	}
	for _, m := range ops {
		switch {
		case m.Kind == nsexec.OpMkdir:
			grant(m.Target, read) // jail's own /etc
		case m.Kind == nsexec.OpWriteFile:
			grant(m.Target, ReadFile)
			files[m.Target] = true
		case m.Target == "/proc" && (m.Kind == nsexec.OpFS || m.Kind == nsexec.OpBind): // its own, or the host's (no PID namespace)
			grant(m.Target, read|WriteFile|Truncate) // /proc/self/oom_score_adj, comm...
		case m.Kind == nsexec.OpFS && m.FSType == "devpts":
			grant(m.Target, read|WriteFile|Truncate|IoctlDev)
		case m.Kind == nsexec.OpFS && m.Target == "/dev":
			grant(m.Target, read|WriteFile|Truncate|IoctlDev) // the device nodes: /dev/null, /dev/tty...
		case m.Kind == nsexec.OpFS || m.Kind == nsexec.OpBind:
			if under(m.Target, "/proc") || under(m.Target, "/dev") && m.Kind == nsexec.OpBind {
				continue // masks and device binds: covered by /proc's and /dev's rules
			}
			a := readExec
			if m.Attr&nsexec.AttrRdonly == 0 {
				a |= write
			}
			if m.Attr&nsexec.AttrNoexec != 0 {
				a &^= Execute
			}
			grant(m.Target, a)
			if m.Flags&nsexec.OpFileTarget != 0 {
				files[m.Target] = true
			}
		}
	}
	var out []Rule
	for p, a := range rights {
		if files[p] {
			a &= fileRights
		}
		if covered(rights, p, a) {
			continue // an ancestor's rule grants as much: one rule fewer to open and add
		}
		out = append(out, Rule{Path: p, Access: a, File: files[p]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// covered reports whether an ancestor of p has a rule granting a.
func covered(rights map[string]Access, p string, a Access) bool {
	for d := path.Dir(p); p != "/"; p, d = d, path.Dir(d) {
		if r, ok := rights[d]; ok && r&a == a {
			return true
		}
		if d == "/" {
			break
		}
	}
	return false
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// String renders a rule for golden files: "/usr r x" and so on.
func (r Rule) String() string {
	names := []struct {
		a    Access
		name string
	}{{ReadFile, "read"}, {ReadDir, "list"}, {Execute, "exec"}, {WriteFile, "write"}, {MakeReg | MakeDir, "create"},
		{RemoveFile | RemoveDir, "remove"}, {Refer, "refer"}, {Truncate, "truncate"}, {IoctlDev, "ioctl"}, {ResolveUnix, "unix"}}
	var parts []string
	for _, n := range names {
		if r.Access&n.a != 0 {
			parts = append(parts, n.name)
		}
	}
	s := fmt.Sprintf("%-22s %s", path.Clean(r.Path), strings.Join(parts, " "))
	if r.File {
		s += " [file]"
	}
	return s
}
