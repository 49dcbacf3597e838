package participant

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// TestCloseReachesTheClientAfterWhatWasSent closes a participant with each
// status the gateway closes one with, as the gateway does (Close; at
// shutdown CloseAfterDrain): its client reads what was written before, in
// order, then a close frame of that code (docs/protocol.md section 5) and
// reason, and the participant ends. (What Close finds still queued it
// drops: TestCloseDropsWhatIsNotWritten.) A close is not a cut: OnCut is
// not told.
func TestCloseReachesTheClientAfterWhatWasSent(t *testing.T) {
	cases := []struct {
		name   string
		status CloseStatus
		code   int // on the wire
		reason string
		drain  bool
	}{
		{"kicked", StatusKicked, 4410, "removed by a moderator", false},
		{"revoked", StatusRevoked, 4403, "revoked", false},
		{"replaced", StatusReplaced, 4000, "replaced by a new connection of the same participant", false},
		{"token expired", StatusTokenExpired, 4401, "token expired", false},
		{"order lost", StatusOrderLost, 4503, "this node lost the pod's order: resume", false},
		{"going away", StatusGoingAway, 1001, "gateway shutting down", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, client := open(t, setup{})
			s.p.Start(nil)
			// One burst, small enough to be written at once.
			s.send(t, body(0, 10), body(1, 300), body(2, 10))
			if c.drain {
				s.p.CloseAfterDrain(c.status, c.reason)
			} else {
				s.p.Close(c.status, c.reason)
			}
			before := wantClose(t, client, websocket.StatusCode(c.code), c.reason)
			if len(before) != 3 {
				t.Fatalf("the client read %d messages before the close, want the 3 sent", len(before))
			}
			for i, b := range before {
				if got := indexOf(t, b); got != i {
					t.Fatalf("message %d the client read is the one sent %d-th", i, got)
				}
			}
			s.waitDone(t)
			if s.p.Enqueue(body(3, 10)) {
				t.Fatal("a closed participant took a message")
			}
			if cuts := s.cutReasons(); len(cuts) > 0 {
				t.Fatalf("a close was reported as a cut: %v", cuts)
			}
		})
	}
}

// TestCloseDropsWhatIsNotWritten: Close ends the connection at once;
// what is still queued is not sent.
func TestCloseDropsWhatIsNotWritten(t *testing.T) {
	s, client := open(t, setup{})
	for i := range 3 {
		if !s.p.Enqueue(body(i, 10)) {
			t.Fatal("refused before Start")
		}
	}
	s.p.Close(StatusReplaced, "replaced")
	if before := wantClose(t, client, 4000, "replaced"); len(before) > 0 {
		t.Fatalf("the client read %d queued messages before the close, want none", len(before))
	}
	s.waitDone(t)
}

// TestCloseNeverCutsAFrame: Close while a large write is under way to a
// client that has stopped reading: once the client reads again it gets
// whole messages, then the close frame, never the close frame in the
// middle of a message.
func TestCloseNeverCutsAFrame(t *testing.T) {
	s, client := open(t, setup{smallSockets: true})
	s.p.Start(nil)
	for i := range 4 {
		s.send(t, body(i, 1<<20))
	}
	s.p.Close(StatusKicked, "kicked by bob")
	before := wantClose(t, client, 4410, "kicked by bob")
	for i, b := range before {
		if !bytes.Equal(b, body(i, 1<<20)) {
			t.Fatalf("message %d came as %d bytes %.20q, not as sent", i, len(b), b)
		}
	}
	s.waitDone(t)
}

// TestCloseAfterDrainSendsTheBacklogFirst: at shutdown a participant
// whose client has fallen behind is sent everything queued, then answers
// the gateway queues meanwhile, then the 1001 close; the pod's deliveries
// after the drain began are refused without cutting it.
func TestCloseAfterDrainSendsTheBacklogFirst(t *testing.T) {
	const backlog = 200
	s, client := open(t, setup{smallSockets: true})
	s.p.Start(nil)
	for i := range backlog { // the client is not reading yet
		s.send(t, body(i, 8<<10))
	}
	if n, _ := s.p.Queued(); n == 0 {
		t.Fatal("nothing waits in the queue: the sockets took the whole backlog, the test shows nothing")
	}
	s.p.CloseAfterDrain(StatusGoingAway, "gateway shutting down")
	if s.p.Enqueue(body(backlog, 10)) {
		t.Fatal("a draining participant took a delivery")
	}
	if !s.p.Answer(body(backlog, 10)) {
		t.Fatal("a draining participant refused an answer")
	}
	before := wantClose(t, client, 1001, "gateway shutting down")
	if len(before) != backlog+1 {
		t.Fatalf("the client read %d messages before the close, want the %d queued and the answer", len(before), backlog+1)
	}
	for i, b := range before {
		if got := indexOf(t, b); got != i {
			t.Fatalf("message %d the client read is the one sent %d-th", i, got)
		}
	}
	s.waitDone(t)
	if cuts := s.cutReasons(); len(cuts) > 0 {
		t.Fatalf("a drain was reported as a cut: %v", cuts)
	}
}

