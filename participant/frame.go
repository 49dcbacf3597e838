package participant

import "sync"

// The participant's writer sends text frames it builds itself rather than
// one library call per message: the same frame of an envelope (a server's
// frames are not masked) is then built once by the pod's fan-out and
// shared by every recipient that takes it as its own message, and a
// writer sends everything queued for its connection in one Write.

// TextFrame returns body as a complete WebSocket text frame (FIN set, not
// masked): the form in which the queue holds what is to be written.
func TextFrame(body []byte) []byte {
	return append(AppendTextHeader(make([]byte, 0, 10+len(body)), len(body)), body...)
}

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

// frameBody is the payload of a frame built by TextFrame.
func frameBody(frame []byte) []byte {
	switch frame[1] {
	case 126:
		return frame[4:]
	case 127:
		return frame[10:]
	}
	return frame[2:]
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
