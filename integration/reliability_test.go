package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// TestPodsEndWithTheirParticipants: a pod exists while it has participants
// or contexts, and --max-pods counts those alone. A participant that
// sent an envelope (its rate bucket partly drained) and left takes its pod
// with it at once, so a new pod is let in (its bucket stays its own:
// TestRateBucketInherited). The pod's history outlives the pod
// and does not count.
func TestPodsEndWithTheirParticipants(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxPods = 3
		c.Rate, c.Burst = 1, 3 // a bucket refills in seconds, long after the leave
	})
	for _, pod := range []string{"p1", "p2", "p3"} {
		c := g.Dial(t, pod, "alice", "")
		c.Send(map[string]any{"kind": "chat", "id": pod + "-hello"})
		_ = c.Conn.CloseNow()
		c.WaitClosed(5 * time.Second)
	}
	harness.Eventually(t, 5*time.Second, "no pod left (no participant, no context)", func() bool {
		return harness.Metric(t, g.URL, "mcpp_pods") == 0
	})
	// Three new pods are let in at once, not after a sweep.
	for _, pod := range []string{"q1", "q2", "q3"} {
		c := g.Dial(t, pod, "bob", "")
		defer c.Conn.CloseNow()
	}
	if status, code := harness.Refusal(t, g.WS, harness.JoinQuery("q4", "bob"), nil); status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("a fourth pod: %d %s, want 503 over_capacity (--max-pods 3)", status, code)
	}
}

