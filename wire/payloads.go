package wire

import (
	"encoding/json"
	"net/url"
	"strings"
)

// Identity is a participant as the gateway shows it to others: in the
// welcome (you, participants) and in presence events (docs/protocol.md
// section 5).
//
//	{"id": "alice", "capabilities": ["mcp/*", "chat"]}
//	{"id": "files", "capabilities": ["mcp/response", "mcp/notification"], "serves": ["mcp"]}
type Identity struct {
	ID           string       `json:"id" jsonschema:"the participant's id: use it in to"`
	Capabilities []Capability `json:"capabilities" jsonschema:"what it may send: kind patterns (* matches all, mcp/* a prefix), or objects {kind, payload} whose payload pattern the payload must match too"`
	// Serves says what the participant answers requests of, as it said
	// when it joined (QueryServes): ServesMCP for an MCP server (mcpp
	// bridge), whom an agent asks for tools/list. Absent for plain
	// participants.
	Serves []string `json:"serves,omitempty" jsonschema:"what it answers requests of: mcp for an MCP server (send it mcp/request envelopes, e.g. tools/list); absent for plain participants"`
}

// Welcome is the payload of system/welcome, the first message of every
// connection, addressed to the joiner alone (docs/protocol.md sections 5
// and 8).
//
//	{"you": {"id": "alice", "capabilities": ["*"]}, "participants": [],
//	 "pod": "lab", "filter": {"main": true, "contexts": "all", …},
//	 "limits": {"max_message_bytes": 1048576, …},
//	 "history": {"replayed": 3, "folded": 12, "collapsed": 1}}
type Welcome struct {
	// You is the joiner: the id the gateway knows it by (named by its
	// token, or by ?participant=, or made up) and its capabilities.
	You Identity `json:"you"`
	// Participants are the others in the pod, on every gateway node.
	Participants []Identity `json:"participants"`
	Pod          string     `json:"pod"`
	// Filter is the joiner's effective filter, every field set.
	Filter Filter `json:"filter"`
	Limits Limits `json:"limits"`
	// History says what follows the welcome when the joiner asked for
	// history= or resume= (section 8); nil when it asked for neither.
	History *HistoryInfo `json:"history,omitempty"`
}

// HistoryInfo is the welcome's history field (docs/protocol.md section
// 8): what replay follows the welcome, before live envelopes.
//
//	{"replayed": 3, "folded": 12, "collapsed": 1}   after history=N
//	{"replayed": 40, "folded": 2, "collapsed": 0, "omitted": 212, "tokens": 7930}
//	                                                after history=tokens:8000
//	{"resumed": true, "replayed": 7}                after resume=ID
//	{"resumed": false, "replayed": 0}               after resume=ID, when ID is not in the history: there may be a gap
//	{"resumed": false, "replayed": 5, "folded": 0, "collapsed": 0}
//	                                                after resume=ID&history=N, when ID is not in the history
type HistoryInfo struct {
	// Resumed is set after resume=: true when the gateway found the id
	// and replays everything after it (no gap, no duplicate), false when
	// it did not (the participant may have missed envelopes).
	Resumed *bool `json:"resumed,omitempty"`
	// Replayed is how many envelopes are replayed after the welcome.
	Replayed int `json:"replayed"`
	// Folded is how many envelopes of concluded contexts folding left
	// out, and Collapsed how many consumed transient envelopes are
	// replayed collapsed (their payload a Collapsed). Both are set
	// (possibly to 0) when the folded history of history=N is replayed,
	// and nil after a resume, which replays unfolded.
	Folded    *int `json:"folded,omitempty"`
	Collapsed *int `json:"collapsed,omitempty"`
	// Omitted and Tokens are set after history=tokens:N. Omitted is how
	// many entries of the folded history are older than the replayed
	// ones, left out by the budget: gateway/history with before set to
	// the first replayed id returns them. Tokens is the token estimate of
	// the replayed envelopes, summed, at most N.
	Omitted *int `json:"omitted,omitempty"`
	Tokens  *int `json:"tokens,omitempty"`
}

