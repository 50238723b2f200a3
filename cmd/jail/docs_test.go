package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/man and docs/cli from the command tree")

// manDate is the date the man pages carry: fixed, so that they are
// reproducible (cobra would put today's).
var manDate = time.Date(2026, time.November, 27, 0, 0, 0, 0, time.UTC)

// TestDocsCurrent keeps the shipped man pages (docs/man) and CLI reference
// (docs/cli) what cobra makes of the command tree and its --help texts:
// a flag or a command changed without them fails here. -update-docs
// rewrites both.
func TestDocsCurrent(t *testing.T) {
	root := newRoot(io.Discard, io.Discard, nil)
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd()
	for _, tc := range []struct {
		dir string
		gen func(*cobra.Command, string) error
	}{
		{"../../docs/man", func(c *cobra.Command, dir string) error {
			return doc.GenManTree(c, &doc.GenManHeader{Title: "JAIL", Section: "1", Date: &manDate, Source: "jail", Manual: "jail manual"}, dir)
		}},
		{"../../docs/cli", doc.GenMarkdownTree},
	} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			tmp := t.TempDir()
			require.NoError(t, tc.gen(root, tmp))
			if *updateDocs {
				require.NoError(t, os.RemoveAll(tc.dir))
				require.NoError(t, os.CopyFS(tc.dir, os.DirFS(tmp)))
			}
			want, err := filepath.Glob(filepath.Join(tmp, "*"))
			require.NoError(t, err)
			have, err := filepath.Glob(filepath.Join(tc.dir, "*"))
			require.NoError(t, err)
			base := func(l []string) []string {
				var out []string
				for _, f := range l {
					out = append(out, filepath.Base(f))
				}
				return out
			}
			require.Equal(t, base(want), base(have), "go test ./cmd/jail -run TestDocsCurrent -args -update-docs")
			for _, f := range want {
				a, err := os.ReadFile(f)
				require.NoError(t, err)
				b, err := os.ReadFile(filepath.Join(tc.dir, filepath.Base(f)))
				require.NoError(t, err)
				assert.Equal(t, string(a), string(b), "%s is out of date: go test ./cmd/jail -run TestDocsCurrent -args -update-docs", filepath.Base(f))
			}
		})
	}
}

// TestEveryCommandDocumented: every command has a short text, and every
// flag a usage line; hidden ones aside.
func TestEveryCommandDocumented(t *testing.T) {
	root := newRoot(io.Discard, io.Discard, nil)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		assert.NotEmpty(t, c.Short, "%s has no short text", c.CommandPath())
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			assert.NotEmpty(t, strings.TrimSpace(f.Usage), "%s --%s has no usage", c.CommandPath(), f.Name)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var b bytes.Buffer
	root.SetOut(&b)
	root.SetArgs([]string{"completion", "bash"})
	require.NoError(t, root.Execute())
	assert.Contains(t, b.String(), "bash completion", "jail completion bash works")
}
