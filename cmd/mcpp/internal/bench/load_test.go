package bench

import (
	"context"
	"testing"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway/gatewaytest"
)

func serveGateway(t *testing.T) string {
	t.Helper()
	cfg := gatewaytest.Config()
	cfg.Rate, cfg.Burst = 1e9, 1_000_000_000
	cfg.ContextRate, cfg.ContextBurst = 1e9, 1_000_000_000
	cfg.ContextCreateRate, cfg.ContextCreateBurst = 1e9, 1_000_000_000
	return gatewaytest.Start(t, cfg).WS
}

// TestRunGateway drives an in-process gateway as `mcpp bench` drives its
// process, batched and not, with half the subscribers on contexts=none:
// what matters here is that envelopes, deliveries, WebSocket messages and
// latencies are counted, not how fast it went.
func TestRunGateway(t *testing.T) {
	ws := serveGateway(t)
	for _, batch := range []bool{false, true} {
		l := Load{URL: ws, Pod: "bench", Subscribers: 3, Publishers: 2, Size: 256,
			Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond, Window: 16,
			Filters: true, Batch: batch}
		if batch {
			l.Pod = "bench-batch"
		}
		r, err := l.run(context.Background())
		if err != nil {
			t.Fatalf("batch %v: %v", batch, err)
		}
		t.Logf("batch %v: %d envelopes, %d deliveries, %d messages", batch, r.Envelopes, r.Deliveries, r.WSMessages)
		if r.Envelopes == 0 || r.Deliveries < r.Envelopes || r.WSMessages == 0 || r.Latency.quantile(0.5) == 0 {
			t.Fatalf("batch %v: nothing measured: %+v", batch, r)
		}
		// Subscribers 0 and 2 admit every envelope, subscriber 1 (contexts=none)
		// the half outside a context: 2.5 deliveries an envelope, give or take
		// the window at either end.
		if r.Envelopes >= 200 && (r.Deliveries < 2*r.Envelopes || r.Deliveries > 3*r.Envelopes) {
			t.Errorf("batch %v: %d deliveries of %d envelopes, want about 2.5 each", batch, r.Deliveries, r.Envelopes)
		}
		// Unbatched, a WebSocket message holds one envelope (or presence);
		// batched, it may hold several.
		if !batch && r.Deliveries > r.WSMessages {
			t.Errorf("unbatched: %d deliveries in %d WebSocket messages", r.Deliveries, r.WSMessages)
		}
	}
}

// TestReadAgainSeesTheCloseCode has a reader replaced by another that joins
// with its participant id: reading again, the first finds its connection
// closed with 4000, and the second, which the gateway leaves alone, still
// open.
func TestReadAgainSeesTheCloseCode(t *testing.T) {
	l := Load{URL: serveGateway(t)}
	ctx := context.Background()
	join := func() *client.Conn {
		c, err := l.dial(ctx, "replace", "reader")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		if _, err := c.Read(ctx, nil); err != nil {
			t.Fatalf("welcome: %v", err)
		}
		return c
	}
	first := join()
	second := join()
	fates := readAgain(ctx, []*stalledPod{{reader: first}}, 5*time.Second)
	if fates[0].how != "closed 4000" {
		t.Errorf("the replaced reader: %q, want closed 4000", fates[0].how)
	}
	fates = readAgain(ctx, []*stalledPod{{reader: second}}, 300*time.Millisecond)
	if fates[0].how != "still open" {
		t.Errorf("the other: %q, want still open", fates[0].how)
	}
}