// Limits are the gateway's limits, as the welcome announces them
// (docs/protocol.md sections 3, 5, 7 and 8). Each is a flag of
// mcpp-gateway of the same name (--max-message-bytes, …). A gateway
// older than a field leaves it out, so it reads as zero.
type Limits struct {
	MaxMessageBytes           int      `json:"max_message_bytes"`            // largest envelope (message_too_large; over twice it, close 1009)
	MaxContextBytes           int      `json:"max_context_bytes"`            // largest context field (invalid_context)
	MaxDepth                  int      `json:"max_depth"`                    // deepest context nesting (context_depth_exceeded)
	Rate                      float64  `json:"rate"`                         // envelopes a second per participant (rate_limited)
	Burst                     int      `json:"burst"`                        // burst of Rate
	ContextRate               float64  `json:"context_rate"`                 // envelopes a second in one context (context_rate_limited)
	ContextBurst              int      `json:"context_burst"`                // burst of ContextRate
	ContextCreateRate         float64  `json:"context_create_rate"`          // contexts a participant may open a second (context_rate_limited)
	ContextCreateBurst        int      `json:"context_create_burst"`         // burst of ContextCreateRate
	ContextTimeoutMS          int64    `json:"context_timeout_ms"`           // a context with no envelope for this long concludes
	ContextRetentionMS        int64    `json:"context_retention_ms"`         // a concluded context stays queryable this long
	ConclusionKinds           []string `json:"conclusion_kinds"`             // kinds that conclude their context
	MaxContextsPerParticipant int      `json:"max_contexts_per_participant"` // active contexts one participant created (context_limit_exceeded)
	MaxContextsPerPod         int      `json:"max_contexts_per_pod"`         // active contexts in a pod (context_limit_exceeded)
	MaxParticipantsPerPod     int      `json:"max_participants_per_pod"`     // upgrade refused with over_capacity beyond it
	MaxConnections            int      `json:"max_connections"`              // upgrade refused with over_capacity beyond it
	MaxPods                   int      `json:"max_pods"`                     // upgrade refused with over_capacity beyond it
	SendQueue                 int      `json:"send_queue"`                   // envelopes queued for one connection before it is closed with 4008
	SendQueueBytes            int64    `json:"send_queue_bytes"`             // bytes queued for one connection before it is closed with 4008
	History                   int      `json:"history"`                      // entries of history kept per pod; 0: history is off
	HistoryAgeMS              int64    `json:"history_age_ms"`               // oldest history entry kept
	HistoryBytes              int64    `json:"history_bytes"`                // history kept for all pods together
	MCPSessionTimeoutMS       int64    `json:"mcp_session_timeout_ms"`       // an MCP participant that makes no request for this long leaves (section 9)
}

// Presence is the payload of system/presence, sent to the others when a
// participant joins or leaves (docs/protocol.md section 5). A connection
// that replaces another of the same id is no change: nobody is told.
//
//	{"event": "join", "participant": {"id": "bob", "capabilities": ["chat"]}}
type Presence struct {
	Event       string   `json:"event"` // PresenceJoin or PresenceLeave
	Participant Identity `json:"participant"`
	// Reason says why a participant left when the gateway made it leave:
	// "kicked by alice: looping", "token expired", "revoked".
	Reason string `json:"reason,omitempty"`
}

// The events of Presence.
const (
	PresenceJoin  = "join"
	PresenceLeave = "leave"
)

// ContextEvent is the payload of system/context, sent when a context
// concludes to every participant whose filter admits it (docs/protocol.md
// section 3). The envelope's context field is the concluded context, in the
// object form. The envelope that concludes a context is delivered before
// the events it causes.
//
//	{"event": "concluded", "reason": "timeout",
//	 "stats": {"messages": 12, "bytes": 5230, "participants": ["alice"],
//	           "depth": 2, "created": "…", "last_activity": "…", "concluded": "…",
//	           "tokens": 1730, "tokens_folded": 1730, "tokens_saved": 1730}}
type ContextEvent struct {
	Event  string       `json:"event"`  // ContextConcluded
	Reason string       `json:"reason"` // ReasonTimeout, ReasonConclusion or ReasonParentConcluded
	Stats  ContextStats `json:"stats"`
}

// The event and reasons of ContextEvent.
const (
	ContextConcluded = "concluded"

	ReasonTimeout         = "timeout"          // no envelope named it for context_timeout_ms
	ReasonConclusion      = "conclusion"       // a conclusion-kind envelope was relayed in it
	ReasonParentConcluded = "parent_concluded" // its parent concluded
)

