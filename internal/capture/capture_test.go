package capture_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail/internal/capture"
)

// marker is the text a Buffer puts between head and tail when n bytes were dropped.
func marker(n int) string { return fmt.Sprintf("\n[jail: %d bytes dropped]\n", n) }

// headTail returns H and T for a limit, as the package documents them.
func headTail(limit int) (h, t int) {
	limit = max(limit, 0)
	h = limit * 3 / 4
	return h, limit - h
}

// write writes data to b in chunks of at most chunk bytes.
func write(t testing.TB, b *capture.Buffer, data []byte, chunk int) {
	t.Helper()
	for len(data) > 0 {
		k := min(chunk, len(data))
		// Checked by hand: testify per call makes byte-at-a-time tests slow.
		if n, err := b.Write(data[:k]); n != k || err != nil {
			t.Fatalf("Write: got (%d, %v), want (%d, nil)", n, err, k)
		}
		data = data[k:]
	}
}

func TestBuffer(t *testing.T) {
	a := strings.Repeat
	tests := []struct {
		name      string
		limit     int64
		in        string
		want      string
		truncated bool
	}{
		{name: "empty", limit: 16, in: "", want: ""},
		{name: "empty with limit 0", limit: 0, in: "", want: ""},
		{name: "empty with negative limit", limit: -1, in: "", want: ""},
		{name: "below limit", limit: 16, in: "hello\n", want: "hello\n"},
		{name: "exactly at limit", limit: 16, in: a("x", 16), want: a("x", 16)},
		{
			name: "one byte over", limit: 16, in: "abcdefghijkl" + "m" + "nopq",
			want: "abcdefghijkl" + marker(1) + "nopq", truncated: true,
		},
		{
			name: "far over", limit: 16, in: "abcdefghijkl" + a("-", 1000) + "wxyz",
			want: "abcdefghijkl" + marker(1000) + "wxyz", truncated: true,
		},
		{
			name: "invalid UTF-8 below limit kept as is", limit: 16, in: "\xff\xfe\xc3",
			want: "\xff\xfe\xc3",
		},
		{
			name: "UTF-8 split at limit kept as is", limit: 4, in: "ab\xe6\x97",
			want: "ab\xe6\x97",
		},

		// Limit 16: H = 12, T = 4.
		{
			name: "é straddles head cut", limit: 16, in: a("a", 11) + "é" + a("b", 10) + "zzzz",
			want: a("a", 11) + marker(12) + "zzzz", truncated: true,
		},
		{
			name: "é straddles tail cut", limit: 16, in: a("a", 12) + a("b", 10) + "éxyz",
			want: a("a", 12) + marker(12) + "xyz", truncated: true,
		},
		{
			name: "日 straddles head cut after 1 byte", limit: 16, in: a("a", 11) + "日本" + a("b", 10) + "zzzz",
			want: a("a", 11) + marker(16) + "zzzz", truncated: true,
		},
		{
			name: "日 straddles head cut after 2 bytes", limit: 16, in: a("a", 10) + "日本" + a("b", 10) + "zzzz",
			want: a("a", 10) + marker(16) + "zzzz", truncated: true,
		},
		{
			name: "本 ends head exactly", limit: 16, in: a("a", 6) + "日本" + a("b", 10) + "zzzz",
			want: a("a", 6) + "日本" + marker(10) + "zzzz", truncated: true,
		},
		{
			name: "日本 straddles tail cut", limit: 16, in: a("a", 12) + "xxxxx" + "日本",
			want: a("a", 12) + marker(8) + "本", truncated: true,
		},
		{
			name: "emoji straddles head cut", limit: 16, in: a("a", 9) + "😀" + a("b", 10) + "tail",
			want: a("a", 9) + marker(14) + "tail", truncated: true,
		},
		{
			name: "emoji straddles tail cut", limit: 16, in: a("a", 12) + a("c", 6) + "😀z",
			want: a("a", 12) + marker(10) + "z", truncated: true,
		},
		{
			name: "emoji fills tail exactly", limit: 16, in: a("a", 12) + a("c", 6) + "😀",
			want: a("a", 12) + marker(6) + "😀", truncated: true,
		},
		{
			name: "emoji straddles both cuts", limit: 24, in: a("a", 17) + "😀" + "bbb" + "😀😀",
			want: a("a", 17) + marker(11) + "😀", truncated: true,
		},
		{
			name: "emoji alone with tail smaller than it", limit: 4, in: "😀😀",
			want: marker(8), truncated: true,
		},

		// Invalid UTF-8 is never rewritten, only cut where valid input could be.
		{
			name: "continuation bytes only", limit: 16, in: a("\x80", 40),
			want: a("\x80", 12) + marker(27) + "\x80", truncated: true,
		},
		{
			name: "lone lead byte at head end", limit: 16, in: a("a", 11) + "\xf0" + a("b", 10) + "zzzz",
			want: a("a", 11) + marker(11) + "zzzz", truncated: true,
		},
		{
			name: "invalid lead byte at head end kept", limit: 16, in: a("a", 11) + "\xff" + a("b", 10) + "zzzz",
			want: a("a", 11) + "\xff" + marker(10) + "zzzz", truncated: true,
		},
		{
			name: "bad continuation after lead kept", limit: 16, in: a("a", 10) + "\xe0\x41" + a("b", 10) + "zzzz",
			want: a("a", 10) + "\xe0\x41" + marker(10) + "zzzz", truncated: true,
		},

		// Small limits: H and T are 0/0, 0/1, 1/1, 2/1, 3/1.
		{name: "limit 0", limit: 0, in: "abcdef", want: marker(6), truncated: true},
		{name: "negative limit", limit: -5, in: "abcdef", want: marker(6), truncated: true},
		{name: "limit 1", limit: 1, in: "abcdef", want: marker(5) + "f", truncated: true},
		{name: "limit 1 at limit", limit: 1, in: "a", want: "a"},
		{name: "limit 2", limit: 2, in: "abcdef", want: "a" + marker(4) + "f", truncated: true},
		{name: "limit 3", limit: 3, in: "abcdef", want: "ab" + marker(3) + "f", truncated: true},
		{name: "limit 4", limit: 4, in: "abcdef", want: "abc" + marker(2) + "f", truncated: true},
		{name: "limit 4 at limit", limit: 4, in: "abcd", want: "abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, len(tt.in) + 1} {
				b := capture.New(tt.limit)
				write(t, b, []byte(tt.in), chunk)

				got := b.String()
				assert.Equal(t, tt.want, got, "chunk %d: got %q, want %q", chunk, got, tt.want)
				assert.Equal(t, int64(len(tt.in)), b.Total(), "chunk %d: Total: got %d, want %d", chunk, b.Total(), len(tt.in))
				assert.Equal(t, tt.truncated, b.Truncated(), "chunk %d: Truncated: got %v, want %v", chunk, b.Truncated(), tt.truncated)
				if utf8.ValidString(tt.in) {
					assert.True(t, utf8.ValidString(got), "chunk %d: got invalid UTF-8 %q from valid input", chunk, got)
				}
			}
		})
	}
}

