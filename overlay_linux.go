package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/rootfs"
)

// The lower layers of an overlay workspace (rootfs.Overlay) are id-mapped
// mounts of the host's directories, made here because only the host's
// root may id-map a mount of a host file system (can_idmap_mount wants
// CAP_SYS_ADMIN in the superblock's user namespace, the initial one), and
// moved into the jail by its child stage (nsexec.OpTree).
//
// The id map shows the host's root-owned files as the workload's: host
// uid and gid 0 become the host ids the workload's ids map to (a host
// nobody, for a root caller's jail), which the jail's user namespace maps
// to the workload. The overlay's copy-up (done with the credentials of its
// mounter, the child stage, which runs as the workload's ids) can then
// chown a copied file to its owner, and the workload may change the files
// through the overlay: the upper layer is the jail's tmpfs, so nothing
// reaches the host. Files of other host ids map to no one: readable as
// their modes say, never copied up.

// treeIDMap returns a user namespace that maps 0 to the host ids of the
// workload, for mount_setattr's MOUNT_ATTR_IDMAP. As runc does
// (libcontainer/userns), a process is started in a new user namespace
// with those maps, stopped by PTRACE_TRACEME at its exec before it runs
// anything; its namespace is opened, and it is killed.
func (l *launch) treeIDMap() (*os.File, error) {
	uid, gid, ok := l.hostIDs()
	if !ok {
		return nil, errors.New("the overlay's id map: the workload's ids have no host ids")
	}
	return idMapUserns(uid, gid)
}

// idMapUserns returns a new user namespace that maps 0 to host uid and
// gid, made as treeIDMap says.
func idMapUserns(uid, gid uint32) (*os.File, error) {
	// The tracer, and the parent-death signal's parent, is this OS
	// thread: were it to exit, the tracee would run on, as root in the
	// new namespace, until killed.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"jail:idmap"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(gid), Size: 1}},
		Ptrace:      true,
		Pdeathsig:   unix.SIGKILL,
	}})
	if err != nil {
		return nil, fmt.Errorf("the overlay's id map: %w", err)
	}
	defer func() {
		// Reaped here, by pid: a tracee's stop is reported to wait like
		// an exit, so wait until it is the exit.
		_ = unix.Kill(pid, unix.SIGKILL)
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR && (err != nil || ws.Exited() || ws.Signaled()) {
				return
			}
		}
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, fmt.Errorf("the overlay's id map: %w", err)
	}
	return f, nil
}

// hostIDs returns the host uid and gid the workload's ids map to.
func (l *launch) hostIDs() (uid, gid uint32, ok bool) {
	var okU, okG bool
	for _, m := range l.uidMap {
		if l.proc.UID >= m.InsideID && l.proc.UID-m.InsideID < m.Count {
			uid, okU = m.OutsideID+l.proc.UID-m.InsideID, true
		}
	}
	for _, m := range l.gidMap {
		if l.proc.GID >= m.InsideID && l.proc.GID-m.InsideID < m.Count {
			gid, okG = m.OutsideID+l.proc.GID-m.InsideID, true
		}
	}
	return uid, gid, okU && okG
}

// idmappedTree returns a detached recursive clone of the directory src
// names (open_tree, as `mount --rbind`), id-mapped through the user
// namespace idmap, private, with the mount attributes attr
// (nsexec.Attr* are MOUNT_ATTR_* values) set on the whole tree before
// anyone can see it. A submount whose file system cannot be id-mapped
// fails it: nothing is left half-mapped.
func idmappedTree(src, idmap *os.File, attr uint64) (*os.File, error) {
	fd, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return nil, &os.PathError{Op: "open_tree", Path: src.Name(), Err: err}
	}
	a := unix.MountAttr{Attr_set: attr | unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(idmap.Fd()), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &a); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "mount_setattr (id map)", Path: src.Name(), Err: err}
	}
	return os.NewFile(uintptr(fd), src.Name()), nil
}

