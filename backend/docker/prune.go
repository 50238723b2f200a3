package docker

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"

	"github.com/jailrt/jail/internal/procfs"
)

// Prune removes the containers jail made whose jail process is gone (a
// `jail run` killed with SIGKILL cannot remove its own) and returns their
// ids. A container whose maker may still run (procfs.OwnerGone: one of
// another PID namespace, or whose /proc cannot be read) is left alone, as
// is every container without jail's labels and name. With no engine at host (DOCKER_HOST
// unset and no socket at the default path) there is nothing to do.
func Prune(ctx context.Context, host string) ([]string, error) {
	if host == DefaultHost && os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat(strings.TrimPrefix(DefaultHost, "unix://")); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	e, err := Connect(ctx, host)
	if err != nil {
		if host == DefaultHost && os.Getenv("DOCKER_HOST") == "" {
			return nil, nil // a default socket this caller may not use, or a stopped engine's: not jail's to clean
		}
		return nil, err
	}
	list, err := e.List(ctx, LabelManaged)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, c := range list {
		// Named by jail too: an image's labels are its containers', so
		// the labels alone do not make a container jail's.
		if !slices.ContainsFunc(c.Names, func(n string) bool { return strings.HasPrefix(n, "/jail-") }) ||
			!procfs.OwnerGone(c.Labels[LabelOwner], true) {
			continue
		}
		if err := e.Remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.ID)
	}
	return removed, errors.Join(errs...)
}
