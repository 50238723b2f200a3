package hostcheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/cgroup"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/landlock"
	"github.com/jailrt/jail/rootfs"
	"github.com/jailrt/jail/seccomp"
)

// probeTimeout bounds the user namespace probe; /bin/true exits in about a
// millisecond, so hitting it means something is badly wrong.
const probeTimeout = 2 * time.Second

// probeBinaries are tried in order for the user namespace probe. The test or
// jail binary itself (/proc/self/exe) is not used: re-executing it would run
// jail's child stage and package init code.
var probeBinaries = []string{"/bin/true", "/usr/bin/true"}

// Run probes the host for the calling user and returns one Feature per check,
// in a stable order: kernel, user namespaces, the other namespaces, time
// namespace, cgroups, session snapshots, overlay workspace, seccomp,
// landlock, nftables, mount API, root file system, caller.
//
// Run changes nothing on the host. It starts and reaps one short-lived
// /bin/true in a new user and mount namespace.
func Run() []Feature {
	support := cgroup.Probe()
	cwd, _ := os.Getwd()
	userns := usernsFeature(probeUserNS())
	env := probeEnvironment()
	spawn := probeSpawn()
	pasta, pastaErr := exec.LookPath("pasta")
	return []Feature{
		checkKernel(),
		userns,
		namespacesFeature(nsPresent),
		timeNSFeature(nsPresent("time")),
		cgroupFeature(support),
		snapshotFeature(support),
		overlayFeature(release(), unix.Geteuid()),
		seccompFeature(probeSeccomp()),
		checkLandlock(),
		checkNftables(),
		checkMountAPI(),
		spawnFeature(spawn, env.Container),
		intoCgroupFeature(support.Mode == cgroup.ModeUnified, spawn),
		egressFeature(unix.Geteuid() == 0, pasta, pastaErr),
		environmentFeature(env, userns.Verdict == OK),
		rootFSFeature(rootfs.RootIsInitramfs()),
		callerFeature(unix.Getuid(), unix.Geteuid(), cwd, cwdUnreachable(cwd)),
	}
}

// probeSpawn calls clone3 with no arguments (EINVAL where it exists) and
// pidfd_open on this process.
func probeSpawn() spawnFacts {
	var s spawnFacts
	if _, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0); e != unix.EINVAL {
		s.Clone3 = os.NewSyscallError("clone3", e)
	}
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		s.Pidfd = err
	} else {
		unix.Close(fd)
	}
	return s
}

// probeEnvironment looks for the marks container runtimes leave.
func probeEnvironment() environmentFacts {
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	cg, _ := os.ReadFile("/proc/self/cgroup")
	e := environmentFacts{
		Container: containerFromMarks(exists("/.dockerenv"), exists("/run/.containerenv"), readSysctl("/run/systemd/container"), string(cg),
			os.Getenv("KUBERNETES_SERVICE_HOST") != ""),
	}
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	e.Filtered = err == nil && mode == 2
	return e
}

// cwdUnreachable says why a root caller's jail (host uid 65534) cannot
// reach cwd; "" when it can, or for another caller.
func cwdUnreachable(cwd string) string {
	if unix.Geteuid() != 0 || cwd == "" {
		return ""
	}
	return hostfs.Unreachable(cwd, overflowUID, overflowUID, false)
}

// checkKernel judges the running kernel's release. Equivalent to `uname -r`.
func checkKernel() Feature {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Feature{Name: nameKernel, Verdict: Warn, Detail: fmt.Sprintf("uname: %v", err),
			Fix: "make sure the kernel is 5.12 or later (mount_setattr)"}
	}
	return kernelFeature(unix.ByteSliceToString(u.Release[:]))
}

// release is the kernel's release, as `uname -r`; "" if uname fails.
func release() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// probeUserNS gathers the user namespace facts. It starts the probe binary
// the way jail starts its child: new user and mount namespaces, the caller's
// euid and egid mapped to 0, setgroups denied. A mount namespace is included
// because Ubuntu's AppArmor restriction allows the bare CLONE_NEWUSER and
// only denies the capabilities used inside it.
func probeUserNS() usernsFacts {
	u := usernsFacts{
		Root:              unix.Geteuid() == 0,
		MaxUserNamespaces: readSysctl(maxUserNamespacesPath),
		UnprivilegedClone: readSysctl(unprivilegedUsernsClonePath),
		AppArmorRestrict:  readSysctl(apparmorRestrictPath),
	}
	bin, err := probeBinary()
	u.ProbeBinary = bin
	if err != nil {
		u.ProbeErr, u.ProbeBinaryErr = err, err
		return u
	}
	u.ProbeErr = runProbe(bin, &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: unix.Geteuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: unix.Getegid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  unix.SIGKILL,
	})
	if u.ProbeErr != nil {
		// fork/exec errors look the same whether clone or execve failed;
		// run the binary plainly to tell them apart.
		u.ProbeBinaryErr = runProbe(bin, &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL})
	}
	return u
}

// probeBinary returns the first executable probe binary, falling back to
// "true" on PATH.
func probeBinary() (string, error) {
	for _, p := range probeBinaries {
		if err := unix.Access(p, unix.X_OK); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("true")
	if err != nil {
		return probeBinaries[0], fmt.Errorf("find probe binary: %w", err)
	}
	return p, nil
}

// runProbe runs bin with attr and waits for it. A non-zero exit still means
// the child was created, so only start errors are returned.
func runProbe(bin string, attr *syscall.SysProcAttr) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = attr
	err := cmd.Run()
	if _, ok := errors.AsType[*exec.ExitError](err); ok {
		return nil
	}
	return err
}

// readSysctl returns the trimmed content of a /proc/sys file, or "" if it
// cannot be read (usually because this kernel does not have it).
func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// nsPresent reports whether /proc/self/ns/<ns> exists, i.e. whether the
// kernel supports that namespace type.
func nsPresent(ns string) bool {
	_, err := os.Lstat(filepath.Join("/proc/self/ns", ns))
	return err == nil
}

// probeSeccomp gathers the seccomp facts from /proc/self/status,
// prctl(PR_GET_SECCOMP) and /proc/sys/kernel/seccomp/actions_avail.
func probeSeccomp() seccompFacts {
	var s seccompFacts
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(status))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Seccomp:"); ok {
				s.StatusLine = strings.TrimSpace(v)
				break
			}
		}
	}
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		s.ModeErr = os.NewSyscallError("prctl", err)
	}
	s.Mode = mode
	actions, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	s.ActionsAvail, s.ActionsErr = strings.TrimSpace(string(actions)), err
	s.NoWaitKillable = !seccomp.ProbeWaitKillable()
	return s
}

// checkLandlock asks the kernel for its landlock ABI version.
// Equivalent to landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
// requires Linux 5.13.
func checkLandlock() Feature {
	return landlockFeature(landlock.Probe())
}

// checkNftables opens and closes a NETLINK_NETFILTER socket.
func checkNftables() Feature {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nftablesFeature(os.NewSyscallError("socket", err))
	}
	_ = unix.Close(fd)
	return nftablesFeature(nil)
}

// checkMountAPI calls mount_setattr(2) with an empty attribute set, which the
// kernel treats as a no-op (and the empty path without AT_EMPTY_PATH resolves
// to nothing), so only ENOSYS is telling.
func checkMountAPI() Feature {
	return mountAPIFeature(unix.MountSetattr(-1, "", 0, &unix.MountAttr{}))
}
