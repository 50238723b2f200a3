package nsexec

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConstantsMatchC(t *testing.T) {
	want := map[string]int64{
		"INIT_ARG0 length":           int64(len(InitArg0)),
		"PLAN_FD":                    PlanFD,
		"SYNC_FD":                    SyncFD,
		"PLAN_MAGIC":                 planMagic,
		"PLAN_MAX_BYTES":             maxPlanBytes,
		"PLAN_MAX_ITEMS":             maxPlanItems,
		"sizeof sync_msg":            MsgSize,
		"PLAN_MOUNTNS":               int64(FlagMountNS),
		"PLAN_ROOT_RO":               int64(FlagRootRO),
		"PLAN_LOOPBACK":              int64(FlagLoopback),
		"PLAN_TIMENS":                int64(FlagTimeNS),
		"PLAN_PIDNS":                 int64(FlagPIDNS),
		"PLAN_NETFILTER":             int64(FlagNetfilter),
		"PLAN_NO_GO":                 int64(FlagNoGo),
		"PLAN_PREFORK":               int64(FlagPrefork),
		"PLAN_JOIN_KILL":             int64(FlagJoinKill),
		"PLAN_CGROUP_LATE":           int64(FlagCgroupLate),
		"MSG_CGROUP":                 int64(MsgCgroup),
		"SIG_KILL_JOINED":            int64(KillJoinedSignal),
		"CTL_DEADLINES":              ctlDeadlines,
		"CTL_DEADLINES_LEN":          ctlDeadlinesLen,
		"CTL_RESET_LAYERS":           ctlResetLayers,
		"CTL_PROBE":                  ctlProbe,
		"MAX_LAYER_TREES":            MaxLayerTrees,
		"PLAN_SETGROUPS":             int64(FlagSetgroups),
		"OP_BIND":                    int64(OpBind),
		"OP_SETATTR":                 int64(OpSetattr),
		"OPF_OPTIONAL":               int64(OpOptional),
		"OPF_CREATE":                 int64(OpCreate),
		"OPF_FILE":                   int64(OpFileTarget),
		"OPF_SRC_IN_ROOT":            int64(OpSrcInRoot),
		"OPF_RECURSIVE":              int64(OpRecursive),
		"OPF_NEW":                    int64(OpNew),
		"TAG_CWD":                    tagCwd,
		"MSG_EXITED":                 int64(MsgExited),
		"PLAN_SECCOMP_NOTIFY":        int64(FlagSeccompNotify),
		"TAG_SECCOMP_RULES":          tagSeccompRules,
		"MSG_SECCOMP":                int64(MsgSeccomp),
		"SECCOMP_EV_KILLED":          SeccompKilled,
		"SECCOMP_EV_WORKLOAD":        SeccompWorkload,
		"MAX_SECCOMP_EVENTS":         MaxSeccompEvents,
		"BPF_MAX_INSNS":              maxBPFInsns,
		"CGROUP_FD":                  CgroupFD,
		"MAX_CGROUP_FDS":             maxCgroupFDs,
		"TAG_CGROUP_FDS":             tagCgroupFDs,
		"TAG_SOURCE_FDS":             tagSourceFDs,
		"PLAN_SECCOMP_WAIT_KILLABLE": int64(FlagSeccompWaitKillable),
		"PLAN_CGROUPNS":              int64(FlagCgroupNS),
		"PLAN_TTY":                   int64(FlagTTY),
		"PLAN_INITRAMFS":             int64(FlagInitramfs),
		"PLAN_SESSION":               int64(FlagSession),
		"PLAN_JOIN":                  int64(FlagJoin),
		"PROCESS_MAGIC":              processMagic,
		"EXEC_ARG0 length":           int64(len(ExecArg0)),
		"FILES_ARG0 length":          int64(len(FilesArg0)),
		"TAG_JOIN":                   tagJoin,
		"TAG_SYSCTL":                 tagSysctl,
		"MAX_SYSCTLS":                maxSysctls,
		"JOINABLE_NS":                joinableNS,
		"MSG_PTY":                    int64(MsgPTY),
		"MAX_SOURCE_FDS":             maxSourceFDs,
		"SOURCE_FD(2, 3)":            int64(SourceFD(2, 3)),
	}
	assert.Equal(t, want, cConstants)
}

