package pod

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Sender is who envelopes come from, a participant of the pod as the
// one way into it sees it: a participant's WebSocket connection, or one
// with no connection (a tool publishing over HTTP, an MCP participant).
// What it sends is answered through its reply route (Reply); the writers
// of the members it was queued for are woken at the end of a burst
// (Burst), which is its caller's, not the sender's.
type Sender struct {
	ID string
	// Caps are what a sender with no connection may send; a connection's
	// are its participant's (they change with gateway/refresh).
	Caps     *capability.Set
	Protocol string
	Conn     *participant.Participant // nil over HTTP and MCP
	// Guest is the MCP session's membership the sender acts for (nil over
	// WebSocket and HTTP): its envelopes are refused once it is no longer
	// the pod's member of its id (kicked, or replaced).
	Guest   Guest
	Buckets *limits.Buckets
	// Reply is where the answers to what it sends go: ReplyTo(Conn) for a
	// connection, a *Results over HTTP and MCP (nil for a sender that
	// only keeps the pod, Acquire, and sends nothing).
	Reply Replier
	// grants are the grants the sender holds in the pod (capability/grant),
	// looked up once.
	grants *capability.Grants
	// kicked is set, under Pod.mu, when the participant of a sender with
	// neither a connection nor a guest (a POST, between Acquire and
	// Release) is kicked: what it sends afterwards is refused.
	kicked bool
}

// caps is what the sender may send now.
func (s *Sender) caps() *capability.Set {
	if s.Conn != nil {
		return s.Conn.Caps()
	}
	return s.Caps
}

// filter is the sender's filter: its connection's, or the default one.
func (s *Sender) filter() *filter.Filter {
	if s.Conn != nil {
		return s.Conn.Filter()
	}
	return filter.Default()
}

// Outcome is what the registry recorded of an accepted envelope in a
// context: what the MCP endpoint's context tools report.
type Outcome struct {
	// Depth is the context's depth (0 in the main context).
	Depth int
	// Concluded are the contexts the envelope concluded, in event order.
	Concluded []contexts.Concluded
}

// SetDraining makes every pod of the node refuse envelopes with a
// retryable shutting_down (the gateway is shutting down), or take them
// again.
func (n *Node) SetDraining(on bool) { n.draining.Store(on) }

// ingress is the state of handling one message. It is pooled rather than
// kept per connection, so that an idle connection holds none of it.
type ingress struct {
	pod  *Pod
	from *Sender
	// burst is the caller's burst the envelope is queued in (nil: the
	// order lock's own, which ends as the lock goes).
	burst *Burst
	env   envelope.Envelope
	meta  envelope.Meta
	req   contexts.Request
	acc   contexts.Accepted
	now   time.Time
	// tokens is the accepted envelope's token estimate.
	tokens int
	// call is what an MCP envelope says of the call it is part of, prop
	// of the proposal, and fulfils the pending proposal an mcp/request
	// makes (MEW's fulfilment).
	call     callInfo
	prop     proposalInfo
	fulfils  *proposal
	correlID gjson.Result
	// refused is the code of the envelope's refusal, for its span;
	// delivered how many members here it was queued for (-1: not here,
	// or not counted), for the span too.
	refused      wire.Code
	delivered    int
	countsFanout bool
}

var ingresses = sync.Pool{New: func() any { return &ingress{delivered: -1} }}

// release returns in to the pool, dropping what it points to.
func (in *ingress) release() {
	in.pod, in.from, in.burst = nil, nil, nil
	in.env.Reset()
	in.meta.Reset()
	in.req = contexts.Request{}
	in.tokens = 0
	in.call, in.prop, in.fulfils, in.correlID, in.refused, in.delivered = callInfo{}, proposalInfo{}, nil, gjson.Result{}, "", -1
	in.countsFanout = false
	clear(in.acc.Ancestors)
	clear(in.acc.Concluded)
	in.acc = contexts.Accepted{Ancestors: in.acc.Ancestors[:0], Concluded: in.acc.Concluded[:0]}
	ingresses.Put(in)
}

