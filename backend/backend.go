// Package backend runs a [jail.Spec] on the backend its Backend field
// names (native, docker, k8s, or auto: the first that can run here),
// behind one interface: an embedder switches backends with that one field.
// Each backend is its own package (the native one is [jail.Cmd]); this one
// only chooses and adapts.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/backend/docker"
	"github.com/jailrt/jail/backend/k8s"
	"github.com/jailrt/jail/internal/hostcheck"
)

// Cmd is a run on some backend: jail.Cmd's Start, Wait, Run and Signal,
// and its Result as Report.
type Cmd interface {
	Start() error
	Wait() error
	Run() error
	// Signal passes sig to the workload (Docker: through the engine's
	// init; Kubernetes has no such call: any signal ends the run, as a
	// cancellation).
	Signal(sig os.Signal) error
	// Report is the run's jail.result/v1 document once Start failed or
	// Wait returned; nil before.
	Report() *jail.Result
}

// Options are what a run needs besides its Spec: its input and output,
// and where the container backends find their engine or cluster.
type Options struct {
	// Stdin, Stdout and Stderr are the workload's (a Pod takes no stdin,
	// and its log holds both streams: Stderr is not used).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Capture keeps the output in the report.
	Capture bool
	// DockerHost is the Docker engine's address; empty: $DOCKER_HOST or
	// docker.DefaultHost.
	DockerHost string
	// Kubeconfig and K8s are the Kubernetes backend's cluster and
	// settings; an empty Kubeconfig is $KUBECONFIG, ~/.kube/config or
	// the in-cluster service account.
	Kubeconfig string
	K8s        k8s.Options
}

// Command returns a Cmd that runs name with args as spec says, on
// spec.Backend ("" is native). For auto it chooses first (Choose), and the
// report's isolation.backend_reason says why.
func Command(ctx context.Context, spec jail.Spec, o Options, name string, args ...string) (Cmd, error) {
	b, reason, err := Choose(ctx, &spec, o)
	if err != nil {
		return nil, err
	}
	switch b {
	case jail.BackendDocker:
		c := docker.Command(ctx, spec, name, args...)
		c.Host, c.BackendReason = o.DockerHost, reason
		c.Stdin, c.Stdout, c.Stderr, c.Capture = o.Stdin, o.Stdout, o.Stderr, o.Capture
		return dockerCmd{c}, nil
	case jail.BackendK8s:
		if o.Stdin != nil {
			return nil, &jail.FeatureError{Feature: "stdin", Reason: "the k8s backend runs a Pod without stdin"}
		}
		c := k8s.Command(ctx, spec, o.K8s, name, args...)
		c.Kubeconfig, c.BackendReason = o.Kubeconfig, reason
		c.Stdout, c.Capture = o.Stdout, o.Capture
		return k8sCmd{c}, nil
	default:
		c := jail.Command(ctx, spec, name, args...)
		c.Stdin, c.Stdout, c.Stderr, c.Capture = o.Stdin, o.Stdout, o.Stderr, o.Capture
		return nativeCmd{c, reason}, nil
	}
}

type nativeCmd struct {
	*jail.Cmd
	reason string
}

func (c nativeCmd) Report() *jail.Result {
	if c.Result != nil && c.reason != "" {
		c.Result.Isolation.BackendReason = c.reason
	}
	return c.Result
}

type dockerCmd struct{ *docker.Cmd }

func (c dockerCmd) Report() *jail.Result { return c.Result }

type k8sCmd struct{ *k8s.Cmd }

func (c k8sCmd) Report() *jail.Result { return c.Result }

// ErrNoBackend is returned by Choose when auto finds no backend that can
// run here.
var ErrNoBackend = errors.New("no backend can run here")

// Choose resolves spec's backend, setting spec.Backend to the one chosen.
// native, docker and k8s are taken as they are. auto is native when `jail
// check` finds nothing missing that jail needs here and the Spec names no
// image, else docker when an engine answers at o.DockerHost, else k8s when
// the kubeconfig's API server answers; reason says why (for the report).
func Choose(ctx context.Context, spec *jail.Spec, o Options) (backend, reason string, err error) {
	switch spec.Backend {
	case "", jail.BackendNative:
		spec.Backend = jail.BackendNative
		return jail.BackendNative, "", nil
	case jail.BackendDocker, jail.BackendK8s:
		return spec.Backend, "", nil
	case jail.BackendAuto:
	default:
		return "", "", &jail.SpecError{Field: "backend", Value: spec.Backend, Err: errors.New("must be native, docker, k8s or auto")}
	}
	var missing []string
	for _, f := range hostcheck.Run() {
		if f.Verdict == hostcheck.Missing {
			missing = append(missing, f.Name+": "+f.Detail)
		}
	}
	if len(missing) == 0 && spec.Image == "" {
		spec.Backend = jail.BackendNative
		return jail.BackendNative, "auto: this host has every kernel feature jail needs", nil
	}
	why := "native: " + strings.Join(missing, "; ")
	if len(missing) == 0 {
		why = "native: the spec names an image, which only a container backend runs"
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	host := o.DockerHost
	if host == "" {
		host = docker.Host()
	}
	_, derr := docker.Connect(pctx, host)
	if derr == nil {
		spec.Backend = jail.BackendDocker
		return jail.BackendDocker, "auto: " + why + "; docker: an engine answers at " + host, nil
	}
	why += fmt.Sprintf("; docker: %v", derr)
	kc, kerr := k8s.NewClient(o.Kubeconfig)
	if kerr == nil {
		kerr = kc.Ping(pctx)
	}
	if kerr == nil {
		spec.Backend = jail.BackendK8s
		return jail.BackendK8s, "auto: " + why + "; k8s: the API server at " + kc.Server + " answers", nil
	}
	return "", "", fmt.Errorf("backend auto: %w: %s; k8s: %v", ErrNoBackend, why, kerr)
}
