package pod

import (
	"context"
	"hash/fnv"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// MemoryBus joins, in one process, the MemoryBrokers of nodes that share
// pods, as a NATS cluster joins theirs: the pods' unit tests run several
// nodes on one bus (and one history.Memory as their stream) with no NATS
// server, as Centrifuge's memory broker lets its hub be tested.
//
// It keeps the Broker's contract as NATSBroker does: Publish queues the
// message for each subscriber and returns; each node's broker calls its
// subscriptions' functions on goroutines of its own (lanes, one per CPU,
// a subject's subscriptions on one lane), one at a time, in the order
// published. So a publisher never runs a subscriber's function, and the
// locks it holds (Pod.mu) are never held where one runs, on either
// broker (docs/locks.md). Unlike NATS it never loses a message by itself:
// a lane's queue has no bound. Drop makes it lose the ones a test
// chooses (a node that subscribed too late, a slow consumer, a node that
// died with what it sent).
type MemoryBus struct {
	// mu guards subs, each broker's subscriptions and closed, and drop.
	// Publish takes it to read, and lets it go before it queues.
	mu    sync.RWMutex
	subs  map[string][]*memorySub // by subject
	drop  func(subject string, to *MemoryBroker) bool
	inbox atomic.Uint64
}

// NewMemoryBus makes an empty bus.
func NewMemoryBus() *MemoryBus { return &MemoryBus{subs: map[string][]*memorySub{}} }

// Broker is a new node's broker on the bus.
func (bus *MemoryBus) Broker() *MemoryBroker {
	return &MemoryBroker{bus: bus, done: make(chan struct{}), subs: map[*memorySub]struct{}{}}
}

// Drop makes the bus lose every message on subject for to's
// subscriptions while lose says so (nil: lose nothing). It is asked when
// the message is published, on the publisher's goroutine.
func (bus *MemoryBus) Drop(lose func(subject string, to *MemoryBroker) bool) {
	bus.mu.Lock()
	bus.drop = lose
	bus.mu.Unlock()
}

// MemoryBroker is one node's Broker on a MemoryBus.
type MemoryBroker struct {
	bus   *MemoryBus
	lanes []*memoryLane
	start sync.Once
	done  chan struct{} // closed by Close: the lanes stop
	// subs and closed are guarded by MemoryBus.mu.
	subs   map[*memorySub]struct{}
	closed bool
}

type memorySub struct {
	b       *MemoryBroker
	subject string
	fn      func(BrokerMsg)
	lane    *memoryLane
	// answer, for a Request's inbox, takes the first answer itself, on
	// no lane (as nats.go's requests take theirs), so that a request
	// made on a lane is answered even while that lane waits for it.
	answer  chan []byte
	stopped atomic.Bool
}

// memoryLane is one goroutine of a broker's and what waits for it: the
// messages of the subscriptions it calls, in the order published.
type memoryLane struct {
	mu    sync.Mutex // guards queue; a leaf
	queue []memoryDelivery
	wake  chan struct{} // holds one wake while the queue is not empty
}

type memoryDelivery struct {
	s *memorySub
	m BrokerMsg
}

func (b *MemoryBroker) startLanes() {
	for range max(2, runtime.GOMAXPROCS(0)) {
		l := &memoryLane{wake: make(chan struct{}, 1)}
		b.lanes = append(b.lanes, l)
		go l.run(b.done)
	}
}

// laneOf is the lane of subject's subscriptions: one, so that they are
// called in the order published.
func (b *MemoryBroker) laneOf(subject string) *memoryLane {
	b.start.Do(b.startLanes)
	h := fnv.New32a()
	_, _ = h.Write([]byte(subject))
	return b.lanes[h.Sum32()%uint32(len(b.lanes))]
}

// put queues d and wakes the lane; it never waits for the lane.
func (l *memoryLane) put(d memoryDelivery) {
	l.mu.Lock()
	l.queue = append(l.queue, d)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default: // woken already
	}
}

