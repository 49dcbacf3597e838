package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The limits an operator tunes (docs/protocol.md sections 5 and 7). Rate
// tests never assert how fast anything is: the number of envelopes a bucket
// may pass is computed from the time measured around the sending, so a slow
// or busy machine only widens the allowance.

// TestRateLimitExactCounts: 40 envelopes written back to back at rate 10,
// burst 10: the burst (plus what refilled meanwhile) is relayed, every
// other one is refused with rate_limited, and nothing is lost.
func TestRateLimitExactCounts(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Rate = 10; c.Burst = 10 })
	const pod = "limits-rate-exact"
	recv := g.Dial(t, pod, "receiver", "")
	send := g.Dial(t, pod, "sender", "")
	recv.ExpectPresence("join", "sender")

	const n = 40
	var ids []string
	var msgs [][]byte
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("flood-%02d", i)
		ids = append(ids, id)
		msgs = append(msgs, harness.EnvelopeJSON(t, id, "chat", nil))
	}
	start := harness.SendAll(send, msgs)
	r := harness.Account(t, send, recv, ids)
	elapsed := r.Done.Sub(start)
	allowance := harness.Allowance(10, 10, elapsed)
	t.Logf("%d relayed, %d refused; %v from the first write to the last answer (allowance %d)", len(r.Relayed), len(r.Refused), elapsed, allowance)

	if len(r.Relayed)+len(r.Refused) != n {
		t.Fatalf("relayed %d + refused %d != %d", len(r.Relayed), len(r.Refused), n)
	}
	if len(r.Relayed) < 10 || len(r.Relayed) > allowance {
		t.Fatalf("%d relayed, want between the burst (10) and %d (the burst plus 10/s over %v)", len(r.Relayed), allowance, elapsed)
	}
	// The burst goes to the first ten, in the order they were sent.
	if !slices.Equal(r.Relayed[:10], ids[:10]) {
		t.Fatalf("the first relayed are %v, want %v", r.Relayed[:10], ids[:10])
	}
	if !slices.IsSorted(r.Relayed) {
		t.Fatalf("relayed out of the sender's order: %v", r.Relayed)
	}
	var maxRetry float64
	for _, m := range r.Refused {
		maxRetry = max(maxRetry, harness.CheckRateRefusal(t, m, "rate_limited", 100))
	}
	send.ExpectQuiet(200 * time.Millisecond)
	recv.ExpectQuiet(50 * time.Millisecond)

	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="rate_limited"}`); got != float64(len(r.Refused)) {
		t.Fatalf(`mcpp_errors_total{code="rate_limited"} = %v, want %d`, got, len(r.Refused))
	}
	if got := harness.MetricOrZero(t, g.URL, "mcpp_envelopes_in_total"); got != float64(len(r.Relayed)) {
		t.Fatalf("mcpp_envelopes_in_total = %v, want %d", got, len(r.Relayed))
	}

	// Waiting as long as told is enough.
	time.Sleep(time.Duration(maxRetry) * time.Millisecond)
	send.SendRaw(harness.EnvelopeJSON(t, "after-wait", "chat", nil))
	if m := recv.ExpectOther("chat"); m.Str("id") != "after-wait" {
		t.Fatalf("got %v after waiting retry_after_ms, want after-wait", m)
	}
}

// TestRateLimitCountsEveryMessage: every message takes a token of the
// sender's bucket, refused ones and gateway requests too, and the refusal
// reported is the first of the table of docs/protocol.md section 5. Rates are
// slow (100 s a token) so that nothing refills during the test.
func TestRateLimitCountsEveryMessage(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 0.01, 3
		c.ContextRate, c.ContextBurst = 0.01, 1
		c.MaxContextsPerParticipant = 1
		c.DefaultCapabilities = "chat"
	})
	const pod = "limits-rate-order"
	recv := g.Dial(t, pod, "receiver", "")
	send := g.Dial(t, pod, "sender", "")
	recv.ExpectPresence("join", "sender")
	start := time.Now()

	send.SendRaw(harness.EnvelopeJSON(t, "e1", "chat", map[string]any{"id": "c1"})) // token 1
	if m := recv.ExpectOther("chat"); m.Str("id") != "e1" {
		t.Fatalf("got %v, want e1", m)
	}
	send.SendRaw([]byte("{")) // token 2: a refused message takes one
	send.ExpectErr("invalid_json")
	send.SendRaw(harness.EnvelopeJSON(t, "e3", "chat", map[string]any{"id": "c1"})) // token 3
	harness.CheckRateRefusal(t, send.ExpectErr("context_rate_limited"), "context_rate_limited", 100_000)

	// The bucket is empty; earlier rules in the table still come first.
	send.SendRaw([]byte("{"))
	send.ExpectErr("invalid_json")
	send.SendRaw(harness.EnvelopeJSON(t, "e5", "mcp/request:tools/call", nil))
	send.ExpectErr("capability_violation")
	send.SendRaw(harness.EnvelopeJSON(t, "e6", "chat", map[string]any{"id": "c2"}))
	lim := send.ExpectErr("context_limit_exceeded")
	if r, _ := lim.Payload()["retryable"].(bool); !r {
		t.Fatalf("context_limit_exceeded is not retryable: %v", lim.Payload())
	}
	// rate_limited comes before context_rate_limited.
	send.SendRaw(harness.EnvelopeJSON(t, "e7", "chat", map[string]any{"id": "c1"}))
	harness.CheckRateRefusal(t, send.ExpectErr("rate_limited"), "rate_limited", 100_000)
	send.SendRaw(harness.EnvelopeJSON(t, "e8", "chat", nil))
	m := send.ExpectErr("rate_limited")
	harness.CheckRateRefusal(t, m, "rate_limited", 100_000)
	if m.Str("correlation_id") != "e8" {
		t.Fatalf("rate_limited correlation_id %q, want e8", m.Str("correlation_id"))
	}
	// Requests to the gateway count against the rate too.
	send.Send(map[string]any{"id": "q1", "kind": "gateway/contexts"})
	harness.CheckRateRefusal(t, send.ExpectErr("rate_limited"), "rate_limited", 100_000)

	if elapsed := time.Since(start); elapsed >= 90*time.Second {
		t.Fatalf("the test took %v: a token may have refilled, so its refusals prove nothing", elapsed)
	}
	recv.ExpectQuiet(200 * time.Millisecond)
	send.ExpectQuiet(50 * time.Millisecond)
	for code, want := range map[string]float64{"invalid_json": 2, "context_rate_limited": 1, "capability_violation": 1,
		"context_limit_exceeded": 1, "rate_limited": 3} {
		if got := harness.MetricOrZero(t, g.URL, fmt.Sprintf("mcpp_errors_total{code=%q}", code)); got != want {
			t.Errorf("mcpp_errors_total{code=%q} = %v, want %v", code, got, want)
		}
	}
}

// TestContextRateIsolated: a context over --context-rate refuses with
// context_rate_limited, whoever sends in it, while the same sender's other
// contexts and main-context envelopes all pass.
func TestContextRateIsolated(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1000, 1000
		c.ContextRate, c.ContextBurst = 0.2, 5 // a token every 5 s
		c.ContextCreateRate, c.ContextCreateBurst = 100, 100
	})
	const pod = "limits-context-rate"
	recv := g.Dial(t, pod, "receiver", "")
	send := g.Dial(t, pod, "sender", "")
	recv.ExpectPresence("join", "sender")

	var ids, hot, cool, main []string
	var msgs [][]byte
	add := func(id string, ctx any, list *[]string) {
		ids = append(ids, id)
		*list = append(*list, id)
		msgs = append(msgs, harness.EnvelopeJSON(t, id, "chat", ctx))
	}
	for i := 0; i < 12; i++ {
		add(fmt.Sprintf("hot-%02d", i), map[string]any{"id": "hot", "type": "reasoning"}, &hot)
		if i < 4 {
			add(fmt.Sprintf("cool-%02d", i), map[string]any{"id": "cool", "type": "reasoning"}, &cool)
		}
		add(fmt.Sprintf("main-%02d", i), nil, &main)
	}
	start := harness.SendAll(send, msgs)
	r := harness.Account(t, send, recv, ids)
	elapsed := r.Done.Sub(start)
	relayed := map[string]bool{}
	for _, id := range r.Relayed {
		relayed[id] = true
	}
	if got := harness.CountIn(main, relayed); got != len(main) {
		t.Fatalf("%d of %d main-context envelopes relayed: a busy context slowed the sender's others", got, len(main))
	}
	if got := harness.CountIn(cool, relayed); got != len(cool) {
		t.Fatalf("%d of %d envelopes of another context relayed", got, len(cool))
	}
	hotRelayed := harness.CountIn(hot, relayed)
	allowance := harness.Allowance(5, 0.2, elapsed)
	if hotRelayed < 5 || hotRelayed > allowance || harness.CountIn(hot[:5], relayed) != 5 {
		t.Fatalf("%d envelopes of the busy context relayed, want the first 5 and at most %d", hotRelayed, allowance)
	}
	for _, id := range hot {
		if !relayed[id] {
			harness.CheckRateRefusal(t, r.Refused[id], "context_rate_limited", 5000)
		}
	}
	if len(r.Refused) != len(hot)-hotRelayed {
		t.Fatalf("%d refusals, want %d (the busy context's excess only)", len(r.Refused), len(hot)-hotRelayed)
	}

	// The context's bucket is shared by everyone who sends in it.
	other := g.Dial(t, pod, "other", "")
	recv.ExpectPresence("join", "other")
	send.ExpectPresence("join", "other")
	harness.SendAll(other, [][]byte{
		harness.EnvelopeJSON(t, "other-hot", "chat", map[string]any{"id": "hot"}),
		harness.EnvelopeJSON(t, "other-main", "chat", nil),
	})
	r2 := harness.Account(t, other, recv, []string{"other-hot", "other-main"})
	left := 5 + 0.2*time.Since(start).Seconds() - float64(hotRelayed) // tokens the busy context may hold by now
	if _, ok := r2.Refused["other-main"]; ok {
		t.Fatalf("other's main-context envelope refused: %v", r2.Refused["other-main"])
	}
	if m, ok := r2.Refused["other-hot"]; ok {
		harness.CheckRateRefusal(t, m, "context_rate_limited", 5000)
	} else if left < 1 {
		t.Fatalf("another sender's envelope passed the busy context (at most %.2f tokens in it)", left)
	}
	nRefused := len(r.Refused) + len(r2.Refused)
	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="context_rate_limited"}`); got != float64(nRefused) {
		t.Fatalf(`mcpp_errors_total{code="context_rate_limited"} = %v, want %d`, got, nRefused)
	}
	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="rate_limited"}`); got != 0 {
		t.Fatalf(`mcpp_errors_total{code="rate_limited"} = %v: a context limit counted as the sender's`, got)
	}
}

