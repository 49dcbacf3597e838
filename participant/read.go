package participant

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/coder/websocket"
)

// Reading: ReadLoop reads the participant's messages until its connection
// ends, and hands each to the one who serves it (the gateway's pod), with
// whether another is already buffered, so that what handling it queued for
// others is flushed once there is nothing more to read at once rather than
// after each message.

// readBuffers holds the buffers messages are read into: a handler keeps
// nothing of the bytes it is handed, so a read buffer is free again as
// soon as its message is handled, and an idle connection holds none.
var readBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledRead is the largest read buffer kept for the next message: a
// rare large message's buffer is left to the collector.
const maxPooledRead = 64 << 10

// ReadLoop reads the participant's messages until its connection ends or
// ctx does, and calls handle with each (binary: not a text message; more:
// another message is already buffered). handle must not keep msg after it
// returns. A connection that ends without a closing handshake is killed.
func (p *Participant) ReadLoop(ctx context.Context, handle func(msg []byte, binary, more bool)) {
	for {
		typ, rd, err := p.conn.Reader(ctx)
		if err != nil {
			return
		}
		buf := readBuffers.Get().(*bytes.Buffer)
		buf.Reset()
		_, err = buf.ReadFrom(rd)
		if err == nil {
			handle(buf.Bytes(), typ != websocket.MessageText, p.nc != nil && p.nc.MessageBuffered())
		}
		if buf.Cap() <= maxPooledRead {
			readBuffers.Put(buf)
		}
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				p.Kill()
			}
			return
		}
	}
}
