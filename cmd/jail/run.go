package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/backend/k8s"
	"github.com/jailrt/jail/internal/hostfs"
	"github.com/jailrt/jail/internal/sigpipe"
	"github.com/jailrt/jail/mounts"
	"github.com/jailrt/jail/netns"
	"github.com/jailrt/jail/profiles"
)

// runFlags are `jail run`'s flags; each overrides the profile's field when
// given.
type runFlags struct {
	profile                         string
	binds, roBinds, tmpfs           []string
	rootfs                          string
	env                             []string
	envFile                         string
	cwd, hostname                   string
	uid, gid, hostUID, hostGID      string
	timeout, killGrace              time.Duration
	outputLimit, tmpSize, shmSize   string
	ptyMax                          int
	memory, swap                    string
	pids                            int64
	cpus                            float64
	cpuWeight, ioWeight             uint64
	cpuTime                         time.Duration
	cgroupParent                    string
	rlimits                         []string
	stdin                           string
	asJSON, tty, interactive        bool
	report                          string
	allowUnenforced, allowSensitive bool
	seccomp, landlock               string
	seccompLog                      bool
	noNS                            map[string]*bool
	net, netPool                    string
	allow                           []string
	netLog                          int
	backend, image                  string
	backendReason                   string // set by runJail for --backend auto
	kube                            kubeFlags
	language, code, tests, compare  string
	annotate                        func(*jail.Result) // a runner's: its language and compile, on the run's result
}

// kubeFlags are the k8s backend's settings: where a Pod runs, not what it
// may do (the Spec's).
type kubeFlags struct {
	kubeconfig, namespace, runtimeClass, seccompProfile string
}

func (k *kubeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "with --backend k8s, the kubeconfig `FILE` (default $KUBECONFIG, ~/.kube/config, or the in-cluster service account); a token or client certificate, no exec plugins")
	fl.StringVar(&k.namespace, "namespace", "", "with --backend k8s, the `NAMESPACE` of the Pod and its NetworkPolicy (default: the kubeconfig context's, else default)")
	fl.StringVar(&k.runtimeClass, "runtime-class", "", "with --backend k8s, the Pod's runtimeClassName, e.g. gvisor")
	fl.StringVar(&k.seccompProfile, "k8s-seccomp-profile", "", "with --backend k8s, the `PATH` below the kubelet's seccomp directory where every node holds the Spec's policy (from `jail seccomp export NAME`), e.g. jail/strict.json; without it the runtime's default profile applies, which is refused unless --allow-unenforced")
}

func (k *kubeFlags) options() k8s.Options {
	return k8s.Options{Namespace: k.namespace, RuntimeClass: k.runtimeClass, SeccompProfile: k.seccompProfile}
}

func newRunFlags() *runFlags { return &runFlags{noNS: map[string]*bool{}} }

