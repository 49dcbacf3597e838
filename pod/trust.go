package pod

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// Who may do what, changed while the pod runs (docs/protocol.md sections
// 1 and 6): capabilities granted and revoked at run time (MEW's
// capability/grant and capability/revoke, relayed like any envelope and
// applied by every node in the pod's order), kicks with their bans, and
// a connection's fresh token (gateway/refresh).

// capabilityChange is a capability/grant or capability/revoke, read.
type capabilityChange struct {
	grant  bool
	g      wire.Grant
	r      wire.Revoke
	caps   *capability.Set // what a grant grants
	via    []string        // the grants a grant is made through (capability.Grant.Via)
	answer *wire.CapabilityEvent
}

// recipient is who the change is for.
func (c *capabilityChange) recipient() string {
	if c.grant {
		return c.g.Recipient
	}
	return c.r.Recipient
}

// parseCapabilityChange reads the payload of a grant or a revoke
// (invalid_envelope when it does not fit), case-sensitively
// (envelope.DecodePayload): the recipient a payload pattern matched is
// the one that receives.
func parseCapabilityChange(kind string, payload []byte, maxContext int) (*capabilityChange, *envelope.Error) {
	c := &capabilityChange{grant: kind == wire.KindGrant}
	if c.grant {
		if err := envelope.DecodePayload(payload, &c.g, false); err != nil {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, `capability/grant takes {"recipient": ID, "capabilities": [PATTERN, …], "context"?: ID, "reason"?}: %v`, err)
		}
		if !envelope.ValidParticipantID(c.g.Recipient) {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: recipient must be a participant id")
		}
		if len(c.g.Capabilities) == 0 {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: capabilities must list at least one pattern")
		}
		if len(c.g.Context) > maxContext {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: context is over %d bytes", maxContext)
		}
		if c.g.To != "" && !envelope.ValidParticipantID(c.g.To) {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: to must be a participant id (the one recipient of the envelopes it allows)")
		}
		set, err := capability.Compile(c.g.Capabilities)
		if err != nil {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: %v", err)
		}
		c.caps = set
		return c, nil
	}
	if err := envelope.DecodePayload(payload, &c.r, false); err != nil {
		return nil, envelope.Errorf(wire.CodeInvalidEnvelope, `capability/revoke takes {"recipient": ID, "grant_id": ID} or {"recipient": ID, "capabilities": [PATTERN, …]}: %v`, err)
	}
	switch {
	case !envelope.ValidParticipantID(c.r.Recipient):
		return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/revoke: recipient must be a participant id")
	case (c.r.GrantID == "") == (len(c.r.Capabilities) == 0):
		return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/revoke names a grant_id or capabilities, one of them")
	}
	if len(c.r.Capabilities) > 0 {
		if _, err := capability.Compile(c.r.Capabilities); err != nil {
			return nil, envelope.Errorf(wire.CodeInvalidEnvelope, "capability/revoke: %v", err)
		}
	}
	return c, nil
}