// TestContextCreateRate: opening contexts faster than
// --context-create-rate / --context-create-burst is context_rate_limited;
// the refused contexts are not opened, and sending in the open ones, in the
// main context and by others still works.
func TestContextCreateRate(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1000, 1000
		c.ContextRate, c.ContextBurst = 1000, 1000
		c.ContextCreateRate, c.ContextCreateBurst = 0.2, 3 // a context every 5 s
	})
	const pod = "limits-create-rate"
	recv := g.Dial(t, pod, "receiver", "")
	send := g.Dial(t, pod, "sender", "")
	recv.ExpectPresence("join", "sender")

	var opens, ids []string
	var msgs [][]byte
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("open-%d", i)
		opens = append(opens, id)
		msgs = append(msgs, harness.EnvelopeJSON(t, id, "chat", map[string]any{"id": fmt.Sprintf("c%d", i)}))
	}
	ids = append(ids, opens...)
	var follow []string
	for i := 0; i < 15; i++ {
		id := fmt.Sprintf("in-%02d", i)
		follow = append(follow, id)
		msgs = append(msgs, harness.EnvelopeJSON(t, id, "chat", map[string]any{"id": fmt.Sprintf("c%d", i%3)}))
		id = fmt.Sprintf("main-%02d", i)
		follow = append(follow, id)
		msgs = append(msgs, harness.EnvelopeJSON(t, id, "chat", nil))
	}
	ids = append(ids, follow...)
	start := harness.SendAll(send, msgs)
	r := harness.Account(t, send, recv, ids)
	relayed := map[string]bool{}
	for _, id := range r.Relayed {
		relayed[id] = true
	}
	opened := harness.CountIn(opens, relayed)
	allowance := harness.Allowance(3, 0.2, r.Done.Sub(start))
	if harness.CountIn(opens[:3], relayed) != 3 || opened > allowance {
		t.Fatalf("%d contexts opened, want the first 3 and at most %d", opened, allowance)
	}
	want := []string{}
	for i, id := range opens {
		if relayed[id] {
			want = append(want, fmt.Sprintf("c%d", i))
		} else {
			harness.CheckRateRefusal(t, r.Refused[id], "context_rate_limited", 5000)
		}
	}
	if got := harness.CountIn(follow, relayed); got != len(follow) {
		t.Fatalf("%d of %d envelopes in open contexts and the main context relayed", got, len(follow))
	}

	// The refused ones were not opened.
	got := harness.ContextIDs(t, send, "all")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("contexts %v, want %v", got, want)
	}
	// The create bucket is the sender's own.
	recv.SendRaw(harness.EnvelopeJSON(t, "recv-open", "chat", map[string]any{"id": "recv-ctx"}))
	if m := send.ExpectOther("chat"); m.Str("id") != "recv-open" {
		t.Fatalf("got %v, want another participant's new context", m)
	}
	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="context_rate_limited"}`); got != float64(len(r.Refused)) {
		t.Fatalf(`mcpp_errors_total{code="context_rate_limited"} = %v, want %d`, got, len(r.Refused))
	}
}

// TestMaxContextsPerParticipant: at the cap a new context is
// context_limit_exceeded (retryable), the open ones stay usable, others are
// not affected, and concluding one frees a slot.
func TestMaxContextsPerParticipant(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxContextsPerParticipant = 3 })
	const pod = "limits-ctx-participant"
	recv := g.Dial(t, pod, "receiver", "")
	send := g.Dial(t, pod, "sender", "")
	recv.ExpectPresence("join", "sender")
	relay := func(from, to *harness.Client, id, kind string, ctx any) {
		t.Helper()
		from.SendRaw(harness.EnvelopeJSON(t, id, kind, ctx))
		if m := to.ExpectOther(kind); m.Str("id") != id {
			t.Fatalf("got %v, want %s", m, id)
		}
	}
	refused := func(id string, ctx any) {
		t.Helper()
		send.SendRaw(harness.EnvelopeJSON(t, id, "chat", ctx))
		m := send.ExpectErr("context_limit_exceeded")
		if r, _ := m.Payload()["retryable"].(bool); !r || m.Str("correlation_id") != id {
			t.Fatalf("context_limit_exceeded: %v, want retryable and correlation_id %s", m, id)
		}
	}
	for i := 0; i < 3; i++ {
		relay(send, recv, fmt.Sprintf("open-%d", i), "chat", map[string]any{"id": fmt.Sprintf("p%d", i)})
	}
	refused("open-3", map[string]any{"id": "p3"})
	refused("open-3-path", "p3/child") // a child is a context too
	for i := 0; i < 3; i++ {
		relay(send, recv, fmt.Sprintf("again-%d", i), "chat", map[string]any{"id": fmt.Sprintf("p%d", i)})
	}
	relay(send, recv, "main", "chat", nil)
	// The cap is per participant: the receiver opens its own, and sending
	// in the sender's contexts does not make them its own.
	relay(recv, send, "recv-in-p0", "chat", map[string]any{"id": "p0"})
	relay(recv, send, "recv-open", "chat", map[string]any{"id": "r0"})
	refused("open-3-again", map[string]any{"id": "p3"})

	// A conclusion frees a slot.
	relay(send, recv, "end-p1", "conclusion", map[string]any{"id": "p1"})
	ev := recv.ExpectOther("system/context")
	if ev.ContextID() != "p1" || ev.Payload()["reason"] != "conclusion" {
		t.Fatalf("got %v, want p1 concluded", ev)
	}
	send.ExpectOther("system/context")
	relay(send, recv, "open-3-now", "chat", map[string]any{"id": "p3"})
	refused("open-4", map[string]any{"id": "p4"})
	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="context_limit_exceeded"}`); got != 4 {
		t.Fatalf(`mcpp_errors_total{code="context_limit_exceeded"} = %v, want 4`, got)
	}
}

