package pod

import (
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
)

// dispatchQueue is the capacity of one dispatcher's queues. A burst waits
// there; past it what the broker brings is dropped (a slow consumer, as
// core NATS drops it: a live frame's body is then asked of its origin
// again, and without history an envelope of another node is lost, as
// core NATS would lose it), while the follower of the stream waits (the
// stream keeps what it has not delivered).
const dispatchQueue = 1 << 16

// dispatch feeds what the broker brings for the node's pods (live bodies,
// core subjects) and what the node's follower of the stream hands over to
// a few goroutines, one per CPU, instead of one goroutine per
// subscription: an idle pod costs its subscriptions and no goroutine.
// Everything of one pod goes to the same goroutine, so a pod handles its
// messages one at a time, in the order they came.
//
// Each goroutine has a Burst of its own, which holds the wakes of the
// writers it queued envelopes for until its queues are empty, or
// burstFlush messages were handled: what a burst brings goes out in one
// write per connection, as a reader's burst does, instead of one write
// per envelope and recipient.
type dispatch struct {
	broker Broker
	queues []chan delivery // what the broker brings, by goroutine
	tasks  []chan task     // what the node's follower hands over, by the same goroutines
	done   chan struct{}
	once   sync.Once
}

// delivery is a message of one of the pods' subscriptions.
type delivery struct {
	s *dispatchSub
	m BrokerMsg
}

// dispatchSub is one subscription of a pod: its messages go to the
// goroutine of the pod (queue).
type dispatchSub struct {
	sub     Subscription
	queue   chan delivery
	fn      func(BrokerMsg, *Burst)
	stopped atomic.Bool
}

func newDispatch(b Broker) *dispatch {
	d := &dispatch{broker: b, done: make(chan struct{})}
	for range max(2, runtime.GOMAXPROCS(0)) {
		q, t := make(chan delivery, dispatchQueue), make(chan task, dispatchQueue)
		d.queues, d.tasks = append(d.queues, q), append(d.tasks, t)
		go d.loop(q, t)
	}
	return d
}

// task is work handed to a pod's dispatcher goroutine (run), with the
// goroutine's burst, whose flush wakes the writers it queued for.
type task interface{ run(burst *Burst) }

// burstFlush is the most messages a dispatcher handles before it wakes
// the writers they were queued for, when more keep coming: a pod that
// never pauses still has its envelopes written.
const burstFlush = 256

func (d *dispatch) loop(q chan delivery, tasks chan task) {
	burst := new(Burst)
	handled := 0
	for {
		select {
		case dl := <-q:
			if !dl.s.stopped.Load() {
				dl.s.fn(dl.m, burst)
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
// key (the pod's name), with that goroutine's burst. The broker's own
// goroutine only queues it there, and drops it when the queue is full
// rather than wait: a broker's delivery must not block.
func (d *dispatch) subscribe(key, subject string, fn func(BrokerMsg, *Burst)) (*dispatchSub, error) {
	s := &dispatchSub{queue: d.queues[d.shard(key)], fn: fn}
	sub, err := d.broker.Subscribe(subject, func(m BrokerMsg) {
		select {
		case s.queue <- delivery{s, m}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	s.sub = sub
	return s, nil
}

// unsubscribe ends s: what it brought and its goroutine has not handled
// yet is dropped.
func (d *dispatch) unsubscribe(s *dispatchSub) {
	s.stopped.Store(true)
	s.sub.Unsubscribe()
}

func (d *dispatch) close() { d.once.Do(func() { close(d.done) }) }
