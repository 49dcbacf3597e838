package pod

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// The cluster's bookkeeping of a pod: who of its members is connected to
// another node. Presence frames of other nodes keep it current; a node
// that opens the pod asks the others for their members (SyncMembers); a
// node that is gone takes its members with it (RemoveNode), and one
// heard again gives them back (ApplyMembers).
//
// A node's member list is taken at a point of its own order of frames:
// Seq, the number of the last frame it had put into a pod's log when it
// answered (envelope.Meta.Seq). The list reflects every presence frame of
// that node numbered up to it, and none after. A list is applied when no
// presence frame of its node numbered after it has been applied here; an
// older one is stale, and the node is asked again. The frames numbered up
// to it that are still on their way change nothing when they come (a join
// of a member known, a leave of one gone), and those after it are applied
// as usual: the members here are told each change once.

// The newest join of an id wins: a join of another node replaces a
// member here, or of a third node, only when it was made after it (by the
// ts of their presence events, which the nodes that made them wrote). The
// stream orders a pod's frames as they are stored, and a node that could
// not store for a while (no quorum) stores its frames late: without the
// rule, a join it made before its member went elsewhere would, stored
// after the newer join, replace the newer connection (4000), and its
// leave would then take the member away from everyone's view.

// remoteMember is a participant connected to another node, since at.
type remoteMember struct {
	wire.Identity
	node string
	at   time.Time
}

// presenceTime is the ts of a presence event (zero when it has none).
func presenceTime(body []byte) time.Time {
	t, err := time.Parse(wire.TimeFormat, gjson.GetBytes(body, "ts").String())
	if err != nil {
		return time.Time{}
	}
	return t
}

// joinedHere is when id joined this node, by the ts of its join event.
// Call it with Pod.mu held.
func (p *Pod) joinedHere(id string) time.Time { return p.since[id] }

// hear records that a presence frame of another node, m, was applied.
// Call it with Pod.mu held.
func (p *Pod) hear(m *envelope.Meta) {
	if m.Seq > p.heard[m.Origin] {
		p.heard[strings.Clone(m.Origin)] = m.Seq
	}
}

// joinEvent is a join's presence event, read once for everything the
// pod does with it (remoteJoin, tellJoin).
type joinEvent struct {
	who wire.Identity
	at  time.Time // its ts
}

// readJoin reads the join event body, and reports false when it is
// malformed.
func readJoin(body []byte) (joinEvent, bool) {
	who, ok := presenceIdentity(body)
	if !ok {
		return joinEvent{}, false
	}
	return joinEvent{who: who, at: presenceTime(body)}, true
}

// remoteJoin records a join on another node, and reports false when it
// is stale (older than the member's join here or on a third node, which
// stands): nothing changed. A join of an id already in the pod is a
// replacement: a connection here is closed with 4000. Call it with
// Pod.mu held.
func (p *Pod) remoteJoin(m *envelope.Meta, j joinEvent) bool {
	id, at := j.who, j.at
	p.hear(m)
	if _, here := p.members[id.ID]; here && at.Before(p.joinedHere(id.ID)) {
		return false // older than the member here: stale
	}
	if _, guest := p.guests[id.ID]; guest && at.Before(p.joinedHere(id.ID)) {
		return false
	}
	if r, ok := p.remote[id.ID]; ok && r.node != m.Origin && at.Before(r.at) {
		return false // older than its join on a third node
	}
	old := p.members[id.ID]
	if old != nil {
		delete(p.members, id.ID)
		p.rebuildSnapshot()
	}
	p.dropGuest(id.ID)
	delete(p.since, id.ID)
	p.remote[id.ID] = remoteMember{Identity: id, node: strings.Clone(m.Origin), at: at}
	if old != nil {
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant on another gateway node")
	}
	return true
}

// What the members here are told of who is present follows what they
// were told before, not only the pod's state: a node delivers its own
// joins and leaves when the stream brings them back, after its state
// changed, and other nodes' frames may come in between (a member that
// left here and joined another node: this node's leave comes after the
// other's join). shown is, by id, the node whose join the members were
// told last and no leave since. A join is told when its id is not shown
// (a join of an id shown is a replacement, or a move, told to nobody); a
// leave when it comes from the node shown (an older node's leave, after
// the id joined elsewhere, is told to nobody). So each change is told
// once, and what the members were told ends where the pod's state is.

// A member's welcome lists what the members were told (shown), not the
// pod's state: the two differ while this node's own presence frames are
// on their way through the stream (a member joined here, or left, and the
// stream has not brought it back yet), and a view that began as the state
// and then followed what is told went wrong when such a frame and another
// node's came in another order (issue 38's full-size run: a member that
// joined here, was closed, and joined another node in the same seconds
// was never told to one that joined here meanwhile). So a member's view
// is what the pod told, from its welcome on, and ends where the pod's
// state is once the frames are through.

// shownJoin is a join the members were told of: its node, who joined as
// its event said, and when (its event's ts).
type shownJoin struct {
	node string
	who  wire.Identity
	at   time.Time
}

