package client

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
)

// startGateway serves a real gateway on a loopback port, with the
// defaults changed by edit, and returns its /ws URL.
func startGateway(t *testing.T, edit func(*gateway.Config)) string {
	t.Helper()
	url, _ := serveGateway(t, edit)
	return url
}

// serveGateway is startGateway that also returns the gateway.
func serveGateway(t *testing.T, edit func(*gateway.Config)) (string, *gateway.Gateway) {
	t.Helper()
	cfg := gateway.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.PingInterval = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
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
	})
	return "ws://" + ln.Addr().String() + "/ws", g
}

// dial joins a pod and closes the client when the test ends.
func dial(t *testing.T, url string, opts Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("Dial %s as %s: %v", opts.Pod, opts.Participant, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// next returns the next event that is not presence, failing the test
// after 5 s.
func next(t *testing.T, c *Client) Event {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: Next: %v", c.ID(), err)
		}
		if _, ok := ev.(*Presence); !ok {
			return ev
		}
	}
}

// expect returns the next event that is not presence, which must be a T.
func expect[T Event](t *testing.T, c *Client) T {
	t.Helper()
	ev := next(t, c)
	v, ok := ev.(T)
	if !ok {
		t.Fatalf("%s: got %T %+v, want %T", c.ID(), ev, ev, v)
	}
	return v
}

// proxy is a TCP proxy between clients and a gateway, whose connections
// a test can cut while the gateway stays up.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	refuse bool
}

// newProxy forwards to the gateway at wsURL and returns the proxy and
// its own ws:// URL.
func newProxy(t *testing.T, wsURL string) (*proxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := wsURL[len("ws://") : len(wsURL)-len("/ws")]
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p, "ws://" + ln.Addr().String() + "/ws"
}

func (p *proxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = down.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, down)
		go pipe(down, up)
	}
}

// cut closes every connection through the proxy, both ways.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// setRefuse makes the proxy close new connections at once (or not).
func (p *proxy) setRefuse(b bool) {
	p.mu.Lock()
	p.refuse = b
	p.mu.Unlock()
}

// eventually polls cond until it holds, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connected reports whether c has a live connection.
func (c *Client) connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil
}
