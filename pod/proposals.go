package pod

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// Proposals the gateway holds (docs/protocol.md section 11, MEW's
// mcp/proposal): a participant that may not make a call proposes it; the
// gateway keeps the proposal pending until someone allowed to make the
// call approves it (gateway/approve: the call is released as the
// proposer's mcp/request, naming its approver), fulfils it the MEW way
// (an mcp/request correlated to it with the same call), or rejects it
// (mcp/reject); until its proposer withdraws it (mcp/withdraw), or it
// expires. Each change is a system/proposal event from the gateway, kept
// in the history, to the proposer and to those who could approve it.
//
// Every node keeps the pod's proposals as it applies the pod's frames: a
// proposal from its mcp/proposal envelope, each change from its event.
// The node that decides a change records it at once, before its frames
// are committed; the others when the event comes. Every node expires the
// proposals it holds (the history keeps the first event of a proposal's
// expiry: its envelope id is the same on every node). Everything here runs
// with Pod.mu held.

// proposal is one proposal the pod holds.
type proposal struct {
	id, proposer, to string
	// call is the proposed mcp/request's payload, byte for byte, and
	// digest names it (wire.ProposalDigest): an approval names the digest
	// of the call it approves.
	call    json.RawMessage
	digest  string
	ctx     callContext
	created time.Time
	expires time.Time
	state   string // wire.Proposal…
	by      string
	reason  string
	request string // the call an approval or a fulfilment made
	timer   *time.Timer
	// trace is the span of the node that accepted the proposal (its
	// frame's), traceparent and tracestate its envelope's trace field as
	// relayed: what the call an approval releases continues. span is the
	// proposal's own, on the node that accepted it (tracing.go).
	trace                   envelope.TraceContext
	traceparent, tracestate string
	span                    trace.Span
}

// proposals are a pod's proposals: the pending ones, and the ended ones
// it still lists (gateway/proposals with state all), at most
// MaxProposalsPerPod of them, the oldest forgotten first. Call its
// methods with Pod.mu held.
type proposals struct {
	byID    map[string]*proposal
	pending map[string]int // by proposer
	ended   []string       // in the order they ended
}

func (t *proposals) init() {
	t.byID, t.pending = map[string]*proposal{}, map[string]int{}
}

// pendingOf is the pending proposal id, or nil.
func (t *proposals) pendingOf(id string) *proposal {
	if pr := t.byID[id]; pr != nil && pr.state == wire.ProposalPending {
		return pr
	}
	return nil
}

// proposalInfo is what ingress read of a proposal or a decision.
type proposalInfo struct {
	kind string
	// target is the proposal a decision names (its correlation_id).
	target string
	reason string
}

// readProposal reads an mcp/proposal, mcp/reject or mcp/withdraw: a
// proposal names one recipient and proposes a JSON-RPC call (a method);
// a decision names the proposal in correlation_id.
func readProposal(kind string, to []string, payload []byte, correlation gjson.Result) (proposalInfo, *envelope.Error) {
	pi := proposalInfo{kind: kind}
	switch kind {
	case wire.KindMCPProposal:
		if len(to) != 1 {
			return pi, envelope.Errorf(wire.CodeInvalidRecipient, "an mcp/proposal names exactly one recipient in to (this one names %d): the one whose tool the proposed call calls", len(to))
		}
		p := gjson.ParseBytes(payload)
		if !p.IsObject() || p.Get("method").Type != gjson.String {
			return pi, envelope.Errorf(wire.CodeInvalidEnvelope, `an mcp/proposal's payload is the mcp/request payload it proposes: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {…}}`)
		}
	case wire.KindMCPReject, wire.KindMCPWithdraw:
		var ok bool
		if pi.target, ok = oneCorrelation(correlation); !ok {
			return pi, envelope.Errorf(wire.CodeInvalidEnvelope, "%s names the proposal it decides in correlation_id (its envelope id), one", kind)
		}
		pi.reason = gjson.GetBytes(payload, "reason").String()
		if len(pi.reason) > maxReasonBytes*4 {
			return pi, envelope.Errorf(wire.CodeInvalidEnvelope, "%s: reason is over %d bytes", kind, maxReasonBytes*4)
		}
	}
	return pi, nil
}

