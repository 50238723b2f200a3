// Package docker runs a jail [jail.Spec] as a container of a Docker engine
// and reports it as a jail.result/v1 document, like a native run. The Spec
// is mapped through package oci, then on to the Engine API's create body;
// what the Engine cannot say is refused when the Spec asks for it, and
// otherwise listed in the report's isolation.not_enforced.
package docker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/oci"
)

// Labels jail puts on its containers. LabelOwner is procfs.OwnerTag of
// the jail process that made the container (boot id, PID namespace, pid,
// start time), so that `jail check --clean` removes a container only when
// its maker is certainly gone.
const (
	LabelManaged = "org.jailrt.jail"
	LabelOwner   = "org.jailrt.jail.owner"
)

// CreateBody is the body of POST /containers/create: the fields jail sets.
type CreateBody struct {
	Hostname     string
	User         string
	Env          []string
	Entrypoint   []string
	Cmd          []string
	WorkingDir   string
	Image        string
	Labels       map[string]string
	Healthcheck  *Healthcheck // NONE: the image's HEALTHCHECK would run commands in the jail
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	OpenStdin    bool
	StdinOnce    bool
	HostConfig   HostConfig
}

// Healthcheck is a container's health check; Test ["NONE"] disables the
// image's.
type Healthcheck struct {
	Test []string
}

// HostConfig is the create body's HostConfig: the fields jail sets.
type HostConfig struct {
	NetworkMode    string
	PidMode        string            `json:",omitempty"`
	IpcMode        string            `json:",omitempty"`
	UTSMode        string            `json:",omitempty"`
	CgroupnsMode   string            `json:",omitempty"`
	ReadonlyRootfs bool              // the image's root
	CapDrop        []string          // ALL
	SecurityOpt    []string          // no-new-privileges, seccomp=JSON
	MaskedPaths    []string          // /proc paths the workload cannot read
	ReadonlyPaths  []string          // /proc paths it cannot write
	Tmpfs          map[string]string `json:",omitempty"`
	Mounts         []Mount           `json:",omitempty"`
	ShmSize        int64             `json:",omitempty"`
	Memory         int64             `json:",omitempty"`
	MemorySwap     int64             `json:",omitempty"`
	PidsLimit      *int64            `json:",omitempty"`
	NanoCpus       int64             `json:",omitempty"`
	CpuShares      int64             `json:",omitempty"` //nolint:revive // the Engine's spelling
	BlkioWeight    uint16            `json:",omitempty"`
	Ulimits        []Ulimit          `json:",omitempty"`
	LogConfig      LogConfig         // none: the output is attached, not stored
	AutoRemove     bool              // false: jail inspects it, then removes it
	Privileged     bool              // false
	Init           bool              // true: the engine's init (tini) is PID 1, a reaper that passes signals on, as a native jail's PID 1
}

// Mount is a bind mount of the create body.
type Mount struct {
	Type        string // "bind"
	Source      string
	Target      string
	ReadOnly    bool
	BindOptions *BindOptions `json:",omitempty"`
}

// BindOptions of a bind mount.
type BindOptions struct {
	Propagation            string // rprivate
	NonRecursive           bool   `json:",omitempty"`
	ReadOnlyForceRecursive bool   `json:",omitempty"` // API 1.44
}

// Ulimit is a setrlimit(2) limit; -1 is unlimited.
type Ulimit struct {
	Name string
	Soft int64
	Hard int64
}

// LogConfig is the container's log driver.
type LogConfig struct {
	Type string
}

// Plan is a Spec mapped on to the Engine: the create body, and what the
// run does itself.
type Plan struct {
	*oci.Mapping
	Body CreateBody
	// Namespaces are those the container has, in the report's order.
	Namespaces []string
}

