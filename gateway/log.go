package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
)

// podLog is where a pod's frames go and where they come back from, in the
// one order that every gateway node delivers them in. With history off it
// is the pod's core NATS subject (coreLog); with history on, the pod's
// subjects in the JetStream history stream (streamLog), so that the order
// of delivery is the history's and a resume is exact on any node.
//
// The publish calls number the frame (m.Seq) with the node's counter.
type podLog interface {
	// publish sends an accepted envelope; buf may be reused for its frame
	// and is returned.
	publish(m *envelope.Meta, body, buf []byte) []byte
	// publishLive sends a frame that history must not keep: presence, or
	// an ephemeral envelope.
	publishLive(m *envelope.Meta, body []byte)
	// publishEvent sends a system/context event's frame. id names the
	// conclusion, so that a stream keeps one event however many nodes
	// publish it.
	publishEvent(frame []byte, id string)
	// follow hands fn every frame of the pod, in order, from the oldest
	// its history holds (seq and at are 0 without history). more tells
	// that another frame is already on its way (the stream holds more for
	// this follower, or the subscription has more queued): the fan-out
	// then waits for it before it flushes. The frames up to upTo are the
	// pod's past (0: it has none).
	follow(fn func(seq uint64, at int64, frame []byte, more bool)) (upTo uint64, err error)
	close()
}

// coreLog is a pod's core NATS subject: what is published reaches every
// node's subscription in the order NATS routes it, and nothing is kept.
type coreLog struct {
	g       *Gateway
	subject string
	sub     *nats.Subscription
}

func (l *coreLog) publish(m *envelope.Meta, body, buf []byte) []byte {
	m.Seq = l.g.frameSeq.Add(1)
	buf = envelope.AppendFrame(buf[:0], m, body)
	l.g.publish(l.subject, buf)
	return buf
}

func (l *coreLog) publishLive(m *envelope.Meta, body []byte) {
	m.Seq = l.g.frameSeq.Add(1)
	l.g.publish(l.subject, envelope.AppendFrame(nil, m, body))
}

func (l *coreLog) publishEvent(frame []byte, _ string) { l.g.publish(l.subject, frame) }

func (l *coreLog) follow(fn func(seq uint64, at int64, frame []byte, more bool)) (uint64, error) {
	sub, err := l.g.nc.Subscribe(l.subject, func(m *nats.Msg) {
		queued, _, _ := m.Sub.Pending()
		fn(0, 0, m.Data, queued > 0)
	})
	if err != nil {
		return 0, err
	}
	// The callback never blocks, so the subscription must never drop.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return 0, err
	}
	l.sub = sub
	return 0, nil
}

func (l *coreLog) close() {
	if l.sub != nil {
		_ = l.sub.Unsubscribe()
	}
}

// liveWait bounds how long the fan-out waits, at a live frame's marker,
// for its body, which travels outside the stream and normally arrives
// first; a body lost with its node is given up on.
const liveWait = 2 * time.Second

// liveKeep is how long a live frame's body waits for its marker before it
// is dropped (a marker lost because the stream was unavailable).
const liveKeep = 10 * time.Second

// holdAfter is how long a node's frame may stay unseen before the node
// asks whether the stream takes frames at all (a leader being elected
// takes seconds): if it does not, the node holds what comes next and
// republishes, in order, everything unseen once the stream answers again.
// A frame unseen for republishAfter is republished even if the stream
// answers (the node's follower lost it).
const (
	holdAfter      = time.Second
	republishAfter = 10 * time.Second
)

// streamLog is a pod's subjects in the history stream. Stored frames go
// into the stream and come back through an ordered consumer. A live frame
// (presence, an ephemeral envelope) never goes into the stream: its body
// is published on the pod's live subject, and a marker with its header and
// no body takes its place in the stream, so that it is delivered in the
// pod's order like every other frame and history holds nothing of it but
// its place.
//
// Publishing does not wait for the stream's acknowledgement: a node's own
// frames coming back through its follower are the acknowledgement. Until
// then the node keeps them (pending), bounded by the senders' throttle;
// when the stream stops taking them it holds the next ones, and once the
// stream answers again republishes everything unseen in order. Every node
// drops a frame whose number it has delivered already, so a frame that
// had been stored after all is not delivered twice.
type streamLog struct {
	g       *Gateway
	store   *history.Store
	subject string
	marker  string
	live    string

	follower *history.Follower
	liveSub  *nats.Subscription
	// waiting is set once the pod has caught up with its history: from
	// then on a marker's body is on its way and worth waiting for (the
	// bodies of the history's old markers are long gone).
	waiting atomic.Bool

	pubMu    sync.Mutex
	pending  []pendingFrame // this node's frames not seen back yet, oldest first
	holding  bool
	checking bool // a check of the stream is under way
	closed   bool

	mu      sync.Mutex
	bodies  map[liveKey]liveBody
	arrived chan struct{} // closed and replaced when a body arrives
}

