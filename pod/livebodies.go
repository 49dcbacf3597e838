package pod

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Where the stream orders the pods (OrderStream), a live frame's body
// (presence, an ephemeral envelope) travels outside the stream, on the
// pod's live subject, at most once: a node that was not subscribed to the
// pod yet when it was published (it opened the pod a moment later), or
// whose dispatcher was behind by a whole queue, never receives it, and
// finds only its marker in the stream. So the node that accepted the
// frame keeps its body (liveBodies) until every node following the
// stream has had time to reach its marker, and answers a node that asks
// for it on its bodies subject (bodiesSubject). The node that lacks a
// body asks when its marker has waited liveWait (streamLog.ask), and
// delivers it late, in its place.

// liveRetain is how long a node keeps the body of a live frame of its own
// once the stream has stored its marker: another node whose follower is
// further behind than behindAfter loses the pod's order anyway.
const liveRetain = behindAfter

// liveRetainBytes bounds the bodies a node keeps for others, all pods
// together: past it the oldest go first, even unstored (a node that asks
// for one of them then counts it lost).
const liveRetainBytes = 64 << 20

// liveAskWait bounds how long a node waits for the origins' answers; the
// pod's later frames wait behind the marker meanwhile. liveAskRetry is
// how often it asks again while nobody answers the subject (a route
// forming again, or the node is gone).
const (
	liveAskWait  = 2 * time.Second
	liveAskRetry = 100 * time.Millisecond
)

// liveBodies are the bodies of the live frames this node accepted, by
// their Seq (envelope.Meta.Seq: one counter for all the node's pods), in
// the order they were accepted.
type liveBodies struct {
	// settled tells whether the history writer stored what was appended
	// up to a mark (history.Writer.Settled).
	settled func(mark uint64) bool

	mu    sync.Mutex
	bySeq map[uint64][]byte
	order []keptBody // oldest first
	bytes int64
	// seen is how many of order were seen stored: the writer stores in
	// order, so they are the first ones.
	seen int
}

type keptBody struct {
	seq    uint64
	mark   uint64    // the writer's mark once its marker was appended (unmarked before)
	stored time.Time // when the writer was first seen to have stored the marker
}

// unmarked is the mark of a body whose marker is not appended yet.
const unmarked = ^uint64(0)

func newLiveBodies(settled func(uint64) bool) *liveBodies {
	return &liveBodies{settled: settled, bySeq: map[uint64][]byte{}}
}

// keep keeps frame, the frame of this node's live frame seq, before its
// marker is appended (appended says when it is): the marker cannot come
// back before the body is here.
func (s *liveBodies) keep(seq uint64, frame []byte, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bySeq[seq] = frame
	s.order = append(s.order, keptBody{seq: seq, mark: unmarked})
	s.bytes += int64(len(frame))
	s.evictOld(now)
}

// appended records that the marker of seq was handed to the writer, whose
// Mark was then mark: once the writer has stored up to it, the marker is
// in the stream.
func (s *liveBodies) appended(seq, mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.order) - 1; i >= 0; i-- {
		if s.order[i].seq == seq {
			s.order[i].mark = mark
			return
		}
	}
}

// get is the body of seq, if it is still kept.
func (s *liveBodies) get(seq uint64) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bySeq[seq]
}

// evict forgets what no node needs any more (evictOld).
func (s *liveBodies) evict(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictOld(now)
}

// evictOld forgets the bodies no node needs any more: those whose
// markers the stream stored liveRetain ago, and the oldest past
// liveRetainBytes. Call it with liveBodies.mu held.
func (s *liveBodies) evictOld(now time.Time) {
	for s.seen < len(s.order) {
		k := &s.order[s.seen]
		if k.mark == unmarked || !s.settled(k.mark) {
			break
		}
		k.stored = now
		s.seen++
	}
	n := 0
	for n < len(s.order) {
		k := &s.order[n]
		if s.bytes <= liveRetainBytes && (n >= s.seen || now.Sub(k.stored) < liveRetain) {
			break
		}
		s.bytes -= int64(len(s.bySeq[k.seq]))
		delete(s.bySeq, k.seq)
		n++
	}
	if n > 0 {
		clear(s.order[:n])
		s.order = s.order[n:]
		s.seen = max(0, s.seen-n)
		if len(s.order) == 0 {
			s.order = nil
		}
	}
}

// answerBodies answers the other nodes' requests for this node's bodies:
// the frame, or nothing when it is no longer kept.
func (n *Node) answerBodies() error {
	_, err := n.Broker.Subscribe(bodiesSubject(n.ID), func(m BrokerMsg) {
		if m.Reply == "" {
			return
		}
		var body []byte
		if seq, err := strconv.ParseUint(string(m.Data), 10, 64); err == nil {
			body = n.bodies.get(seq)
		}
		if err := n.Broker.Publish(m.Reply, body); err != nil {
			n.Log.Warn("answering for a live frame's body", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", bodiesSubject(n.ID), err)
	}
	return nil // until the broker closes
}

// errBodyGone is the answer of an origin that no longer keeps a body.
var errBodyGone = errors.New("the gateway node that accepted it no longer keeps it")

// askBody asks origin for the body of its live frame seq, until ctx
// ends.
func (n *Node) askBody(ctx context.Context, origin string, seq uint64) ([]byte, error) {
	for {
		answer, err := n.Broker.Request(ctx, bodiesSubject(origin), strconv.AppendUint(nil, seq, 10))
		switch {
		case err == nil && len(answer) == 0:
			return nil, errBodyGone
		case err == nil:
			var m envelope.Meta
			if _, err := envelope.DecodeFrame(answer, &m); err != nil || m.Origin != origin || m.Seq != seq {
				return nil, fmt.Errorf("the gateway node that accepted it answered with another frame (%v)", err)
			}
			return answer, nil
		case errors.Is(err, ErrNoResponders):
			select {
			case <-ctx.Done():
				return nil, errors.New("the gateway node that accepted it is gone")
			case <-time.After(liveAskRetry):
			}
		default:
			return nil, fmt.Errorf("the gateway node that accepted it did not answer within %v: %w", liveAskWait, err)
		}
	}
}
