package pod

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/history"
)

// Where the stream orders the pods (OrderStream), a node reads it with
// one ordered consumer for every pod's subjects (history.Follow): the
// Follower. Each message goes to the pod it is for, if that pod is open
// here (its Tail), on the dispatcher goroutine of that pod, so that pods
// are handled side by side and each in order; the others are dropped. The
// ordered consumer never skips a message: a pod's tail sees its messages
// once, in the stream's order, from the moment it opened.

// behindAfter is how long the follower may stay behind what this node
// stored (the stream acknowledged it, and the follower did not bring it
// back) before the node counts the order of its pods lost. It leaves
// room for the follower's own recovery when its consumer's server died
// (two missed heartbeats, then a new consumer, which waits for the
// stream's new leader, and JetStream's elections take up to 9 s): 10 s
// was too short at issue 38's full size, where a kill of the node that
// held the consumer made a node that was not cut off close its 1,333
// members, whose resumes then stormed the cluster. Its members see a
// pause meanwhile, as a NATS client does while the stream fails over.
const behindAfter = 30 * time.Second

// cutAfter is how long a node cut off from a quorum (it knows: its routes
// are down, quorum.go) keeps its members before its pods lose their
// order: they resume on a node that has a quorum.
const cutAfter = 10 * time.Second

// Follower is the node's reader of the history stream.
type Follower struct {
	n    *Node
	log  *slog.Logger
	stop func()
	// scanCtx ends the scan of every pod (seqs.go) when the follower is
	// closed.
	scanCtx  context.Context
	scanStop context.CancelFunc

	mu    sync.RWMutex
	tails map[string]*Tail // by subject

	handled  atomic.Uint64 // the last stream sequence the consumer handed
	lastMove atomic.Int64  // when it moved last (unix ns)
	// behindSince is when the follower was first seen behind what the
	// stream stored (unix ns; 0: it was not). Under Node.followMu.
	behindSince int64
	errors      atomic.Int64
	lastError   atomic.Pointer[string]

	// seqs is what it brought of each subject, by which pods read their
	// past (seqs.go).
	seqs subjectSeqs
}

// follower starts the node's follower, once: for FollowNow, or when the
// first pod opens.
func (n *Node) follower(ctx context.Context) (*Follower, error) {
	n.followMu.Lock()
	defer n.followMu.Unlock()
	if n.follow != nil {
		return n.follow, nil
	}
	f := &Follower{n: n, log: n.Log, tails: map[string]*Tail{}}
	f.scanCtx, f.scanStop = context.WithCancel(context.Background())
	if lost := n.lost; lost != nil {
		// What the one given up knew, it knew up to the last message it
		// handled: this one scans only what came after.
		f.seqs.inherit(&lost.seqs, lost.handled.Load())
	}
	f.lastMove.Store(time.Now().UnixNano())
	from, stop, err := n.History.Follow(ctx, []string{StreamSubjects}, f.take, f.trouble)
	if err != nil {
		f.scanStop()
		return nil, err
	}
	// Before the follower is handed to any pod: what is below from is
	// for the scan of every pod, even while the stream stays idle.
	f.seqs.start(from)
	f.stop = stop
	n.follow, n.lost = f, nil
	return f, nil
}

// take hands a message of the stream to its pod's tail, if the pod is
// open here.
func (f *Follower) take(subject string, m history.StoredMsg) {
	// Recorded before the tails are looked up: a tail that Follow adds
	// after the look-up reads its past after this (Follow).
	f.seqs.add(subject, m.Seq)
	f.handled.Store(m.Seq)
	f.lastMove.Store(time.Now().UnixNano())
	f.mu.RLock()
	tl := f.tails[subject]
	f.mu.RUnlock()
	if tl != nil {
		f.n.dispatch.run(tl.key, tailMsg{tl, subject, m})
	}
}

// trouble hears of the consumer's errors; it recovers from them by
// itself, and they are counted so that a watcher sees them.
func (f *Follower) trouble(err error) {
	n := f.errors.Add(1)
	f.n.Metrics.FollowErrors.Inc()
	msg := err.Error()
	f.lastError.Store(&msg)
	if n == 1 || n%100 == 0 {
		f.log.Warn("the node's follower of the history stream", "errors", n, "last", msg)
	}
}