// pendingFrame is one of this node's frames the stream has not given back.
type pendingFrame struct {
	seq    uint64
	at     time.Time
	frame  []byte // the stored frame, or a live frame's body
	marker []byte // a live frame's marker, or nil
}

type liveKey struct {
	origin string
	seq    uint64
}

type liveBody struct {
	frame []byte
	at    time.Time
}

func newStreamLog(g *Gateway, pod string) *streamLog {
	return &streamLog{
		g: g, store: g.store(), subject: PodSubject(pod), marker: markerSubject(pod), live: liveSubject(pod),
		bodies: map[liveKey]liveBody{}, arrived: make(chan struct{}),
	}
}

func (l *streamLog) publish(m *envelope.Meta, body, buf []byte) []byte {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	m.Seq = l.g.frameSeq.Add(1)
	// Kept until seen, so a frame of its own.
	frame := envelope.AppendFrame(nil, m, body)
	l.pending = append(l.pending, pendingFrame{seq: m.Seq, at: time.Now(), frame: frame})
	if !l.holding {
		l.send(l.subject, frame)
	}
	return buf
}

func (l *streamLog) publishLive(m *envelope.Meta, body []byte) {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	m.Flags |= envelope.FlagLive
	m.Seq = l.g.frameSeq.Add(1)
	frame := envelope.AppendFrame(nil, m, body)
	marker := *m
	marker.Flags |= envelope.FlagMarker
	marker.Protocol = envelope.Span{} // no body
	pf := pendingFrame{seq: m.Seq, at: time.Now(), frame: frame, marker: envelope.AppendFrame(nil, &marker, nil)}
	l.pending = append(l.pending, pf)
	// This node's own fan-out finds the body here.
	l.keep(liveKey{m.Origin, m.Seq}, frame)
	if !l.holding {
		l.sendLive(pf)
	}
}

// sendLive publishes a live frame: its body on the live subject first,
// then its marker, on the same connection (NATS keeps one connection's
// order), so that the body normally reaches the other nodes before the
// marker comes back from the stream.
func (l *streamLog) sendLive(pf pendingFrame) {
	l.g.publish(l.live, pf.frame)
	l.send(l.marker, pf.marker)
}

func (l *streamLog) send(subject string, frame []byte) {
	if err := l.store.Publish(subject, frame); err != nil {
		l.g.log.Error("publish failed", "subject", subject, "err", err)
	}
}

func (l *streamLog) publishEvent(frame []byte, id string) {
	if err := l.store.PublishOnce(l.subject, frame, id); err != nil {
		l.g.log.Error("publish failed", "subject", l.subject, "err", err)
	}
}

// seen is called by the fan-out with each of this node's frames that came
// back from the stream: it and the ones before it are no longer pending.
// One before it that is still pending did not come back in its place: the
// stream discarded it before this node's follower read it, or never took
// it while it took later ones. It is republished with a new number, so
// that it is delivered late rather than lost.
func (l *streamLog) seen(seq uint64) {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	n := 0
	var late []pendingFrame
	for n < len(l.pending) && l.pending[n].seq <= seq {
		if l.pending[n].seq < seq {
			late = append(late, l.pending[n])
		}
		n++
	}
	if n > 0 {
		clear(l.pending[:n])
		l.pending = l.pending[n:]
		if len(l.pending) == 0 {
			l.pending = nil // give the array back
		}
	}
	for _, pf := range late {
		l.republishLate(pf)
	}
}

// republishLate publishes again, as this node's newest, a frame that did
// not come back in its place. Call it with pubMu held.
func (l *streamLog) republishLate(pf pendingFrame) {
	var m envelope.Meta
	body, err := envelope.DecodeFrame(pf.frame, &m)
	if err != nil {
		return // the node's own frame: cannot happen
	}
	old := m.Seq
	m.Seq = l.g.frameSeq.Add(1)
	l.g.metrics.historyLate.Inc()
	l.g.log.Warn("a frame did not come back from the history stream in its place; republished, to be delivered late",
		"subject", l.subject, "seq", old, "now", m.Seq)
	next := pendingFrame{seq: m.Seq, at: time.Now(), frame: envelope.AppendFrame(nil, &m, body)}
	if pf.marker != nil {
		marker := m
		marker.Flags |= envelope.FlagMarker
		marker.Protocol = envelope.Span{}
		next.marker = envelope.AppendFrame(nil, &marker, nil)
		l.mu.Lock()
		delete(l.bodies, liveKey{l.g.nodeID, old})
		l.mu.Unlock()
		l.keep(liveKey{l.g.nodeID, m.Seq}, next.frame)
	}
	l.pending = append(l.pending, next)
	if l.holding {
		return
	}
	if next.marker != nil {
		l.sendLive(next)
	} else {
		l.send(l.subject, next.frame)
	}
}

