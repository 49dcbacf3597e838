package bridge

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// outboxSize is how many envelopes may wait to be sent to the pod. While
// the connection to the gateway is being restored they wait here, and
// the server's answers keep being read; past this many, reading the
// server waits too.
const outboxSize = 4096

// outbox sends the bridge's envelopes to the pod in the order they were
// made (so that a call's progress comes before its answer), one at a
// time, no faster than the gateway's rate limit allows: an envelope
// refused for its rate would leave a requester without its answer.
type outbox struct {
	c       *client.Client
	logf    func(string, ...any)
	ch      chan *wire.Envelope
	done    chan struct{}
	ctx     context.Context // ends the sending of what is left, at the stop
	cancel  context.CancelFunc
	mu      sync.Mutex
	limiter *rate.Limiter
	limits  wire.Limits

	// closeMu orders send before close: senders hold it for reading, and
	// close takes it to close ch once no send is under way.
	closeMu sync.RWMutex
	closed  bool
}

// rateMargin is the share of the gateway's rate and burst the bridge
// uses: the gateway counts when envelopes arrive, the bridge when it
// sends them, and the network between them bunches them up.
const rateMargin = 0.9

func newOutbox(c *client.Client, logf func(string, ...any)) *outbox {
	o := &outbox{c: c, logf: logf, ch: make(chan *wire.Envelope, outboxSize), done: make(chan struct{})}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	o.setLimits(c.Welcome().Limits)
	go o.run()
	return o
}

// setLimits takes the gateway's limits of the latest welcome.
func (o *outbox) setLimits(l wire.Limits) {
	lim := rate.NewLimiter(rate.Inf, 0)
	if l.Rate > 0 && l.Burst > 0 {
		lim = rate.NewLimiter(rate.Limit(l.Rate*rateMargin), max(1, int(float64(l.Burst)*rateMargin)))
	}
	o.mu.Lock()
	o.limiter, o.limits = lim, l
	o.mu.Unlock()
}

// send queues env; after close it drops it (the bridge is leaving the
// pod).
func (o *outbox) send(env *wire.Envelope) {
	o.closeMu.RLock()
	defer o.closeMu.RUnlock()
	if o.closed {
		return
	}
	select {
	case o.ch <- env:
	case <-o.ctx.Done():
	}
}

func (o *outbox) run() {
	defer close(o.done)
	for env := range o.ch {
		o.mu.Lock()
		lim, limits := o.limiter, o.limits
		o.mu.Unlock()
		if err := lim.Wait(o.ctx); err != nil {
			return
		}
		fitToLimit(env, limits.MaxMessageBytes)
		if _, err := o.c.Send(o.ctx, env); err != nil {
			if o.ctx.Err() != nil {
				return
			}
			o.logf("sending %s to %v: %v", env.Kind, env.To, err)
		}
	}
}

// close sends what is queued, for at most the context's time, and stops.
func (o *outbox) close(ctx context.Context) {
	o.closeMu.Lock()
	if !o.closed {
		o.closed = true
		close(o.ch)
	}
	o.closeMu.Unlock()
	select {
	case <-o.done:
	case <-ctx.Done():
		o.cancel()
		<-o.done
	}
	o.cancel()
}

// fitToLimit replaces the payload of an answer too large for an envelope
// (the gateway would refuse it, and the requester would wait for
// nothing) with an error saying so. A notification too large is sent as
// it is, and the gateway's refusal is logged.
func fitToLimit(env *wire.Envelope, limit int) {
	if limit <= 0 || !wire.IsMCPResponse(env.Kind) {
		return
	}
	b, err := json.Marshal(env)
	if err != nil || len(b) <= limit {
		return
	}
	var a struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(env.Payload, &a)
	env.Payload = errorAnswer(a.ID, jsonrpc.CodeInternalError, "the MCP server's answer is larger than the gateway's max_message_bytes",
		map[string]any{"reason": ReasonResponseTooLarge, "bytes": len(b), "limit": limit})
}
