package participant

import (
	"sync"
	"syscall"
)

// The socket's RawConn takes a function to call with the descriptor; a
// closure made for each call escapes to the heap with what it captures
// (three or four objects a write, as many a read: the buffer, the count,
// the error). rawWrite and rawRead are that state with its function made
// once, pooled, so that a write and a read allocate nothing (issue 32).

// rawWrite is one write that must not wait (tryWriteLocked).
type rawWrite struct {
	buf []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

var rawWrites = sync.Pool{New: func() any {
	w := &rawWrite{}
	w.fn = func(fd uintptr) bool {
		for {
			w.n, w.err = syscall.Write(int(fd), w.buf)
			if w.err != syscall.EINTR {
				return true
			}
		}
	}
	return w
}}

// writeRaw writes buf to the socket with one system call, without
// waiting for it: n is what it took, errno the system call's error
// (EAGAIN: nothing), err the RawConn's (closed).
func writeRaw(raw syscall.RawConn, buf []byte) (n int, errno, err error) {
	w := rawWrites.Get().(*rawWrite)
	w.buf = buf
	err = raw.Write(w.fn)
	n, errno = w.n, w.err
	w.buf, w.n, w.err = nil, 0, nil
	rawWrites.Put(w)
	return n, errno, err
}

// rawRead is one read of what the socket holds into a buffer of
// readAheads, taken once the socket is readable (fill).
type rawRead struct {
	b   *[]byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

var rawReads = sync.Pool{New: func() any {
	r := &rawRead{}
	r.fn = func(fd uintptr) bool {
		r.b = readAheads.Get().(*[]byte)
		for {
			r.n, r.err = syscall.Read(int(fd), *r.b)
			if r.err != syscall.EINTR {
				break
			}
		}
		if r.err == syscall.EAGAIN {
			// Nothing yet: wait for the socket without the buffer.
			readAheads.Put(r.b)
			r.b = nil
			return false
		}
		return true
	}
	return r
}}

// readRaw waits until the socket is readable and reads what it holds
// into a buffer of readAheads: b is nil when the wait ended with none
// taken, errno the system call's error, err the RawConn's (closed, or a
// deadline passed).
func readRaw(raw syscall.RawConn) (b *[]byte, n int, errno, err error) {
	r := rawReads.Get().(*rawRead)
	err = raw.Read(r.fn)
	b, n, errno = r.b, r.n, r.err
	r.b, r.n, r.err = nil, 0, nil
	rawReads.Put(r)
	return b, n, errno, err
}
