package participant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/internal/wait"
)

// The tests serve a participant as gateway/accept.go does (httptest's
// server, SmallBuffers, websocket.Accept, New, ReadLoop until the
// connection ends) and talk to it over loopback TCP:
// with coder/websocket as the client, or with a client that speaks
// RFC 6455 by hand (raw_test.go). Nothing is faked.

// patience bounds every wait of a test for something that must happen; it
// is a guard against a hang, never a measure.
const patience = 20 * time.Second

// setup is how a test wants its participant.
type setup struct {
	query        url.Values // the filter's query (batch=1)
	sendQueue    int        // 0: 1024
	queueBytes   int        // 0: no byte bound
	writeTimeout time.Duration
	// smallSockets shrinks the server's send buffer and the client's
	// receive buffer, so that a client that stops reading stops the
	// server's writes after a few hundred KiB instead of several MiB.
	smallSockets bool
	// clientPings counts the pings the client is sent, when not nil.
	clientPings *atomic.Int32
	// duringWrite, when not nil, is called by OnWrite: from within a
	// write, while the writer's role is held, as another goroutine's
	// call could come at that moment.
	duringWrite func(*Participant)
}

// smallSocketBuffer is the size smallSockets asks of both sockets.
const smallSocketBuffer = 16 << 10

// served is the server's side: the participant and what its callbacks and
// its reader saw.
type served struct {
	p *Participant

	mu     sync.Mutex
	cuts   []string // OnCut's reasons, in order
	writes []int    // OnWrite's message counts, in order
	cut    chan struct{}

	duringWrite func(*Participant)

	read    chan message  // what the server's reader read from the client
	readEnd chan struct{} // closed when the server's reader has returned
}

// message is one message the server's reader read, and whether the next
// one had already come whole when it had (Conn.MessageBuffered).
type message struct {
	typ          websocket.MessageType
	data         []byte
	nextBuffered bool
}

func (s *served) onCut(reason string) {
	s.mu.Lock()
	s.cuts = append(s.cuts, reason)
	s.mu.Unlock()
	select {
	case s.cut <- struct{}{}:
	default:
	}
}

func (s *served) onWrite(n int) {
	s.mu.Lock()
	s.writes = append(s.writes, n)
	s.mu.Unlock()
	if s.duringWrite != nil {
		s.duringWrite(s.p)
	}
}

// cutReasons is what OnCut was told so far.
func (s *served) cutReasons() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cuts...)
}

// writeCounts is what OnWrite was told so far.
func (s *served) writeCounts() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.writes...)
}

// waitCut waits for the participant to be cut and returns why.
func (s *served) waitCut(t *testing.T) string {
	t.Helper()
	select {
	case <-s.cut:
	case <-time.After(patience):
		t.Fatal("the participant was never cut")
	}
	return s.cutReasons()[0]
}

// waitDone waits for the participant's connection to end.
func (s *served) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-s.p.Done():
	case <-time.After(patience):
		t.Fatal("the participant's Done was never closed")
	}
}

// send queues bodies as the pod's fan-out does (Enqueue each, then one
// Flush), failing the test if one is refused.
func (s *served) send(t *testing.T, bodies ...[]byte) {
	t.Helper()
	for i, b := range bodies {
		if !s.p.Enqueue(b) {
			t.Fatalf("Enqueue refused body %d of %d", i, len(bodies))
		}
	}
	s.p.Flush()
}

// serve starts a server that serves each connection as a participant with
// su, and returns its URL and the participants it makes.
func serve(t *testing.T, su setup) (string, <-chan *served) {
	t.Helper()
	if su.sendQueue == 0 {
		su.sendQueue = 1024
	}
	f, err := filter.FromQuery(su.query)
	if err != nil {
		t.Fatalf("filter %v: %v", su.query, err)
	}
	joined := make(chan *served, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hw := SmallBuffers(w)
		conn, err := websocket.Accept(hw, req, &websocket.AcceptOptions{
			InsecureSkipVerify: true,
			CompressionMode:    websocket.CompressionDisabled,
		})
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		conn.SetReadLimit(-1)
		if su.smallSockets {
			if err := hw.Conn().Conn.(*net.TCPConn).SetWriteBuffer(smallSocketBuffer); err != nil {
				t.Errorf("SetWriteBuffer: %v", err)
			}
		}
		s := &served{cut: make(chan struct{}, 1), read: make(chan message, 64), readEnd: make(chan struct{}), duringWrite: su.duringWrite}
		s.p = New(conn, hw.Conn(), "alice", "lab", nil, nil, "mcpp", f, Options{
			SendQueue:      su.sendQueue,
			SendQueueBytes: su.queueBytes,
			WriteTimeout:   su.writeTimeout,
			OnCut:          s.onCut,
			OnWrite:        s.onWrite,
		})
		go s.readLoop(conn)
		joined <- s
	}))
	t.Cleanup(srv.Close)
	return srv.URL, joined
}

