package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// runNATS performs the load against nats-server (`--peer nats`) over
// nats.go's WebSocket transport: the same subscribers, publishers, sizes,
// window or rate and timing as run, and the same bench envelope, published
// as a message's payload on one subject that every subscriber subscribes
// to. Nothing is filtered and nothing is batched on request: NATS coalesces
// whatever is pending for a connection into one WebSocket message by
// itself (and the publisher's client does the same with its writes).
//
// A NATS subscriber receives the envelope exactly as published, --size
// bytes, where a gateway subscriber receives it with the fields the gateway
// fills (protocol, id, ts, from): about a hundred bytes more.
func (l Load) runNATS(ctx context.Context) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		measuring atomic.Bool
		hist      = newHistogram()
		credits   = l.newCredits()
		subject   = l.Pod
		counts    = make([]*counters, l.Subscribers)
		conns     []*nats.Conn
		subs      []*nats.Subscription
		cut       atomic.Int64 // subscribers the server dropped
	)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for i := range counts {
		c := &counters{}
		counts[i] = c
		nc, err := nats.Connect(l.URL, nats.Name(fmt.Sprintf("sub-%d", i)),
			nats.SetCustomDialer(frameDialer{messages: &c.messages}), nats.Timeout(20*time.Second),
			// A subscriber the server cuts (a slow consumer) stays cut,
			// as at the gateway, and is counted.
			nats.NoReconnect(), nats.NoCallbacksAfterClientClose(),
			nats.DisconnectErrHandler(func(*nats.Conn, error) {
				if ctx.Err() == nil {
					cut.Add(1)
				}
			}))
		if err != nil {
			return Result{}, fmt.Errorf("subscriber %d: %w", i, err)
		}
		conns = append(conns, nc)
		tracker := i == 0
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			if stamped(m.Data, time.Now().UnixNano(), &measuring, hist) {
				c.received.Add(1)
				if tracker {
					giveBack(credits, 1)
				}
			}
		})
		if err == nil {
			subs = append(subs, sub)
			// The server has the subscription once it answers a ping
			// sent after it, so no envelope is published before.
			err = nc.Flush()
		}
		if err != nil {
			return Result{}, fmt.Errorf("subscriber %d: %w", i, err)
		}
	}
	pubs := make([]*nats.Conn, l.Publishers)
	for i := range pubs {
		nc, err := nats.Connect(l.URL, nats.Name(fmt.Sprintf("pub-%d", i)), nats.Timeout(20*time.Second), nats.NoReconnect())
		if err != nil {
			return Result{}, fmt.Errorf("publisher %d: %w", i, err)
		}
		conns = append(conns, nc)
		pubs[i] = nc
	}
	pubErr := make(chan error, len(pubs))
	for i, nc := range pubs {
		go func() { pubErr <- l.publishNATS(ctx, nc, subject, i, credits) }()
	}
	r, err := l.measure(counts, &measuring, pubErr)
	cancel()
	r.Latency = hist
	r.Cut = cut.Load()
	for _, s := range subs {
		// Messages the client dropped because its callback fell behind
		// (nats.go's pending limits); a cut subscriber's no longer says.
		if d, err := s.Dropped(); err == nil {
			r.Dropped += int64(d)
		}
	}
	return r, err
}

// publishNATS is publish over NATS: the same envelopes, paced the same way.
func (l Load) publishNATS(ctx context.Context, nc *nats.Conn, subject string, idx int, credits chan struct{}) error {
	var buf []byte
	p := l.newPacer(credits)
	for seq := 0; p.wait(ctx); seq++ {
		buf = l.envelope(buf[:0], seq)
		// Publish copies buf into the client's write buffer, which its
		// flusher sends as soon as it is free: the envelope is in flight
		// from here, as the gateway's is once written.
		if err := nc.Publish(subject, buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("publisher %d: %w", idx, err)
		}
	}
	return nil
}
