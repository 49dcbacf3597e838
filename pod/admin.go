package pod

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// What an operator reads of a pod and does to it from outside the pod
// (the gateway's operator's API, docs/protocol.md section 7): the pod as
// this node holds it, and a kick or a revoke made in the pod's own order
// as wire.AdminID, so that every node applies them and the history keeps
// them, exactly as a participant's gateway/kick and capability/revoke.

// AdminListMax bounds each list of a pod's detail (members, active
// contexts, proposals, grants, bans): a pod holds at most
// --max-contexts-per-pod contexts and 64 grants per recipient, but an
// operator's answer must stay readable whatever a pod holds.
const AdminListMax = 1000

// AdminView is the pod as this node holds it, for an operator: its
// members (by id; at most maxMembers of them, MemberCount counts all),
// those of other nodes too when remote is set (without what only their
// node knows), and its counts; with detail, the lists they count (at most
// AdminListMax each).
func (p *Pod) AdminView(remote bool, maxMembers int, detail bool) wire.AdminPodDetail {
	now := timeNow()
	var v wire.AdminPodDetail
	v.Name = p.Name
	// What the order lock guards is copied under it, the rest read after,
	// so that a large pod's fan-out waits for a copy, not for the view.
	p.mu.Lock()
	conns := make([]*participant.Participant, 0, len(p.members))
	for _, r := range p.members {
		conns = append(conns, r)
	}
	members := make([]wire.AdminMember, 0, len(p.members)+len(p.guests))
	for _, g := range p.guests {
		members = append(members, wire.AdminMember{ID: g.ID, Node: p.node.ID, Via: ptr("mcp"), Since: ptr(g.since.UTC().Format(wire.TimeFormat)),
			Capabilities: orEmpty(g.Capabilities), Serves: g.Serves})
	}
	if remote {
		for _, r := range p.remote {
			members = append(members, wire.AdminMember{ID: r.ID, Node: r.node, Capabilities: orEmpty(r.Capabilities), Serves: r.Serves})
		}
	}
	v.Observers = len(p.observers)
	for _, pending := range p.proposals.pending {
		v.ProposalsPending += pending
	}
	var bans []wire.AdminBan
	for id, b := range p.bans {
		if now.Before(b.until) {
			bans = append(bans, wire.AdminBan{Participant: id, By: b.by, Reason: b.reason, Until: b.until.UTC().Format(wire.TimeFormat)})
		}
	}
	p.mu.Unlock()
	for _, r := range conns {
		members = append(members, p.adminMember(r))
	}

	slices.SortFunc(members, func(a, b wire.AdminMember) int { return strings.Compare(a.ID, b.ID) })
	v.MemberCount = len(members)
	v.Members = members[:min(len(members), maxMembers)]
	v.Bans = len(bans)
	v.Contexts.Active, v.Contexts.Concluded = p.Registry.Counts()
	grants := p.grants.All()
	v.Grants = len(grants)
	if !detail {
		return v
	}
	slices.SortFunc(bans, func(a, b wire.AdminBan) int { return strings.Compare(a.Participant, b.Participant) })
	v.BansInForce = bans[:min(len(bans), AdminListMax)]
	v.ActiveContexts = p.Registry.Query(contexts.Query{State: wire.StateActive, Limit: AdminListMax})
	v.GrantsInForce = make([]wire.AdminGrant, 0, min(len(grants), AdminListMax))
	for _, g := range grants[:min(len(grants), AdminListMax)] {
		v.GrantsInForce = append(v.GrantsInForce, wire.AdminGrant{GrantID: g.ID, Recipient: g.Recipient, Grantor: g.Grantor,
			Capabilities: g.Capabilities.Wire(), Context: g.Context, To: g.To})
	}
	v.PendingProposals = []wire.AdminProposal{}
	for _, pr := range p.ProposalsList(false) {
		if len(v.PendingProposals) == AdminListMax {
			break
		}
		call := gjson.GetManyBytes(pr.Call, "method", "params.name")
		v.PendingProposals = append(v.PendingProposals, wire.AdminProposal{ID: pr.ID, Proposer: pr.Proposer, To: pr.To, Context: pr.Context,
			Method: call[0].String(), Tool: call[1].String(), Digest: pr.Digest, Created: pr.Created, Expires: pr.Expires})
	}
	if v.ActiveContexts == nil {
		v.ActiveContexts = []wire.ContextInfo{}
	}
	if v.BansInForce == nil {
		v.BansInForce = []wire.AdminBan{}
	}
	return v
}

// adminMember is a connection of this node, for an operator.
func (p *Pod) adminMember(r *participant.Participant) wire.AdminMember {
	n, b := r.Queued()
	m := wire.AdminMember{ID: r.ID, Node: p.node.ID, Via: ptr("ws"), Since: ptr(r.Since.UTC().Format(wire.TimeFormat)),
		Protocol: r.Protocol, Queue: &wire.AdminQueue{Messages: n, Bytes: b},
		Capabilities: orEmpty(r.Caps().Wire()), Serves: r.Serves()}
	if addr := r.RemoteAddr(); addr != "" {
		m.Addr = ptr(addr)
	}
	return m
}

