package seccomp

// Constants are the names a policy may use in argument values. They are
// the x86_64/generic Linux values; the table is short on purpose: a policy
// names what it filters on, and a reviewer should be able to check every
// name against the man page.
var Constants = map[string]uint64{
	// clone(2), unshare(2), setns(2) namespace flags.
	"CLONE_NEWTIME":   0x00000080,
	"CLONE_NEWNS":     0x00020000,
	"CLONE_NEWCGROUP": 0x02000000,
	"CLONE_NEWUTS":    0x04000000,
	"CLONE_NEWIPC":    0x08000000,
	"CLONE_NEWUSER":   0x10000000,
	"CLONE_NEWPID":    0x20000000,
	"CLONE_NEWNET":    0x40000000,

	// socket(2) address families and netlink protocols.
	"AF_UNIX":       1,
	"AF_INET":       2,
	"AF_INET6":      10,
	"AF_NETLINK":    16,
	"AF_PACKET":     17,
	"AF_VSOCK":      40,
	"NETLINK_ROUTE": 0,
	"NETLINK_AUDIT": 9,

	// ioctl(2) requests.
	"TIOCSTI":   0x5412,
	"TIOCLINUX": 0x541c,

	// personality(2) values Docker's profile allows.
	"PER_LINUX":         0x0000,
	"UNAME26":           0x0020000,
	"PER_LINUX32":       0x0008,
	"ADDR_NO_RANDOMIZE": 0x0040000,
	"PERSONALITY_QUERY": 0xffffffff,
	"UINT32_MAX":        0xffffffff,
}
