package pod

import (
	"sync/atomic"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
)

// A guest's inbox (docs/protocol.md section 9): an MCP host subscribed to
// it is woken when an envelope addressed to it (to names it) is accepted,
// or when a context it sent in (it created it, or spoke in it) concludes,
// so that it reads at once instead of polling. Broadcasts wake nobody: a
// host that wants them reads with wait_ms.

// inbox is a guest's wake-up call; nil until its host subscribes.
type inbox struct {
	wake atomic.Pointer[func()]
}

// SetInbox has the pod call wake (with Pod.mu held: it must return at
// once and not call the pod) for every envelope addressed to the guest
// and every conclusion of a context it sent in; nil stops it.
func (g *guest) SetInbox(wake func()) {
	if wake == nil {
		g.inbox.wake.Store(nil)
		return
	}
	g.inbox.wake.Store(&wake)
}

// knock wakes g's host, if it listens.
func (g *guest) knock() {
	if w := g.inbox.wake.Load(); w != nil {
		(*w)()
	}
}

// wakeInboxes knocks on the inboxes a frame is news for. Call it with
// Pod.mu held.
func (p *Pod) wakeInboxes(m *envelope.Meta, body []byte) {
	if len(p.guests) == 0 {
		return
	}
	switch m.Kind {
	case envelope.FrameEnvelope:
		if m.Live() {
			return // ephemeral: pod_read would not find it
		}
		for _, id := range m.To {
			if g := p.guests[id]; g != nil && id != m.From {
				g.knock()
			}
		}
	case envelope.FrameContextEvent:
		// Its stats name who sent in it, its creator first.
		gjson.GetBytes(body, "payload.stats.participants").ForEach(func(_, id gjson.Result) bool {
			if g := p.guests[id.Str]; g != nil {
				g.knock()
			}
			return true
		})
	}
}
