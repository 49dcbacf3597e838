package gateway

import (
	"encoding/json"
)

// The arguments and results of the MCP tools (SPEC section 9). Their JSON
// Schemas are derived from these types (mcp_schema.go); the jsonschema
// tags are the descriptions the model reads, so they say what to pass and
// what comes back in the pod's terms.

type readArgs struct {
	Limit  int `json:"limit,omitempty" jsonschema:"the most envelopes to return (1 to 1000, default 50); more says when others are waiting"`
	WaitMS int `json:"wait_ms,omitempty" jsonschema:"when nothing new is there, wait up to this many milliseconds (0 to 30000) for something to arrive, and return as soon as it does; 0 returns at once"`
}

type envelopesResult struct {
	Envelopes []json.RawMessage `json:"envelopes" jsonschema:"envelopes of the pod, oldest first, as relayed: protocol, id, ts, from, to, kind, correlation_id, context, payload, lifecycle; system/context envelopes report a concluded sub-context and its stats"`
	More      bool              `json:"more" jsonschema:"true when more envelopes are there than this answer holds: call again to get them"`
}

type historyArgs struct {
	Before  string `json:"before,omitempty" jsonschema:"return envelopes older than the envelope with this id (exclusive); not with after"`
	After   string `json:"after,omitempty" jsonschema:"return envelopes newer than the envelope with this id (exclusive); not with before"`
	Context string `json:"context,omitempty" jsonschema:"keep only this sub-context id and its descendants"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the most envelopes to return (1 to 1000, default 100)"`
	Fold    bool   `json:"fold,omitempty" jsonschema:"true (default): a concluded sub-context shows only its conclusion and its system/context event, and consumed transient envelopes their summary; false: everything as relayed"`
}

type sendArgs struct {
	Kind          string          `json:"kind" jsonschema:"what the envelope is, e.g. chat, mcp/request:tools/call, reasoning/step; you need a capability that matches it; system/* and gateway/* are reserved"`
	Payload       json.RawMessage `json:"payload,omitempty" jsonschema:"the content: any JSON value, relayed as is (e.g. {\"text\": \"hello\"})"`
	To            []string        `json:"to,omitempty" jsonschema:"participant ids to address it to; leave it out to send to everyone in the pod"`
	Context       json.RawMessage `json:"context,omitempty" jsonschema:"the sub-context it belongs to: {\"id\": ID} (with type and parent when you open one) or a path string \"root/child\"; leave it out for the pod's main conversation"`
	CorrelationID json.RawMessage `json:"correlation_id,omitempty" jsonschema:"the id (or ids) of the envelope(s) this one answers"`
	Lifecycle     json.RawMessage `json:"lifecycle,omitempty" jsonschema:"how the pod's history keeps it: {\"mode\": \"ephemeral\"} never stored; {\"mode\": \"transient\", \"summary\": TEXT} replayed whole until consumed, then as its summary; {\"consumes\": [IDs]} consumes earlier transient envelopes"`
}

type sendResult struct {
	ID string `json:"id" jsonschema:"the id the relayed envelope got"`
}

type branchArgs struct {
	Description string `json:"description" jsonschema:"what you are going to work out in the sub-context; others see it when it opens"`
	Type        string `json:"type,omitempty" jsonschema:"the sub-context's type (default reasoning); participants filter on it"`
	Parent      string `json:"parent,omitempty" jsonschema:"the id of the sub-context to nest this one in; leave it out to branch from the main conversation"`
}

type branchResult struct {
	Context branchContext `json:"context"`
}

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
	Context string     `json:"context" jsonschema:"the concluded sub-context's id"`
	Stats   mcpCtxStat `json:"stats" jsonschema:"the sub-context's statistics, as its system/context event reports them"`
}

// mcpCtxStat is contextStats (messages.go), described.
type mcpCtxStat struct {
	Messages     int64    `json:"messages" jsonschema:"envelopes relayed in the sub-context, the conclusion included"`
	Bytes        int64    `json:"bytes" jsonschema:"their sizes, summed"`
	Participants []string `json:"participants" jsonschema:"the distinct senders"`
	Depth        int      `json:"depth" jsonschema:"its nesting depth"`
	Created      string   `json:"created" jsonschema:"when it opened (RFC 3339)"`
	LastActivity string   `json:"last_activity" jsonschema:"its last envelope (RFC 3339)"`
	Concluded    string   `json:"concluded" jsonschema:"when it concluded (RFC 3339)"`
}

