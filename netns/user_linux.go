package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// pastaReady bounds how long pasta may take to make the jail's interface.
const pastaReady = 10 * time.Second

// UserStack finds what user-mode egress needs for this caller: pasta on
// PATH, and /dev/net/tun open to it (pasta makes its interface with it
// from inside the jail's namespaces, where the device's owner and mode
// still decide). It returns pasta's path, or why it cannot be used, with
// the fix: a jail must not start with a network it cannot make.
func UserStack() (string, error) {
	path, err := exec.LookPath("pasta")
	if err != nil {
		return "", errors.New("an unprivileged caller's egress needs pasta, which is not installed (apt-get install passt), or run as root, or use network mode none")
	}
	if err := unix.Access("/dev/net/tun", unix.R_OK|unix.W_OK); err != nil {
		var st unix.Stat_t
		mode := ""
		if unix.Stat("/dev/net/tun", &st) == nil {
			mode = fmt.Sprintf(" (mode %#o, owner uid %d)", st.Mode&0o7777, st.Uid)
		}
		return "", fmt.Errorf("an unprivileged caller's egress needs pasta, and pasta needs /dev/net/tun readable and writable by uid %d%s: %v; "+
			"make it mode 0666 as udev does by default, or run as root", os.Getuid(), mode, err)
	}
	return path, nil
}

// UserLink is a user-mode egress jail's network as built: the rules in
// its namespace, reached through a netfilter socket its child made there,
// and pasta.
type UserLink struct {
	u     *UserEgress
	sock  *os.File
	conn  *nftables.Conn
	pasta *exec.Cmd
	exit  chan struct{}    // closed when pasta has exited
	state *os.ProcessState // how, then
	log   lockedBuffer     // pasta's output
	dir   string           // the directory of pasta's pid FIFO, until Ready
	ready *os.File         // the FIFO, open for reading and writing
}

