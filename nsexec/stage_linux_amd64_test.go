package nsexec

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStageUpToDate checks that the embedded stage was built from the C
// files as they are: a change to the stage's sources must come with
// `go generate ./nsexec` (stage/build.sh), or the jails would run the old
// stage. CI also rebuilds the binary and compares the bytes.
func TestStageUpToDate(t *testing.T) {
	const regen = "the embedded stage is stale: run `go generate ./nsexec` (needs musl-tools) and commit stage_linux_amd64.*"
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(stageSources), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		require.True(t, ok, "stage_linux_amd64.sources: %q", line)
		b, err := os.ReadFile(name)
		require.NoError(t, err, regen)
		got := sha256.Sum256(b)
		assert.Equal(t, sum, hex.EncodeToString(got[:]), "%s: %s", name, regen)
		listed = append(listed, name)
	}
	// Every C file of the stage is listed: only spawn.c (the host side),
	// files.c (the files helper, which hands over to a Go runtime the
	// stage does not have) and main.c's absence from the cgo build differ.
	files, err := filepath.Glob("*.[ch]")
	require.NoError(t, err)
	for _, f := range files {
		if f == "spawn.c" || f == "spawn.h" || f == "files.c" {
			continue
		}
		assert.True(t, slices.Contains(listed, f), "%s is not in stage/build.sh's sources: %s", f, regen)
	}
	assert.Greater(t, len(stageELF), 4096)
	assert.Equal(t, "\x7fELF", string(stageELF[:4]))
}
