package capture

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Buffer is an [io.Writer] that keeps at most a fixed number of bytes of what
// is written to it: the start of the stream (the head) and its end (the tail).
// The zero value keeps nothing; use [New]. See the package documentation for
// the exact policy.
type Buffer struct {
	mu sync.Mutex

	limit   int64 // the limit passed to New, clamped to [0, math.MaxInt]
	headMax int   // H: how many bytes of the head to keep
	tailMax int   // T: how many bytes of the tail to keep

	// head holds the first min(total, headMax) bytes. It grows on demand, so an
	// empty stream costs nothing.
	head []byte

	// tail is a ring of the last bytes written after the head filled up. It grows
	// on demand to tailMax bytes; until it is full the data is tail[0:len(tail)]
	// in order and start is 0. Once full, start is the index of the oldest byte.
	tail  []byte
	start int

	total int64
}

// New returns a Buffer that keeps at most limit bytes of text: the first
// limit*3/4 bytes (rounded down) and the last limit-limit*3/4 bytes.
// A limit of zero or less keeps nothing, but the Buffer still counts.
// No memory is allocated until bytes are written.
func New(limit int64) *Buffer {
	// A negative limit keeps nothing, as zero does. Clamping to MaxInt only
	// matters on 32-bit platforms, where no slice could hold more anyway.
	limit = min(max(limit, 0), math.MaxInt)
	// limit*3/4 without overflowing for limits near MaxInt64.
	headMax := limit/4*3 + limit%4*3/4
	return &Buffer{
		limit:   limit,
		headMax: int(headMax),
		tailMax: int(limit - headMax),
	}
}

// SetLimit changes the limit New was given, as long as nothing was written
// yet (a jail prepared ahead, released for a run with a limit of its own);
// after that it returns false and changes nothing.
func (b *Buffer) SetLimit(limit int64) bool {
	nb := New(limit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total != 0 {
		return false
	}
	b.limit, b.headMax, b.tailMax = nb.limit, nb.headMax, nb.tailMax
	return true
}

// Write counts p and keeps the bytes of it that belong to the head or the tail.
// It always consumes all of p and never returns an error, so that an
// [io.Copy] from the payload's pipe never stops early and the payload never
// blocks on a full pipe. Write takes time linear in len(p) and, once the tail
// ring has reached its full size, does not allocate.
func (b *Buffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()

	b.total += int64(n)
	if room := b.headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = grow(b.head, len(b.head)+k, b.headMax)
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 && b.tailMax > 0 {
		b.writeTail(p)
	}
	return n, nil
}

// writeTail adds p to the tail ring, overwriting the oldest bytes.
// Must be called with b.mu held and len(p) > 0 and b.tailMax > 0.
func (b *Buffer) writeTail(p []byte) {
	if len(p) >= b.tailMax {
		// p alone fills the ring: everything older is dropped, so there is
		// nothing to copy when growing.
		if cap(b.tail) < b.tailMax {
			b.tail = make([]byte, b.tailMax)
		}
		b.tail = b.tail[:b.tailMax]
		copy(b.tail, p[len(p)-b.tailMax:])
		b.start = 0
		return
	}
	if room := b.tailMax - len(b.tail); room > 0 {
		// Still filling: the ring is linear and start stays 0.
		k := min(room, len(p))
		b.tail = grow(b.tail, len(b.tail)+k, b.tailMax)
		b.tail = append(b.tail, p[:k]...)
		p = p[k:]
	}
	// The ring is full and len(p) < tailMax, so p wraps at most once.
	k := copy(b.tail[b.start:], p)
	copy(b.tail, p[k:])
	b.start = (b.start + len(p)) % b.tailMax
}

// grow returns buf with capacity for at least need bytes, and never more than
// limit, doubling as append would. The cap keeps a Buffer's memory at its limit
// rather than at whatever append's growth policy rounds up to.
func grow(buf []byte, need, limit int) []byte {
	if need <= cap(buf) {
		return buf
	}
	c := min(max(2*cap(buf), need, 512), limit)
	nb := make([]byte, len(buf), c)
	copy(nb, buf)
	return nb
}

// Total returns the number of bytes written in all, kept or not.
func (b *Buffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Truncated reports whether bytes were dropped, that is whether more than the
// limit was written. When it is true, [Buffer.String] contains the marker.
func (b *Buffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > b.limit
}

// String returns the kept text. If no more than the limit was written, it is
// exactly the bytes written. Otherwise it is the head, the marker
// "\n[jail: N bytes dropped]\n" and the tail, with the head and tail cut so as
// not to split a UTF-8 sequence, and N the exact number of bytes not shown.
// The result may then exceed the limit by the marker's length.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	var sb strings.Builder
	if b.total <= b.limit {
		// Nothing dropped, so the ring has not wrapped: start is 0.
		sb.Grow(len(b.head) + len(b.tail))
		sb.Write(b.head)
		sb.Write(b.tail)
		return sb.String()
	}

	head := b.head[:cutHead(b.head)]
	skip := b.tailSkip()
	tailLen := len(b.tail) - skip
	dropped := b.total - int64(len(head)) - int64(tailLen)

	var num [20]byte
	digits := strconv.AppendInt(num[:0], dropped, 10)
	const pre, post = "\n[jail: ", " bytes dropped]\n"
	sb.Grow(len(head) + len(pre) + len(digits) + len(post) + tailLen)
	sb.Write(head)
	sb.WriteString(pre)
	sb.Write(digits)
	sb.WriteString(post)
	// The tail in order, from its oldest byte, without the skipped bytes.
	from := b.start + skip
	if from >= len(b.tail) {
		from -= len(b.tail)
		sb.Write(b.tail[from:b.start])
	} else {
		sb.Write(b.tail[from:])
		sb.Write(b.tail[:b.start])
	}
	return sb.String()
}

// Bytes returns the kept bytes exactly: what String returns, but with the
// head and the tail cut at the limit itself rather than at UTF-8
// boundaries, for output that is not text.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total <= b.limit {
		return append(append(make([]byte, 0, len(b.head)+len(b.tail)), b.head...), b.tail...)
	}
	marker := "\n[jail: " + strconv.FormatInt(b.total-int64(len(b.head))-int64(len(b.tail)), 10) + " bytes dropped]\n"
	out := make([]byte, 0, len(b.head)+len(marker)+len(b.tail))
	out = append(out, b.head...)
	out = append(out, marker...)
	out = append(out, b.tail[b.start:]...)
	return append(out, b.tail[:b.start]...)
}

