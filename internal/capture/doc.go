// Package capture keeps a bounded head and tail of a jailed program's output.
//
// The jail parent reads the payload's stdout and stderr from pipes into one
// [Buffer] each, and the result's stdout and stderr fields are the buffers'
// [Buffer.String]. The payload is untrusted and may write gigabytes, so a
// Buffer holds at most its limit in bytes however much is written: the parent's
// memory is bounded by the limit, not by the payload.
//
// # Head and tail
//
// A Buffer created with [New](limit) keeps the first H = limit*3/4 bytes
// written (the head, where a program usually says what it is doing) and the
// last T = limit-H bytes (the tail, where it usually says why it failed). The
// bytes between them are counted and dropped. While no more than limit bytes
// have been written, String returns them exactly as written, even if they are
// not valid UTF-8.
//
// # Marker
//
// Once bytes are dropped, String returns head + marker + tail, where the marker
// is
//
//	"\n[jail: N bytes dropped]\n"
//
// and N is the exact number of bytes of the stream that are not shown, that is
// [Buffer.Total] minus the lengths of the head and tail shown (the UTF-8 cuts
// below are counted in N). The word "bytes" is used even when N is 1, so the
// marker is easy to match. The marker is not counted against the limit: String
// may exceed the limit by the marker's length, which is at most 43 bytes.
//
// # UTF-8
//
// When bytes are dropped, the head and the tail are cut so that they do not
// split a UTF-8 sequence: the head is cut back to before an incomplete
// sequence at its end, and the tail is cut forward past at most 3 continuation
// bytes (0x80-0xBF) at its start. Each cut drops at most 3 bytes, so valid
// UTF-8 input gives valid UTF-8 output. Invalid input is never rewritten
// (no U+FFFD is inserted); it is only cut at the same places.
//
// # Concurrency
//
// A Buffer is safe for concurrent use: Write, Total, Truncated and String take
// a mutex, so a progress reporter may read Total while the pipe reader writes.
// Writes from more than one goroutine are serialized but interleave in an
// unspecified order, so each stream should have one writer.
//
// Capture does not read pipes, enforce time limits or decode text; the caller
// copies the pipe into the Buffer, for example with [io.Copy].
package capture
