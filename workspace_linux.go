package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/internal/jailfs"
)

// DefaultWorkspaceDir returns where dir workspaces are made for this
// user: $JAIL_WORKSPACE_DIR, else /var/lib/jail/workspaces for root, else
// $XDG_DATA_HOME/jail/workspaces ($HOME/.local/share/jail/workspaces).
func DefaultWorkspaceDir() (string, error) {
	if d := os.Getenv("JAIL_WORKSPACE_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/jail/workspaces", nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "jail", "workspaces"), nil
	}
	if h := os.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "jail", "workspaces"), nil
	}
	return "", errors.New("no directory for workspaces: set XDG_DATA_HOME, HOME or JAIL_WORKSPACE_DIR (or --workspace-dir)")
}

// workspaceMarker is a file in a directory of workspaces: a session's
// state naming a workspace elsewhere is not acted on (a forged state must
// not make rm remove another directory).
const workspaceMarker = ".jail-workspaces"

// workspaceBase returns the directory of dir workspaces, made if missing:
// 0711, so that the jail's own uid (a host nobody, for root's jails) may
// reach its workspace in it and list nothing, owned by this user and
// writable by no one else, with its marker.
func (m *Sessions) workspaceBase() (string, error) {
	d, err := ownDir("workspace directory", m.WorkspaceDir, DefaultWorkspaceDir, 0o711)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o711); err != nil {
		return "", err
	}
	f, err := os.OpenFile(filepath.Join(d, workspaceMarker), os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	f.Close()
	return d, nil
}

