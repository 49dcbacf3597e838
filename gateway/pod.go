package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Pod is one named room on this gateway: its local members, its context
// registry, its participants' rate buckets, and its log (the pod's NATS
// subject, or its subjects in the history stream) with the index of its
// history.
type Pod struct {
	Name    string
	subject string
	gw      *Gateway
	log     podLog
	// index is what this node knows of the pod's history; nil when
	// history is off.
	index *history.Index

	// fanMu is held by the fan-out while it handles one frame, and by a
	// join while it makes the joiner a member and decides its replay: the
	// replay then ends exactly where the joiner's live envelopes begin.
	fanMu sync.Mutex
	// upTo is the last frame of the pod's past when the pod opened here;
	// until the fan-out has handled it, frames rebuild the registry and
	// the index and are delivered to nobody (caughtUp, ready).
	upTo     uint64
	caughtUp bool
	ready    chan struct{}
	// meta is the fan-out's scratch header, under fanMu.
	meta envelope.Meta
	// inbox holds the frames the log handed over while the fan-out was
	// busy; inRun is set while a fan-out goroutine handles it.
	inMu  sync.Mutex
	inbox []inFrame
	inRun bool
	// touched are the members the current burst queued something for,
	// flushed at its end; burst numbers the bursts (FlushMark), from 1, a
	// new participant's mark being 0. Under fanMu.
	touched []*participant.Participant
	burst   uint64
	// unflushed counts the frames handled since the last flush, and
	// graceTimer flushes them when the log said more was coming and
	// nothing came (fanOut). Under fanMu.
	unflushed  int
	graceTimer *time.Timer
	// delivered is, with history, the last frame number (Meta.Seq) the
	// fan-out handled of each origin node: a frame republished after the
	// stream failed over, which the stream had stored after all, comes
	// back a second time and is dropped.
	delivered map[string]uint64

	mu      sync.Mutex // guards members, guests, pending, dead
	members map[string]*participant.Participant
	// guests are the members with no connection (MCP sessions), by id.
	// An id is a member here once, as a connection or as a guest.
	guests  map[string]*guest
	pending int  // upgrades admitted but not yet joined
	dead    bool // removed from the gateway; joiners must look again
	// remote are the members connected to other gateway nodes, by id.
	remote map[string]remoteMember
	synced sync.Once
	// snapshot is the members as a slice for the fan-out, rebuilt on every
	// join and leave so that the fan-out takes no lock.
	snapshot atomic.Pointer[[]*participant.Participant]

	Registry *contexts.Registry

	// published and seen count this node's frames of the pod that went
	// into its log and that came back out: a drain waits until they meet.
	published, seen atomic.Uint64
	// backlog is the bytes of this node's envelopes in the pod's log that
	// the fan-out has not seen yet. Senders wait while it, or the number
	// of such frames (published-seen), is over its bound (throttle), so
	// that a sender faster than the log cannot make NATS buffer without
	// bound, nor push the history's oldest entries out before the fan-out
	// has delivered them.
	backlog   atomic.Int64
	throttled atomic.Int32 // senders waiting in throttle
	// awaitingDrain is set while removeWhenDrained waits to remove the pod.
	awaitingDrain atomic.Bool
	backlogMu     sync.Mutex
	drainedCh     chan struct{} // closed when the fan-out has made progress

	// eventBuf is reused under the registry's lock.
	eventBuf []byte
}

func newPod(gw *Gateway, name string) (*Pod, error) {
	p := &Pod{
		Name: name, subject: PodSubject(name), gw: gw,
		members:   make(map[string]*participant.Participant),
		guests:    make(map[string]*guest),
		remote:    make(map[string]remoteMember),
		ready:     make(chan struct{}),
		delivered: map[string]uint64{},
		burst:     1,
	}
	empty := []*participant.Participant{}
	p.snapshot.Store(&empty)
	p.Registry = contexts.NewRegistry(contexts.Config{
		MaxDepth:          gw.cfg.MaxDepth,
		Timeout:           gw.cfg.ContextTimeout,
		Retention:         gw.cfg.ContextRetention,
		MaxPerParticipant: gw.cfg.MaxContextsPerParticipant,
		MaxPerPod:         gw.cfg.MaxContextsPerPod,
		ContextRate:       limits.Rate{Per: gw.cfg.ContextRate, Burst: gw.cfg.ContextBurst},
		ConclusionKinds:   gw.conclusionKinds,
	}, p.publishConclusions)
	if gw.store() != nil {
		p.index = history.NewIndex(gw.cfg.History, gw.cfg.HistoryAge)
		p.log = newStreamLog(gw, name)
		// The registry is rebuilt from the pod's past before its timers
		// may conclude anything.
		p.Registry.Pause(true)
	} else {
		p.log = &coreLog{g: gw, subject: p.subject}
	}
	// The fan-out handles no frame before upTo is known.
	p.fanMu.Lock()
	upTo, err := p.log.follow(p.receive)
	if err != nil {
		p.fanMu.Unlock()
		p.log.close()
		p.Registry.Close()
		return nil, err
	}
	p.upTo = upTo
	if upTo == 0 {
		p.caughtUpLocked()
	}
	p.fanMu.Unlock()
	return p, nil
}

