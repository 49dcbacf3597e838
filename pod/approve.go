package pod

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// gateway/approve (docs/protocol.md section 11): whoever may make a
// proposed call approves it, naming the digest of the bytes it approves
// (so that an approval is of the call its approver saw, never of another
// that the proposal's id names later); the gateway releases the call,
// byte for byte what was proposed, as the proposer's mcp/request naming
// the approver, so that its answer goes to the proposer. With scope
// "always" the approver also grants the proposer that call (its method
// and exact tool name, on the proposal's recipient alone) through a
// capability/grant of its own, under the rules of every grant.

// releasedRequest is the mcp/request the gateway releases for an approved
// proposal, but its payload: from the proposer, correlated to the
// proposal (as MEW's fulfilment is), with its approval. The proposal's
// bytes follow as they came (json.Marshal would compact them and escape
// HTML), so that what is released is what was approved.
type releasedRequest struct {
	Protocol      string        `json:"protocol"`
	ID            string        `json:"id"`
	TS            string        `json:"ts"`
	From          string        `json:"from"`
	To            []string      `json:"to"`
	Kind          string        `json:"kind"`
	CorrelationID string        `json:"correlation_id"`
	Context       *wire.Context `json:"context,omitempty"`
	Approval      wire.Approval `json:"approval"`
	Trace         *wire.Trace   `json:"trace,omitempty"`
}

// approve handles gateway/approve for the sender: it returns the
// system/approve answer's payload, or the refusal.
func (in *ingress) approve(a wire.Approve) (wire.ProposalEvent, *envelope.Error) {
	p, s := in.pod, in.from
	switch {
	case a.Scope != "" && a.Scope != wire.ScopeOnce && a.Scope != wire.ScopeAlways:
		return wire.ProposalEvent{}, envelope.Errorf(wire.CodeInvalidEnvelope, `scope is "once" (the default) or "always"`)
	case a.Scope != wire.ScopeAlways && (a.Context != "" || a.Payload != nil):
		return wire.ProposalEvent{}, envelope.Errorf(wire.CodeInvalidEnvelope, `context and payload narrow an "always" approval's grant: give them with scope "always"`)
	}
	p.lock()
	defer p.unlock()
	if e := p.removedSender(s); e != nil {
		return wire.ProposalEvent{}, e
	}
	pr := p.proposals.byID[a.Proposal]
	if e := notPending(pr, a.Proposal); e != nil {
		return wire.ProposalEvent{}, e
	}
	if !p.mayMake(s.ID, s.caps(), pr) {
		e := envelope.Errorf(wire.CodeCapabilityViolation, "only a participant that may make the proposed call itself approves proposal %q", a.Proposal).Ruled(audit.RuleNotApprover)
		e.AttemptedKind, e.YourCapabilities = wire.KindMCPRequest, s.caps().Wire()
		return wire.ProposalEvent{}, e
	}
	if a.Digest != pr.digest {
		return wire.ProposalEvent{}, envelope.Errorf(wire.CodeProposalChanged, "proposal %q is another call than the one you approve: its digest is %s, not %s (read it again with gateway/proposals)", a.Proposal, pr.digest, a.Digest)
	}
	var grant *capabilityChange
	var grantPayload []byte
	if a.Scope == wire.ScopeAlways {
		var e *envelope.Error
		if grant, grantPayload, e = p.alwaysGrant(pr, a, s); e != nil {
			return wire.ProposalEvent{}, e
		}
	}
	// The event first, then the call it released: whoever awaits the
	// proposal's outcome learns the call's id before its answer comes
	// (the gateway's own, at once, when the recipient is not there).
	requestID, grantID := uuid.NewString(), ""
	if grant != nil {
		grantID = uuid.NewString()
	}
	scopeProposal(pr, scopeOf(a))
	p.endProposal(pr.id, wire.ProposalApproved, s.ID, "", requestID)
	decision := p.startDecision(pr, "approve", s.ID, scopeOf(a), in.env.TraceContext()) // nil with tracing off
	var released envelope.TraceContext
	if decision != nil {
		released = tracing.Of(decision.SpanContext())
		defer decision.End()
	}
	p.commitProposalEventFull(pr, "", scopeOf(a), grantID)
	if grant != nil {
		p.commitGrant(grant, grantPayload, s.ID, grantID)
	}
	p.release(pr, s.ID, requestID, released)
	return pr.event(scopeOf(a), grantID), nil
}

func scopeOf(a wire.Approve) string {
	if a.Scope == "" {
		return wire.ScopeOnce
	}
	return a.Scope
}