// tellJoin reports whether the members are to be told of j, a join on
// node, and records it shown, unless a newer join of the id on another
// node is shown: the newest join wins here too (a node that stored its
// frames late, its writer held, brought its join back after the member
// had joined another node; made the one shown, it let its leave that
// followed tell everyone the member had gone, issue 38's full-size run).
// Call it with Pod.mu held.
func (p *Pod) tellJoin(node string, j joinEvent) bool {
	who, at := j.who, j.at
	s, known := p.shown[who.ID]
	if known && s.node != node && at.Before(s.at) {
		return false // older than the join shown: stale
	}
	p.shown[strings.Clone(who.ID)] = shownJoin{node: strings.Clone(node), who: who, at: at}
	return !known
}

// told lists, but except, whom the members were told is present, and
// this node's members whose joins are still on their way (inflight): r's
// welcome. r expects those joins (participant.Expect) and is not told of
// them when they come; of everything else it is told as the others are.
// Each is as the pod has it now (its capabilities may have changed since
// its join), or as its join said when the pod no longer has it (its
// leave is on its way). Call it with Pod.mu held.
func (p *Pod) told(r *participant.Participant, except string) []wire.Identity {
	out := make([]wire.Identity, 0, len(p.shown)+len(p.inflight))
	r.Expect = nil
	for id, seq := range p.inflight {
		if _, shown := p.shown[id]; shown || id == except {
			continue
		}
		if m := p.members[id]; m != nil {
			out = append(out, identityOf(m))
		} else if g, ok := p.guests[id]; ok {
			out = append(out, g.Identity)
		} else {
			continue
		}
		if r.Expect == nil {
			r.Expect = map[string]uint64{}
		}
		r.Expect[id] = seq
	}
	for id, s := range p.shown {
		if id == except {
			continue
		}
		if m := p.members[id]; m != nil {
			out = append(out, identityOf(m))
		} else if g, ok := p.guests[id]; ok {
			out = append(out, g.Identity)
		} else if r, ok := p.remote[id]; ok {
			out = append(out, r.Identity)
		} else {
			out = append(out, s.who)
		}
	}
	return out
}

// tellLeave reports whether the members are to be told that id left
// node, and records it no longer shown. Call it with Pod.mu held.
func (p *Pod) tellLeave(id, node string) bool {
	if s, ok := p.shown[id]; !ok || s.node != node {
		return false
	}
	delete(p.shown, id)
	return true
}

// remoteLeave records a leave on another node and reports whether to tell
// the local members: not when the participant has since joined elsewhere.
// Call it with Pod.mu held.
func (p *Pod) remoteLeave(m *envelope.Meta) bool {
	p.hear(m)
	if r, ok := p.remote[m.From]; ok && r.node == m.Origin {
		delete(p.remote, m.From)
		return true
	}
	return false
}

// RemoveNode forgets the members of a node that is gone and tells the
// local members they left; their calls in flight are answered as any
// leaver's are.
func (p *Pod) RemoveNode(node string) {
	p.lock()
	defer p.unlock()
	for id, r := range p.remote {
		if r.node == node {
			p.remoteGone(id, r, "its gateway node is gone")
		}
	}
}

// remoteGone forgets id, a member of another node, and tells the local
// members it left, for reason. Call it with Pod.mu held.
func (p *Pod) remoteGone(id string, r remoteMember, reason string) {
	delete(p.remote, id)
	body, _ := presenceMessage(wire.PresenceLeave, r.Identity, reason)
	told := p.tellLeave(id, r.node)
	p.debugPresence("gone", id, r.node, told, reason)
	if told {
		m := envelope.Meta{Kind: envelope.FrameLeave, Origin: r.node, From: r.ID, Protocol: protocolSpan}
		p.node.Metrics.Deliveries.Add(float64(p.deliver(&m, body, false)))
	}
	p.presenceOfServer(body)
	p.callsMemberGone(id)
}

// remoteCame records id, a member of another node that this node had not
// heard of, and tells the local members it joined. Call it with Pod.mu
// held.
func (p *Pod) remoteCame(r remoteMember) {
	p.remote[r.ID] = r
	body, _ := presenceMessage(wire.PresenceJoin, r.Identity, "")
	j, ok := readJoin(body)
	told := ok && p.tellJoin(r.node, j)
	p.debugPresence("came", r.ID, r.node, told, "listed")
	if told {
		m := envelope.Meta{Kind: envelope.FrameJoin, Origin: r.node, From: r.ID, Protocol: protocolSpan}
		p.node.Metrics.Deliveries.Add(float64(p.deliver(&m, body, false)))
	}
	p.presenceOfServer(body)
}

// SyncMembers learns, once, the members other nodes have in the pod, and
// tells the local members (if any) who came. A node that answers after
// the wait has its list applied when it comes; a list older than what
// this node has applied of its node since is asked again.
func (p *Pod) SyncMembers() {
	c := p.node.Cluster
	if c == nil {
		return
	}
	p.synced.Do(func() {
		for _, r := range c.Members(p.Name, p.lateMembers) {
			if !p.ApplyMembers(r) {
				go p.AskMembers(r.Node)
			}
		}
	})
}

