package pod

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// presenceOf reads a presence event: its event and who it is about ("" for
// another message).
func presenceOf(v map[string]any) (event, id string) {
	if v["kind"] != wire.KindPresence {
		return "", ""
	}
	pl, _ := v["payload"].(map[string]any)
	who, _ := pl["participant"].(map[string]any)
	event, _ = pl["event"].(string)
	id, _ = who["id"].(string)
	return event, id
}

// expectPresence reads m's next messages until it has been told exactly
// want (event:id), in any order, and nothing more within a moment.
func expectPresence(t *testing.T, m *member, want ...string) {
	t.Helper()
	left := map[string]int{}
	for _, w := range want {
		left[w]++
	}
	for n := len(want); n > 0; n-- {
		event, id := presenceOf(m.next())
		if left[event+":"+id] == 0 {
			t.Fatalf("%s was told %s:%s, want %v", m.id, event, id, want)
		}
		left[event+":"+id]--
	}
	select {
	case v := <-m.in:
		t.Fatalf("%s: told %v too", m.id, v)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestClusterMembersOfANodeHeardAgain: a node taken for gone takes its
// members with it; when it is heard again its list (ApplyMembers, as the
// gateway's resync asks for it) gives them back, and the members here are
// told each change once: the same list again tells nothing, and a list
// older than a presence frame of its node already applied is refused
// (stale), changing nothing.
func TestClusterMembersOfANodeHeardAgain(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pa, pb := c.open(a, "lab"), c.open(b, "lab")
	alice := c.join(pa, "alice", joinOpts{})
	alice.next()
	bob := c.join(pb, "bob", joinOpts{})
	bob.next()
	expectPresence(t, alice, "join:bob")
	dave := c.join(pb, "dave", joinOpts{})
	dave.next()
	expectPresence(t, alice, "join:dave")
	expectPresence(t, bob, "join:dave")

	before := pb.Roster() // bob and dave
	pa.RemoveNode(b.ID)
	expectPresence(t, alice, "leave:bob", "leave:dave")

	// Heard again: b's members come back, each told once.
	if !pa.ApplyMembers(pb.Roster()) {
		t.Fatal("b's list was found stale")
	}
	expectPresence(t, alice, "join:bob", "join:dave")
	if !pa.ApplyMembers(pb.Roster()) {
		t.Fatal("b's list, again, was found stale")
	}
	expectPresence(t, alice)
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "bob", "dave") {
		t.Fatalf("a's pod lists %v", ids)
	}

	// dave leaves on b; a list taken before it is stale on a, and changes
	// nothing; a list taken after it, nothing either (a knows it).
	pb.Leave(dave.r)
	expectPresence(t, alice, "leave:dave")
	if pa.ApplyMembers(before) {
		t.Fatal("a list older than dave's leave was applied")
	}
	if !pa.ApplyMembers(pb.Roster()) {
		t.Fatal("b's list after dave's leave was found stale")
	}
	expectPresence(t, alice)
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "bob") {
		t.Fatalf("a's pod lists %v", ids)
	}

	// b's members changed while a took it for gone: bob left, erin came.
	pa.RemoveNode(b.ID)
	expectPresence(t, alice, "leave:bob")
	pb.Leave(bob.r)
	erin := c.join(pb, "erin", joinOpts{})
	erin.next()
	if !pa.ApplyMembers(pb.Roster()) {
		t.Fatal("b's list was found stale")
	}
	// erin's own join frame comes through the stream too: told once.
	expectPresence(t, alice, "join:erin")
}

// TestClusterLateMembersApplied: a node that opens a pod and gets another
// node's list after its wait (Cluster.Members' late) applies it when it
// comes: its members are told who was there.
func TestClusterLateMembersApplied(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pb := c.open(b, "lab")
	bob := c.join(pb, "bob", joinOpts{})
	bob.next()
	c.mu.Lock()
	c.late = true // b answers a's ask after a stopped waiting
	c.mu.Unlock()
	pa := c.open(a, "lab")
	alice := c.join(pa, "alice", joinOpts{})
	w := alice.next()
	if ids := harnessIDs(w); len(ids) > 0 && !sameIDs(ids, "bob") {
		t.Fatalf("alice's welcome lists %v", ids)
	}
	if ids := harnessIDs(w); len(ids) == 0 {
		expectPresence(t, alice, "join:bob") // the late list, applied
	}
	expectPresence(t, bob, "join:alice")
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "bob") {
		t.Fatalf("a's pod lists %v", ids)
	}
}

