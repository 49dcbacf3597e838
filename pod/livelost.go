package pod

import (
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// A live frame is lost when its marker came through the stream and its
// body never did, and the node that accepted it could not give it again
// (it is gone: a crash, a kill; or it kept it no longer). This node then
// counts it (mcpp_live_frames_lost_total), logs it, does to the pod what
// the marker says it can (a join or a leave changes who is there), and
// tells the members that may have missed it, those the frame would have
// reached, with a system/gap in its place (docs/protocol.md section 8).

// liveLost does the marker of a lost live frame, frame, had its body
// been lost for why. burst is the dispatcher's, or nil.
func (p *Pod) liveLost(frame []byte, why error, burst *Burst) {
	p.lockFor(burst)
	defer p.unlockFor(burst)
	var m envelope.Meta
	if _, err := envelope.DecodeFrame(frame, &m); err != nil || p.dead {
		return
	}
	p.node.Metrics.LiveLost.Inc()
	p.node.Log.Warn("a live frame of another node was lost: its body never came, and its node could not give it again",
		"pod", p.Name, "origin", m.Origin, "seq", m.Seq, "id", m.ID, "from", m.From, "why", why.Error())
	gap := wire.Gap{ID: m.ID, Reason: why.Error()}
	switch m.Kind {
	case envelope.FrameEnvelope:
		gap.Lost, gap.From, gap.Context = wire.GapEnvelope, m.From, m.ContextID
	case envelope.FrameJoin:
		who := wire.Identity{ID: m.From, Capabilities: []wire.Capability{}}
		body, _ := presenceMessage(wire.PresenceJoin, who, "")
		if j, ok := readJoin(body); !ok || !p.remoteJoin(&m, j) || !p.tellJoin(m.Origin, j) {
			return // nobody here is told of it: stale, a replacement, or a member known already
		}
		gap.Lost, gap.Event, gap.Participant = wire.GapPresence, wire.PresenceJoin, &who
	case envelope.FrameLeave:
		who := p.remote[m.From].Identity
		if who.ID == "" {
			who = wire.Identity{ID: m.From, Capabilities: []wire.Capability{}}
		}
		p.remoteLeave(&m)
		if !p.tellLeave(m.From, m.Origin) {
			return // nobody here knew it was there, or it joined again since
		}
		gap.Lost, gap.Event, gap.Participant = wire.GapPresence, wire.PresenceLeave, &who
	default:
		return // a request's answer, a kick: none is live
	}
	msg := newSystemMessage(wire.ProtocolMCPP, wire.KindGap, gap)
	if gap.Context != "" {
		msg.Context = wire.Context{ID: m.ContextID, Type: m.ContextType, Parent: m.ContextParent}
	}
	m.Flags &^= envelope.FlagMarker
	m.Protocol = protocolSpan
	body := msg.bytes()
	p.delivered(p.deliver(&m, body, false), len(body))
}