// TestCloseReasonFitsInAFrame: a close frame's reason holds at most 123
// bytes (RFC 6455 section 5.5: 125 with the code), and the library sends
// no close frame at all for a longer one. A long reason is cut, never in
// the middle of a character, and says so with "..."; one that fits is
// sent as it is.
func TestCloseReasonFitsInAFrame(t *testing.T) {
	fits := strings.Repeat("r", 123)
	for _, reason := range []string{
		fits,
		fits + "s",
		strings.Repeat("é", 100), // 2 bytes each
		strings.Repeat("€", 50),  // 3 bytes each, the 120th byte ends one
		"a" + strings.Repeat("€", 50),
		"ab" + strings.Repeat("😀", 40), // 4 bytes each
	} {
		for _, drain := range []bool{false, true} {
			s, client := open(t, setup{})
			s.p.Start(nil)
			if drain {
				s.p.CloseAfterDrain(StatusGoingAway, reason)
			} else {
				s.p.Close(StatusKicked, reason)
			}
			_, _, err := readOrEnd(client)
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("a reason of %d bytes: no close frame came (%v)", len(reason), err)
			}
			got := ce.Reason
			switch {
			case len(reason) <= 123 && got != reason:
				t.Errorf("a reason of %d bytes came as %q, want it as it is", len(reason), got)
			case len(reason) > 123 && (len(got) > 123 || !utf8.ValidString(got) ||
				!strings.HasSuffix(got, "...") || !strings.HasPrefix(reason, strings.TrimSuffix(got, "..."))):
				t.Errorf("a reason of %d bytes came as %q (%d bytes), want at most 123 bytes of valid UTF-8: a prefix of it, then ...",
					len(reason), got, len(got))
			}
		}
	}
}

// TestSourceErrorClosesWithInternalError: a replay that fails midway
// closes the connection with 1011 (resume again) after what it gave, the
// error as the reason, cut to fit.
func TestSourceErrorClosesWithInternalError(t *testing.T) {
	s, client := open(t, setup{})
	why := "the history's stream is gone: " + strings.Repeat("x", 200)
	s.p.Start(&sliceSource{items: [][]byte{body(0, 10), body(1, 10)}, err: errors.New(why)})
	before := wantClose(t, client, 1011, why[:120]+"...")
	if len(before) != 2 {
		t.Fatalf("the client read %d messages before the close, want the 2 the source gave", len(before))
	}
	s.waitDone(t)
}

// TestKillEndsWithoutAHandshake: Kill closes the TCP connection at once
// with no close frame, and the participant takes nothing more.
func TestKillEndsWithoutAHandshake(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	s.send(t, body(0, 10))
	read(t, client)
	s.p.Kill()
	select {
	case <-s.p.Done():
	default:
		t.Fatal("Done is not closed when Kill returns")
	}
	if _, b, err := readOrEnd(client); err == nil || websocket.CloseStatus(err) != -1 {
		t.Fatalf("after Kill the client read %q, %v; want the connection gone without a close frame", b, err)
	}
	if s.p.Enqueue(body(1, 10)) || s.p.Answer(body(2, 10)) {
		t.Fatal("a killed participant took a message")
	}
	if cuts := s.cutReasons(); len(cuts) > 0 {
		t.Fatalf("Kill was reported as a cut: %v", cuts)
	}
}

// TestPeerCloseEndsTheParticipant: a client that closes is answered, and
// the reader's Finish ends the participant.
func TestPeerCloseEndsTheParticipant(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	if err := client.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("the client's closing handshake: %v", err)
	}
	s.waitDone(t)
	if s.p.Enqueue(body(0, 10)) {
		t.Fatal("a participant whose client closed took a message")
	}
}

// TestWriteTimeoutCutsAReaderThatStops: a client that stops reading
// leaves a write pending once the sockets are full; Watch cuts it once
// the write is older than WriteTimeout (small here), with no close frame:
// the connection is stuck.
func TestWriteTimeoutCutsAReaderThatStops(t *testing.T) {
	s, client := open(t, setup{smallSockets: true, writeTimeout: 50 * time.Millisecond})
	s.p.Start(nil)
	for i := range 100 { // far more than the sockets hold
		s.send(t, body(i, 16<<10))
	}
	eventually(t, "Watch never cut a write that does not end", func() bool {
		s.p.Watch(time.Now())
		return len(s.cutReasons()) > 0
	})
	if cuts := s.cutReasons(); cuts[0] != CutWriteTimeout {
		t.Fatalf("cut for %q, want %q", cuts[0], CutWriteTimeout)
	}
	s.waitDone(t)
	for {
		_, _, err := readOrEnd(client)
		if err == nil {
			continue // what the sockets held
		}
		if websocket.CloseStatus(err) != -1 {
			t.Fatalf("a connection cut for its write timeout ended with a close frame: %v", err)
		}
		break
	}
}

