package pod

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// What a frame does to the pod, wherever it comes from: one this node
// accepted (commit), one the log hands over (fromLog), one of the pod's
// past (applyPast). All of it happens with Pod.mu held.

// commit takes a frame this node accepted (an envelope, presence, a
// context event) into the pod's order. When the node orders the pod, the
// frame is recorded in the index, written behind into the history, and
// queued for the members at once; otherwise it goes into the stream and
// is all of that when it comes back (fromLog). frame is the frame of m
// and body, which commit keeps; tokens is body's token estimate (0: the
// index works it out). Call it with Pod.mu held.
func (p *Pod) commit(m *envelope.Meta, body, frame []byte, tokens int, at time.Time) {
	if !p.order.here() {
		p.flow.sent(m, len(body))
		p.order.publish(m, frame, nil)
		return
	}
	var entry *history.Entry
	if p.index != nil {
		entry = p.index.Apply(p.nextPos(), at.UnixNano(), frame, m, len(body), tokens, history.Loc{})
	}
	p.order.publish(m, frame, entry)
	// The accept span counts this frame's fan-out (tracing.go), not a
	// frame that its handling commits in turn.
	var span trace.Span
	count := p.fanoutTo
	p.fanoutTo = nil
	if count == nil {
		span = p.startDeliver(m) // nil with tracing off
	}
	n := p.handleFrame(m, body, true)
	endDeliver(span, n)
	if count != nil {
		*count = n
	}
	p.delivered(n, len(body))
}

// commitEvent is commit for a context's conclusion event. Call it with
// Pod.mu held.
func (p *Pod) commitEvent(m *envelope.Meta, body, frame []byte, id string, at time.Time) {
	if !p.order.here() {
		p.order.publishEvent(frame, nil, id)
		return
	}
	var entry *history.Entry
	if p.index != nil {
		entry = p.index.Apply(p.nextPos(), at.UnixNano(), frame, m, len(body), 0, history.Loc{})
	}
	p.order.publishEvent(frame, entry, id)
	p.delivered(p.handleFrame(m, body, true), len(body))
}

// fromLog takes a frame the log handed over, at loc in the history
// stream (zero without history) stored at at (0: now).
//
// burst is the dispatcher's, which wakes the writers at the end of its
// burst; nil (off the dispatcher) wakes them when the lock goes.
func (p *Pod) fromLog(frame []byte, loc history.Loc, at int64, burst *Burst) {
	p.lockFor(burst)
	defer p.unlockFor(burst)
	if !p.delivering.Load() {
		p.applyPast(frame, loc, at)
		return
	}
	m := &p.meta
	body, err := envelope.DecodeFrame(frame, m)
	if err != nil {
		p.node.Log.Error("dropping a malformed frame", "pod", p.Name, "err", err)
		return
	}
	local := m.Origin == p.node.ID
	if local && p.order.here() {
		return // delivered when it was accepted
	}
	if local {
		p.flow.back(m, len(body))
		delete(p.sending, m.ID)
	}
	tokens := frameTokens(m, body)
	if p.index != nil {
		p.index.Apply(p.nextPos(), at, frame, m, len(body), tokens, loc)
	}
	if m.Marker() {
		return // a live frame whose body was lost (livelost.go tells its members): only its place
	}
	if !local && p.node.Cluster != nil {
		p.node.Cluster.Seen(m.Origin)
	}
	span := p.startDeliver(m) // nil with tracing off
	n := p.handleFrame(m, body, local)
	endDeliver(span, n)
	if m.Kind == envelope.FrameEnvelope && !local && m.ContextID != "" {
		c := contextOf(m)
		concluded := p.Registry.ApplyRemote(&c, m.Conclusion(), m.From, m.ID, len(body), tokens, stamp(at))
		if p.index == nil && len(concluded) > 0 {
			// Without history every node announces its own conclusions to
			// its own members; with it the origin's events are delivered.
			p.publishConclusions(concluded)
		}
	}
	p.delivered(n, len(body))
}