func samplePlan() *Plan {
	return &Plan{
		Flags:     FlagMountNS | FlagRootRO | FlagPIDNS,
		Attach:    "/tmp",
		AttachSrc: 2,
		Root:      Mount{Kind: OpFS, FSType: "tmpfs", Target: "/", Attr: AttrNosuid | AttrNodev, Data: FSOptions("mode=0755", "size=1m")},
		Mounts: []Mount{
			{Kind: OpBind, Flags: OpCreate, Source: "/usr", Target: "/usr", Attr: AttrRdonly | AttrNosuid | AttrNodev, Src: 1},
			{Kind: OpWriteFile, Target: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/:/bin/sh\n")},
			{Kind: OpSymlink, Target: "/bin", Data: []byte("usr/bin")},
		},
		Hostname: "jail",
		// RET ALLOW; and RET ERRNO|EPERM as the rules.
		Seccomp:        []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f},
		SeccompRules:   []byte{6, 0, 0, 0, 1, 0, 5, 0},
		CgroupFDs:      2,
		Sources:        2,
		LandlockFS:     1<<16 - 1,
		LandlockScoped: 3,
		LandlockRules:  []LandlockRule{{Path: "/usr", Access: 0xd}, {Path: "/tmp", Access: 1<<16 - 1}},
	}
}

func sampleProcess() *Process {
	return &Process{
		Flags:   FlagSetgroups | FlagTTY,
		UID:     1000,
		GID:     1001,
		Rlimits: []Rlimit{{Resource: 7, Cur: 1024, Max: 1024}, {Resource: 4, Cur: 0, Max: 0}},
		Argv:    []string{"sh", "-c", "id"},
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=/tmp"},
		Path:    []string{"/usr/bin", "/bin"},
		Cwd:     "/tmp",
	}
}

// sampleJoin is the plan of a helper that joins a session.
func sampleJoin() *Plan {
	p := samplePlan()
	p.Flags = FlagJoin | FlagPIDNS | FlagTimeNS | FlagCgroupNS | FlagSeccompNotify | FlagJoinKill
	p.JoinNS = CloneNewUser | CloneNewNS | CloneNewPID
	p.Attach, p.AttachSrc, p.Root, p.Mounts, p.Hostname, p.Sources = "", 0, Mount{}, nil, "", 0
	return p
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	session := samplePlan()
	session.Flags |= FlagSession
	session.TTL, session.IdleTimeout = 90*time.Second, 1500*time.Millisecond
	late := samplePlan()
	late.Flags |= FlagCgroupLate
	late.CgroupFDs = 0
	for name, p := range map[string]*Plan{"jail": samplePlan(), "session": session, "join": sampleJoin(), "late cgroup": late} {
		t.Run(name, func(t *testing.T) {
			b, err := p.Encode()
			require.NoError(t, err)
			got, err := cDecode(b)
			require.NoError(t, err)
			assert.Equal(t, p, got)
			_, err = cDecodeProcess(b)
			assert.Error(t, err, "a jail plan taken for a process")
		})
	}
	t.Run("process", func(t *testing.T) {
		p := sampleProcess()
		b, err := p.Encode()
		require.NoError(t, err)
		got, err := cDecodeProcess(b)
		require.NoError(t, err)
		assert.Equal(t, p, got)
		_, err = cDecode(b)
		assert.Error(t, err, "a process taken for a jail plan")
	})
}

func TestEncodeRejectsProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Process)
	}{
		{"no argv", func(p *Process) { p.Argv = nil }},
		{"NUL in an argument", func(p *Process) { p.Argv[1] = "a\x00b" }},
		{"a jail flag", func(p *Process) { p.Flags |= FlagMountNS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sampleProcess()
			tc.edit(p)
			_, err := p.Encode()
			assert.Error(t, err)
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Plan)
	}{
		{"a process flag", func(p *Plan) { p.Flags |= FlagTTY }},
		{"deadlines without a session", func(p *Plan) { p.TTL = time.Second }},
		{"a deadline of part of a millisecond", func(p *Plan) { p.Flags |= FlagSession; p.TTL = time.Second + time.Microsecond }},
		{"namespaces to join without a join plan", func(p *Plan) { p.JoinNS = CloneNewPID }},
		{"a join plan with mounts", func(p *Plan) { p.Flags |= FlagJoin; p.JoinNS = CloneNewPID }},
		{"cgroup.kill without a join plan", func(p *Plan) { p.Flags |= FlagJoinKill }},
		{"late cgroup files and inherited ones", func(p *Plan) { p.Flags |= FlagCgroupLate }},
		{"late cgroup files in a session", func(p *Plan) { p.Flags |= FlagCgroupLate | FlagSession; p.CgroupFDs = 0 }},
		{"late cgroup files and a cgroup mount", func(p *Plan) {
			p.Flags |= FlagCgroupLate
			p.CgroupFDs = 0
			p.Mounts = append(p.Mounts, Mount{Kind: OpFS, FSType: "cgroup2", Target: "/sys/fs/cgroup"})
		}},
		{"late cgroup files and a cgroup root", func(p *Plan) {
			p.Flags |= FlagCgroupLate
			p.CgroupFDs = 0
			p.Root = Mount{Kind: OpFS, FSType: "cgroup", Target: "/"}
		}},
		{"no attach point", func(p *Plan) { p.Attach = "" }},
		{"no attach source", func(p *Plan) { p.AttachSrc = 0 }},
		{"a host bind without a source", func(p *Plan) { p.Mounts[0].Src = 0 }},
		{"a source beyond the sources", func(p *Plan) { p.Mounts[0].Src = 3 }},
		{"a file op with a source", func(p *Plan) { p.Mounts[1].Src = 1 }},
		{"too many sources", func(p *Plan) { p.Sources = maxSourceFDs + 1 }},
		{"landlock rules without a ruleset", func(p *Plan) { p.LandlockFS, p.LandlockScoped = 0, 0 }},
		{"a landlock right not handled", func(p *Plan) { p.LandlockRules[0].Access = 1 << 20 }},
		{"NUL in a landlock path", func(p *Plan) { p.LandlockRules[0].Path = "/a\x00b" }},
		{"relative target", func(p *Plan) { p.Mounts[0].Target = "usr" }},
		{"unknown op kind", func(p *Plan) { p.Mounts[0].Kind = 99 }},
		{"unknown op flag", func(p *Plan) { p.Mounts[0].Flags = 0x80 }},
		{"a sysctl outside net/", func(p *Plan) { p.Sysctls = []Sysctl{{"kernel/hostname", "x"}} }},
		{"a sysctl key with ..", func(p *Plan) { p.Sysctls = []Sysctl{{"net/../kernel/hostname", "x"}} }},
		{"a sysctl key with //", func(p *Plan) { p.Sysctls = []Sysctl{{"net//ipv4", "x"}} }},
		{"an absolute sysctl key", func(p *Plan) { p.Sysctls = []Sysctl{{"/net/ipv4/ip_forward", "1"}} }},
		{"a sysctl directory", func(p *Plan) { p.Sysctls = []Sysctl{{"net/ipv4/", "1"}} }},
		{"an empty sysctl value", func(p *Plan) { p.Sysctls = []Sysctl{{"net/ipv4/tcp_fin_timeout", ""}} }},
		{"a sysctl value of two lines", func(p *Plan) { p.Sysctls = []Sysctl{{"net/ipv4/tcp_fin_timeout", "1\n2"}} }},
		{"too many sysctls", func(p *Plan) {
			for range maxSysctls + 1 {
				p.Sysctls = append(p.Sysctls, Sysctl{"net/ipv4/tcp_fin_timeout", "1"})
			}
		}},
		{"a join plan with sysctls", func(p *Plan) {
			*p = *sampleJoin()
			p.Sysctls = []Sysctl{{"net/ipv4/tcp_fin_timeout", "1"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := samplePlan()
			tc.edit(p)
			_, err := p.Encode()
			assert.Error(t, err)
		})
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	good, err := samplePlan().Encode()
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"bad magic", func(b []byte) []byte { b[0] ^= 0xff; return b }},
		{"short", func(b []byte) []byte { return b[:len(b)-1] }},
		{"length too big", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], uint32(len(b))); return b }},
		{"unknown tag", func(b []byte) []byte { return append(b, 99, 0, 0, 0, 0, 0, 0, 0) }},
		{"a mount namespace without a root", func(b []byte) []byte { return dropRecord(b, tagRoot) }},
		{"a process record", func(b []byte) []byte {
			b = append(b, tagArg, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0, 'x', 0)
			binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
			return b
		}},
		{"cgroup.kill without a join plan", func(b []byte) []byte {
			return withFlag(b, FlagJoinKill)
		}},
		{"late cgroup files and a cgroup mount", func([]byte) []byte {
			p := samplePlan()
			p.CgroupFDs = 0
			p.Mounts = append(p.Mounts, Mount{Kind: OpFS, FSType: "cpuset", Target: "/sys/fs/cgroup/cpuset"})
			b, err := p.Encode()
			require.NoError(t, err)
			return withFlag(b, FlagCgroupLate)
		}},
		{"late cgroup files and inherited ones", func(b []byte) []byte {
			return withFlag(b, FlagCgroupLate)
		}},
		{"record past the end", func(b []byte) []byte {
			b = append(b, tagHostname, 0, 0, 0, 0xff, 0xff, 0, 0)
			binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.edit(bytes.Clone(good))
			_, err := cDecode(b)
			assert.Error(t, err)
		})
	}
}