// checkCapabilityChange decides whether the change may be made by s,
// whose envelope (payload: its payload) is in the context ctx (zero: the
// main context): a grant's scope (its payload's context, or the
// envelope's own) must be an open context, or the one the envelope
// opens; a revoke must name a grant in force that s made. It keeps the
// answer for the grantor.
//
// A grant never amplifies (docs/protocol.md section 6): its grantor may
// not name itself, and must hold capability/grant, and every capability
// it grants, where the grant applies: its own capabilities (its token's)
// or a grant it holds whose scope is the new grant's scope or one of its
// ancestors (a pod-wide grant needs a pod-wide one). What it held only
// through grants is what the new grant is made through (Via). Call it
// with Pod.mu held.
func (p *Pod) checkCapabilityChange(c *capabilityChange, s *Sender, payload []byte, ctx *envelope.Context) *envelope.Error {
	sender := s.ID
	if !c.grant {
		return p.checkRevoke(c, sender)
	}
	if c.g.Recipient == sender {
		return envelope.Errorf(wire.CodeCapabilityViolation, "capability/grant: a grantor cannot grant itself").Ruled(audit.RuleSelfGrant)
	}
	if n := len(p.grants.For(c.g.Recipient).List()); n >= capability.MaxGrants {
		return envelope.Errorf(wire.CodeInvalidEnvelope, "capability/grant: %s holds %d grants in this pod, the most there may be: revoke some first", c.g.Recipient, n)
	}
	scope := c.g.Context
	if scope == "" && ctx != nil {
		scope = ctx.ID
	}
	if scope != "" && (ctx == nil || scope != ctx.ID) && !p.Registry.Active(scope) {
		return envelope.Errorf(wire.CodeInvalidContext, "capability/grant: context %q is not open: a grant may be scoped to an open context only", scope)
	}
	var ancestors []string
	switch {
	case scope == "":
	case ctx != nil && scope == ctx.ID:
		ancestors = p.Registry.Ancestry(ctx, nil)
	default:
		ancestors = p.Registry.Ancestry(&envelope.Context{ID: scope}, nil)
	}
	caps, held := s.caps(), p.grants.For(sender)
	var via []string
	if !caps.Allows(wire.KindGrant, payload) {
		id, ok := held.Allowing(wire.KindGrant, payload, capability.Where{Context: scope, Ancestors: ancestors, To: []string{c.g.Recipient}})
		if !ok {
			where := "for the whole pod"
			if scope != "" {
				where = fmt.Sprintf("in context %q", scope)
			}
			return envelope.Errorf(wire.CodeCapabilityViolation, "capability/grant: you may not grant %s: a grant scoped to a context allows granting only within it", where).Ruled(audit.RuleGrantScope)
		}
		via = append(via, id)
	}
	where := capability.Where{Context: scope, Ancestors: ancestors}
	if c.g.To != "" {
		where.To = []string{c.g.To}
	}
	for i, want := range c.g.Capabilities {
		if caps.Covers(c.caps, i) {
			continue
		}
		id, ok := held.Covering(c.caps, i, where)
		if !ok {
			return envelope.Errorf(wire.CodeCapabilityViolation, "capability/grant: you do not hold %s where the grant applies, so you may not grant it", want).Ruled(audit.RuleDelegation)
		}
		if !slices.Contains(via, id) {
			via = append(via, id)
		}
	}
	c.g.Context, c.via = scope, via
	c.answer = &wire.CapabilityEvent{Event: wire.CapabilityGranted, Recipient: c.g.Recipient, Grantor: sender,
		Capabilities: c.caps.Wire(), Context: scope, To: c.g.To, Reason: c.g.Reason}
	return nil
}

// checkRevoke is checkCapabilityChange for a revoke. Call it with Pod.mu
// held.
func (p *Pod) checkRevoke(c *capabilityChange, sender string) *envelope.Error {
	g := p.grants.For(c.r.Recipient)
	if c.r.GrantID != "" {
		for _, gr := range g.List() {
			if gr.ID != c.r.GrantID {
				continue
			}
			if gr.Grantor != sender {
				return envelope.Errorf(wire.CodeCapabilityViolation, "capability/revoke: grant %q was made by %s: only its grantor may revoke it", c.r.GrantID, gr.Grantor).Ruled(audit.RuleNotGrantor)
			}
			c.answer = &wire.CapabilityEvent{Event: wire.CapabilityRevoked, GrantID: gr.ID, Recipient: c.r.Recipient,
				Grantor: sender, Capabilities: gr.Capabilities.Wire(), Context: gr.Context, To: gr.To, Reason: c.r.Reason}
			return nil
		}
		return envelope.Errorf(wire.CodeInvalidEnvelope, "capability/revoke: %s holds no grant %q (never made, revoked, or ended)", c.r.Recipient, c.r.GrantID)
	}
	if any, _ := g.Revokes(sender, c.r.Capabilities); !any {
		return envelope.Errorf(wire.CodeInvalidEnvelope, "capability/revoke: you granted %s nothing in force that these capabilities cover", c.r.Recipient)
	}
	c.answer = &wire.CapabilityEvent{Event: wire.CapabilityRevoked, Recipient: c.r.Recipient, Grantor: sender,
		Capabilities: c.r.Capabilities, Reason: c.r.Reason}
	return nil
}