func newRunCommand(stdout, stderr io.Writer) *cobra.Command {
	f := newRunFlags()
	var printSpec bool
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run a command in a jail",
		Long: `run starts COMMAND in a jail built from a profile (default: "default") and the flags, which
override the profile. COMMAND without a slash is searched in the jail's PATH.

Output: by default the command's stdin, stdout and stderr are jail's own (streaming). With --json,
stdout and stderr are captured (head and tail up to --output-limit each) and jail prints exactly one
JSON document (schema jail.result/v1) on its stdout. --report FILE writes that document to FILE in
either mode.

Code: --language L --code FILE runs a piece of code by the runner lang-L (compiled first, in a jail
of its own, for c, cpp, go, rust); the args after -- go to the program. --tests FILE|DIR judges it:
one fresh jail per test, a verdict per test. --print-spec prints the Spec the profile and flags make,
and runs nothing.

Exit status: the command's own; 128+N when it was killed by signal N; 124 when --timeout passed;
125 when jail itself failed or the input was bad; 126 or 127 when the command could not be executed
or was not found; 1 for a compile error, and in judge mode when a test was not accepted.`,
		Example: `  jail run --profile strict -- sh -c 'id; echo hi'
  jail run --json --timeout 2s --ro-bind ./solution:/work -- python3 /work/main.py
  jail run --rootfs /srv/debian --tmpfs /scratch:size=16M -- /bin/bash
  jail run --language python --code main.py --stdin input.txt
  jail run --language cpp --code sol.cpp --tests tests/ --timeout 1s --memory 256M
  jail run --print-spec --profile judge.yaml --memory 512M`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !printSpec && f.language == "" && f.code == "" {
				return usageError("command: missing (give it after --)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if printSpec {
				return printRunSpec(cmd, f, stdout, stderr)
			}
			return runJail(cmd, f, args, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&f.language, "language", "", "run the code of --code in `LANGUAGE` by its runner, the built-in profile lang-LANGUAGE (see jail languages): python, node, typescript, sh, bash, c, cpp, go, rust; compiled languages are compiled in a jail of their own first; the args after -- go to the program")
	fl.StringVar(&f.code, "code", "", "with --language (or a runner's --profile), the code: a `FILE`, or - to read it from stdin (the program's stdin is then none unless --stdin names one)")
	fl.StringVar(&f.tests, "tests", "", "judge mode, with --code: compile once, run each test of `FILE|DIR` (a YAML or JSON list of {name, stdin, expected_stdout}, or a directory of N.in and N.out files) in a fresh jail with the run's limits, and report a verdict per test (accepted, wrong_answer, time_limit, memory_limit, runtime_error, compile_error); exit 0 when every test is accepted, 1 otherwise")
	fl.StringVar(&f.compare, "compare", "exact", "with --tests, how outputs are compared: exact (the same bytes) or whitespace (the same words)")
	fl.BoolVar(&printSpec, "print-spec", false, "print the Spec the profile and the flags make, as JSON, check it on this host and exit: nothing runs (exit 125 if it is not valid)")
	fl.StringVar(&f.stdin, "stdin", "-", "the command's stdin: - (jail's own; with --json the default is none), none (/dev/null), or a FILE (a regular file, fed through a pipe; a pipe, handed over as it is; /dev/fd/N for <(cmd))")
	fl.BoolVar(&f.asJSON, "json", false, "capture stdout and stderr and print the result as one JSON document")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a terminal of its own (a new pty inside the jail), relayed to yours in raw mode; stdout and stderr become one stream; not with --json")
	fl.StringVar(&f.report, "report", "", "also write the JSON result to `FILE` (replaced by a new file; its directory is opened before the run)")
	return cmd
}

// register adds the flags that describe the jail (all of `jail run`'s but
// its input and output) to fl; `jail selftest` takes the same ones.
func (f *runFlags) register(fl *pflag.FlagSet) {
	fl.SetInterspersed(false) // everything after the command is its own
	fl.StringVar(&f.profile, "profile", "default", "profile: a built-in name (strict, default, net-egress, dev; see jail profile list) or a YAML/JSON file (docs/profiles.md)")
	fl.StringArrayVar(&f.binds, "bind", nil, "bind host `SRC[:DST]` read-write (repeatable)")
	fl.StringArrayVar(&f.roBinds, "ro-bind", nil, "bind host `SRC[:DST]` read-only (repeatable)")
	fl.StringArrayVar(&f.tmpfs, "tmpfs", nil, "mount a tmpfs at `DST[:size=SIZE]` (default size 64M; repeatable)")
	fl.StringVar(&f.backend, "backend", "", "the `BACKEND` that runs the jail: native (this host's kernel), docker (a container of the Docker engine at $DOCKER_HOST, default unix:///var/run/docker.sock; needs --image), k8s (a Pod of the cluster of --kubeconfig; needs --image) or auto (the first of native, docker, k8s that can run here; the report says which and why) (default: the profile's, native)")
	fl.StringVar(&f.image, "image", "", "with --backend docker or k8s, the image `REF` the jail runs from (its read-only root), e.g. python:3.12-slim; make one from a directory with: tar -C DIR -c . | docker import - NAME")
	f.kube.register(fl)
	fl.StringVar(&f.rootfs, "rootfs", "", "use host directory `DIR` as the read-only root instead of the default tmpfs root")
	fl.StringArrayVar(&f.env, "env", nil, "set `KEY=VALUE` in the jail's environment (repeatable; added to the profile's)")
	fl.StringVar(&f.envFile, "env-file", "", "read KEY=VALUE lines from `FILE` (# comments and blank lines skipped; a regular file, or a pipe as /dev/fd/N)")
	fl.StringVar(&f.cwd, "cwd", "", "working directory inside the jail (default /tmp)")
	fl.StringVar(&f.hostname, "hostname", "", "hostname inside the jail (default jail)")
	fl.StringVar(&f.uid, "uid", "", "user id inside the jail (default 1000)")
	fl.StringVar(&f.gid, "gid", "", "group id inside the jail (default 1000)")
	fl.StringVar(&f.hostUID, "host-uid", "", "host user id the jail's uid maps to when run as root (default 65534)")
	fl.StringVar(&f.hostGID, "host-gid", "", "host group id the jail's gid maps to when run as root (default 65534)")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit; then every process in the jail is killed (0: none; strict 10s, default 60s)")
	fl.DurationVar(&f.killGrace, "kill-grace", 0, "at the timeout send SIGTERM first and SIGKILL after this long")
	fl.StringVar(&f.outputLimit, "output-limit", "", "bytes of stdout and of stderr kept with --json (head and tail), e.g. 1M")
	fl.StringVar(&f.tmpSize, "tmp-size", "", "size of the jail's /tmp, e.g. 64M")
	fl.StringVar(&f.shmSize, "shm-size", "", "size of the jail's /dev/shm, e.g. 16M (strict 16M, default 64M)")
	fl.IntVar(&f.ptyMax, "pty-max", 0, "most pseudo-terminals the jail may have at once, at most 4096 (default 16)")
	fl.StringVar(&f.memory, "memory", "", "memory limit of the whole jail (cgroup), e.g. 256M; beyond it the OOM killer ends the run (oom_killed)")
	fl.StringVar(&f.swap, "swap", "", "swap the jail may use beyond --memory (default: none)")
	fl.Int64Var(&f.pids, "pids", 0, "most processes and threads the jail may have at once (cgroup pids.max)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU bandwidth in CPUs, e.g. 0.5 (cgroup cpu.max)")
	fl.Uint64Var(&f.cpuWeight, "cpu-weight", 0, "share of contended CPU, 1-10000 (100 is the default)")
	fl.Uint64Var(&f.ioWeight, "io-weight", 0, "share of contended block I/O, 1-10000 (100 is the default)")
	fl.DurationVar(&f.cpuTime, "cpu-time", 0, "CPU time all processes of the jail may use together, e.g. 5s; then it is killed (cpu_time_exceeded)")
	fl.StringVar(&f.cgroupParent, "cgroup-parent", "", "create the jail's cgroup under `CGROUP` instead of jail's own cgroup (relative, /absolute, or a /sys/fs/cgroup/... directory)")
	fl.StringArrayVar(&f.rlimits, "rlimit", nil, "resource limit `NAME=SOFT[:HARD]`, e.g. nofile=256 or stack=8388608:unlimited (repeatable)")
	fl.StringVar(&f.seccomp, "seccomp", "", "seccomp policy: a built-in `NAME` (default, strict), a policy FILE, or none (see `jail seccomp list`; default: the profile's)")
	fl.StringVar(&f.landlock, "landlock", "", "the Landlock second wall: auto (what this kernel has; the report says what it lacks), require (refuse a kernel below ABI 6, unless --allow-unenforced; needs a mount namespace), or off (default auto)")
	fl.BoolVar(&f.seccompLog, "seccomp-log", false, "report every call the seccomp policy denies (seccomp_denials), not only kills")
	fl.BoolVar(&f.allowUnenforced, "allow-unenforced", false, "run even if something asked for cannot be enforced here; the report lists it")
	fl.BoolVar(&f.allowSensitive, "allow-sensitive-sources", false, "allow every sensitive bind source: under /proc, /sys, /dev, /boot, /run, credentials (~/.ssh, ~/.aws...), a home directory, the whole /etc, /home or /; the report lists them")
	fl.StringVar(&f.net, "net", "", "the jail's network: none (its own namespace, lo only), host (the host's: trusted uses only; --no-netns says the same) or egress (only the --allow destinations, enforced in the kernel: on the host's end of a veth for root; for an unprivileged caller, through pasta with the rules in the jail's namespace) (default: the profile's, none)")
	fl.StringArrayVar(&f.allow, "allow", nil, "with --net egress, a destination the jail may reach: `[tcp/|udp/]DEST[:PORT[-PORT]]`, DEST an IPv4 address, CIDR or host name (resolved here, pinned in the jail's /etc/hosts); TCP and every port by default; private and link-local ranges and this host only when named (repeatable)")
	fl.IntVar(&f.netLog, "net-log", 0, "with --net egress, record up to `N` distinct refused destinations (address, protocol, port) in the report's network.denied_destinations (at most 1024)")
	fl.StringVar(&f.netPool, "net-pool", "", "with --net egress, the IPv4 `CIDR` egress jails take a /30 from (default "+netns.DefaultPool+")")
	for _, ns := range jail.Namespaces {
		help := "do not create a " + ns + " namespace (trusted uses only)"
		if ns == "net" {
			help = "share the host's network: --net host"
		}
		f.noNS[ns] = fl.Bool("no-"+ns+"ns", false, help)
	}
}

func parseID(flag, s string) (*uint32, error) {
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return nil, usageError("--%s %q: want a number from 0 to 4294967294", flag, s)
	}
	v := uint32(n)
	return &v, nil
}