// TestMaxContextsPerPod: the pod's cap holds for everyone in it, open
// contexts stay usable at the cap, other pods are not affected, and a
// conclusion frees a slot.
func TestMaxContextsPerPod(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxContextsPerPod = 4; c.MaxContextsPerParticipant = 3 })
	const pod = "limits-ctx-pod"
	a := g.Dial(t, pod, "a", "")
	b := g.Dial(t, pod, "b", "")
	a.ExpectPresence("join", "b")
	c := g.Dial(t, pod, "c", "")
	a.ExpectPresence("join", "c")
	b.ExpectPresence("join", "c")
	relay := func(from *harness.Client, id, kind string, ctx any, to ...*harness.Client) {
		t.Helper()
		from.SendRaw(harness.EnvelopeJSON(t, id, kind, ctx))
		for _, r := range to {
			if m := r.ExpectOther(kind); m.Str("id") != id {
				t.Fatalf("%s got %v, want %s", r.ID, m, id)
			}
		}
	}
	refused := func(from *harness.Client, id string, ctx any) {
		t.Helper()
		from.SendRaw(harness.EnvelopeJSON(t, id, "chat", ctx))
		m := from.ExpectErr("context_limit_exceeded")
		if r, _ := m.Payload()["retryable"].(bool); !r {
			t.Fatalf("context_limit_exceeded is not retryable: %v", m)
		}
	}
	for i := 0; i < 3; i++ {
		relay(a, fmt.Sprintf("a-open-%d", i), "chat", map[string]any{"id": fmt.Sprintf("a%d", i)}, b, c)
	}
	relay(b, "b-open-0", "chat", map[string]any{"id": "b0"}, a, c)
	refused(b, "b-open-1", map[string]any{"id": "b1"})
	refused(c, "c-open-0", map[string]any{"id": "c0"})
	// Open contexts stay usable, by anyone.
	relay(c, "c-in-a0", "chat", map[string]any{"id": "a0"}, a, b)
	relay(b, "b-in-b0", "chat", map[string]any{"id": "b0"}, a, c)
	relay(c, "c-main", "chat", nil, a, b)
	// Another pod has its own cap.
	d := g.Dial(t, "limits-ctx-pod-other", "d", "")
	e := g.Dial(t, "limits-ctx-pod-other", "e", "")
	d.ExpectPresence("join", "e")
	relay(d, "d-open", "chat", map[string]any{"id": "d0"}, e)

	relay(a, "a-end-0", "conclusion", map[string]any{"id": "a0"}, b, c)
	for _, r := range []*harness.Client{a, b, c} {
		if ev := r.ExpectOther("system/context"); ev.ContextID() != "a0" {
			t.Fatalf("%s got %v, want a0 concluded", r.ID, ev)
		}
	}
	relay(c, "c-open-0-now", "chat", map[string]any{"id": "c0"}, a, b)
	refused(b, "b-open-1-again", map[string]any{"id": "b1"})
	if got := harness.MetricOrZero(t, g.URL, `mcpp_errors_total{code="context_limit_exceeded"}`); got != 3 {
		t.Fatalf(`mcpp_errors_total{code="context_limit_exceeded"} = %v, want 3`, got)
	}
}