// mayMake reports whether a sender (its own capabilities caps, its grants
// in the pod) may send the proposed call itself, to its recipient in the
// proposal's context: who may approve, fulfil or reject a proposal. Call
// it with Pod.mu held.
func (p *Pod) mayMake(id string, caps *capability.Set, pr *proposal) bool {
	return caps.Allows(wire.KindMCPRequest, pr.call) ||
		p.grants.For(id).Allows(wire.KindMCPRequest, pr.call, capability.Where{Context: pr.ctx.id, Ancestors: pr.ctx.ancestors, To: []string{pr.to}})
}

// checkProposal applies the rules that need the pod's proposals: a new
// one within the bounds, and an id the pod does not hold already; a
// decision on a pending one, by whoever may make the call (a rejection)
// or by its proposer (a withdrawal). Call it with Pod.mu held.
func (p *Pod) checkProposal(pi *proposalInfo, s *Sender, id string) *envelope.Error {
	t, cfg := &p.proposals, &p.calls.cfg
	switch pi.kind {
	case wire.KindMCPProposal:
		if t.byID[id] != nil {
			return envelope.Errorf(wire.CodeDuplicateID, "the pod holds a proposal with id %q already; the first one stands", id)
		}
		if n := t.pending[s.ID]; n >= cfg.MaxProposalsPerParticipant {
			return envelope.Errorf(wire.CodeProposalLimitExceeded, "you have %d proposals pending in this pod, the most there may be (--max-proposals-per-participant): withdraw some, or wait for decisions", n)
		}
		n := 0
		for _, c := range t.pending {
			n += c
		}
		if n >= cfg.MaxProposalsPerPod {
			return envelope.Errorf(wire.CodeProposalLimitExceeded, "the pod has %d proposals pending, the most there may be (--max-proposals-per-pod)", n)
		}
	case wire.KindMCPReject, wire.KindMCPWithdraw:
		pr := t.byID[pi.target]
		if e := notPending(pr, pi.target); e != nil {
			return e
		}
		if pi.kind == wire.KindMCPWithdraw && s.ID != pr.proposer {
			return envelope.Errorf(wire.CodeCapabilityViolation, "only its proposer (%s) withdraws proposal %q", pr.proposer, pi.target).Ruled(audit.RuleNotProposer)
		}
		if pi.kind == wire.KindMCPReject && !p.mayMake(s.ID, s.caps(), pr) {
			return envelope.Errorf(wire.CodeCapabilityViolation, "only a participant that may make the proposed call itself rejects proposal %q", pi.target).Ruled(audit.RuleNotApprover)
		}
	}
	return nil
}

// notPending is the refusal of a decision on a proposal that is not
// pending, or nil.
func notPending(pr *proposal, id string) *envelope.Error {
	switch {
	case pr == nil:
		return envelope.Errorf(wire.CodeProposalNotPending, "the pod holds no proposal %q (never made, or ended long ago)", id)
	case pr.state != wire.ProposalPending:
		return envelope.Errorf(wire.CodeProposalNotPending, "proposal %q is %s already (by %s)", id, pr.state, pr.by)
	}
	return nil
}

// acceptProposal records what a proposal or a decision this node accepted
// (env) changes, before its envelope is committed; afterProposal commits the
// event that says so, after it. Call it with Pod.mu held.
func (p *Pod) acceptProposal(pi *proposalInfo, m *envelope.Meta, env *envelope.Envelope, now time.Time) {
	switch pi.kind {
	case wire.KindMCPProposal:
		pr := p.recordProposal(m, env.Payload, now)
		if pr != nil {
			pr.traceparent, pr.tracestate = strings.Clone(env.TraceParent), strings.Clone(env.TraceState)
		}
		p.startProposal(pr, m)
	case wire.KindMCPReject:
		p.endProposal(pi.target, wire.ProposalRejected, m.From, pi.reason, "")
	case wire.KindMCPWithdraw:
		p.endProposal(pi.target, wire.ProposalWithdrawn, m.From, pi.reason, "")
	}
}

