package cgroup

import (
	"os"
	"path/filepath"
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

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		want      []mount
	}{
		{
			name:      "hybrid host",
			mountinfo: readFixture(t, "mountinfo-hybrid.txt"),
			want: []mount{
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
			want:      []mount{{Root: "/", MountPoint: "/sys/fs/cgroup", V2: true, Flags: []string{"nsdelegate", "memory_recursiveprot"}}},
		},
		{
			name: "favordynmods and joined controllers",
			mountinfo: "35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:14 master:3 - cgroup cgroup rw,cpu,cpuacct\n" +
				"39 30 0:35 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer,favordynmods\n" +
				"41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,favordynmods,memory_recursiveprot\n",
			want: []mount{
				{Root: "/", MountPoint: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
				{Root: "/", MountPoint: "/sys/fs/cgroup/freezer", Controllers: []string{"freezer"}, FavorDynMods: true},
				{Root: "/", MountPoint: "/sys/fs/cgroup", V2: true, FavorDynMods: true, Flags: []string{"nsdelegate", "memory_recursiveprot"}},
			},
		},
		{
			name:      "escaped mount point",
			mountinfo: `40 31 0:38 /a\040b /mnt/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
			want:      []mount{{Root: "/a b", MountPoint: "/mnt/my cgroup", V2: true}},
		},
		{
			name:      "malformed lines skipped",
			mountinfo: "garbage\n41 31 0:38 / /x rw cgroup2 cgroup2 rw\n- cgroup2\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parseMountinfo(tt.mountinfo))
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
			name: "joined controllers and a colon in the path",
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

// layoutSummary is a layout in a comparable form: the mode, the cgroup2
// mount's directory for this process and each v1 hierarchy's.
type layoutSummary struct {
	Mode  Mode
	V2Dir string
	V1    map[string]string
	Favor bool
}

func summarize(l layout) layoutSummary {
	s := layoutSummary{Mode: l.Mode, V1: map[string]string{}, Favor: l.FavorDynMods}
	if l.V2 != nil {
		s.V2Dir = l.V2.Dir(l.V2.Self)
	}
	for _, h := range l.V1 {
		s.V1[h.Name()] = h.Dir(h.Self)
	}
	return s
}

func TestPlanLayout(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		self      string
		want      layoutSummary
	}{
		{
			name:      "hybrid host",
			mountinfo: readFixture(t, "mountinfo-hybrid.txt"),
			self:      readFixture(t, "cgroup-hybrid.txt"),
			want: layoutSummary{Mode: ModeHybrid, V2Dir: "/sys/fs/cgroup/unified", V1: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "cpuset": "/sys/fs/cgroup/cpuset",
				"memory":  "/sys/fs/cgroup/memory/process_api/d67cb3a58895d5d5cf0aeb05416b0a1c",
				"devices": "/sys/fs/cgroup/devices", "freezer": "/sys/fs/cgroup/freezer",
				"blkio": "/sys/fs/cgroup/blkio", "pids": "/sys/fs/cgroup/pids",
			}},
		},
		{
			name:      "systemd v1 with joined cpu,cpuacct and favordynmods",
			mountinfo: readFixture(t, "mountinfo-v1-systemd.txt"),
			self:      readFixture(t, "cgroup-v1-systemd.txt"),
			want: layoutSummary{Mode: ModeHybrid, Favor: true,
				V2Dir: "/sys/fs/cgroup/unified/user.slice/user-1000.slice/session-3.scope",
				V1: map[string]string{
					"cpu,cpuacct":      "/sys/fs/cgroup/cpu,cpuacct/user.slice",
					"memory":           "/sys/fs/cgroup/memory/user.slice/user-1000.slice/session-3.scope",
					"pids":             "/sys/fs/cgroup/pids/user.slice/user-1000.slice/session-3.scope",
					"blkio":            "/sys/fs/cgroup/blkio/user.slice",
					"freezer":          "/sys/fs/cgroup/freezer/user.slice",
					"net_cls,net_prio": "/sys/fs/cgroup/net_cls,net_prio",
				}},
		},
		{
			name:      "pure v2",
			mountinfo: readFixture(t, "mountinfo-v2.txt"),
			self:      readFixture(t, "cgroup-v2.txt"),
			want: layoutSummary{Mode: ModeUnified, V1: map[string]string{},
				V2Dir: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope"},
		},
		{
			name:      "v2 in a cgroup namespace outside its root",
			mountinfo: readFixture(t, "mountinfo-v2.txt"),
			self:      "0::/../../user.slice\n",
			want:      layoutSummary{Mode: ModeUnified, V1: map[string]string{}},
		},
		{
			name:      "v1 only in a container without cgroupns",
			mountinfo: "50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			self:      "4:memory:/docker/abc\n",
			want:      layoutSummary{Mode: ModeV1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory"}},
		},
		{
			name: "same hierarchy mounted twice: /sys/fs/cgroup wins",
			mountinfo: "50 40 0:32 / /mnt/mem rw - cgroup cgroup rw,memory\n" +
				"51 40 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
			self: "4:memory:/a\n",
			want: layoutSummary{Mode: ModeV1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory/a"}},
		},
		{
			name:      "no cgroups",
			mountinfo: "22 1 253:1 / / rw - ext4 /dev/vda rw\n",
			self:      "0::/\n",
			want:      layoutSummary{Mode: ModeNone, V1: map[string]string{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planLayout(parseMountinfo(tt.mountinfo), parseProcCgroup(tt.self))
			assert.Equal(t, tt.want, summarize(got))
		})
	}
}

func TestParentCgroup(t *testing.T) {
	mounts := parseMountinfo(readFixture(t, "mountinfo-hybrid.txt"))
	nsMounts := parseMountinfo("50 40 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
	tests := []struct {
		name    string
		parent  string
		mounts  []mount
		want    string
		wantRel bool
		wantErr string
	}{
		{name: "relative to our own cgroups", parent: "jail/x/", mounts: mounts, want: "jail/x", wantRel: true},
		{name: "absolute cgroup path", parent: "/a/b/", mounts: mounts, want: "/a/b"},
		{name: "v1 directory", parent: "/sys/fs/cgroup/memory/jail", mounts: mounts, want: "/jail"},
		{name: "cgroup2 directory", parent: "/sys/fs/cgroup/unified/x/y", mounts: mounts, want: "/x/y"},
		{name: "mount root", parent: "/sys/fs/cgroup/pids", mounts: mounts, want: "/"},
		{name: "mount of a subtree", parent: "/sys/fs/cgroup/memory/j", mounts: nsMounts, want: "/docker/abc/j"},
		{name: "dot dot", parent: "/sys/fs/cgroup/memory/../../etc", mounts: mounts, wantErr: "must not contain .."},
		{name: "relative dot dot", parent: "../x", mounts: mounts, wantErr: "must not contain .."},
		{name: "under the tmpfs, not a hierarchy", parent: "/sys/fs/cgroup/nope/x", mounts: nsMounts,
			wantErr: "not under a mounted cgroup hierarchy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rel, err := parentCgroup(tt.parent, tt.mounts)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantRel, rel)
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

func TestCommonAncestor(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"/a/b", "/a/b/jail-1", "/a/b"},
		{"/a/b", "/a/c/jail-1", "/a"},
		{"/", "/jail-1", "/"},
		{"/x", "/y", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.a+" "+tt.b, func(t *testing.T) {
			assert.Equal(t, tt.want, commonAncestor(tt.a, tt.b))
		})
	}
}
