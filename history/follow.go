package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Where several gateway nodes share the pods (a cluster, or an external
// NATS), every node delivers them in the stream's order: each node reads
// the stream with one ordered consumer for every pod's subjects (Follow),
// and hands each message to the pod it is for, if that pod is open on
// the node. One consumer per node, not per pod: the stream's limit on
// consumers (1,000) bounds nodes, not pods. (Measured against the
// stream's RePublish, one core subscription per pod: the consumer cost
// less per message, alone and in a cluster of three, and never drops;
// BENCHMARKS.md.)
//
// The consumer is ordered, like nats.go's OrderedConsumer: ephemeral,
// without acknowledgements, and a new one from the next sequence whenever
// the delivery has a gap or the consumer is lost (its server died, the
// stream's leader changed). nats.go's own waits 1, 2, 4, 8 and then 10
// seconds between its attempts to make the new one, and the stream has
// no leader to make it for some seconds after its leader died: every pod
// of the node delivers nothing meanwhile, so this one tries every
// followRetry, and until a consumer delivers again it reads what the
// stream stores by direct gets (bridge), which any current replica
// answers without a consumer.

// followHeartbeat is how often the stream tells an idle consumer it is
// still there; two missed heartbeats and the follower starts again from
// the last sequence it handled. The pull expiry must be at least twice it.
const (
	followHeartbeat = time.Second
	followExpiry    = 5 * time.Second
)

// followRetry is how often a follower that lost its consumer tries to make
// another.
const followRetry = 250 * time.Millisecond

// followMaxMessages and followMaxBytes bound what the stream sends the follower ahead of what it
// has handled. It is large on purpose: the stream discards a pod's oldest
// entries past its limit whether the follower has them or not, and once
// an entry is in the follower's buffer no discard can take it, so the
// stream must be free to push a burst (thousands of contexts concluding
// at once) into it at once. Bytes bound it for large envelopes.
const (
	followMaxMessages = 1 << 16
	followMaxBytes    = 8 << 20
)

// followInactive is how long the stream keeps a consumer whose gateway
// vanished without deleting it (a killed node).
const followInactive = 30 * time.Second

// streamConsumer is one Follow: its consumer of the moment, and where it is.
type streamConsumer struct {
	s        *Stream
	subjects []string
	fn       func(subject string, m StoredMsg)
	onErr    func(error)

	// deliverMu makes the calls of fn one at a time, across the
	// consumers of successive generations, in the stream's order.
	deliverMu  sync.Mutex
	mu         sync.Mutex
	generation int
	next       uint64 // the next stream sequence to ask for
	delivered  uint64 // the consumer's delivery count seen last
	cons       jetstream.Consumer
	cc         jetstream.ConsumeContext
	restarting bool
	stopped    bool
	stop       chan struct{}
	// bridging is set while bridge reads the stream in the consumer's
	// stead; consumed, when the consumer delivered since it started.
	bridging, consumed bool
}

// bridgeEvery is how often a follower whose consumer is lost reads what
// the stream stored since, and bridgeIdle how many reads in a row find
// nothing, the consumer being made again, before it leaves it to the
// consumer.
const (
	bridgeEvery = 250 * time.Millisecond
	// leaderWindow is how many sequences a bridge asks the stream's
	// leader for at once, past a replica that lacks them.
	leaderWindow = 64
	bridgeIdle   = 20
)

// Follow calls fn, on one goroutine at a time and in the stream's order,
// with every message stored on subjects (wildcards allowed) after the
// call, from the sequence after the stream's last, until stop is called;
// onErr hears of the consumer's troubles (it recovers from them by
// itself).
func (s *Stream) Follow(ctx context.Context, subjects []string, fn func(subject string, m StoredMsg), onErr func(error)) (from uint64, stop func(), err error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	from = info.State.LastSeq + 1
	f := &streamConsumer{s: s, subjects: subjects, fn: fn, onErr: onErr, next: from, stop: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.startLocked(ctx); err != nil {
		return 0, nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	go f.watch()
	return from, f.Stop, nil
}

// followStale is how long a follower may stay behind what the stream
// stored of this node's, its consumer delivering nothing, before it
// takes the consumer for lost (errStale). A consumer on a replica stuck
// catching up sends its heartbeats and delivers nothing, without an
// error (issue 38's full-size run 33: "Expected first catchup entry to be
// a snapshot", a node's follower behind for 30 s with no error, and the
// node closed its 1,333 members). Longer than a burst takes to come
// back, shorter than the 30 s after which the node gives its pods up.
const followStale = 5 * time.Second

// errStale is a consumer that stayed behind what the stream stored of
// this node's for followStale.
var errStale = errors.New("history: the follower's consumer delivers nothing of what the stream stored")

// watch takes the consumer for lost when it stays behind what the
// stream acknowledged to this node for followStale, without moving: a
// new one is made, and the bridge reads meanwhile (from the leader,
// past a replica that lacks the messages).
func (f *streamConsumer) watch() {
	t := time.NewTicker(followHeartbeat)
	defer t.Stop()
	// since is when the follower was seen behind at next sequence at,
	// not moving (zero: it was not behind).
	var since time.Time
	var at uint64
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		stored := f.s.storedLast()
		now := time.Now()
		f.mu.Lock()
		stale := false
		switch {
		case stored < f.next:
			since = time.Time{}
		case since.IsZero() || f.next != at:
			// Behind, first seen or since it moved: counted from now. Not
			// since it last moved: a follower idle for a while is not
			// behind the moment the stream stores one more.
			since, at = now, f.next
		default:
			stale = now.Sub(since) > followStale && !f.restarting && !f.bridging && !f.stopped
		}
		gen := f.generation
		f.mu.Unlock()
		if stale {
			f.trouble(gen, errStale)
		}
	}
}

// startLocked makes a consumer from f.next on and consumes it.
func (f *streamConsumer) startLocked(ctx context.Context) error {
	cons, err := f.s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubjects: f.subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: f.next,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: followInactive,
	})
	if err != nil {
		return err
	}
	f.generation++
	gen := f.generation
	cc, err := cons.Consume(func(m jetstream.Msg) { f.handle(gen, m) },
		jetstream.PullHeartbeat(followHeartbeat), jetstream.PullExpiry(followExpiry),
		jetstream.PullMaxMessagesWithBytesLimit(followMaxMessages, followMaxBytes),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { f.trouble(gen, err) }))
	if err != nil {
		f.deleteAsync(cons)
		return err
	}
	f.cons, f.cc, f.delivered = cons, cc, 0
	return nil
}

