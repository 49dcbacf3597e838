package pod

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
)

// streamLog: the history stream orders the pod. A stored frame goes into
// the stream and comes back to every node, through its follower
// (tail.go). A live frame (presence, an ephemeral envelope) never goes
// into the stream: its body is published on the pod's live subject, and
// a marker with its header and no body takes its place in the stream, so
// that every node delivers it in the pod's order and history holds
// nothing of it but its place.
//
// A marker whose body has not come waits for it, and the pod's frames
// behind it wait too, in order, without holding up the other pods: for
// liveWait on the live subject, then for the answer of the node that
// accepted it (livebodies.go), which keeps its bodies for the nodes that
// missed them; the bodies the frames behind it lack are asked for at the
// same time. A body that comes late is delivered late, in its place; one
// that cannot come (its node is gone) is lost, counted and told
// (livelost.go). So the pod's frames wait at most liveWait + liveAskWait
// behind a marker.
type streamLog struct {
	p        *Pod
	follower atomic.Pointer[Follower] // set once the pod is open; the janitor reads it (tick)
	tail     *Tail
	sub      *dispatchSub
	lost     atomic.Bool // its order was found lost

	// serial makes the frames reach the pod one at a time, in order,
	// whoever hands them (the dispatcher, or the goroutine of a wait).
	serial sync.Mutex
	mu     sync.Mutex
	bodies map[liveKey]liveBody // other nodes' bodies, until their markers come
	// parked are the frames that came after a marker whose body has not:
	// they wait for it, in order.
	parked []parkedFrame
	// gone are the bodies their nodes could not give, until their markers
	// come (or liveKeep passes).
	gone map[liveKey]lostBody
	// timer is the first parked frame's wait for the body of waiting, and
	// wait its number: a timer of a wait that is over does nothing.
	timer   *time.Timer
	waiting liveKey
	wait    uint64
	closed  bool
}

// liveWait is how long a live frame's marker waits for its body before
// the node asks the node that accepted it. The body travels outside the
// stream and normally arrives well before the marker (the marker goes
// through the stream's leader and its replicas), or a moment after it on
// a busy dispatcher, so asking at once would mostly ask for what is on
// its way.
const liveWait = 100 * time.Millisecond

// liveKeep is how long another node's live frame's body waits for its
// marker before it is dropped (a marker the stream never took).
const liveKeep = 10 * time.Second

type liveKey struct {
	origin string
	seq    uint64
}

type liveBody struct {
	frame []byte
	at    time.Time
}

type lostBody struct {
	err error
	at  time.Time
}

type parkedFrame struct {
	frame []byte
	loc   history.Loc
	at    int64
	key   liveKey // of a marker still waiting for its body, or zero
}

func (l *streamLog) here() bool { return false }

// errPodClosed is the opening of a pod closed while it read its past.
var errPodClosed = errors.New("pod: closed while it read its past")

func (l *streamLog) open(ctx context.Context) error {
	p := l.p
	// The live subject first: a live frame whose marker comes after the
	// past is then one whose body this node receives, unless it was
	// published before this moment (then it is asked for).
	sub, err := p.node.dispatch.subscribe(p.Name, liveSubject(p.Name), l.onBody)
	if err != nil {
		return err
	}
	var tail *Tail
	f, err := p.node.follower(ctx)
	if err == nil {
		tail, err = f.Follow(ctx, p.Name, p.subjects(), l.onMsg)
	}
	if err != nil {
		p.node.dispatch.unsubscribe(sub)
		return err
	}
	// The pod may have been closed while it read its past (the joiner
	// that opened it gave up, and it was idle): then its tail and live
	// subscription end here, or they would stay the follower's for
	// nothing (close found neither).
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.sub, l.tail = sub, tail
	}
	l.mu.Unlock()
	if closed {
		tail.Stop()
		p.node.dispatch.unsubscribe(sub)
		return errPodClosed
	}
	l.follower.Store(f)
	return nil
}

func (l *streamLog) publish(m *envelope.Meta, frame []byte, _ *history.Entry) {
	p := l.p
	n := p.node
	if m.Live() {
		// The node keeps the body, for its own fan-out when the marker
		// comes back and for the nodes that miss it; the others get it on
		// the live subject, published before the marker on the same
		// connection, so that it normally reaches them first.
		n.bodies.keep(m.Seq, frame, time.Now())
		if err := n.Broker.Publish(liveSubject(p.Name), frame); err != nil {
			n.Log.Error("publish failed", "subject", liveSubject(p.Name), "err", err)
		}
		n.Writer.AppendMarker(p.subject, markerSubject(p.Name), markerOf(m))
		n.bodies.appended(m.Seq, n.Writer.Mark())
		return
	}
	n.Writer.Append(p.subject, frame, nil, nil, "")
}