// TestChunking checks that how the stream is split into writes does not
// change the result, including writes that wrap the ring and writes larger
// than the whole limit.
func TestChunking(t *testing.T) {
	var data []byte
	for i := range 1000 {
		data = fmt.Appendf(data, "line %d: héllo 日本 😀\n", i)
	}
	tests := []struct {
		name  string
		limit int64
	}{
		{name: "tiny", limit: 5},
		{name: "small", limit: 100},
		{name: "odd", limit: 1001},
		{name: "large", limit: 64 << 10},
		{name: "larger than input", limit: 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := capture.New(tt.limit)
			write(t, whole, data, len(data))
			want := whole.String()
			require.True(t, utf8.ValidString(want), "one write: got invalid UTF-8")

			for _, chunk := range []int{1, 2, 7, 64, 999, 4096, 70000} {
				b := capture.New(tt.limit)
				write(t, b, data, chunk)
				got := b.String()
				assert.Equal(t, want, got, "chunk %d: got a different String than one write", chunk)
				assert.Equal(t, whole.Total(), b.Total(), "chunk %d: Total: got %d, want %d", chunk, b.Total(), whole.Total())
				assert.Equal(t, whole.Truncated(), b.Truncated(), "chunk %d: Truncated: got %v, want %v", chunk, b.Truncated(), whole.Truncated())
			}
		})
	}
}