// errGap is a delivery that skipped one of the consumer's messages.
var errGap = errors.New("history: a gap in the delivery")

func (f *streamConsumer) handle(gen int, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return // not a stream message
	}
	f.deliverMu.Lock()
	defer f.deliverMu.Unlock()
	f.mu.Lock()
	if gen != f.generation || f.stopped {
		f.mu.Unlock()
		return // from a consumer given up on
	}
	if md.Sequence.Consumer != f.delivered+1 {
		// A gap in the delivery: start again after the last one handled.
		f.mu.Unlock()
		f.trouble(gen, errGap)
		return
	}
	f.delivered = md.Sequence.Consumer
	if md.Sequence.Stream < f.next {
		// The bridge delivered it while this consumer was being made.
		f.mu.Unlock()
		return
	}
	f.next = md.Sequence.Stream + 1
	f.consumed = true
	f.mu.Unlock()
	sm := StoredMsg{Seq: md.Sequence.Stream, Time: md.Timestamp.UnixNano(), Data: m.Data()}
	f.s.cache.Put(m.Subject(), sm)
	f.fn(m.Subject(), sm)
}

// trouble hears of a consumer's error: the ones that mean it is lost
// start a new one.
func (f *streamConsumer) trouble(gen int, err error) {
	lost := errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, errGap) || errors.Is(err, errStale)
	if f.onErr != nil {
		f.onErr(err)
	}
	if !lost {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.generation || f.restarting || f.stopped {
		return
	}
	f.restarting = true
	f.cc.Stop()
	f.deleteAsync(f.cons)
	go f.restart()
	// A bridge on its way decides to end under mu, with bridging: it
	// sees consumed reset here, or this starts another.
	f.consumed = false
	if !f.bridging {
		f.bridging = true
		go f.bridge()
	}
}

// bridge reads what the stream stores, by direct gets, while the
// consumer is lost and until it delivers again (or, made again, has had
// nothing to deliver for a while). A consumer lives on one server, which
// the stream's meta leader picks: after a kill of the stream's leader a
// new one could be made every time and never deliver (issue 38's
// full-size runs: a node's follower brought nothing back for 30 s, 18
// consumers in a row, and the node closed all its pods' connections),
// while a direct get is answered by any current replica, this node's
// own first.
func (f *streamConsumer) bridge() {
	idle := 0
	for {
		select {
		case <-f.stop:
			return
		case <-time.After(bridgeEvery):
		}
		f.mu.Lock()
		if f.consumed || f.stopped || (idle >= bridgeIdle && !f.restarting) {
			f.bridging = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), followExpiry)
		n, err := f.bridgeRead(ctx)
		cancel()
		if err != nil && f.onErr != nil {
			f.onErr(fmt.Errorf("history: reading the stream while the follower's consumer is lost: %w", err))
		}
		if n > 0 {
			idle = 0
		} else {
			idle++
		}
	}
}

