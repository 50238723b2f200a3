package rootfs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/nsexec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// debianHost is a usr-merged Debian 12 host.
func debianHost() Host {
	h := Host{Attach: "/tmp",
		Links:  map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/etc/localtime": "/usr/share/zoneinfo/Etc/UTC"},
		Exists: map[string]bool{"/usr": true, "/etc/ld.so.cache": true, "/etc/ssl": true, "/etc/alternatives": true, "/etc/protocols": true},
		Files:  map[string]bool{"/etc/ld.so.cache": true, "/etc/protocols": true},
	}
	for _, d := range devices {
		h.Exists[d], h.Files[d] = true, true
	}
	return h
}

// render prints a plan one step per line, for golden files a reviewer can read.
func render(p Plan) string {
	var b strings.Builder
	op := func(m nsexec.Mount) string {
		kinds := map[nsexec.OpKind]string{nsexec.OpBind: "bind", nsexec.OpFS: "fs", nsexec.OpMkdir: "mkdir",
			nsexec.OpWriteFile: "file", nsexec.OpSymlink: "symlink", nsexec.OpSetattr: "setattr"}
		s := fmt.Sprintf("%-7s %-22s", kinds[m.Kind], m.Target)
		if m.Source != "" {
			s += " src=" + m.Source
		}
		if m.FSType != "" {
			s += " type=" + m.FSType
		}
		if m.Kind == nsexec.OpFS || m.Kind == nsexec.OpSymlink {
			s += " data=" + strings.TrimSuffix(strings.ReplaceAll(string(m.Data), "\x00", ","), ",")
		}
		if m.Kind == nsexec.OpWriteFile || m.Kind == nsexec.OpMkdir {
			s += fmt.Sprintf(" mode=%o", m.Mode)
		}
		if m.Kind == nsexec.OpWriteFile {
			s += fmt.Sprintf(" %q", m.Data)
		}
		for _, a := range []struct {
			bit  uint64
			name string
		}{{nsexec.AttrRdonly, "ro"}, {nsexec.AttrNosuid, "nosuid"}, {nsexec.AttrNodev, "nodev"}, {nsexec.AttrNoexec, "noexec"}} {
			if m.Attr&a.bit != 0 {
				s += " " + a.name
			}
		}
		for _, f := range []struct {
			bit  nsexec.OpFlags
			name string
		}{{nsexec.OpOptional, "optional"}, {nsexec.OpCreate, "create"}, {nsexec.OpFileTarget, "file"}, {nsexec.OpSrcInRoot, "src-in-root"},
			{nsexec.OpNew, "new"}, {nsexec.OpTree, "tree"}, {nsexec.OpLayers, "layers"}} {
			if m.Flags&f.bit != 0 {
				s += " [" + f.name + "]"
			}
		}
		return s + "\n"
	}
	b.WriteString("attach " + p.Attach + "\nroot    " + op(p.Root))
	for _, m := range p.Mounts {
		b.WriteString(op(m))
	}
	return b.String()
}

func TestBuildGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"default", Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20}},
		{"root-user", Config{UID: 0, GID: 0, Hostname: "box", TmpSizeBytes: 1 << 20}},
		{"user-mounts", Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20, Mounts: []mounts.Mount{
			{Type: mounts.Bind, Source: "/work", Target: "/work"},
			{Type: mounts.ROBind, Source: "/data/f", Target: "/in/f"},
			{Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 8 << 20},
		}, FileSources: map[string]bool{"/data/f": true}}},
		{"rootfs-dir", Config{Dir: "/srv/rootfs", UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20}},
		{"host-proc", Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20, HostProc: true}},
		{"overlay", Config{UID: 1000, GID: 1000, Hostname: "jail", TmpSizeBytes: 64 << 20,
			Overlay: &Overlay{SizeBytes: 256 << 20, Workspace: "/workspace",
				Hidden: []HiddenPath{{Path: "/usr/lib/dbus-1.0/dbus-daemon-launch-helper"}, {Path: "/usr/share/private", Dir: true}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(tc.c, debianHost())
			require.NoError(t, err)
			got := render(p)
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, string(want), got)
		})
	}
}