// buildSpec loads the profile and lays the flags that were given over it
// by the profiles' merge rules (profiles.Apply): --env, --rlimit and the
// mounts by key, --allow added to the profile's list, the rest replacing
// the profile's field.
func buildSpec(cmd *cobra.Command, f *runFlags) (jail.Spec, error) {
	_, s, err := buildProfile(cmd, f)
	return s, err
}

// buildProfile is buildSpec, with the profile it loaded: --language L
// names the profile lang-L.
func buildProfile(cmd *cobra.Command, f *runFlags) (*profiles.Profile, jail.Spec, error) {
	name := f.profile
	if f.language != "" {
		if cmd.Flags().Changed("profile") {
			return nil, jail.Spec{}, usageError("--language: not with --profile (a profile file that extends lang-%s runs its code with --code alone)", f.language)
		}
		if _, err := runnerProfile(f.language); err != nil {
			return nil, jail.Spec{}, err
		}
		name = "lang-" + f.language
	}
	p, err := profiles.Load(name)
	if err != nil {
		return nil, jail.Spec{}, usageError("--profile: %v", err)
	}
	over, set, err := flagLayer(cmd, f)
	if err != nil {
		return nil, jail.Spec{}, err
	}
	return p, profiles.Apply(p.Spec, over, set), nil
}

