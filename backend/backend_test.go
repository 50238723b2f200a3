package backend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend"
	"github.com/jailrt/jail/backend/k8s"
)

// TestOneField: the Spec's backend field alone picks the backend, and each
// reports as jail.result/v1 with isolation.backend saying which, even when
// it cannot reach its engine or cluster.
func TestOneField(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`current-context: t
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: t, context: {cluster: c, user: u}}]
`), 0o600))
	o := backend.Options{DockerHost: "unix://" + filepath.Join(t.TempDir(), "no.sock"), Kubeconfig: kc,
		K8s: k8s.Options{SeccompProfile: "jail/default.json"}}
	for _, b := range []string{jail.BackendDocker, jail.BackendK8s} {
		spec := jail.Spec{Backend: b, Image: "img:1"}
		c, err := backend.Command(context.Background(), spec, o, "true")
		require.NoError(t, err)
		require.Error(t, c.Run(), b)
		r := c.Report()
		require.NotNil(t, r, b)
		require.Equal(t, jail.StatusSetupError, r.Status, b)
		require.Equal(t, b, r.Isolation.Backend)
		require.Equal(t, jail.ExitSetupError, r.ExitCode)
	}
}

func TestChoose(t *testing.T) {
	for _, b := range []string{"", jail.BackendNative, jail.BackendDocker, jail.BackendK8s} {
		spec := jail.Spec{Backend: b}
		got, reason, err := backend.Choose(context.Background(), &spec, backend.Options{})
		require.NoError(t, err)
		require.Empty(t, reason, "only auto has a reason")
		if b == "" {
			b = jail.BackendNative
		}
		require.Equal(t, b, got)
		require.Equal(t, b, spec.Backend)
	}
	spec := jail.Spec{Backend: "lxc"}
	_, _, err := backend.Choose(context.Background(), &spec, backend.Options{})
	require.ErrorIs(t, err, jail.ErrInvalidSpec)

	// auto with an image and no engine or cluster: none, saying why.
	spec = jail.Spec{Backend: jail.BackendAuto, Image: "img:1"}
	_, _, err = backend.Choose(context.Background(), &spec, backend.Options{
		DockerHost: "unix://" + filepath.Join(t.TempDir(), "no.sock"), Kubeconfig: filepath.Join(t.TempDir(), "none")})
	require.True(t, errors.Is(err, backend.ErrNoBackend), "%v", err)
	require.ErrorContains(t, err, "the spec names an image")
}
