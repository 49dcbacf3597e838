package wire

import "fmt"

// Code is an error code. It is the error field of a system/error payload
// (ErrorPayload, docs/protocol.md section 5), of the JSON body of a refused
// upgrade (Refusal, section 1) and of a refused entry of a publish answer
// (PublishResult, section 6).
type Code string

// The codes of system/error, in the order of the table of
// docs/protocol.md section 5: when an envelope breaks several rules, the
// first of them in this order is the one reported.
const (
	CodeInvalidJSON           Code = "invalid_json"            // the message is not one JSON object (or is binary)
	CodeInvalidEnvelope       Code = "invalid_envelope"        // a field breaks section 2, or a request's payload does not fit it
	CodeUnsupportedProtocol   Code = "unsupported_protocol"    // protocol is neither mcpp/v0.1 nor mcpx/v0.1
	CodeAuthViolation         Code = "auth_violation"          // from is not the sender
	CodeReservedKind          Code = "reserved_kind"           // a system/* kind
	CodeAmbiguousPayload      Code = "ambiguous_payload"       // a payload the gateway reads has an object with two keys equal ignoring case
	CodeCapabilityViolation   Code = "capability_violation"    // no capability matches the kind; see AttemptedKind
	CodeMessageTooLarge       Code = "message_too_large"       // over the max_message_bytes limit
	CodeInvalidRecipient      Code = "invalid_recipient"       // an mcp/request names not exactly one recipient, or an mcp/response not its requester
	CodeForbidden             Code = "forbidden"               // the sender was kicked from the pod (or replaced) after it began: not relayed; also a 403 upgrade refusal
	CodeInvalidContext        Code = "invalid_context"         // the context field breaks section 3
	CodeContextConflict       Code = "context_conflict"        // another type or parent than the context was created with
	CodeContextCycle          Code = "context_cycle"           // the context's parent chain contains its own id
	CodeContextDepthExceeded  Code = "context_depth_exceeded"  // deeper than max_depth
	CodeDuplicateID           Code = "duplicate_id"            // the pod's history already holds this id; the first one stands
	CodeProposalNotPending    Code = "proposal_not_pending"    // a decision on a proposal that is not pending (ended, or never made)
	CodeProposalChanged       Code = "proposal_changed"        // an approval whose digest is not the pending proposal's: its id now names another call
	CodeNoPendingRequest      Code = "no_pending_request"      // an mcp/response answers no request in flight (answered, timed out, or its requester left): dropped
	CodeContextLimitExceeded  Code = "context_limit_exceeded"  // too many active contexts (retryable)
	CodeRequestLimitExceeded  Code = "request_limit_exceeded"  // too many mcp/requests in flight, the sender's or the pod's (retryable)
	CodeProposalLimitExceeded Code = "proposal_limit_exceeded" // too many pending proposals, the sender's or the pod's (retryable)
	CodeRateLimited           Code = "rate_limited"            // over the sender's rate (retryable, with retry_after_ms)
	CodeContextRateLimited    Code = "context_rate_limited"    // over a context's rate or the context creation rate (retryable, with retry_after_ms)
	CodeUnknownRequest        Code = "unknown_request"         // a gateway/* kind the gateway does not know
	CodeInvalidFilter         Code = "invalid_filter"          // a filter that does not parse (also an upgrade refusal, 400)
	CodeShuttingDown          Code = "shutting_down"           // the gateway is draining; the envelope was not accepted (retryable)
	CodeNoQuorum              Code = "no_quorum"               // the node cannot reach a quorum of the cluster's history stream; the envelope was not accepted (retryable; also a 503 refusal)
	CodeUnconfirmed           Code = "unconfirmed"             // a publish answer's entry: accepted, but the history stream did not confirm it stored it in time; it may be stored (retryable, with the same id)
)

// The codes of a refused upgrade (docs/protocol.md section 1), besides
// CodeInvalidFilter and CodeUnsupportedProtocol, which refuse an upgrade
// too (with 400), CodeShuttingDown (503: the gateway is draining) and
// CodeNoQuorum (503: the node cannot reach a quorum of the history
// stream).
const (
	CodeInvalidPod         Code = "invalid_pod"         // 400: the pod name is not 1 to 64 of [A-Za-z0-9._-]
	CodeInvalidParticipant Code = "invalid_participant" // 400: the participant id is malformed (or missing, for publishing in open mode)
	CodeUnauthorized       Code = "unauthorized"        // 401: no token, or an unknown one
	// CodeForbidden (above) is 403: the token may not join this pod, the
	// participant is banned from it, the browser origin is not allowed, or
	// observe=1 without the gateway/observe capability.
	CodeOverCapacity Code = "over_capacity" // 503: a connection, participant or pod cap is reached, or the pod (or the history stream) is not ready yet
)

