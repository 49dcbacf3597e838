package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Tools in the pod (docs/protocol.md section 11): MCP's JSON-RPC
// messages travel as envelopes, MEW's way. A participant calls another's
// tool with mcp/request, addressed to that one participant; the answer
// is an mcp/response to the requester alone, correlated to the request's
// envelope id. The gateway keeps the requests in flight and answers for
// a recipient that left or did not answer in time. A participant that
// may not make a call proposes it (mcp/proposal); the gateway holds the
// proposal until someone allowed to make the call approves it
// (RequestApprove), fulfils it, rejects it, or the proposer withdraws it.
const (
	// KindMCPRequest carries a JSON-RPC request (or notification) for its
	// one recipient, as MCP has it:
	// {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {…}}.
	KindMCPRequest = "mcp/request"
	// KindMCPResponse carries the recipient's JSON-RPC answer to the
	// requester, correlation_id the request's envelope id.
	KindMCPResponse = "mcp/response"
	// KindMCPNotification carries a JSON-RPC notification an MCP server
	// sent (tools/list_changed, progress, log messages), to the pod.
	KindMCPNotification = "mcp/notification"
	// KindMCPProposal proposes an mcp/request (its payload, to its one
	// recipient) that the proposer may not send itself.
	KindMCPProposal = "mcp/proposal"
	// KindMCPReject rejects a proposal (correlation_id its id): payload
	// {"reason": TEXT}.
	KindMCPReject = "mcp/reject"
	// KindMCPWithdraw withdraws a proposal, by its proposer alone.
	KindMCPWithdraw = "mcp/withdraw"
)

// ServesMCP is the value of the serves query parameter (QueryServes), and
// of Identity.Serves, of a participant that answers MCP requests: an MCP
// server in the pod, such as mcpp bridge.
const ServesMCP = "mcp"

// IsMCPRequest reports whether kind is an MCP request: MEW's mcp/request,
// or MCPx v0.1's mcp/request:METHOD[:NAME].
func IsMCPRequest(kind string) bool { return isMCPKind(kind, KindMCPRequest) }

// IsMCPResponse reports whether kind is an MCP response: mcp/response, or
// MCPx v0.1's mcp/response:METHOD[:NAME].
func IsMCPResponse(kind string) bool { return isMCPKind(kind, KindMCPResponse) }

func isMCPKind(kind, base string) bool {
	return kind == base || len(kind) > len(base) && kind[len(base)] == ':' && strings.HasPrefix(kind, base)
}

// The JSON-RPC error codes of the gateway's own mcp/response answers
// (from GatewayID) and of mcpp bridge's, in the range JSON-RPC leaves to
// implementations. The error's data says why: {"reason": MCPReason…}.
const (
	// RPCConnectionClosed: the recipient is not there to answer (it left,
	// was never in the pod, or its MCP server is down). The MCP
	// TypeScript SDK's ConnectionClosed.
	RPCConnectionClosed = -32000
	// RPCRequestTimeout: no answer came within --mcp-request-timeout. The
	// MCP TypeScript SDK's RequestTimeout.
	RPCRequestTimeout = -32001
)

// The reasons in the data of the gateway's and the bridge's JSON-RPC
// errors.
const (
	MCPReasonRecipientLeft   = "recipient_left"   // the recipient left the pod before it answered
	MCPReasonRecipientAbsent = "recipient_absent" // no participant of that id was in the pod
	MCPReasonTimeout         = "timeout"          // no answer within --mcp-request-timeout
	MCPReasonServerDown      = "server_down"      // mcpp bridge: its MCP server is not running (it is restarted with backoff)
	// MCPReasonHostCannotAnswer: the recipient is an MCP host on /mcp that
	// cannot answer the question: it did not declare the capability (the
	// error is then -32601, method not found, as MCP has such a client
	// answer), its participant may not send mcp/response, or its session
	// failed to ask it.
	MCPReasonHostCannotAnswer = "host_cannot_answer"
)