// ContextStats are a concluded context's statistics, in ContextEvent
// (docs/protocol.md section 3). Times are in TimeFormat.
type ContextStats struct {
	Messages     int64    `json:"messages" jsonschema:"envelopes relayed in the context, the conclusion included"`
	Bytes        int64    `json:"bytes" jsonschema:"their sizes, summed"`
	Participants []string `json:"participants" jsonschema:"their distinct senders"`
	Depth        int      `json:"depth" jsonschema:"its nesting depth: 1 for a root"`
	Created      string   `json:"created" jsonschema:"when it opened (RFC 3339)"`
	LastActivity string   `json:"last_activity" jsonschema:"its last envelope (RFC 3339)"`
	Concluded    string   `json:"concluded" jsonschema:"when it concluded (RFC 3339)"`
	Tokens       int64    `json:"tokens" jsonschema:"the token estimate of its envelopes, summed (not its sub-contexts')"`
	TokensFolded int64    `json:"tokens_folded" jsonschema:"the tokens folding hides from a late joiner: all but its conclusion-kind envelopes"`
	TokensSaved  int64    `json:"tokens_saved" jsonschema:"tokens_folded less the tokens of its conclusion-kind envelopes, which stand for them (negative when they cost more)"`
}

// The states of a context, in ContextInfo and ContextsRequest.
const (
	StateActive    = "active"
	StateConcluded = "concluded"
	StateAll       = "all" // ContextsRequest only
)

// ContextInfo is one context as system/contexts describes it
// (docs/protocol.md section 6). Fields the context does not have are null:
// a context with no type or parent, the reason and time of conclusion of
// an active one.
//
//	{"id": "reason-789", "type": "reasoning", "parent": "ctx-123", "depth": 2,
//	 "state": "active", "reason": null, "creator": "alice", "messages": 3,
//	 "bytes": 812, "participants": ["alice"], "created": "…",
//	 "last_activity": "…", "concluded": null, "tokens": 270,
//	 "tokens_folded": null, "tokens_saved": null}
type ContextInfo struct {
	ID           string   `json:"id" jsonschema:"the context's id"`
	Type         *string  `json:"type" jsonschema:"its type, or null"`
	Parent       *string  `json:"parent" jsonschema:"its parent's id, or null for a root"`
	Depth        int      `json:"depth" jsonschema:"its nesting depth: 1 for a root"`
	State        string   `json:"state" jsonschema:"active or concluded"`
	Reason       *string  `json:"reason" jsonschema:"why it concluded (conclusion, timeout or parent_concluded), or null while active"`
	Creator      string   `json:"creator" jsonschema:"the participant that opened it"`
	Messages     int64    `json:"messages" jsonschema:"envelopes relayed in it"`
	Bytes        int64    `json:"bytes" jsonschema:"their sizes, summed"`
	Participants []string `json:"participants" jsonschema:"the distinct senders"`
	Created      string   `json:"created" jsonschema:"when it opened (RFC 3339)"`
	LastActivity string   `json:"last_activity" jsonschema:"its last envelope (RFC 3339)"`
	Concluded    *string  `json:"concluded" jsonschema:"when it concluded (RFC 3339), or null while active"`
	Tokens       int64    `json:"tokens" jsonschema:"the token estimate of its envelopes, summed (not its sub-contexts')"`
	TokensFolded *int64   `json:"tokens_folded" jsonschema:"once concluded, the tokens folding hides from a late joiner (all but its conclusion-kind envelopes); null while active"`
	TokensSaved  *int64   `json:"tokens_saved" jsonschema:"once concluded, tokens_folded less the tokens of its conclusion-kind envelopes (negative when they cost more); null while active"`
}

// ContextsRequest is the payload of gateway/contexts (docs/protocol.md
// section 6). Empty fields are left out: the defaults are state active and
// limit 1000.
//
//	{"state": "all", "type": "reasoning", "limit": 10}
type ContextsRequest struct {
	State string `json:"state,omitempty" jsonschema:"active (default): open contexts; concluded: those concluded within --context-retention; all: both"`
	ID    string `json:"id,omitempty" jsonschema:"only the context with this id"`
	Type  string `json:"type,omitempty" jsonschema:"only contexts of this type"`
	Limit int    `json:"limit,omitempty" jsonschema:"the most to list, oldest first (default 1000)"`
}

