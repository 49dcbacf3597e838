package mcpendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// The tools of docs/protocol.md section 9. Each result is the JSON of its
// structured content in one text item (the SDK writes both); a refusal
// sets isError and carries the system/error payload a WebSocket
// participant would get.

func (e *Endpoint) addTools(s *mcp.Server) {
	no, yes := false, true
	addTool(e, s, &mcp.Tool{Name: "pod_read", Title: "Read the pod",
		Description: "Returns the envelopes that arrived in the pod since your previous pod_read (the first time: since you joined), " +
			"oldest first, as your filter admits them. A sub-context that has concluded shows only its conclusion and its system/context event. " +
			"Pass wait_ms to wait for something new instead of calling again and again. For what happened before you joined, use pod_history.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &yes},
	}, schemaFor[readArgs](func(p map[string]*jsonschema.Schema) {
		withDefault(p["limit"], defaultReadLimit)
		withRange(p["limit"], 1, maxReadLimit)
		withRange(p["wait_ms"], 0, float64(maxReadWait.Milliseconds()))
	}), schemaFor[pod.RawHistory](func(p map[string]*jsonschema.Schema) {
		p["more"].Description = "true when more envelopes are there than this answer holds: call again to get them"
	}), e.podRead)

	addTool(e, s, &mcp.Tool{Name: "pod_history", Title: "Page through the pod's history",
		Description: "Returns a page of the pod's stored history that your filter admits, oldest first: by default the newest 100 envelopes. " +
			"Page back with before (the id of the oldest envelope you have), forward with after; narrow to one sub-context and its descendants with context.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &yes},
	}, schemaFor[wire.HistoryRequest](func(p map[string]*jsonschema.Schema) {
		withDefault(p["limit"], pod.DefaultHistoryLimit)
		withRange(p["limit"], 1, pod.MaxHistoryLimit)
		withDefault(p["fold"], true)
	}), schemaFor[pod.RawHistory](func(p map[string]*jsonschema.Schema) {
		p["more"].Description = "true when envelopes were left out: older ones (page back with before the oldest id), or with after newer ones"
	}), e.podHistory)

	addTool(e, s, &mcp.Tool{Name: "pod_send", Title: "Send an envelope",
		Description: "Sends one envelope to the pod, from you, to everyone or to the participants in to. " +
			"The gateway checks it as it checks any participant's (capabilities, rate limits, sub-context rules) and returns the id it got.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, schemaFor[sendArgs](func(p map[string]*jsonschema.Schema) {
		p["context"] = contextSchema(p["context"].Description)
		p["correlation_id"] = correlationSchema(p["correlation_id"].Description)
		p["lifecycle"] = lifecycleSchema(p["lifecycle"].Description)
		p["kind"].MinLength = jsonschema.Ptr(1)
	}), schemaFor[sendResult](nil), e.podSend)

	addTool(e, s, &mcp.Tool{Name: "context_branch", Title: "Open a sub-context",
		Description: "Opens a sub-context (a branch of the conversation) in which to work something out step by step: " +
			"send your steps with pod_send and context set to the returned id, then call context_return with a summary. " +
			"Participants that follow only conclusions see the summary, not the steps.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, schemaFor[branchArgs](func(p map[string]*jsonschema.Schema) {
		withDefault(p["type"], "reasoning")
	}), schemaFor[branchResult](nil), e.contextBranch)

	addTool(e, s, &mcp.Tool{Name: "context_return", Title: "Conclude a sub-context",
		Description: "Concludes a sub-context you opened with context_branch: sends its conclusion (your summary) in it, which closes it and its open children, " +
			"and returns its statistics (envelopes, bytes, participants, depth, times).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, schemaFor[returnArgs](func(p map[string]*jsonschema.Schema) {
		p["context"].MinLength = jsonschema.Ptr(1)
	}), schemaFor[returnResult](nil), e.contextReturn)

	addTool(e, s, &mcp.Tool{Name: "pod_contexts", Title: "List sub-contexts",
		Description: "Lists the pod's sub-contexts with their type, parent, depth, state, creator and activity: by default the open ones, oldest first.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &yes},
	}, schemaFor[wire.ContextsRequest](func(p map[string]*jsonschema.Schema) {
		withEnum(p["state"], wire.StateActive, wire.StateConcluded, wire.StateAll)
		withDefault(p["state"], wire.StateActive)
		withDefault(p["limit"], pod.DefaultContextsLimit)
		p["limit"].Minimum = jsonschema.Ptr(1.0)
	}), schemaFor[wire.ContextsAnswer](nil), e.podContexts)

	addTool(e, s, &mcp.Tool{Name: "pod_filter", Title: "Choose what pod_read returns",
		Description: "Changes your filter, which decides what pod_read and pod_history return; fields you leave out keep their value. " +
			"Presets: the main conversation only {\"contexts\": \"none\"}; main plus reasoning {\"contexts\": \"none\", \"types\": [\"reasoning\"]}; " +
			"main plus every conclusion {\"contexts\": \"none\", \"conclusions\": true}; everything {\"main\": true, \"contexts\": \"all\"}. " +
			"Envelopes addressed to you always pass. Returns the effective filter.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, schemaFor[wire.Filter](func(p map[string]*jsonschema.Schema) {
		withEnum(p["contexts"], wire.ContextsAll, wire.ContextsNone)
		withEnum(p["routing"], wire.RoutingAll, wire.RoutingDirected)
	}), effectiveFilterSchema(), e.podFilter)

	addTool(e, s, &mcp.Tool{Name: "pod_participants", Title: "Who is in the pod",
		Description: "Lists the participants present in the pod, on every gateway node, you included, with the kinds each may send.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &yes},
	}, schemaFor[struct{}](nil), schemaFor[participantsResult](nil), e.podParticipants)

	addTool(e, s, &mcp.Tool{Name: "participant_kick", Title: "Remove a participant from the pod",
		Description: "Removes a participant from the pod (you need the gateway/kick capability): its connections and sessions are closed, " +
			"everyone sees it leave with your reason, and its joins are refused for ban_ms milliseconds.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &yes},
	}, schemaFor[wire.Kick](func(p map[string]*jsonschema.Schema) {
		p["participant"].MinLength = jsonschema.Ptr(1)
		withRange(p["ban_ms"], 0, 7*24*3600*1000)
	}), schemaFor[wire.Kicked](nil), e.participantKick)
}

