package docker

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
)

// Prune removes the containers jail made whose jail process is gone (a
// `jail run` killed with SIGKILL cannot remove its own) and returns their
// ids. A container whose maker still runs is left alone, as is every
// container without jail's labels. With no engine at host (DOCKER_HOST
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
		if ownerAlive(c.Labels[LabelOwner]) {
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

// ownerAlive reports whether the process a LabelOwner value names still
// runs: the same pid with the same start time. A malformed value counts as
// alive: jail does not remove what it cannot tell is its own leftover.
func ownerAlive(owner string) bool {
	pidS, start, ok := strings.Cut(owner, ":")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil || pid <= 0 || start == "" {
		return true
	}
	return startTime(pid) == start
}
