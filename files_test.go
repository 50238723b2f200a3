package jail

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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

// blockingReader never yields: a caller's stdin that no one types into.
type blockingReader struct{ done chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.done; return 0, io.EOF }

// TestWriteFileRefusedBeforeItsInput: a write the helper refuses before
// it reads anything returns at once, whatever the input still holds back.
func TestWriteFileRefusedBeforeItsInput(t *testing.T) {
	requireJail(t)
	ctx := context.Background()
	m := &Sessions{Dir: t.TempDir()}
	s, err := m.Create(ctx, SessionSpec{ID: "refused"})
	require.NoError(t, err)
	defer s.Remove()
	in := blockingReader{make(chan struct{})}
	defer close(in.done)
	done := make(chan error, 1)
	go func() { _, err := s.WriteFile(ctx, "/workspace", in, WriteOptions{}); done <- err }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, syscall.EISDIR)
	case <-time.After(20 * time.Second):
		t.Fatal("WriteFile waits for input the helper will never read")
	}
}

// TestUnixMode: the permission bits with setuid, setgid and sticky as
// chmod(1) spells them, and back.
func TestUnixMode(t *testing.T) {
	for m, u := range map[os.FileMode]uint32{
		0o644: 0o644, 0o755 | os.ModeSetuid: 0o4755, 0o2750&0o777 | os.ModeSetgid: 0o2750,
		0o1777&0o777 | os.ModeSticky: 0o1777, 0o7777&0o777 | os.ModeSetuid | os.ModeSetgid | os.ModeSticky: 0o7777,
	} {
		assert.Equal(t, u, UnixMode(m), "%v", m)
		assert.Equal(t, m, FileModeOf(u), "%o", u)
	}
	assert.Equal(t, uint32(0o600), UnixMode(os.ModeDir|0o600), "the type bits are not permission bits")
}
