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

	"github.com/mcpp/gateway/integration/internal/harness"
)

// startCluster starts n gateway processes whose embedded NATS servers form
// one cluster on loopback, and waits until an envelope crosses from the
// first node to every other.
func startCluster(t *testing.T, n int, extra ...string) []*harness.GatewayProc {
	t.Helper()
	return startClusterEach(t, n, nil, extra...)
}

// tryStartCluster starts the nodes of startClusterEach on cluster ports
// that were free a moment ago, and stops them when one cannot start (one
// of those ports was taken meanwhile: startClusterEach tries others).
func tryStartCluster(t *testing.T, n int, perNode func(i int) []string, extra ...string) ([]*harness.GatewayProc, error) {
	t.Helper()
	cports := make([]int, n)
	var routes []string
	for i := range cports {
		cports[i] = harness.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[i]))
	}
	nodes := make([]*harness.GatewayProc, n)
	for i := range nodes {
		args := append([]string{"--listen", "127.0.0.1:0", "--cluster-name", "mcpp-test",
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", cports[i]), "--routes", strings.Join(routes, ","),
			"--cluster-heartbeat", "200ms", "--log-level", "debug", "--rate", "10000", "--burst", "10000"}, extra...)
		if perNode != nil {
			args = append(args, perNode(i)...)
		}
		var err error
		if nodes[i], err = harness.TryStartGatewayProc(t, nil, args...); err != nil {
			for _, started := range nodes[:i+1] {
				started.Stop()
			}
			return nil, err
		}
	}
	return nodes, nil
}

// startClusterEach is startCluster with perNode's arguments for node i as
// well (none when perNode is nil).
func startClusterEach(t *testing.T, n int, perNode func(i int) []string, extra ...string) []*harness.GatewayProc {
	t.Helper()
	var nodes []*harness.GatewayProc
	for try := 1; ; try++ {
		var err error
		if nodes, err = tryStartCluster(t, n, perNode, extra...); err == nil {
			break
		} else if !harness.PortTaken(err) || try == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d's log:\n%s", i+1, n.Stderr)
			}
		}
	})
	// A node serves pods once the cluster's JetStream has formed and the
	// history stream is open (its /healthz says so).
	for _, n := range nodes {
		n.WaitHealthy(60 * time.Second)
	}
	waitConnected(t, nodes)
	return nodes
}

// probeTokens are the token file entries of waitConnected's probes, for a
// cluster whose nodes require tokens.
const probeTokens = `{"token": "probe-rx-t", "participant": "probe-rx", "capabilities": ["probe"], "pods": ["probe-*"]},
  {"token": "probe-tx-t", "participant": "probe-tx", "capabilities": ["probe"], "pods": ["probe-*"]}`

// waitConnected waits until a probe envelope sent on the first node
// reaches a probe participant on every other node.
func waitConnected(t *testing.T, nodes []*harness.GatewayProc) {
	t.Helper()
	for i := 1; i < len(nodes); i++ {
		pod := fmt.Sprintf("probe-%d", i)
		// The tokens name the probes where the nodes require tokens
		// (tokens ProbeTokens); in open mode they are ignored.
		rx := nodes[i].GW.Dial(t, pod, "probe-rx", "token=probe-rx-t")
		tx := nodes[0].GW.Dial(t, pod, "probe-tx", "token=probe-tx-t")
		got := false
		for try := 0; try < 100 && !got; try++ {
			tx.Send(map[string]any{"kind": "probe", "id": fmt.Sprintf("p%d", try)})
			for m := rx.Next(100 * time.Millisecond); m != nil; m = rx.Next(10 * time.Millisecond) {
				if m.Kind() == "probe" {
					got = true
				}
			}
		}
		if !got {
			t.Fatalf("node %d never received from node 0:\n%s", i, nodes[i].Stderr)
		}
		_ = rx.Conn.Close()
		_ = tx.Conn.Close()
	}
}

// welcomeIDs lists the ids of a welcome's participants.
func welcomeIDs(w harness.Msg) []string { return harness.IDsOf(w.Payload()["participants"]) }

