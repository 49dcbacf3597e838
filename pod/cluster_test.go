package pod

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/wire"
)

// The pod across several nodes (OrderStream), on the memory broker and
// stream: streamLog, the node's follower and tails, the dispatchers and
// the remote members, with no NATS server.

// clusterTraffic runs three nodes of one pod, a sender and a reader on
// each: each sender sends perSender envelopes, every fifth of them
// ephemeral (a live frame: its body outside the stream, its marker in
// it), while during (when not nil) runs. Every member must receive every
// envelope of the others (and its own, with echo) once, and all of them
// in one order: each sender's envelopes, durable and ephemeral, in the
// order it sent them.
func clusterTraffic(t *testing.T, perSender int, during func(c *testCluster)) *testCluster {
	c := newTestCluster(t, 3)
	var senders, readers []*member
	for i, n := range c.nodes {
		p := c.open(n, "lab")
		senders = append(senders, c.join(p, fmt.Sprint("s", i), joinOpts{query: "echo=true"}))
		readers = append(readers, c.join(p, fmt.Sprint("r", i), joinOpts{}))
	}
	all := append(slices.Clone(senders), readers...)
	views := map[*member]*memberView{}
	for _, m := range all {
		views[m] = drain(t, m, 200*time.Millisecond)
	}
	var wg sync.WaitGroup
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perSender {
				id := fmt.Sprintf("s%d-%d", i, n)
				if n%5 == 4 {
					s.send(ephemeral(id, n))
				} else {
					s.send(chat(id, n))
				}
				if n%10 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	if during != nil {
		during(c)
	}
	wg.Wait()
	want := len(senders) * perSender
	var order []string
	for _, m := range all {
		v := views[m]
		deadline := time.Now().Add(20 * time.Second)
		for len(v.envelopes) < want && time.Now().Before(deadline) {
			v.more(t, m, 100*time.Millisecond)
		}
		v.more(t, m, 200*time.Millisecond) // and nothing more
		ids := make([]string, 0, len(v.envelopes))
		last := map[string]int{}
		for _, e := range v.envelopes {
			ids = append(ids, e["id"].(string))
			from, n := e["from"].(string), payloadN(e)
			if prev, ok := last[from]; ok && n != prev+1 || !ok && n != 0 {
				t.Fatalf("%s: %s's envelope %d after its %d: lost, twice or out of order", m.id, from, n, prev)
			}
			last[from] = n
		}
		if len(ids) != want {
			t.Fatalf("%s received %d envelopes, want %d", m.id, len(ids), want)
		}
		if order == nil {
			order = ids
		} else if !slices.Equal(order, ids) {
			t.Fatalf("%s received the pod's envelopes in another order than %s", m.id, all[0].id)
		}
		if v.others[m.id] || len(v.others) != len(all)-1 {
			t.Fatalf("%s sees %v in the pod, want the %d others", m.id, v.others, len(all)-1)
		}
	}
	for i, n := range c.nodes {
		if lost := counted(n.Metrics.LiveLost); lost != 0 {
			t.Errorf("%s counted %v live frames lost", n.ID, lost)
		}
		if c.logs[i].has("lost") || c.logs[i].has("never came") {
			t.Errorf("%s logged a loss", n.ID)
		}
	}
	return c
}

// TestClusterOneOrder: envelopes and ephemeral envelopes sent on three
// nodes at once reach every member on every node once, in one order.
func TestClusterOneOrder(t *testing.T) {
	clusterTraffic(t, 200, nil)
}

// TestClusterFailover: the stream's leader goes away while three nodes
// send, after storing some messages whose acknowledgements it took with
// it. Each node's writer holds what comes, sends again, in order, what
// was not acknowledged, and the stream keeps one of each; the followers
// go on where they were. Nothing is lost, nothing comes twice, every
// node delivers one order, and the history holds each envelope once.
func TestClusterFailover(t *testing.T) {
	c := clusterTraffic(t, 300, func(c *testCluster) {
		time.Sleep(20 * time.Millisecond)
		c.stream.leaderGone(4)
		time.Sleep(300 * time.Millisecond)
		c.stream.leaderBack()
	})
	c.stream.mu.Lock()
	dups := c.stream.duplicates
	c.stream.mu.Unlock()
	if dups == 0 {
		t.Error("no message was sent again and found stored: the failover lost no acknowledgement")
	}
	held := 0
	for _, l := range c.logs {
		if l.has("holding what comes") {
			held++
		}
	}
	if held == 0 {
		t.Error("no writer held: the leader was not gone while they wrote")
	}
	seen := map[string]int{}
	err := c.stream.mem.Scan(context.Background(), []string{Subject("lab")}, 1, func(_ string, m history.StoredMsg) error {
		return history.Frames(m.Data, func(_ int, frame []byte) error {
			var meta envelope.Meta
			if _, err := envelope.DecodeFrame(frame, &meta); err != nil {
				return err
			}
			if meta.Kind == envelope.FrameEnvelope {
				seen[meta.ID]++
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("the history holds %s %d times", id, n)
		}
	}
	if want := 3 * 300 * 4 / 5; len(seen) != want {
		t.Errorf("the history holds %d envelopes, want %d (the ephemeral ones have markers only)", len(seen), want)
	}
}

// TestClusterLateBody: a live frame whose body was published before
// another node listened to the pod, and whose marker comes after a member
// joined there, reaches that member late, in its place: the node asks the
// node that accepted it. (Before, it waited 250 ms for the body, then
// logged "a live frame's body never came; it is not delivered".)
func TestClusterLateBody(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	s := c.join(c.open(a, "lab"), "sender", joinOpts{})
	s.next()
	c.stream.hold(a.ID) // a's markers wait: they come after what b does meanwhile
	s.send(ephemeral("e1", 1))
	s.send(chat("m2", 2))
	y := c.join(c.open(b, "lab"), "y", joinOpts{})
	if w := y.next(); !slices.Equal(harnessIDs(w), []string{"sender"}) {
		t.Fatalf("y's welcome: %v", w)
	}
	if v := s.next(); v["kind"] != wire.KindPresence {
		t.Fatalf("sender: %v, want y's join", v)
	}
	c.stream.release(a.ID)
	if v := y.next(); v["id"] != "e1" || payloadN(v) != 1 {
		t.Fatalf("y: %v, want e1, late, in its place", v)
	}
	if v := y.next(); v["id"] != "m2" {
		t.Fatalf("y: %v, want m2 after e1", v)
	}
	c.noneLost(t)
}

// TestClusterSenderOrderAcrossLifecycles: a sender's durable, ephemeral
// and durable envelopes reach a member on another node in the order they
// were sent, when its node's history writer packs them into the stream
// together (the stream busy with the one before): the entries and the
// live frame's marker go on two subjects, and the stream holds them in
// the pod's order, which every node delivers. (Before, the writer packed
// each subject apart, and the ephemeral envelope came after the durable
// one sent after it.)
func TestClusterSenderOrderAcrossLifecycles(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	s := c.join(c.open(a, "lab"), "sender", joinOpts{})
	y := c.join(c.open(b, "lab"), "y", joinOpts{})
	drain(t, s, 100*time.Millisecond)
	drain(t, y, 100*time.Millisecond)
	entered, goOn := c.stream.stall(a.ID)
	s.send(chat("d0", 0))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("node-a's writer did not send d0")
	}
	mark := a.Writer.Mark()
	s.send(chat("d1", 1))
	s.send(ephemeral("e2", 2))
	s.send(chat("d3", 3))
	for deadline := time.Now().Add(10 * time.Second); a.Writer.Mark() < mark+3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node-a's writer was handed %d of the 3 frames", a.Writer.Mark()-mark)
		}
	}
	goOn()
	var got []string
	for range 4 {
		got = append(got, y.next()["id"].(string))
	}
	if want := []string{"d0", "d1", "e2", "d3"}; !slices.Equal(got, want) {
		t.Fatalf("y received %v, want %v", got, want)
	}
}

// TestClusterDroppedBody: a body the broker dropped on its way to a node
// (a dispatcher behind by a whole queue) is asked for too.
func TestClusterDroppedBody(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	s := c.join(c.open(a, "lab"), "sender", joinOpts{})
	y := c.join(c.open(b, "lab"), "y", joinOpts{})
	drain(t, s, 100*time.Millisecond)
	drain(t, y, 100*time.Millisecond)
	c.bus.Drop(func(subject string, to *MemoryBroker) bool {
		return to == b.Broker && strings.HasPrefix(subject, livePrefix)
	})
	for i := range 20 {
		s.send(ephemeral(fmt.Sprint("e", i), i))
	}
	for i := range 20 {
		if v := y.next(); payloadN(v) != i {
			t.Fatalf("y: %v, want e%d", v, i)
		}
	}
	if lost := counted(b.Metrics.LiveLost); lost != 0 {
		t.Errorf("%v counted lost", lost)
	}
}

// TestClusterLiveFrameLostWithItsNode: a node that dies after the stream
// stored a live frame's marker, and before another node got its body,
// takes the body with it. The other node counts the loss, and tells the
// members the frame would have reached with a system/gap in its place;
// a member whose filter would not have taken it is told nothing.
func TestClusterLiveFrameLostWithItsNode(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pb := c.open(b, "lab")
	s := c.join(c.open(a, "lab"), "sender", joinOpts{})
	y := c.join(pb, "y", joinOpts{})
	z := c.join(pb, "z", joinOpts{query: "contexts=none"})
	for _, m := range []*member{s, y, z} {
		drain(t, m, 100*time.Millisecond)
	}
	c.bus.Drop(func(subject string, to *MemoryBroker) bool {
		return to == b.Broker && strings.HasPrefix(subject, livePrefix)
	})
	c.stream.hold(a.ID)
	s.send(map[string]any{"id": "e1", "kind": "note", "lifecycle": map[string]any{"mode": "ephemeral"},
		"context": map[string]any{"id": "r1", "type": "reasoning"}})
	s.send(map[string]any{"id": "x1", "kind": "after", "context": map[string]any{"id": "r1"}})
	a.Broker.Close() // a is gone: nobody answers for its bodies
	c.stream.release(a.ID)
	v := y.next()
	pl, _ := v["payload"].(map[string]any)
	if v["kind"] != wire.KindGap || pl["lost"] != wire.GapEnvelope || pl["id"] != "e1" || pl["from"] != "sender" || pl["context"] != "r1" {
		t.Fatalf("y: %v, want a system/gap for e1", v)
	}
	if v := y.next(); v["id"] != "x1" {
		t.Fatalf("y: %v, want x1 after the gap", v)
	}
	z.quiet(200 * time.Millisecond)
	if lost := counted(b.Metrics.LiveLost); lost != 1 {
		t.Fatalf("b counted %v live frames lost, want 1", lost)
	}
}

// TestClusterPresenceLostWithItsNode: a join whose body died with its
// node is told as a system/gap about presence, and the node counts its
// participant in (its capabilities unknown) until its node is found gone.
func TestClusterPresenceLostWithItsNode(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pa, pb := c.open(a, "lab"), c.open(b, "lab")
	y := c.join(pb, "y", joinOpts{})
	y.next()
	c.bus.Drop(func(subject string, to *MemoryBroker) bool {
		return to == b.Broker && strings.HasPrefix(subject, livePrefix)
	})
	c.stream.hold(a.ID)
	x := c.join(pa, "x", joinOpts{})
	x.next()
	a.Broker.Close()
	c.stream.release(a.ID)
	v := y.next()
	pl, _ := v["payload"].(map[string]any)
	if v["kind"] != wire.KindGap || pl["lost"] != wire.GapPresence || pl["event"] != wire.PresenceJoin || pl["participant"].(map[string]any)["id"] != "x" {
		t.Fatalf("y: %v, want a system/gap for x's join", v)
	}
	w := c.join(pb, "w", joinOpts{})
	if ids := harnessIDs(w.next()); !sameIDs(ids, "x", "y") {
		t.Fatalf("w's welcome lists %v, want x and y", ids)
	}
	if v := y.next(); v["kind"] != wire.KindPresence {
		t.Fatalf("y: %v, want w's join", v)
	}
	pb.RemoveNode(a.ID)
	v = y.next()
	pl, _ = v["payload"].(map[string]any)
	if v["kind"] != wire.KindPresence || pl["event"] != wire.PresenceLeave || pl["participant"].(map[string]any)["id"] != "x" {
		t.Fatalf("y: %v, want x's leave once its node is gone", v)
	}
}

// TestClusterJoinStorm: members join pods on two nodes, opening them
// there, while a member on a third sends ephemeral envelopes into each.
// Each member's welcome and the presence it then receives name exactly
// the pod's others; each joiner receives every ephemeral envelope the
// pod's order put after its join (the sender, echoing its own, sees that
// order), and none is lost, twice or out of order.
func TestClusterJoinStorm(t *testing.T) {
	const pods, joiners, sends = 6, 12, 40
	c := newTestCluster(t, 3)
	type podRun struct {
		name    string
		sender  *member
		mu      sync.Mutex
		open    map[*Node]*Pod
		members []*member
	}
	runs := make([]*podRun, pods)
	for i := range runs {
		r := &podRun{name: fmt.Sprint("storm-", i), open: map[*Node]*Pod{}}
		r.sender = c.join(c.open(c.nodes[0], r.name), "sender", joinOpts{query: "echo=true"})
		runs[i] = r
	}
	podAt := func(r *podRun, n *Node) *Pod {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.open[n] == nil {
			r.open[n] = c.open(n, r.name)
		}
		return r.open[n]
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range sends {
				r.sender.send(ephemeral(fmt.Sprint("e", n), n))
				time.Sleep(2 * time.Millisecond)
			}
		}()
		for j := range joiners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(j) * 3 * time.Millisecond)
				m := c.join(podAt(r, c.nodes[1+j%2]), fmt.Sprint("j", j), joinOpts{})
				r.mu.Lock()
				r.members = append(r.members, m)
				r.mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for _, r := range runs {
		everyone := map[string]bool{"sender": true}
		for _, m := range r.members {
			everyone[m.id] = true
		}
		// Done: it knows everyone, and has the last envelope (when it
		// joined before it).
		complete := func(self string, from int) func(v *memberView) bool {
			return func(v *memberView) bool {
				n := len(v.envelopes)
				return sameSet(v.others, everyone, self) && (from >= sends || n > 0 && payloadN(v.envelopes[n-1]) == sends-1)
			}
		}
		sv := drainUntil(t, r.sender, complete("sender", 0), 20*time.Millisecond)
		sent := make([]int, 0, sends)
		for _, e := range sv.envelopes {
			sent = append(sent, payloadN(e))
		}
		for i, n := range sent {
			if n != i {
				t.Fatalf("%s: the sender's own envelopes came back as %v", r.name, sent)
			}
		}
		if !sameSet(sv.others, everyone, "sender") {
			t.Errorf("%s: the sender sees %v", r.name, sv.others)
		}
		for _, m := range r.members {
			from, ok := sv.joinedAt[m.id]
			if !ok {
				t.Fatalf("%s: the sender was never told of %s", r.name, m.id)
			}
			v := drainUntil(t, m, complete(m.id, from), 20*time.Millisecond)
			if !sameSet(v.others, everyone, m.id) {
				t.Errorf("%s: %s sees %v, want the %d others", r.name, m.id, v.others, len(everyone)-1)
			}
			got := make([]int, 0, len(v.envelopes))
			for _, e := range v.envelopes {
				got = append(got, payloadN(e))
			}
			if len(got) < sends-from || len(got) > 0 && got[0] > from {
				t.Errorf("%s: %s received %v, want every one from %d on (its join's place)", r.name, m.id, got, from)
			}
			for i := 1; i < len(got); i++ {
				if got[i] != got[i-1]+1 {
					t.Errorf("%s: %s received %v: a hole or a duplicate", r.name, m.id, got)
					break
				}
			}
		}
	}
	c.noneLost(t)
}

