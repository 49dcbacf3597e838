package participant

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
)

// A WebSocket library keeps a 4 KiB bufio.Reader and a 4 KiB bufio.Writer
// per connection for its whole life, which is half of what an idle
// connection costs. SmallBuffers hands it small ones instead: a 16-byte
// reader (incoming messages pay one or two extra reads for their header,
// served from Conn's read-ahead rather than the socket), and a writer
// just large enough for a control frame (ping, pong, close: at most 139
// bytes), which the library flushes per frame, so that each of its frames
// reaches the socket in one Write. The participant's writer writes its
// data frames itself (frame.go), each burst in one Write too, and Conn's
// write lock keeps the Writes whole: the library's frames and the
// writer's never interleave, even where a write that must not wait left
// part of itself for later.
const (
	smallBuffer = 16 // the least bufio accepts
	// controlBuffer holds a whole control frame: a header of at most 14
	// bytes and at most 125 of payload.
	controlBuffer = 256
)

// SmallBuffers wraps w so that the WebSocket upgrade hijacks a connection
// with small buffers. Conn returns that connection once the upgrade is done.
func SmallBuffers(w http.ResponseWriter) *HijackWriter {
	return &HijackWriter{ResponseWriter: w}
}

// HijackWriter is an http.ResponseWriter whose Hijack returns a Conn.
type HijackWriter struct {
	http.ResponseWriter
	conn *Conn
}

// Unwrap lets http.ResponseController reach the server's writer.
func (h *HijackWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Hijack implements http.Hijacker.
func (h *HijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, http.ErrNotSupported
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the client sent after its request are already in the server's
	// reader: keep them in front of the connection.
	var r io.Reader = nc
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)
	}
	// The library reads through the connection it is given once its own
	// reader has no bytes buffered, so the connection itself must read
	// from r too.
	h.conn = &Conn{Conn: nc, r: r}
	lib := bufio.NewReaderSize(r, smallBuffer)
	h.conn.lib = lib
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			h.conn.wraw = raw
			if r == io.Reader(nc) {
				h.conn.raw = raw
			}
		}
	}
	return h.conn, bufio.NewReadWriter(lib, bufio.NewWriterSize(h.conn, controlBuffer)), nil
}

// Conn is the hijacked connection, or nil before the upgrade.
func (h *HijackWriter) Conn() *Conn { return h.conn }

// Conn is a hijacked net.Conn that first reads the bytes the client sent
// before the upgrade completed.
//
// It reads ahead: the library reads a message's header a few bytes at a
// time (its reader's buffer is 16 bytes), which would cost a sender two
// or three system calls per envelope, so Conn reads what the socket holds
// into a pooled buffer and serves the library from it. The buffer goes
// back to the pool as soon as it is drained, so that an idle connection
// holds none: its reader waits for the socket to be readable with no
// buffer taken (fill), and takes one only to read what has come.
type Conn struct {
	net.Conn
	r   io.Reader       // the bytes read before the hijack, then the connection
	raw syscall.RawConn // the socket, to wait on it with no buffer; nil: r

	ahead *[]byte // read ahead, not yet served; nil when drained
	off   int     // what of it was served
	// lib is the library's reader on top of the connection, whose few
	// bytes come before ahead's.
	lib *bufio.Reader
	// peek keeps MessageBuffered off the library's reader while a closing
	// handshake, from the writer's goroutine, reads the peer's close frame
	// through it (CloseHandshake).
	peek sync.Mutex

	// The write side. Every write goes through Write or tryWriteLocked,
	// under wmu, so that the library's frames (ping, pong, close) and the
	// participant's never interleave, even when a write that must not
	// wait leaves part of itself for later (rest).
	wmu  sync.Mutex
	wraw syscall.RawConn // the socket, for writes that must not wait; nil: none (not a socket)
	// rest is the end of a tryWriteLocked that the socket did not take,
	// from restOff on: written before anything else. nil when there is
	// none.
	rest    *[]byte
	restOff int
}