// Handle checks one message of s and, when it passes, takes it into the
// pod's order; otherwise it answers system/error. Either way s.Reply is
// told. The writers of the members it is queued for are woken when b
// ends (Burst.Flush: a reader with more messages read, a POST's body
// keep one burst for them all), or, with b nil, as the order lock is let
// go. binary is a WebSocket binary message, which is never an envelope.
// data is not kept: the caller may reuse it. docs/protocol.md section 5:
// the first rule broken in the table's order is reported.
func (p *Pod) Handle(s *Sender, b *Burst, data []byte, binary bool) Outcome {
	in := ingresses.Get().(*ingress)
	in.pod, in.from, in.burst = p, s, b
	in.handle(data, binary)
	var out Outcome
	if in.acc.Context != nil {
		out.Depth = in.acc.Depth
		out.Concluded = append(out.Concluded, in.acc.Concluded...)
	}
	in.release()
	return out
}

func (in *ingress) handle(data []byte, binary bool) {
	p, s := in.pod, in.from
	n := p.node
	if n.draining.Load() {
		// Shutting down: nothing more is accepted, and the sender is told
		// so while its connection can still carry it.
		var e envelope.Envelope
		_ = e.Parse(data)
		in.refuse(envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down; the envelope was not accepted: send it again to another gateway or later"), e.ID)
		return
	}
	in.now = timeNow()
	// Every message takes a token, refused ones too, so that a flood of
	// bad input is limited like any other; the refusal reported is still
	// the first rule broken.
	var rateErr *envelope.Error
	if ok, d := limits.Take(s.Buckets.Send, in.now); !ok {
		rateErr = limits.RateError(wire.CodeRateLimited, d, "over your rate of %g envelopes a second (burst %d)", n.Config.Rate, n.Config.Burst)
	}
	if binary {
		in.refuse(envelope.Errorf(wire.CodeInvalidJSON, "binary messages are not envelopes; send JSON as text"), "")
		return
	}
	env := &in.env
	if e := env.Parse(data); e != nil {
		in.refuse(e, env.ID)
		return
	}
	if e := in.check(); e != nil {
		in.refuse(e, env.ID)
		return
	}
	if n.NoQuorum() && (!env.IsGatewayRequest() || env.Kind == wire.RequestKick || env.Kind == wire.RequestApprove) {
		// The node cannot store it: it refuses rather than accept what
		// it may never store (quorum.go). Requests that only read are
		// answered from what the node has.
		in.refuse(envelope.Errorf(wire.CodeNoQuorum, "this gateway node cannot reach a quorum of the cluster's history stream; the envelope was not accepted: send it again later or to another node"), env.ID)
		return
	}
	if env.IsGatewayRequest() {
		// A payload that does not fit the request comes before
		// rate_limited in the table; request orders the rest.
		in.request(rateErr)
		return
	}
	in.accept(rateErr)
}

// check applies the rules that need no state of the pod's, in the order
// of the table of docs/protocol.md section 5, after Parse's: the
// lifecycle of control kinds, from, the reserved kinds, one reading of
// the payload, the capabilities and the size.
func (in *ingress) check() *envelope.Error {
	env, s, cfg := &in.env, in.from, &in.pod.node.Config
	switch {
	case env.Mode != envelope.ModeDurable && controlKind(env.Kind):
		return envelope.Errorf(wire.CodeInvalidEnvelope, "%s takes no lifecycle mode: the pod's history must keep it (its state is rebuilt from the history)", env.Kind)
	case env.HasFrom && env.From != s.ID:
		return envelope.Errorf(wire.CodeAuthViolation, "from must be your participant id %q", s.ID).Ruled(audit.RuleFrom)
	case env.IsSystem():
		return envelope.Errorf(wire.CodeReservedKind, "system/* kinds are the gateway's")
	}
	if in.readsPayload() {
		if path, a, b, ambiguous := capability.Ambiguous(env.Payload); ambiguous {
			return envelope.Errorf(wire.CodeAmbiguousPayload, "%s has the keys %q and %q, which receivers may read as one (equal ignoring case, or the same up to a NUL): receivers would read different values; send one key, without NUL", path, a, b)
		}
	}
	if env.IsGatewayRequest() {
		if len(in.env.Raw) > cfg.MaxMessageBytes {
			return tooLarge(len(in.env.Raw), cfg.MaxMessageBytes)
		}
		return nil
	}
	if env.Kind == wire.KindMCPReject || env.Kind == wire.KindMCPWithdraw {
		// A decision on a proposal needs no capability of its kind: who
		// may make the proposed call rejects it, its proposer withdraws
		// it (checkProposal).
		if len(in.env.Raw) > cfg.MaxMessageBytes {
			return tooLarge(len(in.env.Raw), cfg.MaxMessageBytes)
		}
		return nil
	}
	if !in.allowed() {
		e := envelope.Errorf(wire.CodeCapabilityViolation, "no capability of yours matches kind %q", env.Kind)
		if s.caps().CoversKind(env.Kind) {
			e.Message = fmt.Sprintf("no capability of yours matches kind %q with this payload", env.Kind)
		}
		e.AttemptedKind, e.YourCapabilities, e.Rule = env.Kind, s.caps().Wire(), in.capabilityRule(env.Kind)
		return e
	}
	if len(in.env.Raw) > cfg.MaxMessageBytes {
		return tooLarge(len(in.env.Raw), cfg.MaxMessageBytes)
	}
	return nil
}

// controlKind reports whether the gateway keeps state of envelopes of
// kind that every node rebuilds from the pod's history: grants, kicks and
// proposals. They must be kept in the history.
func controlKind(kind string) bool {
	switch kind {
	case wire.KindGrant, wire.KindRevoke, wire.RequestKick, wire.KindMCPProposal, wire.KindMCPReject, wire.KindMCPWithdraw, wire.RequestApprove:
		return true
	}
	return false
}

// readsPayload reports whether the gateway reads the envelope's payload:
// it decodes it (gateway/*, capability/*), tracks it (an MCP call or
// proposal), or a payload pattern is matched against it, because no
// plain kind pattern of the sender's capabilities allows the kind. Such a
// payload must read the same to everyone (capability.Ambiguous).
func (in *ingress) readsPayload() bool {
	kind := in.env.Kind
	switch {
	case strings.HasPrefix(kind, "gateway/"), strings.HasPrefix(kind, "capability/"), strings.HasPrefix(kind, "mcp/"):
		return true
	}
	return !in.from.caps().AllowsKind(kind)
}

// accept takes an envelope that passed check, in four steps: read what
// its kind asks the gateway to read (before the order lock), fill it in,
// check it against the pod's state and commit it, both under the lock,
// in the main context or in a sub-context. Each step that refuses
// answers the sender and ends it.
func (in *ingress) accept(rateErr *envelope.Error) {
	p, s, env, m := in.pod, in.from, &in.env, &in.meta
	in.frameMeta()
	c, change, ok := in.read()
	if !ok {
		return
	}
	span := in.startAccept() // nil with tracing off
	if span != nil {
		defer in.endAccept(span, &c) // after the lock is let go
	}
	sentID := env.ID // Fill may generate one the sender never saw
	out, proto := env.Fill(s.ID, in.now)
	m.Protocol, m.ID = proto, env.ID
	// Its token estimate, for the history's budgets and the contexts'
	// figures: once, here, before the order lock (docs/protocol.md
	// section 8).
	in.tokens = estimateTokens(out)

	p.lockFor(in.burst)
	defer p.unlockFor(in.burst)
	dupErr, e := in.checkState(sentID)
	if e != nil {
		in.refuse(e, sentID)
		return
	}
	if env.Context == nil {
		in.commitMain(out, sentID, change, cmp.Or(dupErr, rateErr))
		return
	}
	in.commitInContext(out, sentID, c, change, dupErr, rateErr)
}

// frameMeta starts the frame's header from the envelope: who, to whom,
// and the flags its lifecycle and kind give it.
func (in *ingress) frameMeta() {
	n, env, m := in.pod.node, &in.env, &in.meta
	m.Reset()
	m.Kind, m.Origin, m.From, m.To = envelope.FrameEnvelope, n.ID, in.from.ID, append(m.To, env.To...)
	if in.pod.Registry.Concludes(env.Kind) {
		m.Flags |= envelope.FlagConclusion
	}
	switch env.Mode {
	case envelope.ModeTransient:
		m.Flags |= envelope.FlagTransient
	case envelope.ModeEphemeral:
		m.Flags |= envelope.FlagLive
	}
	m.Consumes = append(m.Consumes, env.Consumes...)
	if env.Kind == wire.KindMCPNotification {
		switch {
		case serverNotice(gjson.GetBytes(env.Payload, "method").String()):
			m.Flags |= envelope.FlagCall // every node's MCP hosts hear of the sender's change (notices.go)
		case len(env.To) == 1 && gjson.GetBytes(env.Raw, "correlation_id").Exists():
			m.Flags |= envelope.FlagCall // about a call (its progress): its caller's wait hears of it (aboutCall)
		}
	}
}

// read reads what the envelope's kind asks the gateway to read, none of
// which needs the pod's state: its context's syntax, an MCP call or
// proposal, a capability change. It refuses the envelope and reports
// false when one of them is malformed.
func (in *ingress) read() (c envelope.Context, change *capabilityChange, ok bool) {
	p, env, m := in.pod, &in.env, &in.meta
	n := p.node
	refuse := func(e *envelope.Error) (envelope.Context, *capabilityChange, bool) {
		in.refuse(e, env.ID)
		return envelope.Context{}, nil, false
	}
	if env.Context != nil {
		var e *envelope.Error
		if c, e = envelope.ParseContext(env.Context, n.Config.MaxContextBytes); e != nil {
			return refuse(e)
		}
	}
	if wire.IsMCPRequest(env.Kind) || wire.IsMCPResponse(env.Kind) {
		var e *envelope.Error
		if in.call, e = readCall(env.Kind, env.To, env.Payload, env.Raw, gjson.GetBytes(env.Raw, "correlation_id")); e != nil {
			return refuse(e)
		}
		if in.call.response && len(env.To) == 0 {
			// The answer goes to its requester alone: the gateway
			// addresses it when its sender did not.
			if requester := p.requesterOf(in.call.correlation); requester != "" {
				env.AddTo(requester)
				m.To = append(m.To[:0], requester)
			}
		}
		if in.call.tracked() {
			m.Flags |= envelope.FlagCall
		}
		if in.call.request {
			in.correlID = gjson.GetBytes(env.Raw, "correlation_id")
		}
	}
	switch env.Kind {
	case wire.KindMCPProposal, wire.KindMCPReject, wire.KindMCPWithdraw:
		var e *envelope.Error
		if in.prop, e = readProposal(env.Kind, env.To, env.Payload, gjson.GetBytes(env.Raw, "correlation_id")); e != nil {
			return refuse(e)
		}
		m.Flags |= envelope.FlagCall
	case wire.KindGrant, wire.KindRevoke:
		var e *envelope.Error
		if change, e = parseCapabilityChange(env.Kind, env.Payload, n.Config.MaxContextBytes); e != nil {
			return refuse(e)
		}
		if r := change.recipient(); len(env.To) > 0 && !slices.Contains(env.To, r) {
			return refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "%s: to must name the recipient %q (or be left out)", env.Kind, r))
		}
		m.Flags |= envelope.FlagCapability
	}
	return c, change, true
}

