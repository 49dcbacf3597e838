package bench

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"
)

// nats.go hides its WebSocket framing: a subscription sees messages, not
// the WebSocket messages that carried them. To report envelopes per
// WebSocket message for NATS as for the gateway, each NATS subscriber dials
// through a frameDialer, whose connection reads the raw byte stream (the
// HTTP upgrade answer, then the server's frames) and counts the data
// messages in it as they go by, without changing a byte.

// frameDialer dials TCP for nats.go (it is a nats.CustomDialer) and counts
// the WebSocket data messages read on the connections it makes into
// messages.
type frameDialer struct {
	messages *atomic.Int64
}

func (d frameDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 20*time.Second)
	if err != nil {
		return nil, err
	}
	return &frameConn{Conn: c, messages: d.messages}, nil
}

// frameConn is a client's connection that counts the WebSocket data
// messages it reads.
type frameConn struct {
	net.Conn
	messages *atomic.Int64
	frames   frameParser
}

func (c *frameConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if k := c.frames.feed(b[:n]); k > 0 {
		c.messages.Add(k)
	}
	return n, err
}

// frameParser follows a server's side of a WebSocket connection, from the
// first byte of its HTTP answer, across reads cut anywhere.
type frameParser struct {
	upgraded bool     // the HTTP answer's blank line has gone by
	crlf     int      // bytes of "\r\n\r\n" matched so far
	hdr      [14]byte // the frame header being read
	hdrLen   int
	payload  uint64 // bytes of the current frame's payload still to skip
}

// feed consumes the next bytes of the stream and returns how many data
// messages they completed the header of. A data message is a data frame
// (text, binary or continuation) with FIN set: what a WebSocket library
// hands its reader as one message. Control frames (ping, pong, close) are
// not counted. A message counts once its header is read.
func (p *frameParser) feed(b []byte) int64 {
	var n int64
	for len(b) > 0 {
		if !p.upgraded {
			c := b[0]
			b = b[1:]
			switch {
			case c == "\r\n\r\n"[p.crlf]:
				p.crlf++
			case c == '\r':
				p.crlf = 1
			default:
				p.crlf = 0
			}
			p.upgraded = p.crlf == 4
			continue
		}
		if p.payload > 0 {
			k := uint64(len(b))
			if k > p.payload {
				k = p.payload
			}
			p.payload -= k
			b = b[k:]
			continue
		}
		p.hdr[p.hdrLen] = b[0]
		p.hdrLen++
		b = b[1:]
		need := frameHeaderLen(p.hdr[:p.hdrLen])
		if p.hdrLen < need {
			continue
		}
		fin, opcode := p.hdr[0]&0x80 != 0, p.hdr[0]&0x0f
		if fin && opcode <= 2 {
			n++
		}
		p.payload = framePayloadLen(p.hdr[:p.hdrLen])
		p.hdrLen = 0
	}
	return n
}

// frameHeaderLen is the length of the frame header that starts with h, or
// 2 while h is shorter than that (its second byte says the rest).
func frameHeaderLen(h []byte) int {
	if len(h) < 2 {
		return 2
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 { // masked: only clients mask, but be exact
		n += 4
	}
	return n
}

// framePayloadLen is the payload length in the complete header h.
func framePayloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(l)
	}
}
