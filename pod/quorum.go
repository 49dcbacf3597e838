package pod

import (
	"context"
	"time"
)

// Where the history stream orders the pods (OrderStream), a node can
// store and deliver only while it reaches a quorum of the stream's
// replicas: a node cut off from the others (a partition), or one whose
// stream has no leader (a failover under way), stores nothing, and
// delivers nothing new. Such a node must neither take envelopes it may
// never store (it refuses them with the retryable no_quorum: ingress.go)
// nor keep members it does not deliver to (after lostAfter without a
// quorum its pods lose their order, and their connections are closed with
// 4503 to resume elsewhere: checkFollower), and it refuses new members
// meanwhile (the gateway's upgrades, 503).
//
// The node knows it has no quorum when its history writer holds (the
// stream did not acknowledge what it sent), when what it sent has waited
// longer than writesStuck to be stored (a cut-off leader answers the
// writer's questions for a while, and stores nothing), or when the stream
// does not answer its probes: every quorumProbe it asks the stream
// whether it has a leader, so that an idle node, which sends nothing,
// finds out too.

// quorumProbe is how often a node asks whether its stream answers, and
// quorumProbeWait how long it waits for the answer. quorumProbesFailed
// probes in a row must fail: a stream slow to answer a busy node is not
// lost. The node is without quorum from the first of them.
const (
	quorumProbe        = time.Second
	quorumProbeWait    = 2 * time.Second
	quorumProbesFailed = 3
)

// NoQuorum reports whether the node cannot reach a quorum of the history
// stream now (OrderStream, once WatchQuorum started; never otherwise).
func (n *Node) NoQuorum() bool {
	if !n.watching.Load() {
		return false
	}
	return n.noQuorumSince.Load() != 0 || n.Writer.Holding() || n.Writer.StuckFor(time.Now()) > writesStuck
}

// WatchQuorum starts probing the stream (OrderStream), once the node's
// History and Writer are set: in a cluster they are set when the
// stream has formed, after Start.
func (n *Node) WatchQuorum() {
	if n.Order != OrderStream || n.History == nil || n.Writer == nil || !n.watching.CompareAndSwap(false, true) {
		return
	}
	go n.watchQuorum()
}

// writesStuck is how long the oldest message the node sent may wait for
// the stream to store it before the node takes itself for without quorum:
// the stream's acknowledgement wait (2 s) and a second.
const writesStuck = 3 * time.Second

// noQuorumFor is how long the node has been without a quorum, by its
// probes or by what it sent and the stream has not stored (0: it has
// one).
func (n *Node) noQuorumFor(now time.Time) time.Duration {
	var d time.Duration
	if since := n.noQuorumSince.Load(); since != 0 {
		d = now.Sub(time.Unix(0, since))
	}
	if n.watching.Load() {
		if s := n.Writer.StuckFor(now); s > writesStuck {
			d = max(d, s)
		}
	}
	return d
}

// watchQuorum probes the stream every quorumProbe until the node stops.
func (n *Node) watchQuorum() {
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
		asked := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), quorumProbeWait)
		err := n.History.Ready(ctx)
		cancel()
		if err == nil {
			failed = 0
		} else if failed++; failed == 1 {
			firstFailed = asked
		}
		switch {
		case err == nil && n.noQuorumSince.Load() != 0:
			lost := time.Since(time.Unix(0, n.noQuorumSince.Swap(0)))
			n.Log.Warn("the history stream answers again: this node takes envelopes and members again", "without_quorum", lost.Round(time.Millisecond).String())
		case failed == quorumProbesFailed && n.noQuorumSince.Load() == 0:
			n.noQuorumSince.Store(firstFailed.UnixNano())
			n.Log.Warn("the history stream does not answer: this node refuses envelopes (no_quorum) and new members until it does", "err", err)
		}
	}
}
