package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
)

// binDir holds the commands built once for the tests that run processes.
var (
	binDir   string
	binOnce  sync.Once
	binErr   error
	testRoot string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpp-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildCommand builds ./cmd/NAME once and returns the binary's path.
func buildCommand(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(binDir, name)
	binOnce.Do(func() {
		for _, n := range []string{"mcpp-gateway", "mcpp"} {
			// Built without -race: the in-process tests run the same code
			// under the race detector, and a race build of the embedded
			// NATS server takes minutes on a CI machine.
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, n), "../cmd/"+n)
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", n, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return path
}

// testGateway is a gateway served in process on a loopback port.
type testGateway struct {
	*gateway.Gateway
	URL  string // http://127.0.0.1:PORT
	WS   string // ws://127.0.0.1:PORT/ws
	Logs *syncBuffer
}

// historyOff reports whether MCPP_TEST_HISTORY=0 asks for every gateway a
// test starts to run with --history 0, unless the test chooses: .ci/run
// runs the integration tests once with history on (the default) and once
// with it off, which must behave as the gateway did before it had history.
func historyOff() bool { return os.Getenv("MCPP_TEST_HISTORY") == "0" }

// startGateway starts a gateway with the defaults changed by edit.
func startGateway(t *testing.T, edit func(*gateway.Config)) *testGateway {
	t.Helper()
	cfg := gateway.DefaultConfig()
	cfg.PingInterval = 0
	if historyOff() {
		cfg.History = 0
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if edit != nil {
		edit(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", logs)
		}
	})
	addr := ln.Addr().String()
	return &testGateway{Gateway: g, URL: "http://" + addr, WS: "ws://" + addr + "/ws", Logs: logs}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// msg is a received envelope, decoded.
type msg map[string]any

func (m msg) str(key string) string { s, _ := m[key].(string); return s }
func (m msg) kind() string          { return m.str("kind") }
func (m msg) payload() map[string]any {
	p, _ := m["payload"].(map[string]any)
	return p
}

// errCode is the code of a system/error, or "".
func (m msg) errCode() string {
	if m.kind() != "system/error" {
		return ""
	}
	s, _ := m.payload()["error"].(string)
	return s
}

func (m msg) contextID() string {
	switch c := m["context"].(type) {
	case string:
		return c
	case map[string]any:
		s, _ := c["id"].(string)
		return s
	}
	return ""
}

// client is one participant's WebSocket connection.
type client struct {
	t        *testing.T
	conn     *websocket.Conn
	ID       string
	Welcome  msg
	in       chan msg
	raw      chan []byte // every text message as received
	closed   chan struct{}
	closeMu  sync.Mutex
	closeErr error
}

// dialOpts are the query and headers of an upgrade.
type dialOpts struct {
	query  url.Values
	header http.Header
}

// dial joins pod as participant id (open mode) with extra query
// parameters ("k=v&k2=v2") and waits for the welcome.
func (g *testGateway) dial(t *testing.T, pod, id string, query string) *client {
	t.Helper()
	return startClient(t, dialPod(t, g.WS, pod, id, query), true)
}

// dialPod upgrades to pod as participant id (none when id is "") with
// extra query parameters ("k=v&k2=v2"), failing the test when the upgrade
// is refused. The client and the rawPeer (badinput_test.go) both join so.
func dialPod(t *testing.T, wsURL, pod, id, query string) *websocket.Conn {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	q.Set("pod", pod)
	if id != "" {
		q.Set("participant", id)
	}
	c, resp, err := dialRaw(wsURL, q, nil)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
		}
		t.Fatalf("dial %s as %s: %v %s", pod, id, err, body)
	}
	return c
}

func dialRaw(wsURL string, q url.Values, h http.Header) (*websocket.Conn, *http.Response, error) {
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

// startClient reads the connection in the background. With wantWelcome it
// waits for the welcome and checks that it comes first.
func startClient(t *testing.T, conn *websocket.Conn, wantWelcome bool) *client {
	t.Helper()
	c := &client{t: t, conn: conn, in: make(chan msg, 1<<16), raw: make(chan []byte, 1<<16), closed: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { _ = conn.CloseNow() })
	if wantWelcome {
		w := c.next(5 * time.Second)
		if w == nil || w.kind() != "system/welcome" {
			t.Fatalf("first message is not system/welcome: %v", w)
		}
		c.Welcome = w
		you, _ := w.payload()["you"].(map[string]any)
		c.ID, _ = you["id"].(string)
	}
	return c
}

func (c *client) readLoop() {
	defer close(c.closed)
	for {
		typ, data, err := c.conn.Read(context.Background())
		if err != nil {
			c.closeMu.Lock()
			c.closeErr = err
			c.closeMu.Unlock()
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		c.raw <- data
		for _, line := range strings.Split(string(data), "\n") {
			var m msg
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				c.t.Errorf("received a line that is not JSON: %q", line)
				continue
			}
			c.in <- m
		}
	}
}

// next returns the next envelope, or nil after d.
func (c *client) next(d time.Duration) msg {
	select {
	case m := <-c.in:
		return m
	case <-time.After(d):
		return nil
	}
}

// expect returns the next envelope, failing the test after 5s.
func (c *client) expect() msg {
	c.t.Helper()
	m := c.next(5 * time.Second)
	if m == nil {
		c.t.Fatalf("%s: no envelope within 5s", c.ID)
	}
	return m
}

// expectKind skips nothing: the next envelope must be of kind.
func (c *client) expectKind(kind string) msg {
	c.t.Helper()
	m := c.expect()
	if m.kind() != kind {
		c.t.Fatalf("%s: got %s (%v), want %s", c.ID, m.kind(), m, kind)
	}
	return m
}

// expectError waits for a system/error and checks its code.
func (c *client) expectError(code string) msg {
	c.t.Helper()
	m := c.expectKind("system/error")
	if m.errCode() != code {
		c.t.Fatalf("%s: got error %q (%v), want %q", c.ID, m.errCode(), m.payload(), code)
	}
	return m
}

// expectNothing checks that nothing arrives within d.
func (c *client) expectNothing(d time.Duration) {
	c.t.Helper()
	if m := c.next(d); m != nil {
		c.t.Fatalf("%s: got %v, want nothing", c.ID, m)
	}
}

// skipPresence returns the next envelope that is not presence.
func (c *client) nextNonPresence(d time.Duration) msg {
	for {
		m := c.next(d)
		if m == nil || m.kind() != "system/presence" {
			return m
		}
	}
}

// send writes one envelope given as a Go value.
func (c *client) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b)
}

