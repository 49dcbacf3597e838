package pod

import (
	"hash/fnv"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
)

// dispatchQueue is the capacity of one dispatcher's queue. A burst waits
// there; past it NATS drops messages (a slow consumer), which a pod that
// follows the stream reads back (a gap), and which one on core NATS loses,
// as core NATS would.
const dispatchQueue = 1 << 16

// dispatch feeds what NATS brings for the node's pods (republished
// history, live bodies, core subjects) to a few goroutines, one per CPU,
// instead of one goroutine per subscription as nats.go's callbacks have:
// an idle pod costs its subscriptions and no goroutine. Every subscription
// of one pod goes to the same goroutine, so a pod handles its messages one
// at a time, in the order NATS brought them.
type dispatch struct {
	nc     *nats.Conn
	queues []chan *nats.Msg
	mu     sync.RWMutex
	subs   map[*nats.Subscription]func(*nats.Msg)
	done   chan struct{}
	once   sync.Once
}

func newDispatch(nc *nats.Conn) *dispatch {
	d := &dispatch{nc: nc, subs: map[*nats.Subscription]func(*nats.Msg){}, done: make(chan struct{})}
	for range max(2, runtime.GOMAXPROCS(0)) {
		q := make(chan *nats.Msg, dispatchQueue)
		d.queues = append(d.queues, q)
		go d.run(q)
	}
	return d
}

func (d *dispatch) run(q chan *nats.Msg) {
	for {
		select {
		case m := <-q:
			d.mu.RLock()
			fn := d.subs[m.Sub]
			d.mu.RUnlock()
			if fn != nil {
				fn(m)
			}
		case <-d.done:
			return
		}
	}
}

// subscribe hands fn what is published on subject, on the goroutine of
// key (the pod's name).
func (d *dispatch) subscribe(key, subject string, fn func(*nats.Msg)) (*nats.Subscription, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	d.mu.Lock()
	defer d.mu.Unlock()
	sub, err := d.nc.ChanSubscribe(subject, d.queues[h.Sum32()%uint32(len(d.queues))])
	if err != nil {
		return nil, err
	}
	d.subs[sub] = fn
	return sub, nil
}

func (d *dispatch) unsubscribe(sub *nats.Subscription) {
	d.mu.Lock()
	delete(d.subs, sub)
	d.mu.Unlock()
	_ = sub.Unsubscribe()
}

func (d *dispatch) close() { d.once.Do(func() { close(d.done) }) }
