package pod

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// flow is a pod's flow control, all of it: how far a sender may run
// ahead of what the history and the pod's order take.
//
//   - The history writer holds what the node accepted and the stream has
//     not stored yet, all pods together: past Config.FlightBytes, a
//     sender waits (Throttle) before its next envelope is read, and TCP
//     slows it down. Memory stays bounded however slow the stream is.
//     The senders waiting for it go on in the order they came (turns.go).
//   - Where the stream orders the pod (OrderStream), what this node sent
//     into it comes back before it is delivered: past maxBacklog bytes or
//     maxBacklogFrames frames not back yet, a sender waits too. A join
//     first waits (Settle) until what this node sent is back and queued,
//     so that nothing accepted before a joiner joined is delivered to it
//     (its replay has it). Where the node orders the pod itself, both are
//     at once.
type flow struct {
	p *Pod
	// sentN and backN count this node's frames sent into the stream and
	// back out of it; backlog is their bytes not back yet.
	sentN, backN atomic.Uint64
	backlog      atomic.Int64
	lastBack     atomic.Int64 // when one came back last (unix ns)
	waiters      atomic.Int32
	mu           sync.Mutex
	changed      chan struct{} // closed and replaced when something came back
}

// maxBacklog and maxBacklogFrames bound what a node has sent into a pod's
// stream and not seen back (OrderStream).
const maxBacklogFrames = 512

func (f *flow) maxBacklog() int64 { return max(8<<20, 4*int64(f.p.node.Config.MaxMessageBytes)) }

// settleWait bounds how long a join (or a gateway/contexts answer) waits
// for this node's frames to come back.
const settleWait = time.Second

func (f *flow) init(p *Pod) {
	f.p = p
	f.changed = make(chan struct{})
}

// sent counts a frame this node sent into the stream. Context events are
// not counted: several nodes may send one, and the stream keeps one.
func (f *flow) sent(m *envelope.Meta, size int) {
	if m.Kind == envelope.FrameContextEvent {
		return
	}
	if m.Live() {
		size = 0 // its body does not go into the stream
	}
	if f.sentN.Add(1)-f.backN.Load() == 1 {
		f.lastBack.Store(time.Now().UnixNano()) // the wait for it starts now
	}
	f.backlog.Add(int64(size))
}

// back counts one of them back out of the stream, queued for the members.
func (f *flow) back(m *envelope.Meta, size int) {
	if m.Kind == envelope.FrameContextEvent {
		return
	}
	if m.Live() || m.Marker() {
		size = 0
	}
	f.backN.Add(1)
	f.backlog.Add(-int64(size))
	f.lastBack.Store(time.Now().UnixNano())
	if f.waiters.Load() > 0 {
		f.wake()
	}
}

// wake lets whoever waits look again.
func (f *flow) wake() {
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *flow) unseen() uint64 {
	sent, back := f.sentN.Load(), f.backN.Load()
	if sent > back {
		return sent - back
	}
	return 0
}

// backlogged reports whether the pod's sender must wait for what this
// node sent into the pod's stream to come back (OrderStream).
func (f *flow) backlogged() bool {
	return !f.p.order.here() && (f.backlog.Load() > f.maxBacklog() || f.unseen() > maxBacklogFrames)
}

// Throttle waits while the sender is ahead of its bounds, or until the
// pod is closed; the burst it sends in, b (nil: none), is flushed first.
// For the writer's budget, all pods together, senders wait in line, in
// the order they came (turns.go); for the pod's backlog, each pod's
// senders wait on their own. While the first in line waits, the writer
// sends all it holds in its next round: the bytes of the pods' open
// batches, which a node's own temporary store lets linger for a second
// (history.Writer.Hurry), count in what the sender waits for.
func (p *Pod) Throttle(b *Burst) {
	f := &p.flow
	n := p.node
	inLine := n.writerFull() || !n.turns.empty()
	if !inLine && !f.backlogged() {
		return
	}
	b.Flush()
	if inLine && !p.waitTurn() {
		return
	}
	f.wait(func() bool { return !f.backlogged() }, nil)
}

// Settle waits, at most settleWait, until the frames this node sent into
// the pod's stream so far are back and in the members' queues (at once
// where the node orders the pod).
func (p *Pod) Settle() {
	f := &p.flow
	if p.order.here() {
		return
	}
	target := f.sentN.Load()
	back := func() bool { return f.backN.Load() >= target }
	if back() {
		return
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	f.wait(back, t.C)
}

// Stored waits until each envelope of ids that this node sent into the
// pod's stream has come back out of it (OrderStream: it is stored with a
// quorum), or until ctx ends or the pod dies, and returns those still on
// their way. Where the node orders the pod, nothing waits: an envelope is
// in the history's order once accepted. A publish over HTTP answers for
// an envelope once it is stored.
func (p *Pod) Stored(ctx context.Context, ids []string) []string {
	f := &p.flow
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		p.mu.Lock()
		var left []string
		for _, id := range ids {
			if _, ok := p.sending[id]; ok {
				left = append(left, id)
			}
		}
		dead := p.dead
		p.mu.Unlock()
		if len(left) == 0 || dead {
			return left
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return left
		}
	}
}

// Drained reports whether everything this node sent into the pod's
// stream is back (always, where the node orders the pod): a drain waits
// for it.
func (p *Pod) Drained() bool { return p.order.here() || p.flow.unseen() == 0 }

// wait waits until done holds, the pod is closed, or stop fires (nil:
// never), and reports whether done held.
func (f *flow) wait(done func() bool, stop <-chan time.Time) bool {
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		var progress <-chan struct{}
		if w := f.p.node.Writer; w != nil {
			progress = w.Progress()
		}
		if done() {
			return true
		}
		if f.p.Dead() {
			return false
		}
		select {
		case <-ch:
		case <-progress:
		case <-stop:
			return false
		}
	}
}