// readLoop reads the client's messages with the participant's own
// ReadLoop, as the gateway does, and ends the participant as it does when
// the connection ends.
func (s *served) readLoop(conn *websocket.Conn) {
	defer close(s.readEnd)
	defer s.p.Finish()
	defer func() { _ = conn.CloseNow() }()
	s.p.ReadLoop(context.Background(), func(msg []byte, binary, more bool) {
		typ := websocket.MessageText
		if binary {
			typ = websocket.MessageBinary
		}
		s.read <- message{typ: typ, data: bytes.Clone(msg), nextBuffered: more}
	})
}

// accepted waits for the participant the server made.
func accepted(t *testing.T, joined <-chan *served) *served {
	t.Helper()
	select {
	case s := <-joined:
		return s
	case <-time.After(patience):
		t.Fatal("the server made no participant")
		return nil
	}
}

// open serves one participant and connects coder/websocket to it. The
// participant is not started: the test starts it (Start) when it wants.
func open(t *testing.T, su setup) (*served, *websocket.Conn) {
	t.Helper()
	u, joined := serve(t, su)
	dialer := &net.Dialer{}
	if su.smallSockets {
		// Before connect, so that the window is small from the start.
		dialer.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, smallSocketBuffer)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	opts := &websocket.DialOptions{
		CompressionMode: websocket.CompressionDisabled,
		HTTPClient:      &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}},
	}
	if su.clientPings != nil {
		opts.OnPingReceived = func(context.Context, []byte) bool {
			su.clientPings.Add(1)
			return true // and answer it
		}
	}
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http"), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	client.SetReadLimit(-1)
	t.Cleanup(func() { _ = client.CloseNow() })
	return accepted(t, joined), client
}

// read reads the client's next message, failing the test unless it is a
// text message.
func read(t *testing.T, client *websocket.Conn) []byte {
	t.Helper()
	typ, b, err := readOrEnd(client)
	if err != nil {
		t.Fatalf("the client's read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("the client read a %v message, want text", typ)
	}
	return b
}

// readOrEnd reads the client's next message, or how the connection ended.
func readOrEnd(client *websocket.Conn) (websocket.MessageType, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return client.Read(ctx)
}

// wantClose reads until the connection ends and fails the test unless it
// ended with a close frame of code and reason; it returns the data
// messages read before it.
func wantClose(t *testing.T, client *websocket.Conn, code websocket.StatusCode, reason string) [][]byte {
	t.Helper()
	var before [][]byte
	for {
		_, b, err := readOrEnd(client)
		if err == nil {
			before = append(before, b)
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("the connection ended without a close frame (%v), want %d %q", err, code, reason)
		}
		if ce.Code != code || ce.Reason != reason {
			t.Fatalf("closed with %d %q, want %d %q", ce.Code, ce.Reason, code, reason)
		}
		return before
	}
}

// body is a distinct message of size bytes (at least 8) that says its
// index i, then letters.
func body(i, size int) []byte {
	b := make([]byte, size)
	copy(b[copy(b, fmt.Sprintf("%08d", i)):], letters()[8:])
	return b
}

// letters is the filler of body: enough for its largest message.
var letters = sync.OnceValue(func() []byte {
	return bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 4<<20/26+1)
})

// indexOf is the index body wrote at the start of b.
func indexOf(t *testing.T, b []byte) int {
	t.Helper()
	var i int
	if len(b) < 8 {
		t.Fatalf("message %q too short to hold an index", b)
	}
	if _, err := fmt.Sscanf(string(b[:8]), "%08d", &i); err != nil {
		t.Fatalf("message %.20q holds no index: %v", b, err)
	}
	return i
}

// eventually polls cond until it holds, failing the test with what after
// patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, patience, what, cond)
}