func (l *memoryLane) run(done chan struct{}) {
	var batch []memoryDelivery
	for {
		select {
		case <-l.wake:
		case <-done:
			return
		}
		l.mu.Lock()
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		for i, d := range batch {
			select {
			case <-done:
				return
			default:
			}
			if !d.s.stopped.Load() {
				d.s.fn(d.m)
			}
			batch[i] = memoryDelivery{} // the message is fn's now
		}
	}
}

// Publish implements Broker: the message is queued for every subscriber,
// each its own copy, as NATS's; none is called before it returns.
func (b *MemoryBroker) Publish(subject string, data []byte) error {
	b.bus.publish(BrokerMsg{Subject: subject, Data: data})
	return nil
}

func (bus *MemoryBus) publish(m BrokerMsg) {
	bus.mu.RLock()
	subs := append([]*memorySub(nil), bus.subs[m.Subject]...)
	drop := bus.drop
	bus.mu.RUnlock()
	for _, s := range subs {
		if drop != nil && drop(m.Subject, s.b) {
			continue
		}
		c := m
		c.Data = append([]byte(nil), m.Data...) // each subscriber's own, as NATS's
		if s.answer != nil {
			select {
			case s.answer <- c.Data:
			default: // the first answer only
			}
			continue
		}
		s.lane.put(memoryDelivery{s: s, m: c})
	}
}

// Subscribe implements Broker.
func (b *MemoryBroker) Subscribe(subject string, fn func(BrokerMsg)) (Subscription, error) {
	s, err := b.add(&memorySub{b: b, subject: subject, fn: fn, lane: b.laneOf(subject)})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// add puts s on the bus.
func (b *MemoryBroker) add(s *memorySub) (*memorySub, error) {
	subject, bus := s.subject, b.bus
	bus.mu.Lock()
	defer bus.mu.Unlock()
	if b.closed {
		return nil, errMemoryClosed
	}
	b.subs[s] = struct{}{}
	bus.subs[subject] = append(bus.subs[subject], s)
	return s, nil
}

// Unsubscribe implements Subscription: what was queued for it and not
// yet handed to fn is dropped.
func (s *memorySub) Unsubscribe() {
	bus := s.b.bus
	bus.mu.Lock()
	defer bus.mu.Unlock()
	delete(s.b.subs, s)
	s.remove()
}

// remove takes s off the bus. Call it with MemoryBus.mu held.
func (s *memorySub) remove() {
	s.stopped.Store(true)
	bus := s.b.bus
	list := bus.subs[s.subject]
	for i, x := range list {
		if x == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(bus.subs, s.subject)
	} else {
		bus.subs[s.subject] = list
	}
}

// Request implements Broker.
func (b *MemoryBroker) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	b.bus.mu.RLock()
	n := len(b.bus.subs[subject])
	b.bus.mu.RUnlock()
	if n == 0 {
		return nil, ErrNoResponders
	}
	answer := make(chan []byte, 1)
	inbox := "_INBOX.memory." + strconv.FormatUint(b.bus.inbox.Add(1), 10)
	sub, err := b.add(&memorySub{b: b, subject: inbox, answer: answer})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	b.bus.publish(BrokerMsg{Subject: subject, Reply: inbox, Data: data})
	select {
	case a := <-answer:
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close implements Broker: the node's subscriptions end, and its lanes
// stop with what they had not delivered, as when its NATS connection
// closes.
func (b *MemoryBroker) Close() {
	bus := b.bus
	bus.mu.Lock()
	if b.closed {
		bus.mu.Unlock()
		return
	}
	b.closed = true
	for s := range b.subs {
		s.remove()
	}
	b.subs = nil
	bus.mu.Unlock()
	close(b.done)
}

type memoryError string

func (e memoryError) Error() string { return string(e) }

const errMemoryClosed = memoryError("the memory broker is closed")
