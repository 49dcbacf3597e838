package pod

import (
	"strings"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Join makes r a member: its welcome comes first, then what it asked of
// the pod's past (want), then every envelope of the pod after it joined;
// then the others hear of it (unless it replaces a connection of the same
// participant, which is closed with 4000 and announced to no one). It
// all happens under Pod.mu, so that the replay ends exactly where what is
// delivered to it begins. Call Settle first, where the stream orders the
// pod. A join consumes a Reserve.
//
// A participant kicked with a ban between its Reserve and its Join (its
// upgrade under way) does not join: the ban is checked again here, under
// Pod.mu, in which kicks are applied, and the refusal returned;
// the caller closes the connection (4410). r has been sent nothing.
func (p *Pod) Join(r *participant.Participant, want HistoryWant) *envelope.Error {
	p.lock()
	defer p.unlock()
	p.pending--
	if e := p.banned(r.ID, timeNow()); e != nil {
		return e
	}
	if r.Observes() {
		p.joinObserver(r, want)
		return nil
	}
	old := p.members[r.ID]
	oldGuest := p.dropGuest(r.ID)
	_, elsewhere := p.remote[r.ID]
	delete(p.remote, r.ID)
	others := p.told(r, r.ID)
	p.debugWelcome(r.ID, others)
	info, rep := p.replayFor(r, want)
	welcome := p.welcome(r, others, info)
	p.members[r.ID] = r
	p.rebuildSnapshot()
	startWith(r, welcome, rep)
	p.since[r.ID] = timeNow().UTC() // a join told to nobody; one told sets its event's ts
	switch {
	case old != nil:
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant")
	case oldGuest != nil:
		// Replaced, as a connection would be: nobody is told.
	case elsewhere:
		// The other node closes its connection when it sees this join.
		p.publishPresence(envelope.FrameJoin, identityOf(r), envelope.FlagReplace)
	default:
		p.publishPresence(envelope.FrameJoin, identityOf(r), 0)
	}
	return nil
}

// joinObserver is Join for a connection that watches (observe=1): its
// welcome and replay as any member's, and then what members receive; no
// presence is told, it replaces no one and no list names it. Call it with
// Pod.mu held.
func (p *Pod) joinObserver(r *participant.Participant, want HistoryWant) {
	others := p.told(r, "")
	info, rep := p.replayFor(r, want)
	welcome := p.welcome(r, others, info)
	p.observers[r] = struct{}{}
	p.rebuildSnapshot()
	startWith(r, welcome, rep)
}

// Leave removes r unless a newer connection has replaced it; the caller
// then lets the node forget the pod if it is idle
// (Node.RemoveIdle).
func (p *Pod) Leave(r *participant.Participant) {
	p.lock()
	defer p.unlock()
	if _, ok := p.observers[r]; ok {
		delete(p.observers, r)
		p.rebuildSnapshot()
		return
	}
	if p.members[r.ID] != r {
		return
	}
	delete(p.members, r.ID)
	delete(p.since, r.ID)
	p.rebuildSnapshot()
	p.publishPresence(envelope.FrameLeave, identityOf(r), 0)
}

// publishPresence sends a presence event about who, a connection or a
// guest; history never keeps it. Call it with Pod.mu held.
func (p *Pod) publishPresence(kind envelope.FrameKind, who wire.Identity, flags uint8) {
	p.publishPresenceWhy(kind, who, flags, "")
}

// publishPresenceWhy is publishPresence with the reason the gateway made
// the participant leave. Call it with Pod.mu held.
func (p *Pod) publishPresenceWhy(kind envelope.FrameKind, who wire.Identity, flags uint8, reason string) {
	event := wire.PresenceJoin
	if kind == envelope.FrameLeave {
		event = wire.PresenceLeave
	}
	body, id := presenceMessage(event, who, reason)
	m := envelope.Meta{Kind: kind, Flags: flags | envelope.FlagLive, Origin: p.node.ID, From: who.ID, ID: id,
		Protocol: protocolSpan}
	m.Seq = p.node.frameSeq.Add(1)
	frame := envelope.Frame(&m, body)
	if kind == envelope.FrameJoin {
		p.since[who.ID] = presenceTime(body)
		p.inflight[strings.Clone(who.ID)] = m.Seq // until it comes back (handleFrame)
	} else {
		delete(p.inflight, who.ID)
	}
	p.commit(&m, body, frame, 0, timeNow())
}

// guest is a member with no connection: an MCP session (docs/protocol.md
// section 9). It is present like any member (welcomes, presence, member
// lists, the pod's participant cap), but the fan-out hands it nothing: it
// reads the pod's history through a cursor of its own, so nothing is
// queued for it.
type guest struct {
	wire.Identity
	// ended is called when the guest is no longer a member: a newer
	// member of the same id (a connection or a guest, on any node) took
	// its place (nobody is told, as for a connection), or it was kicked.
	// It is called with Pod.mu held: it must return at once and not call
	// the pod.
	ended func(why string)
	inbox inbox
	// since is when it was made (its session joined), for an operator.
	since time.Time
}

// Guest is a member with no connection (an MCP session), as the MCP
// endpoint holds it.
type Guest = *guest

// NewGuest makes a guest; ended is called (with Pod.mu held: it must
// return at once and not call the pod) when it stops being a member
// without leaving: replaced by a newer member of the same id, or kicked.
func NewGuest(id wire.Identity, ended func(why string)) Guest {
	return &guest{Identity: id, ended: ended, since: time.Now()}
}

// replaced is told that a newer member of the same id took g's place.
func (g *guest) replaced() { g.ended(GuestReplaced) }

// removed is told that g was made to leave.
func (g *guest) removed(reason string) { g.ended(reason) }

// GuestReplaced is why a guest ended when a newer member of its id took
// its place.
const GuestReplaced = "replaced by a newer connection or session of the same participant"

// JoinGuest makes g a member under Join's rules: it replaces a member of
// the same id here (a connection is closed with 4000) or on another node,
// and only a new id is announced. It is refused when the pod is full or
// g's id is banned, and fails when the pod was removed (dead: look it up
// again). cursor is where the guest's reads begin: the pod's history up
// to its join is not for it.
func (p *Pod) JoinGuest(g Guest) (dead bool, refusal *envelope.Error, cursor uint64) {
	p.lock()
	defer p.unlock()
	if p.dead {
		return true, nil, 0
	}
	if e := p.admits(g.ID); e != nil {
		return false, e, 0
	}
	old := p.members[g.ID]
	if old != nil {
		delete(p.members, g.ID)
		p.rebuildSnapshot()
		old.Close(participant.StatusReplaced, "replaced by an MCP session of the same participant")
	}
	oldGuest := p.dropGuest(g.ID)
	_, elsewhere := p.remote[g.ID]
	delete(p.remote, g.ID)
	p.guests[g.ID] = g
	p.since[g.ID] = timeNow().UTC()
	if p.index != nil {
		cursor = p.index.Last()
	}
	switch {
	case old != nil || oldGuest != nil:
	case elsewhere:
		p.publishPresence(envelope.FrameJoin, g.Identity, envelope.FlagReplace)
	default:
		p.publishPresence(envelope.FrameJoin, g.Identity, 0)
	}
	p.countMembers()
	return false, nil, cursor
}

// LeaveGuest removes g unless something newer has replaced it; everyone
// is told it left, with reason when it did not leave of its own accord
// (its token expired, or was revoked). The caller then lets the node
// forget the pod if it is idle (Node.RemoveIdle).
func (p *Pod) LeaveGuest(g Guest, reason string) {
	p.lock()
	defer p.unlock()
	if p.guests[g.ID] == g {
		delete(p.guests, g.ID)
		p.countMembers()
		delete(p.since, g.ID)
		p.publishPresenceWhy(envelope.FrameLeave, g.Identity, 0, reason)
	}
}

// dropGuest removes the guest of id, if any, telling it it was replaced,
// and returns it. Call it with Pod.mu held.
func (p *Pod) dropGuest(id string) *guest {
	g := p.guests[id]
	if g != nil {
		delete(p.guests, id)
		g.replaced()
	}
	return g
}

// startWith starts r's writer with its welcome first, then its replay
// (rep, nil when it asked for none).
func startWith(r *participant.Participant, welcome []byte, rep *replay) {
	if rep != nil {
		rep.first = welcome
		r.Start(rep)
		return
	}
	r.Answer(welcome)
	r.Start(nil)
}
