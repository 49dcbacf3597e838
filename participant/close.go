package participant

import "github.com/coder/websocket"

// Closing: a close frame with its status and reason after what was
// written (Close), after what is queued (CloseAfterDrain), or no
// handshake at all (Kill); Done is closed once the connection has ended.

type closeFrame struct {
	code   websocket.StatusCode
	reason string
}

// Close ends the connection now with code, dropping what is queued; a
// write under way is finished first, so that the close frame never cuts a
// message. It returns at once; the closing handshake runs in the
// background.
func (p *Participant) Close(code websocket.StatusCode, reason string) {
	if p.cut.Swap(true) {
		return
	}
	p.queue.Close()
	reason = closeReason(reason) // for a longer reason the library sends no close frame at all
	go func() {
		p.closeHandshake(code, reason)
		p.finish()
	}()
}

// CloseAfterDrain lets the writer send what is queued, then close with
// code. Further deliveries are refused, answers are queued until then.
func (p *Participant) CloseAfterDrain(code websocket.StatusCode, reason string) {
	p.drain.CompareAndSwap(nil, &closeFrame{code, closeReason(reason)})
	p.queue.Drain()
	p.wakeWriter()
}

// closeHandshake closes the connection with code and reason, waiting for
// the peer's close frame as the library does.
func (p *Participant) closeHandshake(code websocket.StatusCode, reason string) {
	if p.nc == nil {
		_ = p.conn.Close(code, reason)
		return
	}
	p.nc.CloseHandshake(func() { _ = p.conn.Close(code, reason) })
}

// Kill closes the TCP connection without a closing handshake.
func (p *Participant) Kill() {
	p.cut.Store(true)
	p.queue.Close()
	_ = p.conn.CloseNow()
	p.finish()
}

// Finish marks the connection as ended; the gateway's reader calls it when
// reading fails.
func (p *Participant) Finish() {
	p.cut.Store(true)
	p.queue.Close()
	p.finish()
}

func (p *Participant) finish() {
	p.closeOnce.Do(func() { close(p.done) })
}

// closeReason fits s in the 123 bytes a close frame has for its reason:
// a longer one is cut to at most 120 bytes, never within a character, and
// ends in "...".
func closeReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	s = s[:120]
	for len(s) > 0 && s[len(s)-1]&0xc0 == 0x80 {
		s = s[:len(s)-1] // not in the middle of a character
	}
	if len(s) > 0 && s[len(s)-1] >= 0xc0 {
		s = s[:len(s)-1]
	}
	return s + "..."
}