// privateEntries returns the paths below the host directories dirs that
// the overlay's id map would let the workload read, list or run and that
// the host keeps from it (exposedByIDMap), each to be masked
// (rootfs.Overlay.Hidden); below a hidden directory nothing more is
// looked at. Symlinks are not followed. A mount below dirs fails it: the
// overlay shows what a mount covers, not the mount, and what it covers
// was never walked (fail closed: the session is refused).
//
// It walks every entry: an overlay session takes about 0.5 s to create
// for Debian's /usr of 150,000 entries in the page cache (a tmpfs one
// 11 ms), more when it is cold.
func privateEntries(dirs []string) ([]rootfs.HiddenPath, error) {
	var out []rootfs.HiddenPath
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err // a directory even root cannot read: refuse, never guess
			}
			if p == dir || d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			var stx unix.Statx_t
			if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC,
				unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_UID|unix.STATX_GID, &stx); err != nil {
				if err == unix.ENOENT {
					return nil
				}
				return &os.PathError{Op: "statx", Path: p, Err: err}
			}
			if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
				return fmt.Errorf("%s is a mount of its own: an overlay of %s would show what it covers, which the host hides, and not its files: use --workspace tmpfs or dir", p, dir)
			}
			mode, isDir := uint32(stx.Mode), stx.Mode&unix.S_IFMT == unix.S_IFDIR
			exposed := exposedByIDMap(mode, stx.Uid, stx.Gid, isDir)
			if !exposed && aclMayGive(mode, stx.Uid, stx.Gid) {
				if exposed, err = aclExposed(p, mode); err != nil {
					return err
				}
			}
			if !exposed {
				return nil
			}
			out = append(out, rootfs.HiddenPath{Path: p, Dir: isDir})
			if isDir {
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// exposedByIDMap says whether an entry of mode, uid and gid (a directory
// with dir) opens to the workload, under an id map that makes 0 its ids,
// where it is closed to others. The workload owns what uid 0 owns, and
// an owner may chmod: such an entry is exposed unless others may read it
// (a directory: read and search it) already, whatever its owner's bits
// (a 0600 key, a mode-000 file, a 0711 directory). Of what gid 0 owns
// (and another user), the workload has the group's bits: exposed where
// they read or search beyond others'. Write bits do not matter: writes
// go to the upper layer.
func exposedByIDMap(mode, uid, gid uint32, dir bool) bool {
	const r, rx = 4, 5
	other := mode & rx
	if uid == 0 {
		if dir {
			return other != rx
		}
		return other&r == 0
	}
	return gid == 0 && (mode>>3)&rx&^other != 0
}

// aclMayGive says whether an entry of another user and group could give
// the workload more than others through a POSIX ACL: only where the
// group bits (the ACL's mask, when it has one) read or search beyond
// others' can a named entry do so.
func aclMayGive(mode, uid, gid uint32) bool {
	const rx = 5
	return uid != 0 && gid != 0 && (mode>>3)&rx&^(mode&rx) != 0
}

// aclExposed says whether the access ACL of host path p names uid or
// gid 0 (which the id map makes the workload's) with read or search
// bits beyond others' (mode's).
func aclExposed(p string, mode uint32) (bool, error) {
	buf := make([]byte, 1024)
	n, err := unix.Lgetxattr(p, "system.posix_acl_access", buf)
	switch {
	case err == unix.ENODATA || err == unix.EOPNOTSUPP:
		return false, nil
	case err == unix.ERANGE:
		return true, nil // an ACL this long: masked, not parsed
	case err != nil:
		return false, &os.PathError{Op: "getxattr", Path: p, Err: err}
	}
	return aclGives(buf[:n], mode&5), nil
}

// aclGives parses an access ACL (the kernel's xattr form: a version,
// then entries of tag, perm, id) and says whether a named user or group
// entry for id 0 has read or search bits beyond other.
func aclGives(acl []byte, other uint32) bool {
	const (
		aclUser  = 0x02
		aclGroup = 0x08
		rx       = 5
	)
	if len(acl) < 4 {
		return true // not an ACL the kernel wrote: masked
	}
	for e := acl[4:]; len(e) >= 8; e = e[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(e), uint32(binary.LittleEndian.Uint16(e[2:])), binary.LittleEndian.Uint32(e[4:])
		if (tag == aclUser || tag == aclGroup) && id == 0 && perm&rx&^other != 0 {
			return true
		}
	}
	return false
}

// overlayKernel says why this kernel cannot have an overlay workspace
// (rootfs.OverlayKernel).
func overlayKernel() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	return rootfs.OverlayKernel(unix.ByteSliceToString(u.Release[:]))
}
