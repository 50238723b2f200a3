package k8s

import (
	"context"
	"errors"
	"net/http"

	"github.com/jailrt/jail/internal/procfs"
)

// Ping asks the API server for its version: whether it answers, and
// accepts these credentials.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/version", nil, nil, nil)
}

// Prune deletes the Pods and NetworkPolicies in namespace ns that a jail
// process of this machine made and that process is gone (a `jail run`
// killed with SIGKILL cannot delete its own), and returns their names as
// "pod/NAME" and "networkpolicy/NAME". What another machine's jail made,
// or what has no owner jail can read, is left alone.
func (c *Client) Prune(ctx context.Context, ns string) ([]string, error) {
	pods, err := c.ListPods(ctx, ns, LabelManaged)
	if err != nil {
		return nil, err
	}
	pols, err := c.ListPolicies(ctx, ns, LabelManaged)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, p := range pods {
		if !procfs.OwnerGone(p.Metadata.Annotations[AnnotationOwner], false) {
			continue
		}
		if err := c.DeletePod(ctx, ns, p.Metadata.Name, 1); err != nil { // graceful: see Cmd.grace
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "pod/"+p.Metadata.Name)
	}
	// A policy goes only once no Pod of its run is left (a Pod being
	// deleted may still run its workload).
	left, err := c.ListPods(ctx, ns, LabelManaged)
	if err != nil {
		return removed, errors.Join(append(errs, err)...)
	}
	running := map[string]bool{}
	for _, p := range left {
		running[p.Metadata.Labels[LabelRun]] = true
	}
	for _, p := range pols {
		if !procfs.OwnerGone(p.Metadata.Annotations[AnnotationOwner], false) || running[p.Metadata.Labels[LabelRun]] {
			continue
		}
		if err := c.DeletePolicy(ctx, ns, p.Metadata.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "networkpolicy/"+p.Metadata.Name)
	}
	return removed, errors.Join(errs...)
}
