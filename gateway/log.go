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
type podLog interface {
	// publish sends the frame of an accepted envelope.
	publish(frame []byte)
	// publishEvent sends a system/context event's frame. id names the
	// conclusion, so that a stream keeps one event however many nodes
	// publish it.
	publishEvent(frame []byte, id string)
	// publishLive sends a frame that history must not keep: presence, or
	// an ephemeral envelope.
	publishLive(m *envelope.Meta, body []byte)
	// follow hands fn every frame of the pod, in order, from the oldest
	// its history holds (seq and at are 0 without history). The frames up
	// to upTo are the pod's past (0: it has none).
	follow(fn func(seq uint64, at int64, frame []byte)) (upTo uint64, err error)
	close()
}

// coreLog is a pod's core NATS subject: what is published reaches every
// node's subscription in the order NATS routes it, and nothing is kept.
type coreLog struct {
	g       *Gateway
	subject string
	sub     *nats.Subscription
}

func (l *coreLog) publish(frame []byte)                { l.g.publish(l.subject, frame) }
func (l *coreLog) publishEvent(frame []byte, _ string) { l.g.publish(l.subject, frame) }

func (l *coreLog) publishLive(m *envelope.Meta, body []byte) {
	l.g.publish(l.subject, envelope.AppendFrame(nil, m, body))
}

func (l *coreLog) follow(fn func(seq uint64, at int64, frame []byte)) (uint64, error) {
	sub, err := l.g.nc.Subscribe(l.subject, func(m *nats.Msg) { fn(0, 0, m.Data) })
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

// streamLog is a pod's subjects in the history stream. Stored frames go
// into the stream and come back through an ordered consumer. A live frame
// (presence, an ephemeral envelope) never goes into the stream: its body
// is published on the pod's live subject, and a marker with its header and
// no body takes its place in the stream, so that it is delivered in the
// pod's order like every other frame and history holds nothing of it but
// its place.
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

	mu      sync.Mutex
	bodies  map[liveKey]liveBody
	arrived chan struct{} // closed and replaced when a body arrives
}

type liveKey struct {
	origin string
	key    uint64
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

func (l *streamLog) publish(frame []byte) {
	if err := l.store.Publish(l.subject, frame); err != nil {
		l.g.log.Error("publish failed", "subject", l.subject, "err", err)
	}
}

func (l *streamLog) publishEvent(frame []byte, id string) {
	if err := l.store.PublishOnce(l.subject, frame, id); err != nil {
		l.g.log.Error("publish failed", "subject", l.subject, "err", err)
	}
}

func (l *streamLog) publishLive(m *envelope.Meta, body []byte) {
	m.Flags |= envelope.FlagLive
	m.Key = l.g.liveKeys.Add(1)
	frame := envelope.AppendFrame(nil, m, body)
	// This node's own fan-out finds the body here; the other nodes get it
	// on the live subject, published before the marker on the same
	// connection (NATS keeps one connection's order), so it normally
	// reaches them before the marker comes back from the stream.
	l.keep(liveKey{m.Origin, m.Key}, frame)
	l.g.publish(l.live, frame)
	marker := *m
	marker.Flags |= envelope.FlagMarker
	marker.Protocol = envelope.Span{} // no body
	if err := l.store.Publish(l.marker, envelope.AppendFrame(nil, &marker, nil)); err != nil {
		l.g.log.Error("publish failed", "subject", l.marker, "err", err)
	}
}

func (l *streamLog) follow(fn func(seq uint64, at int64, frame []byte)) (uint64, error) {
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
	f, err := l.store.Follow(ctx, []string{l.subject, l.marker}, 0, func(m history.Msg, _ uint64) {
		frame := m.Data
		if len(frame) > 2 && frame[2]&envelope.FlagMarker != 0 {
			if _, err := envelope.DecodeFrame(frame, &scratch); err == nil {
				if body := l.take(liveKey{scratch.Origin, scratch.Key}); body != nil {
					frame = body
				}
			}
		}
		fn(m.Seq, m.Time, frame)
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
	l.keep(liveKey{meta.Origin, meta.Key}, m.Data)
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
	if l.follower != nil {
		l.follower.Stop()
	}
	if l.liveSub != nil {
		_ = l.liveSub.Unsubscribe()
	}
}
