package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// The history across the nodes of a cluster (docs/protocol.md sections 7 and
// 8): one order per pod on every node, resume on another node, and no
// envelope lost or twice while the history stream's leader fails over.

// TestHistoryCluster: two senders on two nodes, receivers on all three:
// every receiver sees the pod's envelopes in one order, which is the order
// gateway/history and a joiner's replay give on any node. A participant
// that drops on one node resumes on another, nothing missing, nothing
// twice.
func TestHistoryCluster(t *testing.T) {
	nodes := startCluster(t, 3, "--history", "1000", "--context-timeout", "1s")
	n1, n2, n3 := nodes[0].GW, nodes[1].GW, nodes[2].GW

	t.Run("one order", func(t *testing.T) {
		const pod, each = "hist-cluster-order", 200
		var rx []*harness.Client
		for i, g := range []*harness.Gateway{n1, n2, n3} {
			rx = append(rx, g.Dial(t, pod, fmt.Sprintf("rx%d", i+1), ""))
		}
		alice := n1.Dial(t, pod, "alice", "")
		bob := n2.Dial(t, pod, "bob", "")
		var wg sync.WaitGroup
		for _, c := range []*harness.Client{alice, bob} {
			wg.Add(1)
			go func(c *harness.Client) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", c.ID, i), "kind": "ord", "payload": map[string]any{"seq": i}})
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := c.Conn.Write(ctx, b)
					cancel()
					if err != nil {
						t.Errorf("%s: write: %v", c.ID, err)
						return
					}
					time.Sleep(time.Millisecond) // let the two interleave
				}
			}(c)
		}
		wg.Wait()
		var orders [][]string
		for _, c := range rx {
			var ids []string
			deadline := time.Now().Add(20 * time.Second)
			for len(ids) < 2*each && time.Now().Before(deadline) {
				m := c.Next(time.Until(deadline))
				if m == nil {
					break
				}
				if m.Kind() == "ord" {
					ids = append(ids, m.Str("id"))
				}
			}
			if len(ids) != 2*each {
				t.Fatalf("%s got %d of %d envelopes", c.ID, len(ids), 2*each)
			}
			orders = append(orders, ids)
		}
		// Each sender's envelopes in the order sent, interleaved.
		next := map[string]int{}
		interleaved := 0
		for i, id := range orders[0] {
			who, _, _ := strings.Cut(id, "-")
			if id != fmt.Sprintf("%s-%d", who, next[who]) {
				t.Fatalf("rx1: envelope %d is %s, want %s-%d", i, id, who, next[who])
			}
			next[who]++
			if i > 0 && !strings.HasPrefix(orders[0][i-1], who+"-") {
				interleaved++
			}
		}
		for i := 1; i < len(orders); i++ {
			if a, b := strings.Join(orders[0], ","), strings.Join(orders[i], ","); a != b {
				j := 0
				for j < len(orders[0]) && orders[0][j] == orders[i][j] {
					j++
				}
				t.Fatalf("rx%d's order differs from rx1's from envelope %d: %v vs %v", i+1, j, orders[i][j:min(j+5, len(orders[i]))], orders[0][j:min(j+5, len(orders[0]))])
			}
		}
		t.Logf("%d envelopes from two nodes, %d switches between the senders, one order on three nodes", 2*each, interleaved)

		// gateway/history and a joiner's replay give the same order, on every node.
		for i, g := range []*harness.Gateway{n1, n2, n3} {
			q := g.Dial(t, pod, fmt.Sprintf("q%d", i+1), "")
			got, more := histPage(q, "h", map[string]any{"limit": 1000})
			if more {
				t.Errorf("node %d: gateway/history says more", i+1)
			}
			histEq(t, fmt.Sprintf("gateway/history on node %d", i+1), got, orders[0])
			_, _, replay := histJoin(t, g, pod, fmt.Sprintf("j%d", i+1), "history=all")
			histEq(t, fmt.Sprintf("history=all on node %d", i+1), histLabels(replay), orders[0])
		}
	})

	t.Run("resume on another node", func(t *testing.T) {
		const pod = "hist-cluster-resume"
		alice := n2.Dial(t, pod, "alice", "echo=1")
		bob := n1.Dial(t, pod, "bob", "")
		alice.AwaitPresence("join", "bob", 5*time.Second)
		histSendSeen(alice, histChat("x1"), histChat("x2"), histChat("x3"))
		for _, id := range []string{"x1", "x2", "x3"} {
			bob.ExpectEnvelope("chat", id)
		}
		if err := bob.Conn.Close(); err != nil {
			t.Fatal(err)
		}
		alice.AwaitPresence("leave", "bob", 5*time.Second)
		histSendSeen(alice, histChat("x4"), histIn("x5", "step", histReasoning("C")), histIn("x6", "conclusion", histReasoning("C")))
		histAwaitEvent(alice, "C")
		histSendSeen(alice, histChat("x7"))

		bob2, info, got := histJoin(t, n3, pod, "bob", "resume=x3")
		histEq(t, "bob resumed on node 3", histLabels(got), []string{"x4", "x5", "x6", "ev:C", "x7"})
		histWantInfo(t, "bob", info, map[string]any{"resumed": true, "replayed": 5})
		histLive(t, alice, "x8", bob2)
		alice.Send(histChat("x9"))
		if m := bob2.NextOf(); m.Str("id") != "x9" {
			t.Fatalf("bob: got %v, want x9 (a duplicate?)", m)
		}
	})

	// Every node times the context out; the pod still has one conclusion:
	// one event in the history, and one for each participant. (The
	// creator goes on sending after the envelope that created it.)
	t.Run("a timeout is one event", func(t *testing.T) {
		const pod = "hist-cluster-timeout"
		alice := n1.Dial(t, pod, "alice", "echo=1")
		bob := n2.Dial(t, pod, "bob", "")
		carol := n3.Dial(t, pod, "carol", "")
		alice.AwaitPresence("join", "carol", 5*time.Second)
		z := strings.Repeat("Z", 100)
		histSendSeen(alice, histIn("t1", "step", histReasoning("T")),
			map[string]any{"id": z, "kind": "chat", "payload": strings.Repeat("Q", 200)})
		histAwaitEvent(alice, "T")
		// Every node's registry has concluded T: whatever event a node
		// publishes for it is published.
		for i, g := range []*harness.Gateway{n1, n2, n3} {
			probe := g.Dial(t, pod, fmt.Sprintf("probe%d", i+1), "main=0&contexts=none")
			harness.Eventually(t, 10*time.Second, fmt.Sprintf("T concluded on node %d", i+1), func() bool {
				probe.Send(map[string]any{"id": "c", "kind": "gateway/contexts", "payload": map[string]any{"id": "T", "state": "all"}})
				list, _ := probe.NextOf().Payload()["contexts"].([]any)
				return len(list) == 1 && list[0].(map[string]any)["state"] == "concluded"
			})
		}
		histSendSeen(alice, histChat("after"))
		got, _ := histPage(alice, "h", map[string]any{"fold": false})
		histEq(t, "the history", got, []string{"t1", z, "ev:T", "after"})
		for _, c := range []*harness.Client{bob, carol} {
			var labels []string
			for {
				m := c.NextOf()
				if labels = append(labels, histLabel(m)); m.Str("id") == "after" {
					break
				}
			}
			histEq(t, c.ID+" received", labels, []string{"t1", z, "ev:T", "after"})
		}
	})
}

