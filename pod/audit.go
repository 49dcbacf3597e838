package pod

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// The pod's trust decisions in the node's audit trail (Node.Audit,
// package audit): each is recorded once, by the node that made it, where
// it was made: a refusal by a rule of trust (ingress.refuse), a grant or
// a revoke once committed (ingress.accepted, commitGrant), a kick
// and its ban (kick), a refresh (refresh), and a proposal and its end
// (commitProposalEventFull: every node expires a proposal on its own
// clock, so every node that holds it records its expiry).

// audit records r as a decision about the pod. Its strings are copied:
// those of an envelope point into its sender's read buffer, which the
// next message overwrites before the trail's writer reads them.
func (p *Pod) audit(r audit.Record) {
	for _, s := range []*string{&r.Participant, &r.By, &r.Kind, &r.EnvelopeID, &r.Context, &r.GrantID, &r.To, &r.Reason,
		&r.Until, &r.Proposal, &r.Method, &r.Tool, &r.Request} {
		*s = strings.Clone(*s)
	}
	r.Pod = p.Name
	p.node.Audit.Record(r)
}

// transport is how the sender reaches the pod, as the audit trail names
// it.
func (s *Sender) transport() string {
	switch {
	case s.Conn != nil && s.Conn.Observes():
		return audit.TransportObserve
	case s.Conn != nil:
		return audit.TransportWS
	case s.Guest != nil:
		return audit.TransportMCP
	}
	return audit.TransportPublish
}

// auditRefusal records a refusal of the envelope that a rule of trust
// made (e names it: a capability, an identity, a removal), or any
// refusal of a refresh. Call it before e's answer is sent.
func (in *ingress) auditRefusal(e *envelope.Error, correlationID string) {
	if !in.pod.node.Audit.On() {
		return
	}
	decision := audit.CapabilityRefused
	switch {
	case in.env.Kind == wire.RequestRefresh:
		decision = audit.RefreshRefused
	case e.Rule == "" && e.Code != wire.CodeCapabilityViolation && e.Code != wire.CodeAuthViolation:
		return
	}
	r := audit.Record{Decision: decision, Participant: in.from.ID, Transport: in.from.transport(), Kind: in.env.Kind,
		EnvelopeID: correlationID, Code: string(e.Code), Rule: e.Rule, Message: e.Message}
	if in.env.Context != nil {
		if c, ce := envelope.ParseContext(in.env.Context, in.pod.node.Config.MaxContextBytes); ce == nil {
			r.Context = c.ID
		}
	}
	in.pod.audit(r)
}

// capabilityRule names the rule that refused a kind the sender may not
// send: a capability of its names the kind but not with this payload; a
// grant it holds allows the kind, but not here (in another context); or
// nothing names the kind.
func (in *ingress) capabilityRule(kind string) string {
	s := in.from
	switch {
	case s.caps().CoversKind(kind):
		return audit.RulePayloadPattern
	case s.grants != nil && s.grants.HoldsKind(kind):
		return audit.RuleGrantScope
	}
	return audit.RuleNoCapability
}

// auditCapabilityChange records a grant or a revoke this node committed,
// its answer's fields. Call it with Pod.mu held.
func (p *Pod) auditCapabilityChange(c *capabilityChange, envelopeID string) {
	if !p.node.Audit.On() {
		return
	}
	a := c.answer
	r := audit.Record{Decision: audit.Revoke, Participant: a.Recipient, By: a.Grantor, GrantID: a.GrantID,
		Capabilities: a.Capabilities, Context: a.Context, To: a.To, Reason: a.Reason, EnvelopeID: envelopeID}
	if c.grant {
		r.Decision, r.Via = audit.Grant, append([]string(nil), c.via...)
	}
	p.audit(r)
}

// auditProposal records a proposal this node accepted, or its end as this
// node decided it (scope and grantID: an approval's). Call it with
// Pod.mu held.
func (p *Pod) auditProposal(pr *proposal, scope, grantID string) {
	if !p.node.Audit.On() {
		return
	}
	r := audit.Record{Participant: pr.proposer, Proposal: pr.id, To: pr.to, Context: pr.ctx.id, Digest: pr.digest,
		Method: gjson.GetBytes(pr.call, "method").Str, Tool: gjson.GetBytes(pr.call, "params.name").Str}
	switch pr.state {
	case wire.ProposalPending:
		r.Decision = audit.Proposal
	case wire.ProposalApproved:
		r.Decision, r.By, r.Scope, r.GrantID, r.Request = audit.ProposalApproved, pr.by, scope, grantID, pr.request
	case wire.ProposalFulfilled:
		r.Decision, r.By, r.Request = audit.ProposalFulfilled, pr.by, pr.request
	case wire.ProposalRejected:
		r.Decision, r.By, r.Reason = audit.ProposalRejected, pr.by, pr.reason
	case wire.ProposalWithdrawn:
		r.Decision, r.By, r.Reason = audit.ProposalWithdrawn, pr.by, pr.reason
	case wire.ProposalExpired:
		r.Decision, r.Reason = audit.ProposalExpired, pr.reason
	default:
		return
	}
	p.audit(r)
}
