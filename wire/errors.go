package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// ErrorPayload is the payload of system/error, sent to the sender alone
// when the gateway refuses one of its envelopes, with correlation_id set
// to the refused envelope's id when it had one (docs/protocol.md section 5).
// The refused envelope is not relayed and the connection stays open. The
// same object, with the envelope's id, is a refused entry of a publish
// answer (PublishResult).
//
//	{"error": "capability_violation", "message": "no capability matches kind mcp/request:tools/call",
//	 "retryable": false, "attempted_kind": "mcp/request:tools/call", "your_capabilities": ["chat"]}
//	{"error": "rate_limited", "message": "…", "retryable": true, "retry_after_ms": 40}
type ErrorPayload struct {
	// Code is the error field: what rule was broken.
	Code    Code   `json:"error" jsonschema:"the refusal's code (docs/protocol.md section 5), e.g. rate_limited, capability_violation, invalid_context"`
	Message string `json:"message" jsonschema:"what was wrong, in words"` // for people
	// Retryable says whether the same envelope may succeed later
	// (Code.Retryable).
	Retryable bool `json:"retryable" jsonschema:"true when the same envelope (or call) may succeed later"`
	// RetryAfterMS is set for the rate limits: how long until the same
	// envelope would be accepted.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty" jsonschema:"for the rate limits: wait this long before retrying"`

	// AttemptedKind and YourCapabilities are the details of
	// capability_violation.
	AttemptedKind    string       `json:"attempted_kind,omitempty" jsonschema:"capability_violation: the kind no capability matched"`
	YourCapabilities []Capability `json:"your_capabilities,omitzero" jsonschema:"capability_violation: the sender's capabilities"`

	// Details holds every other field, as raw JSON by name: the details of
	// codes this package does not know yet.
	Details map[string]json.RawMessage `json:"-"`
}

// errorPayloadFields are ErrorPayload's own JSON names.
var errorPayloadFields = []string{"error", "message", "retryable", "retry_after_ms", "attempted_kind", "your_capabilities"}

// String is "code: message", with the retry delay when there is one.
func (p ErrorPayload) String() string {
	s := string(p.Code) + ": " + p.Message
	if p.RetryAfterMS > 0 {
		s += " (retry after " + strconv.FormatInt(p.RetryAfterMS, 10) + " ms)"
	}
	return s
}

type errorPayloadJSON ErrorPayload // without the methods

// MarshalJSON writes the known fields, then Details.
func (p ErrorPayload) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(errorPayloadJSON(p))
	if err != nil || len(p.Details) == 0 {
		return b, err
	}
	return appendFields(b, p.Details, errorPayloadFields)
}

// UnmarshalJSON reads the known fields and keeps the others in Details.
func (p *ErrorPayload) UnmarshalJSON(data []byte) error {
	var out errorPayloadJSON
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	extra, err := otherFields(data, errorPayloadFields)
	if err != nil {
		return err
	}
	out.Details = extra
	*p = ErrorPayload(out)
	return nil
}

// appendFields adds fields (by sorted name, skipping the names in skip)
// to the JSON object obj.
func appendFields(obj []byte, fields map[string]json.RawMessage, skip []string) ([]byte, error) {
	names := make([]string, 0, len(fields))
	for k := range fields {
		if !slices.Contains(skip, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	out := obj[:len(obj)-1] // without the closing brace
	for _, k := range names {
		if len(out) > 1 {
			out = append(out, ',')
		}
		name, _ := json.Marshal(k)
		out = append(out, name...)
		out = append(out, ':')
		var v bytes.Buffer
		if err := json.Compact(&v, fields[k]); err != nil {
			return nil, fmt.Errorf("wire: field %q: %w", k, err)
		}
		out = append(out, v.Bytes()...)
	}
	return append(out, '}'), nil
}

// otherFields returns the fields of the JSON object data whose names are
// not in known, or nil.
func otherFields(data []byte, known []string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	for _, k := range known {
		delete(m, k)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// Refusal is the JSON body of a refused upgrade, and of a refused publish
// request (docs/protocol.md sections 1 and 6), with the HTTP status of
// Code.HTTPStatus.
//
//	{"error": "unauthorized", "message": "unknown token"}
type Refusal struct {
	Code    Code   `json:"error"`
	Message string `json:"message"`
}

// PublishAnswer is the answer (200) of POST /pods/NAME/envelopes
// (docs/protocol.md section 6): one result per envelope of the body, in
// order.
//
//	{"results": [{"id": "env-1"}, {"id": "q1", "answer": {"contexts": []}},
//	             {"error": "reserved_kind", "message": "…", "retryable": false, "id": "env-3"}]}
type PublishAnswer struct {
	Results []PublishResult `json:"results"`
}

// PublishResult is one entry of PublishAnswer (docs/protocol.md section
// 6): {"id": ID} when the envelope was relayed; {"id": ID, "answer":
// PAYLOAD} for a gateway/contexts or gateway/history request (the payload
// of its system/* answer); or, when it was refused, the system/error
// payload with the envelope's id when it had one.
type PublishResult struct {
	ID     string          `json:"id,omitempty"`
	Answer json.RawMessage `json:"answer,omitempty"`
	// Error is set when the envelope was refused; its fields are written
	// next to id, not under a key of their own.
	Error *ErrorPayload `json:"-"`
}

// MarshalJSON writes the error's fields next to id.
func (r PublishResult) MarshalJSON() ([]byte, error) {
	type plain PublishResult
	b, err := json.Marshal(plain(r))
	if err != nil || r.Error == nil {
		return b, err
	}
	e, err := json.Marshal(r.Error)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e, &fields); err != nil {
		return nil, err
	}
	return appendFields(b, fields, []string{"id", "answer"})
}

// UnmarshalJSON reads a result; one with an error field is a refusal.
func (r *PublishResult) UnmarshalJSON(data []byte) error {
	var out struct {
		ID     string          `json:"id"`
		Answer json.RawMessage `json:"answer"`
		Error  *Code           `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	res := PublishResult{ID: out.ID, Answer: out.Answer}
	if out.Error != nil {
		var e ErrorPayload
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		delete(e.Details, "id")
		delete(e.Details, "answer")
		if len(e.Details) == 0 {
			e.Details = nil
		}
		res.Error = &e
	}
	*r = res
	return nil
}
