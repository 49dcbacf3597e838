package pod

import (
	"hash/fnv"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
)

// dispatchQueue is the capacity of one dispatcher's queue. A burst waits
// there; past it NATS drops the messages of core subscriptions (a slow
// consumer: a live body is then given up on, and without history an
// envelope of another node is lost, as core NATS would lose it), while
// the follower of the stream waits (the stream keeps what it has not
// delivered).
const dispatchQueue = 1 << 16

// dispatch feeds what NATS brings for the node's pods (the stream, through
// the node's follower; live bodies; core subjects) to a few goroutines,
// one per CPU, instead of one goroutine per subscription as nats.go's
// callbacks have: an idle pod costs its subscriptions and no goroutine.
// Every subscription of one pod goes to the same goroutine, so a pod
// handles its messages one at a time, in the order NATS brought them.
//
// Each goroutine holds the wakes of the writers it queued envelopes for
// (a Sender that holds its flushes) until its queues are empty, or
// burstFlush messages were handled: what a burst brings goes out in one
// write per connection, as a reader's burst does (Sender.Hold), instead
// of one write per envelope and recipient.
type dispatch struct {
	nc     *nats.Conn
	queues []chan *nats.Msg
	tasks  []chan task // what the node's follower hands over, by the same goroutines
	mu     sync.RWMutex
	subs   map[*nats.Subscription]func(*nats.Msg, *Sender)
	done   chan struct{}
	once   sync.Once
}

func newDispatch(nc *nats.Conn) *dispatch {
	d := &dispatch{nc: nc, subs: map[*nats.Subscription]func(*nats.Msg, *Sender){}, done: make(chan struct{})}
	for range max(2, runtime.GOMAXPROCS(0)) {
		q, t := make(chan *nats.Msg, dispatchQueue), make(chan task, dispatchQueue)
		d.queues, d.tasks = append(d.queues, q), append(d.tasks, t)
		go d.loop(q, t)
	}
	return d
}

// task is work handed to a pod's dispatcher goroutine (run), with the
// goroutine's burst: the Sender whose flush wakes the writers it queued
// for.
type task interface{ run(burst *Sender) }

// burstFlush is the most messages a dispatcher handles before it wakes
// the writers they were queued for, when more keep coming: a pod that
// never pauses still has its envelopes written.
const burstFlush = 256

func (d *dispatch) loop(q chan *nats.Msg, tasks chan task) {
	burst := &Sender{Hold: true}
	handled := 0
	for {
		select {
		case m := <-q:
			d.mu.RLock()
			fn := d.subs[m.Sub]
			d.mu.RUnlock()
			if fn != nil {
				fn(m, burst)
			}
		case t := <-tasks:
			t.run(burst)
		case <-d.done:
			burst.Flush()
			return
		}
		if handled++; handled >= burstFlush || len(q) == 0 && len(tasks) == 0 {
			burst.Flush()
			handled = 0
		}
	}
}

// shard is the goroutine of key (the pod's name).
func (d *dispatch) shard(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(d.queues)))
}

// run hands t to the goroutine of key. It waits while that goroutine is
// behind by a whole queue: the follower then slows down, and the stream
// holds what it has not delivered (it never drops).
func (d *dispatch) run(key string, t task) {
	select {
	case d.tasks[d.shard(key)] <- t:
	case <-d.done:
	}
}

// subscribe hands fn what is published on subject, on the goroutine of
// key (the pod's name), with that goroutine's burst.
func (d *dispatch) subscribe(key, subject string, fn func(*nats.Msg, *Sender)) (*nats.Subscription, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sub, err := d.nc.ChanSubscribe(subject, d.queues[d.shard(key)])
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
