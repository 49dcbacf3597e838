package harness

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	mcpp "github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// Msg is a received envelope, decoded.
type Msg map[string]any

func (m Msg) Str(key string) string { s, _ := m[key].(string); return s }
func (m Msg) Kind() string          { return m.Str("kind") }
func (m Msg) Payload() map[string]any {
	p, _ := m["payload"].(map[string]any)
	return p
}

// ErrCode is the code of a system/error, or "".
func (m Msg) ErrCode() string {
	if m.Kind() != "system/error" {
		return ""
	}
	s, _ := m.Payload()["error"].(string)
	return s
}

func (m Msg) ContextID() string {
	switch c := m["context"].(type) {
	case string:
		return c
	case map[string]any:
		s, _ := c["id"].(string)
		return s
	}
	return ""
}

// Client is one participant's connection, on the public client's Conn:
// it keeps every WebSocket message as received (Raw) and decodes each
// envelope into a Msg (In), so that tests assert on the exact bytes.
type Client struct {
	T       *testing.T
	Conn    FrameConn
	ID      string
	Welcome Msg
	In      chan Msg
	Raw     chan []byte // every text message as received
	reading
}

// FrameConn is what a test reads and writes: a *mcpp.Conn, or a
// WebSocketConn for what the public client will not send.
type FrameConn interface {
	Read(ctx context.Context, dst []byte) ([]byte, error)
	Write(ctx context.Context, msg []byte) error
	Close() error
	CloseNow() error
}

// Dial joins pod as participant id (open mode) with extra query
// parameters ("k=v&k2=v2") and waits for the welcome.
func (g *Gateway) Dial(t *testing.T, pod, id string, query string) *Client {
	t.Helper()
	return StartClient(t, dialPod(t, g.WS, pod, id, query), true)
}

// DialBuffered is Dial with room for n messages unread (StartClientBuffered).
func (g *Gateway) DialBuffered(t *testing.T, pod, id string, query string, n int) *Client {
	t.Helper()
	return StartClientBuffered(t, dialPod(t, g.WS, pod, id, query), true, n)
}

// DialWebSocket is Dial with coder/websocket itself, for a test that
// also sends a binary message (WebSocketConn.WriteBinary).
func (g *Gateway) DialWebSocket(t *testing.T, pod, id string, query string) *Client {
	t.Helper()
	return StartClient(t, DialPodWebSocket(t, g.WS, pod, id, query), true)
}

// DialPodWebSocket is dialPod with coder/websocket itself.
func DialPodWebSocket(t *testing.T, wsURL, pod, id, query string) WebSocketConn {
	t.Helper()
	ws, _, err := DialWebSocket(wsURL, podQuery(t, pod, id, query), nil)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", pod, id, err)
	}
	return WebSocketConn{WS: ws}
}

// dialPod joins pod as participant id (none when id is "") with extra
// query parameters ("k=v&k2=v2"), failing the test when the upgrade is
// refused. The client and the Peer (badinput_test.go) both join so.
func dialPod(t *testing.T, wsURL, pod, id, query string) *mcpp.Conn {
	t.Helper()
	c, err := DialConn(wsURL, podQuery(t, pod, id, query), nil)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", pod, id, err)
	}
	return c
}

// podQuery is the query of a join to pod as participant id (none when id
// is "") with extra parameters ("k=v&k2=v2").
func podQuery(t *testing.T, pod, id, query string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	q.Set("pod", pod)
	if id != "" {
		q.Set("participant", id)
	}
	return q
}

// DialConn joins with the public client's Conn: q's pod as Options.Pod,
// the rest of q in the URL as it is, h as headers. A refusal is a
// *mcpp.RefusedError.
func DialConn(wsURL string, q url.Values, h http.Header) (*mcpp.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mcpp.DialConn(ctx, wsURL+"?"+q.Encode(), mcpp.Options{Pod: q.Get("pod"), HTTPHeader: h})
}

// DialWebSocket upgrades with coder/websocket itself, for what the public
// client will not do: an upgrade without a pod, with MCPx's topic=, a
// refusal to probe (refusal), a binary message (WebSocketConn).
func DialWebSocket(wsURL string, q url.Values, h http.Header) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := wsURL
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if c != nil {
		c.SetReadLimit(64 << 20)
	}
	return c, resp, err
}

// WebSocketConn is a FrameConn over coder/websocket, for the tests of
// input the public client never sends (binary messages, topic= joins).
type WebSocketConn struct{ WS *websocket.Conn }

func (c WebSocketConn) Read(ctx context.Context, dst []byte) ([]byte, error) {
	for {
		typ, b, err := c.WS.Read(ctx)
		if err != nil {
			return dst, err
		}
		if typ == websocket.MessageText {
			return append(dst, b...), nil
		}
	}
}

func (c WebSocketConn) Write(ctx context.Context, msg []byte) error {
	return c.WS.Write(ctx, websocket.MessageText, msg)
}

// WriteBinary sends msg as a binary message, which the gateway refuses.
func (c WebSocketConn) WriteBinary(ctx context.Context, msg []byte) error {
	return c.WS.Write(ctx, websocket.MessageBinary, msg)
}

func (c WebSocketConn) Close() error    { return c.WS.Close(websocket.StatusNormalClosure, "") }
func (c WebSocketConn) CloseNow() error { return c.WS.CloseNow() }

