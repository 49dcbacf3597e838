package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// The tools that send: each builds one envelope and runs it through the
// same ingress as a WebSocket message (as POST /pods/NAME/envelopes does,
// without a connection), so the same rules, codes, capabilities and rate
// buckets apply.

// outgoing is an envelope a tool sends; the gateway fills the rest. It is
// not a wire.Envelope: its fields are the tool's arguments as given (raw
// JSON), so that ingress judges them exactly as it judges a WebSocket
// message, where decoding them into wire's types first would refuse or
// reshape some before ingress sees them.
type outgoing struct {
	ID            string          `json:"id,omitempty"`
	To            []string        `json:"to,omitempty"`
	Kind          string          `json:"kind"`
	CorrelationID json.RawMessage `json:"correlation_id,omitempty"`
	Context       json.RawMessage `json:"context,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	Lifecycle     json.RawMessage `json:"lifecycle,omitempty"`
	// Trace is the trace context of the host's request the envelope is
	// part of (traceField): its _meta.traceparent, or the gateway's span.
	Trace *wire.Trace `json:"trace,omitempty"`
}

// relayed is what ingress recorded of an accepted envelope.
type relayed struct {
	id string
	// answer is the gateway's answer to it, if any (a capability/grant's).
	answer json.RawMessage
	// depth is its context's depth (0 without a context).
	depth int
	// concluded are the contexts it concluded, in event order.
	concluded []contexts.Concluded
}

// relay checks and publishes env as the member's; a refusal is a refused
// error.
func (m *member) relay(env outgoing) (relayed, error) {
	data, err := json.Marshal(env)
	if err != nil {
		return relayed{}, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "the envelope does not marshal: %v", err))
	}
	var results pod.Results
	from := &pod.Sender{ID: m.id, Caps: m.caps.Load(), Protocol: wire.ProtocolMCPP, Buckets: m.buckets, Guest: m.guest, Reply: &results}
	outcome := m.pod.Handle(from, nil, data, false) // one envelope: its own burst
	m.pod.Throttle(nil)
	if len(results) != 1 {
		return relayed{}, fmt.Errorf("ingress answered %d results for one envelope", len(results))
	}
	r := results[0]
	if r.Error != nil {
		return relayed{}, refused{*r.Error}
	}
	return relayed{id: r.ID, answer: r.Answer, depth: outcome.Depth, concluded: outcome.Concluded}, nil
}

func (e *Endpoint) podSend(ctx context.Context, m *member, _ *mcp.CallToolRequest, args sendArgs) (any, error) {
	if strings.HasPrefix(args.Kind, "gateway/") {
		return nil, refuse(envelope.Errorf(wire.CodeUnknownRequest,
			"pod_send relays envelopes to the pod; ask the gateway with pod_history, pod_contexts, pod_filter and participant_kick"))
	}
	r, err := m.relay(outgoing{To: args.To, Kind: args.Kind, CorrelationID: args.CorrelationID, Context: args.Context,
		Payload: args.Payload, Lifecycle: args.Lifecycle, Trace: traceField(ctx)})
	if err != nil {
		return nil, err
	}
	return sendResult{ID: r.id, Answer: r.answer}, nil
}

// participantKick is gateway/kick (docs/protocol.md section 6), which the
// member's capabilities must allow as they do over WebSocket.
func (e *Endpoint) participantKick(ctx context.Context, m *member, _ *mcp.CallToolRequest, args wire.Kick) (any, error) {
	payload, err := json.Marshal(args)
	if err != nil {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "%v", err))
	}
	r, err := m.relay(outgoing{Kind: wire.RequestKick, Payload: payload, Trace: traceField(ctx)})
	if err != nil {
		return nil, err
	}
	var out wire.Kicked
	if err := json.Unmarshal(r.answer, &out); err != nil {
		return nil, fmt.Errorf("gateway/kick answered %q: %w", r.answer, err)
	}
	return out, nil
}

func (e *Endpoint) contextBranch(ctx context.Context, m *member, _ *mcp.CallToolRequest, args branchArgs) (any, error) {
	c := wire.Context{ID: uuid.NewString(), Type: args.Type, Parent: args.Parent}
	payload, _ := json.Marshal(wire.Branch{Description: args.Description})
	r, err := m.relay(outgoing{Kind: wire.KindContextBranch, Context: c.JSON(), Payload: payload, Trace: traceField(ctx)})
	if err != nil {
		return nil, err
	}
	m.opened(c.ID)
	return branchResult{Context: branchContext{ID: c.ID, Type: c.Type, Parent: c.Parent, Depth: r.depth}}, nil
}

func (e *Endpoint) contextReturn(ctx context.Context, m *member, _ *mcp.CallToolRequest, args returnArgs) (any, error) {
	if !m.pod.Registry.Concludes(wire.KindConclusion) {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope,
			"this gateway's --conclusion-kinds leave out %q, so a sub-context cannot be returned from here: send one of its conclusion kinds with pod_send", wire.KindConclusion))
	}
	open := m.pod.Registry.Query(contexts.Query{State: wire.StateActive, ID: args.Context, Limit: 1})
	switch {
	case len(open) == 0:
		return nil, refuse(envelope.Errorf(wire.CodeInvalidContext,
			"sub-context %q is not open (it concluded, timed out, or was never opened): there is nothing to return from", args.Context))
	case open[0].Creator != m.id:
		return nil, refuse(envelope.Errorf(wire.CodeAuthViolation,
			"sub-context %q was opened by %s: only the participant that opened it returns from it", args.Context, open[0].Creator))
	}
	payload, _ := json.Marshal(wire.Conclusion{Summary: args.Summary})
	r, err := m.relay(outgoing{Kind: wire.KindConclusion, Context: wire.Context{ID: args.Context}.JSON(), Payload: payload, Trace: traceField(ctx)})
	if err != nil {
		return nil, err
	}
	for i := range r.concluded {
		if c := &r.concluded[i]; c.ID == args.Context {
			return returnResult{Context: c.ID, Stats: pod.ContextStats(c)}, nil
		}
	}
	// Between the check and the conclusion the context timed out, and the
	// conclusion opened and closed a new one of the same id: unlikely.
	return nil, fmt.Errorf("sub-context %q concluded, but not by this conclusion", args.Context)
}
