package mcpendpoint

import (
	"encoding/json"

	"github.com/mcpp/gateway/wire"
)

// The arguments and results of the MCP tools (docs/protocol.md section 9).
// Their JSON Schemas are derived from these types (schema.go); the
// jsonschema tags are the descriptions the model reads, so they say what
// to pass and what comes back in the pod's terms.
//
// Where a tool takes or returns a shape of the protocol, it is wire's own
// type, whose jsonschema tags describe it: pod_history takes a
// wire.HistoryRequest and pod_read and pod_history return a
// wire.HistoryAnswerOf[json.RawMessage] (pod.RawHistory); pod_contexts takes a
// wire.ContextsRequest and returns a wire.ContextsAnswer; pod_filter takes
// and returns a wire.Filter; a refusal is a wire.ErrorPayload; identities
// and a context's statistics are wire.Identity and wire.ContextStats. The
// types below are the shapes that exist only here.

// readArgs are pod_read's: the cursor read of section 9 has no request of
// the protocol.
type readArgs struct {
	Limit  int `json:"limit,omitempty" jsonschema:"the most envelopes to return (1 to 1000, default 50); more says when others are waiting"`
	WaitMS int `json:"wait_ms,omitempty" jsonschema:"when nothing new is there, wait up to this many milliseconds (0 to 30000) for something to arrive, and return as soon as it does; 0 returns at once"`
	// MaxTokens bounds the answer by token estimate (docs/protocol.md
	// section 9).
	MaxTokens int `json:"max_tokens,omitempty" jsonschema:"the most tokens the envelopes returned may add up to (the gateway's estimate); the answer stops before the first envelope that would go over it, so an envelope larger than this is returned only without max_tokens (more is then true and envelopes empty)"`
}

// sendArgs are pod_send's: the fields of an envelope that a sender
// chooses (the gateway fills protocol, id, ts and from), held raw so that
// ingress judges them exactly as it judges a WebSocket message's.
type sendArgs struct {
	Kind          string          `json:"kind" jsonschema:"what the envelope is, e.g. chat, mcp/request:tools/call, reasoning/step; you need a capability that matches it; system/* and gateway/* are reserved"`
	Payload       json.RawMessage `json:"payload,omitempty" jsonschema:"the content: any JSON value, relayed as is (e.g. {\"text\": \"hello\"})"`
	To            []string        `json:"to,omitempty" jsonschema:"participant ids to address it to; leave it out to send to everyone in the pod"`
	Context       json.RawMessage `json:"context,omitempty" jsonschema:"the sub-context it belongs to: {\"id\": ID} (with type and parent when you open one) or a path string \"root/child\"; leave it out for the pod's main conversation"`
	CorrelationID json.RawMessage `json:"correlation_id,omitempty" jsonschema:"the id (or ids) of the envelope(s) this one answers"`
	Lifecycle     json.RawMessage `json:"lifecycle,omitempty" jsonschema:"how the pod's history keeps it: {\"mode\": \"ephemeral\"} never stored; {\"mode\": \"transient\", \"summary\": TEXT} replayed whole until consumed, then as its summary; {\"consumes\": [IDs]} consumes earlier transient envelopes"`
}

// sendResult is pod_send's: the protocol answers a relayed envelope with
// nothing, a publish request with its id.
type sendResult struct {
	ID     string          `json:"id" jsonschema:"the id the relayed envelope got"`
	Answer json.RawMessage `json:"answer,omitempty" jsonschema:"the gateway's answer, for a capability/grant or capability/revoke: the system/capability payload"`
}

// branchArgs, branchResult, returnArgs and returnResult are
// context_branch's and context_return's, which section 9 defines over the
// envelopes they send (a context/branch and a conclusion).
type branchArgs struct {
	Description string `json:"description" jsonschema:"what you are going to work out in the sub-context; others see it when it opens"`
	Type        string `json:"type,omitempty" jsonschema:"the sub-context's type (default reasoning); participants filter on it"`
	Parent      string `json:"parent,omitempty" jsonschema:"the id of the sub-context to nest this one in; leave it out to branch from the main conversation"`
}

type branchResult struct {
	Context branchContext `json:"context"`
}

// branchContext is the context a branch opened: wire.Context's id, type
// and parent, without its metadata and with the depth the registry gave it.
type branchContext struct {
	ID     string `json:"id" jsonschema:"the new sub-context's id: pass it as context to pod_send, and to context_return when done"`
	Type   string `json:"type" jsonschema:"its type"`
	Parent string `json:"parent,omitempty" jsonschema:"its parent's id, when it has one"`
	Depth  int    `json:"depth" jsonschema:"its nesting depth: 1 for a root, 2 for its child, and so on up to the gateway's max_depth"`
}

type returnArgs struct {
	Context string `json:"context" jsonschema:"the id of the sub-context to conclude: one that you opened with context_branch and that is still open"`
	Summary string `json:"summary" jsonschema:"what came of it: the conclusion that stays in the pod's main view once the sub-context folds"`
}

type returnResult struct {
	Context string            `json:"context" jsonschema:"the concluded sub-context's id"`
	Stats   wire.ContextStats `json:"stats" jsonschema:"the sub-context's statistics, as its system/context event reports them"`
}

// participantsResult is pod_participants': the welcome's participants
// with the caller among them.
type participantsResult struct {
	Participants []wire.Identity `json:"participants" jsonschema:"everyone present in the pod, on every gateway node, you included"`
}
