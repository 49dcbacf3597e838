package envelope

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// TestErrorPayload: a refusal as its system/error payload
// (docs/protocol.md section 5).
func TestErrorPayload(t *testing.T) {
	cases := []struct {
		name string
		e    *Error
		want string
	}{
		{"plain", Errorf(wire.CodeReservedKind, "no"),
			`{"error":"reserved_kind","message":"no","retryable":false}`},
		{"retry rounded up", &Error{Code: wire.CodeRateLimited, Message: "slow", RetryAfter: 1500 * time.Microsecond},
			`{"error":"rate_limited","message":"slow","retryable":true,"retry_after_ms":2}`},
		{"retry at least 1 ms", &Error{Code: wire.CodeContextRateLimited, Message: "slow", RetryAfter: time.Nanosecond},
			`{"error":"context_rate_limited","message":"slow","retryable":true,"retry_after_ms":1}`},
		{"capability_violation", &Error{Code: wire.CodeCapabilityViolation, Message: "m", AttemptedKind: "chat", YourCapabilities: wire.Kinds("mcp/*")},
			`{"error":"capability_violation","message":"m","retryable":false,"attempted_kind":"chat","your_capabilities":["mcp/*"]}`},
		{"no capability at all", &Error{Code: wire.CodeCapabilityViolation, Message: "m", AttemptedKind: "chat"},
			`{"error":"capability_violation","message":"m","retryable":false,"attempted_kind":"chat","your_capabilities":[]}`},
		{"details", &Error{Code: wire.CodeContextLimitExceeded, Message: "m", Details: map[string]any{"scope": "pod", "limit": 3}},
			`{"error":"context_limit_exceeded","message":"m","retryable":true,"limit":3,"scope":"pod"}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.e.Payload())
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s (%v), want %s", c.name, b, err, c.want)
		}
	}
}
