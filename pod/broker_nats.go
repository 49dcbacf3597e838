package pod

import (
	"context"
	"errors"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// NATSBroker is the Broker on a NATS connection: the gateway's, to its
// embedded server (and through it the cluster's) or to an external
// deployment.
//
// nats.go gives each subscription with a callback a goroutine of its
// own; a node with thousands of pods open would hold thousands of idle
// goroutines. Each subscription here goes instead onto the channel of one
// of a few lanes (ChanSubscribe, one lane per CPU, by subject), and the
// lane's goroutine calls the subscriptions' functions, one at a time, in
// the order NATS brought the messages. Past a lane's queue NATS drops
// what the lane has not taken (a slow consumer, as core NATS is). The
// lanes start with the first subscription: a node alone has none.
type NATSBroker struct {
	nc    *nats.Conn
	lanes []chan *nats.Msg
	done  chan struct{}
	start sync.Once
	once  sync.Once

	mu   sync.RWMutex
	subs map[*nats.Subscription]*natsSub
}

type natsSub struct {
	b       *NATSBroker
	sub     *nats.Subscription
	fn      func(BrokerMsg)
	stopped atomic.Bool
}

// laneQueue is the capacity of a lane's channel: a burst waits there.
const laneQueue = 1 << 16

// NewNATSBroker starts a broker on nc. The node that holds it closes it
// (Node.Stop); nc stays the caller's.
func NewNATSBroker(nc *nats.Conn) *NATSBroker {
	return &NATSBroker{nc: nc, done: make(chan struct{}), subs: map[*nats.Subscription]*natsSub{}}
}

func (b *NATSBroker) startLanes() {
	for range max(2, runtime.GOMAXPROCS(0)) {
		q := make(chan *nats.Msg, laneQueue)
		b.lanes = append(b.lanes, q)
		go b.run(q)
	}
}

func (b *NATSBroker) run(q chan *nats.Msg) {
	for {
		select {
		case m := <-q:
			b.mu.RLock()
			s := b.subs[m.Sub]
			b.mu.RUnlock()
			if s != nil && !s.stopped.Load() {
				s.fn(BrokerMsg{Subject: m.Subject, Reply: m.Reply, Data: m.Data})
			}
		case <-b.done:
			return
		}
	}
}

// Publish implements Broker.
func (b *NATSBroker) Publish(subject string, data []byte) error {
	return b.nc.Publish(subject, data)
}

// Subscribe implements Broker.
func (b *NATSBroker) Subscribe(subject string, fn func(BrokerMsg)) (Subscription, error) {
	b.start.Do(b.startLanes)
	h := fnv.New32a()
	_, _ = h.Write([]byte(subject))
	b.mu.Lock()
	defer b.mu.Unlock()
	sub, err := b.nc.ChanSubscribe(subject, b.lanes[h.Sum32()%uint32(len(b.lanes))])
	if err != nil {
		return nil, err
	}
	s := &natsSub{b: b, sub: sub, fn: fn}
	b.subs[sub] = s
	return s, nil
}

// Unsubscribe implements Subscription.
func (s *natsSub) Unsubscribe() {
	s.stopped.Store(true)
	s.b.mu.Lock()
	delete(s.b.subs, s.sub)
	s.b.mu.Unlock()
	_ = s.sub.Unsubscribe()
}

// Request implements Broker.
func (b *NATSBroker) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := b.nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, ErrNoResponders
	}
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Close implements Broker.
func (b *NATSBroker) Close() {
	b.once.Do(func() {
		close(b.done)
		b.mu.Lock()
		subs := b.subs
		b.subs = map[*nats.Subscription]*natsSub{}
		b.mu.Unlock()
		for _, s := range subs {
			s.stopped.Store(true)
			_ = s.sub.Unsubscribe()
		}
	})
}