// afterProposal commits, after a proposal or a decision this node
// accepted, the event that says what it changed. Call it with Pod.mu
// held.
func (p *Pod) afterProposal(pi *proposalInfo, m *envelope.Meta) {
	id := m.ID
	if pi.kind != wire.KindMCPProposal {
		id = pi.target
	}
	if pr := p.proposals.byID[id]; pr != nil {
		p.commitProposalEvent(pr, "")
	}
}

// recordProposal keeps a new pending proposal (from its envelope's frame)
// and arms its expiry. Call it with Pod.mu held.
func (p *Pod) recordProposal(m *envelope.Meta, payload []byte, at time.Time) *proposal {
	if len(m.To) != 1 || p.proposals.byID[m.ID] != nil {
		return nil
	}
	pr := &proposal{id: strings.Clone(m.ID), proposer: strings.Clone(m.From), to: strings.Clone(m.To[0]),
		call: bytes.Clone(payload), digest: wire.ProposalDigest(payload), ctx: contextOfFrame(m), created: at,
		expires: at.Add(p.calls.cfg.ProposalTimeout), state: wire.ProposalPending, by: strings.Clone(m.From), trace: m.Trace}
	p.proposals.byID[pr.id] = pr
	p.proposals.pending[pr.proposer]++
	p.m.addPending(1)
	p.armProposal(pr)
	return pr
}

// armProposal starts the timer that expires pr, on this node as on every
// other. Call it with Pod.mu held.
func (p *Pod) armProposal(pr *proposal) {
	if !p.delivering.Load() {
		return // the pod's past is being read: armed once it is (armProposals)
	}
	pr.timer = time.AfterFunc(max(time.Until(pr.expires), 0), func() {
		p.lock()
		defer p.unlock()
		if p.dead || p.proposals.pendingOf(pr.id) != pr {
			return
		}
		p.endProposal(pr.id, wire.ProposalExpired, wire.GatewayID, fmt.Sprintf("no decision within %v (--proposal-timeout)", p.calls.cfg.ProposalTimeout), "")
		p.commitProposalEvent(pr, "expired")
	})
}

// armProposals arms the proposals read from the pod's past, once the pod
// delivers (Pod.delivering). Call it with Pod.mu held.
func (p *Pod) armProposals() {
	for _, pr := range p.proposals.byID {
		if pr.state == wire.ProposalPending && pr.timer == nil {
			p.armProposal(pr)
		}
	}
}

// endProposal ends a pending proposal with state, by whom and why; the
// call it made, if any (request). Call it with Pod.mu held.
func (p *Pod) endProposal(id, state, by, reason, request string) *proposal {
	t := &p.proposals
	pr := t.pendingOf(id)
	if pr == nil {
		return nil
	}
	pr.state, pr.by, pr.reason, pr.request = state, strings.Clone(by), strings.Clone(reason), strings.Clone(request)
	if pr.timer != nil {
		pr.timer.Stop()
	}
	if t.pending[pr.proposer]--; t.pending[pr.proposer] <= 0 {
		delete(t.pending, pr.proposer)
	}
	p.m.addPending(-1)
	endProposalSpan(pr)
	t.ended = append(t.ended, pr.id)
	for len(t.ended) > p.calls.cfg.MaxProposalsPerPod {
		delete(t.byID, t.ended[0])
		t.ended = t.ended[1:]
	}
	p.node.Metrics.Calls.Proposals.WithLabelValues(state).Inc()
	return pr
}

