package pod

import (
	"sync"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
)

// deliver queues body for the local members that take it, the same bytes
// for all of them (MCPx participants share one copy with the protocol
// rewritten), and returns how many took it. body is the frame's (or, on
// a node that needs no frame, a copy of its own: ingress.commit), which
// nobody changes: the writers write it as it is. Their
// writers are woken once, when the order lock is let go (unlock), or
// when a sender that holds its flushes flushes (Sender.Hold), so that
// what a burst queued goes out in one write per connection. Call it with
// mu held.
func (p *Pod) deliver(m *envelope.Meta, body []byte, local bool) int {
	var mcpx []byte
	pick := func(r *participant.Participant) []byte {
		if r.Protocol == envelope.ProtocolMCPX {
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
		if r.FlushMark != p.scope {
			r.FlushMark = p.scope
			p.touched = append(p.touched, r)
		}
		return true
	}
	n := 0
	members := *p.snapshot.Load()
	switch m.Kind {
	case envelope.FrameJoin, envelope.FrameLeave:
		for _, r := range members {
			// A joiner's welcome lists who was there: it is not told of
			// the joins of this node that came before it.
			if r.ID == m.From || (local && m.Seq <= r.JoinSeq) {
				continue
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
	out := make([]byte, 0, len(body)-(span.End-span.Start)+len(envelope.ProtocolMCPX)+2)
	out = append(out, body[:span.Start]...)
	out = append(out, '"')
	out = append(out, envelope.ProtocolMCPX...)
	out = append(out, '"')
	return append(out, body[span.End:]...)
}

// flushSmall is the most members unlock wakes from a list on its stack;
// a pod that queued for more takes a list of flushLists (unlockLarge).
const flushSmall = 32

var flushLists = sync.Pool{New: func() any { return new([]*participant.Participant) }}

// unlockLarge is unlock for a pod that queued for more than flushSmall
// members while it held the order lock: their list is a pooled one, not
// one allocated for each envelope. Call it with mu held; it lets it go.
func (p *Pod) unlockLarge() {
	list := flushLists.Get().(*[]*participant.Participant)
	touched := append((*list)[:0], p.touched...)
	clear(p.touched)
	p.touched = p.touched[:0]
	if cap(p.touched) > 4096 {
		p.touched = nil // give a large pod's slice back
	}
	p.mu.Unlock()
	for _, r := range touched {
		r.Flush()
	}
	clear(touched)
	if cap(touched) <= 4096 {
		*list = touched[:0]
		flushLists.Put(list)
	}
}