func (l *streamLog) publishEvent(frame []byte, _ *history.Entry, id string) {
	p := l.p
	p.node.Writer.Append(p.subject, frame, nil, nil, id)
}

func (l *streamLog) close() {
	l.mu.Lock()
	l.closed = true
	l.endWait()
	tail, sub := l.tail, l.sub
	l.mu.Unlock()
	if tail != nil {
		tail.Stop()
	}
	if sub != nil {
		l.p.node.dispatch.unsubscribe(sub)
	}
}

// onMsg takes a message of the stream (the past, then what the follower
// brings), in the stream's order.
func (l *streamLog) onMsg(_ string, m history.StoredMsg, burst *Burst) {
	err := history.Frames(m.Data, func(off int, frame []byte) error {
		l.take(parkedFrame{frame: frame, loc: history.Loc{Seq: m.Seq, Off: off}, at: m.Time}, burst)
		return nil
	})
	if err != nil {
		l.p.node.Log.Error("dropping a malformed history message", "pod", l.p.Name, "seq", m.Seq, "err", err)
	}
}

// take hands the pod one frame of the stream: a marker is replaced by its
// body; one whose body has not come parks it and what follows.
func (l *streamLog) take(f parkedFrame, burst *Burst) {
	l.serial.Lock()
	defer l.serial.Unlock()
	l.mu.Lock()
	if len(l.parked) == 0 {
		body, key, waiting := l.bodyOf(f.frame)
		if !waiting {
			if body != nil {
				f.frame = body
			}
			l.mu.Unlock()
			l.p.fromLog(f.frame, f.loc, f.at, burst)
			return
		}
		f.key = key
	}
	l.parked = append(l.parked, f)
	l.mu.Unlock()
	l.flush(burst)
}

// release hands the pod the parked frames whose bodies have come (or were
// found lost). burst is the dispatcher's, or nil off the dispatcher.
func (l *streamLog) release(burst *Burst) {
	l.serial.Lock()
	defer l.serial.Unlock()
	l.flush(burst)
}

// flush hands the pod the parked frames, in order, as far as their
// bodies have come: a body lost (gone) hands its marker as it is, and the
// members that may have missed it are told. Call it with
// streamLog.serial held.
func (l *streamLog) flush(burst *Burst) {
	for {
		l.mu.Lock()
		if len(l.parked) == 0 || l.closed {
			l.mu.Unlock()
			return
		}
		f := l.parked[0]
		if f.key == (liveKey{}) {
			body, key, waiting := l.bodyOf(f.frame)
			if body != nil {
				f.frame = body
			}
			if waiting {
				f.key, l.parked[0].key = key, key
			}
		}
		var lost error
		if f.key != (liveKey{}) {
			if b, ok := l.bodies[f.key]; ok {
				delete(l.bodies, f.key)
				f.frame = b.frame
			} else if g, ok := l.gone[f.key]; ok {
				delete(l.gone, f.key)
				lost = g.err
			} else {
				if l.waiting != f.key {
					l.await(f.key)
				}
				l.mu.Unlock()
				return
			}
			l.endWait()
		}
		l.parked[0] = parkedFrame{}
		l.parked = l.parked[1:]
		if len(l.parked) == 0 {
			l.parked = nil
		}
		l.mu.Unlock()
		l.p.fromLog(f.frame, f.loc, f.at, burst)
		if lost != nil {
			l.p.liveLost(f.frame, lost, burst)
		}
	}
}

// bodyOf finds the body of frame when it is a marker: body is nil for a
// frame that is not one (or one of the pod's past, whose body is long
// gone), and waiting is set when the body is still to come. Call it with
// streamLog.mu held.
func (l *streamLog) bodyOf(frame []byte) (body []byte, key liveKey, waiting bool) {
	key, ok := markerKey(frame)
	if !ok {
		return nil, key, false
	}
	if b, ok := l.bodies[key]; ok {
		delete(l.bodies, key)
		return b.frame, key, false
	}
	if key.origin == l.p.node.ID {
		if b := l.p.node.bodies.get(key.seq); b != nil {
			return b, key, false
		}
	}
	key.origin = string([]byte(key.origin)) // not the frame's memory
	return nil, key, l.p.delivering.Load()
}