// event is a proposal's state as its system/proposal event says it.
func (pr *proposal) event(scope, grantID string) wire.ProposalEvent {
	ev := wire.ProposalEvent{Proposal: pr.id, State: pr.state, By: pr.by, Reason: pr.reason, Proposer: pr.proposer, To: pr.to,
		Context: pr.ctx.id, Request: pr.request, Scope: scope, GrantID: grantID}
	if pr.state == wire.ProposalPending {
		ev.Call, ev.Digest = pr.call, pr.digest
		ev.Expires = pr.expires.UTC().Format(wire.TimeFormat)
	}
	return ev
}

// commitProposalEvent commits the system/proposal event of pr's state, to
// its proposer and to the pod's participants who could approve it, in the
// proposal's context. An expiry (named) is decided by every node: its
// envelope id is derived from the proposal's, and the history keeps the
// first. Call it with Pod.mu held.
func (p *Pod) commitProposalEvent(pr *proposal, named string) {
	p.commitProposalEventFull(pr, named, "", "")
}

// commitProposalEventFull is commitProposalEvent for an approval, with
// its scope and the id of the grant an "always" approval made. Call it
// with Pod.mu held.
func (p *Pod) commitProposalEventFull(pr *proposal, named, scope, grantID string) {
	if pr.state == wire.ProposalPending {
		p.node.Metrics.Calls.Proposals.WithLabelValues(wire.ProposalPending).Inc()
	}
	p.auditProposal(pr, scope, grantID)
	msg := newSystemMessage(wire.ProtocolMCPP, wire.KindProposal, pr.event(scope, grantID))
	if named != "" {
		msg.ID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("mcpp:proposal/"+p.Name+"/"+pr.id+"/"+named)).String()
	}
	msg.To = p.approvers(pr)
	msg.CorrelationID = pr.id
	if pr.ctx.id != "" {
		msg.Context = wire.Context{ID: pr.ctx.id}
	}
	body := msg.bytes()
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCall, Origin: p.node.ID, From: wire.GatewayID,
		To: msg.To, ID: msg.ID, Protocol: protocolSpan,
		ContextID: pr.ctx.id, ContextType: pr.ctx.typ, ContextParent: pr.ctx.parent, Ancestors: pr.ctx.ancestors}
	if pr.ctx.path {
		m.Flags |= envelope.FlagPath
	}
	frame := envelope.Frame(&m, body)
	if named != "" {
		p.commitEvent(&m, body, frame, "mcpp-proposal/"+p.Name+"/"+pr.id+"/"+named, timeNow())
		return
	}
	m.Seq = p.node.frameSeq.Add(1)
	frame = envelope.Frame(&m, body)
	p.commit(&m, body, frame, 0, timeNow())
}

// approvers are the proposer and the pod's participants, on every node,
// who could approve pr: whoever may make the call itself. Call it with
// Pod.mu held.
func (p *Pod) approvers(pr *proposal) []string {
	out := []string{pr.proposer}
	check := func(id string, caps *capability.Set) {
		if id != pr.proposer && p.mayMake(id, caps, pr) {
			out = append(out, id)
		}
	}
	for id, r := range p.members {
		check(id, r.Caps())
	}
	for id, g := range p.guests {
		if caps, err := capability.Compile(g.Capabilities); err == nil {
			check(id, caps)
		}
	}
	for id, r := range p.remote {
		if caps, err := capability.Compile(r.Capabilities); err == nil {
			check(id, caps)
		}
	}
	slices.Sort(out[1:])
	return out
}

