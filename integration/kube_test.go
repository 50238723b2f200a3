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

func kubeJail(t testing.TB, kubeconfig, ns string, args ...string) *exec.Cmd {
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

func kubeClient(t testing.TB, kubeconfig string) *k8s.Client {
	t.Helper()
	c, err := k8s.NewClient(kubeconfig)
	require.NoError(t, err)
	return c
}

// requireNoKubeObjects fails if the namespace holds a Pod or policy of
// jail's.
func requireNoKubeObjects(t testing.TB, c *k8s.Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { // no require in here: it runs on another goroutine
		pods, err1 := c.ListPods(ctx, ns, k8s.LabelManaged)
		pols, err2 := c.ListPolicies(ctx, ns, k8s.LabelManaged)
		return err1 == nil && err2 == nil && len(pods) == 0 && len(pols) == 0
	}, 20*time.Second, 100*time.Millisecond, "objects left in %s", ns)
}

// waitPod waits for jail's one Pod in ns and returns it.
func waitPod(t testing.TB, c *k8s.Client, ns string) k8s.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pods []k8s.Pod
	require.Eventually(t, func() bool {
		var err error
		pods, err = c.ListPods(ctx, ns, k8s.LabelManaged)
		return err == nil && len(pods) == 1
	}, 30*time.Second, 10*time.Millisecond)
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
	require.Equal(t, "localhost/jail/strict.json", res.Isolation.Seccomp)
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