// answerCapabilityChange answers the grantor (correlated by the grant's
// or the revoke's id): what is in force from its next envelope on.
func (in *ingress) answerCapabilityChange(c *capabilityChange) {
	if c == nil || c.answer == nil {
		return
	}
	if c.grant {
		c.answer.GrantID = in.env.ID // the grant's id names it (MEW's grant_id)
	}
	in.pod.auditCapabilityChange(c, in.env.ID)
	op := "revoke"
	if c.grant {
		op = "grant"
	}
	in.pod.traceEvent(op, in.meta.Trace, "", tracing.Grantor.String(c.answer.Grantor), tracing.Grantee.String(c.answer.Recipient),
		attribute.String("mcpp.grant.id", strings.Clone(c.answer.GrantID)), attribute.Int("mcpp.grant.capabilities", len(c.answer.Capabilities)))
	if in.from.Conn == nil {
		// Over HTTP and MCP the envelope's result, which commit added,
		// carries the answer: one result per envelope.
		if n := len(in.from.Results); n > 0 && in.from.Results[n-1].ID == in.env.ID {
			answer, err := json.Marshal(c.answer)
			if err != nil {
				panic("pod: a capability answer does not marshal: " + err.Error()) // a bug, never input
			}
			in.from.Results[n-1].Answer = answer
		}
		return
	}
	in.reply(wire.KindCapability, c.answer)
}

// applyCapability changes the grants as a capability/grant or
// capability/revoke of the pod's order says, whoever accepted it, and
// tells the recipient's connections here of a revocation, and of every
// grant that ended with it because it was made through a revoked one.
// Call it with Pod.mu held.
func (p *Pod) applyCapability(m *envelope.Meta, body []byte, tell bool) {
	kind := gjson.GetBytes(body, "kind").String()
	payload := []byte(gjson.GetBytes(body, "payload").Raw)
	c, e := parseCapabilityChange(kind, payload, p.node.Config.MaxContextBytes)
	if e != nil {
		return // checked when it was accepted; an older gateway's
	}
	if c.grant {
		scope := c.g.Context
		if scope == "" {
			scope = m.ContextID
		}
		var via []string
		for _, v := range m.Via {
			via = append(via, strings.Clone(v))
		}
		err := p.grants.For(c.g.Recipient).Add(capability.Grant{ID: strings.Clone(m.ID), Grantor: strings.Clone(m.From),
			Context: strings.Clone(scope), To: strings.Clone(c.g.To), Capabilities: c.caps, Via: via})
		if err != nil && !errors.Is(err, capability.ErrDuplicateGrant) {
			p.node.Log.Warn("a capability/grant could not be applied", "pod", p.Name, "grant", m.ID, "err", err)
		}
		return
	}
	g := p.grants.For(c.r.Recipient)
	var changed []string
	if c.r.GrantID != "" {
		by := m.From
		if by == wire.AdminID {
			by = grantorOf(g, c.r.GrantID) // an operator's revoke (admin.go)
		}
		if gr, err := g.Revoke(c.r.GrantID, by); err == nil {
			changed = append(changed, gr.ID)
			if tell {
				p.tellGrantee(c.r.Recipient, wire.CapabilityEvent{Event: wire.CapabilityRevoked, GrantID: gr.ID,
					Recipient: c.r.Recipient, Grantor: gr.Grantor, Capabilities: gr.Capabilities.Wire(), Context: gr.Context, To: gr.To, Reason: c.r.Reason})
			}
		}
	} else if revoked, err := g.RevokeCapabilities(m.From, c.r.Capabilities); err == nil {
		for _, r := range revoked {
			changed = append(changed, r.Grant.ID)
			if tell {
				p.tellGrantee(c.r.Recipient, wire.CapabilityEvent{Event: wire.CapabilityRevoked, GrantID: r.Grant.ID,
					Recipient: c.r.Recipient, Grantor: r.Grant.Grantor, Capabilities: r.Removed, Context: r.Grant.Context, To: r.Grant.To, Reason: c.r.Reason})
			}
		}
	}
	p.endThrough(changed, "a grant it was made through was revoked", tell)
}