// withFlag sets flag in an encoded plan's flags record, past the
// encoder's checks.
func withFlag(b []byte, flag Flags) []byte {
	for off := 8; off+12 <= len(b); off += 8 + int(binary.LittleEndian.Uint32(b[off+4:])) {
		if binary.LittleEndian.Uint32(b[off:]) == tagFlags {
			f := binary.LittleEndian.Uint32(b[off+8:])
			binary.LittleEndian.PutUint32(b[off+8:], f|uint32(flag))
		}
	}
	return b
}

// dropRecord removes the records with tag from an encoded plan.
func dropRecord(b []byte, tag uint32) []byte {
	out := bytes.Clone(b[:8])
	for off := 8; off+8 <= len(b); {
		end := off + 8 + int(binary.LittleEndian.Uint32(b[off+4:]))
		if binary.LittleEndian.Uint32(b[off:]) != tag {
			out = append(out, b[off:end]...)
		}
		off = end
	}
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)-8))
	return out
}

func TestMsgRoundTrip(t *testing.T) {
	m := Msg{Type: MsgSetupError, Errno: 13, Status: 0, Index: 4, Step: "mount plan"}
	b, err := m.MarshalBinary()
	require.NoError(t, err)
	require.Len(t, b, MsgSize)
	var got Msg
	require.NoError(t, got.UnmarshalBinary(b))
	assert.Equal(t, m, got)
	assert.Error(t, got.UnmarshalBinary(b[:10]))
	b[0] = 0
	assert.Error(t, got.UnmarshalBinary(b))
}

