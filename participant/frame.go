package participant

import "sync"

// The participant's writer sends text frames it builds itself rather than
// one library call per message: the queue holds the messages' bodies, the
// same bytes of an envelope shared by every recipient that takes it (never
// a copy per recipient, nor a frame of its own), and a writer frames
// what is queued for its connection, up to the write limits
// (maxBatchItems, maxBatchBytes), into one buffer (a server's frames are
// not masked, so a header is all a frame adds) and sends it in one Write.

// AppendTextHeader appends the header of a final text frame of n bytes.
func AppendTextHeader(dst []byte, n int) []byte {
	const finText = 0x81
	switch {
	case n < 126:
		return append(dst, finText, byte(n))
	case n <= 0xffff:
		return append(dst, finText, 126, byte(n>>8), byte(n))
	default:
		return append(dst, finText, 127,
			byte(uint64(n)>>56), byte(uint64(n)>>48), byte(uint64(n)>>40), byte(uint64(n)>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// writeBuffers hold one write's frames; pooled, so that an idle connection
// holds no write buffer.
var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// maxPooledBuffer keeps a huge write's buffer out of the pool; a write of
// up to maxBatchBytes (plus frame headers) always fits.
const maxPooledBuffer = 4 * maxBatchBytes

// putWriteBuffer gives a write's buffer back to the pool.
func putWriteBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		writeBuffers.Put(b)
	}
}
