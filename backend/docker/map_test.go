package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/profiles"
)

func strict(t *testing.T) jail.Spec {
	t.Helper()
	p, err := profiles.Load("strict")
	require.NoError(t, err)
	s := p.Spec
	s.Image = "jail-test:latest"
	return s
}

// TestBodyIsTheEngines decodes the create body jail sends into the
// official Engine API types, refusing unknown fields: a field name of
// ours that the Engine does not have (a typo, a renamed field) fails here
// instead of being ignored by the engine. The official module is linked
// into this test only (see engine.go for why not into jail).
func TestBodyIsTheEngines(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.PidsMax, s.CPUs, s.CPUWeight, s.IOWeight = 256<<20, 64, 0.5, 200, 100
	s.Mounts = []mounts.Mount{{Type: mounts.ROBind, Source: "/usr", Target: "/opt/usr"}, {Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 1 << 20}}
	p, err := Map(&s, []string{"python3", "-c", "print(1)"})
	require.NoError(t, err)
	b, err := json.Marshal(p.Body)
	require.NoError(t, err)
	var req container.CreateRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&req))

	c, h := req.Config, req.HostConfig
	require.Equal(t, "1000:1000", c.User)
	require.Equal(t, []string{"python3"}, []string(c.Entrypoint))
	require.Equal(t, []string{"-c", "print(1)"}, []string(c.Cmd))
	require.Equal(t, "jail-test:latest", c.Image)
	require.Equal(t, "/tmp", c.WorkingDir)
	require.Equal(t, "1", c.Labels[LabelManaged])

	require.True(t, h.ReadonlyRootfs)
	require.Equal(t, []string{"ALL"}, h.CapDrop)
	require.False(t, h.Privileged)
	require.Contains(t, h.SecurityOpt, "no-new-privileges")
	require.True(t, slices.ContainsFunc(h.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, `seccomp={"defaultAction":`) }), "%q", h.SecurityOpt)
	require.Equal(t, container.NetworkMode("none"), h.NetworkMode)
	require.Equal(t, container.CgroupnsMode("private"), h.CgroupnsMode)
	require.Equal(t, container.IpcMode("private"), h.IpcMode)
	require.Equal(t, int64(256<<20), h.Memory)
	require.Equal(t, int64(256<<20), h.MemorySwap, "no swap beyond the memory limit")
	require.Equal(t, int64(64), *h.PidsLimit)
	require.Equal(t, int64(5e8), h.NanoCPUs)
	require.Equal(t, int64(2048), h.CPUShares)
	require.Equal(t, uint16(500), h.BlkioWeight)
	require.Equal(t, int64(16<<20), h.ShmSize)
	require.Equal(t, "nosuid,nodev,mode=1777,size=67108864,exec", h.Tmpfs["/tmp"])
	require.Equal(t, "nosuid,nodev,mode=1777,size=1048576,exec", h.Tmpfs["/scratch"])
	require.Len(t, h.Mounts, 1)
	require.Equal(t, "/usr", h.Mounts[0].Source)
	require.True(t, h.Mounts[0].ReadOnly)
	require.Equal(t, "rprivate", string(h.Mounts[0].BindOptions.Propagation))
	require.Contains(t, h.MaskedPaths, "/sys")
	require.Contains(t, h.MaskedPaths, "/proc/kcore")
	require.Contains(t, h.ReadonlyPaths, "/proc/sys")
	require.Equal(t, "none", h.LogConfig.Type)
	require.False(t, h.AutoRemove)
	require.Equal(t, []string{"NONE"}, c.Healthcheck.Test, "the image's HEALTHCHECK runs nothing in the jail")
	nofile := slices.IndexFunc(h.Ulimits, func(u *container.Ulimit) bool { return u.Name == "nofile" })
	require.GreaterOrEqual(t, nofile, 0)
	require.Equal(t, int64(1024), h.Ulimits[nofile].Hard)
}

