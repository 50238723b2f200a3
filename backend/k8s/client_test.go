package k8s

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(s), 0o600))
		return p
	}
	write("token", "secret-token\n")
	kc := write("config", `apiVersion: v1
kind: Config
current-context: test
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443/", insecure-skip-tls-verify: true}
users:
- name: u
  user: {tokenFile: token}
contexts:
- name: other
  context: {cluster: x, user: y}
- name: test
  context: {cluster: c, user: u, namespace: ns1}
`)
	c, err := NewClient(kc)
	require.NoError(t, err)
	require.Equal(t, "https://127.0.0.1:6443", c.Server)
	require.Equal(t, "ns1", c.Namespace)
	require.Equal(t, "secret-token", c.token, "a relative tokenFile is the kubeconfig's directory's")

	for name, body := range map[string]string{
		"exec plugin": `current-context: t
clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: t, context: {cluster: c, user: u}}]`,
		"plain http": `current-context: t
clusters: [{name: c, cluster: {server: "http://h"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: t, context: {cluster: c, user: u}}]`,
		"no context": `current-context: nope
contexts: []`,
	} {
		_, err := NewClient(write(name, body))
		require.Error(t, err, name)
	}
	t.Setenv("KUBECONFIG", kc+":"+kc)
	_, err = KubeconfigPath()
	require.ErrorContains(t, err, "several files")
}
