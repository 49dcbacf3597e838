package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// TestFlowReplacement: a second connection with the same participant id
// closes the first with 4000; the new one gets its own welcome and keeps
// receiving; nobody else sees a presence change.
func TestFlowReplacement(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "flow-replace"
	old := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "")
	harness.PresenceOf(t, old.Expect(), "join", "bob")
	old.Send(map[string]any{"id": "from-old", "kind": "chat"})
	bob.ExpectEnvelope("chat", "from-old")

	repl := g.Dial(t, pod, "alice", "")
	if code := old.WaitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("replaced connection closed with %d, want 4000", code)
	}
	if repl.ID != "alice" {
		t.Fatalf("replacement joined as %q", repl.ID)
	}
	// Its welcome lists bob only, not alice herself.
	if got := harness.IDsOf(repl.Welcome.Payload()["participants"]); !harness.JSONEqual(got, []string{"bob"}) {
		t.Fatalf("replacement's welcome participants = %v, want [bob]", got)
	}
	// Once the old connection's handler is gone (the gauge counts
	// connections until they leave their pod), bob has still heard of no
	// leave or join: his next message is the replacement's envelope.
	harness.Eventually(t, 5*time.Second, "mcpp_connections = 2", func() bool {
		return harness.Metric(t, g.URL, "mcpp_connections") == 2
	})
	repl.Send(map[string]any{"id": "from-new", "kind": "chat"})
	if m := bob.Expect(); m.Kind() != "chat" || m.Str("id") != "from-new" || m.Str("from") != "alice" {
		t.Fatalf("bob got %v, want the replacement's envelope and no presence", m)
	}
	// The replacement keeps receiving.
	for i := 0; i < 5; i++ {
		bob.Send(map[string]any{"id": fmt.Sprintf("to-new-%d", i), "kind": "chat"})
	}
	for i := 0; i < 5; i++ {
		repl.ExpectEnvelope("chat", fmt.Sprintf("to-new-%d", i))
	}
	// A third participant's welcome lists alice once.
	carol := g.Dial(t, pod, "carol", "")
	got := harness.IDsOf(carol.Welcome.Payload()["participants"])
	if len(got) != 2 || strings.Count(strings.Join(got, ","), "alice") != 1 {
		t.Fatalf("carol's welcome participants = %v", got)
	}
	harness.PresenceOf(t, bob.Expect(), "join", "carol")
	harness.PresenceOf(t, repl.Expect(), "join", "carol")
	bob.ExpectNothing(30 * time.Millisecond)
}

// TestFlowOversize: an envelope over --max-message-bytes gets
// message_too_large and the connection stays open; one over twice the
// limit (and over the limit plus 64 KiB) closes the connection with 1009.
func TestFlowOversize(t *testing.T) {
	t.Parallel()
	const limit = 4096
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxMessageBytes = limit })
	const pod = "flow-oversize"
	alice := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "")
	harness.PresenceOf(t, alice.Expect(), "join", "bob")

	// Exactly the limit is accepted.
	alice.SendRaw(harness.EnvelopeOfSize(t, "at-limit", "chat", limit))
	bob.ExpectEnvelope("chat", "at-limit")
	// One byte over, twice the limit, and just under limit+64KiB: refused,
	// connection open.
	for _, n := range []int{limit + 1, 2 * limit, limit + 64<<10 - 1} {
		id := fmt.Sprintf("big-%d", n)
		alice.SendRaw(harness.EnvelopeOfSize(t, id, "chat", n))
		e := alice.ExpectError("message_too_large")
		if e.Str("correlation_id") != id || e.Payload()["retryable"] != false {
			t.Fatalf("%d bytes: %v", n, e)
		}
	}
	alice.Send(map[string]any{"id": "small", "kind": "chat"})
	if m := bob.NextOf(); m.Str("id") != "small" {
		t.Fatalf("bob got %v, want only the small envelope after the refused ones", m.Str("id"))
	}
	if v := harness.Metric(t, g.URL, `mcpp_errors_total{code="message_too_large"}`); v != 3 {
		t.Fatalf("message_too_large count %v, want 3", v)
	}

	// Far over: closed with 1009. (The write may fail once the gateway
	// has closed; what counts is the close code.)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = alice.Conn.Write(ctx, harness.EnvelopeOfSize(t, "huge", "chat", limit+64<<10+4096))
	if code := alice.WaitClosed(5 * time.Second); code != wire.CloseMessageTooBig {
		t.Fatalf("closed with %d, want 1009", code)
	}
	harness.PresenceOf(t, bob.Expect(), "leave", "alice")
	// bob is unaffected and the pod still works.
	carol := g.Dial(t, pod, "carol", "")
	harness.PresenceOf(t, bob.Expect(), "join", "carol")
	carol.Send(map[string]any{"id": "after", "kind": "chat"})
	bob.ExpectEnvelope("chat", "after")
}