// flagLayer is the partial Spec the flags that were given say, and the
// JSON names of the fields they set.
func flagLayer(cmd *cobra.Command, f *runFlags) (jail.Spec, []string, error) {
	var s jail.Spec
	var set []string
	changed := cmd.Flags().Changed
	field := func(flag, key string) bool {
		if changed(flag) {
			set = append(set, key)
			return true
		}
		return false
	}
	for _, m := range []struct {
		typ  mounts.Type
		flag string
		args []string
	}{{mounts.Bind, "bind", f.binds}, {mounts.ROBind, "ro-bind", f.roBinds}, {mounts.Tmpfs, "tmpfs", f.tmpfs}} {
		for _, a := range m.args {
			mm, err := mounts.Parse(m.typ, a)
			if err != nil {
				return s, nil, usageError("--%s %q: %v", m.flag, a, err)
			}
			s.Mounts = append(s.Mounts, mm)
		}
	}
	if len(s.Mounts) > 0 {
		set = append(set, "mounts")
	}
	if field("rootfs", "root") {
		s.Root = f.rootfs
	}
	if field("backend", "backend") {
		s.Backend = f.backend
	}
	if field("image", "image") {
		s.Image = f.image
	}
	if f.envFile != "" {
		lines, err := readEnvFile(f.envFile)
		if err != nil {
			return s, nil, usageError("--env-file %q: %v", f.envFile, err)
		}
		s.Env = append(s.Env, lines...)
	}
	for _, e := range f.env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return s, nil, usageError("--env %q: want KEY=VALUE", e)
		}
	}
	s.Env = append(s.Env, f.env...)
	if len(s.Env) > 0 {
		set = append(set, "env")
	}
	if field("cwd", "cwd") {
		s.Cwd = f.cwd
	}
	if field("seccomp", "seccomp") {
		s.Seccomp = f.seccomp
	}
	if field("landlock", "landlock") {
		s.Landlock = f.landlock
	}
	if field("seccomp-log", "seccomp_log") {
		s.SeccompLog = f.seccompLog
	}
	if field("hostname", "hostname") {
		s.Hostname = f.hostname
	}
	for _, id := range []struct {
		flag, key, val string
		dst            **uint32
	}{{"uid", "uid", f.uid, &s.UID}, {"gid", "gid", f.gid, &s.GID}, {"host-uid", "host_uid", f.hostUID, &s.HostUID}, {"host-gid", "host_gid", f.hostGID, &s.HostGID}} {
		v, err := parseID(id.flag, id.val)
		if err != nil {
			return s, nil, err
		}
		if v != nil {
			*id.dst = v
			set = append(set, id.key)
		}
	}
	for _, d := range []struct {
		flag, key string
		val       time.Duration
		dst       *jail.Duration
	}{{"timeout", "timeout", f.timeout, &s.Timeout}, {"kill-grace", "kill_grace", f.killGrace, &s.KillGrace}, {"cpu-time", "cpu_time", f.cpuTime, &s.CPUTime}} {
		if !changed(d.flag) {
			continue
		}
		if d.val < 0 {
			return s, nil, usageError("--%s %s: must not be negative", d.flag, d.val)
		}
		*d.dst = jail.Duration(d.val)
		set = append(set, d.key)
	}
	for _, sz := range []struct {
		flag, key, val string
		dst            *int64
	}{{"output-limit", "output_limit_bytes", f.outputLimit, &s.OutputLimitBytes}, {"tmp-size", "tmp_size_bytes", f.tmpSize, &s.TmpSizeBytes},
		{"shm-size", "shm_size_bytes", f.shmSize, &s.ShmSizeBytes}, {"memory", "memory_max_bytes", f.memory, &s.MemoryMaxBytes},
		{"swap", "swap_max_bytes", f.swap, &s.SwapMaxBytes}} {
		if sz.val == "" {
			continue
		}
		n, err := mounts.ParseSize(sz.val)
		if err != nil {
			return s, nil, usageError("--%s %q: %v", sz.flag, sz.val, err)
		}
		*sz.dst = n
		set = append(set, sz.key)
	}
	if field("pty-max", "pty_max") {
		s.PtyMax = f.ptyMax
	}
	if field("pids", "pids_max") {
		s.PidsMax = f.pids
	}
	if field("cpus", "cpus") {
		s.CPUs = f.cpus
	}
	if field("cpu-weight", "cpu_weight") {
		s.CPUWeight = f.cpuWeight
	}
	if field("io-weight", "io_weight") {
		s.IOWeight = f.ioWeight
	}
	if field("cgroup-parent", "cgroup_parent") {
		s.CgroupParent = f.cgroupParent
	}
	for _, r := range f.rlimits {
		rl, err := parseRlimit(r)
		if err != nil {
			return s, nil, usageError("--rlimit %q: %v", r, err)
		}
		s.Rlimits = append(s.Rlimits, rl)
	}
	if len(s.Rlimits) > 0 {
		set = append(set, "rlimits")
	}
	if field("allow-unenforced", "allow_unenforced") {
		s.AllowUnenforced = f.allowUnenforced
	}
	if field("allow-sensitive-sources", "allow_sensitive_sources") {
		s.AllowSensitiveSources = jail.SensitiveSources{All: f.allowSensitive}
	}
	for _, ns := range jail.Namespaces {
		if *f.noNS[ns] {
			s.DisableNamespaces = append(s.DisableNamespaces, ns)
		}
	}
	if len(s.DisableNamespaces) > 0 {
		set = append(set, "disable_namespaces")
	}
	switch {
	case changed("net"):
		s.Network.Mode = f.net // with --no-netns, validation refuses a mode other than host
		set = append(set, "network.mode")
	case *f.noNS["net"]:
		s.Network.Mode = jail.NetworkHost
		set = append(set, "network.mode")
	}
	if field("allow", "network.allow") {
		s.Network.Allow = f.allow
	}
	if field("net-pool", "network.pool") {
		s.Network.Pool = f.netPool
	}
	if field("net-log", "network.log_denied") {
		s.Network.LogDenied = f.netLog
	}
	return s, set, nil
}