// collectSeqs reads c until it has n envelopes of kind and returns their
// sequence numbers in the order received.
func collectSeqs(t *testing.T, c *harness.Client, kind string, n int, within time.Duration) []int {
	t.Helper()
	var out []int
	deadline := time.Now().Add(within)
	for len(out) < n && time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == kind {
			out = append(out, harness.SeqOf(m))
		}
	}
	return out
}

func TestClusterThreeNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	n1, n2, n3 := nodes[0].GW, nodes[1].GW, nodes[2].GW

	// A welcome lists the participants of every node; presence crosses nodes.
	alice := n1.Dial(t, "c3", "alice", "")
	bob := n2.Dial(t, "c3", "bob", "")
	if ids := welcomeIDs(bob.Welcome); strings.Join(ids, ",") != "alice" {
		t.Fatalf("bob's welcome lists %v, want alice (on another node)", ids)
	}
	alice.AwaitPresence("join", "bob", 5*time.Second)
	carol := n3.Dial(t, "c3", "carol", "")
	if ids := welcomeIDs(carol.Welcome); !sameSet(ids, []string{"alice", "bob"}) {
		t.Fatalf("carol's welcome lists %v, want alice and bob", ids)
	}
	alice.AwaitPresence("join", "carol", 5*time.Second)
	bob.AwaitPresence("join", "carol", 5*time.Second)

	// Every envelope reaches every other node's participants exactly once,
	// in the order sent.
	const n = 300
	for i := 0; i < n; i++ {
		alice.Send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
	}
	alice.Send(map[string]any{"kind": "marker"})
	for _, c := range []*harness.Client{bob, carol} {
		seqs := collectSeqs(t, c, "seq", n, 10*time.Second)
		if len(seqs) != n {
			t.Fatalf("%s got %d of %d envelopes", c.ID, len(seqs), n)
		}
		for i, s := range seqs {
			if s != i {
				t.Fatalf("%s: envelope %d has seq %d: not in order", c.ID, i, s)
			}
		}
		if m := c.NextNonPresence(5 * time.Second); m == nil || m.Kind() != "marker" {
			t.Fatalf("%s: after the %d envelopes got %v, want the marker (a duplicate?)", c.ID, n, m)
		}
	}
	carol.Send(map[string]any{"kind": "back", "id": "from-carol"})
	alice.ExpectEnvelope("back", "from-carol")
	bob.ExpectEnvelope("back", "from-carol")

	// The context registry is built on every node from the stream: a
	// context created on node 1 conflicts on node 3.
	alice.Send(map[string]any{"kind": "note", "id": "n1", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	carol.ExpectEnvelope("note", "n1")
	harness.Eventually(t, 5*time.Second, "r1 known on node 3", func() bool {
		carol.Send(map[string]any{"kind": "gateway/contexts", "id": "q", "payload": map[string]any{"id": "r1"}})
		m := carol.NextOf()
		list, _ := m.Payload()["contexts"].([]any)
		return len(list) == 1
	})
	carol.Send(map[string]any{"kind": "note", "id": "clash", "context": map[string]any{"id": "r1", "type": "workflow"}})
	if e := carol.NextOf(); e.ErrCode() != "context_conflict" || e.Str("correlation_id") != "clash" {
		t.Fatalf("a conflicting context on another node: %v", e)
	}

	// The same participant on another node replaces the old connection
	// there (4000), and nobody hears of a presence change.
	bob2 := n3.Dial(t, "c3", "bob", "")
	if code := bob.WaitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("bob's old connection closed with %d, want 4000", code)
	}
	if ids := welcomeIDs(bob2.Welcome); !sameSet(ids, []string{"alice", "carol"}) {
		t.Fatalf("the replacing bob's welcome lists %v", ids)
	}
	alice.Send(map[string]any{"kind": "after-replace", "id": "ar"})
	for _, c := range []*harness.Client{bob2, carol} {
		if m := c.Next(5 * time.Second); m == nil || m.Kind() != "after-replace" {
			t.Fatalf("%s: got %v, want the next envelope and no presence", c.ID, m)
		}
	}
	carol.Send(map[string]any{"kind": "x", "id": "x1"})
	if m := alice.Next(5 * time.Second); m == nil || m.Kind() != "x" {
		t.Fatalf("alice: got %v, want the next envelope and no presence", m)
	}
}