// frameTokens is the token estimate of an envelope's frame, worked out
// once for the index and the registry (0 for other frames: the index
// works theirs out).
func frameTokens(m *envelope.Meta, body []byte) int {
	if m.Kind != envelope.FrameEnvelope || m.Marker() {
		return 0
	}
	return estimateTokens(body)
}

// estimateTokens is envelope.EstimateTokens; a benchmark replaces it to
// measure what the estimate costs the fan-out.
var estimateTokens = envelope.EstimateTokens

// handleFrame does what a frame does to the members: presence changes the
// member lists, a context event of another node concludes the context
// here too; then it is queued for the members that take it. It returns
// how many did. Call it with Pod.mu held.
func (p *Pod) handleFrame(m *envelope.Meta, body []byte, local bool) int {
	switch m.Kind {
	case envelope.FrameKick:
		p.applyKick(m, body)
		return 0 // its leave events are what the members are told
	case envelope.FrameEnvelope:
		if m.Flags&envelope.FlagCapability != 0 {
			p.applyCapability(m, body, true)
		}
		if m.Flags&envelope.FlagCall != 0 && !p.applyCall(m, body, local, false, timeNow()) {
			return 0 // an answer that came too late
		}
	case envelope.FrameJoin:
		// Another node's join changes who is where, unless it is stale;
		// the members are told what they were not told yet (a
		// replacement or a move is told to nobody: remote.go, shown).
		if local && p.inflight[m.From] == m.Seq {
			delete(p.inflight, m.From)
		}
		j, ok := readJoin(body)
		if !ok || !local && !p.remoteJoin(m, j) {
			p.debugPresence("join", m.From, m.Origin, false, "stale")
			return 0
		}
		if !p.tellJoin(m.Origin, j) {
			p.debugPresence("join", m.From, m.Origin, false, "shown")
			return 0
		}
		p.debugPresence("join", m.From, m.Origin, true, "")
		p.presenceOfServer(body)
	case envelope.FrameLeave:
		if gone := local || p.remoteLeave(m); gone {
			defer p.callsMemberGone(strings.Clone(m.From)) // after its leave
		}
		if !p.tellLeave(m.From, m.Origin) {
			p.debugPresence("leave", m.From, m.Origin, false, "not shown")
			return 0
		}
		p.debugPresence("leave", m.From, m.Origin, true, "")
		p.presenceOfServer(body)

	case envelope.FrameContextEvent:
		switch {
		case p.index == nil && !local:
			return 0 // without history each node announces its own conclusions
		case !local:
			// Another node concluded it first: this node's registry
			// concludes it too, and this node's own event for it, if
			// any, is the one the history dropped.
			p.Registry.ApplyEvent(m.ContextID, m.Incarnation, eventReason(body), timeNow())
		}
		// The grants scoped to it end with it, after the event.
		defer p.endGrants(m.ContextID, true)
	}
	p.wakeInboxes(m, body)
	return p.deliver(m, body, local)
}

// applyPast rebuilds the index and the registry from a frame of the pod's
// past, whoever sent it: its envelopes (a live frame's marker without its
// size) and its conclusions. Nobody receives it. Call it with Pod.mu
// held.
func (p *Pod) applyPast(frame []byte, loc history.Loc, at int64) {
	m := &p.meta
	body, err := envelope.DecodeFrame(frame, m)
	if err != nil {
		p.node.Log.Error("dropping a malformed frame of the pod's past", "pod", p.Name, "err", err)
		return
	}
	tokens := frameTokens(m, body)
	if p.index != nil {
		p.index.Apply(p.nextPos(), at, frame, m, len(body), tokens, loc)
	}
	switch m.Kind {
	case envelope.FrameEnvelope:
		if m.ContextID != "" {
			c := contextOf(m)
			p.Registry.ApplyRemote(&c, m.Conclusion(), m.From, m.ID, len(body), tokens, stamp(at))
		}
		if m.Flags&envelope.FlagCapability != 0 {
			p.applyCapability(m, body, false) // grants live as long as the pod: its history's are in force
		}
		if m.Flags&envelope.FlagCall != 0 {
			p.applyCall(m, body, false, true, stamp(at))
		}
	case envelope.FrameContextEvent:
		p.Registry.ApplyEvent(m.ContextID, "", eventReason(body), stamp(at))
		p.endGrants(m.ContextID, false)
	case envelope.FrameKick:
		p.keepBan(m, body) // a ban of the past that still runs
	}
}

