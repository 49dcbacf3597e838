package participant

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client that speaks RFC 6455 by hand, to check the bytes the
// participant writes (and the library writes for it) against the RFC
// itself rather than against another implementation's reading of it.

// RFC 6455's opcodes (section 5.2).
const (
	opText   = 0x1
	opBinary = 0x2
	opClose  = 0x8
	opPing   = 0x9
	opPong   = 0xa
)

// websocketGUID is RFC 6455 section 1.3's, for Sec-WebSocket-Accept.
const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

// rawFrame is one frame as it came over the wire.
type rawFrame struct {
	fin     bool
	rsv     byte // the three RSV bits
	opcode  byte
	masked  bool
	lenSize int // the bytes of the extended length: 0, 2 or 8
	payload []byte
}

// openRaw serves one participant (not started) and opens a WebSocket to
// it by hand. early is written in the same write as the upgrade request,
// before the server has answered it.
func openRaw(t *testing.T, su setup, early []byte) (*served, *rawClient) {
	t.Helper()
	u, joined := serve(t, su)
	host := strings.TrimPrefix(u, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	keyBytes := make([]byte, 16)
	_, _ = rand.Read(keyBytes)
	key := base64.StdEncoding.EncodeToString(keyBytes)
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := c.Write(append([]byte(req), early...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(patience))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the upgrade's answer: %v", err)
	}
	sum := sha1.Sum([]byte(key + websocketGUID))
	if resp.StatusCode != http.StatusSwitchingProtocols ||
		!strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
		resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("the upgrade was answered %s, %v", resp.Status, resp.Header)
	}
	return accepted(t, joined), &rawClient{c: c, br: br}
}

// readFrame reads one frame (RFC 6455 section 5.2).
func (r *rawClient) readFrame(t *testing.T) rawFrame {
	t.Helper()
	var f rawFrame
	var head [2]byte
	if _, err := io.ReadFull(r.br, head[:]); err != nil {
		t.Fatalf("reading a frame's header: %v", err)
	}
	f.fin, f.rsv, f.opcode = head[0]&0x80 != 0, head[0]>>4&0x7, head[0]&0xf
	f.masked = head[1]&0x80 != 0
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(r.br, ext[:]); err != nil {
			t.Fatal(err)
		}
		n, f.lenSize = uint64(binary.BigEndian.Uint16(ext[:])), 2
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(r.br, ext[:]); err != nil {
			t.Fatal(err)
		}
		n, f.lenSize = binary.BigEndian.Uint64(ext[:]), 8
		if n>>63 != 0 {
			t.Fatalf("a 64-bit length with its most significant bit set: %x", ext)
		}
	}
	var key [4]byte
	if f.masked {
		if _, err := io.ReadFull(r.br, key[:]); err != nil {
			t.Fatal(err)
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r.br, f.payload); err != nil {
		t.Fatalf("reading a payload of %d bytes: %v", n, err)
	}
	if f.masked {
		for i := range f.payload {
			f.payload[i] ^= key[i%4]
		}
	}
	return f
}