// LocalMember reports whether id is a member of the pod on this node: a
// connection, an MCP session, or a connection that observes.
func (p *Pod) LocalMember(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.members[id] != nil || p.guests[id] != nil {
		return true
	}
	for o := range p.observers {
		if o.ID == id {
			return true
		}
	}
	return false
}

// CheckKick checks a kick's fields as gateway/kick does (docs/protocol.md
// section 6): a valid participant id, a reason of at most 80 bytes, a ban
// of 0 to a week.
func CheckKick(k wire.Kick) error {
	switch {
	case !envelope.ValidParticipantID(k.Participant):
		return fmt.Errorf("participant must be a participant id: 1 to 128 characters of [A-Za-z0-9._:@-]")
	case k.BanMS < 0 || k.BanMS > maxBanMS:
		return fmt.Errorf("ban_ms must be 0 to %d (a week)", maxBanMS)
	case len(k.Reason) > maxReasonBytes:
		return fmt.Errorf("reason is over %d bytes", maxReasonBytes)
	}
	return nil
}

// AdminKick kicks k.Participant out of the pod as by, an operator
// (wire.AdminID), as gateway/kick does: in the pod's order, so that every
// node closes its connections (4410) and keeps its ban, and the history
// keeps the kick. Check k first (CheckKick). It returns once the kick is
// in the pod's order (Settle): when this node follows the stream, once it
// came back.
func (p *Pod) AdminKick(by string, k wire.Kick) wire.Kicked {
	p.lock()
	answer := p.commitKick(by, nil, audit.TransportAdmin, k, timeNow())
	p.unlock()
	p.Settle()
	return answer
}

// AdminRevoke ends the grant grantID as by, an operator (wire.AdminID),
// whoever granted it: a capability/revoke envelope from by, to the
// grant's recipient, in the pod's order, which every node applies as its
// grantor's revoke (applyCapability) and the history keeps. The answer is
// the grant as it was; the refusal is not_found when no grant of that id
// is in force.
func (p *Pod) AdminRevoke(by, grantID, reason string) (wire.CapabilityEvent, *envelope.Error) {
	p.lock()
	var found *capability.Ended
	for _, g := range p.grants.All() {
		if g.ID == grantID {
			found = &g
			break
		}
	}
	if found == nil {
		p.unlock()
		return wire.CapabilityEvent{}, envelope.Errorf(wire.CodeNotFound, "pod %q holds no grant %q in force (never made, revoked, or ended)", p.Name, grantID)
	}
	now := timeNow()
	id := newID()
	payload, _ := json.Marshal(wire.Revoke{Recipient: found.Recipient, GrantID: grantID, Reason: reason})
	body, err := json.Marshal(struct {
		Protocol string          `json:"protocol"`
		ID       string          `json:"id"`
		TS       string          `json:"ts"`
		From     string          `json:"from"`
		To       []string        `json:"to"`
		Kind     string          `json:"kind"`
		Payload  json.RawMessage `json:"payload"`
	}{wire.ProtocolMCPP, id, now.UTC().Format(wire.TimeFormat), by, []string{found.Recipient}, wire.KindRevoke, payload})
	if err != nil {
		panic("pod: an operator's revoke does not marshal: " + err.Error()) // strings only
	}
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCapability, Origin: p.node.ID, From: by,
		To: []string{found.Recipient}, ID: id, Seq: p.node.frameSeq.Add(1), Protocol: protocolSpan}
	p.commit(&m, body, envelope.Frame(&m, body), 0, now)
	p.audit(audit.Record{Decision: audit.Revoke, Participant: found.Recipient, By: by, GrantID: grantID,
		Capabilities: found.Capabilities.Wire(), Context: found.Context, To: found.To, Reason: reason, EnvelopeID: id, Transport: audit.TransportAdmin})
	p.unlock()
	p.Settle()
	return wire.CapabilityEvent{Event: wire.CapabilityRevoked, GrantID: grantID, Recipient: found.Recipient, Grantor: found.Grantor,
		Capabilities: found.Capabilities.Wire(), Context: found.Context, To: found.To, Reason: reason}, nil
}

// grantorOf is who made grant id of g ("" when none is in force): an
// operator's revoke ends it as its grantor's would.
func grantorOf(g *capability.Grants, id string) string {
	for _, gr := range g.List() {
		if gr.ID == id {
			return gr.Grantor
		}
	}
	return ""
}

func ptr(s string) *string { return &s }

// orEmpty is caps, or an empty list for none: a member's capabilities are
// always a list on the wire.
func orEmpty(caps []wire.Capability) []wire.Capability {
	if caps == nil {
		return []wire.Capability{}
	}
	return caps
}
