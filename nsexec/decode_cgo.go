//go:build linux

package nsexec

/*
#include <stdlib.h>
#include "nsexec.h"

// decode_both runs the C decoder's two passes, as the child does, on a copy
// of the input. It exists for the Go tests and fuzzers.
static int decode_both(const uint8_t *buf, size_t len, struct plan *p) {
	if (jail_plan_decode(buf, len, p) < 0) return -1;
	p->mounts = calloc(p->nmounts + 1, sizeof *p->mounts);
	p->argv = calloc(p->nargs + 1, sizeof *p->argv);
	p->envp = calloc(p->nenv + 1, sizeof *p->envp);
	p->path = calloc(p->npath + 1, sizeof *p->path);
	p->rlimits = calloc(p->nrlimits + 1, sizeof *p->rlimits);
	p->landlock_rules = calloc(p->nlandlock + 1, sizeof *p->landlock_rules);
	return jail_plan_decode(buf, len, p);
}
static void plan_free(struct plan *p) {
	free(p->mounts); free((void *)p->argv); free((void *)p->envp); free((void *)p->path); free(p->rlimits);
	free(p->landlock_rules);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"
)

// cConstants are nsexec.h's values, for TestConstantsMatchC.
var cConstants = map[string]int64{
	"INIT_ARG0 length":           int64(len(C.INIT_ARG0)),
	"PLAN_FD":                    C.PLAN_FD,
	"SYNC_FD":                    C.SYNC_FD,
	"PLAN_MAGIC":                 C.PLAN_MAGIC,
	"PLAN_MAX_BYTES":             C.PLAN_MAX_BYTES,
	"PLAN_MAX_ITEMS":             C.PLAN_MAX_ITEMS,
	"sizeof sync_msg":            C.sizeof_struct_sync_msg,
	"PLAN_MOUNTNS":               C.PLAN_MOUNTNS,
	"PLAN_ROOT_RO":               C.PLAN_ROOT_RO,
	"PLAN_LOOPBACK":              C.PLAN_LOOPBACK,
	"PLAN_TIMENS":                C.PLAN_TIMENS,
	"PLAN_PIDNS":                 C.PLAN_PIDNS,
	"PLAN_NETFILTER":             C.PLAN_NETFILTER,
	"SIG_KILL_JOINED":            C.SIG_KILL_JOINED,
	"CTL_DEADLINES":              C.CTL_DEADLINES,
	"CTL_DEADLINES_LEN":          C.CTL_DEADLINES_LEN,
	"CTL_RESET_LAYERS":           C.CTL_RESET_LAYERS,
	"CTL_PROBE":                  C.CTL_PROBE,
	"MAX_LAYER_TREES":            C.MAX_LAYER_TREES,
	"PLAN_SETGROUPS":             C.PLAN_SETGROUPS,
	"OP_BIND":                    C.OP_BIND,
	"OP_SETATTR":                 C.OP_SETATTR,
	"OPF_OPTIONAL":               C.OPF_OPTIONAL,
	"OPF_CREATE":                 C.OPF_CREATE,
	"OPF_FILE":                   C.OPF_FILE,
	"OPF_SRC_IN_ROOT":            C.OPF_SRC_IN_ROOT,
	"OPF_RECURSIVE":              C.OPF_RECURSIVE,
	"OPF_NEW":                    C.OPF_NEW,
	"TAG_CWD":                    C.TAG_CWD,
	"MSG_EXITED":                 C.MSG_EXITED,
	"PLAN_SECCOMP_NOTIFY":        C.PLAN_SECCOMP_NOTIFY,
	"TAG_SECCOMP_RULES":          C.TAG_SECCOMP_RULES,
	"MSG_SECCOMP":                C.MSG_SECCOMP,
	"SECCOMP_EV_KILLED":          C.SECCOMP_EV_KILLED,
	"SECCOMP_EV_WORKLOAD":        C.SECCOMP_EV_WORKLOAD,
	"MAX_SECCOMP_EVENTS":         C.MAX_SECCOMP_EVENTS,
	"BPF_MAX_INSNS":              C.BPF_MAX_INSNS,
	"CGROUP_FD":                  C.CGROUP_FD,
	"MAX_CGROUP_FDS":             C.MAX_CGROUP_FDS,
	"TAG_CGROUP_FDS":             C.TAG_CGROUP_FDS,
	"TAG_SOURCE_FDS":             C.TAG_SOURCE_FDS,
	"PLAN_SECCOMP_WAIT_KILLABLE": C.PLAN_SECCOMP_WAIT_KILLABLE,
	"PLAN_CGROUPNS":              C.PLAN_CGROUPNS,
	"PLAN_TTY":                   C.PLAN_TTY,
	"PLAN_INITRAMFS":             C.PLAN_INITRAMFS,
	"PLAN_SESSION":               C.PLAN_SESSION,
	"PLAN_JOIN":                  C.PLAN_JOIN,
	"PROCESS_MAGIC":              C.PROCESS_MAGIC,
	"EXEC_ARG0 length":           int64(len(C.EXEC_ARG0)),
	"FILES_ARG0 length":          int64(len(C.FILES_ARG0)),
	"TAG_JOIN":                   C.TAG_JOIN,
	"PLAN_NO_GO":                 C.PLAN_NO_GO,
	"PLAN_PREFORK":               C.PLAN_PREFORK,
	"PLAN_JOIN_KILL":             C.PLAN_JOIN_KILL,
	"PLAN_CGROUP_LATE":           C.PLAN_CGROUP_LATE,
	"MSG_CGROUP":                 C.MSG_CGROUP,
	"TAG_SYSCTL":                 C.TAG_SYSCTL,
	"MAX_SYSCTLS":                C.MAX_SYSCTLS,
	"JOINABLE_NS":                C.JOINABLE_NS,
	"MSG_PTY":                    C.MSG_PTY,
	"MAX_SOURCE_FDS":             C.MAX_SOURCE_FDS,
	"SOURCE_FD(2, 3)":            C.CGROUP_FD + 2 + 3 - 1,
}

func gostr(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

func gostrs(p **C.char, n C.size_t) []string {
	var out []string
	for _, s := range unsafe.Slice(p, n) {
		out = append(out, C.GoString(s))
	}
	return out
}

func gomount(m *C.struct_mount_op) Mount {
	out := Mount{
		Kind: OpKind(m.kind), Flags: OpFlags(m.flags), Mode: uint32(m.mode), Attr: uint64(m.attr), Src: uint32(m.src),
		Source: gostr(m.source), Target: gostr(m.target), FSType: gostr(m.fstype),
	}
	if m.data_len > 0 {
		out.Data = C.GoBytes(unsafe.Pointer(m.data), C.int(m.data_len))
	}
	return out
}

// cDecode decodes b with the child's C decoder.
func cDecode(b []byte) (*Plan, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != planMagic {
		return nil, errors.New("not a jail plan")
	}
	cb := C.CBytes(b)
	defer C.free(cb)
	var p C.struct_plan
	if C.decode_both((*C.uint8_t)(cb), C.size_t(len(b)), &p) < 0 {
		C.plan_free(&p)
		return nil, errors.New("C decoder rejected the plan")
	}
	defer C.plan_free(&p)
	out := &Plan{
		Flags: Flags(p.flags), Attach: gostr(p.attach), AttachSrc: uint32(p.attach_src), Hostname: gostr(p.hostname),
		Root: gomount(&p.root), JoinNS: uint32(p.join_ns),
		TTL: time.Duration(p.ttl_ms) * time.Millisecond, IdleTimeout: time.Duration(p.idle_ms) * time.Millisecond,
	}
	for _, m := range unsafe.Slice(p.mounts, p.nmounts) {
		out.Mounts = append(out.Mounts, gomount(&m))
	}
	out.CgroupFDs = uint32(p.cgroup_fds)
	out.Sources = uint32(p.source_fds)
	if p.seccomp != nil {
		out.Seccomp = C.GoBytes(unsafe.Pointer(p.seccomp), C.int(p.seccomp_len))
	}
	if p.seccomp_rules != nil {
		out.SeccompRules = C.GoBytes(unsafe.Pointer(p.seccomp_rules), C.int(p.seccomp_rules_len))
	}
	out.LandlockFS, out.LandlockScoped = uint64(p.landlock_fs), uint64(p.landlock_scoped)
	for _, r := range unsafe.Slice(p.landlock_rules, p.nlandlock) {
		out.LandlockRules = append(out.LandlockRules, LandlockRule{Path: gostr(r.path), Access: uint64(r.access)})
	}
	for i := range int(p.nsysctls) {
		out.Sysctls = append(out.Sysctls, Sysctl{Key: gostr(p.sysctl_key[i]), Value: gostr(p.sysctl_val[i])})
	}
	return out, nil
}

// cDecodeProcess decodes a process plan with the child's C decoder.
func cDecodeProcess(b []byte) (*Process, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != processMagic {
		return nil, errors.New("not a process plan")
	}
	cb := C.CBytes(b)
	defer C.free(cb)
	var p C.struct_plan
	if C.decode_both((*C.uint8_t)(cb), C.size_t(len(b)), &p) < 0 {
		C.plan_free(&p)
		return nil, errors.New("C decoder rejected the process")
	}
	defer C.plan_free(&p)
	out := &Process{
		Flags: Flags(p.pflags), UID: uint32(p.uid), GID: uint32(p.gid), Cwd: gostr(p.cwd),
		Argv: gostrs(p.argv, p.nargs), Env: gostrs(p.envp, p.nenv), Path: gostrs(p.path, p.npath),
	}
	for _, r := range unsafe.Slice(p.rlimits, p.nrlimits) {
		out.Rlimits = append(out.Rlimits, Rlimit{Resource: int(r.resource), Cur: uint64(r.lim.rlim_cur), Max: uint64(r.lim.rlim_max)})
	}
	return out, nil
}

// cBPFRun runs a seccomp program with PID 1's interpreter on a struct
// seccomp_data (64 bytes, native endian).
func cBPFRun(prog, data []byte) uint32 {
	if len(data) != 64 {
		panic("seccomp_data is 64 bytes")
	}
	cp, cd := C.CBytes(append(prog, 0)), C.CBytes(data)
	defer C.free(cp)
	defer C.free(cd)
	return uint32(C.jail_bpf_run((*C.uint8_t)(cp), C.uint32_t(len(prog)), cd))
}
