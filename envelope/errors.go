package envelope

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpp/gateway/wire"
)

// Error is a refusal of one envelope: one of the codes of
// docs/protocol.md section 5 (wire.Code) and why. It becomes the payload
// of a system/error sent to the sender alone (Payload).
type Error struct {
	Code    wire.Code
	Message string
	// RetryAfter is set for the rate limits: how long until the same envelope
	// would be accepted, as the limiter computes it.
	RetryAfter time.Duration
	// Details are extra payload fields (the caps' limit and scope, for
	// example); capability_violation's have fields of their own.
	Details          map[string]any
	AttemptedKind    string
	YourCapabilities []wire.Capability
	// Rule names the trust rule that refused (audit.Rule…), for the
	// audit log alone: it is never sent.
	Rule string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Ruled sets e's Rule and returns e.
func (e *Error) Ruled(rule string) *Error {
	e.Rule = rule
	return e
}

// Errorf builds an Error with a formatted message.
func Errorf(code wire.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Payload is the refusal as the payload of a system/error
// (docs/protocol.md section 5): retry_after_ms rounded up to whole
// milliseconds, at least 1; capability_violation's your_capabilities a
// list even when empty; Details as raw JSON.
func (e *Error) Payload() wire.ErrorPayload {
	p := wire.ErrorPayload{Code: e.Code, Message: e.Message, Retryable: e.Code.Retryable(),
		AttemptedKind: e.AttemptedKind, YourCapabilities: e.YourCapabilities}
	if e.RetryAfter > 0 {
		p.RetryAfterMS = int64(max(1, (e.RetryAfter+time.Millisecond-1)/time.Millisecond))
	}
	if e.Code == wire.CodeCapabilityViolation && p.YourCapabilities == nil {
		p.YourCapabilities = []wire.Capability{} // no capability at all is still a list
	}
	if len(e.Details) > 0 {
		p.Details = make(map[string]json.RawMessage, len(e.Details))
		for k, v := range e.Details {
			b, err := json.Marshal(v)
			if err != nil {
				panic("envelope: the details of an error do not marshal: " + err.Error()) // a bug, never input
			}
			p.Details[k] = b
		}
	}
	return p
}