func TestMapRefuses(t *testing.T) {
	u := uint32(1234)
	for _, tc := range []struct {
		name, field string
		edit        func(*jail.Spec)
		allowable   bool
	}{
		{"no image", "image", func(s *jail.Spec) { s.Image = "" }, false},
		{"root", "root", func(s *jail.Spec) { s.Image, s.Root = "", "/usr" }, false},
		{"host uid", "host_uid, host_gid", func(s *jail.Spec) { s.HostUID = &u }, false},
		{"cgroup parent", "cgroup_parent", func(s *jail.Spec) { s.CgroupParent = "x" }, false},
		{"pty max", "pty_max", func(s *jail.Spec) { s.PtyMax = 64 }, true},
		{"mount ns", "disable_namespaces mount", func(s *jail.Spec) { s.DisableNamespaces = []string{"mount"} }, false},
		{"egress", "network.mode egress", func(s *jail.Spec) { s.Network = jail.Network{Mode: jail.NetworkEgress, Allow: []string{"192.0.2.1"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := strict(t)
			tc.edit(&s)
			_, err := Map(&s, []string{"true"})
			require.Error(t, err)
			var fe *jail.FeatureError
			var se *jail.SpecError
			switch {
			case errors.As(err, &fe):
				require.Equal(t, tc.field, fe.Feature)
			case errors.As(err, &se):
				require.Equal(t, tc.field, se.Field)
			default:
				t.Fatalf("%T %v", err, err)
			}
			s.AllowUnenforced = true
			_, err = Map(&s, []string{"true"})
			if tc.allowable {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "allow_unenforced does not make it expressible")
			}
		})
	}
}

func TestMapLists(t *testing.T) {
	s := strict(t)
	s.CPUTime = jail.Duration(5e9)
	p, err := Map(&s, []string{"true"})
	require.NoError(t, err)
	var what []string
	for _, n := range p.NotEnforced {
		w, _, _ := strings.Cut(n, ":")
		what = append(what, w)
	}
	require.Equal(t, []string{"seccomp rules", "landlock", "time namespace", "pty_max", "timeout and cpu_time after jail's death", "cpu_time exactness"}, what)
	require.Equal(t, []string{"pid", "mount", "net", "uts", "ipc", "cgroup"}, p.Namespaces)
}

func TestHostNamespaces(t *testing.T) {
	s := strict(t)
	s.DisableNamespaces = []string{"pid", "ipc", "uts", "cgroup"}
	s.Network.Mode = jail.NetworkHost
	p, err := Map(&s, []string{"true"})
	require.NoError(t, err)
	h := p.Body.HostConfig
	require.Equal(t, []string{"host", "host", "host", "host", "host"}, []string{h.PidMode, h.IpcMode, h.UTSMode, h.CgroupnsMode, h.NetworkMode})
	require.Empty(t, p.Body.Hostname, "the engine refuses a hostname with the host's UTS namespace")
	require.Equal(t, []string{"mount"}, p.Namespaces)
}

func TestDemux(t *testing.T) {
	var in bytes.Buffer
	frame := func(stream byte, s string) {
		in.Write([]byte{stream, 0, 0, 0, 0, 0, byte(len(s) >> 8), byte(len(s))})
		in.WriteString(s)
	}
	frame(1, "out1 ")
	frame(2, "err1")
	frame(1, strings.Repeat("x", 300))
	var out, errb bytes.Buffer
	require.NoError(t, Demux(&in, &out, &errb))
	require.Equal(t, "out1 "+strings.Repeat("x", 300), out.String())
	require.Equal(t, "err1", errb.String())

	require.Error(t, Demux(bytes.NewReader([]byte{7, 0, 0, 0, 0, 0, 0, 1, 'x'}), &out, &errb), "a bad stream byte")
}

func TestVersionLess(t *testing.T) {
	require.True(t, versionLess("1.40", "1.41"))
	require.True(t, versionLess("1.9", "1.41"))
	require.False(t, versionLess("1.41", "1.41"))
	require.False(t, versionLess("1.51", "1.41"))
	require.True(t, versionLess("1.51", "2.0"))
}