// MessageBuffered reports whether the next WebSocket message is already
// read from the socket whole: a data frame with its final bit, every
// byte of it in the library's reader or read ahead. The gateway's reader
// then handles it before it lets the writers of whom its envelopes were
// queued for go (as nats-server flushes its clients at the end of each
// read), and never waits on a message that has not come whole with
// their writes held. Call it from the reading goroutine, between
// messages.
func (c *Conn) MessageBuffered() bool {
	c.peek.Lock()
	defer c.peek.Unlock()
	var head [14]byte
	n, total := 0, 0
	if c.lib != nil {
		if k := c.lib.Buffered(); k > 0 {
			b, _ := c.lib.Peek(k)
			n = copy(head[:], b)
			total = k
		}
	}
	if c.ahead != nil {
		rest := (*c.ahead)[c.off:]
		n += copy(head[n:], rest)
		total += len(rest)
	}
	if n < 2 {
		return false
	}
	fin, op := head[0]&0x80 != 0, head[0]&0x0f
	if !fin || (op != 1 && op != 2) {
		return false // a fragment, or a control frame: the library may wait after it
	}
	size, hl := uint64(head[1]&0x7f), 2
	switch size {
	case 126:
		if n < 4 {
			return false
		}
		size, hl = uint64(head[2])<<8|uint64(head[3]), 4
	case 127:
		if n < 10 {
			return false
		}
		size = 0
		for _, b := range head[2:10] {
			size = size<<8 | uint64(b)
		}
		hl = 10
	}
	if head[1]&0x80 != 0 {
		hl += 4 // the mask
	}
	return uint64(total) >= uint64(hl)+size
}

// CloseHandshake runs close, the library's closing handshake, which reads
// the peer's answer from another goroutine than the gateway's reader:
// MessageBuffered waits until it is done.
func (c *Conn) CloseHandshake(close func()) {
	c.peek.Lock()
	defer c.peek.Unlock()
	close()
}

// readAhead is the most a Conn reads at once.
const readAhead = 16 << 10

var readAheads = sync.Pool{New: func() any { b := make([]byte, readAhead); return &b }}

// Read implements net.Conn. The library reads from one goroutine only.
func (c *Conn) Read(p []byte) (int, error) {
	if c.ahead == nil {
		if len(p) >= readAhead {
			return c.r.Read(p) // a large read needs no buffer of ours
		}
		b, n, err := c.fill()
		if n == 0 {
			return 0, err
		}
		*b = (*b)[:n]
		c.ahead, c.off = b, 0
	}
	n := copy(p, (*c.ahead)[c.off:])
	c.off += n
	if c.off == len(*c.ahead) {
		*c.ahead = (*c.ahead)[:readAhead]
		readAheads.Put(c.ahead)
		c.ahead = nil
	}
	return n, nil
}

// fill reads what the connection holds into a buffer of the pool. On a
// socket it takes the buffer only once the socket is readable: a reader
// blocked in a Read with the buffer taken would pin 16 KiB for each idle
// connection. n is 0 when nothing was read (the buffer is then back in
// the pool).
func (c *Conn) fill() (b *[]byte, n int, err error) {
	if c.raw == nil {
		b = readAheads.Get().(*[]byte)
		n, err = c.r.Read(*b)
		if n == 0 {
			readAheads.Put(b)
		}
		return b, n, err
	}
	var rerr error
	b, n, rerr, err = readRaw(c.raw)
	switch {
	case err != nil: // closed, or a deadline passed
	case rerr != nil:
		err = &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0:
		err = io.EOF
	}
	if n <= 0 {
		n = 0
		if b != nil {
			readAheads.Put(b)
		}
	}
	return b, n, err
}

// Write implements net.Conn for the library's frames and for the
// participant's writes that may wait: what a tryWriteLocked left goes first.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeRestLocked(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// writeRest writes what a tryWriteLocked left, waiting for the socket.
func (c *Conn) writeRest() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeRestLocked()
}

func (c *Conn) writeRestLocked() error {
	if c.rest == nil {
		return nil
	}
	_, err := c.Conn.Write((*c.rest)[c.restOff:])
	putWriteBuffer(c.rest)
	c.rest, c.restOff = nil, 0
	return err
}

// tryWriteLocked writes *b, a buffer of writeBuffers that it takes
// over, with one system call and without waiting on the socket: what the
// socket does not take at once is kept, to be written before anything
// else (writeRest, or the next Write), and ok is false. Call it with wmu
// held (TryLock: a caller that must not wait does not wait for the
// library's write either), and only when nothing is left (rest is nil).
func (c *Conn) tryWriteLocked(b *[]byte) (ok bool, err error) {
	buf := *b
	n, werr, err := writeRaw(c.wraw, buf)
	switch {
	case err != nil: // closed
	case werr == syscall.EAGAIN:
		n = 0
	case werr != nil:
		err = &net.OpError{Op: "write", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", werr)}
	}
	if err != nil || n == len(buf) {
		putWriteBuffer(b)
		return err == nil, err
	}
	c.rest, c.restOff = b, n
	return false, nil
}