// endGrants ends the grants scoped to a context that concluded, and the
// grants made through them, and tells their recipients' connections here.
// Call it with Pod.mu held.
func (p *Pod) endGrants(contextID string, tell bool) {
	var ended []string
	for _, e := range p.grants.EndContext(contextID) {
		ended = append(ended, e.ID)
		if tell {
			p.tellGrantee(e.Recipient, wire.CapabilityEvent{Event: wire.CapabilityEnded, GrantID: e.ID, Recipient: e.Recipient,
				Grantor: e.Grantor, Capabilities: e.Capabilities.Wire(), Context: e.Context, To: e.To, Reason: "the context concluded"})
		}
	}
	p.endThrough(ended, "a grant it was made through ended with its context", tell)
}

// endThrough ends the grants made through the grants named by ids (and so
// on), telling their recipients here why. Call it with Pod.mu held.
func (p *Pod) endThrough(ids []string, why string, tell bool) {
	for _, e := range p.grants.EndThrough(ids) {
		if tell {
			p.tellGrantee(e.Recipient, wire.CapabilityEvent{Event: wire.CapabilityEnded, GrantID: e.ID, Recipient: e.Recipient,
				Grantor: e.Grantor, Capabilities: e.Capabilities.Wire(), Context: e.Context, To: e.To, Reason: why})
		}
	}
}

// tellGrantee sends ev to the recipient's connection on this node, if it
// has one. Call it with Pod.mu held.
func (p *Pod) tellGrantee(recipient string, ev wire.CapabilityEvent) {
	if r := p.members[recipient]; r != nil {
		r.Answer(direct(r.ID, r.Protocol, wire.KindCapability, "", ev))
	}
}

// ban keeps a kicked participant out of the pod until it ends.
type ban struct {
	until  time.Time
	by     string
	reason string
}

// banned is the refusal of a join of id while it is banned, or nil. Call
// it with Pod.mu held.
func (p *Pod) banned(id string, now time.Time) *envelope.Error {
	b, ok := p.bans[id]
	if !ok {
		return nil
	}
	if !now.Before(b.until) {
		delete(p.bans, id)
		return nil
	}
	return envelope.Errorf(wire.CodeForbidden, "%s was kicked from pod %q by %s (%s) and may not join before %s",
		id, p.Name, b.by, b.reason, b.until.UTC().Format(wire.TimeFormat)).Ruled(audit.RuleBanned)
}

// kickBody is the body of a kick frame.
type kickBody struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	Until  int64  `json:"until"` // unix ms; 0: no ban
}

// kick handles gateway/kick: the participant leaves the pod on every
// node, with the reason, and is kept out for ban_ms. It returns what the
// kicker is answered.
func (in *ingress) kick(k wire.Kick) (wire.Kicked, *envelope.Error) {
	p := in.pod
	p.lock()
	defer p.unlock()
	if e := p.removedSender(in.from); e != nil {
		return wire.Kicked{}, e
	}
	return p.commitKick(in.from.ID, &in.env, in.from.transport(), k, in.now), nil
}

