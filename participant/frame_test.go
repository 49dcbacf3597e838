package participant

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// lengthClasses are the payload lengths at the edges of RFC 6455's three
// encodings of a frame's length (section 5.2): 7 bits (up to 125), 16
// bits (126 to 65535), 64 bits (65536 and more).
var lengthClasses = []int{0, 1, 125, 126, 127, 65535, 65536, 65537, 3<<20 + 1}

// TestTextHeaderIsRFC6455 checks the bytes of the headers frame.go writes
// by hand against RFC 6455 section 5.2: FIN set, no RSV bit, opcode 1
// (text), no mask (a server never masks, section 5.1), and the length in
// the fewest bytes its encoding allows, in network byte order.
func TestTextHeaderIsRFC6455(t *testing.T) {
	cases := []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x81, 0x00}},
		{1, []byte{0x81, 0x01}},
		{125, []byte{0x81, 0x7d}},
		{126, []byte{0x81, 0x7e, 0x00, 0x7e}},
		{127, []byte{0x81, 0x7e, 0x00, 0x7f}},
		{0x1234, []byte{0x81, 0x7e, 0x12, 0x34}},
		{65535, []byte{0x81, 0x7e, 0xff, 0xff}},
		{65536, []byte{0x81, 0x7f, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00}},
		{0x01020304, []byte{0x81, 0x7f, 0, 0, 0, 0, 0x01, 0x02, 0x03, 0x04}},
		// Over 4 GiB: the high half of the 64-bit length is written too.
		{1<<32 + 5, []byte{0x81, 0x7f, 0, 0, 0, 0x01, 0, 0, 0, 0x05}},
		{0x0102030405060708, []byte{0x81, 0x7f, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}},
	}
	for _, c := range cases {
		prefix := []byte("before")
		got := AppendTextHeader(bytes.Clone(prefix), c.n)
		if !bytes.HasPrefix(got, prefix) {
			t.Errorf("AppendTextHeader(%d) overwrote what was in dst: % x", c.n, got)
			continue
		}
		if got = got[len(prefix):]; !bytes.Equal(got, c.want) {
			t.Errorf("AppendTextHeader(%d) = % x, want % x", c.n, got, c.want)
		}
	}
}

// TestEveryLengthClassReachesAClient sends a message of each length class
// through the participant's writer, one flush each (the caller's
// goroutine writes what the socket takes at once, the writer goroutine
// the rest), and then all of them in one burst (one buffer, one write):
// coder/websocket reads each as the text message that was sent.
func TestEveryLengthClassReachesAClient(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	var bodies [][]byte
	for i, n := range lengthClasses {
		bodies = append(bodies, bytes.Repeat([]byte{'a' + byte(i)}, n))
	}
	for _, b := range bodies {
		s.send(t, b)
		if got := read(t, client); !bytes.Equal(got, b) {
			t.Fatalf("sent %d bytes alone, the client read %d: %.40q", len(b), len(got), got)
		}
	}
	s.send(t, bodies...)
	for _, b := range bodies {
		if got := read(t, client); !bytes.Equal(got, b) {
			t.Fatalf("sent %d bytes in a burst, the client read %d: %.40q", len(b), len(got), got)
		}
	}
}

// TestClientMessagesOfEveryLengthClassReadWhole sends the server text
// and binary messages of each length class, as a client does: the
// library reads them through Conn's read-ahead whole and with their type
// (the gateway tells a binary message by it).
func TestClientMessagesOfEveryLengthClassReadWhole(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	for i, n := range lengthClasses {
		typ := websocket.MessageText
		if i%2 == 1 {
			typ = websocket.MessageBinary
		}
		b := bytes.Repeat([]byte{'A' + byte(i)}, n)
		if err := client.Write(context.Background(), typ, b); err != nil {
			t.Fatalf("the client's write of %d bytes: %v", n, err)
		}
		m := s.nextRead(t)
		if m.typ != typ || !bytes.Equal(m.data, b) {
			t.Fatalf("the client sent a %v message of %d bytes, the server read a %v of %d", typ, n, m.typ, len(m.data))
		}
	}
}

// nextRead is the next message the server's reader read.
func (s *served) nextRead(t *testing.T) message {
	t.Helper()
	select {
	case m := <-s.read:
		return m
	case <-s.readEnd:
		select {
		case m := <-s.read: // read before it ended
			return m
		default:
		}
		t.Fatal("the server's reader ended")
	case <-time.After(patience):
		t.Fatal("the server's reader read nothing")
	}
	return message{}
}
