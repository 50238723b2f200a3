package hostcheck

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readFixture returns testdata/name as a string.
func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

func TestParseCgroupMounts(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		want      []cgroupMount
	}{
		{
			name:      "hybrid host",
			mountinfo: readFixture(t, "mountinfo-hybrid.txt"),
			want: []cgroupMount{
				{Root: "/", MountPoint: "/sys/fs/cgroup/cpu", Controllers: []string{"cpu"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/cpuacct", Controllers: []string{"cpuacct"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/cpuset", Controllers: []string{"cpuset"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/devices", Controllers: []string{"devices"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/freezer", Controllers: []string{"freezer"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/blkio", Controllers: []string{"blkio"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/pids", Controllers: []string{"pids"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/systemd"},
				{Root: "/", MountPoint: "/sys/fs/cgroup/unified", V2: true},
			},
		},
		{
			name:      "pure v2",
			mountinfo: readFixture(t, "mountinfo-v2.txt"),
			want:      []cgroupMount{{Root: "/", MountPoint: "/sys/fs/cgroup", V2: true}},
		},
		{
			name: "systemd v1 with optional fields and joined controllers",
			mountinfo: "30 25 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd\n" +
				"33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 master:3 - cgroup cgroup rw,cpu,cpuacct\n",
			want: []cgroupMount{
				{Root: "/", MountPoint: "/sys/fs/cgroup/systemd"},
				{Root: "/", MountPoint: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
			},
		},
		{
			name:      "escaped mount point",
			mountinfo: `40 31 0:38 /a\040b /mnt/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
			want:      []cgroupMount{{Root: "/a b", MountPoint: "/mnt/my cgroup", V2: true}},
		},
		{
			name:      "malformed lines skipped",
			mountinfo: "garbage\n41 31 0:38 / /x rw cgroup2 cgroup2 rw\n- cgroup2\n",
		},
		{
			name:      "empty",
			mountinfo: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parseCgroupMounts(tt.mountinfo))
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []procCgroup
	}{
		{
			name: "pure v2",
			text: readFixture(t, "cgroup-v2.txt"),
			want: []procCgroup{{ID: 0, Path: "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope"}},
		},
		{
			name: "v1 with joined controllers and colon in path",
			text: "4:cpu,cpuacct:/a:b\n1:name=systemd:/user.slice\n0::/\n",
			want: []procCgroup{
				{ID: 4, Controllers: []string{"cpu", "cpuacct"}, Path: "/a:b"},
				{ID: 1, Controllers: []string{"name=systemd"}, Path: "/user.slice"},
				{ID: 0, Path: "/"},
			},
		},
		{
			name: "malformed lines skipped",
			text: "x::/\n3:memory\n\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parseProcCgroup(tt.text))
		})
	}
}

func TestPlanCgroupLayout(t *testing.T) {
	tests := []struct {
		name          string
		rootIsCgroup2 bool
		mountinfo     string
		self          string
		want          cgroupLayout
	}{
		{
			name:      "hybrid host",
			mountinfo: readFixture(t, "mountinfo-hybrid.txt"),
			self:      readFixture(t, "cgroup-hybrid.txt"),
			want: cgroupLayout{
				Mode:          cgroupHybrid,
				V1Controllers: []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids"},
				V2Dir:         "/sys/fs/cgroup/unified",
				DelegationDir: "/sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c",
			},
		},
		{
			name:          "pure v2",
			rootIsCgroup2: true,
			mountinfo:     readFixture(t, "mountinfo-v2.txt"),
			self:          readFixture(t, "cgroup-v2.txt"),
			want: cgroupLayout{
				Mode:          cgroupUnified,
				V2Dir:         "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope",
				DelegationDir: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope",
			},
		},
		{
			name:          "v2 in a cgroup namespace outside its root",
			rootIsCgroup2: true,
			mountinfo:     readFixture(t, "mountinfo-v2.txt"),
			self:          "0::/../../user.slice\n",
			want:          cgroupLayout{Mode: cgroupUnified},
		},
		{
			name:      "v1 only in a container without cgroupns",
			mountinfo: "50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			self:      "4:memory:/docker/abc\n",
			want: cgroupLayout{
				Mode:          cgroupV1,
				V1Controllers: []string{"memory"},
				DelegationDir: "/sys/fs/cgroup/memory",
			},
		},
		{
			name:      "v1 memory cgroup outside the mounted subtree",
			mountinfo: "50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			self:      "4:memory:/other\n",
			want:      cgroupLayout{Mode: cgroupV1, V1Controllers: []string{"memory"}},
		},
		{
			name:      "cgroup2 elsewhere beside a controller-less systemd hierarchy",
			mountinfo: "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
			self:      "1:name=systemd:/a\n0::/a\n",
			want:      cgroupLayout{Mode: cgroupUnified, V2Dir: "/sys/fs/cgroup/unified/a", DelegationDir: "/sys/fs/cgroup/unified/a"},
		},
		{
			name:      "no cgroups",
			mountinfo: "22 1 253:1 / / rw - ext4 /dev/vda rw\n",
			self:      "0::/\n",
			want:      cgroupLayout{Mode: cgroupNone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planCgroupLayout(tt.rootIsCgroup2, parseCgroupMounts(tt.mountinfo), parseProcCgroup(tt.self))
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCgroupFeature(t *testing.T) {
	hybrid := planCgroupLayout(false,
		parseCgroupMounts(readFixture(t, "mountinfo-hybrid.txt")), parseProcCgroup(readFixture(t, "cgroup-hybrid.txt")))
	v2 := planCgroupLayout(true,
		parseCgroupMounts(readFixture(t, "mountinfo-v2.txt")), parseProcCgroup(readFixture(t, "cgroup-v2.txt")))
	tests := []struct {
		name        string
		facts       cgroupFacts
		wantVerdict Verdict
		wantDetail  string
		wantFix     string
	}{
		{
			name:        "hybrid host",
			facts:       cgroupFacts{Layout: hybrid},
			wantVerdict: Warn,
			wantDetail: "hybrid; v1 controllers blkio,cpu,cpuacct,cpuset,devices,freezer,memory,pids; " +
				"v2 controllers none at /sys/fs/cgroup/unified; limits use cgroup v1; " +
				"own cgroup /sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c writable",
			wantFix: "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2",
		},
		{
			name:        "v2 with memory pids cpu",
			facts:       cgroupFacts{Layout: v2, V2Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}},
			wantVerdict: OK,
			wantDetail:  "v2 unified; v2 controllers cpuset,cpu,io,memory,pids at " + v2.V2Dir + "; own cgroup " + v2.V2Dir + " writable",
		},
		{
			name: "v2 without delegation",
			facts: cgroupFacts{Layout: v2, V2Controllers: []string{"memory", "pids"},
				WritableErr: syscall.EACCES},
			wantVerdict: Warn,
			wantDetail: "v2 unified; v2 controllers memory,pids at " + v2.V2Dir + "; own cgroup " + v2.V2Dir +
				" not writable (" + syscall.EACCES.Error() + ")",
			wantFix: "enable cpu in the parent's cgroup.subtree_control (systemd: `systemd-run --user --scope -p Delegate=yes jail ...`)",
		},
		{
			name:        "v2 controllers unreadable",
			facts:       cgroupFacts{Layout: v2, V2Err: syscall.ENOENT},
			wantVerdict: Warn,
			wantDetail:  "v2 unified; v2 controllers unknown (" + syscall.ENOENT.Error() + "); own cgroup " + v2.V2Dir + " writable",
			wantFix:     "enable cpu memory pids in the parent's cgroup.subtree_control (systemd: `systemd-run --user --scope -p Delegate=yes jail ...`)",
		},
		{
			name:        "none",
			facts:       cgroupFacts{},
			wantVerdict: Missing,
			wantDetail:  "no cgroup or cgroup2 mount in /proc/self/mountinfo",
			wantFix:     "mount cgroup2: `mount -t cgroup2 none /sys/fs/cgroup`",
		},
		{
			name:        "proc unreadable",
			facts:       cgroupFacts{ReadErr: errors.New("open /proc/self/mountinfo: no such file or directory")},
			wantVerdict: Missing,
			wantDetail:  "open /proc/self/mountinfo: no such file or directory",
			wantFix:     "mount procfs at /proc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cgroupFeature(tt.facts)
			assert.Equal(t, Feature{Name: nameCgroups, Verdict: tt.wantVerdict, Detail: tt.wantDetail, Fix: tt.wantFix}, got)
		})
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "/sys/fs/cgroup", "/sys/fs/cgroup"},
		{"space", `/a\040b`, "/a b"},
		{"backslash", `/a\134b`, `/a\b`},
		{"truncated escape", `/a\04`, `/a\04`},
		{"not octal", `/a\999`, `/a\999`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, unescapeMountinfo(tt.in))
		})
	}
}