type contextsArgs struct {
	State string `json:"state,omitempty" jsonschema:"active (default): open sub-contexts; concluded: those concluded within --context-retention; all: both"`
	ID    string `json:"id,omitempty" jsonschema:"only the sub-context with this id"`
	Type  string `json:"type,omitempty" jsonschema:"only sub-contexts of this type"`
	Limit int    `json:"limit,omitempty" jsonschema:"the most to list, oldest first (default 1000)"`
}

type contextsResult struct {
	Contexts []mcpCtxInfo `json:"contexts"`
}

// mcpCtxInfo is contexts.Info, described.
type mcpCtxInfo struct {
	ID           string   `json:"id"`
	Type         *string  `json:"type" jsonschema:"its type, or null"`
	Parent       *string  `json:"parent" jsonschema:"its parent's id, or null for a root"`
	Depth        int      `json:"depth" jsonschema:"its nesting depth"`
	State        string   `json:"state" jsonschema:"active or concluded"`
	Reason       *string  `json:"reason" jsonschema:"why it concluded (conclusion, timeout or parent_concluded), or null while active"`
	Creator      string   `json:"creator" jsonschema:"the participant that opened it"`
	Messages     int64    `json:"messages" jsonschema:"envelopes relayed in it"`
	Bytes        int64    `json:"bytes" jsonschema:"their sizes, summed"`
	Participants []string `json:"participants" jsonschema:"the distinct senders"`
	Created      string   `json:"created" jsonschema:"when it opened (RFC 3339)"`
	LastActivity string   `json:"last_activity" jsonschema:"its last envelope (RFC 3339)"`
	Concluded    *string  `json:"concluded" jsonschema:"when it concluded (RFC 3339), or null while active"`
}

// filterArgs is a filter (SPEC section 4) for pod_filter: fields left out
// keep their value. The tool reads the arguments themselves, so a field
// given is a field set.
type filterArgs struct {
	Main         *bool    `json:"main,omitempty" jsonschema:"envelopes of the main conversation (no sub-context)"`
	Contexts     string   `json:"contexts,omitempty" jsonschema:"all: every envelope in a sub-context; none: only those the fields below admit"`
	Types        []string `json:"types,omitempty" jsonschema:"also admit sub-contexts of these types"`
	ExcludeTypes []string `json:"exclude_types,omitempty" jsonschema:"never admit sub-contexts of these types (wins over every other field)"`
	IDs          []string `json:"ids,omitempty" jsonschema:"also admit these sub-context ids"`
	Subtree      *bool    `json:"subtree,omitempty" jsonschema:"ids also admit their descendants"`
	Conclusions  *bool    `json:"conclusions,omitempty" jsonschema:"also admit the conclusions (and system/context events) of every sub-context"`
	Routing      string   `json:"routing,omitempty" jsonschema:"all: everything; directed: drop envelopes addressed only to others"`
	Echo         *bool    `json:"echo,omitempty" jsonschema:"also read your own envelopes"`
	Batch        *bool    `json:"batch,omitempty" jsonschema:"WebSocket batching; no effect on pod_read"`
}

// mcpFilter is filter.Filter's JSON, described: the effective filter.
type mcpFilter struct {
	Main         bool     `json:"main" jsonschema:"envelopes of the main conversation are admitted"`
	Contexts     string   `json:"contexts" jsonschema:"all or none"`
	Types        []string `json:"types"`
	ExcludeTypes []string `json:"exclude_types"`
	IDs          []string `json:"ids"`
	Subtree      bool     `json:"subtree"`
	Conclusions  bool     `json:"conclusions"`
	Routing      string   `json:"routing" jsonschema:"all or directed"`
	Echo         bool     `json:"echo"`
	Batch        bool     `json:"batch"`
}

type participantsResult struct {
	Participants []mcpIdentity `json:"participants" jsonschema:"everyone present in the pod, on every gateway node, you included"`
}

// mcpIdentity is identity, described.
type mcpIdentity struct {
	ID           string   `json:"id" jsonschema:"the participant's id: use it in to"`
	Capabilities []string `json:"capabilities" jsonschema:"the kinds it may send (patterns: * matches all, mcp/* a prefix)"`
}

// mcpRefusal is the structured content of a refused call (isError): the
// payload of the system/error a WebSocket participant would get.
type mcpRefusal struct {
	Error        string `json:"error" jsonschema:"the refusal's code (SPEC section 5), e.g. rate_limited, capability_violation, invalid_context"`
	Message      string `json:"message" jsonschema:"what was wrong, in words"`
	Retryable    bool   `json:"retryable" jsonschema:"true when the same call may succeed later"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty" jsonschema:"for the rate limits: wait this long before retrying"`
}
