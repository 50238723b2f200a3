package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/k8s"
)

// These tests run `jail run --backend k8s` against the suite's own
// kube-apiserver (kubeapi_test.go). It has no kubelet: a Pod is stored,
// validated and deleted as on any cluster, but never scheduled. So they
// check what the API server holds while jail runs, that a run whose Pod
// never starts ends as a setup error at its timeout, and that nothing is
// left; the judgement of a container's end is unit-tested on the states
// the API documents (backend/k8s TestReport).

func kubeJail(t *testing.T, kubeconfig, ns string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	full := append([]string{args[0], "--kubeconfig", kubeconfig, "--namespace", ns}, args[1:]...)
	return jailCmd(ctx, full...)
}

func runKube(t *testing.T, kubeconfig, ns string, args ...string) result {
	t.Helper()
	return runJailCmd(t, kubeJail(t, kubeconfig, ns, args...))
}

func kubeClient(t *testing.T, kubeconfig string) *k8s.Client {
	t.Helper()
	c, err := k8s.NewClient(kubeconfig)
	require.NoError(t, err)
	return c
}

// requireNoKubeObjects fails if the namespace holds a Pod or policy of
// jail's.
func requireNoKubeObjects(t *testing.T, c *k8s.Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		pods, err := c.ListPods(ctx, ns, k8s.LabelManaged)
		require.NoError(t, err)
		pols, err := c.ListPolicies(ctx, ns, k8s.LabelManaged)
		require.NoError(t, err)
		return len(pods) == 0 && len(pols) == 0
	}, 20*time.Second, 100*time.Millisecond, "objects left in %s", ns)
}

// waitPod waits for jail's one Pod in ns and returns it.
func waitPod(t *testing.T, c *k8s.Client, ns string) k8s.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pods []k8s.Pod
	require.Eventually(t, func() bool {
		var err error
		pods, err = c.ListPods(ctx, ns, k8s.LabelManaged)
		return err == nil && len(pods) == 1
	}, 30*time.Second, 50*time.Millisecond)
	return pods[0]
}

var kubeRunFlags = []string{"--backend", "k8s", "--image", "registry.example/jail-test:1", "--profile", "strict", "--k8s-seccomp-profile", "jail/strict.json"}

func TestK8sBackendPod(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	c := kubeJail(t, kc, ns, append(append([]string{"run", "--json"}, kubeRunFlags...), "--timeout", "4s", "--memory", "64M", "--cpus", "0.5", "--", "sh", "-c", "echo hi")...)
	var out bytes.Buffer
	c.Stdout = &out
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })

	// What the API server stored, as it stored it.
	pod := waitPod(t, cl, ns)
	ps := pod.Spec
	require.NotNil(t, ps.HostUsers, "this API server keeps hostUsers: false")
	require.False(t, *ps.HostUsers)
	require.Equal(t, "Never", ps.RestartPolicy)
	require.False(t, *ps.AutomountServiceAccountToken)
	require.Equal(t, int64(4), *ps.ActiveDeadlineSeconds)
	require.Equal(t, int64(1000), *ps.SecurityContext.RunAsUser)
	require.True(t, *ps.SecurityContext.RunAsNonRoot)
	require.Equal(t, "Localhost", ps.SecurityContext.SeccompProfile.Type)
	ct := ps.Containers[0]
	require.Equal(t, []string{"sh"}, ct.Command)
	require.True(t, *ct.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *ct.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []string{"ALL"}, ct.SecurityContext.Capabilities.Drop)
	require.Equal(t, "67108864", ct.Resources.Limits["memory"])
	require.Equal(t, "500m", ct.Resources.Requests["cpu"])
	require.NotEmpty(t, pod.Metadata.Annotations[k8s.AnnotationOwner])

	// Its policy selects it, and only it, and allows nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pols, err := cl.ListPolicies(ctx, ns, k8s.LabelManaged)
	require.NoError(t, err)
	require.Len(t, pols, 1)
	require.Equal(t, map[string]string{k8s.LabelRun: pod.Metadata.Labels[k8s.LabelRun]}, pols[0].Spec.PodSelector.MatchLabels)
	require.Empty(t, pols[0].Spec.Egress)
	require.ElementsMatch(t, []string{"Ingress", "Egress"}, pols[0].Spec.PolicyTypes)

	// No kubelet: the Pod stays Pending, and the run ends at its timeout
	// as a setup error, with both objects deleted.
	err = c.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, jail.ExitSetupError, ee.ExitCode())
	var res jail.Result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Equal(t, jail.StatusSetupError, res.Status)
	require.Contains(t, res.Error.Message, "did not start within the timeout: Pending")
	require.Equal(t, jail.BackendK8s, res.Isolation.Backend)
	require.Equal(t, "strict", res.Isolation.Seccomp)
	require.Equal(t, []string{"user", "pid", "mount", "net", "uts", "ipc", "cgroup"}, res.Isolation.Namespaces)
	requireNoKubeObjects(t, cl, ns)
}