// ContextsAnswer is the payload of system/contexts, the answer to
// gateway/contexts (docs/protocol.md section 6).
type ContextsAnswer struct {
	Contexts []ContextInfo `json:"contexts" jsonschema:"the contexts, oldest first"`
}

// HistoryRequest is the payload of gateway/history (docs/protocol.md
// section 6): a page of the pod's history that the sender's filter admits,
// oldest first. Without Before or After, the newest; at most one of the two.
//
//	{"before": "env-90", "context": "task-1", "limit": 50, "fold": false}
//	{"before": "env-90", "max_tokens": 8000}
type HistoryRequest struct {
	Before  string `json:"before,omitempty" jsonschema:"return envelopes older than the envelope with this id (exclusive); not with after"`
	After   string `json:"after,omitempty" jsonschema:"return envelopes newer than the envelope with this id (exclusive); not with before"`
	Context string `json:"context,omitempty" jsonschema:"keep only this context id and its descendants"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the most envelopes to return (1 to 1000, default 100)"`
	Fold    *bool  `json:"fold,omitempty" jsonschema:"true (default): a concluded context shows only its conclusion and its system/context event, and consumed transient envelopes their summary; false: everything as relayed"`
	// MaxTokens bounds the page by the envelopes' token estimate: the
	// newest contiguous stretch before Before (the oldest after After)
	// that fits, or fewer when Limit stops first. An envelope alone over
	// it is not returned: the page is then empty, with More true.
	MaxTokens int `json:"max_tokens,omitempty" jsonschema:"the most tokens the envelopes may add up to (the gateway's estimate); the page stops before the first envelope that would go over it, so one envelope larger than this returns nothing and more true"`
}

// HistoryAnswer is the payload of system/history (docs/protocol.md
// section 6), each envelope decoded.
type HistoryAnswer = HistoryAnswerOf[Envelope]

// HistoryAnswerOf is the payload of system/history with its envelopes
// held as E: HistoryAnswer decodes each into an Envelope, and
// HistoryAnswerOf[json.RawMessage] keeps each one's bytes as the gateway
// wrote them (which is how the gateway writes the answer, and how a
// client that stores or forwards envelopes unchanged reads it). More is
// true when older (or, with After, newer) envelopes were left out.
// Tokens is the token estimate of Envelopes, summed. With history off,
// Envelopes is empty, More false and Tokens 0.
type HistoryAnswerOf[E any] struct {
	Envelopes []E  `json:"envelopes" jsonschema:"envelopes of the pod, oldest first, as relayed: protocol, id, ts, from, to, kind, correlation_id, context, payload, lifecycle; system/context envelopes report a concluded context and its stats"`
	More      bool `json:"more" jsonschema:"true when envelopes were left out that asking again returns: older ones, or newer ones after the last"`
	Tokens    int  `json:"tokens" jsonschema:"the token estimate of the envelopes, summed"`
}

// Collapsed is the payload with which history replays a consumed
// transient envelope (docs/protocol.md section 8); every other field of
// the envelope is as relayed.
//
//	{"collapsed": true, "summary": "15 activity records", "consumed_by": "env-50"}
type Collapsed struct {
	Collapsed  bool   `json:"collapsed"`
	Summary    string `json:"summary"`
	ConsumedBy string `json:"consumed_by"` // the consuming envelope's id
}

// IsCollapsed reports whether payload is a Collapsed one, and returns it.
func IsCollapsed(payload json.RawMessage) (Collapsed, bool) {
	var c Collapsed
	if json.Unmarshal(payload, &c) != nil || !c.Collapsed {
		return Collapsed{}, false
	}
	return c, true
}

// Branch is the payload of a context/branch envelope, which opens a
// sub-context (docs/protocol.md section 9): the first envelope in a new
// context.
type Branch struct {
	Description string `json:"description"`
}

// Conclusion is the payload of a conclusion envelope, which concludes the
// context it is sent in (docs/protocol.md sections 3 and 9).
type Conclusion struct {
	Summary string `json:"summary"`
}

// The values of Filter.Contexts and Filter.Routing.
const (
	ContextsAll  = "all"
	ContextsNone = "none"

	RoutingAll      = "all"
	RoutingDirected = "directed"
)

