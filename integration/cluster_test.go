package integration

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// startCluster starts n gateway processes whose embedded NATS servers form
// one cluster on loopback, and waits until an envelope crosses from the
// first node to every other.
func startCluster(t *testing.T, n int, extra ...string) []*gatewayProc {
	t.Helper()
	return startClusterEach(t, n, nil, extra...)
}

// startClusterEach is startCluster with perNode's arguments for node i as
// well (none when perNode is nil).
func startClusterEach(t *testing.T, n int, perNode func(i int) []string, extra ...string) []*gatewayProc {
	t.Helper()
	cports := make([]int, n)
	var routes []string
	for i := range cports {
		cports[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[i]))
	}
	nodes := make([]*gatewayProc, n)
	for i := range nodes {
		args := append([]string{"--listen", "127.0.0.1:0", "--cluster-name", "mcpp-test",
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", cports[i]), "--routes", strings.Join(routes, ","),
			"--cluster-heartbeat", "200ms", "--log-level", "debug", "--rate", "10000", "--burst", "10000"}, extra...)
		if perNode != nil {
			args = append(args, perNode(i)...)
		}
		nodes[i] = startGatewayProc(t, nil, args...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d's log:\n%s", i+1, n.stderr)
			}
		}
	})
	// A node serves pods once the cluster's JetStream has formed and the
	// history stream is open (its /healthz says so).
	for _, n := range nodes {
		n.waitHealthy(60 * time.Second)
	}
	waitConnected(t, nodes)
	return nodes
}

// waitConnected waits until a probe envelope sent on the first node
// reaches a probe participant on every other node.
func waitConnected(t *testing.T, nodes []*gatewayProc) {
	t.Helper()
	for i := 1; i < len(nodes); i++ {
		pod := fmt.Sprintf("probe-%d", i)
		rx := nodes[i].gw.dial(t, pod, "probe-rx", "")
		tx := nodes[0].gw.dial(t, pod, "probe-tx", "")
		got := false
		for try := 0; try < 100 && !got; try++ {
			tx.send(map[string]any{"kind": "probe", "id": fmt.Sprintf("p%d", try)})
			for m := rx.next(100 * time.Millisecond); m != nil; m = rx.next(10 * time.Millisecond) {
				if m.kind() == "probe" {
					got = true
				}
			}
		}
		if !got {
			t.Fatalf("node %d never received from node 0:\n%s", i, nodes[i].stderr)
		}
		_ = rx.conn.Close(websocket.StatusNormalClosure, "")
		_ = tx.conn.Close(websocket.StatusNormalClosure, "")
	}
}

// welcomeIDs lists the ids of a welcome's participants.
func welcomeIDs(w msg) []string { return idsOf(w.payload()["participants"]) }

// expectPresence skips envelopes until a presence event of this kind about
// id, failing after 10s.
func (c *client) expectPresence(event, id string, within time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for time.Now().Before(deadline) {
		m := c.next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.kind() == "system/presence" && m.payload()["event"] == event {
			if p, _ := m.payload()["participant"].(map[string]any); p["id"] == id {
				return time.Since(start)
			}
		}
	}
	c.t.Fatalf("%s: no presence %s of %s within %v", c.ID, event, id, within)
	return 0
}

// collectSeqs reads c until it has n envelopes of kind and returns their
// sequence numbers in the order received.
func collectSeqs(t *testing.T, c *client, kind string, n int, within time.Duration) []int {
	t.Helper()
	var out []int
	deadline := time.Now().Add(within)
	for len(out) < n && time.Now().Before(deadline) {
		m := c.next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.kind() == kind {
			out = append(out, seqOf(m))
		}
	}
	return out
}

func TestClusterThreeNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	n1, n2, n3 := nodes[0].gw, nodes[1].gw, nodes[2].gw

	// A welcome lists the participants of every node; presence crosses nodes.
	alice := n1.dial(t, "c3", "alice", "")
	bob := n2.dial(t, "c3", "bob", "")
	if ids := welcomeIDs(bob.Welcome); strings.Join(ids, ",") != "alice" {
		t.Fatalf("bob's welcome lists %v, want alice (on another node)", ids)
	}
	alice.expectPresence("join", "bob", 5*time.Second)
	carol := n3.dial(t, "c3", "carol", "")
	if ids := welcomeIDs(carol.Welcome); !sameSet(ids, []string{"alice", "bob"}) {
		t.Fatalf("carol's welcome lists %v, want alice and bob", ids)
	}
	alice.expectPresence("join", "carol", 5*time.Second)
	bob.expectPresence("join", "carol", 5*time.Second)

	// Every envelope reaches every other node's participants exactly once,
	// in the order sent.
	const n = 300
	for i := 0; i < n; i++ {
		alice.send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
	}
	alice.send(map[string]any{"kind": "marker"})
	for _, c := range []*client{bob, carol} {
		seqs := collectSeqs(t, c, "seq", n, 10*time.Second)
		if len(seqs) != n {
			t.Fatalf("%s got %d of %d envelopes", c.ID, len(seqs), n)
		}
		for i, s := range seqs {
			if s != i {
				t.Fatalf("%s: envelope %d has seq %d: not in order", c.ID, i, s)
			}
		}
		if m := c.nextNonPresence(5 * time.Second); m == nil || m.kind() != "marker" {
			t.Fatalf("%s: after the %d envelopes got %v, want the marker (a duplicate?)", c.ID, n, m)
		}
	}
	carol.send(map[string]any{"kind": "back", "id": "from-carol"})
	alice.expectEnvelope("back", "from-carol")
	bob.expectEnvelope("back", "from-carol")

	// The context registry is built on every node from the stream: a
	// context created on node 1 conflicts on node 3.
	alice.send(map[string]any{"kind": "note", "id": "n1", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	carol.expectEnvelope("note", "n1")
	eventually(t, 5*time.Second, "r1 known on node 3", func() bool {
		carol.send(map[string]any{"kind": "gateway/contexts", "id": "q", "payload": map[string]any{"id": "r1"}})
		m := carol.nextOf()
		list, _ := m.payload()["contexts"].([]any)
		return len(list) == 1
	})
	carol.send(map[string]any{"kind": "note", "id": "clash", "context": map[string]any{"id": "r1", "type": "workflow"}})
	if e := carol.nextOf(); e.errCode() != "context_conflict" || e.str("correlation_id") != "clash" {
		t.Fatalf("a conflicting context on another node: %v", e)
	}

	// The same participant on another node replaces the old connection
	// there (4000), and nobody hears of a presence change.
	bob2 := n3.dial(t, "c3", "bob", "")
	if code := bob.waitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("bob's old connection closed with %d, want 4000", code)
	}
	if ids := welcomeIDs(bob2.Welcome); !sameSet(ids, []string{"alice", "carol"}) {
		t.Fatalf("the replacing bob's welcome lists %v", ids)
	}
	alice.send(map[string]any{"kind": "after-replace", "id": "ar"})
	for _, c := range []*client{bob2, carol} {
		if m := c.next(5 * time.Second); m == nil || m.kind() != "after-replace" {
			t.Fatalf("%s: got %v, want the next envelope and no presence", c.ID, m)
		}
	}
	carol.send(map[string]any{"kind": "x", "id": "x1"})
	if m := alice.next(5 * time.Second); m == nil || m.kind() != "x" {
		t.Fatalf("alice: got %v, want the next envelope and no presence", m)
	}
}