// Base64 returns Bytes in standard base64, encoded from the buffer in
// place: for output near the limit, no second copy of it is made.
func (b *Buffer) Base64() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sb strings.Builder
	segs := [][]byte{b.head, b.tail}
	n := len(b.head) + len(b.tail)
	if b.total > b.limit {
		marker := []byte("\n[jail: " + strconv.FormatInt(b.total-int64(len(b.head))-int64(len(b.tail)), 10) + " bytes dropped]\n")
		segs = [][]byte{b.head, marker, b.tail[b.start:], b.tail[:b.start]}
		n += len(marker)
	}
	sb.Grow(base64.StdEncoding.EncodedLen(n))
	enc := base64.NewEncoder(base64.StdEncoding, &sb)
	for _, seg := range segs {
		_, _ = enc.Write(seg) // a strings.Builder does not fail
	}
	_ = enc.Close()
	return sb.String()
}

// cutHead returns the length of the longest prefix of head that does not end
// in an incomplete UTF-8 sequence. It drops at most 3 bytes: a sequence is at
// most 4 bytes long, so one that started 4 or more bytes back is complete.
// A lead byte followed by bytes that cannot complete it is already invalid
// and is kept (utf8.FullRune reports it as full), so invalid input is only
// ever cut where valid input could have continued.
func cutHead(head []byte) int {
	for i := len(head) - 1; i >= 0 && i >= len(head)-3; i-- {
		if utf8.RuneStart(head[i]) {
			if !utf8.FullRune(head[i:]) {
				return i
			}
			break
		}
	}
	return len(head)
}

// tailSkip returns how many continuation bytes (0x80-0xBF) start the tail in
// stream order, at most 3: a UTF-8 sequence has at most 3 continuation bytes,
// so after 3 the input is invalid and cutting more would hide it.
// Must be called with b.mu held.
func (b *Buffer) tailSkip() int {
	n := 0
	for n < 3 && n < len(b.tail) {
		i := b.start + n
		if i >= len(b.tail) {
			i -= len(b.tail)
		}
		if utf8.RuneStart(b.tail[i]) {
			break
		}
		n++
	}
	return n
}

// Encoded returns the captured output as text when it is valid UTF-8, and
// as base64 of the exact kept bytes otherwise, with the encoding's name
// ("utf-8", "base64"): encoding/json would replace every invalid byte
// with U+FFFD, and a report would lie.
func (b *Buffer) Encoded() (string, string) {
	if s := b.String(); utf8.ValidString(s) {
		return s, "utf-8"
	}
	return b.Base64(), "base64"
}
