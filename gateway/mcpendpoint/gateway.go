package mcpendpoint

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/pod"
)

// Gateway is what the endpoint needs of the gateway that mounts it, and
// nothing more: who a request is, the one way to find a pod and join it,
// and what is shared with the node's other participants. Package gateway
// fills it (gateway/mcpmount.go); a test fills it with a pod of its own.
type Gateway struct {
	// Node is what the pods share: the rules and limits of docs/protocol.md
	// (Node.Config: the message bound, the rate, the call timeout, the
	// conclusion kinds) and the participants' rate buckets (Node.Buckets),
	// shared with the participant's WebSocket connections.
	Node *pod.Node
	// SessionTimeout is --mcp-session-timeout: a member that made no
	// request for that long leaves its pod.
	SessionTimeout time.Duration
	// LocalhostProtection refuses a request that reaches a loopback
	// address under another Host (DNS rebinding), as the SDK does by
	// default. It matters in open mode, where a web page that resolves its
	// own name to 127.0.0.1 would need no token; with tokens it would only
	// refuse a reverse proxy on the same machine that passes the public
	// Host.
	LocalhostProtection bool
	// Version is the gateway's, told to hosts in initialize.
	Version string
	// NodeID names this node in the spans.
	NodeID string
	// Tracer makes MCP's server spans of a host's requests; nil: tracing
	// is off.
	Tracer trace.Tracer
	Log    *slog.Logger

	// Admit decides whether a request may come in and who it is: the
	// gateway is accepting, the origin is allowed, the pod is named well,
	// the token is good (docs/protocol.md sections 1 and 9). When it may
	// not, Admit has written the refusal and reports false.
	Admit func(w http.ResponseWriter, r *http.Request) (Admission, bool)
	// Refuse answers a request Admit let in that the endpoint refuses
	// as a join (a session of another participant, a pod that is full),
	// recording it as Admit records its own refusals.
	Refuse func(w http.ResponseWriter, r *http.Request, a Admission, e *envelope.Error)
	// Join is the one way the endpoint finds a pod and enters it: it takes
	// one of the node's connections (--max-connections), finds or opens
	// the pod of a, waits until it has read its past, and joins guest to
	// it, returning the pod and the sequence of its history up to which
	// the guest has read (its first pod_read returns what comes after).
	// A refusal says why (over capacity, a full pod, a ban); nothing is
	// held then. r is the request that joins, which the audit trail and
	// the join's span record.
	Join func(ctx context.Context, r *http.Request, a Admission, guest pod.Guest) (*pod.Pod, uint64, *envelope.Error)
	// Left gives back what Join took, once a member left p: its
	// connection, and the pod itself when nobody is left in it (unless
	// the gateway is shutting down, when it closes every pod itself).
	Left func(p *pod.Pod, shutdown bool)
}

// Admission is what Admit decided of a request.
type Admission struct {
	Pod string
	Who pod.Admitted
	// Filter is the one the request's query asks for (docs/protocol.md
	// section 4): the member's, if the request starts one.
	Filter *filter.Filter
}