// behind reports how long the follower has not brought back what the
// stream stored of this node's (0: it is not behind): since it was first
// seen behind, or since it last moved if that is later. Not since it last
// moved alone: a follower idle while the stream had no leader, and so
// stored nothing, is not behind the moment the new leader stores what
// was held. The janitor asks every second or so (checkFollower). Call it
// with Node.followMu held.
func (f *Follower) behind(now time.Time, stored uint64) time.Duration {
	if f.handled.Load() >= stored {
		f.behindSince = 0
		return 0
	}
	if f.behindSince == 0 {
		f.behindSince = now.UnixNano()
	}
	return now.Sub(time.Unix(0, max(f.behindSince, f.lastMove.Load())))
}

func (f *Follower) close() {
	if f.stop != nil {
		f.stop()
	}
	f.scanStop()
}

// Tail is one pod's share of the follower: it hands its pod every message
// stored on the pod's subjects, once, in the stream's order.
type Tail struct {
	f        *Follower
	key      string
	subjects []string
	fn       func(subject string, m history.StoredMsg, burst *Burst)

	// serial makes the calls of fn one at a time, in the stream's serial,
	// whoever hands them (the dispatcher, Follow).
	serial   sync.Mutex
	mu       sync.Mutex
	ready    bool
	buffered []tailMsg
	last     map[string]uint64 // the last sequence handled of each subject
	stopped  bool
}

// tailMsg is a message of the stream on its way to a tail.
type tailMsg struct {
	t       *Tail
	subject string
	m       history.StoredMsg
}

func (tm tailMsg) run(burst *Burst) { tm.t.handle(tm, burst) }

// Follow hands fn every message stored on the pod's subjects, from the
// oldest the stream holds, in the stream's order, one at a time; the
// messages the follower brought before Follow returns (the pod's past,
// read as seqs.go says) are handed before it returns, the others as the
// follower brings them. key names the pod for the dispatcher. fn's burst is
// the dispatcher's (nil for the past, handed on the caller's goroutine).
func (f *Follower) Follow(ctx context.Context, key string, subjects []string, fn func(subject string, m history.StoredMsg, burst *Burst)) (*Tail, error) {
	tl := &Tail{f: f, key: key, subjects: subjects, fn: fn, last: map[string]uint64{}}
	// Listen first: what is stored while the past is read arrives here
	// and is handed after it.
	f.mu.Lock()
	for _, s := range subjects {
		f.tails[s] = tl
	}
	f.mu.Unlock()
	tl.serial.Lock()
	defer tl.serial.Unlock()
	err := f.readPast(ctx, subjects, func(subject string, m history.StoredMsg) {
		tl.deliver(subject, m, nil)
	})
	if err != nil {
		tl.Stop()
		return nil, fmt.Errorf("reading the pod's past: %w", err)
	}
	for {
		tl.mu.Lock()
		buffered := tl.buffered
		tl.buffered = nil
		if len(buffered) == 0 {
			tl.ready = true
			tl.mu.Unlock()
			return tl, nil
		}
		tl.mu.Unlock()
		for _, tm := range buffered {
			tl.deliver(tm.subject, tm.m, nil)
		}
	}
}

// Stop ends the tail.
func (tl *Tail) Stop() {
	tl.mu.Lock()
	tl.stopped = true
	tl.mu.Unlock()
	tl.f.mu.Lock()
	for _, s := range tl.subjects {
		if tl.f.tails[s] == tl {
			delete(tl.f.tails, s)
		}
	}
	tl.f.mu.Unlock()
}

// handle takes one message from the follower, on the pod's dispatcher.
func (tl *Tail) handle(tm tailMsg, burst *Burst) {
	tl.mu.Lock()
	if tl.stopped {
		tl.mu.Unlock()
		return
	}
	if !tl.ready {
		tl.buffered = append(tl.buffered, tm)
		tl.mu.Unlock()
		return
	}
	tl.mu.Unlock()
	tl.serial.Lock()
	defer tl.serial.Unlock()
	tl.deliver(tm.subject, tm.m, burst)
}

// deliver hands m unless it was handed already. Call it with Tail.serial
// held.
func (tl *Tail) deliver(subject string, m history.StoredMsg, burst *Burst) {
	tl.mu.Lock()
	if m.Seq <= tl.last[subject] || tl.stopped {
		tl.mu.Unlock()
		return
	}
	tl.last[subject] = m.Seq
	tl.mu.Unlock()
	tl.fn(subject, m, burst)
}