// TestMaxConnections: over --max-connections an upgrade is 503
// over_capacity, in any pod; a closed connection frees its place.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxConnections = 3 })
	a := g.Dial(t, "limits-conn-1", "a", "")
	b := g.Dial(t, "limits-conn-1", "b", "")
	a.ExpectPresence("join", "b")
	c := g.Dial(t, "limits-conn-2", "c", "")
	harness.ExpectOverCapacity(t, g, "limits-conn-3", "d")
	harness.ExpectOverCapacity(t, g, "limits-conn-1", "e")
	if got := harness.MetricOrZero(t, g.URL, `mcpp_upgrade_refusals_total{code="over_capacity"}`); got != 2 {
		t.Fatalf(`mcpp_upgrade_refusals_total{code="over_capacity"} = %v, want 2`, got)
	}
	// The ones in are not disturbed.
	a.SendRaw(harness.EnvelopeJSON(t, "still-here", "chat", nil))
	if m := b.ExpectOther("chat"); m.Str("id") != "still-here" {
		t.Fatalf("got %v, want still-here", m)
	}

	c.Conn.Close()
	var d *harness.Client
	harness.Eventually(t, 5*time.Second, "a place after a connection closed", func() bool {
		d = harness.TryDial(t, g, "limits-conn-3", "d")
		return d != nil
	})
	harness.ExpectOverCapacity(t, g, "limits-conn-2", "f")
	if got := harness.MetricOrZero(t, g.URL, "mcpp_connections"); got != 3 {
		t.Fatalf("mcpp_connections = %v, want 3", got)
	}
}

