package pod

import (
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// deliver queues body for the local members that take it, the same bytes
// for all of them (MCPx participants share one copy with the protocol
// rewritten), and returns how many took it. body is the frame's (or, on a
// node that needs no frame, a copy of its own: ingress.commit), which
// nobody changes: the writers write it as it is. Their writers are woken
// once, when the order lock is let go (unlock), or at the end of the
// burst the lock was taken in (Burst, lockFor), so that what a burst
// queued goes out in one write per connection. Call it with Pod.mu held.
func (p *Pod) deliver(m *envelope.Meta, body []byte, local bool) int {
	var mcpx []byte
	pick := func(r *participant.Participant) []byte {
		if r.Protocol == wire.ProtocolMCPX {
			if mcpx == nil {
				mcpx = asMCPX(body, m.Protocol)
			}
			return mcpx
		}
		return body
	}
	take := func(r *participant.Participant) bool {
		if !r.Enqueue(pick(r)) {
			return false
		}
		p.burst.add(r)
		return true
	}
	n := 0
	members := *p.snapshot.Load()
	switch m.Kind {
	case envelope.FrameJoin, envelope.FrameLeave:
		for _, r := range members {
			// A joiner's welcome lists whom the members had been told
			// of and the joins here still on their way (Pod.told): it
			// is told every change after it, but of itself and of those
			// joins.
			if r.ID == m.From {
				continue
			}
			if local && r.Expect != nil && m.Kind == envelope.FrameJoin {
				if seq, ok := r.Expect[m.From]; ok && seq == m.Seq {
					delete(r.Expect, m.From)
					continue
				}
			}
			if take(r) {
				n++
			}
		}
	default:
		for _, r := range members {
			if r.Filter().Admits(m, r.ID) && take(r) {
				n++
			}
		}
	}
	return n
}

// asMCPX returns body with its protocol token replaced by MCPx's, in a new
// slice; the fan-out calls it at most once per envelope. That slice is the
// one allocation a delivery may make, shared by every MCPx participant of
// the envelope: carving it from a shared slab instead would let one MCPx
// reader that stops pin a whole slab for each copy it holds.
func asMCPX(body []byte, span envelope.Span) []byte {
	if !span.Valid() || span.End > len(body) {
		return body
	}
	out := make([]byte, 0, len(body)-(span.End-span.Start)+len(wire.ProtocolMCPX)+2)
	out = append(out, body[:span.Start]...)
	out = append(out, '"')
	out = append(out, wire.ProtocolMCPX...)
	out = append(out, '"')
	return append(out, body[span.End:]...)
}
