package wire

import (
	"fmt"
	"net/url"
)

// The protocols an envelope may name in its protocol field
// (docs/protocol.md section 2). The gateway fills ProtocolMCPP when the
// field is absent, and writes its own messages in the protocol the
// participant speaks (section 5).
const (
	ProtocolMCPP = "mcpp/v0.1"
	ProtocolMCPX = "mcpx/v0.1"
)

// GatewayID is the from of every message the gateway writes itself
// (docs/protocol.md section 5). Participant ids starting with "system:"
// are the gateway's (section 1).
const GatewayID = "system:gateway"

// TimeFormat is how the gateway writes ts and the times of context
// statistics: RFC 3339 in UTC with milliseconds (docs/protocol.md section 2).
// Any RFC 3339 string is a valid ts; this is the gateway's choice.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// The kinds of the messages the gateway writes (docs/protocol.md sections
// 3, 5 and 6). Every kind that starts with "system/" is the gateway's: a
// participant that sends one is refused with CodeReservedKind.
const (
	KindWelcome  = "system/welcome"  // the first message of a connection: Welcome
	KindPresence = "system/presence" // someone joined or left: Presence
	KindError    = "system/error"    // an envelope of yours was refused: ErrorPayload
	KindContext  = "system/context"  // a context concluded: ContextEvent
	KindFilter   = "system/filter"   // the answer to RequestFilter: Filter
	KindContexts = "system/contexts" // the answer to RequestContexts: ContextsAnswer
	KindHistory  = "system/history"  // the answer to RequestHistory: HistoryAnswer
)

// The kinds of requests to the gateway (docs/protocol.md section 6). An
// envelope whose kind starts with "gateway/" is answered to its sender
// alone, with correlation_id set to the request's id, and never relayed.
const (
	RequestFilter   = "gateway/filter"   // payload Filter (absent fields keep their value) → KindFilter
	RequestContexts = "gateway/contexts" // payload ContextsRequest → KindContexts
	RequestHistory  = "gateway/history"  // payload HistoryRequest → KindHistory
)

// Kinds participants send that the gateway and its tools give a meaning
// to (docs/protocol.md sections 3 and 9). KindConclusion is one of the
// default conclusion kinds: relayed in a context, it concludes it.
const (
	KindConclusion    = "conclusion"     // payload Conclusion
	KindContextBranch = "context/branch" // opens a sub-context; payload Branch
)

// DefaultConclusionKinds are the kinds that conclude their context unless
// the gateway is told otherwise (--conclusion-kinds, docs/protocol.md
// section 3). The welcome's limits carry the gateway's own list.
var DefaultConclusionKinds = []string{"conclusion", "reasoning/conclusion", "reasoning/end"}

// Paths of the gateway's HTTP server (docs/protocol.md sections 1 and 6).
const (
	PathWS = "/ws" // GET: the WebSocket upgrade
)

// A gateway serves its WebSocket upgrade and its HTTP requests on one
// listener, so one address names both: ws:// and http:// the same plain
// listener, wss:// and https:// the same TLS one.

// AsWebSocket sets u's scheme to the WebSocket scheme of its listener (ws
// or wss, as given; http or https, turned into them), for the upgrade.
func AsWebSocket(u *url.URL) error { return rescheme(u, "ws", "wss") }

// AsHTTP sets u's scheme to the HTTP scheme of its listener (http or
// https, as given; ws or wss, turned into them), for the publishes.
func AsHTTP(u *url.URL) error { return rescheme(u, "http", "https") }

func rescheme(u *url.URL, plain, secure string) error {
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = plain
	case "wss", "https":
		u.Scheme = secure
	default:
		return fmt.Errorf("the gateway's URL %q: the scheme must be ws, wss, http or https", u.Redacted())
	}
	return nil
}

// PublishPath is the path of POST /pods/NAME/envelopes, which publishes
// without joining (docs/protocol.md section 6); its answer is
// PublishAnswer.
func PublishPath(pod string) string { return "/pods/" + url.PathEscape(pod) + "/envelopes" }

// The query parameters of the upgrade, GET /ws?pod=NAME&…
// (docs/protocol.md sections 1, 4 and 8). The filter's own parameters are
// those of Filter.Query.
const (
	QueryPod         = "pod"         // the pod to join (required)
	QueryTopic       = "topic"       // MCPx's name for pod; joining with it means protocol mcpx/v0.1
	QueryParticipant = "participant" // the participant id, in open mode (no token file)
	QueryToken       = "token"       // the token, for browsers; others send Authorization: Bearer TOKEN
	QueryProtocol    = "protocol"    // ProtocolMCPP or ProtocolMCPX
	QueryHistory     = "history"     // N (a positive number) or HistoryAll: replay the pod's past after the welcome
	QueryFold        = "fold"        // "0": replay history unfolded and uncollapsed
	QueryResume      = "resume"      // the id of the last envelope received: replay what was missed
	QueryServes      = "serves"      // what the participant answers requests of (ServesMCP), shown in its Identity
	QueryObserve     = "observe"     // "1": watch the pod without being present in it (capability CapabilityObserve)
)

// CapabilityObserve is the capability that lets a participant join with
// observe=1: no presence event, no place in welcomes or participant
// lists (docs/protocol.md section 1).
const CapabilityObserve = "gateway/observe"

// HistoryAll is the value of the history query parameter that asks for
// all of the pod's history (docs/protocol.md section 8).
const HistoryAll = "all"