func TestClusterNodeKilled(t *testing.T) {
	nodes := startCluster(t, 3)
	n1, n2, n3 := nodes[0].GW, nodes[1].GW, nodes[2].GW
	alice := n1.Dial(t, "k3", "alice", "")
	dave := n2.Dial(t, "k3", "dave", "")
	carol := n3.Dial(t, "k3", "carol", "")
	alice.AwaitPresence("join", "dave", 5*time.Second)
	alice.AwaitPresence("join", "carol", 5*time.Second)
	carol.Send(map[string]any{"kind": "hello"})
	dave.ExpectKind("system/presence")
	dave.ExpectKind("hello")

	// Alice streams while node 2 dies with SIGKILL.
	const total = 400
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i++ {
			alice.Send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := nodes[1].Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// Carol keeps getting every envelope, in order, and hears that dave left.
	var seqs []int
	leftAfter := time.Duration(0)
	deadline := time.Now().Add(20 * time.Second)
	for (len(seqs) < total || leftAfter == 0) && time.Now().Before(deadline) {
		m := carol.Next(time.Until(deadline))
		if m == nil {
			break
		}
		switch m.Kind() {
		case "seq":
			seqs = append(seqs, harness.SeqOf(m))
		case "system/presence":
			if p, _ := m.Payload()["participant"].(map[string]any); p["id"] == "dave" && m.Payload()["event"] == "leave" {
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
	alice.AwaitPresence("leave", "dave", 5*time.Second)

	// Dave reconnects to node 1 and carries on.
	dave2 := n1.Dial(t, "k3", "dave", "")
	if ids := welcomeIDs(dave2.Welcome); !sameSet(ids, []string{"alice", "carol"}) {
		t.Fatalf("dave's new welcome lists %v", ids)
	}
	carol.AwaitPresence("join", "dave", 5*time.Second)
	dave2.Send(map[string]any{"kind": "back", "id": "dave-back"})
	carol.ExpectEnvelope("back", "dave-back")
	carol.Send(map[string]any{"kind": "welcome-back", "id": "wb"})
	// With history on, a node delivers a pod's envelopes in the history's
	// order, from where its delivery is: while node 1 catches up after the
	// failover, dave may first get alice's last envelopes, accepted a
	// moment before he joined (never one twice: their seq say so).
	for {
		m := dave2.NextOf()
		if m.Kind() == "seq" {
			continue
		}
		if m.Kind() != "welcome-back" || m.Str("id") != "wb" {
			t.Fatalf("dave: got %v, want welcome-back", m)
		}
		break
	}
}

// TestClusterExternalNATS points two gateways at one external nats-server,
// built from the module the gateway embeds.
func TestClusterExternalNATS(t *testing.T) {
	bin := filepath.Join(harness.BinDir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	port := harness.FreePort(t)
	// With JetStream: the gateways keep the pods' history in it.
	ns := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Process.Kill(); _ = ns.Wait() })
	harness.Eventually(t, 10*time.Second, "nats-server listening", func() bool {
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
	a := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--nats-url", url, "--cluster-heartbeat", "200ms", "--max-message-bytes", "262144")
	b := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--nats-url", url, "--cluster-heartbeat", "200ms", "--max-message-bytes", "262144")
	waitConnected(t, []*harness.GatewayProc{a, b})

	alice := a.GW.Dial(t, "ext", "alice", "")
	bob := b.GW.Dial(t, "ext", "bob", "")
	if ids := welcomeIDs(bob.Welcome); strings.Join(ids, ",") != "alice" {
		t.Fatalf("bob's welcome lists %v, want alice", ids)
	}
	alice.AwaitPresence("join", "bob", 5*time.Second)
	for i := 0; i < 50; i++ {
		bob.Send(map[string]any{"kind": "seq", "payload": map[string]any{"seq": i}})
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
	_ = bob.Conn.Close()
	alice.AwaitPresence("leave", "bob", 5*time.Second)
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