func TestBuildInvariants(t *testing.T) {
	p, err := Build(Config{UID: 1000, GID: 1000, Hostname: "jail"}, debianHost())
	require.NoError(t, err)
	for _, m := range p.Mounts {
		assert.True(t, strings.HasPrefix(m.Target, "/"), "target %q not absolute", m.Target)
		assert.NotEqual(t, "/etc/shadow", m.Target)
		assert.NotEqual(t, "/etc", m.Source, "the host's whole /etc must never be bound")
		if m.Kind == nsexec.OpBind || m.Kind == nsexec.OpFS {
			assert.NotZero(t, m.Attr&nsexec.AttrNosuid, "%s is not nosuid", m.Target)
			switch {
			case strings.HasPrefix(m.Target, "/dev/") || m.Target == "/dev":
			case m.Source == "/dev/null": // a /proc mask: /dev/null itself, read-only
				assert.NotZero(t, m.Attr&nsexec.AttrRdonly, "the mask on %s is not read-only", m.Target)
				assert.True(t, strings.HasPrefix(m.Target, "/proc/"), "a mask outside /proc: %s", m.Target)
			default:
				assert.NotZero(t, m.Attr&nsexec.AttrNodev, "%s is not nodev", m.Target)
			}
		}
		assert.False(t, strings.HasPrefix(m.Target, "/sys"), "no /sys in the jail")
	}
	_, err = Build(Config{}, Host{})
	assert.Error(t, err, "a host without an attach point")
	_, err = Build(Config{Dir: "/srv/rootfs", Overlay: &Overlay{SizeBytes: 1 << 20, Workspace: "/workspace"}}, debianHost())
	assert.ErrorContains(t, err, "a root directory has none")
}

