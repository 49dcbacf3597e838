package pod

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Pod is one named room on this node: its local members, its context
// registry, the index of its history, and its log (order, log.go: where
// its order comes from and how its frames reach the other nodes).
type Pod struct {
	Name    string
	node    *Node
	subject string
	// order is the pod's log (podLog): where its order comes from.
	order    podLog
	Registry *contexts.Registry
	// index is what this node knows of the pod's history; nil when
	// history is off.
	index *history.Index
	flow  flow
	// framed is set when an accepted envelope needs its frame: history
	// keeps it, or other nodes are sent it. A node alone without history
	// only queues the envelope's bytes for its members.
	framed bool

	// mu is the pod's order lock: whoever holds it decides what comes
	// next in the pod (an accepted envelope, a join, a leave, a context's
	// conclusion, a frame from the log), records it and queues it for the
	// members. See docs/locks.md for the order of the locks.
	mu sync.Mutex
	// pos is the position (history.Entry.Pos) of the last frame applied.
	pos     uint64
	members map[string]*participant.Participant
	// snapshot is the members as a slice: the fan-out's, and the
	// janitor's and the shutdown's, who read it without the lock.
	snapshot atomic.Pointer[[]*participant.Participant]
	// guests are the members with no connection (MCP sessions), by id.
	// An id is a member here once, as a connection or as a guest.
	guests map[string]*guest
	// observers are the connections that watch the pod without being
	// present (observe=1): they receive what members do, in the
	// snapshot, but no presence is told of them and no list names them.
	observers map[*participant.Participant]struct{}
	// remote are the members connected to other gateway nodes, by id
	// (remote.go).
	remote map[string]remoteMember
	// heard are, by node, the number of the last presence frame of that
	// node applied here (or of the member list applied: remote.go).
	heard map[string]uint64
	// since are when the local members (connections and guests) joined,
	// by the ts of their join event (remote.go: the newest join wins).
	since map[string]time.Time
	// shown are, by id, the join the local members were told last, with
	// no leave since (remote.go: what they are told follows it, and a
	// welcome lists it).
	shown map[string]shownJoin
	// inflight are this node's joins whose frames have not come back from
	// the stream yet, by id, with their frame numbers (remote.go, told).
	inflight map[string]uint64
	synced   sync.Once
	pending  int // upgrades admitted but not yet joined
	// publishers are the senders with no connection at work in the pod
	// (Acquire: POSTs), so that a kick reaches what they send next.
	publishers map[*Sender]struct{}
	dead       bool // removed from the node's table (or closed): joiners must look again
	// burst is the burst of the order lock's hold: the members queued
	// something since the lock was taken, whose writers are woken once as
	// it is let go (unlock), or moved into the burst of the lock's caller
	// (unlockFor).
	burst Burst
	// sending are the ids of envelopes this node sent into the stream and
	// has not seen back (OrderStream): duplicates already.
	sending map[string]struct{}
	// grants are the capabilities granted at run time, by recipient, and
	// bans the kicked participants kept out, by id (trust.go).
	grants capability.PodGrants
	bans   map[string]ban
	// calls are the MCP requests in flight (calls.go), proposals the
	// proposals (proposals.go).
	calls     calls
	proposals proposals
	// meta is a scratch header for frames from the log.
	meta envelope.Meta
	// eventBuf is reused for the frames of context events.
	eventBuf []byte

	ready   chan struct{} // closed once the pod has read its past
	openErr error         // why it could not (set before ready closes)
	// m are the pod's series in /metrics (podmetrics.go), spanNames the
	// names of its spans (tracing.go).
	m         *podMetrics
	spanNames spanNames
	// fanoutTo, while an envelope whose accept span records its fan-out
	// is committed, is where commit counts its deliveries here, instead
	// of a span of its own (tracing.go).
	fanoutTo *int
	// delivering is set, under the order lock, once the pod has read its
	// past: until then what the log hands it is its past (applyPast),
	// delivered to nobody. It is read with the lock held, and without it
	// (streamLog.bodyOf).
	delivering atomic.Bool
}

// New opens a pod on node. It reads the pod's past (its history: the
// registry and the index are rebuilt from it) in the background: wait for
// it with WaitReady before the pod is used.
func New(node *Node, name string) *Pod {
	cfg := &node.Config
	p := &Pod{
		Name: name, node: node, subject: Subject(name),
		members:    map[string]*participant.Participant{},
		guests:     map[string]*guest{},
		remote:     map[string]remoteMember{},
		heard:      map[string]uint64{},
		since:      map[string]time.Time{},
		shown:      map[string]shownJoin{},
		inflight:   map[string]uint64{},
		sending:    map[string]struct{}{},
		bans:       map[string]ban{},
		publishers: map[*Sender]struct{}{},
		observers:  map[*participant.Participant]struct{}{},
		ready:      make(chan struct{}),
		m:          node.Metrics.Pods.open(name),
		spanNames:  newSpanNames(node, name),
	}
	empty := []*participant.Participant{}
	p.snapshot.Store(&empty)
	p.Registry = contexts.NewRegistry(contexts.Config{
		Contexts: cfg.Contexts,
		OnDue:    p.expireContexts,
	}, p.publishConclusions)
	if node.historyOn() {
		p.index = history.NewIndex(cfg.History, cfg.HistoryAge)
	}
	p.flow.init(p)
	p.calls.init(cfg.Calls)
	p.proposals.init()
	p.order = newLog(p)
	p.framed = node.historyOn() || node.Ordering != OrderLocal
	// Nothing may conclude before the past is in the registry.
	p.Registry.Pause(true)
	go p.open()
	return p
}