func TestK8sBackendRefuses(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ro-bind", "/usr:/u"}, "mounts (bind /usr)"},
		{[]string{"--pids", "64"}, "pids_max"},
		{[]string{"--cpu-time", "1s"}, "cpu_time"},
		{[]string{"--host-uid", "1234"}, "host_uid"},
		{[]string{"--k8s-seccomp-profile", ""}, "seccomp: the nodes must hold the strict policy"},
		{[]string{"--stdin", "-"}, "--stdin"},
		{[]string{"--image", "UPPER CASE"}, "image"},
	} {
		r := runKube(t, kc, ns, append(append([]string{"run"}, kubeRunFlags...), append(tc.args, "--", "true")...)...)
		require.Equal(t, jail.ExitSetupError, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	// An image the API server refuses (invalid reference) is named.
	requireNoKubeObjects(t, cl, ns)
}

// TestK8sBackendSignals: SIGTERM to jail ends the run (canceled) and
// deletes both objects; a jail killed with SIGKILL cannot, and `jail check
// --clean` does, only for a jail process that is gone.
func TestK8sBackendSignals(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	args := append(append([]string{"run", "--json"}, kubeRunFlags...), "--timeout", "60s", "--", "sleep", "60")

	term := kubeJail(t, kc, ns, args...)
	var out bytes.Buffer
	term.Stdout = &out
	require.NoError(t, term.Start())
	t.Cleanup(func() { _ = term.Process.Kill(); _ = term.Wait() })
	waitPod(t, cl, ns)
	require.NoError(t, term.Process.Signal(syscall.SIGTERM))
	err := term.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	var res jail.Result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.Equal(t, jail.StatusCanceled, res.Status)
	requireNoKubeObjects(t, cl, ns)

	killed := kubeJail(t, kc, ns, args...)
	require.NoError(t, killed.Start())
	victim := waitPod(t, cl, ns).Metadata.Name
	live := kubeJail(t, kc, ns, args...)
	require.NoError(t, live.Start())
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		pods, err := cl.ListPods(ctx, ns, k8s.LabelManaged)
		return err == nil && len(pods) == 2
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, killed.Process.Kill())
	_ = killed.Wait()

	r := runKube(t, kc, ns, "check", "--clean")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "removed kubernetes pod/"+victim)
	require.Contains(t, r.stdout, "removed kubernetes networkpolicy/"+victim)
	require.Equal(t, 2, strings.Count(r.stdout, "removed kubernetes"), "only the killed jail's: %s", r.stdout)
	pods, err := cl.ListPods(ctx, ns, k8s.LabelManaged)
	require.NoError(t, err)
	require.Len(t, pods, 1, "the live jail's Pod is left to it")

	require.NoError(t, live.Process.Signal(syscall.SIGTERM))
	_ = live.Wait()
	requireNoKubeObjects(t, cl, ns)
}

// TestK8sExport: what export prints is what the API server takes: each
// document is created with dryRun=All (validated, admitted, not stored).
func TestK8sExport(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	r := runKube(t, kc, ns, "export", "k8s", "--profile", "strict", "--image", "registry.example/jail-test:1",
		"--k8s-seccomp-profile", "jail/strict.json", "--memory", "64M", "--net", "egress", "--allow", "192.0.2.7:443", "--allow", "udp/198.51.100.0/24:53", "--", "sh", "-c", "echo hi")
	require.Equal(t, 0, r.code, r.stderr)
	docs := strings.Split(r.stdout, "\n---\n")
	require.Len(t, docs, 2)
	api := testKubeAPI(t) // the test's own client, not the product's
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, path := range []string{"/api/v1/namespaces/" + ns + "/pods", "/apis/networking.k8s.io/v1/namespaces/" + ns + "/networkpolicies"} {
		body, err := yaml.YAMLToJSON([]byte(docs[i]))
		require.NoError(t, err)
		code, answer, err := api.call(ctx, http.MethodPost, path+"?dryRun=All&fieldValidation=Strict", json.RawMessage(body))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "%s: %s", path, answer)
	}
	require.Contains(t, r.stderr, "not enforced: network policy:")
	requireNoKubeObjects(t, cl, ns)
}