// alwaysGrant is the grant an "always" approval makes: the proposer may
// make that call from then on, to the proposal's recipient alone, its
// method and tool name exactly (not its arguments), or what the
// approval's payload pattern says, which the proposed call must match;
// for the whole pod or the approval's context. A method or tool name that
// a pattern would read as more than itself ("*", "read_*", "/.*/", "!x")
// grants nothing: the approval is refused, and "once" remains. The
// approver grants it as any grantor does: it must hold capability/grant
// and the granted capability where the grant applies. Call it with Pod.mu
// held.
func (p *Pod) alwaysGrant(pr *proposal, a wire.Approve, s *Sender) (*capabilityChange, []byte, *envelope.Error) {
	pattern := a.Payload
	if pattern == nil {
		method := gjson.GetBytes(pr.call, "method").String()
		pat := map[string]any{"method": method}
		exact := []string{method}
		if name := gjson.GetBytes(pr.call, "params.name"); name.Type == gjson.String {
			pat["params"] = map[string]any{"name": name.Str}
			exact = append(exact, name.Str)
		}
		for _, x := range exact {
			if !capability.Literal(x) {
				return nil, nil, envelope.Errorf(wire.CodeInvalidEnvelope, "scope always grants the call's method and tool name exactly, and %q would be read as a pattern (more than itself): approve it once, or give the pattern to grant in payload", x)
			}
		}
		pattern, _ = json.Marshal(pat)
	}
	capab := wire.Capability{Kind: wire.KindMCPRequest, Payload: pattern}
	set, err := capability.Compile([]wire.Capability{capab})
	if err != nil {
		return nil, nil, envelope.Errorf(wire.CodeInvalidEnvelope, "payload: %v", err)
	}
	if !set.Allows(wire.KindMCPRequest, pr.call) {
		return nil, nil, envelope.Errorf(wire.CodeInvalidEnvelope, "payload: the proposed call does not match the pattern to grant: it would not grant the call approved")
	}
	g := wire.Grant{Recipient: pr.proposer, Capabilities: []wire.Capability{capab}, Context: a.Context, To: pr.to,
		Reason: fmt.Sprintf("approved always: proposal %s", pr.id)}
	payload, _ := json.Marshal(g)
	c := &capabilityChange{grant: true, g: g, caps: set}
	if e := p.checkCapabilityChange(c, s, payload, nil); e != nil {
		e.Message = "scope always grants the proposer the call: " + e.Message
		return nil, nil, e
	}
	return c, payload, nil
}

// release commits the proposed call as the proposer's mcp/request, the
// proposal's bytes its payload, naming the approver. The call continues
// the approval's span (tc, with tracing on), or else the proposal's own
// trace context. Call it with Pod.mu held.
func (p *Pod) release(pr *proposal, approver, id string, tc envelope.TraceContext) {
	r := releasedRequest{Protocol: wire.ProtocolMCPP, ID: id, TS: timeNow().UTC().Format(wire.TimeFormat), From: pr.proposer,
		To: []string{pr.to}, Kind: wire.KindMCPRequest, CorrelationID: pr.id,
		Approval: wire.Approval{Proposal: pr.id, By: approver}}
	switch {
	case tc.Valid():
		r.Trace = &wire.Trace{Traceparent: tc.Traceparent()}
	case pr.traceparent != "":
		r.Trace = &wire.Trace{Traceparent: pr.traceparent, Tracestate: pr.tracestate}
	}
	if pr.ctx.id != "" {
		r.Context = &wire.Context{ID: pr.ctx.id}
	}
	head, err := json.Marshal(r)
	if err != nil {
		panic("pod: a released request does not marshal: " + err.Error()) // strings and ids only
	}
	body := make([]byte, 0, len(head)+len(`,"payload":`)+len(pr.call))
	body = append(append(append(body, head[:len(head)-1]...), `,"payload":`...), pr.call...)
	body = append(body, '}')
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCall, Origin: p.node.ID, From: pr.proposer,
		To: []string{pr.to}, ID: id, Seq: p.node.frameSeq.Add(1), Protocol: protocolSpan,
		ContextID: pr.ctx.id, ContextType: pr.ctx.typ, ContextParent: pr.ctx.parent, Ancestors: pr.ctx.ancestors, Trace: tc}
	if pr.ctx.path {
		m.Flags |= envelope.FlagPath
	}
	ci, e := readCall(wire.KindMCPRequest, m.To, pr.call, nil, gjson.Result{})
	if e == nil && ci.rpcID != nil {
		p.acceptCall(&ci, &m, timeNow())
	}
	p.commit(&m, body, envelope.Frame(&m, body), 0, timeNow())
	if e == nil {
		p.afterCall(&ci, &m)
	}
}

// commitGrant commits an "always" approval's capability/grant, from the
// approver to the proposer. Call it with Pod.mu held.
func (p *Pod) commitGrant(c *capabilityChange, payload []byte, grantor, id string) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"protocol":%q,"id":%q,"ts":%q,"from":%q,"to":[%q],"kind":%q,"payload":`,
		wire.ProtocolMCPP, id, timeNow().UTC().Format(wire.TimeFormat), grantor, c.g.Recipient, wire.KindGrant)
	b.Write(payload)
	b.WriteByte('}')
	body := b.Bytes()
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCapability, Origin: p.node.ID, From: grantor,
		To: []string{c.g.Recipient}, ID: id, Seq: p.node.frameSeq.Add(1), Protocol: protocolSpan, Via: c.via}
	p.commit(&m, body, envelope.Frame(&m, body), 0, timeNow())
	c.answer.GrantID = id // checkCapabilityChange made the answer
	p.auditCapabilityChange(c, id)
}

// proposalsRequest reads gateway/proposals' payload: all or pending.
func proposalsRequest(payload []byte) (bool, *envelope.Error) {
	if payload == nil || bytes.Equal(bytes.TrimSpace(payload), []byte("null")) {
		return false, nil
	}
	var q wire.ProposalsRequest
	if err := strictDecode(payload, &q); err != nil {
		return false, envelope.Errorf(wire.CodeInvalidEnvelope, `gateway/proposals takes {"state"?: "pending" | "all"}`)
	}
	switch strings.TrimSpace(q.State) {
	case "", wire.ProposalPending:
		return false, nil
	case wire.StateAll:
		return true, nil
	}
	return false, envelope.Errorf(wire.CodeInvalidEnvelope, `state must be "pending" or "all"`)
}
