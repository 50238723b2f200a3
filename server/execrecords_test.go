package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
)

// recordedEntry is an exec of tenant "t" in session "s", recorded under
// s's state directory, as startExec makes a background one.
func recordedEntry(s *Server, id string) *execEntry {
	x := newEntry()
	x.id, x.tenant = id, "t"
	x.recordPath = execRecordPath(s.execRecordDir(), x.tenant, x.id)
	x.publish(map[string]any{"event": "start", "exec": x.id}, true)
	return x
}

// replay is x's events from 1, as a client reading them gets them.
func replay(t *testing.T, x *execEntry) []map[string]any {
	t.Helper()
	return replayFrom(t, x, 1)
}

func replayFrom(t *testing.T, x *execEntry, from int) []map[string]any {
	t.Helper()
	rec := httptest.NewRecorder()
	require.NoError(t, x.follow(context.Background(), rec, from, ndjson, false))
	var evs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &e), "%s", l)
		evs = append(evs, e)
	}
	return evs
}

// TestExecRecords: the next server on a state directory answers for the
// last one's recorded execs: an ended one as it was, a running one as
// interrupted (and still so, with the same end, at the one after);
// files that are not records, and records past their retention, are
// removed; an exec forgotten takes its file with it.
func TestExecRecords(t *testing.T) {
	dir := t.TempDir()
	s1, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	ended := recordedEntry(s1, "x000000000001")
	_, _ = ended.output("stdout").Write([]byte("out\n"))
	res := &jail.Result{Schema: jail.Schema, Status: jail.StatusExited, ExitCode: 3, Stdout: "out\n"}
	ended.finish(res, nil)
	s1.execs.add(ended)
	s1.record(ended)
	running := recordedEntry(s1, "x000000000002")
	running.stdinOpen.Store(true)
	_, _ = running.output("stderr").Write([]byte("half"))
	s1.execs.add(running)
	s1.record(running)
	// Recorded before its start event was out (that waits for the pid).
	unstarted := newEntry()
	unstarted.id, unstarted.tenant = "x000000000004", "t"
	unstarted.recordPath = execRecordPath(s1.execRecordDir(), "t", unstarted.id)
	s1.execs.add(unstarted)
	s1.record(unstarted)
	old := recordedEntry(s1, "x000000000003")
	old.finish(res, nil)
	old.ended = time.Now().Add(-ExecRetention - time.Minute)
	s1.record(old)
	s1.Close()

	execDir := s1.execRecordDir()
	misnamed := filepath.Join(execDir, "0000000000000000-x000000000009.json")
	b, err := os.ReadFile(ended.recordPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(misnamed, b, 0o600))
	// Not records: a temporary file, bad ids, unknown fields, trailing
	// data, a symlink to a record (whose target stays).
	junk := map[string]string{filepath.Base(misnamed): string(b), ".tmp-123": "{", "bad.json": `{"tenant": "t", "info": {"id": "../x"}}`}
	for i, bad := range []string{strings.Replace(string(b), `{"tenant"`, `{"extra": 1, "tenant"`, 1), string(b) + "{}"} {
		id := fmt.Sprintf("x0000000001%02x", i)
		junk[filepath.Base(execRecordPath(execDir, "t", id))] = strings.Replace(bad, ended.id, id, 1)
	}
	for p, text := range junk {
		require.NoError(t, os.WriteFile(filepath.Join(execDir, p), []byte(text), 0o600))
	}
	target := filepath.Join(t.TempDir(), "record.json")
	require.NoError(t, os.WriteFile(target, []byte(strings.Replace(string(b), ended.id, "x000000000200", 1)), 0o600))
	linked := execRecordPath(execDir, "t", "x000000000200")
	require.NoError(t, os.Symlink(target, linked))

	s2, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	x := s2.execs.get("t", "s", ended.id)
	require.NotNil(t, x)
	in := x.info()
	assert.Equal(t, ExecExited, in.State)
	assert.Equal(t, res, in.Result)
	assert.Equal(t, ended.info().NextSeq, in.NextSeq)
	assert.True(t, ended.ended.Equal(*in.EndedAt))
	evs := replay(t, x)
	require.Len(t, evs, 2, "%v", evs)
	assert.Equal(t, map[string]any{"event": "lost", "from": 1.0, "to": float64(in.NextSeq - 2)}, evs[0])
	assert.Equal(t, "exit", evs[1]["event"])
	assert.EqualValues(t, 3, evs[1]["result"].(map[string]any)["exit_code"])

	x = s2.execs.get("t", "s", running.id)
	require.NotNil(t, x)
	in = x.info()
	assert.Equal(t, ExecInterrupted, in.State)
	require.NotNil(t, in.Error)
	assert.Equal(t, CodeInterrupted, in.Error.Code)
	require.NotNil(t, in.EndedAt)
	cutAt := *in.EndedAt
	evs = replay(t, x)
	require.Len(t, evs, 2, "%v", evs)
	assert.Equal(t, "lost", evs[0]["event"])
	assert.Equal(t, "error", evs[1]["event"])
	assert.Nil(t, s2.execs.get("other", "s", running.id), "another tenant's")
	assert.Nil(t, s2.execs.get("t", "s", old.id), "past its retention")
	assert.NoFileExists(t, old.recordPath)
	for p := range junk {
		assert.NoFileExists(t, filepath.Join(execDir, p))
	}
	x = s2.execs.get("t", "s", unstarted.id)
	require.NotNil(t, x, "a record made before the start event is one")
	assert.Equal(t, ExecInterrupted, x.info().State)
	evs = replay(t, x)
	require.Len(t, evs, 1, "%v", evs)
	assert.Equal(t, "error", evs[0]["event"])
	assert.EqualValues(t, 1, evs[0]["seq"])
	assert.Len(t, s2.execs.list("t", "s"), 3, "only the three records")
	_, err = os.Lstat(linked)
	assert.ErrorIs(t, err, os.ErrNotExist, "a symlink taken for a record")
	assert.FileExists(t, target)
	assert.False(t, in.Stdin, "an interrupted exec's stdin is closed")

	// A client that saw more of it than its record holds (the last server
	// numbered its output) still gets its end.
	evs = replayFrom(t, x, 500)
	require.Len(t, evs, 1, "%v", evs)
	assert.Equal(t, "error", evs[0]["event"])
	s2.Close()

	s3, err := New(Config{StateDir: dir})
	require.NoError(t, err)
	x = s3.execs.get("t", "s", running.id)
	require.NotNil(t, x)
	in = x.info()
	assert.Equal(t, ExecInterrupted, in.State)
	assert.True(t, cutAt.Equal(*in.EndedAt), "interrupted at %v, then at %v", cutAt, in.EndedAt)

	// Forgotten (a tenant keeps MaxEndedExecs, the oldest go first): its
	// file goes too.
	for i := range MaxEndedExecs {
		y := recordedEntry(s3, fmt.Sprintf("x1%011x", i))
		y.finish(res, nil)
		s3.execs.add(y)
		s3.record(y)
	}
	for _, id := range []string{ended.id, running.id} {
		assert.Nil(t, s3.execs.get("t", "s", id), "the oldest ended execs are forgotten")
		assert.NoFileExists(t, execRecordPath(s3.execRecordDir(), "t", id))
	}
	assert.FileExists(t, execRecordPath(s3.execRecordDir(), "t", fmt.Sprintf("x1%011x", 0)))

	// Or past its retention; and a record once forgotten is not written
	// again (an exec's end racing its removal).
	aged := s3.execs.get("t", "s", fmt.Sprintf("x1%011x", 0))
	aged.mu.Lock()
	aged.ended = time.Now().Add(-ExecRetention - time.Second)
	aged.mu.Unlock()
	s3.execs.add(recordedEntry(s3, "x200000000000"))
	assert.Nil(t, s3.execs.get("t", "s", aged.id))
	assert.NoFileExists(t, aged.recordPath)
	s3.record(aged)
	assert.NoFileExists(t, aged.recordPath, "written after it was forgotten")

	// A write that fails leaves no temporary file.
	blocked := recordedEntry(s3, "x400000000000")
	require.NoError(t, os.MkdirAll(filepath.Join(blocked.recordPath, "d"), 0o700))
	s3.record(blocked)
	tmps, _ := filepath.Glob(filepath.Join(execDir, ".tmp-*"))
	assert.Empty(t, tmps)
	require.NoError(t, os.RemoveAll(blocked.recordPath))

	// Too big a record keeps the result without its captured output.
	defer func(m int64) { maxExecRecord = m }(maxExecRecord)
	maxExecRecord = 4 << 10
	big := recordedEntry(s3, "x300000000000")
	bigRes := *res
	bigRes.Stdout, bigRes.StdoutBytes = strings.Repeat("a", 8<<10), 8<<10
	big.finish(&bigRes, nil)
	s3.record(big)
	rec, err := readExecRecord(big.recordPath)
	require.NoError(t, err)
	assert.Empty(t, rec.Info.Result.Stdout)
	assert.True(t, rec.Info.Result.StdoutTruncated)
	assert.EqualValues(t, 8<<10, rec.Info.Result.StdoutBytes)
	s3.Close()
}
