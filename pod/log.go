package pod

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
)

// podLog is where a pod's order comes from and how its frames reach the
// other nodes and the history (doc.go). There are three, one for each
// Order of the node:
//
//   - localLog (OrderLocal): the node orders the pod itself. What it
//     accepts is delivered at once and written behind into the history.
//   - streamLog (OrderStream): the history stream orders the pod. What the
//     node accepts goes into the stream, and is delivered when the node's
//     follower of the stream brings it back, as every node's is.
//   - coreLog (OrderCore): no history; each node delivers what it accepts
//     at once, and what the others accept as NATS brings it.
type podLog interface {
	// open reads the pod's past (applyPast) and starts following what the
	// other nodes publish (fromLog).
	open(ctx context.Context) error
	// here reports whether the node orders the pod: what it accepts is
	// delivered at once (commit), not when the log hands it back.
	here() bool
	// publish sends a frame this node accepted, with the order lock held.
	// entry is its index entry when the node orders the pod with history.
	publish(m *envelope.Meta, frame []byte, entry *history.Entry)
	// publishEvent sends a context's conclusion event, which several nodes
	// may publish for one conclusion: id names it, and the stream keeps
	// the first.
	publishEvent(frame []byte, entry *history.Entry, id string)
	// tick is the janitor's, every second (sweep: every ten): it forgets
	// what waited too long for what will not come, and looks for what
	// should have come.
	tick(now time.Time, sweep bool)
	close()
}

func newLog(p *Pod) podLog {
	switch p.node.Order {
	case OrderStream:
		return &streamLog{p: p, bodies: map[liveKey]liveBody{}}
	case OrderCore:
		return &coreLog{p: p}
	}
	return &localLog{p: p}
}

// subjects are the pod's subjects in the history stream: its entries, and
// its live frames' markers.
func (p *Pod) subjects() []string { return []string{p.subject, markerSubject(p.Name)} }

// readPast hands applyPast every frame the history stream holds of the
// pod, in the stream's order.
func (p *Pod) readPast(ctx context.Context) error {
	return p.node.History.Scan(ctx, p.subjects(), 1, func(_ string, m history.Msg) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		return history.Frames(m.Data, func(off int, frame []byte) error {
			p.applyPast(frame, history.Loc{Seq: m.Seq, Off: off}, m.Time)
			return nil
		})
	})
}

// localLog: one node orders the pod.
type localLog struct{ p *Pod }

func (l *localLog) here() bool { return true }

func (l *localLog) open(ctx context.Context) error {
	p := l.p
	if !p.node.historyOn() {
		return nil
	}
	// Frames of an earlier life of the pod on this node may still be on
	// their way into the stream: its past is all of them.
	if mark, ok := p.node.closedMark(p.Name); ok {
		if err := p.node.Writer.WaitFor(ctx, mark); err != nil {
			return fmt.Errorf("waiting for the history writer: %w", err)
		}
	}
	return p.readPast(ctx)
}

func (l *localLog) publish(m *envelope.Meta, frame []byte, entry *history.Entry) {
	p := l.p
	if !p.node.historyOn() {
		return
	}
	if m.Live() {
		// History keeps a live frame's place (a client may resume after
		// it, across a restart), never its body.
		p.node.Writer.Append(markerSubject(p.Name), markerOf(m), nil, nil, "")
		return
	}
	p.node.Writer.Append(p.subject, frame, p.index, entry, "")
}

func (l *localLog) publishEvent(frame []byte, entry *history.Entry, _ string) {
	if p := l.p; p.node.historyOn() {
		p.node.Writer.Append(p.subject, frame, p.index, entry, "")
	}
}

func (l *localLog) tick(time.Time, bool) {}

func (l *localLog) close() {}

// markerOf is the marker of the live frame m: its header, no body.
func markerOf(m *envelope.Meta) []byte {
	marker := *m
	marker.Flags |= envelope.FlagMarker
	marker.Protocol = envelope.Span{}
	return envelope.Frame(&marker, nil)
}

// coreLog: no history; the pod's core subject carries each node's frames
// to the others.
type coreLog struct {
	p   *Pod
	sub *nats.Subscription
}

func (l *coreLog) here() bool { return true }

func (l *coreLog) open(context.Context) error {
	p := l.p
	sub, err := p.node.dispatch.subscribe(p.Name, p.subject, func(m *nats.Msg, burst *Sender) {
		p.fromLog(m.Data, history.Loc{}, 0, burst)
	})
	if err != nil {
		return err
	}
	l.sub = sub
	return nil
}