// checkState checks the envelope against the pod's state: its sender is
// still in the pod, its call answers one that is open (or opens one),
// its proposal is the pod's to make. It returns the duplicate_id error,
// if any, for the caller to rank with the context's own refusals. Call it
// with Pod.mu held.
func (in *ingress) checkState(sentID string) (dupErr, e *envelope.Error) {
	p, s, env, m := in.pod, in.from, &in.env, &in.meta
	if e := p.removedSender(s); e != nil {
		return nil, e
	}
	dupErr = p.duplicate(sentID, env.Mode)
	if in.call.tracked() {
		if e := p.checkCall(&in.call, s.ID, env.To); e != nil {
			return nil, e
		}
		if p.liveAnswer(&in.call) {
			m.Flags |= envelope.FlagLive // the answer to an ephemeral request is not stored either
		}
		if in.call.request && in.correlID.Exists() {
			in.fulfils = p.fulfils(in.correlID, env.Payload)
		}
	}
	if in.prop.kind != "" {
		if e := p.checkProposal(&in.prop, s, env.ID); e != nil {
			return nil, e
		}
	}
	return dupErr, nil
}

// commitMain commits an envelope of the main context, unless err (a
// duplicate id, then the sender's rate, in that order) or its capability
// change refuses it. Call it with Pod.mu held.
func (in *ingress) commitMain(out []byte, sentID string, change *capabilityChange, err *envelope.Error) {
	if err == nil && change != nil {
		err = in.pod.checkCapabilityChange(change, in.from, in.env.Payload, nil)
	}
	if err != nil {
		in.refuse(err, sentID)
		return
	}
	if change != nil {
		in.meta.Via = append(in.meta.Via, change.via...)
	}
	in.commit(out)
	in.accepted(change)
}