// closeCode is the close code a connection's read ended with, or -1.
func closeCode(err error) wire.CloseCode {
	var ce *mcpp.ClosedError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return wire.CloseCode(websocket.CloseStatus(err))
}

// StartClient reads the connection in the background. With wantWelcome it
// waits for the welcome and checks that it comes first.
func StartClient(t *testing.T, conn FrameConn, wantWelcome bool) *Client {
	t.Helper()
	return StartClientBuffered(t, conn, wantWelcome, 1<<16)
}

// StartClientBuffered is StartClient with room for n messages unread
// instead of 65,536. The buffers are allocated whole (2 MiB a client at
// the default), so a test of thousands of clients gives each the room it
// needs; a client that receives more than n unread blocks its reader, and
// the gateway then cuts it as a slow consumer, which the test sees.
func StartClientBuffered(t *testing.T, conn FrameConn, wantWelcome bool, n int) *Client {
	t.Helper()
	c := &Client{T: t, Conn: conn, In: make(chan Msg, n), Raw: make(chan []byte, n), reading: newReading()}
	go c.run(conn, c.take)
	t.Cleanup(func() { _ = conn.CloseNow() })
	if wantWelcome {
		w := c.Next(5 * time.Second)
		if w == nil || w.Kind() != "system/welcome" {
			t.Fatalf("first message is not system/welcome: %v", w)
		}
		c.Welcome = w
		you, _ := w.Payload()["you"].(map[string]any)
		c.ID, _ = you["id"].(string)
	}
	return c
}

// take keeps a message as received and each envelope of it decoded.
func (c *Client) take(data []byte) {
	c.Raw <- data
	for _, line := range strings.Split(string(data), "\n") {
		var m Msg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			c.T.Errorf("received a line that is not JSON: %q", line)
			continue
		}
		c.In <- m
	}
}

// Next returns the next envelope, or nil after d.
func (c *Client) Next(d time.Duration) Msg {
	select {
	case m := <-c.In:
		return m
	case <-time.After(d):
		return nil
	}
}

// Expect returns the next envelope, failing the test after 5s.
func (c *Client) Expect() Msg {
	c.T.Helper()
	return c.arrived(c.Next(5 * time.Second))
}

// arrived fails the test when a read of 5s found nothing (m is nil).
func (c *Client) arrived(m Msg) Msg {
	c.T.Helper()
	if m == nil {
		c.T.Fatalf("%s: no envelope within 5s", c.ID)
	}
	return m
}

// ExpectKind skips nothing: the next envelope must be of kind.
func (c *Client) ExpectKind(kind string) Msg {
	c.T.Helper()
	return c.ofKind(c.Expect(), kind)
}

// ofKind fails the test when m is not of kind.
func (c *Client) ofKind(m Msg, kind string) Msg {
	c.T.Helper()
	if m.Kind() != kind {
		c.T.Fatalf("%s: got %s (%v), want %s", c.ID, m.Kind(), m, kind)
	}
	return m
}

// ExpectError waits for a system/error and checks its code.
func (c *Client) ExpectError(code string) Msg {
	c.T.Helper()
	m := c.ExpectKind("system/error")
	if m.ErrCode() != code {
		c.T.Fatalf("%s: got error %q (%v), want %q", c.ID, m.ErrCode(), m.Payload(), code)
	}
	return m
}

// ExpectNothing checks that nothing arrives within d.
func (c *Client) ExpectNothing(d time.Duration) {
	c.T.Helper()
	if m := c.Next(d); m != nil {
		c.T.Fatalf("%s: got %v, want nothing", c.ID, m)
	}
}

// skipPresence returns the next envelope that is not presence.
func (c *Client) NextNonPresence(d time.Duration) Msg {
	for {
		m := c.Next(d)
		if m == nil || m.Kind() != "system/presence" {
			return m
		}
	}
}

// Send writes one envelope given as a Go value.
func (c *Client) Send(v any) {
	c.T.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.T.Fatal(err)
	}
	c.SendRaw(b)
}

// SendRaw writes one text message as is.
func (c *Client) SendRaw(b []byte) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Conn.Write(ctx, b); err != nil {
		c.T.Fatalf("%s: write: %v", c.ID, err)
	}
}

// WaitClosed waits for the connection to end and returns its close code.
func (c *Client) WaitClosed(d time.Duration) wire.CloseCode {
	c.T.Helper()
	return c.waitClosed(c.T, c.ID, d)
}

// Refusal dials and expects an HTTP refusal; it returns the status and the
// JSON body's error code.
func Refusal(t *testing.T, wsURL string, q url.Values, h http.Header) (int, string) {
	t.Helper()
	c, resp, err := DialWebSocket(wsURL, q, h)
	if err == nil {
		_ = c.CloseNow()
		t.Fatalf("upgrade with %v succeeded, want a refusal", q)
	}
	if resp == nil {
		t.Fatalf("upgrade with %v: no HTTP answer: %v", q, err)
	}
	var body struct{ Error, Message string }
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("refusal body is not JSON: %q", b)
	}
	if body.Message == "" {
		t.Fatalf("refusal body has no message: %q", b)
	}
	return resp.StatusCode, body.Error
}