// TestOverlayLayers: every directory the default root binds from the
// host is an id-mapped tree under an overlay mounted on the same target,
// whose upper layers are on the overlay's tmpfs, left read-only at the
// end, and whose second lower layer is a snapshot's tree where it has
// one (an empty mount point otherwise); files stay read-only binds.
func TestOverlayLayers(t *testing.T) {
	const tree = "/var/lib/jail/snapshots/snap-1/layers/usr"
	for _, lowers := range []map[string]string{nil, {"/usr": tree}} {
		p, err := Build(Config{UID: 1000, GID: 1000, Overlay: &Overlay{SizeBytes: 1 << 20, Workspace: "/workspace", Lowers: lowers}}, debianHost())
		require.NoError(t, err)
		overlays := map[string]bool{}
		var snapshot *nsexec.Mount
		snapshotAt, overlayAt := -1, -1
		for i, m := range p.Mounts {
			switch {
			case m.Kind == nsexec.OpBind && m.Source == tree:
				snapshot, snapshotAt = &p.Mounts[i], i
			case m.Kind == nsexec.OpBind && m.Flags&nsexec.OpSrcInRoot == 0 && !strings.HasPrefix(m.Target, "/dev") && !strings.HasPrefix(m.Target, "/proc"):
				if m.Flags&nsexec.OpFileTarget != 0 || strings.HasPrefix(m.Target, "/etc/") {
					assert.Zero(t, m.Flags&nsexec.OpTree, "file %s", m.Target)
					continue
				}
				require.NotZero(t, m.Flags&nsexec.OpTree, "%s is not a tree", m.Target)
				assert.NotZero(t, m.Attr&nsexec.AttrRdonly, "the lower layer %s is writable", m.Target)
				k := slices.IndexFunc(p.Mounts[i:], func(o nsexec.Mount) bool { return o.Kind == nsexec.OpFS && o.Target == m.Target })
				require.Positive(t, k, "no overlay on %s", m.Target)
				o := p.Mounts[i+k]
				assert.Equal(t, "overlay", o.FSType)
				assert.Equal(t, nsexec.OpLayers, o.Flags)
				assert.Contains(t, string(o.Data), "lowerdir="+OverlayDir+"/lower"+m.Target+":"+m.Target+"\x00")
				assert.Contains(t, string(o.Data), "upperdir="+OverlayDir+"/upper"+m.Target+"\x00")
				overlays[m.Target] = true
			case m.Kind == nsexec.OpFS && m.FSType == "overlay":
				if m.Target == "/usr" {
					assert.True(t, overlays[m.Target], "an overlay on %s with no tree under it", m.Target)
					overlayAt = i
					continue
				}
				// The root's own: over what the plan made there (/etc's
				// files), with the host's /etc binds on top, read-only.
				assert.True(t, slices.ContainsFunc(p.Mounts[:i], func(o nsexec.Mount) bool { return o.Kind == nsexec.OpMkdir && o.Target == m.Target }), m.Target)
				assert.Contains(t, string(m.Data), "lowerdir="+OverlayDir+"/lower"+m.Target+":"+m.Target+"\x00")
				overlays[m.Target] = true
				if m.Target == "/etc" {
					k := slices.IndexFunc(p.Mounts, func(o nsexec.Mount) bool { return o.Target == "/etc/ssl" && o.Kind == nsexec.OpBind })
					assert.Greater(t, k, i, "/etc's binds go on the overlay")
					assert.NotZero(t, p.Mounts[k].Attr&nsexec.AttrRdonly)
					assert.Less(t, slices.IndexFunc(p.Mounts, func(o nsexec.Mount) bool { return o.Target == "/etc/passwd" }), i, "jail's /etc is its lower layer")
				}
			}
		}
		assert.Equal(t, map[string]bool{"/usr": true, "/etc": true, "/home": true, "/mnt": true, "/opt": true, "/root": true, "/srv": true, "/var": true}, overlays,
			"/etc's binds (private keys among them) stay read-only binds")
		assert.Equal(t, []string{"/usr", "/etc", "/home", "/mnt", "/opt", "/root", "/srv", "/var"}, OverlayTargets(debianHost()))
		if lowers == nil {
			assert.Nil(t, snapshot)
		} else if assert.NotNil(t, snapshot, "the snapshot's tree") {
			assert.Equal(t, OverlayDir+"/lower/usr", snapshot.Target)
			assert.Equal(t, nsexec.OpTree, snapshot.Flags)
			assert.Equal(t, nsexec.AttrRdonly|nsexec.AttrNosuid|nsexec.AttrNodev, snapshot.Attr)
			assert.Less(t, snapshotAt, overlayAt, "bound before the overlay that has it as a layer")
		}
		assert.Equal(t, []string{"/usr"}, OverlayDirs(debianHost()))
		last := p.Mounts[len(p.Mounts)-1]
		assert.Equal(t, nsexec.Mount{Kind: nsexec.OpSetattr, Target: OverlayDir, Attr: nsexec.AttrRdonly}, last)
	}
}