// applyProposal does what a proposal's frame of another node (or of the
// pod's past) does here: a proposal is recorded, and an event from the
// gateway sets the proposal's state. It reports whether the frame is to
// be delivered: an expiry another node decided is delivered by the
// stream's first copy alone, and, without history, by no node but its own
// (each node tells its own members, as of a context's conclusion). Call
// it with Pod.mu held.
func (p *Pod) applyProposal(m *envelope.Meta, body []byte, kind string, at time.Time) bool {
	switch {
	case kind == wire.KindMCPProposal:
		if pr := p.recordProposal(m, []byte(gjson.GetBytes(body, "payload").Raw), at); pr != nil {
			r := gjson.GetManyBytes(body, "trace.traceparent", "trace.tracestate")
			pr.traceparent, pr.tracestate = r[0].Str, r[1].Str
		}
	case kind == wire.KindProposal && m.From == wire.GatewayID:
		var ev wire.ProposalEvent
		if json.Unmarshal([]byte(gjson.GetBytes(body, "payload").Raw), &ev) != nil || ev.State == wire.ProposalPending {
			return true
		}
		scopeProposal(p.proposals.pendingOf(ev.Proposal), ev.Scope)
		if p.endProposal(ev.Proposal, ev.State, ev.By, ev.Reason, ev.Request) == nil && ev.State == wire.ProposalExpired && p.index == nil {
			return false // this node expired it too, and told its own members
		}
	}
	return true
}

// fulfils reports, for an mcp/request correlated to a pending proposal,
// whether it makes the proposed call (MEW's fulfilment): the same method
// and params, as JSON values, whatever its JSON-RPC id. Call it with
// Pod.mu held.
func (p *Pod) fulfils(correlation gjson.Result, payload []byte) *proposal {
	id := correlation.Str
	if correlation.IsArray() {
		if a := correlation.Array(); len(a) == 1 {
			id = a[0].Str
		}
	}
	pr := p.proposals.pendingOf(id)
	if pr == nil {
		return nil
	}
	same := func(path string) bool {
		return jsonEqual(gjson.GetBytes(pr.call, path).Raw, gjson.GetBytes(payload, path).Raw)
	}
	if same("method") && same("params") {
		return pr
	}
	return nil
}

// jsonEqual reports whether two JSON texts are the same value ("" is
// absent).
func jsonEqual(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// ProposalsList lists the pod's proposals, oldest first: the pending ones,
// or (all) every one it still holds, with its state (gateway/proposals).
func (p *Pod) ProposalsList(all bool) []wire.ProposalInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []wire.ProposalInfo{}
	for _, pr := range p.proposals.byID {
		if !all && pr.state != wire.ProposalPending {
			continue
		}
		info := wire.ProposalInfo{ID: pr.id, State: pr.state, Proposer: pr.proposer, To: pr.to, Context: pr.ctx.id, Call: pr.call, Digest: pr.digest,
			Created: pr.created.UTC().Format(wire.TimeFormat), Expires: pr.expires.UTC().Format(wire.TimeFormat), Request: pr.request}
		if pr.state != wire.ProposalPending {
			info.By, info.Reason = pr.by, pr.reason
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b wire.ProposalInfo) int {
		if c := strings.Compare(a.Created, b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// proposalDecided hands a proposal's end to its proposer's waits on this
// node (Await), and has the answer to the call its approval released
// follow. Call it with Pod.mu held.
func (p *Pod) proposalDecided(body []byte) {
	r := gjson.GetManyBytes(body, "payload.proposal", "payload.state", "payload.request", "payload.proposer")
	if r[1].Str == wire.ProposalPending {
		return
	}
	handed := p.calls.waiters.hand(r[0].Str, r[3].Str, body)
	if req := r[2].Str; req != "" && r[1].Str == wire.ProposalApproved {
		for _, x := range handed { // the released call's answer goes to the proposer
			p.calls.waiters[req] = append(p.calls.waiters[req], x)
		}
	}
}

// Proposal is a proposal's state now, as gateway/proposals lists it, or
// false when the pod does not hold it.
func (p *Pod) Proposal(id string) (wire.ProposalInfo, bool) {
	for _, info := range p.ProposalsList(true) {
		if info.ID == id {
			return info, true
		}
	}
	return wire.ProposalInfo{}, false
}