// TestMaxParticipantsPerPod: a pod at --max-participants-per-pod refuses
// a new participant with 503 over_capacity, still lets an existing one
// replace its connection, and does not limit other pods.
func TestMaxParticipantsPerPod(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxParticipantsPerPod = 2 })
	const pod = "limits-pod-full"
	a := g.Dial(t, pod, "a", "")
	b := g.Dial(t, pod, "b", "")
	a.ExpectPresence("join", "b")
	harness.ExpectOverCapacity(t, g, pod, "c")
	// Past this envelope b has had every presence from before.
	a.SendRaw(harness.EnvelopeJSON(t, "from-a", "chat", nil))
	if m := b.ExpectOther("chat"); m.Str("id") != "from-a" {
		t.Fatalf("got %v, want from-a", m)
	}

	a2 := g.Dial(t, pod, "a", "") // replaces a, at the cap
	if code := a.WaitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("the replaced connection closed with %d, want 4000", code)
	}
	a2.SendRaw(harness.EnvelopeJSON(t, "from-a2", "chat", nil))
	if m := b.ExpectKind("chat"); m.Str("id") != "from-a2" { // no presence for a replacement
		t.Fatalf("got %v, want from-a2", m)
	}
	harness.ExpectOverCapacity(t, g, pod, "c")
	g.Dial(t, "limits-pod-other", "c", "")

	b.Conn.Close()
	a2.ExpectPresence("leave", "b")
	var c2 *harness.Client
	harness.Eventually(t, 5*time.Second, "a place after b left", func() bool {
		c2 = harness.TryDial(t, g, pod, "c")
		return c2 != nil
	})
	if got := harness.MetricOrZero(t, g.URL, `mcpp_upgrade_refusals_total{code="over_capacity"}`); got != 2 {
		t.Fatalf(`mcpp_upgrade_refusals_total{code="over_capacity"} = %v, want 2`, got)
	}
}