// caughtUpLocked marks the pod live: its past is in the registry and the
// index, and the fan-out delivers from now on.
func (p *Pod) caughtUpLocked() {
	p.caughtUp = true
	p.Registry.Pause(false)
	if l, ok := p.log.(*streamLog); ok {
		l.waiting.Store(true)
	}
	close(p.ready)
}

// waitReady waits until the pod has caught up with its history.
func (p *Pod) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publishConclusions sends the system/context events of concluded
// contexts. The registry calls it with its lock held (timeouts) and
// ingress within Accept's commit, so events follow the envelope that
// caused them in the pod's log.
func (p *Pod) publishConclusions(concluded []contexts.Concluded) {
	for i := range concluded {
		c := &concluded[i]
		body, id := contextEvent(c)
		m := envelope.Meta{
			Kind: envelope.FrameContextEvent, Flags: envelope.FlagConclusion,
			Origin: p.gw.nodeID, From: envelope.GatewayID, ID: id, Incarnation: c.Incarnation,
			ContextID: c.ID, ContextType: c.Type, ContextParent: c.Parent, Ancestors: c.Ancestors,
			Protocol: protocolSpan,
		}
		p.eventBuf = envelope.AppendFrame(p.eventBuf[:0], &m, body)
		// Every node that concludes this life of the context publishes
		// its event under the same name; the history keeps the first.
		p.log.publishEvent(p.eventBuf, p.Name+"/"+c.ID+"/"+c.Incarnation)
		p.gw.metrics.conclusions.WithLabelValues(c.Reason).Inc()
	}
}

// publish sends an accepted envelope into the pod's log; buf is reused
// for its frame and returned.
func (p *Pod) publish(m *envelope.Meta, body, buf []byte) []byte {
	p.published.Add(1)
	if m.Live() {
		p.log.publishLive(m, body)
		return buf
	}
	p.backlog.Add(int64(len(body)))
	p.gw.flight.add(int64(len(body)))
	return p.log.publish(m, body, buf)
}

// maxBacklog bounds the bytes a node has in a pod's log unseen.
func (g *Gateway) maxBacklog() int64 { return max(8<<20, 4*int64(g.cfg.MaxMessageBytes)) }

// maxBacklogFrames bounds the frames a node has in a pod's log unseen:
// half the entries the stream keeps beyond --history for followers that
// lag, so that the stream never drops an entry of this node before the
// fan-out has delivered it (without history: no bound but the bytes').
func (g *Gateway) maxBacklogFrames() uint64 {
	if !g.cfg.historyOn() {
		return 1 << 62
	}
	return history.Slack / 2
}

// overBacklog reports whether senders must wait.
func (p *Pod) overBacklog() bool {
	return p.backlog.Load() > p.gw.maxBacklog() || p.unseen() > p.gw.maxBacklogFrames()
}

// unseen is the number of frames this node put into the pod's log that
// have not come back out yet.
func (p *Pod) unseen() uint64 {
	seen := p.seen.Load()
	if published := p.published.Load(); published > seen {
		return published - seen
	}
	return 0
}

// throttle waits while the pod's backlog is over its bounds: the sender's
// reader pauses, and TCP slows the sender down. The wait has no end but
// the frames': the node keeps every frame of its own until it comes back
// from the stream, and publishes it again until it does (streamLog.check),
// so a sender waits for as long as the stream is unavailable.
func (p *Pod) throttle() {
	if !p.overBacklog() {
		return
	}
	p.waitBacklog(func() bool { return !p.overBacklog() }, nil)
}