// RPCErrorData is the data of those errors.
//
//	{"reason": "timeout", "timeout_ms": 60000}
type RPCErrorData struct {
	Reason    string `json:"reason"`
	Recipient string `json:"recipient,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// RPCErrorResponse is a JSON-RPC error response: the payload of the
// gateway's mcp/response answers. ID is the request's JSON-RPC id as
// the request had it (null when it had none).
type RPCErrorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   RPCError        `json:"error"`
}

// Approval is the top-level approval field of an mcp/request the gateway
// released for an approved proposal (RequestApprove): who approved which
// proposal. Only the gateway writes it; a participant's envelope that
// carries it is refused (CodeInvalidEnvelope).
//
//	"approval": {"proposal": "p-1", "by": "alice"}
type Approval struct {
	Proposal string `json:"proposal"`
	By       string `json:"by"`
}

// The requests of proposals (docs/protocol.md section 11) and their
// answers.
const (
	RequestApprove   = "gateway/approve"   // payload Approve → KindApprove
	RequestProposals = "gateway/proposals" // payload ProposalsRequest → KindProposals
	KindApprove      = "system/approve"    // the answer to RequestApprove: ProposalEvent
	KindProposals    = "system/proposals"  // the answer to RequestProposals: ProposalsAnswer
	// KindProposal is a proposal's change of state, to its proposer and
	// to the participants who could approve it: ProposalEvent.
	KindProposal = "system/proposal"
)

// Approve is the payload of gateway/approve. Digest names the bytes
// approved (ProposalDigest of the call, as the pending proposal's event
// and the list give it): an approval is of that call, never of whatever
// its id names later.
//
//	{"proposal": "p-1", "digest": "sha256:9f86d0…", "scope": "once"}
//	{"proposal": "p-1", "digest": "sha256:9f86d0…", "scope": "always", "context": "task-7"}
type Approve struct {
	Proposal string `json:"proposal" jsonschema:"the proposal's id (its mcp/proposal envelope's id)"`
	Digest   string `json:"digest" jsonschema:"the digest of the call you approve, as pod_proposals lists it (sha256:HEX)"`
	// Scope is ScopeOnce (the default) or ScopeAlways.
	Scope string `json:"scope,omitempty" jsonschema:"once (the default): this call only; always: also grant the proposer this method and tool from now on"`
	// Context scopes an always grant to a context and its subtree
	// (default: the whole pod).
	Context string `json:"context,omitempty" jsonschema:"with scope always: the grant holds in this context and below it only (default: the whole pod)"`
	// Payload narrows an always grant: the payload pattern granted
	// instead of the proposal's method and tool name. The proposal must
	// match it.
	Payload json.RawMessage `json:"payload,omitempty" jsonschema:"with scope always: the payload pattern to grant instead of {method, params: {name}}; the proposal must match it"`
}

// MCPConnectionMeta are the keys of an MCP request's params._meta that
// describe the client's connection (MCP 2026-07-28's "_meta triple": the
// revision, the client's name and capabilities; and its log level), not
// the request. A call relayed through the pod drops them: its server's
// client (mcpp bridge) writes its own.
var MCPConnectionMeta = []string{
	"io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientInfo",
	"io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/logLevel",
}

// ProposalDigest names a proposed call's bytes, exactly as its proposer
// sent them (the mcp/proposal's payload, which the gateway releases as
// is): "sha256:" and the SHA-256 of the bytes in lower-case hex.
func ProposalDigest(call []byte) string {
	sum := sha256.Sum256(call)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// The scopes of an approval.
const (
	ScopeOnce   = "once"
	ScopeAlways = "always"
)

// The states of a proposal.
const (
	ProposalPending   = "pending"
	ProposalApproved  = "approved"  // released by gateway/approve
	ProposalFulfilled = "fulfilled" // an mcp/request correlated to it made the call (MEW's fulfilment)
	ProposalRejected  = "rejected"
	ProposalWithdrawn = "withdrawn"
	ProposalExpired   = "expired"
)

// ProposalEvent is the payload of system/proposal and system/approve: a
// proposal's new state, who changed it and why.
//
//	{"proposal": "p-1", "state": "pending", "by": "bot", "proposer": "bot", "to": "files",
//	 "call": {"method": "tools/call", "params": {"name": "write_file", …}}}
//	{"proposal": "p-1", "state": "approved", "by": "alice", "proposer": "bot", "to": "files",
//	 "request": "r-9", "scope": "always", "grant_id": "g-3"}
//	{"proposal": "p-1", "state": "rejected", "by": "alice", "proposer": "bot", "to": "files", "reason": "unsafe"}
type ProposalEvent struct {
	Proposal string `json:"proposal"`
	State    string `json:"state"`
	// By is who changed it: the proposer (pending, withdrawn), the
	// approver, fulfiller or rejecter, or GatewayID (expired).
	By       string `json:"by"`
	Reason   string `json:"reason,omitempty"`
	Proposer string `json:"proposer"`
	To       string `json:"to"`
	// Context is the proposal's context, if it has one.
	Context string `json:"context,omitempty"`
	// Call is the proposed mcp/request payload (pending), and Digest
	// names its bytes exactly (ProposalDigest), as an approval must.
	Call   json.RawMessage `json:"call,omitempty"`
	Digest string          `json:"digest,omitempty"`
	// Request is the id of the mcp/request that made the call (approved,
	// fulfilled).
	Request string `json:"request,omitempty"`
	Scope   string `json:"scope,omitempty"`
	// GrantID names the grant of an always approval.
	GrantID string `json:"grant_id,omitempty"`
	// Expires is when a pending proposal expires.
	Expires string `json:"expires,omitempty"`
}

// ProposalsRequest is the payload of gateway/proposals.
//
//	{}                   the pending proposals
//	{"state": "all"}     every proposal the gateway still knows, with its state
type ProposalsRequest struct {
	State string `json:"state,omitempty" jsonschema:"pending (the default) or all"`
}

// ProposalsAnswer is the payload of system/proposals.
type ProposalsAnswer struct {
	Proposals []ProposalInfo `json:"proposals"`
}

// ProposalInfo is one proposal as gateway/proposals lists it.
type ProposalInfo struct {
	ID       string          `json:"id"`
	State    string          `json:"state"`
	Proposer string          `json:"proposer"`
	To       string          `json:"to"`
	Context  string          `json:"context,omitempty"`
	Call     json.RawMessage `json:"call"`
	Digest   string          `json:"digest"`
	Created  string          `json:"created"`
	Expires  string          `json:"expires"`
	// By and Reason say who ended it and why; Request names the call an
	// approval or fulfilment made.
	By      string `json:"by,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Request string `json:"request,omitempty"`
}