// TestMaxPods: at --max-pods a new pod is 503 over_capacity while the
// existing pods take new participants; a pod left empty frees its place.
func TestMaxPods(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxPods = 2 })
	g.Dial(t, "limits-pods-1", "a", "")
	g.Dial(t, "limits-pods-2", "b", "")
	harness.ExpectOverCapacity(t, g, "limits-pods-3", "c")
	g.Dial(t, "limits-pods-1", "d", "")
	g.Dial(t, "limits-pods-2", "e", "")
	harness.ExpectOverCapacity(t, g, "limits-pods-3", "c")
	if got := harness.MetricOrZero(t, g.URL, `mcpp_upgrade_refusals_total{code="over_capacity"}`); got != 2 {
		t.Fatalf(`mcpp_upgrade_refusals_total{code="over_capacity"} = %v, want 2`, got)
	}
	if got := harness.MetricOrZero(t, g.URL, "mcpp_pods"); got != 2 {
		t.Fatalf("mcpp_pods = %v, want 2", got)
	}
}

// TestMaxPodsFreedWhenEmpty: a pod whose participants all left, with no
// context, no longer counts against --max-pods.
func TestMaxPodsFreedWhenEmpty(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxPods = 1 })
	a := g.Dial(t, "limits-podfree-1", "a", "")
	harness.ExpectOverCapacity(t, g, "limits-podfree-2", "b")
	a.Conn.Close()
	var b *harness.Client
	harness.Eventually(t, 5*time.Second, "the empty pod's place", func() bool {
		b = harness.TryDial(t, g, "limits-podfree-2", "b")
		return b != nil
	})
}