// TestFlowOrder2000: 2,000 envelopes from one sender arrive complete and
// in order, one per message and also batched (batch=1: several per
// message, one per line).
func TestFlowOrder2000(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 4096
		c.WriteTimeout = time.Minute
	})
	const pod = "flow-order"
	const n = 2000
	sender := g.Dial(t, pod, "sender", "")
	plain := g.Dial(t, pod, "plain", "")
	// The batching receiver reads nothing until all has been sent, so
	// that its queue fills up and batches form.
	bconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"batcher"}, "batch": {"1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	harness.PresenceOf(t, sender.Expect(), "join", "plain")
	harness.PresenceOf(t, sender.Expect(), "join", "batcher")
	harness.PresenceOf(t, plain.Expect(), "join", "batcher")

	filler := harness.Pad(2000)
	for i := 0; i < n; i++ {
		sender.Send(map[string]any{"id": fmt.Sprintf("o-%d", i), "kind": "chat", "payload": map[string]any{"seq": i, "pad": filler}})
	}
	for i := 0; i < n; i++ {
		m := plain.NextOf()
		if harness.SeqOf(m) != i || m.Str("id") != fmt.Sprintf("o-%d", i) {
			t.Fatalf("plain: envelope %d is %v (seq %d)", i, m.Str("id"), harness.SeqOf(m))
		}
	}
	plain.ExpectNothing(20 * time.Millisecond)
	harness.Eventually(t, 5*time.Second, "all envelopes accepted", func() bool {
		return harness.Metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})

	batcher := harness.StartClient(t, bconn, true)
	if f, _ := batcher.Welcome.Payload()["filter"].(map[string]any); f["batch"] != true {
		t.Fatalf("batcher's filter %v", f)
	}
	for i := 0; i < n; i++ {
		m := batcher.NextOf()
		if harness.SeqOf(m) != i {
			t.Fatalf("batcher: envelope %d is %v (seq %d)", i, m.Str("id"), harness.SeqOf(m))
		}
	}
	batcher.ExpectNothing(20 * time.Millisecond)
	// Count the messages and their lines: every line an envelope, and
	// some messages held several.
	messages, lines, multi := 0, 0, 0
	for len(batcher.Raw) > 0 {
		b := <-batcher.Raw
		k := strings.Count(string(b), "\n") + 1
		messages++
		lines += k
		if k > 1 {
			multi++
		}
	}
	if lines != n+1 { // the welcome too
		t.Fatalf("batched lines %d, want %d", lines, n+1)
	}
	if multi == 0 {
		t.Fatalf("batch=1: all %d envelopes came one per message", n)
	}
	t.Logf("batch=1: %d envelopes in %d messages", lines, messages)
	// The plain receiver got one envelope per message.
	for len(plain.Raw) > 0 {
		if b := <-plain.Raw; strings.Contains(string(b), "\n") {
			t.Fatalf("batch=0 receiver got a multi-line message")
		}
	}
}

// TestFlowSlowConsumer: a participant that does not read is closed with
// 4008 once its send queue is full, while a participant that reads gets
// every envelope; the metric counts the disconnect.
func TestFlowSlowConsumer(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 16
		c.WriteTimeout = time.Minute // the cut must come from the queue, not a write timeout
	})
	const pod = "flow-slow"
	sender := g.Dial(t, pod, "sender", "")
	fast := g.Dial(t, pod, "fast", "")
	sconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"slow"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// slow never reads (until it has been cut). The sender sends in small
	// windows that the fast reader acknowledges by receiving them, so
	// that only the slow one can fall behind. Envelopes are large, so
	// that the TCP buffers to slow fill up quickly.
	filler := harness.Pad(32 << 10)
	const window, maxSent = 4, 4000
	sent := 0
	for harness.Metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`) < 1 {
		if sent >= maxSent {
			t.Fatalf("slow consumer not cut after %d envelopes of 32 KiB", sent)
		}
		for i := 0; i < window; i++ {
			sender.Send(map[string]any{"id": fmt.Sprintf("s-%d", sent), "kind": "chat", "payload": map[string]any{"seq": sent, "pad": filler}})
			sent++
		}
		for i := sent - window; i < sent; i++ {
			if m := fast.NextOf(); harness.SeqOf(m) != i {
				t.Fatalf("fast reader: envelope %d is %v", i, m.Str("id"))
			}
		}
	}
	// Now slow reads: what was written before the cut, then the close.
	slow := harness.StartClient(t, sconn, true)
	if code := slow.WaitClosed(10 * time.Second); code != 4008 {
		t.Fatalf("slow consumer closed with %d, want 4008", code)
	}
	// The fast reader is still there and still gets everything.
	for i := 0; i < 10; i++ {
		sender.Send(map[string]any{"id": fmt.Sprintf("s-%d", sent), "kind": "chat", "payload": map[string]any{"seq": sent}})
		sent++
	}
	for i := sent - 10; i < sent; i++ {
		if m := fast.NextOf(); harness.SeqOf(m) != i {
			t.Fatalf("fast reader after the cut: envelope %d is %v", i, m.Str("id"))
		}
	}
	if !fast.IsOpen() || !sender.IsOpen() {
		t.Fatal("a fast participant was closed")
	}
	if v := harness.Metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`); v != 1 {
		t.Fatalf("mcpp_cuts_total{reason=\"slow_consumer\"} = %v, want 1", v)
	}
	if v := harness.Metric(t, g.URL, `mcpp_pod_slow_consumers_total{pod="`+pod+`"}`); v != 1 {
		t.Fatalf("mcpp_pod_slow_consumers_total of the pod = %v, want 1", v)
	}
	t.Logf("slow consumer cut after %d envelopes of 32 KiB", sent-10)
}
