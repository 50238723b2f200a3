package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"

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

var withProfile = Options{SeccompProfile: "jail/strict.json"}

// decodeStrict decodes v's JSON into the official type, refusing unknown
// fields: a field of jail's that the API does not have fails here (the
// official module is linked into this test only; see types.go).
func decodeStrict(t *testing.T, v, into any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), "%s", b)
}

func TestPodIsTheAPIs(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.CPUs = 256<<20, 0.5
	s.Mounts = []mounts.Mount{{Type: mounts.Tmpfs, Target: "/scratch", SizeBytes: 1 << 20}}
	p, err := Map(context.Background(), &s, []string{"python3", "-c", "print(1)"}, withProfile)
	require.NoError(t, err)
	var pod corev1.Pod
	decodeStrict(t, p.Pod, &pod)
	ps := pod.Spec
	require.Equal(t, corev1.RestartPolicyNever, ps.RestartPolicy)
	require.NotNil(t, ps.HostUsers)
	require.False(t, *ps.HostUsers, "a user namespace")
	require.False(t, *ps.AutomountServiceAccountToken)
	require.False(t, *ps.EnableServiceLinks)
	require.Equal(t, int64(10), *ps.ActiveDeadlineSeconds, "strict's 10 s")
	require.Equal(t, int64(0), *ps.TerminationGracePeriodSeconds)
	require.False(t, ps.HostNetwork || ps.HostPID || ps.HostIPC)
	require.Equal(t, "jail", ps.Hostname)
	sc := ps.SecurityContext
	require.Equal(t, int64(1000), *sc.RunAsUser)
	require.Equal(t, int64(1000), *sc.RunAsGroup)
	require.True(t, *sc.RunAsNonRoot)
	require.Equal(t, corev1.SeccompProfileTypeLocalhost, sc.SeccompProfile.Type)
	require.Equal(t, "jail/strict.json", *sc.SeccompProfile.LocalhostProfile)

	require.Len(t, ps.Containers, 1)
	c := ps.Containers[0]
	require.Equal(t, []string{"python3"}, c.Command)
	require.Equal(t, []string{"-c", "print(1)"}, c.Args)
	require.Equal(t, "/tmp", c.WorkingDir)
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.False(t, *c.SecurityContext.Privileged)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	require.Equal(t, int64(256<<20), c.Resources.Limits.Memory().Value())
	require.Equal(t, int64(500), c.Resources.Limits.Cpu().MilliValue())
	require.Equal(t, c.Resources.Limits, c.Resources.Requests, "requests equal limits")

	sizes := map[string]int64{}
	for _, v := range ps.Volumes {
		require.Equal(t, corev1.StorageMediumMemory, v.EmptyDir.Medium)
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				sizes[m.MountPath] = v.EmptyDir.SizeLimit.Value()
			}
		}
	}
	require.Equal(t, map[string]int64{"/dev/shm": 16 << 20, "/tmp": 64 << 20, "/scratch": 1 << 20}, sizes)

	var pol netv1.NetworkPolicy
	decodeStrict(t, p.Policy, &pol)
	require.ElementsMatch(t, []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress}, pol.Spec.PolicyTypes)
	require.Empty(t, pol.Spec.Egress, "network none: deny all")
	require.Equal(t, map[string]string{LabelRun: p.RunID}, pol.Spec.PodSelector.MatchLabels, "this Pod only")
	require.Equal(t, p.RunID, pod.Labels[LabelRun])
	require.Equal(t, "jail-"+p.RunID, pod.Name)
	require.Empty(t, pol.Spec.Ingress)

	var what []string
	for _, n := range p.NotEnforced {
		w, _, _ := strings.Cut(n, ":")
		what = append(what, w)
	}
	require.Equal(t, []string{"seccomp rules", "landlock", "time namespace", "pty_max", "tmpfs sizes", "rlimits", "image configuration", "supplementary groups", "ephemeral storage", "network policy"}, what)
}

