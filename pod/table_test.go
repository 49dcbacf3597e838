package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// The node's pod table (table.go): Enter finds or opens a pod and joins
// it, as the gateway's every way in does, with a publisher (Acquire, what
// a POST and the operator take) or a connection's reservation (Reserve).

// publisher is a sender with no connection, as a POST's.
func publisher(n *Node, id string) *Sender {
	return &Sender{ID: id, Caps: capability.MustCompile(wire.Kinds("*")), Protocol: wire.ProtocolMCPP,
		Buckets: n.Buckets.Acquire("table/" + id), Reply: new(Results)}
}

// enter enters pod name as s (Acquire), failing the test on a refusal.
func enter(t *testing.T, n *Node, name string, s *Sender) *Pod {
	t.Helper()
	p, e := n.Enter(context.Background(), name, func(p *Pod) (bool, *envelope.Error) { return p.Acquire(s) })
	if e != nil {
		t.Fatalf("enter %s as %s: %v", name, s.ID, e)
	}
	return p
}

// leave is what a POST does when it is done: Release, then RemoveIdle.
func leave(n *Node, p *Pod, s *Sender) {
	p.Release(s)
	n.RemoveIdle(p)
}

// TestTableFindOrCreate: the first Enter opens the pod, ready; the next
// finds the same one; Lookup, Pods and mcpp_pods say so; once nothing
// keeps it the pod is removed and closed, and the count goes back.
func TestTableFindOrCreate(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	if n.Lookup("lab") != nil || len(n.Pods()) != 0 {
		t.Fatal("a pod before any Enter")
	}
	alice, bob := publisher(n, "alice"), publisher(n, "bob")
	p := enter(t, n, "lab", alice)
	if !p.Ready() {
		t.Fatal("Enter returned a pod that has not read its past")
	}
	if q := enter(t, n, "lab", bob); q != p {
		t.Fatal("a second Enter opened a second pod of the same name")
	}
	if n.Lookup("lab") != p || len(n.Pods()) != 1 {
		t.Fatalf("Lookup %p, Pods %d: want the pod, 1", n.Lookup("lab"), len(n.Pods()))
	}
	other := enter(t, n, "other", alice)
	if other == p || len(n.Pods()) != 2 || valueOf(t, n.Metrics.PodsOpen) != 2 {
		t.Fatalf("two names: %d pods, mcpp_pods %v", len(n.Pods()), valueOf(t, n.Metrics.PodsOpen))
	}
	leave(n, p, alice)
	if n.Lookup("lab") != p || p.Dead() {
		t.Fatal("the pod was removed while bob still publishes into it")
	}
	leave(n, p, bob)
	leave(n, other, alice)
	if n.Lookup("lab") != nil || !p.Dead() || len(n.Pods()) != 0 || valueOf(t, n.Metrics.PodsOpen) != 0 {
		t.Fatalf("nothing keeps the pods: Lookup %p, dead %v, %d pods, mcpp_pods %v",
			n.Lookup("lab"), p.Dead(), len(n.Pods()), valueOf(t, n.Metrics.PodsOpen))
	}
}