// TestCopy checks that a Buffer works as the destination of io.Copy, as the
// jail parent uses it.
func TestCopy(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	b := capture.New(100)
	n, err := io.Copy(b, bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), n, "io.Copy: got %d bytes, want %d", n, len(data))
	want := "012345678901234567890123456789012345678901234567890123456789012345678901234" +
		marker(len(data)-100) + "5678901234567890123456789"
	assert.Equal(t, want, b.String())
}

// TestWriteDoesNotAllocate checks that once the ring is full, writing costs no
// allocation, so a payload that writes forever costs the parent no garbage.
func TestWriteDoesNotAllocate(t *testing.T) {
	tests := []struct {
		name  string
		chunk int
	}{
		{name: "small writes wrap the ring", chunk: 100},
		{name: "writes larger than the ring", chunk: 64 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := capture.New(4096)
			p := bytes.Repeat([]byte("x"), tt.chunk)
			write(t, b, bytes.Repeat([]byte("y"), 8192), 8192) // fill head and ring
			allocs := testing.AllocsPerRun(100, func() { _, _ = b.Write(p) })
			assert.Zero(t, allocs, "got %v allocations per Write, want 0", allocs)
		})
	}
}

// TestLazyAllocation checks that a large limit costs nothing until bytes
// arrive, since most streams (stderr of a quiet program) stay small.
func TestLazyAllocation(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b := capture.New(1 << 30)
	_, err := b.Write([]byte("hello"))
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(b)

	grew := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, grew, uint64(64<<10), "got %d bytes allocated for a 5-byte stream, want < 64 KiB", grew)
	assert.Equal(t, "hello", b.String())
}

// TestMemoryBounded writes 256 MiB through a 1 MiB Buffer and checks that the
// heap grows by about the limit, not by what was written.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	const (
		limit   = 1 << 20
		written = 256 << 20
		chunk   = 64 << 10
		bound   = 8 << 20
	)
	p := bytes.Repeat([]byte("0123456789abcdef"), chunk/16)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	b := capture.New(limit)
	for range written / chunk {
		_, _ = b.Write(p)
	}

	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapGrowth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(b)
	t.Logf("HeapAlloc growth %d bytes, TotalAlloc growth %d bytes", heapGrowth, allocated)

	assert.Equal(t, int64(written), b.Total(), "Total: got %d, want %d", b.Total(), written)
	assert.True(t, b.Truncated(), "Truncated: got false, want true")
	assert.Less(t, heapGrowth, int64(bound), "HeapAlloc grew by %d bytes, want < %d", heapGrowth, bound)
	assert.Less(t, allocated, uint64(bound), "allocated %d bytes in all, want < %d", allocated, bound)
}

// TestConcurrentTotal checks that a reporter may read the Buffer while the
// pipe reader writes to it; run it with -race.
func TestConcurrentTotal(t *testing.T) {
	b := capture.New(1000)
	p := []byte("0123456789")
	const writes = 10_000

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for range writes {
			_, _ = b.Write(p)
		}
	})
	wg.Go(func() {
		var last int64
		for {
			select {
			case <-done:
				return
			default:
			}
			n := b.Total()
			if n < last {
				t.Errorf("Total went backwards: got %d after %d", n, last)
				return
			}
			last = n
			_ = b.Truncated()
			_ = b.String()
		}
	})
	wg.Wait()
	assert.Equal(t, int64(writes*len(p)), b.Total())
}