// orderLost is told by the pod's log that this node no longer knows the
// pod's order: its follower of the history stream stayed behind what the
// stream stored of this node's for behindAfter, or the node was cut off
// for cutAfter (checkFollower). It must not
// deliver the pod any more. Its connections are closed with 4503
// (they resume, here once the pod is opened again, or on another node),
// its MCP participants end, and the pod is dead, so that the next join
// opens it anew, reading the stream again, or is refused while the
// stream does not answer.
func (p *Pod) orderLost(err error) {
	const why = "this node lost the pod's order; resume"
	p.node.Log.Error("lost the order of a pod: closing its connections here", "pod", p.Name, "err", err)
	p.node.Metrics.OrderLost.Inc()
	p.mu.Lock()
	p.dead = true
	members := p.Members()
	for id, g := range p.guests {
		delete(p.guests, id)
		g.removed(why)
	}
	p.mu.Unlock()
	for _, r := range members {
		r.Close(participant.StatusOrderLost, why)
	}
	p.node.forget(p)
}

// expireContexts concludes the contexts that are due (the registry's
// timer), taking Pod.mu, so that their events take their place in the
// pod's order.
func (p *Pod) expireContexts() {
	p.lock()
	defer p.unlock()
	p.Registry.Expire(timeNow())
}

// publishConclusions sends the system/context events of concluded
// contexts. The registry calls it with contexts.Registry.mu held
// (timeouts: expireContexts) and ingress within Accept's commit, so
// events follow the envelope that caused them in the pod's order. Call
// it with Pod.mu held.
func (p *Pod) publishConclusions(concluded []contexts.Concluded) {
	now := timeNow()
	for i := range concluded {
		c := &concluded[i]
		body, id := contextEvent(c)
		m := envelope.Meta{
			Kind: envelope.FrameContextEvent, Flags: envelope.FlagConclusion,
			Origin: p.node.ID, From: wire.GatewayID, ID: id, Incarnation: c.Incarnation,
			ContextID: c.ID, ContextType: c.Type, ContextParent: c.Parent, Ancestors: c.Ancestors,
			Protocol: protocolSpan,
		}
		frame := envelope.Frame(&m, body)
		// Every node that concludes this life of the context publishes
		// its event under the same name; the history keeps the first.
		p.commitEvent(&m, body, frame, p.Name+"/"+c.ID+"/"+c.Incarnation, now)
		p.node.Metrics.Conclusions.WithLabelValues(c.Reason).Inc()
	}
}

// contextOf is the context a frame's header names, as the registry takes it.
func contextOf(m *envelope.Meta) envelope.Context {
	c := envelope.Context{ID: m.ContextID, Type: m.ContextType, Parent: m.ContextParent, Path: m.Path()}
	if c.Path {
		c.Segments = strings.Count(c.ID, "/") + 1
	}
	return c
}

// eventReason reads a system/context event's reason.
func eventReason(body []byte) string {
	return gjson.GetBytes(body, "payload.reason").String()
}

// stamp is a frame's time in the history, or now without one.
func stamp(at int64) time.Time {
	if at == 0 {
		return timeNow()
	}
	return time.Unix(0, at)
}

var timeNow = time.Now

// identityOf is a connection's identity, as others see it.
func identityOf(p *participant.Participant) wire.Identity {
	return wire.Identity{ID: p.ID, Capabilities: p.Caps().Wire(), Serves: p.Serves()}
}