func (l *coreLog) publish(_ *envelope.Meta, frame []byte, _ *history.Entry) {
	p := l.p
	if err := p.node.NATS.Publish(p.subject, frame); err != nil {
		p.node.Log.Error("publish failed", "subject", p.subject, "err", err)
	}
}

// publishEvent sends nothing: without history each node announces the
// conclusions it sees to its own members.
func (l *coreLog) publishEvent([]byte, *history.Entry, string) {}

func (l *coreLog) tick(time.Time, bool) {}

func (l *coreLog) close() {
	if l.sub != nil {
		l.p.node.dispatch.unsubscribe(l.sub)
	}
}

// liveWait bounds how long the pod waits, at a live frame's marker, for
// its body, which travels outside the stream and normally arrives well
// before it (the marker goes through the stream's leader and its
// replicas); a body lost with its node, or published before this node
// listened to the pod, is given up on, and the pod goes on. The frames
// behind the marker wait meanwhile, so it is short.
const liveWait = 250 * time.Millisecond

// liveKeep is how long a live frame's body waits for its marker before it
// is dropped (a marker lost because the stream did not take it).
const liveKeep = 10 * time.Second

// streamLog: the history stream orders the pod. A stored frame goes into
// the stream and comes back to every node, through its follower
// (tail.go). A live frame
// (presence, an ephemeral envelope) never goes into the stream: its body
// is published on the pod's live subject, and a marker with its header
// and no body takes its place in the stream, so that every node delivers
// it in the pod's order and history holds nothing of it but its place.
type streamLog struct {
	p        *Pod
	follower *Follower
	tail     *Tail
	sub      *nats.Subscription
	lost     atomic.Bool // its order was found lost

	// deliver makes the frames reach the pod one at a time, in order,
	// whoever hands them (the dispatcher, or the timer that gives up on a
	// body).
	deliver sync.Mutex
	mu      sync.Mutex
	bodies  map[liveKey]liveBody
	// parked are the frames that came after a marker whose body has not:
	// they wait for it (at most liveWait), in order, without holding up
	// the other pods.
	parked []parkedFrame
	timer  *time.Timer
}

type liveKey struct {
	origin string
	seq    uint64
}

type liveBody struct {
	frame []byte
	at    time.Time
}

type parkedFrame struct {
	frame []byte
	loc   history.Loc
	at    int64
	key   liveKey // of a marker still waiting for its body, or zero
}

func (l *streamLog) here() bool { return false }

func (l *streamLog) open(ctx context.Context) error {
	p := l.p
	// The live subject first: a live frame whose marker comes after the
	// past is then one whose body this node receives.
	sub, err := p.node.dispatch.subscribe(p.Name, liveSubject(p.Name), l.onBody)
	if err != nil {
		return err
	}
	l.sub = sub
	f, err := p.node.follower(ctx)
	if err == nil {
		l.tail, err = f.Follow(ctx, p.Name, p.subjects(), l.onMsg)
	}
	if err != nil {
		p.node.dispatch.unsubscribe(sub)
		return err
	}
	l.follower = f
	return nil
}

func (l *streamLog) publish(m *envelope.Meta, frame []byte, _ *history.Entry) {
	p := l.p
	if m.Live() {
		// This node's own fan-out finds the body here; the others get it
		// on the live subject, published before the marker on the same
		// connection, so that it normally reaches them first.
		l.keep(liveKey{m.Origin, m.Seq}, frame)
		if err := p.node.NATS.Publish(liveSubject(p.Name), frame); err != nil {
			p.node.Log.Error("publish failed", "subject", liveSubject(p.Name), "err", err)
		}
		p.node.Writer.Append(markerSubject(p.Name), markerOf(m), nil, nil, "")
		return
	}
	p.node.Writer.Append(p.subject, frame, nil, nil, "")
}

func (l *streamLog) publishEvent(frame []byte, _ *history.Entry, id string) {
	p := l.p
	p.node.Writer.Append(p.subject, frame, nil, nil, id)
}