// TestRateBucketInherited: the sender's bucket belongs to the participant:
// neither a replacing connection nor a new one after leaving gets a full
// bucket. A token takes 20 s, so none refills during the test.
func TestRateBucketInherited(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 0.05, 3 })
	start := time.Now()
	drain := func(t *testing.T, c *harness.Client, to *harness.Client, prefix string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			c.SendRaw(harness.EnvelopeJSON(t, id, "chat", nil))
			if m := to.ExpectOther("chat"); m.Str("id") != id {
				t.Fatalf("got %v, want %s", m, id)
			}
		}
	}
	limited := func(t *testing.T, c *harness.Client, id string) {
		t.Helper()
		c.SendRaw(harness.EnvelopeJSON(t, id, "chat", nil))
		harness.CheckRateRefusal(t, c.ExpectErr("rate_limited"), "rate_limited", 20_000)
	}

	t.Run("replacing connection", func(t *testing.T) {
		const pod = "limits-inherit-replace"
		recv := g.Dial(t, pod, "receiver", "")
		a := g.Dial(t, pod, "sender", "")
		recv.ExpectPresence("join", "sender")
		drain(t, a, recv, "a")
		a2 := g.Dial(t, pod, "sender", "")
		if code := a.WaitClosed(5 * time.Second); code != 4000 {
			t.Fatalf("replaced connection closed with %d, want 4000", code)
		}
		limited(t, a2, "a2-0")
		recv.ExpectQuiet(100 * time.Millisecond)
	})
	t.Run("reconnect after leaving", func(t *testing.T) {
		const pod = "limits-inherit-reconnect"
		recv := g.Dial(t, pod, "receiver", "")
		a := g.Dial(t, pod, "sender", "")
		recv.ExpectPresence("join", "sender")
		drain(t, a, recv, "a")
		a.Conn.Close()
		recv.ExpectPresence("leave", "sender")
		a2 := g.Dial(t, pod, "sender", "")
		recv.ExpectPresence("join", "sender")
		limited(t, a2, "a2-0")
		recv.ExpectQuiet(100 * time.Millisecond)
	})
	t.Run("reconnect to a pod left empty", func(t *testing.T) {
		const pod = "limits-inherit-alone"
		a := g.Dial(t, pod, "sender", "echo=1")
		drain(t, a, a, "a")
		a.Conn.Close()
		harness.Eventually(t, 5*time.Second, "the sender's leave", func() bool {
			return harness.MetricOrZero(t, g.URL, "mcpp_connections") == 0 // the earlier subtests' connections closed with them
		})
		a2 := g.Dial(t, pod, "sender", "echo=1")
		limited(t, a2, "a2-0")
	})
	if elapsed := time.Since(start); elapsed >= 19*time.Second {
		t.Fatalf("the test took %v: a token may have refilled, so its refusals prove nothing", elapsed)
	}
}

