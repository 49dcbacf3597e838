package envelope

import (
	"fmt"
	"time"
)

// Code is an error code of SPEC section 5, sent in system/error payloads and
// in the JSON body of a refused upgrade.
type Code string

// The codes, in the order of the table of SPEC section 5: when an envelope
// breaks several rules the first of them is reported.
const (
	CodeInvalidJSON          Code = "invalid_json"
	CodeInvalidEnvelope      Code = "invalid_envelope"
	CodeUnsupportedProtocol  Code = "unsupported_protocol"
	CodeAuthViolation        Code = "auth_violation"
	CodeReservedKind         Code = "reserved_kind"
	CodeCapabilityViolation  Code = "capability_violation"
	CodeMessageTooLarge      Code = "message_too_large"
	CodeInvalidContext       Code = "invalid_context"
	CodeContextConflict      Code = "context_conflict"
	CodeContextCycle         Code = "context_cycle"
	CodeContextDepthExceeded Code = "context_depth_exceeded"
	CodeDuplicateID          Code = "duplicate_id"
	CodeContextLimitExceeded Code = "context_limit_exceeded"
	CodeRateLimited          Code = "rate_limited"
	CodeContextRateLimited   Code = "context_rate_limited"
	CodeUnknownRequest       Code = "unknown_request"
	CodeInvalidFilter        Code = "invalid_filter"
	CodeShuttingDown         Code = "shutting_down"
)

// Codes of refused WebSocket upgrades (SPEC section 1).
const (
	CodeInvalidPod         Code = "invalid_pod"
	CodeInvalidParticipant Code = "invalid_participant"
	CodeUnauthorized       Code = "unauthorized"
	CodeForbidden          Code = "forbidden"
	CodeOverCapacity       Code = "over_capacity"
)

// Retryable reports whether the same envelope may succeed later.
func (c Code) Retryable() bool {
	switch c {
	case CodeContextLimitExceeded, CodeRateLimited, CodeContextRateLimited, CodeOverCapacity, CodeShuttingDown:
		return true
	}
	return false
}

// Error is a refusal of one envelope. It becomes the payload of a
// system/error sent to the sender alone.
type Error struct {
	Code    Code
	Message string
	// RetryAfter is set for the rate limits: how long until the same envelope
	// would be accepted, as the limiter computes it.
	RetryAfter time.Duration
	// Details are extra payload fields (capability_violation's
	// attempted_kind and your_capabilities, for example).
	Details map[string]any
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