func TestClusterNodeKilled(t *testing.T) {
	nodes := startCluster(t, 3)
	n1, n2, n3 := nodes[0].gw, nodes[1].gw, nodes[2].gw
	alice := n1.dial(t, "k3", "alice", "")
	dave := n2.dial(t, "k3", "dave", "")
	carol := n3.dial(t, "k3", "carol", "")
	alice.expectPresence("join", "dave", 5*time.Second)
	alice.expectPresence("join", "carol", 5*time.Second)
	carol.send(map[string]any{"kind": "hello"})
	dave.expectKind("system/presence")
	dave.expectKind("hello")

	// Alice streams while node 2 dies with SIGKILL.
	const total = 400
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i++ {
			alice.send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := nodes[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// Carol keeps getting every envelope, in order, and hears that dave left.
	var seqs []int
	leftAfter := time.Duration(0)
	deadline := time.Now().Add(20 * time.Second)
	for (len(seqs) < total || leftAfter == 0) && time.Now().Before(deadline) {
		m := carol.next(time.Until(deadline))
		if m == nil {
			break
		}
		switch m.kind() {
		case "seq":
			seqs = append(seqs, seqOf(m))
		case "system/presence":
			if p, _ := m.payload()["participant"].(map[string]any); p["id"] == "dave" && m.payload()["event"] == "leave" {
				leftAfter = time.Since(killed)
			}
		}
	}
	wg.Wait()
	if len(seqs) != total {
		t.Fatalf("carol got %d of %d envelopes while node 2 died", len(seqs), total)
	}
	for i, s := range seqs {
		if s != i {
			t.Fatalf("carol: envelope %d has seq %d", i, s)
		}
	}
	if leftAfter == 0 {
		t.Fatal("carol never heard that dave (on the dead node) left")
	}
	t.Logf("dave announced as gone %v after node 2 was killed (heartbeat 200ms, 3 missed)", leftAfter.Round(time.Millisecond))
	alice.expectPresence("leave", "dave", 5*time.Second)

	// Dave reconnects to node 1 and carries on.
	dave2 := n1.dial(t, "k3", "dave", "")
	if ids := welcomeIDs(dave2.Welcome); !sameSet(ids, []string{"alice", "carol"}) {
		t.Fatalf("dave's new welcome lists %v", ids)
	}
	carol.expectPresence("join", "dave", 5*time.Second)
	dave2.send(map[string]any{"kind": "back", "id": "dave-back"})
	carol.expectEnvelope("back", "dave-back")
	carol.send(map[string]any{"kind": "welcome-back", "id": "wb"})
	// With history on, a node delivers a pod's envelopes in the history's
	// order, from where its delivery is: while node 1 catches up after the
	// failover, dave may first get alice's last envelopes, accepted a
	// moment before he joined (never one twice: their seq say so).
	for {
		m := dave2.nextOf()
		if m.kind() == "seq" {
			continue
		}
		if m.kind() != "welcome-back" || m.str("id") != "wb" {
			t.Fatalf("dave: got %v, want welcome-back", m)
		}
		break
	}
}

// TestClusterExternalNATS points two gateways at one external nats-server,
// built from the module the gateway embeds.
func TestClusterExternalNATS(t *testing.T) {
	bin := filepath.Join(binDir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	port := freePort(t)
	// With JetStream: the gateways keep the pods' history in it.
	ns := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Process.Kill(); _ = ns.Wait() })
	eventually(t, 10*time.Second, "nats-server listening", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	// A nats-server carries 1 MB messages by default: a gateway whose
	// envelopes could make larger frames refuses to start.
	if code, out := limRunFails(t, nil, "--listen", "127.0.0.1:0", "--nats-url", url); code == 0 || !strings.Contains(out, "max_payload") {
		t.Fatalf("a gateway with 1 MiB envelopes on a 1 MB NATS started (exit %d):\n%s", code, out)
	}
	a := startGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--nats-url", url, "--cluster-heartbeat", "200ms", "--max-message-bytes", "262144")
	b := startGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--nats-url", url, "--cluster-heartbeat", "200ms", "--max-message-bytes", "262144")
	waitConnected(t, []*gatewayProc{a, b})

	alice := a.gw.dial(t, "ext", "alice", "")
	bob := b.gw.dial(t, "ext", "bob", "")
	if ids := welcomeIDs(bob.Welcome); strings.Join(ids, ",") != "alice" {
		t.Fatalf("bob's welcome lists %v, want alice", ids)
	}
	alice.expectPresence("join", "bob", 5*time.Second)
	for i := 0; i < 50; i++ {
		bob.send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
	}
	seqs := collectSeqs(t, alice, "seq", 50, 10*time.Second)
	for i, s := range seqs {
		if s != i {
			t.Fatalf("alice: envelope %d has seq %d", i, s)
		}
	}
	if len(seqs) != 50 {
		t.Fatalf("alice got %d of 50", len(seqs))
	}
	_ = bob.conn.Close(websocket.StatusNormalClosure, "")
	alice.expectPresence("leave", "bob", 5*time.Second)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		if m[s]--; m[s] < 0 {
			return false
		}
	}
	return true
}
