package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// The proposals' tools (docs/protocol.md sections 9 and 11): a host lists
// the pod's proposals (gateway/proposals), waits for the outcome of one
// its call became, and approves one it may make itself (gateway/approve).
// Rejecting is an envelope, mcp/reject, sent with pod_send.

type proposalsArgs struct {
	State string `json:"state,omitempty" jsonschema:"pending (the default): the proposals waiting for a decision; all: also the ended ones the gateway still holds, with their state"`
}

type waitArgs struct {
	Proposal string `json:"proposal" jsonschema:"the proposal's id, as the call that became it said"`
	WaitMS   int    `json:"wait_ms,omitempty" jsonschema:"wait up to this many milliseconds (0 to 30000) for the decision and the call's answer"`
}

func (e *mcpEndpoint) addProposalTools(s *mcp.Server) {
	yes := true
	addTool(e, s, &mcp.Tool{Name: "pod_proposals", Title: "List proposed calls",
		Description: "Lists the calls proposed in the pod (mcp/proposal): who proposed which call to whom, and, with state all, what became of the ended ones. " +
			"A participant that may make a proposed call itself may approve it (proposal_approve) or reject it (pod_send an mcp/reject with correlation_id the proposal's id and {\"reason\": TEXT}).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &yes},
	}, schemaFor[proposalsArgs](func(p map[string]*jsonschema.Schema) {
		withEnum(p["state"], wire.ProposalPending, wire.StateAll)
		withDefault(p["state"], wire.ProposalPending)
	}), schemaFor[wire.ProposalsAnswer](nil), e.podProposals)

	s.AddTool(&mcp.Tool{Name: "proposal_wait", Title: "Wait for a proposed call",
		Description: "Waits for the outcome of a proposal your call became (when you may not make a call yourself, calling a server's tool proposes it): " +
			"the call's result once someone approved it, the rejection with its reason, or that it is still pending. Only the proposal's proposer may wait on it.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &yes},
		InputSchema: schemaFor[waitArgs](func(p map[string]*jsonschema.Schema) {
			p["proposal"].MinLength = jsonschema.Ptr(1)
			withRange(p["wait_ms"], 0, float64(maxReadWait.Milliseconds()))
		}),
	}, e.proposalWait)

	addTool(e, s, &mcp.Tool{Name: "proposal_approve", Title: "Approve a proposed call",
		Description: "Approves a proposed call you may make yourself: the gateway makes the call, exactly as proposed, for its proposer, naming you as its approver. " +
			"Give the digest pod_proposals lists with the call you read: if the proposal's id now names another call, the approval is refused (proposal_changed). " +
			"With scope always you also grant the proposer that call (its method and exact tool name, on that server alone) from now on, for the pod or a context (you need capability/grant).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes},
	}, schemaFor[wire.Approve](func(p map[string]*jsonschema.Schema) {
		p["proposal"].MinLength = jsonschema.Ptr(1)
		p["digest"].Pattern = "^sha256:[0-9a-f]{64}$"
		withEnum(p["scope"], wire.ScopeOnce, wire.ScopeAlways)
		withDefault(p["scope"], wire.ScopeOnce)
	}), schemaFor[wire.ProposalEvent](nil), e.proposalApprove)
}

func (e *mcpEndpoint) podProposals(_ context.Context, m *mcpMember, _ *mcp.CallToolRequest, args proposalsArgs) (any, error) {
	if err := m.take(); err != nil {
		return nil, err
	}
	switch args.State {
	case "", wire.ProposalPending:
		return wire.ProposalsAnswer{Proposals: m.pod.ProposalsList(false)}, nil
	case wire.StateAll:
		return wire.ProposalsAnswer{Proposals: m.pod.ProposalsList(true)}, nil
	}
	return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, `state must be "pending" or "all"`))
}

func (e *mcpEndpoint) proposalWait(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	var args waitArgs
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil || args.Proposal == "" {
		return refusalResult(refuse(envelope.Errorf(wire.CodeInvalidEnvelope, `proposal_wait takes {"proposal": ID, "wait_ms"?: 0 to 30000}`))), nil
	}
	info, ok := m.pod.Proposal(args.Proposal)
	if !ok {
		return refusalResult(refuse(envelope.Errorf(wire.CodeProposalNotPending, "the pod holds no proposal %q", args.Proposal))), nil
	}
	if info.Proposer != m.id {
		// Its outcome, and the answer to the call it releases, are the
		// proposer's alone (docs/protocol.md section 9).
		return refusalResult(refuse(envelope.Errorf(wire.CodeCapabilityViolation, "proposal %q is %s's: only its proposer waits on it (pod_proposals shows its state)", args.Proposal, info.Proposer))), nil
	}
	if info.State != wire.ProposalPending {
		b, _ := json.Marshal(info)
		text := "the proposal is " + info.State + " (the answer to the call it made, if any, is in pod_read, addressed to you): " + string(b)
		return &mcp.CallToolResult{IsError: info.State != wire.ProposalApproved && info.State != wire.ProposalFulfilled,
			Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
	wait := min(time.Duration(args.WaitMS)*time.Millisecond, maxReadWait)
	hc := &hostCall{id: args.Proposal, m: m, server: info.To, rpcID: json.RawMessage(gjson.GetBytes(info.Call, "id").Raw), wait: m.pod.Await(args.Proposal, m.id)}
	return e.follow(ctx, req, hc, wait)
}

func (e *mcpEndpoint) proposalApprove(ctx context.Context, m *mcpMember, _ *mcp.CallToolRequest, args wire.Approve) (any, error) {
	payload, _ := json.Marshal(args)
	r, err := m.relay(outgoing{Kind: wire.RequestApprove, Payload: payload, Trace: traceField(ctx)})
	if err != nil {
		return nil, err
	}
	var ev wire.ProposalEvent
	_ = json.Unmarshal(r.answer, &ev)
	return ev, nil
}
