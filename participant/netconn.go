package participant

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// A WebSocket library keeps a 4 KiB bufio.Reader and a 4 KiB bufio.Writer
// per connection for its whole life, which is half of what an idle
// connection costs. SmallBuffers hands it 16-byte ones instead, over a
// net.Conn that coalesces the writes of one message in a pooled buffer
// while the participant's writer holds it (hold/release), so that one
// message still costs one system call and an idle connection holds no
// write buffer at all.
//
// Incoming messages pay one or two extra reads for their header; incoming
// traffic is one read per envelope, while outgoing is one write per
// recipient, so that is the side kept cheap.

const smallBuffer = 16 // the least bufio accepts

// SmallBuffers wraps w so that the WebSocket upgrade hijacks a connection
// with small buffers. Conn returns that connection once the upgrade is done.
func SmallBuffers(w http.ResponseWriter) *HijackWriter {
	return &HijackWriter{ResponseWriter: w}
}

// HijackWriter is an http.ResponseWriter whose Hijack returns a
// CoalescingConn.
type HijackWriter struct {
	http.ResponseWriter
	conn *CoalescingConn
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
	h.conn = &CoalescingConn{Conn: nc, r: r}
	return h.conn, bufio.NewReadWriter(bufio.NewReaderSize(r, smallBuffer), bufio.NewWriterSize(h.conn, smallBuffer)), nil
}

// Conn is the hijacked connection, or nil before the upgrade.
func (h *HijackWriter) Conn() *CoalescingConn { return h.conn }

// CoalescingConn is a net.Conn that, while held, gathers what is written in
// a pooled buffer and writes it at once on release.
type CoalescingConn struct {
	net.Conn
	r       io.Reader // the bytes read before the hijack, then the connection
	mu      sync.Mutex
	holding bool
	buf     *[]byte
}

var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// maxPooledBuffer keeps a huge message's buffer out of the pool; a write
// of up to maxBatchBytes (plus frame headers, which append may double)
// always fits.
const maxPooledBuffer = 4 * maxBatchBytes

// Read implements net.Conn.
func (c *CoalescingConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write implements net.Conn. Outside a hold (control frames written by the
// library's reader: pongs, closes) it writes through. The lock is never
// held across a write to the socket, so closing never waits on a peer that
// stopped reading; net.Conn keeps concurrent writes whole.
func (c *CoalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.holding {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = writeBuffers.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	c.mu.Unlock()
	return len(p), nil
}

// closeFlushTimeout bounds the last write of what was gathered when the
// connection closes: a peer that does not read does not get it.
const closeFlushTimeout = time.Second

// Close writes what is gathered, then closes. The library writes its
// closing frame and closes the connection from its reader goroutine; when
// the participant's writer holds the connection at that moment the frame
// is in the buffer, and must still go out.
func (c *CoalescingConn) Close() error {
	if b := c.take(); b != nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		_, _ = c.Conn.Write(*b)
		putWriteBuffer(b)
	}
	return c.Conn.Close()
}

func (c *CoalescingConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// take ends the hold and returns what was gathered, or nil.
func (c *CoalescingConn) take() *[]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	b := c.buf
	c.buf = nil
	return b
}

// release writes what was gathered since hold, in one system call.
func (c *CoalescingConn) release() error {
	b := c.take()
	if b == nil {
		return nil
	}
	_, err := c.Conn.Write(*b)
	putWriteBuffer(b)
	return err
}

func putWriteBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		writeBuffers.Put(b)
	}
}