// TestClusterRemoteMembers: a welcome lists the members of the other
// nodes (SyncMembers, then presence); the same participant joining on
// another node replaces its connection here (4000) and nobody is told;
// a node found gone takes its members with it, and the members here are
// told they left.
func TestClusterRemoteMembers(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pa, pb := c.open(a, "lab"), c.open(b, "lab")
	alice := c.join(pa, "alice", joinOpts{})
	alice.next()
	bob := c.join(pb, "bob", joinOpts{noRead: true})
	bobClosed := make(chan error, 1)
	go func() { bobClosed <- readUntilClosed(bob) }()
	if ids := harnessIDs(bob.next()); !sameIDs(ids, "alice") {
		t.Fatalf("bob's welcome lists %v", ids)
	}
	if v := alice.next(); v["kind"] != wire.KindPresence {
		t.Fatalf("alice: %v, want bob's join", v)
	}
	carol := c.join(pa, "carol", joinOpts{})
	if ids := harnessIDs(carol.next()); !sameIDs(ids, "alice", "bob") {
		t.Fatalf("carol's welcome lists %v", ids)
	}
	bob.next()   // carol's join
	alice.next() // carol's join

	// bob again, on a: the connection on b is replaced.
	bob2 := c.join(pa, "bob", joinOpts{})
	if ids := harnessIDs(bob2.next()); !sameIDs(ids, "alice", "carol") {
		t.Fatalf("the new bob's welcome lists %v", ids)
	}
	if err := <-bobClosed; websocketCode(err) != int(wire.CloseReplaced) {
		t.Fatalf("bob's old connection: %v, want 4000", err)
	}
	alice.send(chat("m1", 1))
	for _, m := range []*member{bob2, carol} {
		if v := m.next(); v["id"] != "m1" {
			t.Fatalf("%s: %v, want m1 and no presence", m.id, v)
		}
	}

	// b is gone: its members leave, at a's members' eyes. (It has none
	// now: a member of b joined before.)
	dave := c.join(pb, "dave", joinOpts{})
	dave.next()
	for _, m := range []*member{alice, bob2, carol} {
		if v := m.nextKind(wire.KindPresence); v["payload"].(map[string]any)["participant"].(map[string]any)["id"] != "dave" {
			t.Fatalf("%s: %v, want dave's join", m.id, v)
		}
	}
	pa.RemoveNode(b.ID)
	for _, m := range []*member{alice, bob2, carol} {
		v := m.next()
		pl, _ := v["payload"].(map[string]any)
		if v["kind"] != wire.KindPresence || pl["event"] != wire.PresenceLeave || pl["participant"].(map[string]any)["id"] != "dave" || pl["reason"] == "" {
			t.Fatalf("%s: %v, want dave's leave, with its reason", m.id, v)
		}
	}
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "bob", "carol") {
		t.Fatalf("a's pod lists %v", ids)
	}
}