// commitInContext commits an envelope of a sub-context through the pod's
// context registry, which ranks its own refusals (depth, the context's
// limits, a concluded context) with the duplicate id and the sender's
// rate, and opens or concludes contexts as the envelope asks. Call it
// with Pod.mu held.
func (in *ingress) commitInContext(out []byte, sentID string, c envelope.Context, change *capabilityChange, dupErr, rateErr *envelope.Error) {
	p, s, env, m := in.pod, in.from, &in.env, &in.meta
	in.req = contexts.Request{Context: c, Kind: env.Kind, Sender: s.ID, EnvelopeID: env.ID, Size: len(out), Tokens: in.tokens, Now: in.now,
		Duplicate: dupErr, SenderRate: rateErr, Create: s.Buckets.Create}
	if change != nil {
		// A grant scoped by the envelope's own context: the context must
		// be open, or be opened by this envelope (it is checked again
		// below, with everything else of the context).
		if e := p.checkCapabilityChange(change, s, env.Payload, &c); e != nil {
			in.refuse(e, sentID)
			return
		}
		m.Via = append(m.Via, change.via...)
	}
	if e := p.Registry.Accept(&in.req, &in.acc, func(acc *contexts.Accepted) {
		m.ContextID, m.ContextType, m.ContextParent = acc.Context.ID, acc.Context.Type, acc.Context.Parent
		if acc.Context.Path {
			m.Flags |= envelope.FlagPath
		}
		m.Ancestors = append(m.Ancestors, acc.Ancestors...)
		in.commit(out)
		if len(acc.Concluded) > 0 {
			p.publishConclusions(acc.Concluded)
		}
	}); e != nil {
		in.refuse(e, sentID)
		return
	}
	in.accepted(change)
}