// TestMarkNew: only a target nothing is at yet, in a directory of a tmpfs
// the plan made and nothing has covered since, is new.
func TestMarkNew(t *testing.T) {
	tmpfs := func(target string) nsexec.Mount {
		return nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpCreate, FSType: "tmpfs", Target: target}
	}
	bind := func(target string) nsexec.Mount {
		return nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpCreate, Source: "/src", Target: target}
	}
	mkdir := func(target string) nsexec.Mount { return nsexec.Mount{Kind: nsexec.OpMkdir, Target: target} }
	symlink := func(target string) nsexec.Mount { return nsexec.Mount{Kind: nsexec.OpSymlink, Target: target} }
	mask := nsexec.Mount{Kind: nsexec.OpBind, Flags: nsexec.OpOptional, Source: "/dev/null", Target: "/x/f"}
	optionalTmpfs := nsexec.Mount{Kind: nsexec.OpFS, Flags: nsexec.OpOptional, FSType: "tmpfs", Target: "/x"}
	for _, tc := range []struct {
		name      string
		freshRoot bool
		ops       []nsexec.Mount
		want      []bool // OpNew, op by op
	}{
		{"in the tmpfs root", true, []nsexec.Mount{bind("/a"), tmpfs("/b"), symlink("/c")}, []bool{true, true, true}},
		{"in a directory root", false, []nsexec.Mount{bind("/a"), tmpfs("/b"), bind("/b/c")}, []bool{false, false, true}},
		{"a second op on a target", true, []nsexec.Mount{tmpfs("/a"), tmpfs("/a"), bind("/a/b"), bind("/a/b")}, []bool{true, false, true, false}},
		{"below a bind", true, []nsexec.Mount{bind("/a"), bind("/a/b")}, []bool{true, false}},
		{"below a tmpfs mounted over what was made", true, []nsexec.Mount{mkdir("/a"), bind("/a/b"), tmpfs("/a"), bind("/a/b")}, []bool{true, true, false, true}},
		{"below a bind mounted over a tmpfs", true, []nsexec.Mount{tmpfs("/a"), bind("/a"), bind("/a/b")}, []bool{true, false, false}},
		{"in a directory made on the way", true, []nsexec.Mount{bind("/a/b"), bind("/a"), bind("/a/c")}, []bool{false, false, false}},
		{"in a directory a new mkdir made", true, []nsexec.Mount{mkdir("/a"), bind("/a/b"), mkdir("/a/c/d"), bind("/a/c/d/e")}, []bool{true, true, false, false}},
		{"below a symlink", true, []nsexec.Mount{symlink("/a"), bind("/a/b")}, []bool{true, false}},
		{"a mask, and below an optional tmpfs", true, []nsexec.Mount{tmpfs("/x"), mask, optionalTmpfs, bind("/x/g")}, []bool{true, false, false, false}},
		{"a path that is not clean", true, []nsexec.Mount{bind("/a/../b"), bind("/c/")}, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			markNew(tc.ops, tc.freshRoot)
			var got []bool
			for _, m := range tc.ops {
				got = append(got, m.Flags&nsexec.OpNew != 0)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRootFSType: the mount on top of / counts, the last in mountinfo
// order (a VM's initramfs with its real root mounted over it is not one).
func TestRootFSType(t *testing.T) {
	initramfs := mounts.MountInfo{ID: 1, Mountpoint: "/", FSType: "rootfs"}
	ext4 := mounts.MountInfo{ID: 20, Mountpoint: "/", FSType: "ext4"}
	proc := mounts.MountInfo{ID: 21, Mountpoint: "/proc", FSType: "proc"}
	assert.Equal(t, "rootfs", rootFSType(mounts.Table{initramfs, proc}))
	assert.Equal(t, "ext4", rootFSType(mounts.Table{initramfs, ext4, proc}))
	assert.Equal(t, "", rootFSType(mounts.Table{proc}))
}

// TestOverlayCoveredByAMount: a directory the Spec mounts something on
// itself is not overlaid (the mount hides it; a restore would find the
// overlay busy under it); one below is, with the mount on top.
func TestOverlayCoveredByAMount(t *testing.T) {
	p, err := Build(Config{UID: 1000, GID: 1000, Overlay: &Overlay{SizeBytes: 1 << 20, Workspace: "/workspace"},
		Mounts: []mounts.Mount{{Type: mounts.Tmpfs, Target: "/mnt", SizeBytes: 1 << 20}, {Type: mounts.Tmpfs, Target: "/var/cache/x", SizeBytes: 1 << 20}}}, debianHost())
	require.NoError(t, err)
	overlay := func(d string) bool {
		return slices.ContainsFunc(p.Mounts, func(m nsexec.Mount) bool { return m.Kind == nsexec.OpFS && m.FSType == "overlay" && m.Target == d })
	}
	assert.False(t, overlay("/mnt"))
	assert.True(t, overlay("/var"))
	assert.True(t, overlay("/usr"))
}