// FuzzBuffer checks the documented policy against any input, split into
// writes of any size, with any limit up to 64 KiB.
func FuzzBuffer(f *testing.F) {
	f.Add([]byte(""), uint16(0), uint8(0))
	f.Add([]byte("hello, world"), uint16(5), uint8(2))
	f.Add([]byte("héllo 日本 😀 wörld 日本語 🎉🎉"), uint16(9), uint8(0))
	f.Add([]byte("\x80\x80\x80\x80\x80\xf0\x9f\x98"), uint16(4), uint8(3))
	f.Add(bytes.Repeat([]byte("日本"), 100), uint16(100), uint8(6))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, chunk uint8) {
		b := capture.New(int64(limit))
		write(t, b, data, int(chunk)+1)

		require.Equal(t, int64(len(data)), b.Total(), "Total: got %d, want %d", b.Total(), len(data))
		got := b.String()
		if len(data) <= int(limit) {
			require.False(t, b.Truncated(), "Truncated: got true, want false")
			require.Equal(t, string(data), got)
			return
		}
		require.True(t, b.Truncated(), "Truncated: got false, want true")
		if utf8.Valid(data) {
			require.True(t, utf8.ValidString(got), "got invalid UTF-8 %q from valid input", got)
		}

		// Find the head and tail lengths that explain got: each within 3 bytes
		// of H and T, with the marker's count exact.
		H, T := headTail(int(limit))
		h, tl, ok := split(got, data, H, T)
		require.True(t, ok, "got %q, want data[:h] + marker + data[len-t:] for h in [H-3, H=%d], t in [T-3, T=%d]", got, H, T)

		// The head is cut only before an incomplete sequence at its end.
		if h < H {
			require.True(t, utf8.RuneStart(data[h]) && !utf8.FullRune(data[h:H]),
				"head cut to %d of %d: got %q dropped, want an incomplete UTF-8 sequence", h, H, data[h:H])
		}
		// The tail is cut only past continuation bytes, and past all of them
		// up to 3.
		dropped := data[len(data)-T : len(data)-tl]
		for _, c := range dropped {
			require.False(t, utf8.RuneStart(c), "tail cut: got %q dropped, want only continuation bytes", dropped)
		}
		if tl > 0 && len(dropped) < 3 {
			require.True(t, utf8.RuneStart(data[len(data)-tl]),
				"tail starts with continuation byte %#x after %d skipped, want at most 3 skipped", data[len(data)-tl], len(dropped))
		}
	})
}

// split finds h in [H-3, H] and t in [T-3, T] with got == data[:h] +
// marker(len(data)-h-t) + data[len(data)-t:], preferring the longest.
func split(got string, data []byte, H, T int) (h, t int, ok bool) {
	for h = H; h >= max(0, H-3); h-- {
		for t = T; t >= max(0, T-3); t-- {
			if got == string(data[:h])+marker(len(data)-h-t)+string(data[len(data)-t:]) {
				return h, t, true
			}
		}
	}
	return 0, 0, false
}

func BenchmarkWrite(b *testing.B) {
	for _, chunk := range []int{512, 64 << 10} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			p := bytes.Repeat([]byte("x"), chunk)
			buf := capture.New(1 << 20)
			b.SetBytes(int64(chunk))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = buf.Write(p)
			}
		})
	}
}

func TestBytesExact(t *testing.T) {
	b := capture.New(8)
	in := []byte{0xff, 0xfe, 0x00, 0x80, 'a', 0xc3}
	_, _ = b.Write(in)
	assert.Equal(t, in, b.Bytes(), "under the limit: every byte")
	_, _ = b.Write([]byte{1, 2, 3, 4, 5, 6})
	// 12 bytes, limit 8: head 6, tail 2, 4 dropped.
	assert.Equal(t, append(append(in, marker(4)...), 5, 6), b.Bytes())
}

// TestBase64IsBytes: Base64, encoded in place, is the base64 of Bytes,
// whatever the limit and however the ring has wrapped.
func TestBase64IsBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int64{0, 1, 7, 64, 1000} {
		b := capture.New(limit)
		for range 50 {
			p := make([]byte, rng.IntN(40))
			for i := range p {
				p[i] = byte(rng.IntN(256))
			}
			_, _ = b.Write(p)
			require.Equal(t, base64.StdEncoding.EncodeToString(b.Bytes()), b.Base64(), "limit %d", limit)
		}
	}
}

func TestSetLimit(t *testing.T) {
	b := capture.New(1 << 20)
	if !b.SetLimit(8) {
		t.Fatal("SetLimit before any write: got false")
	}
	b.Write([]byte("0123456789abcdef"))
	if !b.Truncated() || b.Total() != 16 {
		t.Errorf("got truncated %v, total %d; want true, 16", b.Truncated(), b.Total())
	}
	if b.SetLimit(1 << 20) {
		t.Error("SetLimit after a write: got true")
	}
}
