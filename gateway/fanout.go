package gateway

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
)

// onFrame handles one frame of the pod's log, in the log's order: the
// pod's subject calls it on one goroutine per subscription, the history
// stream on one goroutine per follower. seq and at are the frame's place
// and time in the history (0 without history).
func (p *Pod) onFrame(seq uint64, at int64, frame []byte) {
	p.fanMu.Lock()
	defer p.fanMu.Unlock()
	m := &p.meta
	body, err := envelope.DecodeFrame(frame, m)
	if err != nil {
		p.gw.log.Error("dropping a malformed frame", "pod", p.Name, "err", err)
		return
	}
	local := m.Origin == p.gw.nodeID
	if p.index != nil && m.Seq != 0 {
		last, known := p.delivered[m.Origin]
		if m.Seq <= last {
			return // republished after a failover, and stored twice
		}
		if !known {
			p.delivered[strings.Clone(m.Origin)] = m.Seq // not the frame's memory
		} else {
			p.delivered[m.Origin] = m.Seq
		}
		if l, ok := p.log.(*streamLog); ok && local {
			l.seen(m.Seq)
		}
	}
	if local && p.caughtUp && m.Kind != envelope.FrameContextEvent {
		p.seen.Add(1)
		if !m.Live() {
			p.backlog.Add(-int64(len(body)))
		}
		if p.throttled.Load() > 0 {
			p.wakeThrottled()
		}
	}
	if p.index != nil {
		p.index.Apply(seq, at, m, len(body))
	}
	if !p.caughtUp {
		p.applyPast(m, body, at)
		if seq >= p.upTo {
			p.caughtUpLocked()
		}
		return
	}
	if m.Marker() {
		return // a live frame whose body never came
	}
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
		switch {
		case p.index == nil && !local:
			return // without history each node announces its own conclusions
		case p.index != nil && !local:
			// Another node concluded it first: this node's registry
			// concludes it too, and this node's own event for it, if
			// any, is the one the history dropped.
			p.Registry.ApplyEvent(m.ContextID, m.Incarnation, eventReason(body), stamp(at))
		}
	}
	n := p.deliver(m, body, local)
	if m.Kind == envelope.FrameEnvelope && !local && m.ContextID != "" {
		c := contextOf(m)
		concluded := p.Registry.ApplyRemote(&c, m.Conclusion(), m.From, m.ID, len(body), stamp(at))
		if p.index == nil && len(concluded) > 0 {
			// Without history every node announces its own conclusions to
			// its own members; with it the origin's events are delivered.
			p.publishConclusions(concluded)
		}
	}
	p.gw.metrics.deliveries.Add(float64(n))
}

// applyPast rebuilds the registry from a frame of the pod's past, whoever
// sent it: its envelopes (a live frame's marker without its size) and its
// conclusions.
func (p *Pod) applyPast(m *envelope.Meta, body []byte, at int64) {
	switch m.Kind {
	case envelope.FrameEnvelope:
		if m.ContextID != "" {
			c := contextOf(m)
			p.Registry.ApplyRemote(&c, m.Conclusion(), m.From, m.ID, len(body), stamp(at))
		}
	case envelope.FrameContextEvent:
		p.Registry.ApplyEvent(m.ContextID, "", eventReason(body), stamp(at))
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

// stamp is a frame's time in the history, or now without history.
func stamp(at int64) time.Time {
	if at == 0 {
		return timeNow()
	}
	return time.Unix(0, at)
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
