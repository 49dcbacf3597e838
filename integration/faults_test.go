package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// rawUpgrade opens a TCP connection to the gateway and upgrades it by
// hand, so that the test controls every byte that follows.
func rawUpgrade(t *testing.T, g *harness.Gateway, query string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.TCPConn)
	t.Cleanup(func() { _ = conn.Close() })
	req := "GET /ws?" + query + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(g.URL, "http://") +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade by hand: %v %v", resp, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, br
}

// frameHeader is the header of a masked client frame (FIN set) that
// announces n payload bytes, mask key included.
func frameHeader(op byte, n uint64, key [4]byte) []byte {
	b := []byte{0x80 | op}
	switch {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, n)
	}
	return append(b, key[:]...)
}

// maskedFrame is a whole client frame.
func maskedFrame(op byte, payload []byte) []byte {
	var key [4]byte
	_, _ = rand.Read(key[:])
	b := frameHeader(op, uint64(len(payload)), key)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// readServerFrame reads one (unmasked) frame the gateway wrote.
func readServerFrame(br *bufio.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	if n > 64<<20 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	return h[0] & 0x0f, payload, err
}

// readUntilEnd reads frames until the connection ends or d passes. It
// returns the close code of a close frame the gateway sent (or -1), and
// whether the gateway ended the TCP connection within d.
func readUntilEnd(conn net.Conn, br *bufio.Reader, d time.Duration) (code int, ended bool) {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	code = -1
	for {
		op, payload, err := readServerFrame(br)
		if err != nil {
			var ne net.Error
			return code, !(errors.As(err, &ne) && ne.Timeout())
		}
		if op == 0x8 && len(payload) >= 2 {
			code = int(binary.BigEndian.Uint16(payload))
		}
	}
}

// TestFaultSlowReaderMemoryBounded: a participant that stops reading
// while a sender floods the pod with 64 MiB of envelopes is cut with 4008,
// and meanwhile the live heap never grows past what its send queue may
// hold (--send-queue times the envelope size) and the pod's history
// (--history-bytes, in memory) plus a fixed allowance; once it is cut,
// the memory is given back but for the history.
//
// Not parallel: it measures the heap of the whole process.
func TestFaultSlowReaderMemoryBounded(t *testing.T) {
	const (
		queue = 32
		size  = 128 << 10
		n     = 512 // 64 MiB in all
		pod   = "fault-flood"
	)
	const historyBytes = 8 << 20
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = 2 * size
		c.SendQueue = queue
		c.Rate, c.Burst = 1e6, 1000000
		c.WriteTimeout = time.Minute // the cut must come from the queue
		c.HistoryBytes = historyBytes
	})
	sender := harness.DialPeer(t, g, pod, "sender", "", 64)
	sconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"slow"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// slow reads nothing at all from here on, until it has been cut.
	base := liveHeap()
	stopWatch := watchHeap(base, 20*time.Millisecond)

	// Each envelope has an id of its own (the pod's history refuses a
	// second envelope with an id it holds): the id is rewritten in place,
	// so that the test itself holds one envelope's memory.
	frame := harness.EnvelopeOfSize(t, "flood-000000", "chat", size)
	flooded := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			copy(frame[len(`{"id":"flood-`):], fmt.Sprintf("%06d", i))
			if err := sender.Write(false, frame); err != nil {
				flooded <- fmt.Errorf("flood: envelope %d: %w", i, err)
				return
			}
		}
		flooded <- nil
	}()
	harness.Eventually(t, 60*time.Second, "slow cut as a slow consumer", func() bool {
		return harness.Metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`) == 1
	})
	// slow reads again at once, keeping nothing: what its socket held,
	// then the close frame (README: the library gives the closing
	// handshake 5 s).
	slow := harness.NewPeer(t, "slow", sconn, 0)
	go slow.ReadLoop()
	if code := slow.WaitClosed(10 * time.Second); code != 4008 {
		t.Errorf("slow closed with %d (%v), want 4008", code, slow.CloseErr())
	}
	if err := <-flooded; err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "the whole flood accepted", func() bool {
		return harness.Metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})
	peak := max(stopWatch(), liveHeap())

	const allowance = 24 << 20
	bound := base + 2*queue*size + historyBytes + allowance
	grown := float64(peak-base) / (1 << 20)
	if peak > bound {
		t.Errorf("live heap peaked at %.1f MiB over the %.1f MiB before the flood; the bound is %.1f MiB (twice --send-queue %d x %d KiB, --history-bytes %d MiB, plus %d MiB)",
			grown, float64(base)/(1<<20), float64(bound-base)/(1<<20), queue, size>>10, historyBytes>>20, allowance>>20)
	}
	var after uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if after = liveHeap(); after <= base+historyBytes+allowance/2 || time.Now().After(deadline) {
			break
		}
	}
	if after > base+historyBytes+allowance/2 {
		t.Errorf("live heap %.1f MiB over the baseline after the cut (the history holds at most %d MiB)", float64(after-base)/(1<<20), historyBytes>>20)
	}

	if !sender.IsOpen() {
		t.Fatal("the sender was closed")
	}
	t.Logf("flood of %d x %d KiB (%d MiB), --send-queue %d: live heap %.1f MiB before, peak %+.1f MiB (bound %+.1f MiB), %+.1f MiB after the cut",
		n, size>>10, n*size>>20, queue, float64(base)/(1<<20), grown, float64(bound-base)/(1<<20), (float64(after)-float64(base))/(1<<20))
}

// TestFaultHalfClose: a client that half-closes its TCP connection
// (CloseWrite, as a crashed proxy may) is cleaned up: the others hear it
// leave, the gateway closes its side of the socket, and the pod goes on.
func TestFaultHalfClose(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "fault-half"
	observer := g.Dial(t, pod, "observer", "")
	conn, br := rawUpgrade(t, g, "pod="+pod+"&participant=half")
	harness.PresenceOf(t, observer.Expect(), "join", "half")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if op, payload, err := readServerFrame(br); err != nil || op != 1 || !strings.Contains(string(payload), "system/welcome") {
		t.Fatalf("welcome: op %d %q %v", op, payload, err)
	}
	if err := conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	harness.PresenceOf(t, observer.Expect(), "leave", "half")
	harness.Eventually(t, 5*time.Second, "mcpp_connections = 1", func() bool {
		return harness.Metric(t, g.URL, "mcpp_connections") == 1
	})
	// The gateway must close its side too: a socket it keeps half open
	// is a descriptor and a connection's memory kept forever.
	if _, ended := readUntilEnd(conn, br, 5*time.Second); !ended {
		t.Error("the gateway never closed its side of a half-closed connection")
	}
	other := g.Dial(t, pod, "other", "")
	harness.PresenceOf(t, observer.Expect(), "join", "other")
	other.Send(map[string]any{"id": "after-half", "kind": "chat"})
	observer.ExpectEnvelope("chat", "after-half")
}

// TestFaultHandshakeTimeout: connections that never finish their upgrade
// request (nothing sent, half a request line, headers without their end,
// a byte every 100 ms) are dropped once --handshake-timeout has passed,
// none is upgraded, and the gateway goes on serving.
func TestFaultHandshakeTimeout(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	g := harness.StartGateway(t, func(c *gateway.Config) { c.HandshakeTimeout = timeout })
	addr := strings.TrimPrefix(g.URL, "http://")
	full := "GET /ws?pod=fault-slowloris&participant=x HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	cases := []struct {
		name    string
		sent    string
		trickle bool
	}{
		{"nothing", "", false},
		{"half a request line", "GET /ws?pod=fault-slow", false},
		{"headers without their end", full, false},
		{"a byte every 100ms", full + "\r\n", true},
	}
	type result struct {
		name    string
		elapsed time.Duration
		got     string
		err     error
	}
	results := make(chan result, len(cases))
	for _, tc := range cases {
		go func() {
			r := result{name: tc.name}
			defer func() { results <- r }()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				r.err = err
				return
			}
			defer conn.Close()
			start := time.Now()
			if tc.trickle {
				go func() {
					for i := 0; i < len(tc.sent); i++ {
						if _, err := conn.Write([]byte{tc.sent[i]}); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			} else if _, err := conn.Write([]byte(tc.sent)); err != nil {
				r.err = err
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			b, err := io.ReadAll(conn)
			r.elapsed, r.got = time.Since(start), string(b)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.err = fmt.Errorf("still open after %v", r.elapsed.Round(time.Millisecond))
			}
		}()
	}
	for range cases {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", r.name, r.err)
			continue
		}
		if strings.Contains(r.got, " 101 ") {
			t.Errorf("%s: upgraded: %q", r.name, r.got)
		}
		t.Logf("%s: dropped after %v (answer %q)", r.name, r.elapsed.Round(10*time.Millisecond), firstLine(r.got))
	}
	if v := harness.Metric(t, g.URL, "mcpp_connections"); v != 0 {
		t.Fatalf("mcpp_connections = %v", v)
	}
	c := g.Dial(t, "fault-slowloris", "after", "")
	c.Send(map[string]any{"kind": "chat"})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// TestFaultKilledMidFrame: connections that end in the middle of a frame
// (a header announcing 1,000 bytes and 10 sent, half a header), or that
// stall there while the gateway pings them, or that announce a frame of
// 2^62 bytes and send more than the read limit of it, are cleaned up: the
// others hear them leave, the gateway closes the socket (with 1009 for the
// huge frame), and the others go on talking.
func TestFaultKilledMidFrame(t *testing.T) {
	t.Parallel()
	const limit = 4096 // the connection is closed past limit + 64 KiB
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = limit
		c.PingInterval = 500 * time.Millisecond
		c.WriteTimeout = time.Second
	})
	const pod = "fault-midframe"
	observer := g.Dial(t, pod, "observer", "")
	talker := g.Dial(t, pod, "talker", "")
	harness.PresenceOf(t, observer.Expect(), "join", "talker")
	key := [4]byte{1, 2, 3, 4}
	cases := []struct {
		name  string
		bytes []byte
		close bool // the client closes its socket after sending
		code  int  // close code the gateway must send, or -1
	}{
		{"1,000 announced, 10 sent, closed", append(frameHeader(1, 1000, key), "0123456789"...), true, -1},
		{"half a header, closed", []byte{0x81}, true, -1},
		{"1,000 announced, 10 sent, stalled", append(frameHeader(1, 1000, key), "0123456789"...), false, -1},
		{"2^62 bytes announced, 80 KiB sent", append(frameHeader(1, 1<<62, key), make([]byte, limit+76<<10)...), false, 1009},
	}
	for i, tc := range cases {
		id := fmt.Sprintf("victim-%d", i)
		conn, br := rawUpgrade(t, g, "pod="+pod+"&participant="+id)
		harness.PresenceOf(t, observer.Expect(), "join", id)
		harness.PresenceOf(t, talker.Expect(), "join", id)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := readServerFrame(br); err != nil {
			t.Fatalf("%s: welcome: %v", tc.name, err)
		}
		if _, err := conn.Write(tc.bytes); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.close {
			_ = conn.Close()
		}
		for _, c := range []*harness.Client{observer, talker} {
			m := c.NextNonPresenceOrLeave(10*time.Second, id)
			if m == nil {
				t.Fatalf("%s: %s did not hear %s leave within 10s", tc.name, c.ID, id)
			}
		}
		if !tc.close {
			code, ended := readUntilEnd(conn, br, 10*time.Second)
			if !ended {
				t.Fatalf("%s: the gateway did not close the connection", tc.name)
			}
			if code != tc.code {
				t.Fatalf("%s: close code %d, want %d", tc.name, code, tc.code)
			}
		}
		// The others are unaffected.
		tag := fmt.Sprintf("after-%d", i)
		talker.Send(map[string]any{"id": tag, "kind": "chat"})
		observer.ExpectEnvelope("chat", tag)
	}
	harness.Eventually(t, 5*time.Second, "mcpp_connections = 2", func() bool {
		return harness.Metric(t, g.URL, "mcpp_connections") == 2
	})
}

// TestFaultCloseHandshake: a client that closes with a closing handshake
// gets the gateway's close frame back (RFC 6455, 5.5.1), also while the
// gateway is writing to it. 800 clients join a busy pod, read their
// welcome and close at once.
func TestFaultCloseHandshake(t *testing.T) {
	t.Parallel()
	const pod, workers, each = "fault-close", 8, 100
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 1e6, 1000000 })
	casterConn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"caster"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	caster := harness.NewPeer(t, "caster", casterConn, 0)
	go caster.ReadLoop()
	t.Cleanup(func() { _ = casterConn.CloseNow() })
	bc := startCaster(casterConn, 0)
	var (
		failed atomic.Int64
		first  atomic.Value
		wg     sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				conn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {fmt.Sprintf("c-%d-%d", w, i)}}, nil)
				if err != nil {
					first.CompareAndSwap(nil, err)
					failed.Add(1)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = conn.Read(ctx, nil)
				cancel()
				if err == nil {
					err = conn.Close()
				}
				if err != nil {
					first.CompareAndSwap(nil, err)
					failed.Add(1)
				}
				_ = conn.CloseNow()
			}
		}()
	}
	wg.Wait()
	bc.halt(t)
	if k := failed.Load(); k > 0 {
		t.Errorf("%d of %d closing handshakes failed; first: %v", k, workers*each, first.Load())
	}
}

// TestFaultAbruptDisconnectReleasesSockets runs mcpp-gateway and drops
// 300 connections without a closing handshake (as a crashed client or a
// lost network does): the gateway's open file descriptors come back to
// what they were, so no socket and no connection state is kept.
func TestFaultAbruptDisconnectReleasesSockets(t *testing.T) {
	t.Parallel()
	p := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0")
	fdDir := "/proc/" + strconv.Itoa(p.Cmd.Process.Pid) + "/fd"
	const pod, n = "fault-abrupt", 300
	dropOne := func(id string) {
		conn, err := harness.DialConn(p.GW.WS, url.Values{"pod": {pod}, "participant": {id}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Read(ctx, nil); err != nil {
			t.Fatal(err)
		}
		_ = conn.CloseNow()
	}
	connections := func(want float64) func() bool {
		return func() bool { return harness.Metric(t, p.GW.URL, "mcpp_connections") == want }
	}
	dropOne("warm-up")
	harness.Eventually(t, 10*time.Second, "no connection", connections(0))
	before := countFDs(t, fdDir)
	for i := 0; i < n; i++ {
		dropOne(fmt.Sprintf("abrupt-%d", i))
	}
	harness.Eventually(t, 10*time.Second, "no connection", connections(0))
	after := countFDs(t, fdDir)
	for deadline := time.Now().Add(10 * time.Second); after > before+5 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		after = countFDs(t, fdDir)
	}
	if after > before+5 {
		t.Errorf("gateway process: %d open descriptors before %d abrupt disconnects, %d after", before, n, after)
	}
	t.Logf("gateway process: %d open descriptors before %d abrupt disconnects, %d after", before, n, after)
}

// TestShutdownSlowReaderQueued extends TestShutdownSIGTERM: a participant
// that reads slowly has thousands of envelopes queued in the gateway when
// SIGTERM comes; it receives every one of them, in order, then 1001, and
// the gateway exits 0 within --shutdown-timeout.
func TestShutdownSlowReaderQueued(t *testing.T) {
	t.Parallel()
	const (
		pod  = "shutdown-slow"
		n    = 6000
		size = 8 << 10
	)
	// No pings: a ping that finds bob's socket full would cut him
	// (TestFaultPauseShorterThanWriteTimeout is about that).
	p := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--rate", "100000", "--burst", "100000",
		"--send-queue", "8192", "--send-queue-bytes", "1GiB", "--write-timeout", "1m", "--shutdown-timeout", "30s", "--ping-interval", "0")
	g := p.GW
	alice := g.Dial(t, pod, "alice", "")
	bconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"bob"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	harness.PresenceOf(t, alice.Expect(), "join", "bob")
	filler := harness.Pad(size)
	for i := 0; i < n; i++ {
		alice.Send(map[string]any{"id": fmt.Sprintf("q-%d", i), "kind": "chat", "payload": map[string]any{"seq": i, "pad": filler}})
	}
	harness.Eventually(t, 60*time.Second, "all envelopes accepted", func() bool {
		return harness.Metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})
	// Messages written: alice's welcome, bob's welcome, bob's join to
	// alice, and what bob's socket took before it filled up.
	written := harness.Metric(t, g.URL, "mcpp_websocket_messages_out_total") - 3
	queued := n - int(written)
	if queued < 1000 {
		t.Fatalf("only %d envelopes are queued for bob at SIGTERM; the test needs thousands", queued)
	}

	sigterm := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "/healthz no longer 200", func() bool {
		status, _, err := harness.HTTPGet(g.URL + "/healthz")
		return err != nil || status != http.StatusOK
	})
	// bob reads slowly: a pause every few messages.
	bob := harness.NewPeer(t, "bob", bconn, 16)
	go bob.ReadLoop()
	if w := bob.Expect(); w.Kind != "system/welcome" {
		t.Fatalf("bob's first message is %s", w.Kind)
	}
	for i := 0; i < n; i++ {
		m := bob.ExpectOther()
		if m.Seq() != i {
			t.Fatalf("bob: envelope %d is %s (seq %d)", i, m.ID, m.Seq())
		}
		if i%4 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if code := bob.WaitClosed(30 * time.Second); code != wire.CloseGoingAway {
		t.Fatalf("bob closed with %d, want 1001", code)
	}
	if code := alice.WaitClosed(30 * time.Second); code != wire.CloseGoingAway {
		t.Fatalf("alice closed with %d, want 1001", code)
	}
	select {
	case <-p.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("gateway still running 30s after SIGTERM")
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("gateway exited with %d, want 0:\n%s", code, p.Stderr)
	}
	if log := p.Stderr.String(); strings.Contains(log, "timed out") {
		t.Fatalf("shutdown timed out:\n%s", log)
	}
	t.Logf("%d envelopes of %d KiB queued for a slow reader at SIGTERM; all delivered in order, then 1001; exit after %v",
		queued, size>>10, time.Since(sigterm).Round(time.Millisecond))
}

// TestShutdownTimeoutDropsStuckReader: a participant that never reads
// holds the shutdown up for --shutdown-timeout only: then its connection
// is dropped (no 1001), the gateway exits 0 and says so, and a participant
// that reads got everything and 1001.
func TestShutdownTimeoutDropsStuckReader(t *testing.T) {
	t.Parallel()
	const (
		pod     = "shutdown-stuck"
		n       = 3000
		size    = 8 << 10
		timeout = 2 * time.Second
	)
	// No pings: a ping that finds bob's socket full would cut him before
	// the shutdown (TestFaultPauseShorterThanWriteTimeout is about that).
	p := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--rate", "100000", "--burst", "100000",
		"--send-queue", "8192", "--send-queue-bytes", "1GiB", "--write-timeout", "1m", "--shutdown-timeout", timeout.String(), "--ping-interval", "0")
	g := p.GW
	alice := g.Dial(t, pod, "alice", "")
	carol := g.Dial(t, pod, "carol", "")
	bconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"bob"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	harness.PresenceOf(t, alice.Expect(), "join", "carol")
	harness.PresenceOf(t, alice.Expect(), "join", "bob")
	harness.PresenceOf(t, carol.Expect(), "join", "bob")
	filler := harness.Pad(size)
	for i := 0; i < n; i++ {
		alice.Send(map[string]any{"id": fmt.Sprintf("s-%d", i), "kind": "chat", "payload": map[string]any{"seq": i, "pad": filler}})
	}
	for i := 0; i < n; i++ {
		if m := carol.NextOf(); harness.SeqOf(m) != i {
			t.Fatalf("carol: envelope %d is %v", i, m.Str("id"))
		}
	}

	sigterm := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited:
	case <-time.After(timeout + 20*time.Second): // a hang, not a speed limit
		t.Fatalf("gateway still running %v after SIGTERM with --shutdown-timeout %v", time.Since(sigterm).Round(time.Millisecond), timeout)
	}
	exitAfter := time.Since(sigterm)
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("gateway exited with %d, want 0:\n%s", code, p.Stderr)
	}
	if !strings.Contains(p.Stderr.String(), "timed out") {
		t.Errorf("the gateway did not log that the shutdown timed out:\n%s", p.Stderr)
	}
	for _, c := range []*harness.Client{alice, carol} {
		if code := c.WaitClosed(10 * time.Second); code != wire.CloseGoingAway {
			t.Errorf("%s closed with %d, want 1001", c.ID, code)
		}
	}
	// bob gets what his socket held, then the connection ends without a
	// closing handshake.
	bob := harness.StartClient(t, bconn, true)
	if code := bob.WaitClosed(20 * time.Second); code == wire.CloseGoingAway {
		t.Errorf("the stuck reader got 1001; its queue cannot have been delivered")
	}
	t.Logf("stuck reader with %d envelopes of %d KiB owed: gateway exited 0 after %v (--shutdown-timeout %v); bob got %d envelopes before the drop",
		n, size>>10, exitAfter.Round(time.Millisecond), timeout, len(bob.In))
}

// TestFaultStuckWriterCut: a participant that stops reading while the
// gateway is in the middle of writing to it (its socket is full) is cut
// once the write has taken --write-timeout, the others hear it leave, and
// the gateway goes on watching its connections: a second one that gets
// stuck the same way is cut too.
func TestFaultStuckWriterCut(t *testing.T) {
	t.Parallel()
	const (
		pod  = "fault-stuck"
		size = 128 << 10
		n    = 200 // 25 MiB: more than loopback socket buffers hold
	)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = 2 * size
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 4096 // the cut must come from the write timeout
		c.SendQueueBytes = 1 << 30
		c.WriteTimeout = time.Second
	})
	sender := harness.DialPeer(t, g, pod, "sender", "", 1024)
	for round := 0; round < 2; round++ {
		id := fmt.Sprintf("stuck-%d", round)
		conn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {id}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.CloseNow() })
		// conn reads nothing from here on.
		if m := sender.Expect(); m.Kind != "system/presence" || !strings.Contains(string(m.Payload), `"join"`) {
			t.Fatalf("sender got %s %s, want %s's join", m.Kind, m.Payload, id)
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			// Ids of their own: the history refuses one it holds.
			frame := harness.EnvelopeOfSize(t, fmt.Sprintf("stuck-%d-%04d", round, i), "chat", size)
			if err := sender.Write(false, frame); err != nil {
				t.Fatalf("round %d: envelope %d: %v", round, i, err)
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			b := sender.Next(time.Until(deadline))
			if b == nil {
				t.Fatalf("round %d: %s, stuck with a full socket, was not cut within 20s (--write-timeout 1s)", round, id)
			}
			m, _ := harness.DecodeWire(b)
			if m.Kind == "system/presence" && strings.Contains(string(m.Payload), `"leave"`) && strings.Contains(string(m.Payload), id) {
				break
			}
		}
		t.Logf("round %d: %s cut %v after the flood began", round, id, time.Since(start).Round(10*time.Millisecond))
	}
	if v := harness.Metric(t, g.URL, "mcpp_connections"); v != 1 {
		t.Fatalf("mcpp_connections = %v, want 1", v)
	}
}

// TestFaultPauseShorterThanWriteTimeout: a participant that stops reading
// for 12 seconds while the pod is busy (its socket fills up, its queue
// does not) is not cut, since --write-timeout is 30s, also when a ping
// comes while its socket is full (--ping-interval 4s): when it reads
// again it gets every envelope, in order.
func TestFaultPauseShorterThanWriteTimeout(t *testing.T) {
	t.Parallel()
	const (
		pod      = "fault-pause"
		size     = 64 << 10
		n        = 400 // 25 MiB: more than loopback socket buffers hold
		interval = 4 * time.Second
	)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = 2 * size
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 4096
		c.SendQueueBytes = 1 << 30
		c.WriteTimeout = 30 * time.Second
		c.PingInterval = interval
	})
	sender := harness.DialPeer(t, g, pod, "sender", "", 1024)
	// The watcher answers pings by hand, so that the test knows when the
	// gateway pings: every interval from then on.
	wconn, wbr := rawUpgrade(t, g, "pod="+pod+"&participant=watcher&main=0")
	pinged := make(chan time.Time, 1)
	go func() {
		for {
			op, payload, err := readServerFrame(wbr)
			if err != nil {
				return
			}
			if op == 0x9 {
				select {
				case pinged <- time.Now():
				default:
				}
				if _, err := wconn.Write(maskedFrame(0xA, payload)); err != nil {
					return
				}
			}
		}
	}()
	if m := sender.Expect(); m.Kind != "system/presence" {
		t.Fatalf("sender got %s, want watcher's join", m.Kind)
	}
	var ping time.Time
	select {
	case ping = <-pinged:
	case <-time.After(2*interval + 5*time.Second):
		t.Fatal("the gateway did not ping")
	}
	// The pauser joins right after a ping and reads nothing until the
	// next ping has found its socket full and has had 5s (and 2s more).
	conn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"pauser"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseNow() })
	// The upgrade's answer may come before the pod has the pauser among
	// its members: the flood starts once the sender has heard it join.
	if m := sender.Expect(); m.Kind != "system/presence" {
		t.Fatalf("sender got %s, want pauser's join", m.Kind)
	}
	for i := 0; i < n; i++ {
		// Ids of their own: the history refuses one it holds.
		if err := sender.Write(false, harness.EnvelopeOfSize(t, fmt.Sprintf("pause-%04d", i), "chat", size)); err != nil {
			t.Fatalf("envelope %d: %v", i, err)
		}
	}
	filled := time.Since(ping)
	resume := ping.Add(interval + 7*time.Second)
	time.Sleep(time.Until(resume)) // the pause is the point of the test
	pauser := harness.NewPeer(t, "pauser", conn, 64)
	go pauser.ReadLoop()
	if w := pauser.Expect(); w.Kind != "system/welcome" {
		t.Fatalf("pauser's first message is %s", w.Kind)
	}
	for i := 0; i < n; i++ {
		b := pauser.Next(10 * time.Second)
		if b == nil {
			t.Fatalf("pauser got %d of %d envelopes after a pause of %v, then its connection ended (%v; --write-timeout 30s)",
				i, n, time.Since(ping).Round(time.Second), pauser.CloseErr())
		}
		if m, _ := harness.DecodeWire(b); m.ID != fmt.Sprintf("pause-%04d", i) {
			t.Fatalf("pauser: envelope %d is %s", i, m.ID)
		}
	}
	if !pauser.IsOpen() {
		t.Fatal("pauser was closed")
	}
	t.Logf("flood sent %v after a ping; pauser read nothing for %v and then got all %d envelopes", filled.Round(10*time.Millisecond), interval+7*time.Second, n)
}

// TestFaultShutdownDuringStart: a gateway shut down right after Serve was
// started (a SIGTERM during start-up, or a program that embeds the
// gateway and stops it at once) ends cleanly: Serve and Shutdown do not
// race, and nothing is served once Shutdown has returned.
//
// Not parallel: a data race it finds would be reported against every test
// running at the time.
func TestFaultShutdownDuringStart(t *testing.T) {
	for i := 0; i < 20; i++ {
		g := harness.StartGateway(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.Shutdown(ctx)
		cancel()
		if status, _, err := harness.HTTPGet(g.URL + "/healthz"); err == nil {
			t.Fatalf("round %d: /healthz answered %d after Shutdown returned", i, status)
		}
	}
}
