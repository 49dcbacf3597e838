package gateway

import (
	"context"
	"time"

	"github.com/mcpp/gateway/participant"
)

// A node's drain (docs/protocol.md section 7): it stops accepting
// participants and envelopes, delivers what it has queued, and closes
// every connection with 1001, so that its participants reconnect to
// another node. SIGTERM drains the node and then stops it (Shutdown); an
// operator drains it alone (POST /admin/drain), and the node then stays
// up, answering 503, its NATS server and its share of the history still
// in the cluster, until it is stopped.

// drainResult is what a drain did.
type drainResult struct {
	connections int // connections closed (1001)
	dropped     int // of them, those still open when the drain's time ended
	took        time.Duration
}

// Draining reports whether the node has stopped accepting (a drain or a
// shutdown under way, or over): a readiness probe should say it is not
// ready, so that a load balancer sends nobody to it.
func (g *Gateway) Draining() bool { return !g.accepting.Load() }

// drain drains the node unless a drain began before, in which case it
// waits for that one to end (or for ctx); first says which. Connections
// still busy when ctx ends are dropped without a close frame.
//
// While it drains, the listener still answers: /healthz, upgrades and
// publishes get 503 (a load balancer sees the node leaving, a client gets
// a reason), and an envelope a participant sends gets a retryable
// shutting_down while its connection can carry it. MCP participants leave
// as the drain begins, so that the others hear of it before their own
// connections close.
func (g *Gateway) drain(ctx context.Context) (res drainResult, first bool) {
	g.enterMu.Lock()
	was := g.accepting.Swap(false)
	g.enterMu.Unlock()
	if !was {
		select {
		case <-g.drainDone:
			return g.drained, false
		case <-ctx.Done():
			return drainResult{}, false
		}
	}
	start := time.Now()
	defer func() {
		res.took = time.Since(start)
		g.drained = res
		close(g.drainDone)
	}()
	g.node.SetDraining(true)
	g.mcp.shutdown()
	// Everything accepted so far is in the members' queues where the
	// node orders its pods; where the stream orders them, it must come
	// back first. The history receives what is still on its way.
	if err := g.nc.FlushWithContext(ctx); err != nil {
		g.log.Warn("flush before the drain", "err", err)
	}
	if w := g.node.Writer; w != nil {
		if err := w.Sync(ctx); err != nil {
			g.log.Warn("the history stream did not store everything before the drain's deadline", "err", err)
		}
	}
	for _, p := range g.allPods() {
		// A pod removed meanwhile (its last participant left) no longer
		// reads its log: what it did not see, nobody is waiting for.
		for !p.Drained() && !p.Dead() && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	var all []*participant.Participant
	for _, p := range g.allPods() {
		all = append(all, p.Members()...)
	}
	for _, r := range all {
		goAway(r)
	}
	for _, r := range all {
		select {
		case <-r.Done():
		case <-ctx.Done():
			r.Kill()
			res.dropped++
		}
	}
	res.connections = len(all)
	done := make(chan struct{})
	go func() { g.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return res, true
}
