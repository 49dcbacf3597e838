package gateway

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
)

// The fan-out works by bursts, as nats-server's read loop does: the frames
// the log hands over while a burst is being handled wait in the pod's
// inbox, the next burst takes them all, every frame of a burst is queued
// for the members that take it without waking their writers, and at the
// end of the burst each member touched is flushed once, so that its
// writer sends the whole burst in one write.
//
// A burst ends where the log says nothing more is on its way: the stream
// tells its follower how many more frames it holds for it, as a read of
// nats-server ends where the bytes it read end. While more are coming the
// fan-out goes on queueing (up to maxUnflushed frames) and flushes when
// the last of them has been handled. Nothing waits on a timer: a lone
// frame is a burst of one. (One timer, flushGrace, only covers a log that
// said more was coming and then sent nothing, a follower that failed.)

// maxUnflushed bounds the frames a burst queues before it flushes, and so
// the latency a long burst adds to its first frames.
const maxUnflushed = 256

// flushGrace is how long queued frames wait for the frame the log said was
// coming before they are flushed without it.
const flushGrace = 2 * time.Millisecond

// inFrame is a frame of the pod's log waiting in the inbox.
type inFrame struct {
	seq   uint64
	at    int64
	frame []byte
	more  bool
}

// receive takes a frame from the pod's log (in the log's order: the pod's
// subject calls it on one goroutine per subscription, the history stream
// on one per follower) and has the fan-out handle it.
func (p *Pod) receive(seq uint64, at int64, frame []byte, more bool) {
	p.inMu.Lock()
	p.inbox = append(p.inbox, inFrame{seq, at, frame, more})
	start := !p.inRun
	p.inRun = true
	p.inMu.Unlock()
	if start {
		go p.fanOut()
	}
}

// fanOut handles the inbox by bursts until it is empty, then ends: an idle
// pod holds no goroutine.
func (p *Pod) fanOut() {
	var burst []inFrame
	unflushed := false
	for {
		p.inMu.Lock()
		burst, p.inbox = p.inbox, burst[:0]
		if len(burst) == 0 {
			p.inRun = false
			p.inMu.Unlock()
			if unflushed {
				p.flushLater()
			}
			return
		}
		p.inMu.Unlock()
		p.fanMu.Lock()
		for i := range burst {
			p.onFrame(burst[i].seq, burst[i].at, burst[i].frame)
		}
		p.unflushed += len(burst)
		if !burst[len(burst)-1].more || p.unflushed >= maxUnflushed {
			p.flushTouched()
		}
		unflushed = len(p.touched) > 0
		p.fanMu.Unlock()
		clear(burst)
		if cap(burst) > 4096 {
			burst = nil // give a large burst's slice back
		}
	}
}

// flushLater flushes what the last burst queued if no frame comes within
// flushGrace to carry on the burst.
func (p *Pod) flushLater() {
	p.fanMu.Lock()
	defer p.fanMu.Unlock()
	if p.graceTimer == nil {
		p.graceTimer = time.AfterFunc(flushGrace, func() {
			p.fanMu.Lock()
			defer p.fanMu.Unlock()
			if len(p.touched) > 0 {
				p.flushTouched()
			}
		})
		return
	}
	p.graceTimer.Reset(flushGrace)
}

// flushTouched wakes the writer of every member the burst queued
// something for. Call it with fanMu held.
func (p *Pod) flushTouched() {
	for _, r := range p.touched {
		r.Flush()
	}
	clear(p.touched)
	p.touched = p.touched[:0]
	p.burst++
	p.unflushed = 0
}

// onFrame handles one frame of the pod's log, with fanMu held. seq and at
// are the frame's place and time in the history (0 without history).
func (p *Pod) onFrame(seq uint64, at int64, frame []byte) {
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
		// Counted once it is queued for the members: a drain that sees
		// every frame seen knows it is in their queues.
		size := int64(len(body))
		if m.Live() {
			size = 0 // live frames are not in the backlog's bytes
		}
		defer p.seenOne(size)
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

// seenOne counts one of this node's frames as back out of the log.
func (p *Pod) seenOne(size int64) {
	p.seen.Add(1)
	p.backlog.Add(-size)
	p.gw.flight.release(size)
	if p.throttled.Load() > 0 {
		p.wakeThrottled()
	}
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

// deliver queues body for the local members that take it, as one text
// frame built once and shared by all of them (MCPx participants share one
// with the protocol rewritten), and returns how many took it. Their
// writers are woken at the end of the burst (flushTouched). Call it with
// fanMu held.
func (p *Pod) deliver(m *envelope.Meta, body []byte, local bool) int {
	var frame, mcpx []byte
	pick := func(r *participant.Participant) []byte {
		if r.Protocol == envelope.ProtocolMCPX {
			if mcpx == nil {
				mcpx = participant.TextFrame(asMCPX(body, m.Protocol))
			}
			return mcpx
		}
		if frame == nil {
			frame = participant.TextFrame(body)
		}
		return frame
	}
	take := func(r *participant.Participant) bool {
		if !r.Enqueue(pick(r)) {
			return false
		}
		if r.FlushMark != p.burst {
			r.FlushMark = p.burst
			p.touched = append(p.touched, r)
		}
		return true
	}
	n := 0
	members := *p.snapshot.Load()
	switch m.Kind {
	case envelope.FrameJoin, envelope.FrameLeave:
		for _, r := range members {
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