// frame is a final, masked client frame (section 5.3: a client masks
// every frame).
func frame(opcode byte, payload []byte) []byte {
	b := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var key [4]byte
	_, _ = rand.Read(key[:])
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

func (r *rawClient) write(t *testing.T, b []byte) {
	t.Helper()
	if _, err := r.c.Write(b); err != nil {
		t.Fatalf("the raw client's write: %v", err)
	}
}

// wantLenSize is the extended length's size RFC 6455 requires for n: "the
// minimal number of bytes MUST be used to encode the length".
func wantLenSize(n int) int {
	switch {
	case n < 126:
		return 0
	case n <= 0xffff:
		return 2
	default:
		return 8
	}
}

// TestFramesOnTheWireAreRFC6455 reads, byte by byte, what the
// participant writes: the library's ping that Ping sends and its pong to
// the client's ping, the participant's text frames of every length class
// (one burst), and the close frame Close sends, each checked against
// RFC 6455; a ping answered with a pong keeps the participant, and the
// closing handshake ends with the server closing the TCP connection
// (section 7.1.1).
func TestFramesOnTheWireAreRFC6455(t *testing.T) {
	s, raw := openRaw(t, setup{writeTimeout: patience}, nil)
	s.p.Start(nil)

	// A ping: the library's control frame, through the small buffered
	// writer SmallBuffers gives it, answered by hand.
	s.p.Ping()
	ping := raw.readFrame(t)
	if !ping.fin || ping.rsv != 0 || ping.opcode != opPing || ping.masked || len(ping.payload) > 125 {
		t.Fatalf("Ping wrote fin=%v rsv=%d opcode=%#x masked=%v with %d bytes, want a final unmasked ping of at most 125",
			ping.fin, ping.rsv, ping.opcode, ping.masked, len(ping.payload))
	}
	raw.write(t, frame(opPong, ping.payload))
	eventually(t, "the ping was answered but Ping never returned", func() bool { return !s.p.pinging.Load() })
	if cuts := s.cutReasons(); len(cuts) > 0 {
		t.Fatalf("a participant that answered the ping was cut: %v", cuts)
	}
	// The client's ping: the library answers a pong with its payload
	// (section 5.5.3).
	raw.write(t, frame(opPing, []byte("are you there")))
	pong := raw.readFrame(t)
	if !pong.fin || pong.rsv != 0 || pong.opcode != opPong || pong.masked || string(pong.payload) != "are you there" {
		t.Fatalf("a ping was answered fin=%v rsv=%d opcode=%#x masked=%v %q, want a final unmasked pong with its payload",
			pong.fin, pong.rsv, pong.opcode, pong.masked, pong.payload)
	}

	var bodies [][]byte
	for i, n := range lengthClasses {
		bodies = append(bodies, bytes.Repeat([]byte{'a' + byte(i)}, n))
	}
	s.send(t, bodies...)
	for _, b := range bodies {
		f := raw.readFrame(t)
		if !f.fin || f.rsv != 0 || f.opcode != opText || f.masked {
			t.Fatalf("a message of %d bytes came as fin=%v rsv=%d opcode=%#x masked=%v, want a final unmasked text frame",
				len(b), f.fin, f.rsv, f.opcode, f.masked)
		}
		if f.lenSize != wantLenSize(len(b)) {
			t.Errorf("a message of %d bytes had an extended length of %d bytes, want %d", len(b), f.lenSize, wantLenSize(len(b)))
		}
		if !bytes.Equal(f.payload, b) {
			t.Fatalf("sent %d bytes, the frame held %d: %.40q", len(b), len(f.payload), f.payload)
		}
	}

	// The close frame: the status code in network byte order, then the
	// reason (section 5.5.1).
	s.p.Close(StatusKicked, "removed by a moderator")
	cf := raw.readFrame(t)
	if !cf.fin || cf.rsv != 0 || cf.opcode != opClose || cf.masked {
		t.Fatalf("Close wrote fin=%v rsv=%d opcode=%#x masked=%v, want a final unmasked close frame", cf.fin, cf.rsv, cf.opcode, cf.masked)
	}
	if len(cf.payload) < 2 || binary.BigEndian.Uint16(cf.payload) != 4410 || string(cf.payload[2:]) != "removed by a moderator" {
		t.Fatalf("the close frame's payload is % x, want 4410 and the reason", cf.payload)
	}
	raw.write(t, frame(opClose, cf.payload[:2]))
	if b, err := raw.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the closing handshake the server sent %#x (%v), want the TCP connection closed", b, err)
	}
	s.waitDone(t)
}

// TestBytesSentWithTheUpgradeRequestAreRead sends a message in the same
// write as the upgrade request, before the answer (the server's HTTP
// reader holds it when the connection is hijacked): the participant's
// reader reads it first, then the next.
func TestBytesSentWithTheUpgradeRequestAreRead(t *testing.T) {
	s, raw := openRaw(t, setup{}, frame(opText, []byte(`{"first":true}`)))
	s.p.Start(nil)
	raw.write(t, frame(opBinary, []byte("second")))
	if m := s.nextRead(t); string(m.data) != `{"first":true}` {
		t.Fatalf("the server read %q first, want the message sent with the upgrade request", m.data)
	}
	if m := s.nextRead(t); string(m.data) != "second" {
		t.Fatalf("the server read %q second, want %q", m.data, "second")
	}
}

// TestMessageBufferedSaysWhetherTheNextMessageCameWhole checks what the
// gateway's reader asks after each message before it flushes the
// writers it queued for: true only when the next message is already read
// whole; a message cut in two, or a control frame next, is not.
func TestMessageBufferedSaysWhetherTheNextMessageCameWhole(t *testing.T) {
	s, raw := openRaw(t, setup{}, nil)
	s.p.Start(nil)
	big := bytes.Repeat([]byte("b"), 300) // a 16-bit length
	second := frame(opText, big)
	// Two whole messages in one write.
	raw.write(t, append(frame(opText, []byte("one")), second...))
	if m := s.nextRead(t); string(m.data) != "one" || !m.nextBuffered {
		t.Errorf("read %q with the next message whole behind it: MessageBuffered = %v, want true", m.data, m.nextBuffered)
	}
	if m := s.nextRead(t); !bytes.Equal(m.data, big) || m.nextBuffered {
		t.Errorf("read the last message sent: MessageBuffered = %v, want false", m.nextBuffered)
	}
	// A message, then half of the next.
	raw.write(t, append(frame(opText, []byte("three")), second[:100]...))
	if m := s.nextRead(t); string(m.data) != "three" || m.nextBuffered {
		t.Errorf("read %q with half of the next behind it: MessageBuffered = %v, want false", m.data, m.nextBuffered)
	}
	raw.write(t, second[100:])
	if m := s.nextRead(t); !bytes.Equal(m.data, big) || m.nextBuffered {
		t.Errorf("read the message sent in two writes: MessageBuffered = %v, want false", m.nextBuffered)
	}
	// A message, then a ping.
	raw.write(t, append(frame(opText, []byte("five")), frame(opPing, []byte("p"))...))
	if m := s.nextRead(t); string(m.data) != "five" || m.nextBuffered {
		t.Errorf("read %q with a ping behind it: MessageBuffered = %v, want false", m.data, m.nextBuffered)
	}
}
