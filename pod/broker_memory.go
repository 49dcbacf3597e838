package pod

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
)

// MemoryBus joins, in one process, the MemoryBrokers of nodes that share
// pods, as a NATS cluster joins theirs: the pods' unit tests run several
// nodes on one bus (and one history.Memory as their stream) with no NATS
// server, as Centrifuge's memory broker lets its hub be tested.
//
// It delivers at once, on the publisher's goroutine, and never loses a
// message by itself; Drop makes it lose the ones a test chooses (a node
// that subscribed too late, a slow consumer, a node that died with what
// it sent).
type MemoryBus struct {
	mu    sync.RWMutex
	subs  map[string][]*memorySub // by subject
	drop  func(subject string, to *MemoryBroker) bool
	inbox atomic.Uint64
}

// NewMemoryBus makes an empty bus.
func NewMemoryBus() *MemoryBus { return &MemoryBus{subs: map[string][]*memorySub{}} }

// Broker is a new node's broker on the bus.
func (bus *MemoryBus) Broker() *MemoryBroker { return &MemoryBroker{bus: bus} }

// Drop makes the bus lose every message on subject for to's
// subscriptions while lose says so (nil: lose nothing).
func (bus *MemoryBus) Drop(lose func(subject string, to *MemoryBroker) bool) {
	bus.mu.Lock()
	bus.drop = lose
	bus.mu.Unlock()
}

// MemoryBroker is one node's Broker on a MemoryBus.
type MemoryBroker struct {
	bus    *MemoryBus
	mu     sync.Mutex
	subs   map[*memorySub]struct{}
	closed bool
}

type memorySub struct {
	b       *MemoryBroker
	subject string
	fn      func(Msg)
	// mu makes the calls of fn one at a time, as a broker's lane does.
	mu      sync.Mutex
	stopped bool
}

// Publish implements Broker: every subscriber's function is called before
// it returns.
func (b *MemoryBroker) Publish(subject string, data []byte) error {
	b.bus.publish(Msg{Subject: subject, Data: data})
	return nil
}

func (bus *MemoryBus) publish(m Msg) {
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
		s.deliver(c)
	}
}

func (s *memorySub) deliver(m Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.fn(m)
	}
}

// Subscribe implements Broker.
func (b *MemoryBroker) Subscribe(subject string, fn func(Msg)) (Subscription, error) {
	s := &memorySub{b: b, subject: subject, fn: fn}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errMemoryClosed
	}
	if b.subs == nil {
		b.subs = map[*memorySub]struct{}{}
	}
	b.subs[s] = struct{}{}
	b.bus.mu.Lock()
	b.bus.subs[subject] = append(b.bus.subs[subject], s)
	b.bus.mu.Unlock()
	return s, nil
}

// Unsubscribe implements Subscription.
func (s *memorySub) Unsubscribe() {
	s.b.mu.Lock()
	delete(s.b.subs, s)
	s.b.mu.Unlock()
	s.remove()
}

func (s *memorySub) remove() {
	bus := s.b.bus
	bus.mu.Lock()
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
	bus.mu.Unlock()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
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
	sub, err := b.Subscribe(inbox, func(m Msg) {
		select {
		case answer <- m.Data:
		default: // the first answer only
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	b.bus.publish(Msg{Subject: subject, Reply: inbox, Data: data})
	select {
	case a := <-answer:
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close implements Broker: the node's subscriptions end, as when its
// NATS connection closes.
func (b *MemoryBroker) Close() {
	b.mu.Lock()
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for s := range subs {
		s.remove()
	}
}

type memoryError string

func (e memoryError) Error() string { return string(e) }

const errMemoryClosed = memoryError("the memory broker is closed")