// waitBacklog waits until done holds, the pod is removed, or stop fires
// (nil: never), and reports whether done held. It is woken whenever the
// pod's frames come back out of its log (wakeThrottled).
func (p *Pod) waitBacklog(done func() bool, stop <-chan time.Time) bool {
	p.throttled.Add(1)
	defer p.throttled.Add(-1)
	for {
		p.backlogMu.Lock()
		if p.drainedCh == nil {
			p.drainedCh = make(chan struct{})
		}
		ch := p.drainedCh
		p.backlogMu.Unlock()
		if done() {
			return true
		}
		if p.isDead() {
			return false
		}
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}

// wakeThrottled lets senders waiting in throttle look again.
func (p *Pod) wakeThrottled() {
	p.backlogMu.Lock()
	if p.drainedCh != nil {
		close(p.drainedCh)
		p.drainedCh = nil
	}
	p.backlogMu.Unlock()
}

// remoteMember is a participant connected to another node.
type remoteMember struct {
	wire.Identity
	node string
}

// remoteJoin records a join on another node and reports whether the local
// members are to be told. A join of an id already in the pod is a
// replacement: a connection here is closed with 4000, and nobody is told.
func (p *Pod) remoteJoin(m *envelope.Meta, body []byte) bool {
	id, ok := presenceIdentity(body)
	if !ok {
		return false
	}
	p.mu.Lock()
	old := p.members[id.ID]
	_, wasRemote := p.remote[id.ID]
	if old != nil {
		delete(p.members, id.ID)
		p.rebuildSnapshot()
	}
	oldGuest := p.dropGuestLocked(id.ID)
	p.remote[id.ID] = remoteMember{Identity: id, node: strings.Clone(m.Origin)}
	p.mu.Unlock()
	if old != nil {
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant on another gateway node")
	}
	return old == nil && oldGuest == nil && !wasRemote
}

// remoteLeave records a leave on another node and reports whether to tell
// the local members: not when the participant has since joined elsewhere.
func (p *Pod) remoteLeave(m *envelope.Meta) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.remote[m.From]; ok && r.node == m.Origin {
		delete(p.remote, m.From)
		return true
	}
	return false
}

// removeNode forgets the members of a node that is gone and tells the
// local members they left.
func (p *Pod) removeNode(node string) {
	var gone []wire.Identity
	p.mu.Lock()
	for id, r := range p.remote {
		if r.node == node {
			gone = append(gone, r.Identity)
			delete(p.remote, id)
		}
	}
	p.mu.Unlock()
	p.fanMu.Lock()
	defer p.fanMu.Unlock()
	for _, id := range gone {
		m := envelope.Meta{Kind: envelope.FrameLeave, Origin: node, From: id.ID, Protocol: protocolSpan}
		body, _ := presenceMessage(wire.PresenceLeave, id)
		p.gw.metrics.deliveries.Add(float64(p.deliver(&m, body, false)))
	}
	p.flushTouched()
}

// syncMembers learns, once, the members other nodes have in the pod.
func (p *Pod) syncMembers() {
	if p.gw.cluster == nil {
		return
	}
	p.synced.Do(func() {
		replies := p.gw.cluster.members(p.Name)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, r := range replies {
			for _, id := range r.Members {
				_, here := p.members[id.ID]
				if _, guest := p.guests[id.ID]; !here && !guest {
					p.remote[id.ID] = remoteMember{Identity: id, node: r.Node}
				}
			}
		}
	})
}

// reserve admits one upgrade for id before it happens, so that caps are
// decided while an HTTP answer can still be given.
func (p *Pod) reserve(id string) (ok, dead bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return false, true
	}
	if !p.hasRoomLocked(id) {
		return false, false
	}
	p.pending++
	return true, false
}

func (p *Pod) unreserve() {
	p.mu.Lock()
	p.pending--
	p.mu.Unlock()
	p.gw.maybeRemovePod(p)
}

