package harness

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// Helpers of the reliability tests (badinput_test.go, churn_test.go,
// faults_test.go, security_test.go).

// Peer is a participant whose messages are kept as raw bytes. The
// harness's client decodes every message into map[string]any, which
// refuses numbers beyond float64 (1e999999) and keeps every raw message;
// a Peer decodes only what a test asks for, and with discard it keeps
// nothing (the churn test counts the heap).
type Peer struct {
	t       *testing.T
	ID      string
	conn    FrameConn
	Msgs    chan []byte
	discard bool
	reading
}

// DialPeer joins pod as id (open mode) with extra query parameters and
// waits for the welcome. capacity is how many unread messages it holds.
func DialPeer(t *testing.T, g *Gateway, pod, id, query string, capacity int) *Peer {
	t.Helper()
	p := StartPeer(t, id, dialPod(t, g.WS, pod, id, query), capacity)
	if w := p.Expect(); w.Kind != "system/welcome" {
		t.Fatalf("%s: first message is %s, want system/welcome", id, w.Kind)
	}
	return p
}

// StartPeer is NewPeer reading at once.
func StartPeer(t *testing.T, id string, conn FrameConn, capacity int) *Peer {
	p := NewPeer(t, id, conn, capacity)
	go p.ReadLoop()
	return p
}

// NewPeer is a peer on conn that holds up to capacity unread messages
// once its ReadLoop runs; with capacity 0 it keeps none (discard). The
// welcome is the first message. A test that starts reading later (a
// stalled reader) runs ReadLoop itself.
func NewPeer(t *testing.T, id string, conn FrameConn, capacity int) *Peer {
	t.Cleanup(func() { _ = conn.CloseNow() })
	return &Peer{t: t, ID: id, conn: conn, Msgs: make(chan []byte, capacity), discard: capacity == 0, reading: newReading()}
}

// ReadLoop reads the connection until it ends; NewPeer's caller runs it
// when it chooses (StartPeer at once).
func (p *Peer) ReadLoop() {
	p.run(p.conn, func(b []byte) {
		if !p.discard {
			p.Msgs <- b
		}
	})
}

// Next returns the next raw message, or nil after d or once the
// connection has ended and every message was read.
func (p *Peer) Next(d time.Duration) []byte {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case b := <-p.Msgs:
		return b
	case <-timer.C:
		return nil
	case <-p.ended:
		select {
		case b := <-p.Msgs:
			return b
		default:
			return nil
		}
	}
}

// WireMsg is the part of a received envelope the tests look at; payload
// and correlation_id stay raw, so any JSON number is fine.
type WireMsg struct {
	Protocol      string          `json:"protocol"`
	ID            string          `json:"id"`
	From          string          `json:"from"`
	To            []string        `json:"to"`
	Kind          string          `json:"kind"`
	CorrelationID json.RawMessage `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
	Raw           []byte          `json:"-"`
}

func DecodeWire(b []byte) (WireMsg, error) {
	var m WireMsg
	err := json.Unmarshal(b, &m)
	m.Raw = b
	return m, err
}

// ErrCode is the code of a system/error, or "".
func (m WireMsg) ErrCode() string {
	if m.Kind != "system/error" {
		return ""
	}
	var pl struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(m.Payload, &pl)
	return pl.Error
}

// Seq is the payload's "seq", or -1.
func (m WireMsg) Seq() int {
	var pl struct {
		Seq *int `json:"seq"`
	}
	if json.Unmarshal(m.Payload, &pl) != nil || pl.Seq == nil {
		return -1
	}
	return *pl.Seq
}

// Expect returns the next message decoded, failing after 5s.
func (p *Peer) Expect() WireMsg {
	p.t.Helper()
	b := p.Next(5 * time.Second)
	if b == nil {
		p.t.Fatalf("%s: no message within 5s (connection: %v)", p.ID, p.CloseErr())
	}
	m, err := DecodeWire(b)
	if err != nil {
		p.t.Fatalf("%s: received a message that is not an envelope: %v: %.200q", p.ID, err, b)
	}
	return m
}

// ExpectOther is expect skipping presence.
func (p *Peer) ExpectOther() WireMsg {
	p.t.Helper()
	for {
		if m := p.Expect(); m.Kind != "system/presence" {
			return m
		}
	}
}

// Write sends one text message, or a binary one when p joined with
// DialWebSocket.
func (p *Peer) Write(binary bool, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if binary {
		return p.conn.(WebSocketConn).WriteBinary(ctx, b)
	}
	return p.conn.Write(ctx, b)
}

// WaitClosed waits for the connection to end and returns its close code.
func (p *Peer) WaitClosed(d time.Duration) wire.CloseCode {
	p.t.Helper()
	return p.waitClosed(p.t, p.ID, d)
}