// printRunSpec prints the Spec a run would get, then validates it.
func printRunSpec(cmd *cobra.Command, f *runFlags, stdout, stderr io.Writer) error {
	spec, err := buildSpec(cmd, f)
	if err != nil {
		return err
	}
	if err := printJSON(stdout, spec); err != nil {
		return err
	}
	warn(stderr, spec)
	if err := spec.Validate(); err != nil {
		return usageError("%v", err)
	}
	return nil
}

// warn prints spec's warnings (jail.Spec.Warnings), a line each.
func warn(stderr io.Writer, spec jail.Spec) {
	for _, w := range spec.Warnings() {
		fmt.Fprintln(stderr, marker(), "warning:", w)
	}
}

func parseRlimit(s string) (jail.Rlimit, error) {
	name, val, ok := strings.Cut(s, "=")
	if !ok {
		return jail.Rlimit{}, errors.New("want NAME=SOFT[:HARD]")
	}
	softS, hardS, hasHard := strings.Cut(val, ":")
	soft, err := jail.ParseRlimitValue(softS)
	if err != nil {
		return jail.Rlimit{}, err
	}
	hard := soft
	if hasHard {
		if hard, err = jail.ParseRlimitValue(hardS); err != nil {
			return jail.Rlimit{}, err
		}
	}
	return jail.Rlimit{Name: name, Soft: soft, Hard: hard}, nil
}