// TestClusterStaleJoinReplacesNobody: a join made on a node before the
// participant joined here, and stored after (its node could not store for
// a while), neither replaces the member here nor, with its leave after
// it, takes the member away from anyone's view: the newest join wins.
func TestClusterStaleJoinReplacesNobody(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pa, pb := c.open(a, "lab"), c.open(b, "lab")
	alice := c.join(pa, "alice", joinOpts{})
	alice.next()
	bob := c.join(pb, "bob", joinOpts{})
	bob.next()
	expectPresence(t, alice, "join:bob")

	// node-z accepted bob a second before he joined b; its frames come now.
	old := time.Now().Add(-time.Second).UTC().Format(wire.TimeFormat)
	join, _ := presenceMessage(wire.PresenceJoin, wire.Identity{ID: "bob", Capabilities: []wire.Capability{}}, "")
	join = []byte(strings.Replace(string(join), `"ts":"`, `"ts":"`+old+`","was":"`, 1))
	for _, p := range []*Pod{pa, pb} {
		p.lock()
		j, _ := readJoin(join)
		joined := p.remoteJoin(&envelope.Meta{Kind: envelope.FrameJoin, Origin: "node-z", From: "bob", Seq: 7}, j)
		left := p.remoteLeave(&envelope.Meta{Kind: envelope.FrameLeave, Origin: "node-z", From: "bob", Seq: 8})
		p.unlock()
		if joined || left {
			t.Errorf("%s: the stale join told %v, its leave %v", p.node.ID, joined, left)
		}
	}
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "bob") {
		t.Fatalf("a's pod lists %v", ids)
	}
	if ids := identityIDs(pb.Participants()); !sameIDs(ids, "alice", "bob") {
		t.Fatalf("b's pod lists %v", ids)
	}
	// bob's connection on b is still the member: what alice sends reaches it.
	alice.send(chat("m1", 1))
	if v := bob.nextOf(); v["id"] != "m1" {
		t.Fatalf("bob: %v, want m1", v)
	}
	expectPresence(t, alice)
}

// TestClusterOwnLeaveAfterAMove: a member that left this node and joined
// another is told, here, as one that moved: this node's own leave, which
// the stream brings back after the other node's join (this node could
// not store for a moment), is told to nobody, and the pod's members keep
// it in their view, where the pod's state has it. (Before: the leave was
// told, and the member vanished from every view here.)
func TestClusterOwnLeaveAfterAMove(t *testing.T) {
	c := newTestCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	pa, _ := c.open(a, "lab"), c.open(b, "lab")
	alice := c.join(pa, "alice", joinOpts{})
	alice.next()
	sam := c.join(pa, "sam", joinOpts{})
	sam.next()
	expectPresence(t, alice, "join:sam")

	// sam's connection here ends; before its leave comes back through the
	// stream, sam's join on b does (newer).
	who := wire.Identity{ID: "sam", Capabilities: []wire.Capability{}}
	join, _ := presenceMessage(wire.PresenceJoin, who, "")
	leave, _ := presenceMessage(wire.PresenceLeave, who, "")
	pa.lock()
	delete(pa.members, "sam")
	pa.rebuildSnapshot()
	told := pa.handleFrame(&envelope.Meta{Kind: envelope.FrameJoin, Origin: b.ID, From: "sam", Seq: 9}, join, false)
	told += pa.handleFrame(&envelope.Meta{Kind: envelope.FrameLeave, Origin: a.ID, From: "sam", Seq: 1 << 40}, leave, true)
	pa.unlock()
	if told != 0 {
		t.Errorf("a move was told to %d members", told)
	}
	expectPresence(t, alice)
	if ids := identityIDs(pa.Participants()); !sameIDs(ids, "alice", "sam") {
		t.Fatalf("a's pod lists %v", ids)
	}
}

// TestStaleJoinShownReplacesNobody: what the members are told follows the
// newest join too. A node whose writer held stores its join of a member
// late, after the member joined another node (which the members were told
// of): that join is told to nobody and stays the one shown, so that the
// old node's leave that follows is told to nobody either (issue 38's
// full-size run: the members were told the member left, and it was on the
// other node).
func TestStaleJoinShownReplacesNobody(t *testing.T) {
	c := newTestCluster(t, 1)
	p := c.open(c.nodes[0], "lab")
	alice := c.join(p, "alice", joinOpts{})
	alice.next()

	at := func(d time.Duration) joinEvent {
		ts := time.Now().Add(d).UTC().Format(wire.TimeFormat)
		b, _ := presenceMessage(wire.PresenceJoin, wire.Identity{ID: "s4", Capabilities: []wire.Capability{}}, "")
		j, _ := readJoin([]byte(strings.Replace(string(b), `"ts":"`, `"ts":"`+ts+`","was":"`, 1)))
		return j
	}
	p.lock()
	newer := p.tellJoin("node-new", at(0))            // s4 joined the new node: told
	stale := p.tellJoin("node-old", at(-time.Second)) // its older join on the old node, stored late
	left := p.tellLeave("s4", "node-old")             // the old node's leave that followed
	shown := p.shown["s4"].node
	p.unlock()
	if !newer || stale || left {
		t.Fatalf("told the newer join %v (want true), the stale one %v, the old node's leave %v (want false)", newer, stale, left)
	}
	if shown != "node-new" {
		t.Fatalf("shown on %s, want node-new", shown)
	}
	// A join after it on the old node (the member went back) is the newest
	// and is shown; it is a move, told to nobody.
	p.lock()
	back := p.tellJoin("node-old", at(time.Second))
	shown = p.shown["s4"].node
	p.unlock()
	if back || shown != "node-old" {
		t.Fatalf("a newer join on the old node: told %v, shown on %s; want a move shown on node-old", back, shown)
	}
}