// lateMembers applies a node's list that came after SyncMembers stopped
// waiting for it (Cluster.Members).
func (p *Pod) lateMembers(r NodeMembers) {
	if !p.ApplyMembers(r) {
		p.AskMembers(r.Node)
	}
}

// askAgainFor bounds how long a node whose lists keep coming stale is
// asked again: every askAgainWait at first, then less often (up to
// askAgainMax). Five asks 100 ms apart were too few in a busy pod, whose
// node numbers new presence frames between each list and its arrival.
const (
	askAgainFor  = 30 * time.Second
	askAgainWait = 100 * time.Millisecond
	askAgainMax  = 2 * time.Second
)

// AskMembers asks node for its members of the pod again, until its list
// applies (for askAgainFor at most), or the pod is closed here.
func (p *Pod) AskMembers(node string) {
	deadline := time.Now().Add(askAgainFor)
	for wait := askAgainWait; time.Now().Before(deadline); wait = min(2*wait, askAgainMax) {
		time.Sleep(wait)
		if p.Dead() {
			return
		}
		lists, err := p.node.Cluster.Ask(node, []string{p.Name})
		if err != nil || len(lists) != 1 {
			continue
		}
		if p.ApplyMembers(lists[0]) {
			return
		}
	}
	p.node.Log.Warn("a node's member lists of a pod stayed older than its presence here; its members are as its presence said",
		"pod", p.Name, "node", node, "asked_for", askAgainFor.String())
}

// ApplyMembers makes the pod's members of r.Node exactly r.Members, as of
// r.Seq, telling the local members who came and who left. It reports
// false, changing nothing, when the list is stale: a presence frame of
// that node numbered after it was applied here already.
func (p *Pod) ApplyMembers(r NodeMembers) bool {
	p.lock()
	defer p.unlock()
	if p.dead {
		return true
	}
	if p.heard[r.Node] > r.Seq {
		p.debugPresence("list", "", r.Node, false, "stale")
		return false
	}
	if p.node.Log.Enabled(context.Background(), slog.LevelDebug) {
		p.node.Log.Debug("presence list applied", "pod", p.Name, "node", r.Node, "seq", r.Seq, "members", idList(r.Members))
	}
	listed := make(map[string]bool, len(r.Members))
	for i, id := range r.Members {
		listed[id.ID] = true
		_, here := p.members[id.ID]
		_, guest := p.guests[id.ID]
		if _, known := p.remote[id.ID]; here || guest || known {
			// Here: a replacement under way, whose join the other node
			// has not applied yet. On a third node: the newer of the
			// two, whose presence decides.
			continue
		}
		var at time.Time
		if i < len(r.Since) {
			at = r.Since[i]
		}
		p.remoteCame(remoteMember{Identity: id, node: r.Node, at: at})
	}
	for id, m := range p.remote {
		if m.node == r.Node && !listed[id] {
			p.remoteGone(id, m, "its gateway node no longer has it")
		}
	}
	if r.Seq > p.heard[r.Node] {
		p.heard[r.Node] = r.Seq
	}
	return true
}

// Roster lists the members on this node, connections and guests, and the
// number of the last frame the node had put into a pod's log then: what
// this node answers when another asks for its members (ApplyMembers).
func (p *Pod) Roster() NodeMembers {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := NodeMembers{Node: p.node.ID, Seq: p.node.frameSeq.Load(), Members: p.localIdentities()}
	r.Since = make([]time.Time, len(r.Members))
	for i, id := range r.Members {
		r.Since[i] = p.joinedHere(id.ID)
	}
	return r
}

// Roster is Pod.Roster for a pod not open on this node: nobody, as of
// now.
func (n *Node) Roster() NodeMembers {
	return NodeMembers{Node: n.ID, Seq: n.frameSeq.Load(), Members: []wire.Identity{}}
}

// presenceIdentity reads the participant of a presence frame's body.
func presenceIdentity(body []byte) (wire.Identity, bool) {
	var v struct {
		Payload wire.Presence `json:"payload"`
	}
	if err := json.Unmarshal(body, &v); err != nil || !envelope.ValidParticipantID(v.Payload.Participant.ID) {
		return wire.Identity{}, false
	}
	return v.Payload.Participant, true
}

// debugPresence logs, at debug level, what the pod did with a presence
// change: who, on which node, and whether its members were told (the
// full-size fault suite reads it beside the members' traces).
func (p *Pod) debugPresence(event, id, node string, told bool, why string) {
	if !p.node.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p.node.Log.Debug("presence", "pod", p.Name, "event", event, "participant", id, "node", node, "told", told, "why", why)
}

// debugWelcome logs, at debug level, whom a joiner's welcome lists.
func (p *Pod) debugWelcome(id string, listed []wire.Identity) {
	if !p.node.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p.node.Log.Debug("welcome", "pod", p.Name, "participant", id, "lists", idList(listed))
}

// idList is the ids of who, comma-separated, for a debug line.
func idList(who []wire.Identity) string {
	ids := make([]string, len(who))
	for i, w := range who {
		ids[i] = w.ID
	}
	return strings.Join(ids, ",")
}
