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
	ns, err := server.NewServer(&server.Options{ServerName: "members-test", DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	defer ns.Shutdown()
	conn := func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	answer := func(node string, after time.Duration, members ...string) {
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
	// Node b is known here and holds bob; node c, not known (taken for
	// gone), answers first with nobody.
	answer("b", 200*time.Millisecond, "bob")
	answer("c", 0)
	c := &cluster{
		g:     &Gateway{nc: conn(), nodeID: "a", log: slog.New(slog.NewTextHandler(io.Discard, nil))},
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