// TestStalledReaderBoundedInBytes: with envelopes near the 1 MiB limit and
// the default --send-queue (1,024 envelopes, which alone would let one
// reader pin a GiB), a participant that stops reading is cut with 4008 once
// its queue holds --send-queue-bytes (8 MiB), the cut is logged with its
// pod, participant and reason, and the live heap never grows past what the
// README says bounds it: that queue, the pod's history (--history-bytes,
// in memory), the pod's envelopes in flight between this node and the
// stream (8 MiB each way: the sender's backlog and the follower's buffer)
// and an allowance.
//
// Not parallel: it measures the heap of the whole process.
func TestStalledReaderBoundedInBytes(t *testing.T) {
	const (
		size = 1000 << 10
		// 150 MB: over 8 MiB and well under 1,024 envelopes, and about 70
		// MiB over the bound below, which a queue bounded by count alone
		// would pass.
		n            = 150
		historyBytes = 16 << 20
		queueBytes   = 8 << 20
		inFlight     = 2 * (8 << 20)
		// Each stage of the path (the read buffer, the filled copy, the
		// frame, NATS's buffers, the writer) holds an envelope or two:
		// 40 to 42 MiB measured in all on a quiet machine, 44 to 58 MiB
		// with both cores busy (watchHeap), where a queue bounded by
		// count alone grows by all 150 MiB.
		allowance = 40 << 20
	)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.WriteTimeout = time.Minute // the cut must come from the queue
		c.HistoryBytes = historyBytes
	})
	sender := harness.DialPeer(t, g, "stall", "sender", "", 64)
	sconn, err := harness.DialConn(g.WS, url.Values{"pod": {"stall"}, "participant": {"stalled"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.CloseNow()
	// stalled reads nothing from here on.
	if m := sender.Expect(); m.Kind != "system/presence" {
		t.Fatalf("sender got %s, want stalled's join", m.Kind)
	}
	base := liveHeap()
	stopWatch := watchHeap(base, 10*time.Millisecond)
	frame := harness.EnvelopeOfSize(t, "stall-0000", "chat", size)
	for i := 0; i < n; i++ {
		copy(frame[len(`{"id":"stall-`):], fmt.Sprintf("%04d", i))
		if err := sender.Write(false, frame); err != nil {
			t.Fatalf("envelope %d: %v", i, err)
		}
	}
	harness.Eventually(t, 30*time.Second, "the stalled reader cut as a slow consumer", func() bool {
		return harness.Metric(t, g.URL, `mcpp_cuts_total{reason="slow_consumer"}`) == 1
	})
	peak := stopWatch()
	bound := base + queueBytes + historyBytes + inFlight + allowance
	grown := float64(peak-base) / (1 << 20)
	if peak > bound {
		t.Errorf("live heap peaked %.1f MiB over its start; the bound is %.1f MiB (--send-queue-bytes %d MiB, --history-bytes %d MiB, %d MiB in flight, %d MiB)",
			grown, float64(bound-base)/(1<<20), queueBytes>>20, historyBytes>>20, inFlight>>20, allowance>>20)
	}
	if logs := g.Logs.String(); !strings.Contains(logs, `msg="participant cut" pod=stall participant=stalled reason=slow_consumer`) {
		t.Errorf("no log line for the cut:\n%s", logs)
	}
	t.Logf("%d envelopes of %d KiB at a stalled reader: live heap peaked %+.1f MiB (bound %+.1f MiB)", n, size>>10, grown, float64(bound-base)/(1<<20))
}

// TestDepthHoldsFromTheLeafUp: a chain announced from the leaf up (C12
// under C11, then C11 under C10, …) is counted whole: the envelope that
// would make it longer than --max-depth (5) is refused with
// context_depth_exceeded, and an observer of the chain's root with
// subtree=1 receives what is sent in every registered descendant, down to
// the deepest.
func TestDepthHoldsFromTheLeafUp(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "leaf-up"
	s := g.Dial(t, pod, "sender", "")
	for i := 12; i >= 9; i-- {
		s.Send(map[string]any{"kind": "note", "id": fmt.Sprintf("n%d", i), "context": map[string]any{"id": fmt.Sprintf("C%d", i), "parent": fmt.Sprintf("C%d", i-1)}})
	}
	// C9…C12 hang under the unknown C8, at depths 2…5: C8 under C7 would
	// put C12 at depth 6.
	s.Send(map[string]any{"kind": "note", "id": "n8", "context": map[string]any{"id": "C8", "parent": "C7"}})
	if e := s.ExpectErr("context_depth_exceeded"); e.Str("correlation_id") != "n8" {
		t.Fatalf("the refusal answers %q, want n8", e.Str("correlation_id"))
	}
	// C8 as a root fits; an observer of its subtree sees the deepest.
	obs := g.Dial(t, pod, "observer", "main=0&contexts=none&ids=C8&subtree=1")
	s.Send(map[string]any{"kind": "note", "id": "root", "context": map[string]any{"id": "C8"}})
	for i := 9; i <= 12; i++ {
		s.Send(map[string]any{"kind": "note", "id": fmt.Sprintf("m%d", i), "context": map[string]any{"id": fmt.Sprintf("C%d", i)}})
	}
	for _, want := range []string{"root", "m9", "m10", "m11", "m12"} {
		m := obs.NextNonPresence(5 * time.Second)
		if m == nil || m.Str("id") != want {
			t.Fatalf("the observer of C8's subtree got %v, want %s", m, want)
		}
	}
	// And C12, at depth 5, takes no child.
	s.Send(map[string]any{"kind": "note", "id": "n13", "context": map[string]any{"id": "C13", "parent": "C12"}})
	s.ExpectErr("context_depth_exceeded")
	s.Send(map[string]any{"kind": "gateway/contexts", "id": "q", "payload": map[string]any{"id": "C12"}})
	list, _ := s.ExpectKind("system/contexts").Payload()["contexts"].([]any)
	if c, _ := list[0].(map[string]any); len(list) != 1 || c["depth"] != float64(5) {
		t.Fatalf("C12 in gateway/contexts: %v, want depth 5", list)
	}
}

// TestShutdownAnswersWhileDraining: once shutdown begins, and for as long
// as the drain lasts (here a participant with a backlog it does not read
// yet), the listener still answers: /healthz and a new upgrade get 503
// (shutting_down), so that a load balancer sees the node leaving and a
// client gets a reason, while /livez still answers 200 (a liveness check
// must not restart a node that drains); an envelope a participant sends meanwhile is
// answered with a retryable shutting_down, after what was queued for it
// and before its 1001.
func TestShutdownAnswersWhileDraining(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue, c.SendQueueBytes = 4096, 1<<30
		c.WriteTimeout = time.Minute
	})
	const pod = "draining"
	aconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"alice"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.CloseNow()
	alice := harness.NewPeer(t, "alice", aconn, 1<<14)
	// alice reads nothing until the drain is under way: her backlog keeps it
	// going.
	bob := harness.DialPeer(t, g, pod, "bob", "", 64)
	const n = 200 // 12.8 MiB: more than the sockets hold
	for i := 0; i < n; i++ {
		if err := bob.Write(false, harness.EnvelopeOfSize(t, fmt.Sprintf("b-%04d", i), "chat", 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 10*time.Second, "bob's envelopes accepted", func() bool {
		return harness.Metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut <- g.Shutdown(ctx)
	}()
	harness.Eventually(t, 5*time.Second, "/healthz answering 503", func() bool {
		status, body, err := harness.HTTPGet(g.URL + "/healthz")
		if err != nil {
			t.Fatalf("/healthz during the drain: %v (the listener must still answer)", err)
		}
		return status == http.StatusServiceUnavailable && strings.Contains(body, "shutting down")
	})
	if status, body, err := harness.HTTPGet(g.URL + "/livez"); err != nil || status != http.StatusOK {
		t.Fatalf("/livez during the drain: %d %q %v, want 200 (the process is alive)", status, body, err)
	}
	if status, code := harness.Refusal(t, g.WS, harness.JoinQuery(pod, "carol"), nil); status != http.StatusServiceUnavailable || code != "shutting_down" {
		t.Fatalf("an upgrade during the drain: %d %q, want 503 shutting_down", status, code)
	}
	if err := aconn.Write(context.Background(), []byte(`{"kind":"chat","id":"late"}`)); err != nil {
		t.Fatal(err)
	}
	go alice.ReadLoop()
	var gotErr bool
	for got := 0; ; got++ {
		b := alice.Next(20 * time.Second)
		if b == nil {
			break
		}
		m, _ := harness.DecodeWire(b)
		if m.Kind == "system/error" {
			var e struct {
				Error     string `json:"error"`
				Retryable bool   `json:"retryable"`
			}
			_ = json.Unmarshal(m.Payload, &e)
			if e.Error != "shutting_down" || !e.Retryable || string(m.CorrelationID) != `"late"` {
				t.Fatalf("alice's late envelope answered %s %s", m.CorrelationID, m.Payload)
			}
			gotErr = true
		}
	}
	if code := alice.WaitClosed(10 * time.Second); code != wire.CloseGoingAway {
		t.Fatalf("alice closed with %d, want 1001", code)
	}
	if !gotErr {
		t.Fatal("alice's envelope sent during the drain got no shutting_down")
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, _, err := harness.HTTPGet(g.URL + "/healthz"); err == nil {
		t.Fatal("the listener still answers after the shutdown")
	}
}

// TestFirstBurstDelivered: the fan-out queues a burst of envelopes for
// each member and flushes each member once at the burst's end; the very
// first burst of a new pod is flushed too. Many fresh pods, each with one
// member, each get an envelope over POST at once: every member receives
// its envelope, promptly.
func TestFirstBurstDelivered(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	for i := 0; i < 60; i++ {
		pod := fmt.Sprintf("first-%d", i)
		bob := g.Dial(t, pod, "bob", "")
		posted := make(chan string, 1)
		start := time.Now()
		go func() {
			body := strings.NewReader(`{"kind":"chat","id":"hello"}`)
			resp, err := http.Post(fmt.Sprintf("%s/pods/%s/envelopes?participant=alice", g.URL, pod), "application/json", body)
			if err != nil {
				posted <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			posted <- fmt.Sprintf("%d %s after %v", resp.StatusCode, bytes.TrimSpace(b), time.Since(start))
		}()
		// Nothing else is sent in the pod: an envelope whose writer was
		// not woken would never arrive, however long bob waits.
		if m := bob.NextNonPresence(10 * time.Second); m == nil || m.Str("id") != "hello" {
			answer := "no answer in 10 s more"
			select {
			case answer = <-posted:
			case <-time.After(10 * time.Second):
			}
			t.Fatalf("%s: bob got %v after %v, want hello (the POST: %s)", pod, m, time.Since(start), answer)
		}
		_ = bob.Conn.CloseNow()
	}
}

// TestManyPodsOverrunTheHistory: twenty pods flood at once, together many
// times what --history-bytes (1 MiB) keeps. The history discards its
// oldest entries to stay within it, but never one that a reader has not
// received yet: every reader gets every envelope of its pod, once and in
// order. (The node holds its senders while the bytes it has in the stream
// unread are at its share of --history-bytes.)
func TestManyPodsOverrunTheHistory(t *testing.T) {
	t.Parallel()
	const (
		pods = 20
		n    = 100
		size = 64000 // 20 × 100 × 64 KB = 128 MB through a 1 MiB history
	)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.HistoryBytes = 1 << 20
		c.MaxMessageBytes = 256 << 10
	})
	type pair struct{ sender, reader *harness.Peer }
	pairs := make([]pair, pods)
	for i := range pairs {
		pod := fmt.Sprintf("overrun-%d", i)
		pairs[i].reader = harness.DialPeer(t, g, pod, "reader", "", n+16)
		pairs[i].sender = harness.DialPeer(t, g, pod, "sender", "", 16)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pods) // a sender's and a reader's each: nobody waits to report
	for i, pr := range pairs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			frame := harness.EnvelopeOfSize(t, "x-000", "chat", size)
			for j := 0; j < n; j++ {
				copy(frame[len(`{"id":"x-`):], fmt.Sprintf("%03d", j))
				if err := pr.sender.Write(false, frame); err != nil {
					errs <- fmt.Errorf("pod %d: envelope %d: %w", i, j, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			want := 0
			for want < n {
				b := pr.reader.Next(20 * time.Second)
				if b == nil {
					errs <- fmt.Errorf("pod %d: the reader got %d of %d envelopes, then nothing for 20 s", i, want, n)
					return
				}
				m, err := harness.DecodeWire(b)
				if err != nil || m.Kind != "chat" {
					continue // the sender's join
				}
				if m.ID != fmt.Sprintf("x-%03d", want) {
					errs <- fmt.Errorf("pod %d: the reader got %s, want x-%03d", i, m.ID, want)
					return
				}
				want++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !t.Failed() {
		t.Logf("%d pods × %d envelopes of %d KB through a 1 MiB history: every reader got all, in order", pods, n, size/1000)
	}
}