// TestWelcomeListsEveryLimit: the welcome's limits are the ones in force,
// every one of them.
func TestWelcomeListsEveryLimit(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = 70000
		c.MaxContextBytes = 1234
		c.MaxDepth = 7
		c.Rate, c.Burst = 12.5, 25
		c.ContextRate, c.ContextBurst = 6.5, 13
		c.ContextCreateRate, c.ContextCreateBurst = 2.5, 4
		c.ContextTimeout = 90 * time.Second
		c.ContextRetention = 3 * time.Minute
		c.ConclusionKinds = "done,finish"
		c.MaxContextsPerParticipant = 17
		c.MaxContextsPerPod = 170
		c.MaxParticipantsPerPod = 42
		c.MaxConnections = 420
		c.MaxPods = 21
		c.SendQueue = 333
		c.MCPSessionTimeout = 45 * time.Second
	})
	w := g.Dial(t, "limits-welcome", "a", "").Welcome
	limits, _ := w.Payload()["limits"].(map[string]any)
	want := map[string]any{
		"max_message_bytes":            70000.0,
		"max_context_bytes":            1234.0,
		"max_depth":                    7.0,
		"rate":                         12.5,
		"burst":                        25.0,
		"context_rate":                 6.5,
		"context_burst":                13.0,
		"context_create_rate":          2.5,
		"context_create_burst":         4.0,
		"context_timeout_ms":           90000.0,
		"context_retention_ms":         180000.0,
		"conclusion_kinds":             []any{"done", "finish"},
		"max_contexts_per_participant": 17.0,
		"max_contexts_per_pod":         170.0,
		"max_participants_per_pod":     42.0,
		"max_connections":              420.0,
		"max_pods":                     21.0,
		"send_queue":                   333.0,
		"mcp_session_timeout_ms":       45000.0,
	}
	for k, v := range want {
		got, ok := limits[k]
		if !ok {
			t.Errorf("the welcome's limits lack %q (limits: %v)", k, limits)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("limits.%s = %v, want %v", k, got, v)
		}
	}
}

// TestRateLimitedRequestOrder: a request to the gateway whose payload does
// not fit it is invalid_envelope, the second row of docs/protocol.md section
// 5's table, even when the sender is over its rate; an unknown request comes
// after rate_limited in the table.
func TestRateLimitedRequestOrder(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 0.01, 1 })
	a := g.Dial(t, "limits-request-order", "a", "")
	start := time.Now()
	a.Send(map[string]any{"id": "q0", "kind": "gateway/contexts"}) // the one token
	a.ExpectOther("system/contexts")
	a.Send(map[string]any{"id": "q1", "kind": "gateway/nope"})
	harness.CheckRateRefusal(t, a.ExpectErr("rate_limited"), "rate_limited", 100_000)
	a.Send(map[string]any{"id": "q2", "kind": "gateway/filter", "payload": "not a filter"})
	a.ExpectErr("invalid_envelope")
	a.Send(map[string]any{"id": "q3", "kind": "gateway/contexts", "payload": map[string]any{"state": "bogus"}})
	a.ExpectErr("invalid_envelope")
	if elapsed := time.Since(start); elapsed >= 90*time.Second {
		t.Fatalf("the test took %v: a token may have refilled", elapsed)
	}
}