// TestTableConcurrentFinders: finders of one name at once all get the one
// pod the first opened; then finders that come and go while others remove
// the pod each get a live pod of that name, the table's, never one removed
// under them.
func TestTableConcurrentFinders(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	const finders = 32
	pods := make([]*Pod, finders)
	senders := make([]*Sender, finders)
	var wg sync.WaitGroup
	for i := range finders {
		senders[i] = publisher(n, fmt.Sprint("p", i))
		wg.Go(func() {
			p, e := n.Enter(context.Background(), "lab", func(p *Pod) (bool, *envelope.Error) { return p.Acquire(senders[i]) })
			if e != nil {
				t.Error(e)
			}
			pods[i] = p
		})
	}
	wg.Wait()
	for i, p := range pods {
		if p != pods[0] {
			t.Fatalf("finder %d got another pod than finder 0", i)
		}
	}
	if len(n.Pods()) != 1 {
		t.Fatalf("%d pods of one name", len(n.Pods()))
	}
	for i, p := range pods {
		leave(n, p, senders[i])
	}
	if n.Lookup("lab") != nil {
		t.Fatal("the pod outlived its last publisher")
	}

	// Churn: each finder enters, checks it holds the table's live pod,
	// and leaves, removing the pod when it was the last.
	errs := make(chan error, finders)
	for i := range finders {
		wg.Go(func() {
			s := senders[i]
			for range 50 {
				p, e := n.Enter(context.Background(), "lab", func(p *Pod) (bool, *envelope.Error) { return p.Acquire(s) })
				if e != nil {
					errs <- e
					return
				}
				if p.Dead() || n.Lookup("lab") != p {
					errs <- errors.New("Enter returned a pod removed from the table while it was held")
					return
				}
				leave(n, p, s)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(n.Pods()) != 0 || valueOf(t, n.Metrics.PodsOpen) != 0 {
		t.Fatalf("after the churn: %d pods, mcpp_pods %v", len(n.Pods()), valueOf(t, n.Metrics.PodsOpen))
	}
}

// TestTableRemovedWhileLookedUp: a pod removed between the table's answer
// and the join (the join says dead) is looked up again, and the join made
// in a new pod.
func TestTableRemovedWhileLookedUp(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	s := publisher(n, "alice")
	var seen []*Pod
	p, e := n.Enter(context.Background(), "lab", func(p *Pod) (bool, *envelope.Error) {
		seen = append(seen, p)
		if len(seen) == 1 {
			n.RemoveIdle(p) // idle: another's leave removes it now
		}
		return p.Acquire(s)
	})
	if e != nil {
		t.Fatal(e)
	}
	if len(seen) != 2 || seen[0] == seen[1] || p != seen[1] || !seen[0].Dead() || p.Dead() || n.Lookup("lab") != p {
		t.Fatalf("joins %d, the pod returned the second (%v), the first dead (%v), the second live and the table's (%v)",
			len(seen), len(seen) == 2 && p == seen[1], seen[0].Dead(), !p.Dead() && n.Lookup("lab") == p)
	}
	leave(n, p, s)
}

// TestTableIdlePodOpensAgain: a pod removed once idle (after its last
// publisher, or at the janitor's sweep: Tick) is opened anew by the next
// Enter, with its history: a member that joins it is replayed what was
// sent before.
func TestTableIdlePodOpensAgain(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	alice := publisher(n, "alice")
	first := enter(t, n, "lab", alice)
	b, _ := json.Marshal(chat("m0", 7))
	first.Handle(alice, nil, b, false)
	if rs := resultsOf(alice); len(rs) != 1 || rs[0].Error != nil {
		t.Fatalf("the envelope was not accepted: %+v", rs)
	}
	leave(n, first, alice)
	if n.Lookup("lab") != nil || !first.Dead() {
		t.Fatal("an idle pod was kept")
	}

	second := enter(t, n, "lab", alice)
	if second == first || second.Dead() {
		t.Fatal("the next Enter returned the removed pod")
	}
	bob := join(t, second, "bob", joinOpts{want: HistoryWant{N: -1}})
	welcome := bob.next()
	hist, _ := welcome["payload"].(map[string]any)["history"].(map[string]any)
	if replayed, _ := hist["replayed"].(float64); replayed != 1 {
		t.Fatalf("the pod opened again replays %v envelopes: %v", hist["replayed"], welcome)
	}
	if v := bob.nextOf(); v["id"] != "m0" || payloadN(v) != 7 {
		t.Fatalf("replayed %v, want m0", v)
	}
	leave(n, second, alice)

	// The sweep: Tick removes a pod that went idle without a RemoveIdle
	// of its own (here: bob's leave, with no RemoveIdle after it), and
	// keeps one with a member.
	keep := enter(t, n, "kept", alice)
	n.Tick(time.Now(), 0, true)
	if n.Lookup("lab") != second || n.Lookup("kept") != keep {
		t.Fatal("the sweep removed a pod with a member, or a publisher")
	}
	second.Leave(bob.r)
	leave(n, keep, alice)
	n.Tick(time.Now(), 0, false)
	if n.Lookup("lab") != second {
		t.Fatal("a tick that is no sweep removed a pod")
	}
	n.Tick(time.Now(), 0, true)
	if n.Lookup("lab") != nil || !second.Dead() || len(n.Pods()) != 0 {
		t.Fatal("the sweep kept an idle pod")
	}
}

// TestTableMaxPods: at Config.MaxPods open pods Enter refuses a new name
// with over_capacity and the documented message, finds the open ones,
// and opens the new one once another went.
func TestTableMaxPods(t *testing.T) {
	n, _ := testNode(t, 100, func(c *Config) { c.MaxPods = 2 })
	s := publisher(n, "alice")
	a := enter(t, n, "a", s)
	enter(t, n, "b", s)
	_, e := n.Enter(context.Background(), "c", func(p *Pod) (bool, *envelope.Error) {
		t.Error("joined a pod over the limit")
		return p.Acquire(s)
	})
	if e == nil || e.Code != wire.CodeOverCapacity || e.Message != "the gateway serves 2 pods, the limit" {
		t.Fatalf("a third pod: %v, want over_capacity: the gateway serves 2 pods, the limit", e)
	}
	if n.Lookup("c") != nil || len(n.Pods()) != 2 {
		t.Fatal("the refused pod is in the table")
	}
	bob := publisher(n, "bob")
	if enter(t, n, "a", bob) != a {
		t.Fatal("an open pod was not found at the limit")
	}
	leave(n, a, s)
	if n.Lookup("a") != a {
		t.Fatal("the pod went while bob publishes into it")
	}
	leave(n, a, bob)
	enter(t, n, "c", s)
}

// TestTableRefusals: a join's own refusal (a ban) comes back as it is;
// a node cut off from the history stream's quorum refuses with no_quorum
// before it opens anything; a pod that lost its order is forgotten, and
// the next Enter opens it anew.
func TestTableRefusals(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	s := publisher(n, "alice")
	p := enter(t, n, "lab", s)
	p.AdminKick(wire.AdminID, wire.Kick{Participant: "mallory", BanMS: 60_000})
	mallory := publisher(n, "mallory")
	if _, e := n.Enter(context.Background(), "lab", func(p *Pod) (bool, *envelope.Error) { return p.Acquire(mallory) }); e == nil || e.Code != wire.CodeForbidden {
		t.Fatalf("a banned publisher entered: %v", e)
	}

	p.orderLost(errors.New("test"))
	if n.Lookup("lab") != nil || !p.Dead() {
		t.Fatal("a pod that lost its order stayed in the table")
	}
	if q := enter(t, n, "lab", s); q == p || q.Dead() {
		t.Fatal("the next Enter did not open the pod anew")
	}

	n.watching.Store(true)
	n.cutSince.Store(time.Now().UnixNano())
	_, e := n.Enter(context.Background(), "cut", func(p *Pod) (bool, *envelope.Error) { return p.Acquire(s) })
	n.cutSince.Store(0)
	if e == nil || e.Code != wire.CodeNoQuorum || n.Lookup("cut") != nil {
		t.Fatalf("a node with no quorum: %v, want no_quorum and no pod", e)
	}
}

// TestTableWaitsForHistory: while the history stream is not open
// (HistoryOpen, a cluster forming) Enter opens no pod; it goes on once
// the stream is.
func TestTableWaitsForHistory(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	open := make(chan struct{})
	n.HistoryOpen = open
	s := publisher(n, "alice")
	entered := make(chan *Pod)
	go func() {
		p, e := n.Enter(context.Background(), "lab", func(p *Pod) (bool, *envelope.Error) { return p.Acquire(s) })
		if e != nil {
			t.Error(e)
		}
		entered <- p
	}()
	select {
	case <-entered:
		t.Fatal("Enter went on before the history stream was open")
	case <-time.After(100 * time.Millisecond):
	}
	if n.Lookup("lab") != nil {
		t.Fatal("a pod was opened before the history stream")
	}
	close(open)
	select {
	case p := <-entered:
		if p == nil || n.Lookup("lab") != p {
			t.Fatal("Enter did not open the pod once the stream was open")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Enter still waits after the stream opened")
	}
}
