package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpp/gateway/history"
)

// Where several gateway nodes share the pods (a cluster, or an external
// NATS) with history, every node delivers a pod's frames in the stream's
// order. The stream republishes each message once stored (RePublish), and
// each node follows the pods it serves there with one core subscription
// per pod subject: no JetStream consumer per pod, so the number of pods
// is bound by memory, not by the stream's consumer limit, and adding a
// node adds capacity. A message that did not arrive (dropped, or
// republished by a leader that died) shows as a gap in the per-subject
// sequence that each republished message carries (Nats-Last-Sequence):
// the tail reads the missing messages back from the stream before it goes
// on.

// lostAfter is how long a tail keeps trying to read a gap back from the
// stream before it reports its pod's order lost.
const lostAfter = 5 * time.Second

// Tails follows pods' republished messages for one node.
type Tails struct {
	n      *Node  // its History, once the stream is open
	source string // the stream's subjects' prefix ("mcpp.pod.")
	prefix string // where they are republished ("mcpp.deliver.")
	log    *slog.Logger
}

// Tail is one pod's follower: it hands its pod every message stored on
// the pod's subjects, once, in the stream's order.
type Tail struct {
	t        *Tails
	subjects []string
	fn       func(subject string, m history.Msg)
	onLost   func(error)
	subs     []*nats.Subscription

	// order makes the calls of fn one at a time, in the stream's order,
	// whoever hands them (the dispatcher, Follow, CatchUp).
	order    sync.Mutex
	mu       sync.Mutex
	ready    bool
	buffered []*nats.Msg
	last     map[string]uint64 // the last sequence handled of each subject
	stopped  bool
}

// Follow hands fn every message stored on subjects, from the oldest the
// stream holds, in the stream's order, one at a time; the messages stored
// before Follow returns (the pod's past) are handed before it returns.
// onLost hears, once, that a gap could not be read back for lostAfter:
// the tail has stopped, and the pod must deliver nothing more (its order
// is lost). key names the pod for the dispatcher.
func (t *Tails) Follow(ctx context.Context, key string, subjects []string, fn func(subject string, m history.Msg), onLost func(error)) (*Tail, error) {
	tail := &Tail{t: t, subjects: subjects, fn: fn, onLost: onLost, last: map[string]uint64{}}
	// Subscribe first: what is stored while the past is read arrives
	// here and is handed after it.
	for _, s := range subjects {
		sub, err := t.n.dispatch.subscribe(key, t.prefix+strings.TrimPrefix(s, t.source), tail.handle)
		if err != nil {
			tail.Stop()
			return nil, err
		}
		tail.subs = append(tail.subs, sub)
	}
	if err := t.n.NATS.FlushWithContext(ctx); err != nil {
		tail.Stop()
		return nil, err
	}
	tail.order.Lock()
	defer tail.order.Unlock()
	err := t.n.History.Scan(ctx, subjects, 1, func(subject string, m history.Msg) error {
		tail.deliver(subject, m)
		return nil
	})
	if err != nil {
		tail.Stop()
		return nil, err
	}
	for {
		tail.mu.Lock()
		buffered := tail.buffered
		tail.buffered = nil
		if len(buffered) == 0 {
			tail.ready = true
			tail.mu.Unlock()
			return tail, nil
		}
		tail.mu.Unlock()
		for _, m := range buffered {
			tail.take(m)
		}
	}
}

// Stop ends the tail.
func (tl *Tail) Stop() {
	tl.mu.Lock()
	tl.stopped = true
	tl.mu.Unlock()
	for _, s := range tl.subs {
		tl.t.n.dispatch.unsubscribe(s)
	}
}

// handle takes one republished message from the dispatcher.
func (tl *Tail) handle(m *nats.Msg) {
	tl.mu.Lock()
	if tl.stopped {
		tl.mu.Unlock()
		return
	}
	if !tl.ready {
		tl.buffered = append(tl.buffered, m)
		tl.mu.Unlock()
		return
	}
	tl.mu.Unlock()
	tl.order.Lock()
	defer tl.order.Unlock()
	tl.take(m)
}

// take hands a republished message, after what is missing before it.
// Call it with order held.
func (tl *Tail) take(m *nats.Msg) {
	subject := m.Header.Get(jetstream.SubjectHeader)
	seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	prev, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if seq == 0 || subject == "" {
		return
	}
	msg := history.Msg{Seq: seq, Time: ts.UnixNano(), Data: m.Data}
	tl.mu.Lock()
	last := tl.last[subject]
	tl.mu.Unlock()
	if prev > last {
		// A gap: what was stored between is read back first, up to prev
		// (the message stored on the subject before this one).
		if !tl.catchUp(subject, prev, seq) {
			return
		}
	}
	tl.deliver(subject, msg)
}

// CatchUp reads back whatever the stream holds of the pod beyond what was
// handed (a burst whose last messages NATS dropped leaves no later
// message to show the gap).
func (tl *Tail) CatchUp() {
	tl.order.Lock()
	defer tl.order.Unlock()
	for _, s := range tl.subjects {
		tl.catchUp(s, 0, 0)
	}
}

// catchUp reads back subject's messages after the last handled, up to
// need at least (0: whatever is there) and before until (0: no bound),
// and hands them, retrying for lostAfter: a replica that answers a read
// may not have caught up with the leader yet. Call it with order held.
func (tl *Tail) catchUp(subject string, need, until uint64) bool {
	deadline := time.Now().Add(lostAfter)
	tries := 0
	for {
		tries++
		tl.mu.Lock()
		last := tl.last[subject]
		tl.mu.Unlock()
		if need != 0 && last >= need {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := tl.t.n.History.Scan(ctx, []string{subject}, last+1, func(s string, m history.Msg) error {
			if until != 0 && m.Seq >= until {
				return errStop
			}
			tl.deliver(s, m)
			return nil
		})
		cancel()
		if errors.Is(err, errStop) {
			err = nil
		}
		tl.mu.Lock()
		last = tl.last[subject]
		tl.mu.Unlock()
		if err == nil && (need == 0 || last >= need) {
			return true
		}
		if err == nil {
			err = fmt.Errorf("the stream's answer ended at %d, before %d", last, need)
		}
		if time.Now().After(deadline) {
			tl.mu.Lock()
			stopped := tl.stopped
			tl.stopped = true
			tl.mu.Unlock()
			if !stopped && tl.onLost != nil {
				tl.onLost(fmt.Errorf("%d reads of the gap after %d failed; the last: %w", tries, last, err))
			}
			return false
		}
		if tries == 1 {
			tl.t.log.Warn("reading a gap of a pod back from the history stream; retrying", "subject", subject, "after", last, "err", err)
		}
		time.Sleep(min(time.Duration(tries)*10*time.Millisecond, 200*time.Millisecond))
	}
}

var errStop = errors.New("stop")

// deliver hands m unless it was handed already. Call it with order held.
func (tl *Tail) deliver(subject string, m history.Msg) {
	tl.mu.Lock()
	if m.Seq <= tl.last[subject] || tl.stopped {
		tl.mu.Unlock()
		return
	}
	tl.last[subject] = m.Seq
	tl.mu.Unlock()
	tl.fn(subject, m)
}
