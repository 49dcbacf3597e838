package bridge

import (
	"context"
	"errors"
	"time"
)

// errStopping ends the session of a bridge that stops.
var errStopping = errors.New("mcpp bridge is stopping")

// supervise runs the server, and runs it again each time it stops, after
// a wait that grows while it keeps failing (backoff.go), until ctx ends.
// While it is down, b.current is nil, and every request is answered at
// once with a server_down error (requests.go); the requests in flight
// when it stops are answered with that error too.
func (b *Bridge) supervise(ctx context.Context) {
	bo := newBackoff(b.cfg.MinRestartDelay, b.cfg.MaxRestartDelay)
	for {
		started := time.Now()
		s, err := b.startSession(ctx)
		switch {
		case ctx.Err() != nil:
			if s != nil {
				s.close()
			}
			return
		case err != nil:
			b.cfg.Logf("the MCP server did not start: %v", err)
		default:
			b.current.Store(s)
			b.resubscribe(s)
			b.cfg.Logf("the MCP server is up (%s)", s.describe)
			select {
			case <-s.done:
			case <-ctx.Done():
				s.end(errStopping)
			}
			b.current.CompareAndSwap(s, nil)
			b.failCalls(s)
			s.close()
			if ctx.Err() != nil {
				return
			}
			b.cfg.Logf("the MCP server stopped: %v", s.err)
			if time.Since(started) >= stableAfter {
				bo.reset()
			}
		}
		d := bo.delay()
		b.cfg.Logf("starting the MCP server again in %v", d.Round(time.Millisecond))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
}