// Map maps s and argv on to a create body. It reads no engine state: what
// depends on the engine (its user namespace remapping, its cgroup
// version, its warnings at create) is judged at the run.
func Map(s *jail.Spec, argv []string) (*Plan, error) {
	if s.Root != "" {
		return nil, &jail.FeatureError{Feature: "root", Reason: "the docker backend runs an image (image, --image); make one from a directory with `tar -C DIR -c . | docker import - NAME`"}
	}
	if s.Image == "" {
		return nil, &jail.SpecError{Field: "image", Err: fmt.Errorf("the docker backend needs an image (--image)")}
	}
	m, err := oci.FromSpec(s, argv)
	if err != nil {
		return nil, err
	}
	if m.NetworkMode == jail.NetworkEgress {
		return nil, &jail.FeatureError{Feature: "network.mode egress",
			Reason: "an allow-list is enforced on the host's end of a veth that the native backend makes; a Docker network cannot carry it (use --backend native)"}
	}
	o := m.Spec
	p := &Plan{Mapping: m}
	b := &p.Body
	b.Image = s.Image
	b.Hostname = o.Hostname
	b.User = fmt.Sprintf("%d:%d", o.Process.User.UID, o.Process.User.GID)
	b.Env = o.Process.Env
	b.Entrypoint, b.Cmd = o.Process.Args[:1], o.Process.Args[1:] // exactly argv, whatever the image's entrypoint
	if b.Cmd == nil {
		b.Cmd = []string{}
	}
	b.WorkingDir = o.Process.Cwd
	b.AttachStdout, b.AttachStderr = true, true
	b.Healthcheck = &Healthcheck{Test: []string{"NONE"}}
	b.Labels = map[string]string{LabelManaged: "1"}

	h := &b.HostConfig
	h.ReadonlyRootfs = true
	h.CapDrop = []string{"ALL"}
	h.LogConfig = LogConfig{Type: "none"}
	// The command must not be PID 1: the kernel drops signals PID 1 has
	// no handler for (a TERM passed on from jail would do nothing), and
	// nothing would reap its orphans.
	h.Init = true
	// Docker mounts /sys (read-only, with the host's cgroup hierarchies
	// on cgroup v1), which a jail does not have: masked whole.
	h.MaskedPaths, h.ReadonlyPaths = append(slices.Clone(o.Linux.MaskedPaths), "/sys"), o.Linux.ReadonlyPaths
	h.SecurityOpt = []string{"no-new-privileges"}
	if o.Linux.Seccomp != nil {
		j, err := json.Marshal(o.Linux.Seccomp)
		if err != nil {
			return nil, err
		}
		h.SecurityOpt = append(h.SecurityOpt, "seccomp="+string(j))
	} else {
		h.SecurityOpt = append(h.SecurityOpt, "seccomp=unconfined")
	}
	h.NetworkMode = m.NetworkMode

	// Namespaces: Docker makes pid, mount, net, ipc, uts and (asked for)
	// cgroup; it has no time namespace, and a user namespace only when
	// its daemon remaps every container (judged at the run).
	has := map[specs.LinuxNamespaceType]bool{}
	for _, n := range o.Linux.Namespaces {
		has[n.Type] = true
	}
	mode := func(t specs.LinuxNamespaceType, private string) string {
		if has[t] {
			return private
		}
		return "host"
	}
	h.PidMode, h.IpcMode, h.UTSMode, h.CgroupnsMode = mode(specs.PIDNamespace, ""), mode(specs.IPCNamespace, "private"),
		mode(specs.UTSNamespace, ""), mode(specs.CgroupNamespace, "private")
	if !has[specs.MountNamespace] {
		return nil, &jail.FeatureError{Feature: "disable_namespaces mount", Reason: "a container always has its own mount namespace"}
	}
	if h.UTSMode == "host" {
		b.Hostname = "" // the engine refuses a hostname with the host's UTS namespace
	}
	for _, n := range []struct {
		name string
		t    specs.LinuxNamespaceType
	}{{"pid", specs.PIDNamespace}, {"mount", specs.MountNamespace}, {"net", specs.NetworkNamespace},
		{"uts", specs.UTSNamespace}, {"ipc", specs.IPCNamespace}, {"cgroup", specs.CgroupNamespace}} {
		if has[n.t] {
			p.Namespaces = append(p.Namespaces, n.name)
		}
	}
	if has[specs.TimeNamespace] {
		if err := oci.Gap(s, &m.NotEnforced, "time namespace", false, "Docker has none: the workload shares the host's clocks"); err != nil {
			return nil, err
		}
	}
	if s.HostUID != nil || s.HostGID != nil {
		return nil, &jail.FeatureError{Feature: "host_uid, host_gid", Reason: "a Docker engine maps ids for all its containers at once (dockerd --userns-remap), not per container"}
	}
	if s.CgroupParent != "" {
		return nil, &jail.FeatureError{Feature: "cgroup_parent", Reason: "the Docker engine places its containers' cgroups itself (dockerd --cgroup-parent)"}
	}
	// The pty limit guards the host's shared pty count: jail's default
	// (16, which the built-in profiles spell out) is listed, another
	// value refused.
	if err := oci.Gap(s, &m.NotEnforced, "pty_max", s.PtyMax != 0 && s.PtyMax != jail.DefaultPtyMax,
		"Docker mounts /dev/pts itself, without a limit of its ptys"); err != nil {
		return nil, err
	}

	// Mounts: /tmp and tmpfs mounts as the Engine's Tmpfs, binds as bind
	// mounts with private propagation; /proc, /dev and /dev/pts are
	// Docker's own, /dev/shm is ShmSize.
	for i, mt := range o.Mounts {
		switch {
		case i < m.SystemMounts && (mt.Destination == "/proc" || mt.Destination == "/dev" || mt.Destination == "/dev/pts"):
		case i < m.SystemMounts && mt.Destination == "/dev/shm":
			h.ShmSize = sizeOf(mt.Options)
		case mt.Type == "tmpfs":
			if h.Tmpfs == nil {
				h.Tmpfs = map[string]string{}
			}
			opts := mt.Options
			if !slices.Contains(opts, "noexec") {
				opts = append(slices.Clone(opts), "exec") // the Engine's tmpfs is noexec unless told
			}
			h.Tmpfs[mt.Destination] = strings.Join(opts, ",")
		case mt.Type == "bind":
			h.Mounts = append(h.Mounts, Mount{Type: "bind", Source: mt.Source, Target: mt.Destination,
				ReadOnly: slices.Contains(mt.Options, "ro"), BindOptions: &BindOptions{Propagation: "rprivate"}})
		}
	}

	// Limits.
	if r := o.Linux.Resources; r != nil {
		if r.Memory != nil {
			h.Memory, h.MemorySwap = *r.Memory.Limit, *r.Memory.Swap
		}
		if r.Pids != nil {
			h.PidsLimit = r.Pids.Limit
		}
		if r.CPU != nil {
			if r.CPU.Quota != nil {
				h.NanoCpus = int64(s.CPUs * 1e9)
			}
			if r.CPU.Shares != nil {
				h.CpuShares = int64(*r.CPU.Shares)
			}
		}
		if r.BlockIO != nil {
			h.BlkioWeight = *r.BlockIO.Weight
		}
	}
	for _, rl := range o.Process.Rlimits {
		h.Ulimits = append(h.Ulimits, Ulimit{Name: strings.ToLower(strings.TrimPrefix(rl.Type, "RLIMIT_")),
			Soft: ulimitValue(rl.Soft), Hard: ulimitValue(rl.Hard)})
	}
	if m.Timeout > 0 || m.CPUTime > 0 {
		if err := oci.Gap(s, &m.NotEnforced, "timeout and cpu_time after jail's death", false,
			"this jail process watches them: a jail killed with SIGKILL leaves its container running until `jail check --clean`"); err != nil {
			return nil, err
		}
	}
	if m.CPUTime > 0 {
		if err := oci.Gap(s, &m.NotEnforced, "cpu_time exactness", false,
			"read from the engine's statistics, about once a second: the jail may use up to that much more before it is killed"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// sizeOf reads a tmpfs mount's size= option.
func sizeOf(opts []string) int64 {
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func ulimitValue(v uint64) int64 {
	if v == jail.RlimitInfinity || v > 1<<62 {
		return -1
	}
	return int64(v)
}
