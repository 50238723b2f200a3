package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// plant builds the attacker's job directory: a secret outside it, and
// symlinks, a hard link and a FIFO inside it, as a jailed workload with the
// directory bound read-write would leave them for the next run.
func plant(t *testing.T) (job, secret string) {
	t.Helper()
	root := t.TempDir()
	secret = filepath.Join(root, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root only\n"), 0o600))
	job = filepath.Join(root, "job")
	require.NoError(t, os.Mkdir(job, 0o755))
	require.NoError(t, os.Symlink(secret, filepath.Join(job, "input.txt")))
	require.NoError(t, os.Symlink(root, filepath.Join(job, "dirlink")))
	require.NoError(t, os.Symlink("/", filepath.Join(job, "rootlink")))
	require.NoError(t, os.Link(secret, filepath.Join(job, "hardlink.json")))
	require.NoError(t, unix.Mkfifo(filepath.Join(job, "fifo"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(job, "plain.txt"), []byte("plain\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(job, "sub"), 0o755))
	return job, secret
}

func TestOpenInputRefuses(t *testing.T) {
	job, secret := plant(t)
	for _, tc := range []struct {
		name, path string
		link       string // the component the *SymlinkError names
		kind       string // the kind a *TypeError names
	}{
		{"symlink to a file", filepath.Join(job, "input.txt"), filepath.Join(job, "input.txt"), ""},
		{"symlink in the middle", filepath.Join(job, "dirlink", "secret"), filepath.Join(job, "dirlink"), ""},
		{"symlink to /", filepath.Join(job, "rootlink", "etc", "passwd"), filepath.Join(job, "rootlink"), ""},
		{"a directory", filepath.Join(job, "sub"), "", "a directory"},
		{"the root directory", "/", "", "a directory"},
		{"a character device", "/dev/null", "", "a character device"},
		{"a magic link", "/proc/self/root" + secret, "/proc/self", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenInput(tc.path)
			if f != nil {
				f.Close()
			}
			require.Error(t, err)
			if tc.link != "" {
				var se *SymlinkError
				require.ErrorAs(t, err, &se, "got %v", err)
				assert.Equal(t, tc.link, se.Link)
				assert.ErrorIs(t, err, unix.ELOOP)
				assert.Contains(t, err.Error(), "is a symlink")
				return
			}
			var te *TypeError
			require.ErrorAs(t, err, &te, "got %v", err)
			assert.Equal(t, tc.kind, te.Kind)
		})
	}
}

func TestSymlinkErrorNamesTheLink(t *testing.T) {
	job, _ := plant(t)
	_, err := OpenInput(filepath.Join(job, "rootlink", "etc", "passwd"))
	assert.Contains(t, err.Error(), filepath.Join(job, "rootlink")+" is a symlink")
	assert.Contains(t, err.Error(), "it points to /;")
}

func TestOpenInputAccepts(t *testing.T) {
	job, _ := plant(t)
	t.Run("a regular file", func(t *testing.T) {
		b, err := ReadFile(filepath.Join(job, "plain.txt"), 100)
		require.NoError(t, err)
		assert.Equal(t, "plain\n", string(b))
	})
	t.Run("a relative path", func(t *testing.T) {
		t.Chdir(job)
		b, err := ReadFile("plain.txt", 100)
		require.NoError(t, err)
		assert.Equal(t, "plain\n", string(b))
	})
	t.Run("a FIFO with a writer", func(t *testing.T) {
		fifo := filepath.Join(job, "fifo")
		done := make(chan error, 1)
		go func() {
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // waits for the reader
			if err == nil {
				_, err = io.WriteString(w, "K=V\n")
				w.Close()
			}
			done <- err
		}()
		// As open(2) of a FIFO does, OpenInput waits for the writer.
		f, err := OpenInput(fifo)
		require.NoError(t, err)
		defer f.Close()
		b, err := io.ReadAll(f)
		require.NoError(t, err)
		require.NoError(t, <-done)
		assert.Equal(t, "K=V\n", string(b))
	})
	t.Run("an inherited pipe by /dev/fd/N", func(t *testing.T) {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		defer r.Close()
		go func() { io.WriteString(w, "from a pipe"); w.Close() }()
		b, err := ReadFile(fmt.Sprintf("/dev/fd/%d", r.Fd()), 100)
		require.NoError(t, err)
		assert.Equal(t, "from a pipe", string(b))
	})
	t.Run("an inherited directory by /dev/fd/N is refused", func(t *testing.T) {
		d, err := os.Open(job)
		require.NoError(t, err)
		defer d.Close()
		_, err = OpenInput(fmt.Sprintf("/proc/self/fd/%d", d.Fd()))
		var te *TypeError
		require.ErrorAs(t, err, &te)
	})
	t.Run("a planted FIFO as a whole-file input is refused, not waited for", func(t *testing.T) {
		// No writer ever comes: a blocking open would hang the test.
		_, err := ReadFile(filepath.Join(job, "fifo"), 100)
		var te *TypeError
		require.ErrorAs(t, err, &te, "got %v", err)
		assert.Equal(t, "a FIFO", te.Kind)
		assert.Contains(t, err.Error(), "a pipe only as /dev/fd/N")
	})
	t.Run("too large", func(t *testing.T) {
		_, err := ReadFile(filepath.Join(job, "plain.txt"), 3)
		assert.ErrorIs(t, err, ErrTooLarge)
	})
}

func TestOutputReplacesNeverWritesThrough(t *testing.T) {
	job, secret := plant(t)
	for _, name := range []string{"input.txt", "hardlink.json", "fifo", "new.json"} {
		t.Run(name, func(t *testing.T) {
			o, err := CreateOutput(filepath.Join(job, name))
			require.NoError(t, err)
			defer o.Close()
			require.NoError(t, o.Write([]byte("{}\n"), 0o644))
			b, err := os.ReadFile(secret)
			require.NoError(t, err)
			assert.Equal(t, "root only\n", string(b), "the file the planted name pointed at is untouched")
			fi, err := os.Lstat(filepath.Join(job, name))
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "got %v, want a regular file", fi.Mode())
			assert.Equal(t, uint64(1), fi.Sys().(*syscall.Stat_t).Nlink, "a fresh inode, not the hard link")
			b, err = os.ReadFile(filepath.Join(job, name))
			require.NoError(t, err)
			assert.Equal(t, "{}\n", string(b))
		})
	}
	entries, err := os.ReadDir(job)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".jail-", "no temporary file left behind")
	}
}

func TestOutputDirectoryOpenedOnce(t *testing.T) {
	// The directory is pinned when the output is created: swapping it for
	// a symlink afterwards (as a workload would during the run) does not
	// move the write.
	job, secret := plant(t)
	out := filepath.Join(job, "out")
	require.NoError(t, os.Mkdir(out, 0o755))
	o, err := CreateOutput(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, os.Rename(out, filepath.Join(job, "moved")))
	require.NoError(t, os.Symlink(filepath.Dir(secret), out))
	require.NoError(t, o.Write([]byte("{}\n"), 0o644))
	_, err = os.Stat(filepath.Join(filepath.Dir(secret), "report.json"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "nothing written where the symlink points")
	b, err := os.ReadFile(filepath.Join(job, "moved", "report.json"))
	require.NoError(t, err)
	assert.Equal(t, "{}\n", string(b))
}

func TestCreateOutputRefuses(t *testing.T) {
	job, _ := plant(t)
	for _, tc := range []struct{ name, path string }{
		{"a directory", filepath.Join(job, "sub")},
		{"a symlink on the way", filepath.Join(job, "dirlink", "report.json")},
		{"no file name", job + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := CreateOutput(tc.path)
			if o != nil {
				o.Close()
			}
			assert.Error(t, err)
		})
	}
}