// TestExactArgs: the kubelet expands $(VAR) in command, args and env
// values, and reads $$ as $: jail escapes every $, so argv is exactly the
// Spec's (found by review).
func TestExactArgs(t *testing.T) {
	s := strict(t)
	s.Env = []string{"A=x$(HOME)", "B=$$"}
	p, err := Map(context.Background(), &s, []string{"sh$", "-c", "echo $$ $(id -u)"}, withProfile)
	require.NoError(t, err)
	c := p.Pod.Spec.Containers[0]
	require.Equal(t, []string{"sh$$"}, c.Command)
	require.Equal(t, []string{"-c", "echo $$$$ $$(id -u)"}, c.Args)
	require.Equal(t, []EnvVar{{"A", "x$$(HOME)"}, {"B", "$$$$"}}, c.Env)

	s.Network = jail.Network{Mode: jail.NetworkEgress, Allow: []string{"93.184.215.14"}, LogDenied: 10}
	_, err = Map(context.Background(), &s, []string{"true"}, withProfile)
	require.ErrorContains(t, err, "network.log_denied")
}

func TestEgressPolicy(t *testing.T) {
	s := strict(t)
	s.Network = jail.Network{Mode: jail.NetworkEgress, Allow: []string{"93.184.215.14:443", "udp/10.0.0.53:53", "api.example.com:8000-8010", "192.0.2.0/24", "0.0.0.0/0:443"}}
	o := withProfile
	o.Resolve = func(_ context.Context, host string) ([]netip.Addr, error) {
		require.Equal(t, "api.example.com", host)
		return []netip.Addr{netip.MustParseAddr("93.184.216.7")}, nil
	}
	p, err := Map(context.Background(), &s, []string{"true"}, o)
	require.NoError(t, err)
	var pol netv1.NetworkPolicy
	decodeStrict(t, p.Policy, &pol)
	require.Len(t, pol.Spec.Egress, 5)
	e := pol.Spec.Egress
	require.Equal(t, "93.184.215.14/32", e[0].To[0].IPBlock.CIDR)
	require.Equal(t, int32(443), e[0].Ports[0].Port.IntVal)
	require.Equal(t, corev1.ProtocolUDP, *e[1].Ports[0].Protocol)
	require.Equal(t, "93.184.216.7/32", e[2].To[0].IPBlock.CIDR)
	require.Equal(t, int32(8000), e[2].Ports[0].Port.IntVal)
	require.Equal(t, int32(8010), *e[2].Ports[0].EndPort)
	require.Nil(t, e[3].Ports[0].Port, "every port")
	require.Empty(t, e[1].To[0].IPBlock.Except, "an entry inside a special range names it")
	require.Empty(t, e[3].To[0].IPBlock.Except)
	// 0.0.0.0/0 opens the internet, not the metadata address or a
	// private network (as the native rules).
	require.Equal(t, "0.0.0.0/0", e[4].To[0].IPBlock.CIDR)
	require.Contains(t, e[4].To[0].IPBlock.Except, "169.254.0.0/16")
	require.Contains(t, e[4].To[0].IPBlock.Except, "10.0.0.0/8")
	require.Contains(t, e[4].To[0].IPBlock.Except, "127.0.0.0/8")
	require.Equal(t, []HostAlias{{IP: "93.184.216.7", Hostnames: []string{"api.example.com"}}}, p.Pod.Spec.HostAliases)
	require.Equal(t, "api.example.com:8000-8010", p.Allow[2].Dest)
	require.Equal(t, []string{"93.184.216.7:8000-8010"}, p.Allow[2].Resolved)

	// A name that resolves into a special range opens nothing.
	o.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	s.Network.Allow = []string{"metadata.example:80"}
	_, err = Map(context.Background(), &s, []string{"true"}, o)
	require.ErrorContains(t, err, "special range 169.254.0.0/16")
	s.Network.Allow = []string{"[2001:db8::1]:443"}
	_, err = Map(context.Background(), &s, []string{"true"}, o)
	require.ErrorContains(t, err, "IPv6 destinations are not supported")
}

