package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/internal/wait"
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
	cfg := gatewaytest.Config()
	if edit != nil {
		edit(&cfg)
	}
	s := gatewaytest.Start(t, cfg)
	return s.WS, s.Gateway
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

// eventually polls cond until it holds, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, d, what, cond)
}

// connected reports whether c has a live connection.
func (c *Client) connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil
}

// newProxy forwards to the gateway at wsURL and returns the proxy and
// its own ws:// URL.
func newProxy(t *testing.T, wsURL string) (*gatewaytest.Proxy, string) {
	t.Helper()
	p := gatewaytest.StartProxy(t, strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/ws"))
	return p, p.WS
}
