package jail

import (
	"bytes"
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSessionFilesAPI(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	m := &Sessions{Dir: t.TempDir()}
	s, err := m.Create(ctx, SessionSpec{ID: "files", Spec: Spec{PidsMax: 64}})
	require.NoError(t, err)
	defer s.Remove()

	n, err := s.WriteFile(ctx, "/tmp/a/b.txt", strings.NewReader("hello\n"), WriteOptions{Mkdir: true, Mode: 0o600})
	require.NoError(t, err)
	assert.EqualValues(t, 6, n)
	var out bytes.Buffer
	_, err = s.ReadFile(ctx, "/tmp/a/b.txt", &out)
	require.NoError(t, err)
	assert.Equal(t, "hello\n", out.String())
	fi, err := s.Stat(ctx, "/tmp/a/b.txt")
	require.NoError(t, err)
	assert.Equal(t, "file", fi.Type)
	assert.EqualValues(t, 0o600, fi.Mode)
	_, err = s.Stat(ctx, "/tmp/nope")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	c := s.Command(ctx, "cat", "/tmp/a/b.txt")
	c.Capture = true
	require.NoError(t, c.Run())
	assert.Equal(t, "hello\n", c.Result.Stdout)
	list, err := s.ReadDir(ctx, "/tmp", 0)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "/tmp/a/b.txt", list[1].Path)
}