// check, called every second by the janitor, asks the stream whether it
// takes frames when one has stayed unseen for holdAfter, and holds the
// log when it does not.
func (l *streamLog) check(now time.Time) {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	if l.holding || l.checking || l.closed || len(l.pending) == 0 {
		return
	}
	age := now.Sub(l.pending[0].at)
	if age < holdAfter {
		return
	}
	l.checking = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := l.store.Ready(ctx)
		cancel()
		l.pubMu.Lock()
		defer l.pubMu.Unlock()
		l.checking = false
		if l.closed || (err == nil && age < republishAfter) {
			return // the stream takes frames: the follower is only behind
		}
		l.holding = true
		l.g.metrics.historyHolds.Inc()
		l.g.log.Warn("the history stream has not taken this node's frames; holding them until it does", "subject", l.subject, "pending", len(l.pending), "unseen_for", age.Round(time.Millisecond).String())
		go l.recover()
	}()
}

// holding reports whether the log holds its frames.
func (l *streamLog) isHolding() bool {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	return l.holding
}

// recover waits until the stream answers, then republishes every frame
// still unseen, in order, and stops holding.
func (l *streamLog) recover() {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := l.store.Ready(ctx)
		cancel()
		l.pubMu.Lock()
		if l.closed {
			l.pubMu.Unlock()
			return
		}
		if err == nil {
			for _, pf := range l.pending {
				if pf.marker != nil {
					l.sendLive(pf)
				} else {
					l.send(l.subject, pf.frame)
				}
			}
			now := time.Now()
			for i := range l.pending {
				l.pending[i].at = now
			}
			l.holding = false
			l.g.log.Warn("the history stream answers again; republished this node's unseen frames", "subject", l.subject, "frames", len(l.pending))
			l.pubMu.Unlock()
			return
		}
		l.pubMu.Unlock()
		time.Sleep(wait)
	}
}

func (l *streamLog) follow(fn func(seq uint64, at int64, frame []byte, more bool)) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The live subject first: a live frame whose marker comes after upTo
	// is then one whose body this node receives.
	sub, err := l.g.nc.Subscribe(l.live, l.onBody)
	if err != nil {
		return 0, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return 0, err
	}
	l.liveSub = sub
	upTo, err := l.store.LastSeq(ctx, l.subject, l.marker)
	if err != nil {
		_ = sub.Unsubscribe()
		return 0, err
	}
	var scratch envelope.Meta
	f, err := l.store.Follow(ctx, []string{l.subject, l.marker}, 0, func(m history.Msg, pending uint64) {
		frame := m.Data
		if len(frame) > 2 && frame[2]&envelope.FlagMarker != 0 {
			if _, err := envelope.DecodeFrame(frame, &scratch); err == nil {
				if body := l.take(liveKey{scratch.Origin, scratch.Seq}); body != nil {
					frame = body
				}
			}
		}
		fn(m.Seq, m.Time, frame, pending > 0)
	}, func(err error) {
		l.g.log.Warn("following the pod's history", "subject", l.subject, "err", err)
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return 0, err
	}
	l.follower = f
	return upTo, nil
}

// onBody keeps another node's live frame until its marker comes.
func (l *streamLog) onBody(m *nats.Msg) {
	var meta envelope.Meta
	if _, err := envelope.DecodeFrame(m.Data, &meta); err != nil || meta.Origin == l.g.nodeID {
		return // this node's own are kept when published
	}
	l.keep(liveKey{meta.Origin, meta.Seq}, m.Data)
}

func (l *streamLog) keep(k liveKey, frame []byte) {
	l.mu.Lock()
	l.bodies[k] = liveBody{frame: frame, at: time.Now()}
	close(l.arrived)
	l.arrived = make(chan struct{})
	l.mu.Unlock()
}

// take returns the body of the live frame k, or nil. Another node's is
// waited for once the pod is live; this node's own is there already, or
// was published before this pod was opened here.
func (l *streamLog) take(k liveKey) []byte {
	var timer *time.Timer
	for {
		l.mu.Lock()
		if b, ok := l.bodies[k]; ok {
			delete(l.bodies, k)
			l.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return b.frame
		}
		arrived := l.arrived
		l.mu.Unlock()
		if !l.waiting.Load() || k.origin == l.g.nodeID {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(liveWait)
			defer timer.Stop()
		}
		select {
		case <-arrived:
		case <-timer.C:
			l.g.log.Warn("a live frame's body never came; it is not delivered", "subject", l.live, "origin", k.origin)
			return nil
		}
	}
}

// sweep drops bodies whose markers never came.
func (l *streamLog) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.bodies {
		if now.Sub(b.at) > liveKeep {
			delete(l.bodies, k)
		}
	}
}

func (l *streamLog) close() {
	l.pubMu.Lock()
	l.closed = true
	l.pubMu.Unlock()
	if l.follower != nil {
		l.follower.Stop()
	}
	if l.liveSub != nil {
		_ = l.liveSub.Unsubscribe()
	}
}