// Filter is a participant's filter in its JSON form (docs/protocol.md
// section 4): the welcome's and system/filter's payload, where every field
// is set (the effective filter), and the payload of gateway/filter, where
// absent fields keep their value. Hence the pointers: nil is "absent".
// An empty non-nil list is written [] (it clears the list); a nil one is
// left out.
//
//	{"main": true, "contexts": "all", "types": [], "exclude_types": [],
//	 "ids": [], "subtree": false, "conclusions": false, "routing": "all",
//	 "echo": false, "batch": false}
type Filter struct {
	Main         *bool    `json:"main,omitempty" jsonschema:"admit envelopes of the main conversation (no context); default true"`
	Contexts     string   `json:"contexts,omitempty" jsonschema:"all (default): every envelope in a context; none: only those the fields below admit"`
	Types        []string `json:"types,omitzero" jsonschema:"also admit contexts of these types"`
	ExcludeTypes []string `json:"exclude_types,omitzero" jsonschema:"never admit contexts of these types (wins over every other field)"`
	IDs          []string `json:"ids,omitzero" jsonschema:"also admit these context ids"`
	Subtree      *bool    `json:"subtree,omitempty" jsonschema:"ids also admit their descendants"`
	Conclusions  *bool    `json:"conclusions,omitempty" jsonschema:"also admit the conclusion-kind envelopes (and system/context events) of every context"`
	Routing      string   `json:"routing,omitempty" jsonschema:"all (default): everything; directed: drop envelopes addressed only to others"`
	Echo         *bool    `json:"echo,omitempty" jsonschema:"also receive your own envelopes"`
	Batch        *bool    `json:"batch,omitempty" jsonschema:"several envelopes per WebSocket message, one per line (no effect on MCP tools)"`
}

// Bool returns a pointer to b, for Filter's and HistoryRequest's fields.
func Bool(b bool) *bool { return &b }

// Query is the filter as query parameters of the upgrade
// (docs/protocol.md section 4): only the fields that are set, booleans as
// 0 or 1, lists comma-separated. An empty list is left out, as the
// default is empty.
func (f Filter) Query() url.Values {
	q := url.Values{}
	b := func(name string, v *bool) {
		if v != nil {
			if *v {
				q.Set(name, "1")
			} else {
				q.Set(name, "0")
			}
		}
	}
	s := func(name, v string) {
		if v != "" {
			q.Set(name, v)
		}
	}
	l := func(name string, v []string) {
		if len(v) > 0 {
			q.Set(name, strings.Join(v, ","))
		}
	}
	b("main", f.Main)
	s("contexts", f.Contexts)
	l("types", f.Types)
	l("exclude_types", f.ExcludeTypes)
	l("ids", f.IDs)
	b("subtree", f.Subtree)
	b("conclusions", f.Conclusions)
	s("routing", f.Routing)
	b("echo", f.Echo)
	b("batch", f.Batch)
	return q
}

// KindGap tells a participant it missed a live frame (a presence event,
// an ephemeral envelope) that another gateway node accepted and could
// not give this node again, because it is gone (docs/protocol.md section
// 8): payload Gap, in the lost envelope's context.
const KindGap = "system/gap"

// Gap is the payload of system/gap: what the lost frame was, as its
// marker in the history stream says.
//
//	{"lost": "envelope", "id": "e7", "from": "alice", "context": "r1", "reason": "…"}
//	{"lost": "presence", "id": "…", "event": "join", "participant": {"id": "bob", "capabilities": []}, "reason": "…"}
type Gap struct {
	// Lost is GapEnvelope (an ephemeral envelope) or GapPresence.
	Lost string `json:"lost"`
	// ID is the lost envelope's id, or the lost presence event's.
	ID string `json:"id"`
	// From is the lost envelope's sender.
	From string `json:"from,omitempty"`
	// Context is the lost envelope's context id, if any.
	Context string `json:"context,omitempty"`
	// Event and Participant are the lost presence event's: the member
	// list changes as the event would have changed it. A joiner's
	// capabilities went with the event: they are not known ([]).
	Event       string    `json:"event,omitempty"`
	Participant *Identity `json:"participant,omitempty"`
	// Reason says why it could not be delivered.
	Reason string `json:"reason"`
}

// What Gap.Lost names.
const (
	GapEnvelope = "envelope"
	GapPresence = "presence"
)