// markerKey is the key of frame's body when frame is a live frame's
// marker. Its origin is the frame's memory.
func markerKey(frame []byte) (liveKey, bool) {
	if len(frame) < 3 || frame[2]&envelope.FlagMarker == 0 {
		return liveKey{}, false
	}
	var m envelope.Meta
	if _, err := envelope.DecodeFrame(frame, &m); err != nil {
		return liveKey{}, false
	}
	return liveKey{m.Origin, m.Seq}, true
}

// await starts the wait of the first parked frame for the body of key.
// Call it with streamLog.mu held.
func (l *streamLog) await(key liveKey) {
	l.wait++
	l.waiting = key
	wait := l.wait
	l.timer = time.AfterFunc(liveWait, func() { l.ask(wait) })
}

// endWait ends the wait of the first parked frame. Call it with
// streamLog.mu held.
func (l *streamLog) endWait() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.wait++
	l.waiting = liveKey{}
}

// liveAskMany bounds the bodies a pod asks for at once.
const liveAskMany = 16

// ask asks the nodes that accepted them for the bodies the parked frames
// still lack, the first one's and those behind it (a dispatcher that fell
// behind lost many at once), when the wait that asks is still on once
// liveWait passed; then it hands the pod what it can.
func (l *streamLog) ask(wait uint64) {
	l.mu.Lock()
	if wait != l.wait || l.closed {
		l.mu.Unlock()
		return
	}
	var keys []liveKey
	for _, f := range l.parked {
		key := f.key
		if key == (liveKey{}) {
			var ok bool
			if key, ok = markerKey(f.frame); !ok {
				continue
			}
		}
		if _, ok := l.bodies[key]; ok {
			continue
		}
		if _, ok := l.gone[key]; ok {
			continue
		}
		if key.origin == l.p.node.ID && l.p.node.bodies.get(key.seq) != nil {
			continue
		}
		keys = append(keys, liveKey{string([]byte(key.origin)), key.seq})
	}
	l.mu.Unlock()
	bodies := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	ctx, cancel := context.WithTimeout(context.Background(), liveAskWait)
	defer cancel()
	var wg sync.WaitGroup
	slots := make(chan struct{}, liveAskMany)
	for i, k := range keys {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			bodies[i], errs[i] = l.p.node.askBody(ctx, k.origin, k.seq)
			<-slots
		}()
	}
	wg.Wait()
	now := time.Now()
	l.mu.Lock()
	for i, k := range keys {
		if errs[i] == nil {
			l.bodies[k] = liveBody{frame: bodies[i], at: now}
		} else if _, ok := l.bodies[k]; !ok { // it may have come meanwhile
			l.gone[k] = lostBody{err: errs[i], at: now}
		}
	}
	l.mu.Unlock()
	l.release(nil)
}

// onBody keeps another node's live frame until its marker comes, and
// lets parked frames go when it is the one they wait for.
func (l *streamLog) onBody(msg BrokerMsg, burst *Burst) {
	var meta envelope.Meta
	if _, err := envelope.DecodeFrame(msg.Data, &meta); err != nil || meta.Origin == l.p.node.ID {
		return // this node's own are kept when published
	}
	l.mu.Lock()
	l.bodies[liveKey{string([]byte(meta.Origin)), meta.Seq}] = liveBody{frame: msg.Data, at: time.Now()}
	l.mu.Unlock()
	l.release(burst)
}

// tick drops bodies whose markers never came (sweep), and finds out when
// the node's follower was given up on (checkFollower): the pod's order
// is lost then.
func (l *streamLog) tick(now time.Time, sweep bool) {
	if f := l.follower.Load(); f != nil && l.p.node.checkFollower(now) != f && l.lost.CompareAndSwap(false, true) {
		go l.p.orderLost(fmt.Errorf("the node's follower of the history stream stayed behind for %v, or the node was cut off from a quorum for %v", behindAfter, cutAfter))
	}
	if !sweep {
		return
	}
	l.p.node.bodies.evict(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.bodies {
		if now.Sub(b.at) > liveKeep {
			delete(l.bodies, k)
		}
	}
	for k, g := range l.gone {
		if now.Sub(g.at) > liveKeep {
			delete(l.gone, k)
		}
	}
}
