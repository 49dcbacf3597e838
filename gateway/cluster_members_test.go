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
