package participant

import (
	"context"
	"time"
)

// Keeping a connection honest: the gateway's janitor calls Watch every
// second, which cuts a connection whose write has taken longer than the
// write timeout and pings one that has been quiet, cutting it when the
// ping is not answered in time.

// Watch is called periodically (every second) by the gateway: it cuts a
// connection whose write has taken longer than WriteTimeout, and lets an
// idle writer goroutine, and an idle queue's grown ring, go. One watcher
// for all connections replaces a timer per write and a goroutine per
// connection.
func (p *Participant) Watch(now time.Time) {
	if start := p.writeStart.Load(); start != 0 && p.opts.WriteTimeout > 0 && now.UnixNano()-start > int64(p.opts.WriteTimeout) {
		p.cutFor(CutWriteTimeout)
		p.Kill()
		return
	}
	if w := p.writes.Load(); w != p.seen {
		p.seen = w
		return
	}
	// Idle since the last Watch: a ring a burst grew goes back now, not
	// after each write (a connection sent bursts would grow it again for
	// each one, three or four allocations a burst).
	p.queue.shrink()
	if p.writerOn.Load() {
		select {
		case p.park <- struct{}{}:
		default:
		}
	}
}

// defaultPingTimeout is how long a ping waits for its pong when Options
// sets no WriteTimeout.
const defaultPingTimeout = 30 * time.Second

// Ping sends a WebSocket ping in the background; a peer that does not
// answer within WriteTimeout (defaultPingTimeout without one) is dropped.
// A connection being written to is not pinged: its writes show whether it
// is alive (Watch cuts one that stalls), and the library gives a control
// frame only 5 seconds, so a ping stuck behind a slow reader's backlog
// would cut a reader that is still making progress.
func (p *Participant) Ping() {
	if p.cut.Load() || p.writerOn.Load() || p.queue.Len() > 0 || !p.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.pinging.Store(false)
		timeout := p.opts.WriteTimeout
		if timeout <= 0 {
			timeout = defaultPingTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.conn.Ping(ctx); err != nil {
			select {
			case <-p.done:
			default:
				p.cutFor(CutPingTimeout)
				p.Kill()
			}
		}
	}()
}