// commitKick commits the kick of k.Participant by by into the pod's
// order, and returns what the kicker is answered; the audit trail names
// the kick's envelope (env, nil for an operator's kick) and how it came
// (transport), and the kick's span continues env's trace. Call it with
// Pod.mu held.
func (p *Pod) commitKick(by string, env *envelope.Envelope, transport string, k wire.Kick, now time.Time) wire.Kicked {
	body, _ := json.Marshal(kickBody{By: by, Reason: k.Reason})
	var until time.Time
	if k.BanMS > 0 {
		until = now.Add(time.Duration(k.BanMS) * time.Millisecond)
		body, _ = json.Marshal(kickBody{By: by, Reason: k.Reason, Until: until.UnixMilli()})
	}
	n := 0
	if p.members[k.Participant] != nil {
		n++
	}
	if p.guests[k.Participant] != nil {
		n++
	}
	if _, ok := p.remote[k.Participant]; ok {
		n++ // its connection on another node, which the frame reaches
	}
	// Stored in the history (not live), with no entry of the index: a
	// node that opens the pod later reads its ban there (applyPast).
	m := envelope.Meta{Kind: envelope.FrameKick, Origin: p.node.ID, From: k.Participant,
		ID: newID(), Seq: p.node.frameSeq.Add(1)}
	var envelopeID, state string
	var from envelope.TraceContext
	if env != nil {
		envelopeID, from, state = env.ID, env.TraceContext(), env.TraceState
	}
	m.Trace = p.traceEvent("kick", from, state, tracing.Participant.String(k.Participant),
		tracing.KickedBy.String(by), tracing.Outcome.String(k.Reason), attribute.Int("mcpp.kick.connections", n))
	p.commit(&m, body, envelope.Frame(&m, body), 0, now)
	answer := wire.Kicked{Participant: k.Participant, Connections: n}
	p.audit(audit.Record{Decision: audit.Kick, Participant: k.Participant, By: by, Reason: k.Reason,
		Connections: n, EnvelopeID: envelopeID, Transport: transport})
	if !until.IsZero() {
		s := until.UTC().Format(wire.TimeFormat)
		answer.BannedUntil = &s
		p.audit(audit.Record{Decision: audit.Ban, Participant: k.Participant, By: by, Reason: k.Reason,
			Until: s, EnvelopeID: envelopeID})
	}
	return answer
}

// applyKick carries out a kick of the pod's order on this node: its ban
// is kept, and the participant's connection and MCP session here leave
// the pod (everyone is told, with the reason) and are closed with 4410.
// Call it with Pod.mu held.
func (p *Pod) applyKick(m *envelope.Meta, body []byte) {
	if reason, ok := p.keepBan(m, body); ok {
		id := strings.Clone(m.From)
		p.removeByID(id, reason, participant.StatusKicked)
		for s := range p.publishers {
			if s.ID == id {
				s.kicked = true
			}
		}
	}
}

// keepBan keeps the ban of a kick frame, if it has one still running, and
// returns the reason its participant is told. Call it with Pod.mu held.
func (p *Pod) keepBan(m *envelope.Meta, body []byte) (reason string, ok bool) {
	var k kickBody
	if json.Unmarshal(body, &k) != nil {
		return "", false
	}
	reason = fmt.Sprintf("kicked by %s", k.By)
	if k.Reason != "" {
		reason += ": " + k.Reason
	}
	if k.Until > 0 {
		if until := time.UnixMilli(k.Until); until.After(timeNow()) {
			p.bans[strings.Clone(m.From)] = ban{until: until, by: strings.Clone(k.By), reason: k.Reason}
		}
	}
	return reason, true
}

// Remove takes r out of the pod, unless a newer connection has replaced
// it: everyone is told it left, with reason, and its connection is
// closed with code (an expired or revoked token). The caller lets the
// node forget the pod if it is idle.
func (p *Pod) Remove(r *participant.Participant, reason string, code participant.CloseStatus) {
	p.lock()
	defer p.unlock()
	if _, ok := p.observers[r]; ok {
		delete(p.observers, r)
		p.rebuildSnapshot()
		r.Close(code, reason)
		return
	}
	if p.members[r.ID] == r {
		p.removeByID(r.ID, reason, code)
	}
}

// removeByID takes participant id's connection and MCP session on this
// node out of the pod, telling the others with reason. Call it with
// Pod.mu held.
func (p *Pod) removeByID(id, reason string, code participant.CloseStatus) {
	for o := range p.observers {
		if o.ID == id { // its watching connections go too, untold
			delete(p.observers, o)
			p.rebuildSnapshot()
			o.Close(code, reason)
		}
	}
	delete(p.since, id)
	if r := p.members[id]; r != nil {
		delete(p.members, id)
		p.rebuildSnapshot()
		p.publishPresenceWhy(envelope.FrameLeave, identityOf(r), 0, reason)
		r.Close(code, reason)
	}
	if g := p.guests[id]; g != nil {
		delete(p.guests, id)
		p.countMembers()
		p.publishPresenceWhy(envelope.FrameLeave, g.Identity, 0, reason)
		g.removed(reason)
	}
}
