package pod

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/history"
)

// ownStream is the history stream as a gateway node alone runs it: its
// embedded server's, written by its writer alone, in a temporary store
// (history.Config's Own and Temporary), where the writer lets a pod's
// batch take its frames for a second.
func ownStream(t *testing.T) *history.Stream {
	t.Helper()
	ns, err := server.NewServer(&server.Options{ServerName: "own", DontListen: true, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := history.Open(ctx, nc, history.Config{Subjects: []string{StreamSubjects}, Entries: 1000, MaxAge: time.Hour,
		MaxBytes: 16 << 20, File: true, Temporary: true, Own: true}, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestThrottleDoesNotWaitForTheLinger: a sender held because the writer
// holds more than the node's flight budget goes on once the writer has
// stored it, in its next round, not a second later when the pod's
// lingering batch comes due: each of these envelopes alone is over the
// budget, and a wait of a second for each made a flood through a small
// --history-bytes crawl (the integration test
// TestManyPodsOverrunTheHistory: readers got nothing for 20 s).
func TestThrottleDoesNotWaitForTheLinger(t *testing.T) {
	n, _ := testNode(t, 1000, func(c *Config) { c.FlightBytes = 1 << 10 })
	s := ownStream(t)
	n.History = s
	n.Writer = history.NewWriter(s, history.WriterOptions{Node: n.ID, Logger: n.Log})
	t.Cleanup(n.Writer.Close)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{discard: true})
	// Forty lingers would take forty seconds; forty rounds take about one.
	const envelopes = 40
	sent := make(chan int, envelopes)
	go func() {
		for i := range envelopes {
			alice.send(map[string]any{"id": fmt.Sprint("m", i), "kind": "chat", "payload": strings.Repeat("x", 2<<10)})
			p.Throttle(alice.burst)
			sent <- i
		}
		close(sent)
	}()
	got := 0
	deadline := time.After(20 * time.Second)
	for {
		select {
		case _, ok := <-sent:
			if !ok {
				return
			}
			got++
		case <-deadline:
			t.Fatalf("the sender got %d of %d envelopes through the flow control in 20 s: it waited for the writer's linger", got, envelopes)
		}
	}
}

// TestThrottleTakesTurns: senders of many pods held for the writer's
// budget go on in turn, not whoever runs first when the stream stored
// something: when the first sender has sent all its envelopes, every
// other has sent nearly as many. Woken all at once, one of twenty
// senders waited 14 s while the others went on (the integration test
// TestManyPodsOverrunTheHistory, which failed when one waited 20 s).
func TestThrottleTakesTurns(t *testing.T) {
	const (
		senders   = 20
		envelopes = 200
		size      = 2 << 10
		budget    = 32 << 10
	)
	n, _ := testNode(t, 1000, func(c *Config) { c.FlightBytes = budget })
	s := ownStream(t)
	n.History = s
	n.Writer = history.NewWriter(s, history.WriterOptions{Node: n.ID, Logger: n.Log})
	t.Cleanup(n.Writer.Close)
	var sent [senders]atomic.Int64
	done := make(chan [senders]int64, senders)
	start := make(chan struct{})
	for i := range senders {
		p := openPod(t, n, fmt.Sprint("pod-", i))
		alice := join(t, p, "alice", joinOpts{discard: true})
		go func() {
			<-start
			for j := range envelopes {
				alice.send(map[string]any{"id": fmt.Sprint("m", j), "kind": "chat", "payload": strings.Repeat("x", size)})
				sent[i].Add(1)
				p.Throttle(alice.burst)
			}
			var seen [senders]int64
			for k := range seen {
				seen[k] = sent[k].Load()
			}
			done <- seen
		}()
	}
	close(start)
	var first [senders]int64
	select {
	case first = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("no sender sent its envelopes in 60 s")
	}
	// In turn, each sender is at most a turn behind another, past what
	// the budget let one sender through before anyone waited.
	const slack = budget/size + 2
	for i, c := range first {
		if c < envelopes-slack {
			t.Errorf("pod-%d's sender had sent %d envelopes when the first had sent all %d", i, c, envelopes)
		}
	}
	for range senders - 1 {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("a sender did not finish in 60 s")
		}
	}
}