// sendRaw writes one text message as is.
func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("%s: write: %v", c.ID, err)
	}
}

// waitClosed waits for the connection to end and returns its close code.
func (c *client) waitClosed(d time.Duration) websocket.StatusCode {
	c.t.Helper()
	select {
	case <-c.closed:
	case <-time.After(d):
		c.t.Fatalf("%s: connection still open after %v", c.ID, d)
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	return websocket.CloseStatus(c.closeErr)
}

// isOpen reports whether the connection is still open.
func (c *client) isOpen() bool {
	select {
	case <-c.closed:
		return false
	default:
		return true
	}
}

// refusal dials and expects an HTTP refusal; it returns the status and the
// JSON body's error code.
func refusal(t *testing.T, wsURL string, q url.Values, h http.Header) (int, string) {
	t.Helper()
	c, resp, err := dialRaw(wsURL, q, h)
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

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// gatewayProc is mcpp-gateway run as an operator runs it: the limit, cluster,
// history and CLI tests start it with startGatewayProc, and restart runs it
// again with the same environment and arguments.
type gatewayProc struct {
	t      *testing.T
	bin    string
	env    []string // the whole environment of the process
	args   []string
	cmd    *exec.Cmd   // the current run
	stderr *syncBuffer // of every run
	exited chan struct{}
	gw     *testGateway // URL and WS only
}

var gatewayAddrRE = regexp.MustCompile(`mcpp-gateway listening"? addr=(127\.0\.0\.1:\d+)`)

// envWithoutMCPP is the test's environment without any MCPP_ variable, so
// that the ones a test sets are the only ones.
func envWithoutMCPP() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPP_") {
			env = append(env, kv)
		}
	}
	return env
}

// startGatewayProc runs the gateway with env and args and waits until it
// listens. It is stopped with SIGTERM when the test ends.
func startGatewayProc(t *testing.T, env []string, args ...string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{t: t, bin: buildCommand(t, "mcpp-gateway"), args: args, stderr: &syncBuffer{}}
	p.env = envWithoutMCPP()
	if historyOff() {
		p.env = append(p.env, "MCPP_HISTORY=0") // the test's own env and flags win
	}
	p.env = append(p.env, env...)
	t.Cleanup(p.stop)
	p.start()
	return p
}

// start runs the gateway and waits until it listens.
func (p *gatewayProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	pipe, err := cmd.StderrPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.stderr, line)
			if m := gatewayAddrRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case a := <-addr:
		p.gw = &testGateway{URL: "http://" + a, WS: "ws://" + a + "/ws"}
	case <-exited:
		p.t.Fatalf("mcpp-gateway exited (%v) before listening:\n%s", cmd.ProcessState, p.stderr)
	case <-time.After(30 * time.Second):
		p.t.Fatalf("mcpp-gateway did not listen within 30s:\n%s", p.stderr)
	}
}

// stop ends the gateway with SIGTERM, as an operator restarting it does,
// and kills it when it has not exited within 20s.
func (p *gatewayProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// restart stops the gateway and runs it again with the same environment
// and arguments (on the same address when --listen names a port), waiting
// until its /healthz answers 200.
func (p *gatewayProc) restart() {
	p.t.Helper()
	p.stop()
	p.start()
	p.waitHealthy(30 * time.Second)
}

// waitHealthy waits until the gateway's /healthz answers 200 (a node of a
// cluster once the cluster's JetStream has formed and the history stream
// is open), failing the test when the gateway exits meanwhile.
func (p *gatewayProc) waitHealthy(within time.Duration) {
	p.t.Helper()
	eventually(p.t, within, "the gateway's /healthz", func() bool {
		select {
		case <-p.exited:
			p.t.Fatalf("mcpp-gateway exited before it was healthy:\n%s", p.stderr)
		default:
		}
		status, _, err := httpGet(p.gw.URL + "/healthz")
		return err == nil && status == http.StatusOK
	})
}
