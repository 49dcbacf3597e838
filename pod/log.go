package pod

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
)

// podLog is where a pod's order comes from and how its frames reach the
// other nodes and the history (doc.go). There are three, one for each
// Ordering of the node:
//
//   - localLog (OrderLocal): the node orders the pod itself. What it
//     accepts is delivered at once and written behind into the history.
//   - streamLog (OrderStream, log_stream.go): the history stream orders
//     the pod. What the node accepts goes into the stream, and is
//     delivered when the node's follower of the stream brings it back, as
//     every node's is.
//   - coreLog (OrderCore): no history; each node delivers what it accepts
//     at once, and what the others accept as NATS brings it.
type podLog interface {
	// open reads the pod's past (applyPast) and starts following what the
	// other nodes publish (fromLog).
	open(ctx context.Context) error
	// here reports whether the node orders the pod: what it accepts is
	// delivered at once (commit), not when the log hands it back.
	here() bool
	// publish sends a frame this node accepted; entry is its index entry
	// when the node orders the pod with history. Call it with Pod.mu held.
	publish(m *envelope.Meta, frame []byte, entry *history.Entry)
	// publishEvent sends a context's conclusion event, which several nodes
	// may publish for one conclusion: id names it, and the stream keeps
	// the first. Call it with Pod.mu held.
	publishEvent(frame []byte, entry *history.Entry, id string)
	// tick is the janitor's, every second (sweep: every ten): it forgets
	// what waited too long for what will not come, and looks for what
	// should have come.
	tick(now time.Time, sweep bool)
	close()
}

func newLog(p *Pod) podLog {
	switch p.node.Ordering {
	case OrderStream:
		return &streamLog{p: p, bodies: map[liveKey]liveBody{}, gone: map[liveKey]lostBody{}}
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
	return p.node.History.Scan(ctx, p.subjects(), 1, func(_ string, m history.StoredMsg) error {
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
		p.node.Writer.AppendMarker(p.subject, markerSubject(p.Name), markerOf(m))
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
	sub *dispatchSub
}

func (l *coreLog) here() bool { return true }

func (l *coreLog) open(context.Context) error {
	p := l.p
	sub, err := p.node.dispatch.subscribe(p.Name, p.subject, func(m BrokerMsg, burst *Burst) {
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
	if err := p.node.Broker.Publish(p.subject, frame); err != nil {
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