// toolFunc is a tool's work for one member. A refused call returns a
// refused error; any other error is a protocol error.
type toolFunc[In any] func(ctx context.Context, m *member, req *mcp.CallToolRequest, args In) (any, error)

// addTool adds a tool whose arguments the SDK validates against in and
// decodes into In, and whose result it checks against out.
func addTool[In any](e *Endpoint, s *mcp.Server, t *mcp.Tool, in, out *jsonschema.Schema, fn toolFunc[In]) {
	t.InputSchema, t.OutputSchema = in, resultSchema(out)
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, args In) (*mcp.CallToolResult, any, error) {
		m := memberOf(ctx)
		if m == nil {
			return nil, nil, errSessionEnded
		}
		result, err := fn(ctx, m, req, args)
		var no refused
		var protocol *jsonrpc.Error
		switch {
		case errors.As(err, &no):
			return refusalResult(no), nil, nil
		case errors.As(err, &protocol):
			return nil, nil, protocol
		case err != nil:
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		return nil, result, nil
	})
}

// refused is a call the gateway refused: the system/error payload of
// docs/protocol.md section 5 ({"error", "message", "retryable", …}).
type refused struct{ payload wire.ErrorPayload }

func (r refused) Error() string { return r.payload.String() }

// refuse is e as a refused call.
func refuse(e *envelope.Error) refused { return refused{e.Payload()} }

