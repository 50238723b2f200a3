package k8s

// The Kubernetes objects jail sends and reads, with the fields it uses and
// the API's JSON names. They are written here rather than taken from
// k8s.io/api: linking k8s.io/api/core/v1 and networking/v1 costs every start
// of the one jail binary 0.8-0.9 ms of package inits, and client-go 7-9 ms
// and 21 MB (GODEBUG=inittrace=1, 3 runs each); a native `jail run` takes
// 8.4 ms in all. types_test.go decodes what jail sends into the official
// types with unknown fields refused, so that these stay the API's.

// ObjectMeta is metadata of an object.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	UID               string            `json:"uid,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
}

// Pod is a core/v1 Pod.
type Pod struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       PodSpec    `json:"spec"`
	Status     *PodStatus `json:"status,omitempty"`
}

// PodSpec is the Pod's spec.
type PodSpec struct {
	RestartPolicy                 string              `json:"restartPolicy"`
	HostUsers                     *bool               `json:"hostUsers,omitempty"`
	HostNetwork                   bool                `json:"hostNetwork,omitempty"`
	HostPID                       bool                `json:"hostPID,omitempty"`
	HostIPC                       bool                `json:"hostIPC,omitempty"`
	Hostname                      string              `json:"hostname,omitempty"`
	HostAliases                   []HostAlias         `json:"hostAliases,omitempty"`
	AutomountServiceAccountToken  *bool               `json:"automountServiceAccountToken"`
	EnableServiceLinks            *bool               `json:"enableServiceLinks"`
	ActiveDeadlineSeconds         *int64              `json:"activeDeadlineSeconds,omitempty"`
	TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds"`
	RuntimeClassName              *string             `json:"runtimeClassName,omitempty"`
	SecurityContext               *PodSecurityContext `json:"securityContext,omitempty"`
	InitContainers                []Container         `json:"initContainers,omitempty"`
	Containers                    []Container         `json:"containers"`
	Volumes                       []Volume            `json:"volumes,omitempty"`
}

// HostAlias pins names in the Pod's /etc/hosts.
type HostAlias struct {
	IP        string   `json:"ip"`
	Hostnames []string `json:"hostnames"`
}

// PodSecurityContext is the Pod's securityContext.
type PodSecurityContext struct {
	RunAsUser      *int64          `json:"runAsUser,omitempty"`
	RunAsGroup     *int64          `json:"runAsGroup,omitempty"`
	RunAsNonRoot   *bool           `json:"runAsNonRoot,omitempty"`
	SeccompProfile *SeccompProfile `json:"seccompProfile,omitempty"`
}

// SeccompProfile names the seccomp profile: RuntimeDefault, Localhost (a
// file in the kubelet's seccomp directory on the node) or Unconfined.
type SeccompProfile struct {
	Type             string  `json:"type"`
	LocalhostProfile *string `json:"localhostProfile,omitempty"`
}

// Container is the Pod's one container.
type Container struct {
	Name            string                `json:"name"`
	Image           string                `json:"image"`
	Command         []string              `json:"command"`
	Args            []string              `json:"args,omitempty"`
	Env             []EnvVar              `json:"env,omitempty"`
	WorkingDir      string                `json:"workingDir,omitempty"`
	Resources       ResourceRequirements  `json:"resources"`
	VolumeMounts    []VolumeMount         `json:"volumeMounts,omitempty"`
	SecurityContext *ContainerSecurityCtx `json:"securityContext"`
}

// EnvVar is one variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ResourceRequirements are limits and requests ("memory": "268435456",
// "cpu": "500m").
type ResourceRequirements struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

// VolumeMount mounts a volume in the container.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// ContainerSecurityCtx is the container's securityContext.
type ContainerSecurityCtx struct {
	ReadOnlyRootFilesystem   *bool         `json:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool         `json:"allowPrivilegeEscalation"`
	Privileged               *bool         `json:"privileged"`
	Capabilities             *Capabilities `json:"capabilities"`
	ProcMount                *string       `json:"procMount,omitempty"`
}

// Capabilities to add and drop.
type Capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop"`
}

// Volume is a memory-backed emptyDir.
type Volume struct {
	Name     string          `json:"name"`
	EmptyDir *EmptyDirSource `json:"emptyDir"`
}

// EmptyDirSource is an emptyDir's source.
type EmptyDirSource struct {
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// PodStatus is what jail reads of a Pod's status.
type PodStatus struct {
	Phase             string            `json:"phase,omitempty"`
	Reason            string            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses,omitempty"`
}

// ContainerStatus is the container's state.
type ContainerStatus struct {
	Name  string         `json:"name"`
	State ContainerState `json:"state"`
}

// ContainerState is one of waiting, running or terminated.
type ContainerState struct {
	Waiting *struct {
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	} `json:"waiting,omitempty"`
	Running *struct {
		StartedAt string `json:"startedAt,omitempty"`
	} `json:"running,omitempty"`
	Terminated *Terminated `json:"terminated,omitempty"`
}

// Terminated is a container's end.
type Terminated struct {
	ExitCode   int    `json:"exitCode"`
	Signal     int    `json:"signal,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	StartedAt  string `json:"startedAt,omitempty"`
	FinishedAt string `json:"finishedAt,omitempty"`
}

// NetworkPolicy is a networking.k8s.io/v1 NetworkPolicy.
type NetworkPolicy struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   ObjectMeta        `json:"metadata"`
	Spec       NetworkPolicySpec `json:"spec"`
}

// NetworkPolicySpec selects the Pod and lists what it may reach.
type NetworkPolicySpec struct {
	PodSelector LabelSelector       `json:"podSelector"`
	PolicyTypes []string            `json:"policyTypes"`
	Ingress     []NetworkPolicyRule `json:"ingress,omitempty"`
	Egress      []NetworkPolicyRule `json:"egress,omitempty"`
}

// LabelSelector matches labels.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// NetworkPolicyRule is one egress rule: destinations and ports.
type NetworkPolicyRule struct {
	To    []NetworkPolicyPeer `json:"to,omitempty"`
	Ports []NetworkPolicyPort `json:"ports,omitempty"`
}

// NetworkPolicyPeer is an address block.
type NetworkPolicyPeer struct {
	IPBlock *IPBlock `json:"ipBlock,omitempty"`
}

// IPBlock is a CIDR, less the CIDRs of Except.
type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// NetworkPolicyPort is a protocol and a port or port range.
type NetworkPolicyPort struct {
	Protocol string `json:"protocol"`
	Port     *int32 `json:"port,omitempty"`
	EndPort  *int32 `json:"endPort,omitempty"`
}
