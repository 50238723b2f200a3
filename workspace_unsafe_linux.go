package jail

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func quotactl(fd, cmd int, id uint32, q *ifDqblk) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(fd), qcmd(cmd, prjQuota), uintptr(id), uintptr(unsafe.Pointer(q)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func ioctlFsxattr(fd int, req uint, x *fsxattr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(x)))
	if e != 0 {
		return e
	}
	return nil
}

func quotactlStatV(fd int, q *fsQuotaStatV) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(fd), qcmd(qXGetQStatV, prjQuota), 0, uintptr(unsafe.Pointer(q)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