func TestMapRefuses(t *testing.T) {
	u := uint32(1234)
	for _, tc := range []struct {
		name, field string
		edit        func(*jail.Spec)
		o           Options
		allowable   bool
	}{
		{"no image", "image", func(s *jail.Spec) { s.Image = "" }, withProfile, false},
		{"bind", "mounts (bind /usr)", func(s *jail.Spec) { s.Mounts = []mounts.Mount{{Type: mounts.ROBind, Source: "/usr", Target: "/u"}} }, withProfile, false},
		{"host uid", "host_uid, host_gid", func(s *jail.Spec) { s.HostUID = &u }, withProfile, false},
		{"pids", "pids_max", func(s *jail.Spec) { s.PidsMax = 64 }, withProfile, true},
		{"cpu time", "cpu_time", func(s *jail.Spec) { s.CPUTime = jail.Duration(time.Second) }, withProfile, true},
		{"swap", "swap_max_bytes", func(s *jail.Spec) { s.MemoryMaxBytes, s.SwapMaxBytes = 1<<30, 1<<20 }, withProfile, true},
		{"seccomp not on the nodes", "seccomp", func(s *jail.Spec) {}, Options{}, true},
		{"uts without net", "disable_namespaces uts, net", func(s *jail.Spec) { s.DisableNamespaces = []string{"uts"} }, withProfile, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := strict(t)
			tc.edit(&s)
			_, err := Map(context.Background(), &s, []string{"true"}, tc.o)
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
			p, err := Map(context.Background(), &s, []string{"true"}, tc.o)
			if !tc.allowable {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			if tc.name == "seccomp not on the nodes" {
				require.Equal(t, "RuntimeDefault", p.Pod.Spec.SecurityContext.SeccompProfile.Type)
			}
		})
	}
}

// TestReport judges Pod states as the kubelet reports them (the test
// cluster has no kubelet: these states are the API's documented ones).
func TestReport(t *testing.T) {
	s := strict(t)
	p, err := Map(context.Background(), &s, []string{"true"}, withProfile)
	require.NoError(t, err)
	c := &Cmd{Spec: s, Args: []string{"true"}, plan: p, ctx: context.Background()}
	pod := func(phase, reason string, term *Terminated) *Pod {
		return &Pod{Status: &PodStatus{Phase: phase, Reason: reason, ContainerStatuses: []ContainerStatus{{Name: containerName, State: ContainerState{Terminated: term}}}}}
	}
	for _, tc := range []struct {
		name   string
		p      *Pod
		reason jail.Status
		status jail.Status
		code   int
		signal string
	}{
		{"exit 0", pod("Succeeded", "", &Terminated{ExitCode: 0, Reason: "Completed", StartedAt: "2026-11-27T10:00:00Z", FinishedAt: "2026-11-27T10:00:02Z"}), "", jail.StatusExited, 0, ""},
		{"exit 3", pod("Failed", "", &Terminated{ExitCode: 3, Reason: "Error"}), "", jail.StatusExited, 3, ""},
		{"oom", pod("Failed", "", &Terminated{ExitCode: 137, Reason: "OOMKilled"}), "", jail.StatusOOMKilled, 137, "KILL"},
		{"sigsys", pod("Failed", "", &Terminated{ExitCode: 159, Reason: "Error"}), "", jail.StatusSeccompKilled, 159, "SYS"},
		{"term", pod("Failed", "", &Terminated{ExitCode: 143, Reason: "Error"}), "", jail.StatusSignaled, 143, "TERM"},
		{"deadline", pod("Failed", "DeadlineExceeded", &Terminated{ExitCode: 137, Reason: "Error"}), "", jail.StatusTimedOut, 124, ""},
		{"our timeout", pod("Running", "", &Terminated{ExitCode: 137}), jail.StatusTimedOut, jail.StatusTimedOut, 124, ""},
		{"never started", &Pod{Status: &PodStatus{Phase: "Pending"}}, jail.StatusTimedOut, jail.StatusSetupError, 125, ""},
		{"not found", pod("Failed", "", &Terminated{ExitCode: 128, Reason: "StartError", Message: "exec: \"x\": executable file not found"}), "", jail.StatusSetupError, 127, ""},
		{"not executable", pod("Failed", "", &Terminated{ExitCode: 128, Reason: "StartError", Message: "exec: \"/etc/passwd\": permission denied"}), "", jail.StatusSetupError, 126, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.report(tc.p, tc.reason, nil)
			require.Equal(t, tc.status, r.Status)
			require.Equal(t, tc.code, r.ExitCode)
			require.Equal(t, tc.signal, r.Signal)
			require.Equal(t, jail.BackendK8s, r.Isolation.Backend)
			if tc.name == "exit 0" {
				require.Equal(t, int64(2000), r.WallTimeMS)
			}
		})
	}
	r := c.report(nil, "", errors.New("ErrImagePull: no such image"))
	require.Equal(t, jail.StatusSetupError, r.Status)
	require.Equal(t, "pod", r.Error.Step)
}

