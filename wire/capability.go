package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Capability is one capability pattern (docs/protocol.md section 2): what
// envelopes a participant may send. On the wire it is a kind pattern as a
// string ("chat", "mcp/*", "*"), or MEW's object form, whose payload
// pattern the envelope's payload must match as well:
//
//	"chat"
//	{"kind": "chat"}
//	{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}
//
// This type is the shape only. Package capability compiles a list of them
// into what the gateway checks, and refuses the ones it cannot check (an
// empty kind, a payload pattern too large or with an unsupported form).
type Capability struct {
	// Kind is the kind pattern: "*" matches every kind, a pattern ending
	// in "*" the kinds that start with what precedes it, anything else
	// exactly.
	Kind string
	// Payload is the payload pattern as given (a JSON object), or nil:
	// any payload.
	Payload json.RawMessage
}

// Kinds makes plain kind patterns.
func Kinds(patterns ...string) []Capability {
	out := make([]Capability, len(patterns))
	for i, p := range patterns {
		out[i] = Capability{Kind: p}
	}
	return out
}

// MarshalJSON writes a plain kind pattern as a string, one with a payload
// pattern as the object form.
func (c Capability) MarshalJSON() ([]byte, error) {
	if c.Payload == nil {
		return json.Marshal(c.Kind)
	}
	return json.Marshal(struct {
		Kind    string          `json:"kind"`
		Payload json.RawMessage `json:"payload"`
	}{c.Kind, c.Payload})
}

// String is the capability's JSON, as MarshalJSON writes it: for error
// messages and logs.
func (c Capability) String() string {
	b, err := c.MarshalJSON()
	if err != nil {
		// Only a Payload that is not JSON gets here (one built in Go,
		// not read from the wire); show it rather than nothing.
		return fmt.Sprintf("{kind: %q, payload: %q}", c.Kind, []byte(c.Payload))
	}
	return string(b)
}

// The errors of UnmarshalJSON. Each says what the right form is, since
// whoever reads one is writing a token file, a JWT or a capability/grant.
var (
	errCapabilityForm    = errors.New(`a capability is a kind pattern ("chat", "mcp/*") or {"kind": PATTERN, "payload": PATTERN}`)
	errCapabilityKind    = errors.New(`a capability object needs "kind"`)
	errCapabilityKindStr = errors.New(`a capability's "kind" is one pattern string; write one capability per kind pattern`)
	errCapabilityPayload = errors.New(`a capability's "payload" is a payload pattern, a JSON object`)
)

// UnmarshalJSON reads either form. Fields of the object form other than
// "kind" and "payload" (MEW's configurations carry an "id", for one) are
// ignored. A "payload" of null is the same as none: any payload.
func (c *Capability) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errCapabilityForm
	}
	switch b[0] {
	case '"':
		*c = Capability{}
		return json.Unmarshal(b, &c.Kind)
	case '{':
	default:
		return errCapabilityForm
	}
	// Read into a map, not a struct, so that "kind" and "payload" are
	// matched exactly: a struct would also take "Kind" or "KIND", which a
	// payload pattern (and a JavaScript receiver) does not read as kind.
	var o map[string]json.RawMessage
	if err := json.Unmarshal(b, &o); err != nil {
		return errCapabilityForm
	}
	kindRaw, payload := bytes.TrimSpace(o["kind"]), o["payload"]
	if len(kindRaw) == 0 {
		return errCapabilityKind
	}
	var kind string
	if err := json.Unmarshal(kindRaw, &kind); err != nil || kindRaw[0] != '"' {
		// MEW also accepts a list of kinds here; a list of capabilities
		// says the same and keeps one pattern per entry.
		return errCapabilityKindStr
	}
	*c = Capability{Kind: kind}
	switch p := bytes.TrimSpace(payload); {
	case len(p) == 0, bytes.Equal(p, []byte("null")):
	case p[0] != '{':
		return errCapabilityPayload
	default:
		c.Payload = p
	}
	return nil
}