// FuzzPlanRoundTrip builds plans from fuzz input, encodes them and decodes
// them with the child's C decoder: what Go encodes, C must read back exactly.
func FuzzPlanRoundTrip(f *testing.F) {
	f.Add("sh", "/usr", "/x/y", []byte("a=b\x00c"), uint8(3), uint32(1000))
	f.Add("", "", "/", []byte{}, uint8(0), uint32(0))
	f.Fuzz(func(t *testing.T, arg, src, target string, data []byte, n uint8, id uint32) {
		p := &Plan{Attach: "/tmp", AttachSrc: 1, Sources: 1 + uint32(n%3), Flags: Flags(n) &^ processFlags,
			Root: Mount{Kind: OpFS, Target: "/", FSType: "tmpfs", Data: data}}
		proc := &Process{UID: id, GID: id + 1, Flags: Flags(n) & processFlags, Cwd: target}
		for i := 0; i < int(n%8); i++ {
			m := Mount{Kind: OpKind(i%6 + 1), Flags: OpFlags(n) & validOpFlags,
				Source: src, Target: "/" + target, Data: data, Mode: uint32(i)}
			if m.Kind == OpBind && m.Flags&OpSrcInRoot == 0 {
				m.Src = 1 + uint32(i)%p.Sources
			}
			p.Mounts = append(p.Mounts, m)
			proc.Argv = append(proc.Argv, arg)
			proc.Env = append(proc.Env, arg+"="+src)
		}
		if len(proc.Argv) == 0 {
			proc.Argv = []string{arg}
		}
		if b, err := proc.Encode(); err == nil {
			got, err := cDecodeProcess(b)
			require.NoError(t, err)
			assert.Equal(t, proc, got)
		}
		if n%3 == 0 {
			p.Sysctls = []Sysctl{{Key: "net/ipv4/tcp_fin_timeout", Value: strconv.Itoa(int(id))}, {Key: "net/core/somaxconn", Value: "64"}}
		}
		if n%2 == 1 {
			p.LandlockFS, p.LandlockScoped = 1<<16-1, uint64(n>>4)
			p.LandlockRules = []LandlockRule{{Path: "/" + target, Access: uint64(id) & (1<<16 - 1)}}
		}
		b, err := p.Encode()
		if err != nil {
			return // NUL bytes in strings are refused by the encoder
		}
		got, err := cDecode(b)
		require.NoError(t, err)
		for i := range p.Mounts { // the decoder returns nil for empty data
			if len(p.Mounts[i].Data) == 0 {
				p.Mounts[i].Data = nil
			}
		}
		if len(p.Root.Data) == 0 {
			p.Root.Data = nil
		}
		assert.Equal(t, p, got)
	})
}

// FuzzDecode feeds arbitrary bytes to the child's C decoder: it must reject
// or accept without crashing, and whatever it accepts must re-encode.
func FuzzDecode(f *testing.F) {
	good, err := samplePlan().Encode()
	require.NoError(f, err)
	proc, err := sampleProcess().Encode()
	require.NoError(f, err)
	join, err := sampleJoin().Encode()
	require.NoError(f, err)
	f.Add(good)
	f.Add(proc)
	f.Add(join)
	f.Add([]byte("JPL1\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := cDecode(b); err == nil {
			_, err = p.Encode()
			assert.NoError(t, err)
		}
		if p, err := cDecodeProcess(b); err == nil {
			_, err = p.Encode()
			assert.NoError(t, err)
		}
	})
}

func TestDeadlines(t *testing.T) {
	ttl, idle := 1500*time.Microsecond, time.Duration(0)
	b := Deadlines(&ttl, &idle)
	require.Len(t, b, ctlDeadlinesLen)
	assert.Equal(t, byte('D'), b[0])
	assert.Equal(t, uint64(2), binary.NativeEndian.Uint64(b[1:]), "rounded up: never earlier")
	assert.Equal(t, uint64(0), binary.NativeEndian.Uint64(b[9:]), "0: none")
	b = Deadlines(nil, &ttl)
	assert.Equal(t, uint64(math.MaxUint64), binary.NativeEndian.Uint64(b[1:]), "nil: kept")
	assert.Equal(t, uint64(2), binary.NativeEndian.Uint64(b[9:]))
}