// TestCoreLogAcrossNodes: without history (OrderCore) each node delivers
// what it accepts at once and what the others accept as the broker brings
// it, on the pod's core subject, through the dispatchers.
func TestCoreLogAcrossNodes(t *testing.T) {
	bus := NewMemoryBus()
	nodes := make([]*Node, 2)
	for i := range nodes {
		n := &Node{ID: fmt.Sprint("core-", i), Config: testConfig(0), Ordering: OrderCore, Broker: bus.Broker(),
			Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			Buckets: limits.NewBucketSet(limits.Rate{Per: 1e6, Burst: 1e6}, limits.Rate{Per: 1e6, Burst: 1e6})}
		n.Start()
		t.Cleanup(n.Stop)
		nodes[i] = n
	}
	pa, pb := openPod(t, nodes[0], "lab"), openPod(t, nodes[1], "lab")
	alice := join(t, pa, "alice", joinOpts{})
	bob := join(t, pb, "bob", joinOpts{})
	alice.next()
	bob.next()
	if v := alice.next(); v["kind"] != wire.KindPresence {
		t.Fatalf("alice: %v, want bob's join", v)
	}
	for i := range 100 {
		alice.send(chat(fmt.Sprint("m", i), i))
	}
	// alice's join may reach bob's node after bob's welcome (the broker
	// delivers on its own goroutines, as NATS does): told then.
	for i := range 100 {
		if v := bob.nextKind("chat"); payloadN(v) != i {
			t.Fatalf("bob: %v, want m%d", v, i)
		}
	}
	bob.send(chat("back", 7))
	if v := alice.next(); v["id"] != "back" {
		t.Fatalf("alice: %v, want bob's", v)
	}
	// Closed, a pod hears nothing more: its subscription is gone.
	pb.Close()
	alice.send(chat("late", 8))
	bob.quiet(100 * time.Millisecond)
}

// harnessIDs are the ids a welcome lists.
func harnessIDs(w map[string]any) []string {
	var out []string
	pl, _ := w["payload"].(map[string]any)
	list, _ := pl["participants"].([]any)
	for _, p := range list {
		out = append(out, p.(map[string]any)["id"].(string))
	}
	slices.Sort(out)
	return out
}

func identityIDs(ids []wire.Identity) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.ID)
	}
	slices.Sort(out)
	return out
}

func sameIDs(got []string, want ...string) bool {
	slices.Sort(want)
	return slices.Equal(got, want)
}

// sameSet reports whether others is everyone but self.
func sameSet(others, everyone map[string]bool, self string) bool {
	if others[self] || len(others) != len(everyone)-1 {
		return false
	}
	for id := range others {
		if !everyone[id] {
			return false
		}
	}
	return true
}

// nextKind skips what is not of kind and returns the next of it.
func (m *member) nextKind(kind string) map[string]any {
	m.t.Helper()
	for {
		if v := m.next(); v["kind"] == kind {
			return v
		}
	}
}

// counted is a counter's value.
func counted(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