// refusalResult is a refused call's result: isError, the refusal as
// structured content and as its JSON text.
func refusalResult(r refused) *mcp.CallToolResult {
	b, err := json.Marshal(r.payload)
	if err != nil {
		b = []byte(`{"error":"invalid_envelope","message":"the refusal does not marshal"}`) // never: Payload's details are JSON
	}
	return &mcp.CallToolResult{IsError: true, StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// argumentsCode is the code of arguments that do not fit a tool's schema:
// a filter's (pod_filter) are invalid_filter, as gateway/filter's are,
// the others' invalid_envelope, as a payload that does not fit a request.
func argumentsCode(tool string) wire.Code {
	if tool == "pod_filter" {
		return wire.CodeInvalidFilter
	}
	return wire.CodeInvalidEnvelope
}

// toolErrorText is the text of a tool error the SDK wrote.
func toolErrorText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "the arguments do not fit the tool's input schema"
	}
	return strings.Join(parts, "; ")
}

// take takes one token of the participant's --rate bucket: every tool call
// costs one, as every WebSocket message does (the relaying tools take it
// through ingress).
func (m *member) take() error {
	if ok, d := limits.Take(m.buckets.Send, time.Now()); !ok {
		cfg := &m.e.g.Node.Config
		return refuse(limits.RateError(wire.CodeRateLimited, d, "over your rate of %g envelopes a second (burst %d)", cfg.Rate, cfg.Burst))
	}
	return nil
}

func (e *Endpoint) podRead(ctx context.Context, m *member, _ *mcp.CallToolRequest, args readArgs) (any, error) {
	if err := m.take(); err != nil {
		return nil, err
	}
	if args.MaxTokens < 0 {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "max_tokens must be 1 or more (or left out)"))
	}
	answer, err := m.read(ctx, args.Limit, args.MaxTokens, time.Duration(args.WaitMS)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return answer, nil
}

func (e *Endpoint) podHistory(_ context.Context, m *member, _ *mcp.CallToolRequest, args wire.HistoryRequest) (any, error) {
	if args.Before != "" && args.After != "" {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "pod_history takes before or after, not both"))
	}
	if args.MaxTokens < 0 {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "max_tokens must be 1 or more (or left out)"))
	}
	q := history.PageQuery{Before: args.Before, After: args.After, Context: args.Context, Limit: args.Limit,
		Fold: args.Fold == nil || *args.Fold, MaxBytes: 4 * e.g.Node.Config.MaxMessageBytes, MaxTokens: args.MaxTokens}
	// An unknown before or after is invalid_envelope, before rate_limited,
	// as for gateway/history.
	if refusal := m.pod.CheckBound(q); refusal != nil {
		return nil, refuse(refusal)
	}
	if err := m.take(); err != nil {
		return nil, err
	}
	answer, refusal := m.pod.HistoryPage(q, m.filter.Load(), m.id, wire.ProtocolMCPP)
	if refusal != nil {
		return nil, refuse(refusal)
	}
	return answer, nil
}

func (e *Endpoint) podContexts(_ context.Context, m *member, _ *mcp.CallToolRequest, args wire.ContextsRequest) (any, error) {
	if err := m.take(); err != nil {
		return nil, err
	}
	// Active and retained contexts are each bounded by the pod cap.
	q := contexts.Query{State: args.State, ID: args.ID, Type: args.Type, Limit: min(args.Limit, 2*e.g.Node.Config.MaxContextsPerPod)}
	list := m.pod.Registry.Query(q)
	if list == nil {
		list = []wire.ContextInfo{}
	}
	return wire.ContextsAnswer{Contexts: list}, nil
}

func (e *Endpoint) podFilter(_ context.Context, m *member, req *mcp.CallToolRequest, _ wire.Filter) (any, error) {
	if err := m.take(); err != nil {
		return nil, err
	}
	// The arguments as sent: a field given is a field set, as in
	// gateway/filter.
	raw := req.Params.Arguments
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	f, err := m.filter.Load().Update(raw)
	if err != nil {
		return nil, refuse(envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message))
	}
	m.filter.Store(f)
	return f.Wire(), nil
}

func (e *Endpoint) podParticipants(_ context.Context, m *member, _ *mcp.CallToolRequest, _ struct{}) (any, error) {
	if err := m.take(); err != nil {
		return nil, err
	}
	ids := m.pod.Participants()
	for i := range ids {
		if ids[i].Capabilities == nil {
			ids[i].Capabilities = []wire.Capability{} // a list, as the schema says
		}
	}
	return participantsResult{Participants: ids}, nil
}