// EnvelopeCodes are the codes of system/error in the order of the table
// of docs/protocol.md section 5.
var EnvelopeCodes = []Code{
	CodeInvalidJSON, CodeInvalidEnvelope, CodeUnsupportedProtocol, CodeAuthViolation, CodeReservedKind,
	CodeAmbiguousPayload, CodeCapabilityViolation, CodeMessageTooLarge, CodeInvalidRecipient, CodeForbidden,
	CodeInvalidContext, CodeContextConflict, CodeContextCycle, CodeContextDepthExceeded, CodeDuplicateID,
	CodeProposalNotPending, CodeProposalChanged, CodeNoPendingRequest, CodeContextLimitExceeded, CodeRequestLimitExceeded,
	CodeProposalLimitExceeded, CodeRateLimited, CodeContextRateLimited, CodeUnknownRequest, CodeInvalidFilter,
	CodeShuttingDown, CodeNoQuorum, CodeUnconfirmed,
}

// UpgradeCodes are the codes a refused upgrade may carry
// (docs/protocol.md section 1).
var UpgradeCodes = []Code{
	CodeInvalidPod, CodeInvalidParticipant, CodeUnauthorized, CodeForbidden,
	CodeOverCapacity, CodeInvalidFilter, CodeUnsupportedProtocol, CodeShuttingDown, CodeNoQuorum,
}

// Retryable reports whether the same envelope (or upgrade) may succeed if
// sent again later, as the retryable column of docs/protocol.md section 5
// says: the caps and rates, shutting_down, no_quorum and unconfirmed. over_capacity,
// the 503 of an upgrade, is retryable too: the caps it names free up as
// others leave.
func (c Code) Retryable() bool {
	switch c {
	case CodeContextLimitExceeded, CodeRequestLimitExceeded, CodeProposalLimitExceeded, CodeRateLimited, CodeContextRateLimited, CodeShuttingDown, CodeNoQuorum, CodeUnconfirmed, CodeOverCapacity:
		return true
	}
	return false
}

// HTTPStatus is the HTTP status that comes with the code when it refuses
// an upgrade, a publish request or a call of the operator's API
// (docs/protocol.md sections 1, 6 and 7), or 0 for a code that is only
// ever sent in a system/error. Two refusals of a publish request differ:
// a method other than POST is 405 (CodeInvalidEnvelope), and a
// Content-Type other than JSON or newline-delimited JSON is 415
// (CodeInvalidJSON).
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalidPod, CodeInvalidParticipant, CodeInvalidFilter, CodeUnsupportedProtocol, CodeInvalidJSON, CodeInvalidRequest:
		return 400
	case CodeUnauthorized:
		return 401
	case CodeForbidden:
		return 403
	case CodeNotFound:
		return 404
	case CodeOverCapacity, CodeShuttingDown, CodeNoQuorum:
		return 503
	}
	return 0
}

// CloseCode is the status code of the WebSocket close frame with which the
// gateway ends a connection (docs/protocol.md section 5).
type CloseCode int

// The close codes the gateway sends.
const (
	CloseNormal        CloseCode = 1000 // the other side closed politely
	CloseGoingAway     CloseCode = 1001 // the gateway is shutting down
	CloseMessageTooBig CloseCode = 1009 // a message over twice max_message_bytes
	CloseInternalError CloseCode = 1011 // the replay of the pod's history was interrupted: resume again
	CloseReplaced      CloseCode = 4000 // another connection joined the pod with the same participant id
	CloseSlowConsumer  CloseCode = 4008 // this connection did not read fast enough: its send queue filled
	CloseTokenExpired  CloseCode = 4401 // the token expired and was not refreshed (gateway/refresh): join again with a fresh one
	CloseRevoked       CloseCode = 4403 // the token was revoked (gone from the token file, or its pods no longer allow the pod): do not come back with it
	CloseKicked        CloseCode = 4410 // a moderator removed the participant from the pod (gateway/kick); a ban may refuse its joins for a while
	CloseOrderLost     CloseCode = 4503 // this node lost the pod's order (its follower of the history stream stopped): resume, here or on another node
)

// String says what the close code means.
func (c CloseCode) String() string {
	switch c {
	case CloseNormal:
		return "1000 normal closure"
	case CloseGoingAway:
		return "1001 going away: the gateway is shutting down"
	case CloseMessageTooBig:
		return "1009 message too big"
	case CloseInternalError:
		return "1011 internal error: the replay was interrupted; resume again"
	case CloseReplaced:
		return "4000 replaced: another connection joined with the same participant id"
	case CloseSlowConsumer:
		return "4008 slow consumer: the connection read too slowly and its send queue filled"
	case CloseTokenExpired:
		return "4401 token expired: join again with a fresh token, or refresh it before it expires"
	case CloseRevoked:
		return "4403 revoked: the token no longer admits this participant to this pod"
	case CloseKicked:
		return "4410 kicked: removed from the pod by a moderator"
	case CloseOrderLost:
		return "4503 order lost: this gateway node lost the pod's order; resume"
	}
	return fmt.Sprintf("%d", int(c))
}