// TestWatchSparesAnIdleConnection: a connection with no write under way is
// never cut by Watch, however late the watch.
func TestWatchSparesAnIdleConnection(t *testing.T) {
	s, client := open(t, setup{writeTimeout: time.Millisecond})
	s.p.Start(nil)
	s.send(t, body(0, 10))
	read(t, client)
	for range 3 {
		s.p.Watch(time.Now().Add(time.Hour))
	}
	if cuts := s.cutReasons(); len(cuts) > 0 {
		t.Fatalf("an idle connection was cut: %v", cuts)
	}
	s.send(t, body(1, 10))
	if got := indexOf(t, read(t, client)); got != 1 {
		t.Fatalf("read message %d, want 1", got)
	}
}

// TestPingTimeoutCutsAPeerThatDoesNotAnswer: a client that does not read
// never answers a ping; the participant is cut within WriteTimeout (small
// here) and its connection dropped.
func TestPingTimeoutCutsAPeerThatDoesNotAnswer(t *testing.T) {
	s, _ := open(t, setup{writeTimeout: 50 * time.Millisecond})
	s.p.Start(nil)
	s.p.Ping()
	if reason := s.waitCut(t); reason != CutPingTimeout {
		t.Fatalf("cut for %q, want %q", reason, CutPingTimeout)
	}
	s.waitDone(t)
}

// TestPingAnsweredKeepsThePeer: a coder/websocket client answers the
// participant's pings while it reads; it is not cut, and the data sent
// between the pings comes whole.
func TestPingAnsweredKeepsThePeer(t *testing.T) {
	var pings atomic.Int32
	s, client := open(t, setup{writeTimeout: patience, clientPings: &pings})
	s.p.Start(nil)
	got := readAll(client)
	for i := range 5 {
		// Ping leaves alone a connection being written to: wait until
		// Watch has let the writer go, as a second's ticks would.
		eventually(t, "Watch never let the writer go", func() bool {
			s.p.Watch(time.Now())
			return !s.p.writerOn.Load()
		})
		s.p.Ping()
		eventually(t, "the client was never pinged, or Ping never returned", func() bool {
			return pings.Load() == int32(i+1) && !s.p.pinging.Load()
		})
		b := body(i, 100+i*30_000)
		s.send(t, b)
		if m := next(t, got); !bytes.Equal(m, b) {
			t.Fatalf("read %.20q, want message %d", m, i)
		}
	}
	if cuts := s.cutReasons(); len(cuts) > 0 {
		t.Fatalf("a client that answers pings was cut: %v", cuts)
	}
}

// TestClientPingsDuringAStream: the client pings while the participant
// streams to it; the library's pongs and the participant's frames share
// the socket (Conn's write lock), so every pong comes and every message
// comes whole, in order.
func TestClientPingsDuringAStream(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	got := readAll(client)
	const messages = 400
	pinged := make(chan error, 1)
	go func() {
		for range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			err := client.Ping(ctx)
			cancel()
			if err != nil {
				pinged <- err
				return
			}
		}
		pinged <- nil
	}()
	go func() {
		for i := range messages {
			if !s.p.Enqueue(body(i, 10+(i*7919)%40_000)) {
				return
			}
			s.p.Flush()
		}
	}()
	for i := range messages {
		m := next(t, got)
		if want := body(i, 10+(i*7919)%40_000); !bytes.Equal(m, want) {
			t.Fatalf("message %d came as %d bytes %.20q, want %d bytes %.20q", i, len(m), m, len(want), want)
		}
	}
	select {
	case err := <-pinged:
		if err != nil {
			t.Fatalf("the client's ping: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("the client's pings never ended")
	}
}

// readAll reads the client's messages into a channel until the
// connection ends.
func readAll(client *websocket.Conn) <-chan []byte {
	got := make(chan []byte, 1024)
	go func() {
		defer close(got)
		for {
			_, b, err := client.Read(context.Background())
			if err != nil {
				return
			}
			got <- b
		}
	}()
	return got
}

// next is the next message readAll read.
func next(t *testing.T, got <-chan []byte) []byte {
	t.Helper()
	select {
	case m, ok := <-got:
		if !ok {
			t.Fatal("the connection ended")
		}
		return m
	case <-time.After(patience):
		t.Fatal("the client read nothing")
		return nil
	}
}