func (l *streamLog) close() {
	if l.tail != nil {
		l.tail.Stop()
	}
	if l.sub != nil {
		l.p.node.dispatch.unsubscribe(l.sub)
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
}

// onMsg takes a message of the stream (the past, then what the follower
// brings), in the stream's order.
func (l *streamLog) onMsg(_ string, m history.Msg, burst *Sender) {
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
func (l *streamLog) take(f parkedFrame, burst *Sender) {
	l.deliver.Lock()
	defer l.deliver.Unlock()
	l.mu.Lock()
	if len(l.parked) > 0 {
		l.parked = append(l.parked, f)
		l.mu.Unlock()
		return
	}
	if body, key, waiting := l.bodyOf(f.frame); waiting {
		f.key = key
		l.parked = append(l.parked, f)
		l.timer = time.AfterFunc(liveWait, l.giveUp)
		l.mu.Unlock()
		return
	} else if body != nil {
		f.frame = body
	}
	l.mu.Unlock()
	l.p.fromLog(f.frame, f.loc, f.at, burst)
}

// bodyOf finds the body of frame when it is a marker: body is nil for a
// frame that is not one (or an old one whose body is long gone), and
// waiting is set when the body is still to come. Call it with mu held.
func (l *streamLog) bodyOf(frame []byte) (body []byte, key liveKey, waiting bool) {
	if len(frame) < 3 || frame[2]&envelope.FlagMarker == 0 {
		return nil, key, false
	}
	var m envelope.Meta
	if _, err := envelope.DecodeFrame(frame, &m); err != nil {
		return nil, key, false
	}
	key = liveKey{m.Origin, m.Seq}
	if b, ok := l.bodies[key]; ok {
		delete(l.bodies, key)
		return b.frame, key, false
	}
	// The past's bodies are gone, and this node's own are kept when
	// published: only another node's body may still be on its way.
	live := l.p.live.Load() && m.Origin != l.p.node.ID
	key.origin = string([]byte(key.origin)) // not the frame's memory
	return nil, key, live
}

// onBody keeps another node's live frame until its marker comes, and
// lets parked frames go when it is the one they wait for.
func (l *streamLog) onBody(msg *nats.Msg, burst *Sender) {
	var meta envelope.Meta
	if _, err := envelope.DecodeFrame(msg.Data, &meta); err != nil || meta.Origin == l.p.node.ID {
		return // this node's own are kept when published
	}
	l.keep(liveKey{meta.Origin, meta.Seq}, msg.Data)
	l.release(false, burst)
}

func (l *streamLog) keep(k liveKey, frame []byte) {
	l.mu.Lock()
	l.bodies[liveKey{string([]byte(k.origin)), k.seq}] = liveBody{frame: frame, at: time.Now()}
	l.mu.Unlock()
}

// giveUp delivers the parked frames without the body they wait for.
func (l *streamLog) giveUp() {
	l.p.node.Log.Warn("a live frame's body never came; it is not delivered", "pod", l.p.Name)
	l.release(true, nil)
}

// release hands the parked frames to the pod, in order, as far as their
// bodies have come (all of them when skip: the first one's is given up).
// burst is the dispatcher's, or nil off the dispatcher.
func (l *streamLog) release(skip bool, burst *Sender) {
	l.deliver.Lock()
	defer l.deliver.Unlock()
	for {
		l.mu.Lock()
		if len(l.parked) == 0 {
			l.mu.Unlock()
			return
		}
		f := l.parked[0]
		if f.key != (liveKey{}) {
			if b, ok := l.bodies[f.key]; ok {
				delete(l.bodies, f.key)
				f.frame = b.frame
			} else if !skip {
				l.mu.Unlock()
				return
			}
			skip = false
			if l.timer != nil {
				l.timer.Stop()
			}
		} else if body, key, waiting := l.bodyOf(f.frame); waiting {
			l.parked[0].key = key
			l.timer = time.AfterFunc(liveWait, l.giveUp)
			l.mu.Unlock()
			continue
		} else if body != nil {
			f.frame = body
		}
		l.parked[0] = parkedFrame{}
		l.parked = l.parked[1:]
		if len(l.parked) == 0 {
			l.parked = nil
		}
		l.mu.Unlock()
		l.p.fromLog(f.frame, f.loc, f.at, burst)
	}
}

// tick drops bodies whose markers never came (sweep), and finds out when
// the node's follower was given up on (checkFollower): the pod's order
// is lost then.
func (l *streamLog) tick(now time.Time, sweep bool) {
	if l.follower != nil && l.p.node.checkFollower(now) != l.follower && l.lost.CompareAndSwap(false, true) {
		go l.p.orderLost(fmt.Errorf("the node's follower of the history stream stayed behind for %v", lostAfter))
	}
	if !sweep {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.bodies {
		if now.Sub(b.at) > liveKeep {
			delete(l.bodies, k)
		}
	}
}
