package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
)

// TestFlowReplacement: a second connection with the same participant id
// closes the first with 4000; the new one gets its own welcome and keeps
// receiving; nobody else sees a presence change.
func TestFlowReplacement(t *testing.T) {
	t.Parallel()
	g := startGateway(t, nil)
	const pod = "flow-replace"
	old := g.dial(t, pod, "alice", "")
	bob := g.dial(t, pod, "bob", "")
	presenceOf(t, old.expect(), "join", "bob")
	old.send(map[string]any{"id": "from-old", "kind": "chat"})
	bob.expectEnvelope("chat", "from-old")

	repl := g.dial(t, pod, "alice", "")
	if code := old.waitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("replaced connection closed with %d, want 4000", code)
	}
	if repl.ID != "alice" {
		t.Fatalf("replacement joined as %q", repl.ID)
	}
	// Its welcome lists bob only, not alice herself.
	if got := idsOf(repl.Welcome.payload()["participants"]); !jsonEqual(got, []string{"bob"}) {
		t.Fatalf("replacement's welcome participants = %v, want [bob]", got)
	}
	// Once the old connection's handler is gone (the gauge counts
	// connections until they leave their pod), bob has still heard of no
	// leave or join: his next message is the replacement's envelope.
	eventually(t, 5*time.Second, "mcpp_connections = 2", func() bool {
		return metric(t, g.URL, "mcpp_connections") == 2
	})
	repl.send(map[string]any{"id": "from-new", "kind": "chat"})
	if m := bob.expect(); m.kind() != "chat" || m.str("id") != "from-new" || m.str("from") != "alice" {
		t.Fatalf("bob got %v, want the replacement's envelope and no presence", m)
	}
	// The replacement keeps receiving.
	for i := 0; i < 5; i++ {
		bob.send(map[string]any{"id": fmt.Sprintf("to-new-%d", i), "kind": "chat"})
	}
	for i := 0; i < 5; i++ {
		repl.expectEnvelope("chat", fmt.Sprintf("to-new-%d", i))
	}
	// A third participant's welcome lists alice once.
	carol := g.dial(t, pod, "carol", "")
	got := idsOf(carol.Welcome.payload()["participants"])
	if len(got) != 2 || strings.Count(strings.Join(got, ","), "alice") != 1 {
		t.Fatalf("carol's welcome participants = %v", got)
	}
	presenceOf(t, bob.expect(), "join", "carol")
	presenceOf(t, repl.expect(), "join", "carol")
	bob.expectNothing(30 * time.Millisecond)
}

// TestFlowOversize: an envelope over --max-message-bytes gets
// message_too_large and the connection stays open; one over twice the
// limit (and over the limit plus 64 KiB) closes the connection with 1009.
func TestFlowOversize(t *testing.T) {
	t.Parallel()
	const limit = 4096
	g := startGateway(t, func(c *gateway.Config) { c.MaxMessageBytes = limit })
	const pod = "flow-oversize"
	alice := g.dial(t, pod, "alice", "")
	bob := g.dial(t, pod, "bob", "")
	presenceOf(t, alice.expect(), "join", "bob")

	// Exactly the limit is accepted.
	alice.sendRaw(envelopeOfSize(t, "at-limit", "chat", limit))
	bob.expectEnvelope("chat", "at-limit")
	// One byte over, twice the limit, and just under limit+64KiB: refused,
	// connection open.
	for _, n := range []int{limit + 1, 2 * limit, limit + 64<<10 - 1} {
		id := fmt.Sprintf("big-%d", n)
		alice.sendRaw(envelopeOfSize(t, id, "chat", n))
		e := alice.expectError("message_too_large")
		if e.str("correlation_id") != id || e.payload()["retryable"] != false {
			t.Fatalf("%d bytes: %v", n, e)
		}
	}
	alice.send(map[string]any{"id": "small", "kind": "chat"})
	if m := bob.nextOf(); m.str("id") != "small" {
		t.Fatalf("bob got %v, want only the small envelope after the refused ones", m.str("id"))
	}
	if v := metric(t, g.URL, `mcpp_errors_total{code="message_too_large"}`); v != 3 {
		t.Fatalf("message_too_large count %v, want 3", v)
	}

	// Far over: closed with 1009. (The write may fail once the gateway
	// has closed; what counts is the close code.)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = alice.conn.Write(ctx, websocket.MessageText, envelopeOfSize(t, "huge", "chat", limit+64<<10+4096))
	if code := alice.waitClosed(5 * time.Second); code != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %d, want 1009", code)
	}
	presenceOf(t, bob.expect(), "leave", "alice")
	// bob is unaffected and the pod still works.
	carol := g.dial(t, pod, "carol", "")
	presenceOf(t, bob.expect(), "join", "carol")
	carol.send(map[string]any{"id": "after", "kind": "chat"})
	bob.expectEnvelope("chat", "after")
}

