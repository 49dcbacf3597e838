package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

var timeNow = time.Now

// readBuffers are reused across messages and connections: NATS copies a
// frame when it is published, so a read buffer is free again as soon as
// its envelope is handled, and an idle connection holds none.
var readBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ingress is the state of handling one message. It is pooled rather than
// kept per connection, so that an idle connection holds none of it.
type ingress struct {
	g       *Gateway
	pod     *Pod
	from    *sender
	buckets *limits.Buckets
	env     envelope.Envelope
	meta    envelope.Meta
	req     contexts.Request
	acc     contexts.Accepted
	frame   []byte
}

var ingresses = sync.Pool{New: func() any { return new(ingress) }}

// release returns in to the pool, dropping what it points to.
func (in *ingress) release() {
	in.g, in.pod, in.from, in.buckets = nil, nil, nil, nil
	in.env.Reset()
	in.meta.Reset()
	in.req = contexts.Request{}
	clear(in.acc.Ancestors)
	clear(in.acc.Concluded)
	in.acc = contexts.Accepted{Ancestors: in.acc.Ancestors[:0], Concluded: in.acc.Concluded[:0]}
	if cap(in.frame) > 64<<10 {
		in.frame = nil
	}
	ingresses.Put(in)
}

// sender is who an envelope comes from: a participant's connection, or a tool
// publishing over HTTP (docs/protocol.md section 6), whose answers are
// collected for the HTTP answer instead of being sent.
type sender struct {
	id       string
	caps     participant.Capabilities
	protocol string
	conn     *participant.Participant // nil over HTTP
	results  []wire.PublishResult     // over HTTP, one per envelope
}

// filter is the sender's filter: its connection's, or the default one.
func (s *sender) filter() *filter.Filter {
	if s.conn != nil {
		return s.conn.Filter()
	}
	return filter.Default()
}

// readLoop reads the participant's messages until its connection ends.
func (g *Gateway) readLoop(pod *Pod, p *participant.Participant, buckets *limits.Buckets) {
	ctx := context.Background()
	conn := p.Conn()
	from := &sender{id: p.ID, caps: p.Capabilities, protocol: p.Protocol, conn: p}
	for {
		typ, r, err := conn.Reader(ctx)
		if err != nil {
			return
		}
		buf := readBuffers.Get().(*bytes.Buffer)
		buf.Reset()
		_, err = buf.ReadFrom(r)
		if err == nil {
			in := ingresses.Get().(*ingress)
			in.g, in.pod, in.from, in.buckets = g, pod, from, buckets
			in.handle(typ, buf.Bytes())
			in.release()
			pod.throttle()
		}
		if buf.Cap() <= 64<<10 {
			readBuffers.Put(buf)
		}
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				p.Kill()
			}
			return
		}
	}
}