// lockedBuffer is a bytes.Buffer that pasta's output goroutines write to
// while a failed start reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// maxPastaOutput bounds what is kept of pasta's output.
const maxPastaOutput = 16 << 10

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxPastaOutput - b.b.Len(); room > 0 {
		b.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// StartUser starts pasta (at pastaPath) for the jail whose PID 1 is pid,
// without waiting for it: it makes the jail's interface while the jail's
// child builds its root. Load then loads the rules, and Ready waits for
// pasta; the workload must not run before both returned.
func StartUser(pid int, pastaPath string) (*UserLink, error) {
	l := &UserLink{}
	if err := l.startPasta(pid, pastaPath); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Load loads u's rules into the jail's namespace through sock, a
// NETLINK_NETFILTER socket made in that namespace, which l keeps (to read
// the counters) and closes.
func (l *UserLink) Load(u *UserEgress, sock *os.File) error {
	l.u, l.sock = u, sock
	// Every ack of a batch waits in the socket's buffer.
	_ = unix.SetsockoptInt(int(sock.Fd()), unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(int(sock.Fd()), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("the jail's netfilter socket: %w", err)
	}
	conn, err := nftables.New(nftables.WithTestDial(socketFunc(sock)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	l.conn = conn
	if err := l.loadRules(); err != nil {
		return fmt.Errorf("nftables rules in the jail's namespace: %w", err)
	}
	return nil
}

// socketFunc carries google/nftables' messages over sock, a netlink socket
// this process did not make (and could not: it cannot enter the
// namespace). The library dials its own sockets, except through the
// nltest.Func of WithTestDial, which gets each batch to send and is asked
// for each reply: here they are written to sock and read from it.
// Replies keep their sequence numbers; their port id is cleared, as the
// library's check of a reply's port id expects the fake socket's.
func socketFunc(sock *os.File) func([]mdnetlink.Message) ([]mdnetlink.Message, error) {
	fd := int(sock.Fd())
	var mu sync.Mutex
	return func(req []mdnetlink.Message) ([]mdnetlink.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(req) > 0 {
			var b []byte
			for _, m := range req {
				mb, err := m.MarshalBinary()
				if err != nil {
					return nil, err
				}
				b = append(b, mb...)
			}
			if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
				return nil, os.NewSyscallError("sendto", err)
			}
			return nil, nil
		}
		n, _, err := unix.Recvfrom(fd, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		for err == unix.EINTR {
			n, _, err = unix.Recvfrom(fd, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		}
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		b := make([]byte, n)
		if n, _, err = unix.Recvfrom(fd, b, 0); err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		var msgs []mdnetlink.Message
		for b = b[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return nil, errors.New("netlink: a malformed reply")
			}
			var m mdnetlink.Message
			if err := m.UnmarshalBinary(b[:l]); err != nil {
				return nil, err
			}
			m.Header.PID = 0
			msgs = append(msgs, m)
			b = b[min(len(b), (l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
		}
		return msgs, nil
	}
}

// loadRules makes the table, its set and chains and their rules, in one
// transaction.
func (l *UserLink) loadRules() error {
	conn := l.conn
	conn.AddTable(table)
	var denied *nftables.Set
	if l.u.LogDenied > 0 {
		denied = &nftables.Set{Table: table, Name: UserDeniedSet, Dynamic: true, Concatenation: true, Size: uint32(l.u.LogDenied),
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
		if err := conn.AddSet(denied, nil); err != nil {
			return err
		}
	}
	drop := nftables.ChainPolicyDrop
	chains := map[Chain]*nftables.Chain{
		UserOut: conn.AddChain(&nftables.Chain{Name: string(UserOut), Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop}),
		UserIn: conn.AddChain(&nftables.Chain{Name: string(UserIn), Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop}),
		UserFwd: conn.AddChain(&nftables.Chain{Name: string(UserFwd), Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop}),
	}
	for _, r := range l.u.Rules {
		var set *nftables.Set
		if len(r.DAddrs) > 0 {
			set = &nftables.Set{Table: table, Anonymous: true, Constant: true, Interval: true, KeyType: nftables.TypeIPAddr}
			if err := conn.AddSet(set, intervalElements(Ranges(r.DAddrs))); err != nil {
				return err
			}
		}
		nr := &nftables.Rule{Table: table, Chain: chains[r.Chain], Exprs: exprs(r, 0, set, denied)}
		if r.Name != "" {
			nr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Name)
		}
		conn.AddRule(nr)
	}
	return conn.Flush()
}

// startPasta starts pasta for the jail whose PID 1 is pid.
func (l *UserLink) startPasta(pid int, path string) error {
	// A FIFO of this process's, named after it so that a killed jail's
	// is found (PruneUser); gone as soon as pasta has written to it. (A
	// pipe inherited as /proc/self/fd/N would leave nothing, but pasta
	// may close what it inherits before it opens its pid file.)
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", pastaDirPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("pasta: %w", err)
	}
	l.dir = dir
	fifo := filepath.Join(dir, "pid")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return fmt.Errorf("pasta: %w", err)
	}
	// Read and write: opening does not wait for pasta, and reading waits
	// for its line rather than seeing EOF when nobody writes yet.
	if l.ready, err = os.OpenFile(fifo, os.O_RDWR, 0); err != nil {
		return fmt.Errorf("pasta: %w", err)
	}
	proc := fmt.Sprintf("/proc/%d/ns/", pid)
	c := exec.Command(path, pastaArgs(proc+"net", proc+"user", fifo)...)
	c.Stdout, c.Stderr = &l.log, &l.log
	c.WaitDelay = time.Second // its output's pipes, should anything else hold them
	// pasta holds the jail's namespace: it must not outlive this process
	// (a killed jail's PID 1 goes with it; pasta would not). The parent
	// death signal comes when the thread that forked pasta exits, not
	// the process: that thread is kept, locked to the goroutine that
	// waits for pasta, for as long as pasta runs.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	l.exit = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer close(l.exit)
		err := c.Start()
		started <- err
		if err == nil {
			_ = c.Wait()
			l.state = c.ProcessState
		}
	}()
	if err := <-started; err != nil {
		<-l.exit
		l.exit = nil
		return fmt.Errorf("pasta: %w", err)
	}
	l.pasta = c
	return nil
}

// Ready waits until pasta has made the jail's interface: it writes its
// pid file (a FIFO in a directory of this process's) only after that.
// The FIFO is gone when Ready returns.
func (l *UserLink) Ready() error {
	defer l.removeFIFO()
	line := make(chan error, 1)
	go func(f *os.File) {
		b := make([]byte, 32)
		_, err := f.Read(b)
		line <- err
	}(l.ready)
	_ = l.ready.SetReadDeadline(time.Now().Add(pastaReady))
	select {
	case err := <-line:
		if err != nil {
			return fmt.Errorf("pasta did not make the jail's interface within %v: %s", pastaReady, l.output())
		}
		return nil
	case <-l.exit:
		return fmt.Errorf("pasta: %s (%v)", l.output(), l.state)
	}
}

// removeFIFO removes pasta's pid FIFO and its directory.
func (l *UserLink) removeFIFO() {
	if l.ready != nil {
		l.ready.Close()
		l.ready = nil
	}
	if l.dir != "" {
		_ = os.RemoveAll(l.dir)
		l.dir = ""
	}
}

// pastaDirPrefix starts the name of the temporary directory of pasta's
// pid FIFO; the owner's pid follows.
const pastaDirPrefix = "jail-pasta-"

// PruneUser removes the pasta FIFO directories of jails that were killed
// while they started pasta (their owner is gone), and returns what it
// removed.
func PruneUser() []string {
	var removed []string
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), pastaDirPrefix+"*"))
	for _, m := range matches {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(m), pastaDirPrefix), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(m, &st) != nil || st.Uid != uint32(os.Getuid()) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // not ours
		}
		if err := unix.Kill(n, 0); err == nil || err == unix.EPERM {
			continue // its jail still runs
		}
		if os.RemoveAll(m) == nil {
			removed = append(removed, m)
		}
	}
	return removed
}