// allowed reports whether the sender may send the envelope: its own
// capabilities allow it, or a grant it holds in the pod does (one scoped
// to a context only for an envelope in that context or below it).
// gateway/kick is pod-wide by nature: only a pod-wide capability allows
// it, never one scoped to a context (docs/protocol.md section 6).
func (in *ingress) allowed() bool {
	s, env := in.from, &in.env
	if s.caps().Allows(env.Kind, env.Payload) {
		return true
	}
	if s.grants == nil {
		s.grants = in.pod.grants.For(s.ID)
	}
	switch env.Kind {
	case wire.KindRevoke:
		if s.caps().CoversKind(wire.KindGrant) || s.grants.HoldsKind(wire.KindGrant) {
			// Who may grant may take back what it granted (checkRevoke:
			// only its own grants).
			return true
		}
	case wire.KindGrant:
		if s.grants.HoldsKind(wire.KindGrant) {
			// Where a grant applies is its payload's context, or the
			// envelope's: checkCapabilityChange checks the grant there.
			return true
		}
	}
	var ctxID string
	var ancestors []string
	if s.grants.Scoped() && env.Context != nil && env.Kind != wire.RequestKick {
		if c, e := envelope.ParseContext(env.Context, in.pod.node.Config.MaxContextBytes); e == nil {
			ctxID = c.ID
			ancestors = in.pod.Registry.Ancestry(&c, in.acc.Ancestors[:0])
		}
	}
	return s.grants.Allows(env.Kind, env.Payload, capability.Where{Context: ctxID, Ancestors: ancestors, To: env.To})
}