// join makes r a member: its welcome comes first, then what it asked of
// the pod's past (want), then every envelope the fan-out handles after
// it joined; then the others hear of it (unless it replaces a connection
// of the same participant, which is closed with 4000 and announced to no
// one). The fan-out is paused meanwhile, so that the replay ends exactly
// where the live envelopes begin.
func (p *Pod) join(r *participant.Participant, want historyWant) {
	p.fanMu.Lock()
	defer p.fanMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending--
	old := p.members[r.ID]
	oldGuest := p.dropGuestLocked(r.ID)
	_, elsewhere := p.remote[r.ID]
	delete(p.remote, r.ID)
	others := p.identitiesLocked(r.ID)
	info, rep := p.replayFor(r, want)
	welcome := p.gw.welcome(p, r, others, info)
	// Presence is published with p.mu held: every one published before
	// this join is numbered up to here, and the welcome reflects it.
	r.JoinSeq = p.gw.frameSeq.Load()
	p.members[r.ID] = r
	p.rebuildSnapshot()
	if rep != nil {
		rep.first = welcome
		r.Start(rep)
	} else {
		r.Answer(welcome)
		r.Start(nil)
	}
	switch {
	case old != nil:
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant")
	case oldGuest != nil:
		// Replaced, as a connection would be: nobody is told.
	case elsewhere:
		// The other node closes its connection when it sees this join.
		p.publishPresence(envelope.FrameJoin, r, envelope.FlagReplace)
	default:
		p.publishPresence(envelope.FrameJoin, r, 0)
	}
}

// leave removes r unless a newer connection has replaced it.
func (p *Pod) leave(r *participant.Participant) {
	p.mu.Lock()
	if p.members[r.ID] != r {
		p.mu.Unlock()
		return
	}
	delete(p.members, r.ID)
	p.rebuildSnapshot()
	p.publishPresence(envelope.FrameLeave, r, 0)
	p.mu.Unlock()
	p.gw.maybeRemovePod(p)
}

// publishPresence sends a presence event; history never keeps it.
func (p *Pod) publishPresence(kind envelope.FrameKind, r *participant.Participant, flags uint8) {
	p.publishPresenceOf(kind, identityOf(r), flags)
}

// publishPresenceOf sends a presence event about who, a connection or a
// guest.
func (p *Pod) publishPresenceOf(kind envelope.FrameKind, who wire.Identity, flags uint8) {
	event := wire.PresenceJoin
	if kind == envelope.FrameLeave {
		event = wire.PresenceLeave
	}
	body, id := presenceMessage(event, who)
	m := envelope.Meta{Kind: kind, Flags: flags | envelope.FlagLive, Origin: p.gw.nodeID, From: who.ID, ID: id,
		Protocol: protocolSpan}
	p.published.Add(1)
	p.log.publishLive(&m, body)
}

func (p *Pod) rebuildSnapshot() {
	s := make([]*participant.Participant, 0, len(p.members))
	for _, m := range p.members {
		s = append(s, m)
	}
	p.snapshot.Store(&s)
}

// Members returns the local members.
func (p *Pod) Members() []*participant.Participant { return *p.snapshot.Load() }

// idle reports whether the pod holds nothing worth keeping: a pod exists
// while it has participants or contexts (its history outlives it, and its
// participants' rate buckets are the gateway's).
func (p *Pod) idle() bool {
	return len(p.members) == 0 && len(p.guests) == 0 && p.pending == 0 && p.Registry.Empty()
}

// removeWhenDrained removes the pod, if it is still idle, once every frame
// this node put into its log has come back: until then the node may have
// to publish one again (streamLog.check), and a pod removed would not.
func (p *Pod) removeWhenDrained() {
	p.waitBacklog(p.drained, nil)
	p.awaitingDrain.Store(false)
	p.gw.maybeRemovePod(p)
}

// answerWait bounds how long an answer waits for this node's frames to
// come back out of the pod's log (awaitSeen).
const answerWait = time.Second