// maxEnvFileBytes bounds an --env-file.
const maxEnvFileBytes = 1 << 20

// readEnvFile reads KEY=VALUE lines. The file is opened as every host path
// jail reads: no symlinks in its path, a regular file or an inherited pipe.
func readEnvFile(path string) ([]string, error) {
	data, err := hostfs.ReadFile(path, maxEnvFileBytes)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxEnvFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, _, ok := strings.Cut(line, "="); !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

func runJail(cmd *cobra.Command, f *runFlags, args []string, stdout, stderr io.Writer) error {
	p, spec, err := buildProfile(cmd, f)
	if err != nil {
		return err
	}
	if f.language != "" || f.code != "" {
		return runCode(cmd, f, p, spec, args, stdout, stderr)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	backend, reason, err := chooseBackend(ctx, &spec, f.kube.kubeconfig)
	if err != nil {
		return err
	}
	switch backend {
	case jail.BackendDocker:
		c := docker.Command(ctx, spec, args[0], args[1:]...)
		c.BackendReason = reason
		return runDocker(cmd, f, c, stdout, stderr)
	case jail.BackendK8s:
		return runK8s(cmd, f, spec, args, reason, stdout, stderr)
	}
	f.backendReason = reason
	warn(stderr, spec)
	return runCmd(cmd, f, jail.Command(ctx, spec, args[0], args[1:]...), stdout, stderr)
}

// runCmd runs c with run's input and output flags (--stdin, --json,
// --tty, --report) and turns its result into jail's exit status; `jail
// run` and `jail session exec` share it. It leaves the signals it
// forwards caught: the process is to exit once it returns.
func runCmd(cmd *cobra.Command, f *runFlags, c *jail.Cmd, stdout, stderr io.Writer) error {
	var err error
	c.Capture = f.asJSON
	var term *terminal
	if f.tty {
		if f.asJSON {
			return usageError("--tty: not with --json (a terminal's output is one stream, for a person)")
		}
		term = openTerminal(int(os.Stdin.Fd()))
		if term == nil {
			term = openTerminal(int(os.Stdout.Fd())) // for the size only
		}
		ws := term.size()
		c.TTY = &ws
	}
	rio, err := openRunIO(cmd, f)
	if err != nil {
		return err
	}
	defer rio.close()
	stdin, report := rio.stdinName, rio.report
	if rio.stdin != nil {
		c.Stdin = rio.stdin
	}
	if !f.asJSON {
		c.Stdout, c.Stderr = stdout, stderr
		if fh, ok := stdout.(*os.File); ok { // pass the descriptors through: no copying
			c.Stdout = fh
		}
	}

	// Signals to jail go to every process in the jail; the timeout still
	// applies to a workload that ignores them. They are caught by
	// sigpipe, not os/signal (no runtime thread: 0.4 ms less CPU a run,
	// internal/sigpipe), and
	// never released: jail exits once this returns, and a release would
	// only open a window in which a signal kills jail instead of being
	// passed to a jail that has ended (the pidfd makes that a no-op).
	sigs, err := sigpipe.Catch(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err != nil {
		return &exitError{code: jail.ExitSetupError, msg: err.Error()}
	}

	if term != nil && term.fd == int(os.Stdin.Fd()) && stdin == "-" {
		// Every key goes to the jail's terminal; the caller's is put back
		// as it was on every way out but SIGKILL.
		if err := term.makeRaw(); err != nil {
			return usageError("--tty: raw mode: %v", err)
		}
		defer term.restore()
	}
	var winches chan os.Signal
	if f.tty {
		winches = make(chan os.Signal, 1)
		signal.Notify(winches, winch)
	}
	runErr := c.Start()
	if runErr == nil {
		go func() {
			for {
				select {
				case s := <-sigs:
					_ = c.Signal(s)
				case <-winches:
					_ = c.Resize(term.size())
				}
			}
		}()
		runErr = c.Wait()
	}
	if c.Result != nil && f.backendReason != "" {
		c.Result.Isolation.BackendReason = f.backendReason
	}
	if f.annotate != nil {
		f.annotate(c.Result)
	}
	return finishRun(f, c.Result, runErr, report, stdout, stderr)
}

// runIO is a run's input and report file, opened before it starts.
type runIO struct {
	stdin     io.Reader // nil: none
	stdinName string    // "-", "none" or the file
	report    *hostfs.Output
	closers   []io.Closer
}

func (r *runIO) close() {
	for _, c := range r.closers {
		c.Close()
	}
}

// openRunIO opens --stdin and --report. The report's directory is opened
// now, before the workload runs.
func openRunIO(cmd *cobra.Command, f *runFlags) (*runIO, error) {
	r := &runIO{stdinName: f.stdin}
	if f.asJSON && !cmd.Flags().Changed("stdin") && !f.interactive {
		r.stdinName = "none" // a captured run reads no terminal unless told to
	}
	switch r.stdinName {
	case "-":
		r.stdin = os.Stdin
	case "none":
	default:
		in, err := hostfs.OpenInput(r.stdinName)
		if err != nil {
			return nil, usageError("--stdin %q: %v", r.stdinName, err)
		}
		r.closers = append(r.closers, in)
		r.stdin = in
	}
	if f.report != "" {
		out, err := hostfs.CreateOutput(f.report)
		if err != nil {
			r.close()
			return nil, usageError("--report %q: %v", f.report, err)
		}
		r.closers = append(r.closers, out)
		r.report = out
	}
	return r, nil
}

// finishRun writes the report (--report, --json) of a run that ended
// with r and runErr, and turns it into jail's exit status.
func finishRun(f *runFlags, r *jail.Result, runErr error, report *hostfs.Output, stdout, stderr io.Writer) error {
	if r == nil { // cannot happen: Start and Wait always set it
		return &exitError{code: jail.ExitSetupError, msg: fmt.Sprint(runErr)}
	}
	if report != nil {
		if err := writeReport(report, r); err != nil {
			fmt.Fprintf(stderr, "%s --report %q: %v\n", marker(), f.report, err)
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return &exitError{code: jail.ExitSetupError, msg: "writing the result: " + err.Error()}
		}
	}
	msg := ""
	switch {
	case r.Error != nil && runErr != nil:
		msg = runErr.Error()
		if errors.Is(runErr, jail.ErrInvalidSpec) || errors.Is(runErr, jail.ErrNotSupported) {
			msg = r.Error.Message
		}
	case r.SupervisorLost && !f.asJSON:
		msg = "supervisor lost: " + r.Error.Message // a streaming run says why its command was killed
	}
	if r.ExitCode == 0 {
		return nil
	}
	return &exitError{code: r.ExitCode, msg: msg}
}

// writeReport replaces the report file (see hostfs.Output: a fresh file
// renamed over the name, so nothing planted there is written through).
func writeReport(out *hostfs.Output, r *jail.Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return out.Write(append(b, '\n'), 0o644)
}