// setPodStatus writes the Pod's status through the API server, as a
// kubelet would: the test stands in for the node this cluster lacks.
func setPodStatus(t testing.TB, ns, name string, status map[string]any) {
	t.Helper()
	api := testKubeAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := "/api/v1/namespaces/" + ns + "/pods/" + name
	code, b, err := api.call(ctx, http.MethodGet, path, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", b)
	var pod map[string]any
	require.NoError(t, json.Unmarshal(b, &pod))
	pod["status"] = status
	code, b, err = api.call(ctx, http.MethodPut, path+"/status", pod)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", b)
}

// TestK8sBackendStatus: the report judges real Pod objects whose status
// the test writes through the API server, as a kubelet would. This proves
// the API side of a run (the watch, the judgement, the deletion), not a
// node: this cluster has none.
func TestK8sBackendStatus(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	const started, finished = "2026-11-27T10:00:00Z", "2026-11-27T10:00:03Z"
	container := func(state map[string]any) map[string]any {
		return map[string]any{"name": "jail", "image": "registry.example/jail-test:1", "imageID": "", "ready": false, "restartCount": 0, "state": state}
	}
	terminated := func(code int, reason, msg string) map[string]any {
		return map[string]any{"terminated": map[string]any{"exitCode": code, "reason": reason, "message": msg, "startedAt": started, "finishedAt": finished}}
	}
	for _, tc := range []struct {
		name   string
		status map[string]any
		want   jail.Status
		code   int
		check  func(*testing.T, jail.Result)
	}{
		{"exit 3", map[string]any{"phase": "Failed", "containerStatuses": []any{container(terminated(3, "Error", ""))}}, jail.StatusExited, 3,
			func(t *testing.T, r jail.Result) {
				require.Equal(t, int64(3000), r.WallTimeMS, "the kubelet's timestamps")
			}},
		{"exit 0", map[string]any{"phase": "Succeeded", "containerStatuses": []any{container(terminated(0, "Completed", ""))}}, jail.StatusExited, 0, nil},
		{"oom", map[string]any{"phase": "Failed", "containerStatuses": []any{container(terminated(137, "OOMKilled", ""))}}, jail.StatusOOMKilled, 137,
			func(t *testing.T, r jail.Result) { require.Equal(t, []string{"memory"}, r.LimitsHit) }},
		{"seccomp kill", map[string]any{"phase": "Failed", "containerStatuses": []any{container(terminated(159, "Error", ""))}}, jail.StatusSeccompKilled, 159,
			func(t *testing.T, r jail.Result) { require.Equal(t, "SYS", r.Signal) }},
		{"deadline", map[string]any{"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified deadline"}, jail.StatusTimedOut, jail.ExitTimedOut, nil},
		{"not found", map[string]any{"phase": "Failed", "containerStatuses": []any{container(terminated(128, "StartError", `exec: "nope": executable file not found in $PATH`))}}, jail.StatusSetupError, jail.ExitNotFound,
			func(t *testing.T, r jail.Result) { require.Equal(t, "execve", r.Error.Step) }},
		{"image pull", map[string]any{"phase": "Pending", "containerStatuses": []any{container(map[string]any{"waiting": map[string]any{"reason": "ErrImagePull", "message": "pull access denied"}})}}, jail.StatusSetupError, jail.ExitSetupError,
			func(t *testing.T, r jail.Result) {
				require.Contains(t, r.Error.Message, "ErrImagePull: pull access denied")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kubeJail(t, kc, ns, append(append([]string{"run", "--json"}, kubeRunFlags...), "--timeout", "60s", "--", "true")...)
			var out bytes.Buffer
			c.Stdout = &out
			require.NoError(t, c.Start())
			t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
			pod := waitPod(t, cl, ns)
			setPodStatus(t, ns, pod.Metadata.Name, tc.status)
			_ = c.Wait()
			var r jail.Result
			require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
			require.Equal(t, tc.want, r.Status, "%+v", r.Error)
			require.Equal(t, tc.code, r.ExitCode)
			require.Equal(t, tc.code, c.ProcessState.ExitCode())
			if tc.check != nil {
				tc.check(t, r)
			}
			requireNoKubeObjects(t, cl, ns)
		})
	}
}

// BenchmarkK8sRun is the Kubernetes backend's API-side cost of a strict
// `jail run --backend k8s -- true`: jail's start, the policy and the Pod
// created, the watch, the end written through the API the moment the Pod
// exists (as a kubelet would, with no node's time in it), the judgement
// and both deletions. go test -run '^$' -bench K8sRun ./integration/
func BenchmarkK8sRun(b *testing.B) {
	kc, ns := testKube(b)
	cl := kubeClient(b, kc)
	done := map[string]any{"phase": "Succeeded", "containerStatuses": []any{map[string]any{"name": "jail", "image": "registry.example/jail-test:1",
		"imageID": "", "ready": false, "restartCount": 0, "state": map[string]any{"terminated": map[string]any{"exitCode": 0, "reason": "Completed"}}}}}
	for b.Loop() {
		c := kubeJail(b, kc, ns, append(append([]string{"run", "--json"}, kubeRunFlags...), "--timeout", "60s", "--", "true")...)
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		setPodStatus(b, ns, waitPod(b, cl, ns).Metadata.Name, done)
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	requireNoKubeObjects(b, cl, ns)
}

// TestK8sPolicyOutlivesItsPod: a Pod on a node is deleted gracefully (the
// kubelet stops its containers first), and its NetworkPolicy stays until
// the Pod object is gone, owned by it: the workload never runs without it.
// The test binds the Pod to a node as the scheduler would; with no kubelet
// the Pod stays terminating.
func TestK8sPolicyOutlivesItsPod(t *testing.T) {
	kc, ns := testKube(t)
	cl := kubeClient(t, kc)
	api := testKubeAPI(t)
	c := kubeJail(t, kc, ns, append(append([]string{"run", "--json"}, kubeRunFlags...), "--timeout", "60s", "--kill-grace", "1s", "--", "sleep", "60")...)
	var out syncBuffer
	c.Stdout, c.Stderr = &out, &out
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	pod := waitPod(t, cl, ns)
	name := pod.Metadata.Name
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var owners struct {
		Metadata struct {
			OwnerReferences   []struct{ Kind, Name, UID string } `json:"ownerReferences"`
			DeletionTimestamp string                             `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	// jail's Start ends with the policy owned by the Pod: the test goes on
	// from there, however slow the machine.
	require.Eventually(t, func() bool {
		code, b, err := api.call(ctx, http.MethodGet, "/apis/networking.k8s.io/v1/namespaces/"+ns+"/networkpolicies/"+name, nil)
		return err == nil && code == http.StatusOK && json.Unmarshal(b, &owners) == nil && len(owners.Metadata.OwnerReferences) == 1
	}, 30*time.Second, 20*time.Millisecond, "jail's Start: %s", &out)
	code, b, err := api.call(ctx, http.MethodPost, "/api/v1/namespaces/"+ns+"/pods/"+name+"/binding",
		map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": name}, "target": map[string]any{"kind": "Node", "name": "node-1"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", b)
	t.Cleanup(func() { // no kubelet will finish the deletion: the test does
		_, _, _ = api.call(context.Background(), http.MethodDelete, "/api/v1/namespaces/"+ns+"/pods/"+name+"?gracePeriodSeconds=0", nil)
		_, _, _ = api.call(context.Background(), http.MethodDelete, "/apis/networking.k8s.io/v1/namespaces/"+ns+"/networkpolicies/"+name, nil)
	})

	require.NoError(t, c.Process.Signal(syscall.SIGTERM))
	_ = c.Wait()
	p, err := cl.GetPod(ctx, ns, name)
	require.NoError(t, err, "the Pod is terminating, not force-deleted; jail said: %s", &out)
	require.NotNil(t, p.Status)
	pols, err := cl.ListPolicies(ctx, ns, k8s.LabelManaged)
	require.NoError(t, err)
	require.Len(t, pols, 1, "the policy stays while its Pod exists; jail said: %s", &out)
	owners.Metadata.OwnerReferences = nil
	code, b, err = api.call(ctx, http.MethodGet, "/apis/networking.k8s.io/v1/namespaces/"+ns+"/networkpolicies/"+name, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(b, &owners))
	require.Len(t, owners.Metadata.OwnerReferences, 1)
	require.Equal(t, "Pod", owners.Metadata.OwnerReferences[0].Kind)
	require.Equal(t, pod.Metadata.UID, owners.Metadata.OwnerReferences[0].UID, "the garbage collector deletes it after the Pod")
	code, b, err = api.call(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(b, &owners))
	require.NotEmpty(t, owners.Metadata.DeletionTimestamp, "deleted gracefully: terminating")
}

// TestK8sQuantities: the API server stores a size divisible by 1000 its
// own way (131072000 as 131072k), which is not admission changing the Pod
// (found by review: every such --tmp-size was refused).
func TestK8sQuantities(t *testing.T) {
	kc, ns := testKube(t)
	r := runKube(t, kc, ns, append(append([]string{"run", "--json"}, kubeRunFlags...), "--tmp-size", "125M", "--shm-size", "1000K", "--memory", "125M", "--timeout", "2s", "--", "true")...)
	var res jail.Result
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stderr)
	require.Equal(t, jail.StatusSetupError, res.Status)
	require.Contains(t, res.Error.Message, "did not start within the timeout", "stored as sent, then Pending (no node)")
	requireNoKubeObjects(t, kubeClient(t, kc), ns)
}