// pastaArgs are pasta's arguments for the jail of namespaces net and
// user, with pid file pidFile. No port of the host is forwarded to the
// jail, and none of the jail's loopback to the host (-t/-u/-T/-U none:
// their default, auto, would); the gateway's address is not the host's
// loopback (--no-map-gw); IPv4 only; the interface is JailIf; pasta
// stays in the foreground, as this process's child.
func pastaArgs(net, user, pidFile string) []string {
	return []string{"--foreground", "--quiet", "--config-net", "--no-map-gw", "--ipv4-only",
		"-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-dhcp", "--no-ndp", "--no-dhcpv6", "--no-ra",
		"--ns-ifname", JailIf, "--pid", pidFile, "--userns", user, "--netns", net}
}

// output is what pasta wrote, on one line, without its complaints that
// it has no syslog to write to.
func (l *UserLink) output() string {
	var lines []string
	for _, line := range strings.Split(l.log.String(), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line != "" && !(strings.HasPrefix(line, "Failed to send") && strings.HasSuffix(line, "to syslog")) {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return "no output"
	}
	return strings.Join(lines, "; ")
}

// Counters reads the rules' counters and the refused destinations.
func (l *UserLink) Counters() (Counters, error) {
	if l.conn == nil {
		return Counters{}, errors.New("no rules loaded")
	}
	set := ""
	if l.u.LogDenied > 0 {
		set = UserDeniedSet
	}
	return readCounters(func(f func(*nftables.Conn) error) error { return f(l.conn) },
		[]string{string(UserOut), string(UserIn)}, set)
}

// Close stops pasta and removes what this process made for it. The rules
// go with the jail's namespace. It does not wait for pasta to be gone:
// its exit unregisters the jail's interface, which waits for an RCU grace
// period (tens of ms); the goroutine that started it reaps it.
func (l *UserLink) Close() error {
	if l.pasta != nil {
		_ = l.pasta.Process.Kill()
		l.pasta = nil
	}
	l.removeFIFO()
	if l.sock != nil {
		l.sock.Close()
		l.sock = nil
	}
	return nil
}

// add adds counter n of the rule named name.
func (c *Counters) add(name string, n *expr.Counter) {
	switch name {
	case CountOut:
		c.BytesOut, c.PacketsOut = c.BytesOut+n.Bytes, c.PacketsOut+n.Packets
	case CountIn:
		c.BytesIn, c.PacketsIn = c.BytesIn+n.Bytes, c.PacketsIn+n.Packets
	case CountDenied:
		c.Denied += n.Packets
	}
}

// deniedOf decodes the elements of a set of refused destinations.
func deniedOf(els []nftables.SetElement) []Denied {
	var out []Denied
	for _, el := range els {
		if len(el.Key) < 10 {
			continue
		}
		d := Denied{Dst: netip.AddrFrom4([4]byte(el.Key[0:4])), Proto: el.Key[4]}
		if d.Proto == unix.IPPROTO_TCP || d.Proto == unix.IPPROTO_UDP {
			d.Port = uint16(el.Key[8])<<8 | uint16(el.Key[9])
		}
		out = append(out, d)
	}
	return out
}