// openTimeout bounds reading a pod's past.
const openTimeout = 30 * time.Second

// open reads the pod's past and starts following the other nodes.
func (p *Pod) open() {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	start := time.Now()
	err := p.order.open(ctx)
	p.node.Log.Debug("pod opened", "pod", p.Name, "took", time.Since(start), "err", err)
	p.mu.Lock()
	if err != nil {
		p.openErr = err
		p.dead = true
	} else {
		p.delivering.Store(true)
		p.Registry.Pause(false)
		p.armProposals()
	}
	p.mu.Unlock()
	close(p.ready)
}

// WaitReady waits until the pod has read its past; an error says it could
// not (the history stream did not answer), and the pod is dead.
func (p *Pod) WaitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return p.openErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the pod: its log, its registry's timers, and whoever waits
// on it (a throttled sender, a drain).
func (p *Pod) Close() {
	p.mu.Lock()
	p.dead = true
	for id := range p.calls.byID {
		endCall(p.calls.remove(id), "", nil, "pod_closed") // stops the timers of the calls this node answers for
	}
	for _, pr := range p.proposals.byID {
		if pr.timer != nil {
			pr.timer.Stop()
		}
	}
	p.m.close()
	p.mu.Unlock()
	p.Registry.Close()
	p.order.close()
	p.flow.wake()
	p.node.closed(p.Name)
}

// Ready reports whether the pod has read its past and delivers.
func (p *Pod) Ready() bool { return p.delivering.Load() && !p.Dead() }

// Dead reports whether the pod was removed (or failed to open): a joiner
// must look it up again.
func (p *Pod) Dead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// lock takes the order lock and starts a burst of its own.
func (p *Pod) lock() {
	p.mu.Lock()
	p.burst.open(&p.node.burstSeq)
}

// lockFor takes the order lock within b, a burst that spans several holds
// of the lock (a reader's, a POST's, a dispatcher's); nil: a burst of its
// own, as lock.
func (p *Pod) lockFor(b *Burst) {
	if b == nil {
		p.lock()
		return
	}
	p.mu.Lock()
	p.burst.within(b, &p.node.burstSeq)
}

// unlockFor lets the order lock go, moving the members it queued for into
// b, whose owner wakes them when it flushes (nil: woken now, as unlock).
func (p *Pod) unlockFor(b *Burst) {
	if b == nil {
		p.unlock()
		return
	}
	p.burst.handTo(b)
	p.mu.Unlock()
}

// unlock lets the order lock go and wakes, once, the writer of every
// member something was queued for while it was held: a burst goes out
// in one write per connection.
func (p *Pod) unlock() { p.burst.flushUnlocking(&p.mu) }

// nextPos gives the next frame its position. Call it with Pod.mu held.
func (p *Pod) nextPos() uint64 {
	p.pos++
	return p.pos
}

// Members returns the connections on this node that the pod delivers to:
// its members' and its observers' (the fan-out's snapshot).
func (p *Pod) Members() []*participant.Participant { return *p.snapshot.Load() }

// rebuildSnapshot makes the members' snapshot anew after a change of
// members or observers. Call it with Pod.mu held.
func (p *Pod) rebuildSnapshot() {
	s := make([]*participant.Participant, 0, len(p.members)+len(p.observers))
	for _, m := range p.members {
		s = append(s, m)
	}
	for o := range p.observers {
		s = append(s, o)
	}
	p.snapshot.Store(&s)
	p.countMembers()
}

// idle reports whether the pod holds nothing worth keeping: a pod exists
// while it has participants or contexts (its history outlives it, and its
// participants' rate buckets are the node's). Call it with Pod.mu held
// (removeIfIdle).
func (p *Pod) idle() bool {
	if len(p.bans) > 0 {
		now := timeNow()
		for id := range p.bans {
			p.banned(id, now) // forgets those that ended
		}
	}
	return len(p.members) == 0 && len(p.guests) == 0 && len(p.observers) == 0 && p.pending == 0 && len(p.publishers) == 0 && len(p.bans) == 0 && p.Registry.Empty()
}

// removeIfIdle marks the pod dead when it is idle, and reports whether
// it did: the caller (Node.remove, with the table shard's lock held) then
// forgets it and closes it.
func (p *Pod) removeIfIdle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead || !p.idle() {
		return false
	}
	p.dead = true
	return true
}