// TestFlowOrder2000: 2,000 envelopes from one sender arrive complete and
// in order, one per message and also batched (batch=1: several per
// message, one per line).
func TestFlowOrder2000(t *testing.T) {
	t.Parallel()
	g := startGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 4096
		c.WriteTimeout = time.Minute
	})
	const pod = "flow-order"
	const n = 2000
	sender := g.dial(t, pod, "sender", "")
	plain := g.dial(t, pod, "plain", "")
	// The batching receiver reads nothing until all has been sent, so
	// that its queue fills up and batches form.
	bconn, _, err := dialRaw(g.WS, url.Values{"pod": {pod}, "participant": {"batcher"}, "batch": {"1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	presenceOf(t, sender.expect(), "join", "plain")
	presenceOf(t, sender.expect(), "join", "batcher")
	presenceOf(t, plain.expect(), "join", "batcher")

	filler := pad(2000)
	for i := 0; i < n; i++ {
		sender.send(map[string]any{"id": fmt.Sprintf("o-%d", i), "kind": "chat", "payload": map[string]any{"seq": i, "pad": filler}})
	}
	for i := 0; i < n; i++ {
		m := plain.nextOf()
		if seqOf(m) != i || m.str("id") != fmt.Sprintf("o-%d", i) {
			t.Fatalf("plain: envelope %d is %v (seq %d)", i, m.str("id"), seqOf(m))
		}
	}
	plain.expectNothing(20 * time.Millisecond)
	eventually(t, 5*time.Second, "all envelopes accepted", func() bool {
		return metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})

	batcher := startClient(t, bconn, true)
	if f, _ := batcher.Welcome.payload()["filter"].(map[string]any); f["batch"] != true {
		t.Fatalf("batcher's filter %v", f)
	}
	for i := 0; i < n; i++ {
		m := batcher.nextOf()
		if seqOf(m) != i {
			t.Fatalf("batcher: envelope %d is %v (seq %d)", i, m.str("id"), seqOf(m))
		}
	}
	batcher.expectNothing(20 * time.Millisecond)
	// Count the messages and their lines: every line an envelope, and
	// some messages held several.
	messages, lines, multi := 0, 0, 0
	for len(batcher.raw) > 0 {
		b := <-batcher.raw
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
	for len(plain.raw) > 0 {
		if b := <-plain.raw; strings.Contains(string(b), "\n") {
			t.Fatalf("batch=0 receiver got a multi-line message")
		}
	}
}

// TestFlowSlowConsumer: a participant that does not read is closed with
// 4008 once its send queue is full, while a participant that reads gets
// every envelope; the metric counts the disconnect.
func TestFlowSlowConsumer(t *testing.T) {
	t.Parallel()
	g := startGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 16
		c.WriteTimeout = time.Minute // the cut must come from the queue, not a write timeout
	})
	const pod = "flow-slow"
	sender := g.dial(t, pod, "sender", "")
	fast := g.dial(t, pod, "fast", "")
	sconn, _, err := dialRaw(g.WS, url.Values{"pod": {pod}, "participant": {"slow"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// slow never reads (until it has been cut). The sender sends in small
	// windows that the fast reader acknowledges by receiving them, so
	// that only the slow one can fall behind. Envelopes are large, so
	// that the TCP buffers to slow fill up quickly.
	filler := pad(32 << 10)
	const window, maxSent = 4, 4000
	sent := 0
	for metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`) < 1 {
		if sent >= maxSent {
			t.Fatalf("slow consumer not cut after %d envelopes of 32 KiB", sent)
		}
		for i := 0; i < window; i++ {
			sender.send(map[string]any{"id": fmt.Sprintf("s-%d", sent), "kind": "chat", "payload": map[string]any{"seq": sent, "pad": filler}})
			sent++
		}
		for i := sent - window; i < sent; i++ {
			if m := fast.nextOf(); seqOf(m) != i {
				t.Fatalf("fast reader: envelope %d is %v", i, m.str("id"))
			}
		}
	}
	// Now slow reads: what was written before the cut, then the close.
	slow := startClient(t, sconn, true)
	if code := slow.waitClosed(10 * time.Second); code != 4008 {
		t.Fatalf("slow consumer closed with %d, want 4008", code)
	}
	// The fast reader is still there and still gets everything.
	for i := 0; i < 10; i++ {
		sender.send(map[string]any{"id": fmt.Sprintf("s-%d", sent), "kind": "chat", "payload": map[string]any{"seq": sent}})
		sent++
	}
	for i := sent - 10; i < sent; i++ {
		if m := fast.nextOf(); seqOf(m) != i {
			t.Fatalf("fast reader after the cut: envelope %d is %v", i, m.str("id"))
		}
	}
	if !fast.isOpen() || !sender.isOpen() {
		t.Fatal("a fast participant was closed")
	}
	if v := metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`); v != 1 {
		t.Fatalf("mcpp_cuts_total{reason=\"slow_consumer\"} = %v, want 1", v)
	}
	t.Logf("slow consumer cut after %d envelopes of 32 KiB", sent-10)
}
