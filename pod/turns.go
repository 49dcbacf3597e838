package pod

import (
	"sync"
	"sync/atomic"
)

// turns is the line of senders waiting for the history writer's bytes in
// flight (Config.FlightBytes), all the node's pods together: they go on
// one at a time, in the order they came, each once the writer is back
// under the budget. Without it every waiting sender woke when the writer
// stored something and the first to run took the room: with twenty pods
// flooding at once one sender waited 14 s while the others went on (the
// integration test TestManyPodsOverrunTheHistory, which failed when it
// waited 20 s). In line, a sender waits at most for those that came
// before it, once each. A sender that comes while others are in line
// joins the end, even when there is room: room made for the first is
// not for a newcomer to take.
type turns struct {
	mu    sync.Mutex
	queue []uint64 // tickets in line, first first
	next  uint64
	// moved is closed, and replaced, when the first in line leaves.
	moved chan struct{}
	// n is len(queue), for the senders that find nobody in line.
	n atomic.Int32
}

// empty reports whether nobody is in line.
func (t *turns) empty() bool { return t.n.Load() == 0 }

// join puts a sender at the end of the line and returns its ticket.
func (t *turns) join() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.queue = append(t.queue, t.next)
	t.n.Store(int32(len(t.queue)))
	if t.moved == nil {
		t.moved = make(chan struct{})
	}
	return t.next
}

// first reports whether ticket k is first in line, and returns a channel
// closed when the first in line leaves.
func (t *turns) first(k uint64) (bool, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) > 0 && t.queue[0] == k, t.moved
}

// leave takes ticket k out of the line, wherever it is (a sender whose
// pod closed leaves from its middle), and wakes the next when k was
// first.
func (t *turns) leave(k uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, q := range t.queue {
		if q != k {
			continue
		}
		t.queue = append(t.queue[:i], t.queue[i+1:]...)
		t.n.Store(int32(len(t.queue)))
		if i == 0 {
			close(t.moved)
			t.moved = make(chan struct{})
		}
		return
	}
}

// writerFull reports whether the history writer holds more than the
// node's flight budget unstored.
func (n *Node) writerFull() bool {
	w := n.Writer
	return w != nil && w.Pending() > n.Config.FlightBytes
}

// waitTurn waits in the node's line (turns) until the pod's sender is
// first and the writer is under its budget, or until the pod is closed,
// and reports whether it was the former. Only the first in line wakes
// for the writer's progress; the others wake when the first leaves.
func (p *Pod) waitTurn() bool {
	n, f := p.node, &p.flow
	k := n.turns.join()
	defer n.turns.leave(k)
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	for {
		f.mu.Lock()
		closing := f.changed // closed when the pod closes, among others
		f.mu.Unlock()
		first, moved := n.turns.first(k)
		var progress <-chan struct{}
		if first {
			if w := n.Writer; w != nil {
				progress = w.Progress()
			}
			if !n.writerFull() {
				return true
			}
			// The pods' open batches linger (Throttle's doc): send them.
			n.Writer.Hurry()
		}
		if p.Dead() {
			return false
		}
		select {
		case <-closing:
		case <-moved:
		case <-progress:
		}
	}
}
