// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jailrt/jail/internal/procfs"
)

// TestSessionAlive: a lease handed to a session's PID 1 is taken over
// only when that process is certainly gone: its pid free or another
// process's, in our own PID namespace. One of another namespace (unshare
// -p, a container sharing /run/jail) was taken for gone, and its veth and
// chains removed under the live session.
func TestSessionAlive(t *testing.T) {
	me, start := os.Getpid(), processStart(os.Getpid())
	ns, err := procfs.SelfPIDNS()
	if err != nil || start == 0 {
		t.Fatalf("this process: start %d, PID namespace: %v", start, err)
	}
	const gone = 1 << 22 // above pid_max's ceiling: never a process
	for _, tc := range []struct {
		name, file string
		gone       *sessionOwner
		alive      bool
	}{
		{"older file, alive", fmt.Sprintf("%d %d session\n", me, start), nil, true},
		{"older file, gone", fmt.Sprintf("%d %d session\n", gone, start), nil, false},
		{"older file, pid reused", fmt.Sprintf("%d %d session\n", me, start+1), nil, false},
		{"our namespace, alive", fmt.Sprintf("%d %d session %d\n", me, start, ns), nil, true},
		{"our namespace, gone", fmt.Sprintf("%d %d session %d\n", gone, start, ns), nil, false},
		{"another namespace: never judged", fmt.Sprintf("%d %d session %d\n", gone, start, ns+1), nil, true},
		{"a run's lease (its holder's pid)", fmt.Sprintf("%d\n", me), nil, false},
		{"another namespace, seen gone", fmt.Sprintf("%d %d session %d\n", gone, start, ns+1), &sessionOwner{gone, start}, false},
		{"another namespace, another seen gone", fmt.Sprintf("%d %d session %d\n", gone, start, ns+1), &sessionOwner{gone, start + 1}, true},
		{"malformed", "1 2 session 3 4\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "lease")
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := sessionAlive(f, tc.gone); got != tc.alive {
				t.Errorf("sessionAlive(%q) = %v, want %v", tc.file, got, tc.alive)
			}
		})
	}
}