// Reserve admits one upgrade for id before it happens, so that caps and
// bans are decided while an HTTP answer can still be given. dead says the
// pod was removed as it was looked up: look it up again. An observer
// (observe) is held to bans, not to --max-participants-per-pod: it is no
// participant of the pod.
func (p *Pod) Reserve(id string, observe bool) (dead bool, refusal *envelope.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return true, nil
	}
	if observe {
		if e := p.banned(id, timeNow()); e != nil {
			return false, e
		}
	} else if e := p.admits(id); e != nil {
		return false, e
	}
	p.pending++
	return false, nil
}

// admits is the refusal of a join of id, or nil: it is banned, or the pod
// is full. Call it with Pod.mu held.
func (p *Pod) admits(id string) *envelope.Error {
	if e := p.banned(id, timeNow()); e != nil {
		return e
	}
	if !p.hasRoom(id) {
		return envelope.Errorf(wire.CodeOverCapacity, "pod %q has %d participants, the limit", p.Name, p.node.Config.MaxParticipantsPerPod)
	}
	return nil
}

// Unreserve gives back a Reserve that did not join; the caller then lets
// the node forget the pod if it is idle (Node.RemoveIdle).
func (p *Pod) Unreserve() {
	p.mu.Lock()
	p.pending--
	p.mu.Unlock()
}

// hasRoom reports whether id may join: it is a member here already (and
// would be replaced), or the pod is under --max-participants-per-pod.
// Call it with Pod.mu held.
func (p *Pod) hasRoom(id string) bool {
	_, conn := p.members[id]
	_, guest := p.guests[id]
	return conn || guest || len(p.members)+len(p.guests)+p.pending < p.node.Config.MaxParticipantsPerPod
}

// Index is the pod's history index (nil without history), for readers
// (the MCP endpoint's cursors).
func (p *Pod) Index() *history.Index { return p.index }

// Participants lists the pod's members on every node.
func (p *Pod) Participants() []wire.Identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.identities("")
}

// LocalIdentities lists the members on this node, connections and
// guests.
func (p *Pod) LocalIdentities() []wire.Identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.localIdentities()
}

// localIdentities is LocalIdentities. Call it with Pod.mu held.
func (p *Pod) localIdentities() []wire.Identity {
	out := make([]wire.Identity, 0, len(p.members)+len(p.guests))
	for _, m := range p.members {
		out = append(out, identityOf(m))
	}
	for _, g := range p.guests {
		out = append(out, g.Identity)
	}
	return out
}

// identities lists the pod's members on every node but except. Call it
// with Pod.mu held.
func (p *Pod) identities(except string) []wire.Identity {
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

// Acquire keeps the pod while s, a sender with no connection (a POST),
// sends into it. dead says the pod was removed as it was looked up: look
// it up again; a refusal says s's participant is banned from it
// (gateway/kick). A kick while s is at work refuses what s sends after
// it (removedSender).
func (p *Pod) Acquire(s *Sender) (dead bool, refusal *envelope.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return true, nil
	}
	if e := p.banned(s.ID, timeNow()); e != nil {
		return false, e
	}
	p.publishers[s] = struct{}{}
	return false, nil
}

// Release ends an Acquire; the caller then lets the node forget the pod
// if it is idle (Node.RemoveIdle).
func (p *Pod) Release(s *Sender) {
	p.mu.Lock()
	delete(p.publishers, s)
	p.mu.Unlock()
}

// removedSender is the refusal of an envelope whose sender is no longer
// the pod's: its connection or MCP session was kicked or replaced, or its
// participant was kicked while its POST was at work. Nothing it sends
// after that is relayed (docs/protocol.md section 6). A kick's removal
// happens under Pod.mu too, so that there is no moment between the two.
// Call it with Pod.mu held.
func (p *Pod) removedSender(s *Sender) *envelope.Error {
	switch {
	case s.Conn != nil && p.members[s.ID] == s.Conn:
		return nil
	case s.Conn != nil && s.Conn.Observes():
		if _, ok := p.observers[s.Conn]; ok {
			return nil
		}
	case s.Guest != nil && p.guests[s.ID] == s.Guest:
		return nil
	case s.Conn == nil && s.Guest == nil && !s.kicked:
		return nil
	}
	return envelope.Errorf(wire.CodeForbidden, "you are no longer in pod %q (kicked, or replaced by a newer connection of yours): the envelope was not relayed", p.Name).Ruled(audit.RuleRemoved)
}

// Tick is the janitor's, every second: the history index follows what
// the stream discarded (first is the stream's oldest sequence, 0 when it
// is not known), and every ten seconds (sweep) what waits for what will
// not come is forgotten.
func (p *Pod) Tick(now time.Time, first uint64, sweep bool) {
	if first > 0 && p.index != nil {
		p.index.Discard(first)
	}
	p.order.tick(now, sweep)
	if sweep {
		p.mu.Lock()
		p.sweepCalls(now)
		p.mu.Unlock()
	}
}

// newID is an id for a frame the gateway makes.
func newID() string { return uuid.NewString() }