// isWorkspace reports whether dir is a workspace jail made: its name is
// the session's id, in a directory that holds the marker and that only
// this user can write to.
func isWorkspace(dir, id string) bool {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Base(dir) != id {
		return false
	}
	var st unix.Stat_t
	base := filepath.Dir(dir)
	if unix.Lstat(base, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return false
	}
	return unix.Lstat(filepath.Join(base, workspaceMarker), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == os.Geteuid()
}

// struct fsxattr and the quota interface (linux/fs.h, linux/quota.h),
// which x/sys does not carry.
type fsxattr struct {
	Xflags     uint32
	Extsize    uint32
	Nextents   uint32
	Projid     uint32
	Cowextsize uint32
	Pad        [8]byte
}

type ifDqblk struct {
	Bhardlimit, Bsoftlimit, Curspace, Ihardlimit, Isoftlimit, Curinodes, Btime, Itime uint64
	Valid                                                                             uint32
	_                                                                                 uint32
}

const (
	fsIocFsgetxattr    = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFssetxattr    = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	fsXflagProjinherit = 0x200
	prjQuota           = 2
	qGetQuota          = 0x800007
	qSetQuota          = 0x800008
	qifBlimits         = 1
	qifSpace           = 4
	qXGetQStatV        = 'X'<<8 + 8 // Q_XGETQSTATV
	fsQStatVVersion1   = 1
	fsQuotaPdqEnfd     = 1 << 5 // FS_QUOTA_PDQ_ENFD: project limits enforced
)

// fsQuotaStatV is struct fs_quota_statv (linux/dqblk_xfs.h).
type fsQuotaStatV struct {
	Version    int8
	_          uint8
	Flags      uint16
	Incoredqs  uint32
	Files      [3]struct{ Ino, Nblks, Extents uint64 } // struct fs_qfilestatv: nextents and pad in Extents
	Timelimits [3]int32
	Warnlimits [3]uint16
	_          uint16
	_          uint32
	_          [7]uint64
}

func qcmd(cmd, typ int) uintptr { return uintptr(cmd<<8 | typ&0xff) }

// setQuota bounds the directory dir (open as fd) to bytes with a project
// quota: dir gets a project id of its own (its inode number: unique on its
// file system) that everything made below it inherits, and the project a
// hard block limit. Equivalent to `chattr +P -p ID DIR; setquota -P ID 0
// KiB 0 0 FS`. It needs CAP_SYS_ADMIN and a file system mounted with
// project quotas (ext4 -o prjquota, xfs -o pquota); Linux 5.14
// (quotactl_fd).
func setQuota(fd int, bytes int64) (uint32, error) {
	// A file system may count projects' usage and not enforce their
	// limits (ext4 with the quota feature, mounted without prjquota): a
	// limit set there would bound nothing.
	var qs fsQuotaStatV
	qs.Version = fsQStatVVersion1
	if err := quotactlStatV(fd, &qs); err != nil {
		return 0, fmt.Errorf("quotactl(Q_XGETQSTATV): %w", err)
	}
	if qs.Flags&fsQuotaPdqEnfd == 0 {
		return 0, errors.New("project quotas are not enforced on this file system (ext4: mount it with -o prjquota; xfs: -o pquota)")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Ino == 0 || st.Ino > 0xffffffff {
		return 0, fmt.Errorf("inode %d: no project id fits", st.Ino)
	}
	id := uint32(st.Ino)
	var x fsxattr
	if err := ioctlFsxattr(fd, fsIocFsgetxattr, &x); err != nil {
		return 0, fmt.Errorf("FS_IOC_FSGETXATTR: %w", err)
	}
	x.Projid, x.Xflags = id, x.Xflags|fsXflagProjinherit
	if err := ioctlFsxattr(fd, fsIocFssetxattr, &x); err != nil {
		return 0, fmt.Errorf("FS_IOC_FSSETXATTR (project %d): %w", id, err)
	}
	q := ifDqblk{Bhardlimit: uint64((bytes + 1023) / 1024), Bsoftlimit: uint64((bytes + 1023) / 1024), Valid: qifBlimits}
	if err := quotactl(fd, qSetQuota, id, &q); err != nil {
		return 0, fmt.Errorf("quotactl(Q_SETQUOTA, PRJQUOTA, %d): %w", id, err)
	}
	return id, nil
}

// quotaUsage returns the bytes project id uses on the file system of fd.
func quotaUsage(fd int, id uint32) (int64, error) {
	var q ifDqblk
	if err := quotactl(fd, qGetQuota, id, &q); err != nil {
		return 0, err
	}
	if q.Valid&qifSpace == 0 {
		return 0, errors.New("quotactl: no space figure")
	}
	return int64(q.Curspace), nil
}

// clearQuota drops project id's limits (its usage goes with its files).
func clearQuota(fd int, id uint32) error {
	q := ifDqblk{Valid: qifBlimits}
	return quotactl(fd, qSetQuota, id, &q)
}

// removeWorkspace removes a dir workspace and its quota, if the state
// names one jail made (isWorkspace), and the session's record in the
// snapshot whose layer tree it has as a lower layer. Its files are the jail's: a symlink
// is removed, never walked, and a directory the workload made read-only
// is made writable to be emptied.
func removeWorkspace(st *sessionState) error {
	if st.LowerMark != "" {
		// The snapshot whose tree it had as a lower layer may go now.
		if err := os.Remove(st.LowerMark); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if st.WorkspaceDir == "" {
		return nil
	}
	if !isWorkspace(st.WorkspaceDir, st.ID) {
		return fmt.Errorf("session %s: %s is not a workspace of jail's: left as it is", st.ID, st.WorkspaceDir)
	}
	dropQuota(st)
	return jailfs.RemoveTree(st.WorkspaceDir)
}

// dropQuota clears the limits of a dir workspace's project, if it has one
// (best effort: its usage goes with its files).
func dropQuota(st *sessionState) {
	if st.WorkspaceProject == 0 {
		return
	}
	if fd, err := unix.Open(filepath.Dir(st.WorkspaceDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		_ = clearQuota(fd, st.WorkspaceProject)
		unix.Close(fd)
	}
	st.WorkspaceProject = 0
}