// histServerName is the name of the NATS server listening on port.
func histServerName(t *testing.T, port int) string {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.DontRandomize(), nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("nats.Connect on %d: %v", port, err)
	}
	defer nc.Close()
	return nc.ConnectedServerName()
}

// histStreamLeader is the server name of the history stream's leader, asked
// of the server on port (with all, once its two other replicas are
// current).
func histStreamLeader(t *testing.T, port int, all bool) string {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.DontRandomize(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("nats.Connect on %d: %v", port, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	leader := ""
	harness.Eventually(t, 30*time.Second, "the history stream's leader and current replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "MCPP_HISTORY")
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || (all && len(info.Cluster.Replicas) != 2) {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if all && (!r.Current || r.Offline) {
				return false
			}
		}
		leader = info.Cluster.Leader
		return true
	})
	return leader
}

// TestHistoryClusterFailover: the history stream's leader is killed
// (SIGKILL) while a sender on another node streams 400 numbered envelopes,
// sending again those refused no_quorum while the stream has no leader: a
// receiver on the third node gets all 400, once each, in order.
func TestHistoryClusterFailover(t *testing.T) {
	ports := []int{harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)}
	nodes := startClusterEach(t, 3, func(i int) []string { return []string{"--nats-port", fmt.Sprint(ports[i])} }, "--history", "1000")
	names := make([]string, len(nodes))
	for i := range nodes {
		names[i] = histServerName(t, ports[i])
	}
	leaderName := histStreamLeader(t, ports[0], true)
	leader := -1
	for i, name := range names {
		if name == leaderName {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("the stream's leader %q is none of the nodes %v", leaderName, names)
	}
	var others []int
	for i := range nodes {
		if i != leader {
			others = append(others, i)
		}
	}
	sIdx, rIdx := others[0], others[1]
	t.Logf("nodes %v; the history stream's leader is node %d; sender on node %d, receiver on node %d", names, leader+1, sIdx+1, rIdx+1)

	const pod, total = "hist-failover", 400
	rx := nodes[rIdx].GW.Dial(t, pod, "rx", "")
	tx := nodes[sIdx].GW.Dial(t, pod, "tx", "echo=1")
	rx.AwaitPresence("join", "tx", 10*time.Second)
	tx.Send(histChat("warm"))
	rx.ExpectEnvelope("chat", "warm")
	tx.ExpectEnvelope("chat", "warm")

	// The sender sends each envelope once the last is acknowledged (its
	// echo), and one refused while the stream has no leader (no_quorum,
	// retryable) again, as a client that keeps its order does.
	var wg sync.WaitGroup
	var refused atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i++ {
			id := fmt.Sprintf("f%d", i)
			b, _ := json.Marshal(map[string]any{"id": id, "kind": "seq", "payload": map[string]any{"seq": i}})
			for acked := false; !acked; {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := tx.Conn.Write(ctx, b)
				cancel()
				if err != nil {
					t.Errorf("tx: write %d: %v", i, err)
					return
				}
				for {
					m := tx.Next(30 * time.Second)
					if m == nil {
						t.Errorf("tx: no answer to %s within 30s", id)
						return
					}
					if m.Str("id") == id && m.Kind() == "seq" {
						acked = true
						break
					}
					if m.ErrCode() == "no_quorum" && m.Str("correlation_id") == id {
						refused.Add(1)
						time.Sleep(50 * time.Millisecond)
						break
					}
					if m.ErrCode() != "" {
						t.Errorf("tx: %v", m)
						return
					}
				}
			}
		}
	}()

	var seqs []int
	killed := time.Time{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seqs) < total && time.Now().Before(deadline) {
		m := rx.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == "system/error" {
			t.Fatalf("rx: %v", m)
		}
		if m.Kind() != "seq" {
			continue
		}
		seqs = append(seqs, harness.SeqOf(m))
		if len(seqs) == 50 {
			if err := nodes[leader].Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
			deadline = killed.Add(30 * time.Second)
		}
	}
	wg.Wait()
	if s := histContiguous(seqs, 0, total-1); s != "" {
		t.Fatalf("the receiver, while the leader died: %s", s)
	}
	took := time.Since(killed)
	// Nothing more: no envelope twice.
	tx.Send(histChat("after"))
	if m := rx.NextOf(); m.Str("id") != "after" {
		t.Fatalf("rx: got %v after the 400, want the next envelope", m)
	}
	holds := harness.Metric(t, nodes[sIdx].GW.URL, "mcpp_history_holds_total")
	late := harness.Metric(t, nodes[sIdx].GW.URL, "mcpp_history_late_total")
	if late != 0 {
		t.Errorf("the sender's node republished %v frames out of their place", late)
	}
	how := "the stream never missed a frame (no hold)"
	if holds >= 1 {
		how = fmt.Sprintf("the sender's node held and republished its frames (%v holds)", holds)
	}
	how += fmt.Sprintf("; %d sends refused no_quorum and sent again", refused.Load())
	t.Logf("all %d received once, in order, %v after the leader (node %d) was killed; %s; the new leader: %s",
		total, took.Round(time.Millisecond), leader+1, how, histStreamLeader(t, ports[sIdx], false))
}
