package gateway

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
)

// Pod is one named room on this gateway: its local members, its context
// registry, its participants' rate buckets and its NATS subscription.
type Pod struct {
	Name    string
	subject string
	gw      *Gateway

	mu      sync.Mutex // guards members, pending, dead
	members map[string]*participant.Participant
	pending int  // upgrades admitted but not yet joined
	dead    bool // removed from the gateway; joiners must look again
	// presenceSeq numbers this node's presence frames of the pod; a
	// member skips those up to the number current at its join, which its
	// welcome already reflects.
	presenceSeq uint64
	// remote are the members connected to other gateway nodes, by id.
	remote map[string]remoteMember
	synced sync.Once
	// snapshot is the members as a slice for the fan-out, rebuilt on every
	// join and leave so that the fan-out takes no lock.
	snapshot atomic.Pointer[[]*participant.Participant]

	Registry *contexts.Registry
	Buckets  *limits.BucketSet

	sub *nats.Subscription
	// meta is reused by the fan-out (one goroutine per subscription) and
	// eventBuf under the registry's lock.
	meta     envelope.Meta
	eventBuf []byte
}

func newPod(gw *Gateway, name string) (*Pod, error) {
	p := &Pod{
		Name: name, subject: PodSubject(name), gw: gw,
		members: make(map[string]*participant.Participant),
		remote:  make(map[string]remoteMember),
		Buckets: limits.NewBucketSet(
			limits.Rate{Per: gw.cfg.Rate, Burst: gw.cfg.Burst},
			limits.Rate{Per: gw.cfg.ContextCreateRate, Burst: gw.cfg.ContextCreateBurst}),
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
	sub, err := gw.nc.Subscribe(p.subject, p.fanOut)
	if err != nil {
		return nil, err
	}
	// The callback never blocks, so the subscription must never drop.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	p.sub = sub
	return p, nil
}

// publishConclusions sends the system/context events of concluded
// contexts. It runs with the registry locked, so events follow the envelope
// that caused them on the pod's subject.
func (p *Pod) publishConclusions(concluded []*contexts.Context) {
	for _, c := range concluded {
		m := envelope.Meta{
			Kind: envelope.FrameContextEvent, Flags: envelope.FlagConclusion,
			Origin: p.gw.nodeID, From: envelope.GatewayID,
			ContextID: c.ID, ContextType: c.Type, Protocol: protocolSpan,
		}
		if c.Parent != "" {
			m.Ancestors = p.Registry.AncestorsLocked(c, nil)
		}
		p.eventBuf = envelope.AppendFrame(p.eventBuf[:0], &m, contextEvent(c))
		p.gw.publish(p.subject, p.eventBuf)
		p.gw.metrics.conclusions.WithLabelValues(c.Reason).Inc()
	}
}

// fanOut delivers one frame of the pod's subject to the local members. NATS
// calls it on one goroutine per subscription, in the subject's order.
func (p *Pod) fanOut(msg *nats.Msg) {
	m := &p.meta
	body, err := envelope.DecodeFrame(msg.Data, m)
	if err != nil {
		p.gw.log.Error("dropping a malformed frame", "pod", p.Name, "err", err)
		return
	}
	local := m.Origin == p.gw.nodeID
	if !local && p.gw.cluster != nil {
		p.gw.cluster.seen(m.Origin)
	}
	switch m.Kind {
	case envelope.FrameJoin:
		tell := local || p.remoteJoin(m, body)
		if !tell || m.Flags&envelope.FlagReplace != 0 {
			return // a replacement: nobody is told
		}
	case envelope.FrameLeave:
		if !local && !p.remoteLeave(m) {
			return
		}
	case envelope.FrameContextEvent:
		if !local {
			return // every node announces its own conclusions to its own members
		}
	}
	n := p.deliver(m, body, local)
	if m.Kind == envelope.FrameEnvelope && !local && m.ContextID != "" {
		c := envelope.Context{ID: m.ContextID, Type: m.ContextType, Parent: m.ContextParent, Path: m.Path()}
		if c.Path {
			c.Segments = strings.Count(c.ID, "/") + 1
		}
		p.Registry.ApplyRemote(&c, m.Conclusion(), m.From, len(body), timeNow())
	}
	p.gw.metrics.deliveries.Add(float64(n))
}

// deliver hands body to the local members that take it and returns how
// many did. Participants that speak MCPx get the body with its protocol
// rewritten, made once and shared.
func (p *Pod) deliver(m *envelope.Meta, body []byte, local bool) int {
	var mcpx []byte
	pick := func(r *participant.Participant) []byte {
		if r.Protocol != envelope.ProtocolMCPX {
			return body
		}
		if mcpx == nil {
			mcpx = asMCPX(body, m.Protocol)
		}
		return mcpx
	}
	n := 0
	members := *p.snapshot.Load()
	switch m.Kind {
	case envelope.FrameJoin, envelope.FrameLeave:
		for _, r := range members {
			if r.ID == m.From || (local && m.Seq <= r.JoinSeq) {
				continue
			}
			if r.Deliver(pick(r)) {
				n++
			}
		}
	default:
		for _, r := range members {
			if r.Filter().Admits(m, r.ID) && r.Deliver(pick(r)) {
				n++
			}
		}
	}
	return n
}

// remoteMember is a participant connected to another node.
type remoteMember struct {
	identity
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
	p.remote[id.ID] = remoteMember{identity: id, node: strings.Clone(m.Origin)}
	p.mu.Unlock()
	if old != nil {
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant on another gateway node")
	}
	return old == nil && !wasRemote
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
	var gone []identity
	p.mu.Lock()
	for id, r := range p.remote {
		if r.node == node {
			gone = append(gone, r.identity)
			delete(p.remote, id)
		}
	}
	p.mu.Unlock()
	for _, id := range gone {
		m := envelope.Meta{Kind: envelope.FrameLeave, Origin: node, From: id.ID, Protocol: protocolSpan}
		body := newSystemMessage(envelope.ProtocolMCPP, "system/presence", map[string]any{"event": "leave", "participant": id}).bytes()
		p.gw.metrics.deliveries.Add(float64(p.deliver(&m, body, false)))
	}
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
				if _, here := p.members[id.ID]; !here {
					p.remote[id.ID] = remoteMember{identity: id, node: r.Node}
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
	if _, replacing := p.members[id]; !replacing && len(p.members)+p.pending >= p.gw.cfg.MaxParticipantsPerPod {
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

// join makes r a member: its welcome is queued first, then it is in the
// fan-out, then the others hear of it (unless it replaces a connection of
// the same participant, which is closed with 4000 and announced to no one).
func (p *Pod) join(r *participant.Participant) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending--
	old := p.members[r.ID]
	_, elsewhere := p.remote[r.ID]
	delete(p.remote, r.ID)
	others := make([]identity, 0, len(p.members)+len(p.remote))
	for id, m := range p.members {
		if id != r.ID {
			others = append(others, identityOf(m))
		}
	}
	for _, m := range p.remote {
		others = append(others, m.identity)
	}
	r.Deliver(p.gw.welcome(p, r, others))
	r.JoinSeq = p.presenceSeq
	p.members[r.ID] = r
	p.rebuildSnapshot()
	r.Start()
	switch {
	case old != nil:
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant")
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

func (p *Pod) publishPresence(kind envelope.FrameKind, r *participant.Participant, flags uint8) {
	event := "join"
	if kind == envelope.FrameLeave {
		event = "leave"
	}
	p.presenceSeq++
	m := envelope.Meta{Kind: kind, Flags: flags, Origin: p.gw.nodeID, From: r.ID, Protocol: protocolSpan, Seq: p.presenceSeq}
	p.gw.publish(p.subject, envelope.AppendFrame(nil, &m, presence(event, r)))
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

// idle reports whether the pod holds nothing worth keeping.
func (p *Pod) idle() bool {
	return len(p.members) == 0 && p.pending == 0 && p.Registry.Empty() && p.Buckets.Len() == 0
}

func (p *Pod) close() {
	p.Registry.Close()
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}

// sweep forgets departed participants' refilled buckets.
func (p *Pod) sweep(now time.Time) { p.Buckets.Sweep(now) }