// awaitSeen waits, at most d, until the first n frames this node put into
// the pod's log have come back out of it and are in the members' queues.
func (p *Pod) awaitSeen(n uint64, d time.Duration) {
	seen := func() bool { return p.seen.Load() >= n }
	if seen() {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	p.waitBacklog(seen, timer.C)
}

// settle waits, at most answerWait, until the frames this node has put
// into the pod's log so far are in the members' queues. A participant that
// joins next then receives none of them live: an envelope whose sender
// was answered before the join began is in the joiner's replay, if it
// asked for one, and never in its live stream.
func (p *Pod) settle() { p.awaitSeen(p.published.Load(), answerWait) }

func (p *Pod) close() {
	// Closed at shutdown without being removed, it is as dead: whoever
	// waits for its frames (throttle, removeWhenDrained) stops waiting.
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.Registry.Close()
	p.log.close()
	// Nothing of the pod comes back any more.
	p.gw.flight.release(p.backlog.Swap(0))
	p.wakeThrottled()
	p.fanMu.Lock()
	if p.graceTimer != nil {
		p.graceTimer.Stop()
	}
	p.fanMu.Unlock()
}

// sweep forgets live bodies whose markers never came.
func (p *Pod) sweep(now time.Time) {
	if l, ok := p.log.(*streamLog); ok {
		l.sweep(now)
	}
}

// drained reports whether every frame this node put into the pod's log has
// come back out of it (and so has been handed to the members).
func (p *Pod) drained() bool { return p.unseen() == 0 }

// isDead reports whether the pod was removed from the gateway.
func (p *Pod) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// guest is a member with no connection: an MCP session (docs/protocol.md
// section 9). It is present like any member (welcomes, presence, member
// lists, the pod's participant cap), but the fan-out hands it nothing: it
// reads the pod's history through a cursor of its own, so nothing is
// queued for it.
type guest struct {
	wire.Identity
	// replaced is called when a newer member of the same id (a connection
	// or a guest, on any node) takes its place; as for a connection,
	// nobody is told. It is called with the pod's lock held: it must
	// return at once and not call the pod.
	replaced func()
}

// joinGuest makes g a member under join's rules: it replaces a member of
// the same id here (a connection is closed with 4000) or on another node,
// and only a new id is announced. It fails when the pod is full or was
// removed (dead: look it up again).
func (p *Pod) joinGuest(g *guest) (ok, dead bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return false, true
	}
	if !p.hasRoomLocked(g.ID) {
		return false, false
	}
	old := p.members[g.ID]
	if old != nil {
		delete(p.members, g.ID)
		p.rebuildSnapshot()
		old.Close(participant.StatusReplaced, "replaced by an MCP session of the same participant")
	}
	oldGuest := p.dropGuestLocked(g.ID)
	_, elsewhere := p.remote[g.ID]
	delete(p.remote, g.ID)
	p.guests[g.ID] = g
	switch {
	case old != nil || oldGuest != nil:
	case elsewhere:
		p.publishPresenceOf(envelope.FrameJoin, g.Identity, envelope.FlagReplace)
	default:
		p.publishPresenceOf(envelope.FrameJoin, g.Identity, 0)
	}
	return true, false
}

// leaveGuest removes g unless something newer has replaced it; the
// caller then lets the gateway forget the pod if it is idle
// (maybeRemovePod).
func (p *Pod) leaveGuest(g *guest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.guests[g.ID] == g {
		delete(p.guests, g.ID)
		p.publishPresenceOf(envelope.FrameLeave, g.Identity, 0)
	}
}

// dropGuestLocked removes the guest of id, if any, telling it it was
// replaced, and returns it.
func (p *Pod) dropGuestLocked(id string) *guest {
	g := p.guests[id]
	if g != nil {
		delete(p.guests, id)
		g.replaced()
	}
	return g
}

// hasRoomLocked reports whether id may join: it is a member here already
// (and would be replaced), or the pod is under --max-participants-per-pod.
func (p *Pod) hasRoomLocked(id string) bool {
	_, conn := p.members[id]
	_, guest := p.guests[id]
	return conn || guest || len(p.members)+len(p.guests)+p.pending < p.gw.cfg.MaxParticipantsPerPod
}

// localIdentities lists the members on this node, connections and
// guests: what this node answers when another asks for its members.
func (p *Pod) localIdentities() []wire.Identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]wire.Identity, 0, len(p.members)+len(p.guests))
	for _, m := range p.members {
		out = append(out, identityOf(m))
	}
	for _, g := range p.guests {
		out = append(out, g.Identity)
	}
	return out
}

// participants lists the pod's members on every node.
func (p *Pod) participants() []wire.Identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.identitiesLocked("")
}

// identitiesLocked lists the pod's members on every node but except.
func (p *Pod) identitiesLocked(except string) []wire.Identity {
	out := make([]wire.Identity, 0, len(p.members)+len(p.guests)+len(p.remote))
	for id, m := range p.members {
		if id != except {
			out = append(out, identityOf(m))
		}
	}
	for id, g := range p.guests {
		if id != except {
			out = append(out, g.Identity)
		}
	}
	for id, m := range p.remote {
		if id != except {
			out = append(out, m.Identity)
		}
	}
	return out
}