// duplicate is the duplicate_id verdict on an envelope's id
// (docs/protocol.md section 8): an id the pod's history holds, or one
// this node sent into the stream and has not seen back (OrderStream), is
// a duplicate. Ephemeral envelopes are not checked, and ids the gateway
// fills are new. Call it with Pod.mu held.
func (p *Pod) duplicate(id string, mode envelope.Mode) *envelope.Error {
	if p.index == nil || id == "" || mode == envelope.ModeEphemeral {
		return nil
	}
	_, sending := p.sending[id]
	if sending || p.index.Holds(id) {
		return envelope.Errorf(wire.CodeDuplicateID, "the pod's history already holds an envelope with id %q; the first one stands", id)
	}
	return nil
}

func tooLarge(n, limit int) *envelope.Error {
	return envelope.Errorf(wire.CodeMessageTooLarge, "the message is %d bytes, over the limit of %d", n, limit)
}

// commit takes the accepted envelope, body, into the pod's order. Call it
// with Pod.mu held.
func (in *ingress) commit(body []byte) {
	p := in.pod
	m := &in.meta
	m.Seq = p.node.frameSeq.Add(1)
	var frame []byte
	if p.framed {
		// Kept by the history writer until stored, or sent to the other
		// nodes: a frame of its own, the body in it, which the members'
		// queues share too.
		frame = envelope.Frame(m, body)
		body = frame[len(frame)-len(body):]
	} else {
		// The members' queues keep it: not the read buffer's memory.
		body = bytes.Clone(body)
	}
	if !p.order.here() && p.index != nil && !m.Live() {
		p.sending[strings.Clone(m.ID)] = struct{}{} // until it comes back (fromLog); not the read buffer's memory
	}
	if in.call.tracked() {
		p.acceptCall(&in.call, m, in.now)
	}
	if in.prop.kind != "" {
		p.acceptProposal(&in.prop, m, &in.env, in.now)
	}
	in.countFanout(true) // the accept span counts the fan-out here
	p.commit(m, body, frame, in.tokens, in.now)
	in.countFanout(false)
	if in.call.tracked() {
		p.afterCall(&in.call, m)
	}
	if in.prop.kind != "" {
		p.afterProposal(&in.prop, m)
	}
	if pr := in.fulfils; pr != nil && p.endProposal(pr.id, wire.ProposalFulfilled, m.From, "", m.ID) != nil {
		p.commitProposalEvent(pr, "")
	}
	p.node.Metrics.EnvelopesIn.Inc()
	p.m.envIn.Inc()
	p.m.bytesIn.Add(float64(len(body)))
}

// refuse answers the sender with system/error, through its reply route.
func (in *ingress) refuse(e *envelope.Error, correlationID string) {
	in.refused = e.Code
	in.pod.node.Metrics.Errors.WithLabelValues(string(e.Code)).Inc()
	in.pod.m.refused(string(e.Code))
	in.auditRefusal(e, correlationID)
	in.from.Reply.Refused(correlationID, e.Payload())
}

// reply answers a gateway request.
func (in *ingress) reply(kind string, payload any) {
	in.from.Reply.Answered(in.env.ID, kind, payload)
}
