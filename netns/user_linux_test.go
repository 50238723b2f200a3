package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestPruneUser: only the FIFO directories of owners that are gone are
// removed; a running owner's, a name that is not jail's and a file are
// kept.
func TestPruneUser(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, fmt.Sprintf("%s%d-123", pastaDirPrefix, gone.Process.Pid))
	live := filepath.Join(tmp, fmt.Sprintf("%s%d-456", pastaDirPrefix, os.Getpid()))
	other := filepath.Join(tmp, pastaDirPrefix+"x-789")
	file := filepath.Join(tmp, fmt.Sprintf("%s%d-file", pastaDirPrefix, gone.Process.Pid))
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := PruneUser(); !slices.Equal(got, []string{dead}) {
		t.Fatalf("removed %v, want [%s]", got, dead)
	}
	for _, p := range []string{live, other, file} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("%s is left: %v", dead, err)
	}
}
