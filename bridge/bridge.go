package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// Bridge is one MCP server in one pod. Make it with New and run it with
// Run.
type Bridge struct {
	cfg       Config
	calls     *inflight
	questions *questionTable          // what the server asks the requesters (questions.go)
	tasks     *taskOwners             // whose each of the server's tasks is (tasks.go)
	subs      *subscriptions          // who subscribes to the server's resources (subscriptions.go)
	numbers   atomic.Int64            // the bridge's JSON-RPC ids towards the server, never reused
	current   atomic.Pointer[session] // the server's session while it is up; nil while it is down

	// Set by Run before anything reads them.
	self string // the bridge's participant id
	out  *outbox
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Bridge, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Bridge{cfg: cfg, calls: newInflight(cfg.MaxInFlight), questions: newQuestionTable(), tasks: newTaskOwners(), subs: newSubscriptions()}, nil
}

// Run joins the pod, starts the server, and bridges them until ctx ends
// (it returns nil) or the connection to the pod ends for good (it
// returns why: another connection took the participant id, the
// participant was kicked, the gateway refuses it now). A refused join is
// Dial's error (a *client.RefusedError). Run answers the requests still
// in flight with a server_down error, stops the server and leaves the
// pod before it returns.
func (b *Bridge) Run(ctx context.Context) error {
	pc, err := b.cfg.Dial(ctx, b.joinOptions())
	if err != nil {
		return err
	}
	defer pc.Close()
	if _, err := pc.Next(ctx); err != nil { // the welcome, which Welcome() keeps
		return err
	}
	b.self = pc.ID()
	b.out = newOutbox(pc, b.cfg.Logf)
	b.cfg.Logf("in pod %s as %s", b.cfg.Client.Pod, b.self)

	serverCtx, stopServer := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		b.supervise(serverCtx)
	}()

	err = b.receive(ctx, pc)

	stopServer()
	<-supervised
	flush, cancel := context.WithTimeout(context.Background(), DefaultFlushTimeout)
	defer cancel()
	b.out.close(flush)
	return err
}

// joinOptions are Config.Client with what a bridge says when it joins.
func (b *Bridge) joinOptions() client.Options {
	opts := b.cfg.Client
	if !slices.Contains(opts.Serves, wire.ServesMCP) {
		opts.Serves = append(slices.Clip(opts.Serves), wire.ServesMCP)
	}
	if opts.Filter == nil {
		opts.Filter = &wire.Filter{Routing: wire.RoutingDirected}
	}
	report := opts.Reconnect.Report
	opts.Reconnect.Report = func(attempt int, err error) {
		if attempt == 0 {
			b.cfg.Logf("the connection to the pod was lost (%v); reconnecting", err)
		}
		if report != nil {
			report(attempt, err)
		}
	}
	return opts
}

// receive handles the pod's events until ctx ends (nil) or the client
// ends (its error).
func (b *Bridge) receive(ctx context.Context, pc *client.Client) error {
	for {
		ev, err := pc.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, client.ErrClosed) {
				return err
			}
			return fmt.Errorf("the connection to the pod ended: %w", err)
		}
		switch ev := ev.(type) {
		case *client.Message:
			b.received(ev.Envelope)
		case *client.Presence:
			if ev.Event == wire.PresenceLeave {
				b.left(ev.Participant.ID)
			}
		case *client.Reconnected:
			b.out.setLimits(ev.Welcome.Limits)
			if ev.Gap() {
				b.cfg.Logf("back in the pod; requests sent while the bridge was away may be lost (the gateway could not resume)")
			} else {
				b.cfg.Logf("back in the pod")
			}
		case *client.GatewayError:
			b.cfg.Logf("the gateway refused envelope %s: %s", ev.RefusedID(), ev.ErrorPayload.String())
			b.refusedQuestion(ev)
		}
	}
}

// nextNumber is a new JSON-RPC id towards the server.
func (b *Bridge) nextNumber() int64 { return b.numbers.Add(1) }
