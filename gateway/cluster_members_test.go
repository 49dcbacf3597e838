package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// TestMembersWaitsForTheKnownNodes: a node opening a pod asks every node
// for its members and waits for the ones it knows. A node it does not
// know that answers first (one taken for gone that is back after a cut,
// or one just started) once counted in their place: the wait ended with
// its list alone, and the known node's list, with the members it holds,
// was never applied (issue 38's full-size runs 36, 38 and 39).
func TestMembersWaitsForTheKnownNodes(t *testing.T) {
	conn, answer := membersNATS(t)
	// Node b is known here and holds bob; node c, not known (taken for
	// gone), answers first with nobody.
	answer("b", 200*time.Millisecond, "bob")
	answer("c", 0)
	c := &cluster{
		g:     &Gateway{nc: conn(), nodeID: "a", log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{ClusterHeartbeat: time.Second}},
		nodes: map[string]time.Time{"b": time.Now()},
		stop:  make(chan struct{}),
	}
	defer close(c.stop)
	lists := c.Members("p", func(r pod.NodeMembers) { t.Errorf("node %s's list came late", r.Node) })
	got := map[string][]wire.Identity{}
	for _, r := range lists {
		got[r.Node] = r.Members
	}
	if b, ok := got["b"]; !ok || len(b) != 1 || b[0].ID != "bob" {
		t.Fatalf("lists %v: want node b's, with bob", got)
	}
	if _, ok := got["c"]; !ok {
		t.Fatalf("lists %v: want node c's too (it answered)", got)
	}
}

// TestMembersStopsWaitingForASilentNode: a pod's opening does not wait
// for a known node that has missed silentHeartbeats heartbeats (killed,
// not taken for gone yet): every pod opened in those seconds waited the
// whole membersWait for it (issue 38's full-size run 37). Its list, if
// it comes after all, is applied late.
func TestMembersStopsWaitingForASilentNode(t *testing.T) {
	conn, answer := membersNATS(t)
	answer("b", 2*time.Second, "bob") // silent, and slow if alive
	answer("c", 0, "carol")
	c := &cluster{
		g:    &Gateway{nc: conn(), nodeID: "a", log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{ClusterHeartbeat: 100 * time.Millisecond}},
		stop: make(chan struct{}),
		// b last heard a second ago, ten heartbeats; c just now.
		nodes: map[string]time.Time{"b": time.Now().Add(-time.Second), "c": time.Now()},
	}
	defer close(c.stop)
	late := make(chan pod.NodeMembers, 1)
	lists := c.Members("p", func(r pod.NodeMembers) { late <- r })
	if len(lists) != 1 || lists[0].Node != "c" {
		t.Fatalf("lists %+v: want node c's alone, not waiting for silent b", lists)
	}
	select {
	case r := <-late:
		if r.Node != "b" || len(r.Members) != 1 || r.Members[0].ID != "bob" {
			t.Fatalf("late list %+v: want node b's, with bob", r)
		}
	case <-time.After(membersWait + 5*time.Second):
		t.Fatal("node b's list, answered after the wait, was not applied late")
	}
}

// membersNATS starts a NATS server in the process; conn connects to it,
// and answer has node answer every ask for a pod's members, after a
// while, with members.
func membersNATS(t *testing.T) (conn func() *nats.Conn, answer func(node string, after time.Duration, members ...string)) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{ServerName: "members-test", DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	t.Cleanup(ns.Shutdown)
	conn = func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	answer = func(node string, after time.Duration, members ...string) {
		nc := conn()
		_, err := nc.Subscribe(membersSubject, func(m *nats.Msg) {
			time.Sleep(after)
			r := membersReply{Node: node, Seq: 1, Members: []wire.Identity{}}
			for _, id := range members {
				r.Members = append(r.Members, wire.Identity{ID: id})
			}
			b, _ := json.Marshal(r)
			_ = m.Respond(b)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return conn, answer
}

// TestExpireDoesNotWaitForThePods: taking a node for gone removes its
// members from every pod, and that no longer runs on the heartbeat loop:
// there it held the loop up to 11 s on a node with a thousand busy pods,
// the node sent no heartbeat meanwhile, and the other nodes took it for
// gone in turn (issue 38's full-size run 43). A resync of the node, heard
// again meanwhile, waits until the removal is done, so that the removal
// never undoes the lists the resync applies.
func TestExpireDoesNotWaitForThePods(t *testing.T) {
	now := time.Now()
	release := make(chan struct{})
	removedNode := make(chan string, 1)
	c := &cluster{
		g:        &Gateway{nodeID: "a", log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		nodes:    map[string]time.Time{"b": now.Add(-10 * time.Second), "c": now},
		lastTick: now.Add(-100 * time.Millisecond),
		stop:     make(chan struct{}),
		removing: map[string]chan struct{}{},
	}
	defer close(c.stop)
	c.removeFromPods = func(node string) {
		removedNode <- node
		<-release // the pods are busy
	}
	expired := make(chan struct{})
	go func() {
		c.expire(now, 3*time.Second)
		close(expired)
	}()
	select {
	case <-expired:
	case <-time.After(10 * time.Second):
		t.Fatal("expire waited for the pods to let the gone node's members go")
	}
	if got := <-removedNode; got != "b" {
		t.Fatalf("removed node %q's members, want b's", got)
	}
	if _, known := c.nodes["b"]; known {
		t.Fatal("b, silent for 10 s, is still known")
	}
	resynced := make(chan bool, 1)
	go func() { resynced <- c.removed("b") }()
	select {
	case <-resynced:
		t.Fatal("a resync of b went on before b's members were removed")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case ok := <-resynced:
		if !ok {
			t.Fatal("the resync gave up")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resync still waits after the removal ended")
	}
}