// bridgeRead hands fn what the stream stored from the next sequence on,
// and returns how many it handed. It reads batches of direct gets, which
// the nearest replica answers, and takes from them only the message at
// the next sequence: a replica catching up may lack messages before ones
// it holds (issue 38's full-size run 24: read past them, and the node's
// members never had them), so where its answer ends or skips, the
// stream's leader says what comes next. The follower follows one subject
// (a wildcard: every pod's), so that every sequence the stream holds is
// one of its messages.
func (f *streamConsumer) bridgeRead(ctx context.Context) (int, error) {
	if len(f.subjects) != 1 {
		return 0, nil
	}
	subject := f.subjects[0]
	n := 0
	for {
		f.mu.Lock()
		from, consumed := f.next, f.consumed || f.stopped
		f.mu.Unlock()
		if consumed {
			return n, nil
		}
		skipped := false
		more, err := f.s.readBatch(ctx, subject, from, f.s.batch, func(subj string, m StoredMsg) (bool, error) {
			f.s.cache.Put(subj, m)
			switch f.deliverBridged(subj, m, 0) {
			case bridgeHanded:
				f.s.bridged.Add(1)
				n++
				return true, nil
			case bridgeHad:
				return true, nil
			default:
				skipped = true
				return false, nil
			}
		})
		if err != nil {
			return n, err
		}
		if more && !skipped {
			continue
		}
		f.mu.Lock()
		from = f.next
		f.mu.Unlock()
		subj, m, err := f.s.leaderNextOn(ctx, subject, from)
		if err != nil || m == nil {
			return n, err
		}
		f.s.cache.Put(subj, *m)
		if f.deliverBridged(subj, *m, from) != bridgeHanded {
			return n, nil
		}
		f.s.bridged.Add(1)
		f.s.fromLeader.Add(1)
		n++
		// The replica lacked it: the ones after it are asked of the
		// leader too, a window at once.
		handed, err := f.leaderWindow(ctx, subject)
		n += handed
		if err != nil {
			return n, err
		}
	}
}

// leaderWindow is the stream's leader's window of the messages from the
// next sequence on (leaderNextMany), handed to fn in the stream's order
// for as long as they follow one another: the answer for a sequence is
// the first message from there on, so that one for the next sequence
// says what comes next, and the sequences between it and its message
// hold nothing. It returns how many it handed.
func (f *streamConsumer) leaderWindow(ctx context.Context, subject string) (int, error) {
	f.mu.Lock()
	from := f.next
	f.mu.Unlock()
	answers := f.s.leaderNextMany(ctx, subject, from, leaderWindow)
	n := 0
	for at := from; at < from+leaderWindow; {
		a := answers[at-from]
		if a.err != nil || a.m == nil {
			return n, a.err
		}
		f.s.cache.Put(a.subject, *a.m)
		if f.deliverBridged(a.subject, *a.m, at) != bridgeHanded {
			return n, nil // the consumer delivers again
		}
		f.s.bridged.Add(1)
		f.s.fromLeader.Add(1)
		n++
		at = a.m.Seq + 1
	}
	return n, nil
}

// What deliverBridged did with a message.
const (
	bridgeHanded  = iota // handed to fn
	bridgeHad            // delivered before (by the consumer, or the bridge)
	bridgeSkipped        // not the next sequence, or the consumer delivers again: not handed
)

// deliverBridged hands fn a message the bridge read when it is the one at
// the next sequence, or, where the stream's leader said m is the first
// message from sequence from on (0: it did not), when from is the next
// sequence.
func (f *streamConsumer) deliverBridged(subject string, m StoredMsg, from uint64) int {
	f.deliverMu.Lock()
	defer f.deliverMu.Unlock()
	f.mu.Lock()
	switch {
	case m.Seq < f.next:
		f.mu.Unlock()
		return bridgeHad
	case f.stopped || f.consumed || (m.Seq != f.next && from != f.next):
		f.mu.Unlock()
		return bridgeSkipped
	}
	f.next = m.Seq + 1
	f.mu.Unlock()
	f.fn(subject, m)
	return bridgeHanded
}

// restart makes a new consumer from the next sequence, every followRetry
// until it works or the follower stops.
func (f *streamConsumer) restart() {
	for {
		f.mu.Lock()
		if f.stopped {
			f.restarting = false
			f.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := f.startLocked(ctx)
		cancel()
		if err == nil {
			f.restarting = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		if f.onErr != nil {
			f.onErr(err)
		}
		select {
		case <-f.stop:
		case <-time.After(followRetry):
		}
	}
}

func (f *streamConsumer) deleteAsync(cons jetstream.Consumer) {
	if cons == nil {
		return
	}
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.s.stream.DeleteConsumer(ctx, info.Name)
	}()
}

// Stop ends the follower and deletes its consumer from the stream. A call
// of fn in progress may still finish.
func (f *streamConsumer) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	close(f.stop)
	if f.cc != nil {
		f.cc.Stop()
	}
	if info := f.cons.CachedInfo(); info != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = f.s.stream.DeleteConsumer(ctx, info.Name)
	}
}
