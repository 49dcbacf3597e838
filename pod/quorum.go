package pod

import (
	"context"
	"strconv"
	"time"
)

// Where the history stream orders the pods (OrderStream), a node can
// store and deliver only while it reaches a quorum of the stream's
// replicas: a node cut off from the others (a partition) stores nothing,
// and delivers nothing new. Such a node must neither take envelopes it
// may never store (it refuses them with the retryable no_quorum:
// ingress.go) nor keep members it does not deliver to (after cutAfter
// cut off its pods lose their order, and their connections are closed
// with 4503 to resume elsewhere: checkFollower), and it refuses new
// members meanwhile (the gateway's upgrades, 503).
//
// How the node knows it is cut off:
//
//   - In an embedded cluster (Reach set), by its NATS server's routes:
//     with routes to fewer of the other nodes than a quorum needs, it is
//     cut off, whatever its stream says (a leader cut off from its
//     replicas goes on answering as a leader for a while, storing
//     nothing). Routes do not slow down with a busy node, so a node that
//     is merely slow is never taken for cut off.
//   - With an external NATS (Reach nil), by probing the stream: every
//     quorumProbe it asks whether the stream has a leader; quorumProbes
//     failed answers in a row (each given quorumProbeWait) and it is cut
//     off, from the first of them.
//
// Besides, while its history writer holds (the stream did not acknowledge
// what it sent: a partition, the stream's leader failing over, or a
// stream too slow for the moment), the node refuses envelopes too, but it
// keeps its members: the writer stops holding when the stream answers.

// quorumProbe is how often a node looks, and quorumProbeWait how long it
// waits for the stream's answer to a probe.
const (
	quorumProbe     = time.Second
	quorumProbeWait = 2 * time.Second
	quorumProbes    = 3
)

// NoQuorum reports whether the node cannot store in the history stream
// now (OrderStream, once WatchQuorum started; never otherwise): it is cut
// off, or its writer holds.
func (n *Node) NoQuorum() bool {
	if !n.watching.Load() {
		return false
	}
	return n.cutSince.Load() != 0 || n.Writer.Holding()
}

// WatchQuorum starts watching whether the node is cut off (OrderStream),
// once the node's History and Writer are set: in a cluster they are set
// when the stream has formed, after Start. reach is Reach's function, nil
// without an embedded cluster.
func (n *Node) WatchQuorum(reach func() (reached, needed int)) {
	if n.Ordering != OrderStream || n.History == nil || n.Writer == nil || !n.watching.CompareAndSwap(false, true) {
		return
	}
	go n.watchQuorum(reach)
}

// cutFor is how long the node has been cut off (0: it is not).
func (n *Node) cutFor(now time.Time) time.Duration {
	since := n.cutSince.Load()
	if since == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, since))
}

// watchQuorum looks every quorumProbe until the node stops.
func (n *Node) watchQuorum(reach func() (reached, needed int)) {
	t := time.NewTicker(quorumProbe)
	defer t.Stop()
	failed := 0
	var firstFailed time.Time
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		looked := time.Now()
		var err error
		if reach != nil {
			if reached, needed := reach(); reached < needed {
				err = &cutOff{reached, needed}
			}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), quorumProbeWait)
			err = n.History.Ready(ctx)
			cancel()
		}
		if err == nil {
			failed = 0
		} else if failed++; failed == 1 {
			firstFailed = looked
		}
		enough := failed >= quorumProbes || reach != nil && failed >= 1
		switch {
		case err == nil && n.cutSince.Load() != 0:
			lost := time.Since(time.Unix(0, n.cutSince.Swap(0)))
			n.Log.Warn("this node reaches a quorum again: it takes envelopes and members again", "cut_off", lost.Round(time.Millisecond).String())
		case err != nil && enough && n.cutSince.Load() == 0:
			n.cutSince.Store(firstFailed.UnixNano())
			n.Log.Warn("this node is cut off from a quorum of the history stream: it refuses envelopes (no_quorum) and new members until it is not", "err", err)
		}
	}
}

// cutOff is a node that reaches fewer other nodes than a quorum needs.
type cutOff struct{ reached, needed int }

func (e *cutOff) Error() string {
	return "this node's NATS server has routes to " + strconv.Itoa(e.reached) + " other nodes, and a quorum needs " + strconv.Itoa(e.needed)
}