// handle checks one message and publishes it, or answers system/error.
// docs/protocol.md section 5: the first broken rule in the table's order is
// reported.
func (in *ingress) handle(typ websocket.MessageType, data []byte) {
	g, p := in.g, in.from
	if g.draining.Load() {
		// Shutting down: nothing more is accepted, and the sender is told
		// so while its connection can still carry it.
		var e envelope.Envelope
		_ = e.Parse(data)
		in.refuse(envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down; the envelope was not accepted: send it again to another gateway or later"), e.ID)
		return
	}
	// Over the node's share of the history in flight, the sender waits
	// here, before anything of its envelope is taken.
	if n := g.flight.acquire(int64(len(data))); n != 0 {
		defer g.flight.release(n)
	}
	now := timeNow()
	// Every message takes a token, refused ones too, so that a flood of
	// bad input is limited like any other; the refusal reported is still
	// the first rule broken.
	var rateErr *envelope.Error
	if ok, d := limits.Take(in.buckets.Send, now); !ok {
		rateErr = limits.RateError(wire.CodeRateLimited, d, "over your rate of %g envelopes a second (burst %d)", g.cfg.Rate, g.cfg.Burst)
	}
	if typ != websocket.MessageText {
		in.refuse(envelope.Errorf(wire.CodeInvalidJSON, "binary messages are not envelopes; send JSON as text"), "")
		return
	}
	env := &in.env
	if e := env.Parse(data); e != nil {
		in.refuse(e, env.ID)
		return
	}
	switch {
	case env.HasFrom && env.From != p.id:
		in.refuse(envelope.Errorf(wire.CodeAuthViolation, "from must be your participant id %q", p.id), env.ID)
		return
	case env.IsSystem():
		in.refuse(envelope.Errorf(wire.CodeReservedKind, "system/* kinds are the gateway's"), env.ID)
		return
	case env.IsGatewayRequest():
		if len(data) > g.cfg.MaxMessageBytes {
			in.refuse(tooLarge(len(data), g.cfg.MaxMessageBytes), env.ID)
		} else {
			// A payload that does not fit the request comes before
			// rate_limited in the table; handleRequest orders the rest.
			in.handleRequest(rateErr)
		}
		return
	case !p.caps.Allows(env.Kind):
		e := envelope.Errorf(wire.CodeCapabilityViolation, "no capability of yours matches kind %q", env.Kind)
		e.AttemptedKind, e.YourCapabilities = env.Kind, p.caps
		in.refuse(e, env.ID)
		return
	case len(data) > g.cfg.MaxMessageBytes:
		in.refuse(tooLarge(len(data), g.cfg.MaxMessageBytes), env.ID)
		return
	}

	m := &in.meta
	m.Reset()
	m.Kind, m.Origin, m.From, m.To = envelope.FrameEnvelope, g.nodeID, p.id, append(m.To, env.To...)
	if g.conclusionKinds[env.Kind] {
		m.Flags |= envelope.FlagConclusion
	}
	switch env.Mode {
	case envelope.ModeTransient:
		m.Flags |= envelope.FlagTransient
	case envelope.ModeEphemeral:
		m.Flags |= envelope.FlagLive
	}
	m.Consumes = append(m.Consumes, env.Consumes...)
	var c envelope.Context
	if env.Context != nil {
		var e *envelope.Error
		if c, e = envelope.ParseContext(env.Context, g.cfg.MaxContextBytes); e != nil {
			in.refuse(e, env.ID)
			return
		}
	}
	sentID := env.ID // Fill may generate one the sender never saw
	dupErr, reserved := in.reserve(sentID, env.Mode)
	out, proto := env.Fill(p.id, now)
	m.Protocol, m.ID = proto, env.ID
	if env.Context == nil {
		e := dupErr
		if e == nil {
			e = rateErr
		}
		if e != nil {
			in.unreserve(sentID, reserved)
			in.refuse(e, sentID)
			return
		}
		in.publish(out)
		return
	}
	in.req = contexts.Request{Context: c, Kind: env.Kind, Sender: p.id, EnvelopeID: env.ID, Size: len(out), Now: now,
		Duplicate: dupErr, SenderRate: rateErr, Create: in.buckets.Create}
	if e := in.pod.Registry.Accept(&in.req, &in.acc, func(acc *contexts.Accepted) {
		m.ContextID, m.ContextType, m.ContextParent = acc.Context.ID, acc.Context.Type, acc.Context.Parent
		if acc.Context.Path {
			m.Flags |= envelope.FlagPath
		}
		m.Ancestors = append(m.Ancestors, acc.Ancestors...)
		in.publish(out)
		if len(acc.Concluded) > 0 {
			in.pod.publishConclusions(acc.Concluded)
		}
	}); e != nil {
		in.unreserve(sentID, reserved)
		in.refuse(e, sentID)
	}
}

// reserve claims the envelope's id in the pod's history (docs/protocol.md
// section 8): an id the history holds, or that another envelope being
// published claimed, is duplicate_id. Ephemeral envelopes are not checked,
// and ids the gateway fills are new.
func (in *ingress) reserve(id string, mode envelope.Mode) (dup *envelope.Error, reserved bool) {
	x := in.pod.index
	if x == nil || id == "" || mode == envelope.ModeEphemeral {
		return nil, false
	}
	if !x.Reserve(id) {
		return envelope.Errorf(wire.CodeDuplicateID, "the pod's history already holds an envelope with id %q; the first one stands", id), false
	}
	return nil, true
}

// unreserve gives back an id that reserve claimed for an envelope that was
// refused after all.
func (in *ingress) unreserve(id string, reserved bool) {
	if reserved {
		in.pod.index.Release(id)
	}
}

func tooLarge(n, limit int) *envelope.Error {
	return envelope.Errorf(wire.CodeMessageTooLarge, "the message is %d bytes, over the limit of %d", n, limit)
}

func (in *ingress) publish(body []byte) {
	in.frame = in.pod.publish(&in.meta, body, in.frame)
	in.g.metrics.envelopesIn.Inc()
	if in.from.conn == nil {
		in.from.results = append(in.from.results, wire.PublishResult{ID: in.env.ID})
	}
}

// refuse answers the sender with system/error, through its send queue
// (over HTTP, in its entry of the answer).
func (in *ingress) refuse(e *envelope.Error, correlationID string) {
	in.g.metrics.errors.WithLabelValues(string(e.Code)).Inc()
	pl := e.Payload()
	if p := in.from.conn; p != nil {
		p.Answer(direct(p.ID, p.Protocol, wire.KindError, correlationID, pl))
		return
	}
	in.from.results = append(in.from.results, wire.PublishResult{ID: correlationID, Error: &pl})
}

// reply answers a gateway request.
func (in *ingress) reply(kind string, payload any) {
	if p := in.from.conn; p != nil {
		p.Answer(direct(p.ID, p.Protocol, kind, in.env.ID, payload))
		return
	}
	id := in.env.ID
	if id == "" {
		id = uuid.NewString() // as for any envelope without one (docs/protocol.md section 2)
	}
	answer, err := json.Marshal(payload)
	if err != nil {
		panic("gateway: an answer does not marshal: " + err.Error()) // a bug, never input
	}
	in.from.results = append(in.from.results, wire.PublishResult{ID: id, Answer: answer})
}