// TestAdmitted: what admission may change in a stored Pod refuses the run;
// what the API server only rewrites (a quantity's form) does not.
func TestAdmitted(t *testing.T) {
	s := strict(t)
	s.MemoryMaxBytes, s.TmpSizeBytes = 64<<20, 125<<20
	p, err := Map(context.Background(), &s, []string{"true"}, withProfile)
	require.NoError(t, err)
	stored := func(g *Pod) []byte {
		b, err := json.Marshal(g)
		require.NoError(t, err)
		return b
	}
	clone := func() Pod {
		g := p.Pod
		g.Spec.Containers = slices.Clone(p.Pod.Spec.Containers)
		g.Spec.Volumes = slices.Clone(p.Pod.Spec.Volumes)
		return g
	}
	same := clone()
	same.Spec.Containers[0].Args = nil
	same.Spec.Containers[0].Resources = ResourceRequirements{Limits: map[string]string{"memory": "64Mi"}, Requests: map[string]string{"memory": "67108864"}}
	for i, v := range same.Spec.Volumes {
		if v.EmptyDir.SizeLimit == "131072000" {
			e := *v.EmptyDir
			e.SizeLimit = "131072k" // as kube-apiserver v1.36 stores it (found by review)
			same.Spec.Volumes[i].EmptyDir = &e
		}
	}
	require.NoError(t, admitted(&p.Pod, &same, stored(&same)), "empty args, a quantity's form")
	tr := true
	for name, change := range map[string]func(*Pod){
		"sidecar":   func(g *Pod) { g.Spec.Containers = append(g.Spec.Containers, Container{Name: "proxy"}) },
		"init":      func(g *Pod) { g.Spec.InitContainers = []Container{{Name: "init"}} },
		"volume":    func(g *Pod) { g.Spec.Volumes = append(g.Spec.Volumes, Volume{Name: "token"}) },
		"run label": func(g *Pod) { g.Metadata.Labels = map[string]string{LabelManaged: "1"} },
		"capability": func(g *Pod) {
			g.Spec.Containers[0].SecurityContext = &ContainerSecurityCtx{Capabilities: &Capabilities{Add: []string{"NET_RAW"}}}
		},
		"token":       func(g *Pod) { g.Spec.AutomountServiceAccountToken = &tr },
		"pod context": func(g *Pod) { g.Spec.SecurityContext = &PodSecurityContext{} },
		"host users":  func(g *Pod) { g.Spec.HostUsers = &tr },
		"memory":      func(g *Pod) { g.Spec.Containers[0].Resources.Limits = map[string]string{"memory": "1Gi"} },
		"env": func(g *Pod) {
			g.Spec.Containers[0].Env = append(g.Spec.Containers[0].Env, EnvVar{"LD_PRELOAD", "/x.so"})
		},
	} {
		g := clone()
		change(&g)
		require.Error(t, admitted(&p.Pod, &g, stored(&g)), name)
	}
	// Fields jail's types do not have: seen in the raw Pod.
	for name, raw := range map[string]string{
		"container runAsUser": `{"spec":{"containers":[{"securityContext":{"runAsUser":0}}]}}`,
		"pod sysctls":         `{"spec":{"securityContext":{"sysctls":[{"name":"x","value":"1"}]}}}`,
		"shared pids":         `{"spec":{"shareProcessNamespace":true}}`,
		"envFrom":             `{"spec":{"containers":[{"envFrom":[{"secretRef":{"name":"s"}}]}]}}`,
	} {
		g := clone()
		require.Error(t, admitted(&p.Pod, &g, []byte(raw)), name)
	}
}

func TestParseQuantity(t *testing.T) {
	for s, want := range map[string]int64{"131072000": 131072000, "131072k": 131072000, "64Mi": 64 << 20, "1Gi": 1 << 30, "5e3": 5000, "2G": 2e9} {
		n, ok := parseQuantity(s)
		require.True(t, ok, s)
		require.Equal(t, want, n, s)
	}
	for _, s := range []string{"", "1.5Gi", "12x", "Mi"} {
		_, ok := parseQuantity(s)
		require.False(t, ok, s)
	}
}
