package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Envelope is one message of a pod: one JSON object in one WebSocket text
// message, or one line of a batched message (docs/protocol.md section 2).
// Participants send envelopes; the gateway relays them, and writes its own
// (welcome, presence, errors, context events, answers) in the same shape,
// from GatewayID.
//
// A sender may leave Protocol, ID, TS and From empty: the gateway fills
// them. Every other field is relayed exactly as sent, and so are top-level
// fields this type does not know, which decoding keeps in Extra.
//
// On the wire:
//
//	{"protocol": "mcpp/v0.1", "id": "2f6b…", "ts": "2026-11-22T10:00:00.123Z",
//	 "from": "alice", "to": ["bob"], "kind": "mcp/request:tools/call",
//	 "correlation_id": "env-1",
//	 "context": {"id": "reason-789", "type": "reasoning", "parent": "ctx-123", "metadata": {}},
//	 "payload": {}}
type Envelope struct {
	// Protocol is ProtocolMCPP or ProtocolMCPX; the gateway fills
	// ProtocolMCPP when it is absent.
	Protocol string `json:"protocol,omitempty"`
	// ID is 1 to 128 bytes, unique in the pod's history (a second envelope
	// with the same id is refused with CodeDuplicateID, section 8); the
	// gateway fills a UUIDv4 when it is absent.
	ID string `json:"id,omitempty"`
	// TS is a time; the gateway fills an RFC 3339 UTC time (TimeFormat)
	// when it is absent.
	TS string `json:"ts,omitempty"`
	// From is the sender's participant id; the gateway fills it, and
	// refuses another value with CodeAuthViolation.
	From string `json:"from,omitempty"`
	// To addresses the envelope to these participants; empty means
	// everyone in the pod. An envelope addressed to a participant reaches
	// it whatever its filter.
	To []string `json:"to,omitempty"`
	// Kind is required. system/* kinds are the gateway's, gateway/* kinds
	// are requests to the gateway (section 6); any other kind is relayed
	// when one of the sender's capabilities matches it.
	Kind string `json:"kind"`
	// CorrelationID ties an answer to what it answers: relayed as sent;
	// the gateway sets it to the id of the envelope its error or answer is
	// about.
	CorrelationID CorrelationID `json:"correlation_id,omitempty"`
	// Context is the raw JSON of the context field: a Context object or a
	// path string ("task-1/plan"), section 3. Build it with Context.JSON or
	// PathContext; read it with ParseContext or ContextID.
	Context json.RawMessage `json:"context,omitempty"`
	// Payload is any JSON value; the gateway never looks into it. nil
	// leaves the field out.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Lifecycle says how the pod's history keeps the envelope (section 8);
	// nil means durable.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Trace is the W3C trace context the envelope continues (section 1,
	// "Trace context"): the sender's, relayed as sent once the gateway
	// found it valid, or the gateway's span when tracing is on and the
	// sender gave none. nil: none.
	Trace *Trace `json:"trace,omitempty"`

	// Extra holds top-level fields that are none of the above, as raw
	// JSON, by name. The gateway relays them as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// envelopeFields are the names of Envelope's own fields, in the order of
// docs/protocol.md section 2, which is the order MarshalJSON writes them.
var envelopeFields = []string{"protocol", "id", "ts", "from", "to", "kind", "correlation_id", "context", "payload", "lifecycle", "trace"}

// Trace is an envelope's trace field (docs/protocol.md section 1): W3C
// Trace Context's traceparent (version 00) and tracestate, under their
// W3C names.
type Trace struct {
	Traceparent string `json:"traceparent"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// NewEnvelope returns an envelope of kind whose payload is v in JSON (a
// json.RawMessage or []byte is taken as is).
func NewEnvelope(kind string, v any) (*Envelope, error) {
	p, err := marshalPayload(v)
	if err != nil {
		return nil, fmt.Errorf("wire: the payload of %s: %w", kind, err)
	}
	return &Envelope{Kind: kind, Payload: p}, nil
}

func marshalPayload(v any) (json.RawMessage, error) {
	switch p := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	}
	return json.Marshal(v)
}

// DecodePayload decodes the payload into v, which is typically one of
// this package's payload types (Welcome, Presence, ErrorPayload, …) for
// the gateway's kinds.
func (e *Envelope) DecodePayload(v any) error {
	if len(e.Payload) == 0 {
		return fmt.Errorf("wire: %s envelope %q has no payload", e.Kind, e.ID)
	}
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("wire: the payload of %s envelope %q: %w", e.Kind, e.ID, err)
	}
	return nil
}

// ContextID is the id of the envelope's context (a path is its own id),
// or "" when it has none or the field does not parse.
func (e *Envelope) ContextID() string {
	c, err := ParseContext(e.Context)
	if err != nil {
		return ""
	}
	return c.ID
}

// IsSystem reports whether the envelope is one the gateway wrote
// (a system/* kind).
func (e *Envelope) IsSystem() bool { return strings.HasPrefix(e.Kind, "system/") }

// InHistory reports whether a pod's history keeps the envelope
// (docs/protocol.md section 8): every relayed envelope except those whose
// lifecycle mode is ephemeral, and system/context events; not welcomes,
// presence, errors or answers to requests.
//
// The id of the last such envelope received is the safe choice for a
// resume (QueryResume), and the one this package's users make. The
// gateway also resumes from the id of an ephemeral envelope or a presence
// event it delivered, for as long as it remembers where they were (as
// many of them as history entries, per pod); an id it does not know
// resumes nothing (HistoryInfo.Resumed false).
func (e *Envelope) InHistory() bool {
	if e.IsSystem() {
		return e.Kind == KindContext
	}
	if strings.HasPrefix(e.Kind, "gateway/") {
		return false
	}
	return e.Lifecycle == nil || e.Lifecycle.Mode != ModeEphemeral
}

// MarshalJSON writes the fields in the order of docs/protocol.md section
// 2, then Extra's by name, leaving out the empty ones (kind is always
// written). Raw JSON fields are compacted, so the result is one line, as
// a batch needs.
func (e Envelope) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	value := func(v any) error {
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(j)
		return nil
	}
	field := func(name string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		_ = value(name) // escapes an Extra name
		b.WriteByte(':')
	}
	raw := func(name string, r json.RawMessage) error {
		field(name)
		if err := json.Compact(&b, r); err != nil {
			return fmt.Errorf("wire: envelope field %s: %w", name, err)
		}
		return nil
	}
	for _, s := range []struct{ name, v string }{{"protocol", e.Protocol}, {"id", e.ID}, {"ts", e.TS}, {"from", e.From}} {
		if s.v != "" {
			field(s.name)
			_ = value(s.v)
		}
	}
	if len(e.To) > 0 {
		field("to")
		_ = value(e.To)
	}
	field("kind")
	_ = value(e.Kind)
	if len(e.CorrelationID) > 0 {
		field("correlation_id")
		_ = value(e.CorrelationID)
	}
	if len(e.Context) > 0 {
		if err := raw("context", e.Context); err != nil {
			return nil, err
		}
	}
	if len(e.Payload) > 0 {
		if err := raw("payload", e.Payload); err != nil {
			return nil, err
		}
	}
	if e.Lifecycle != nil {
		field("lifecycle")
		if err := value(e.Lifecycle); err != nil {
			return nil, err
		}
	}
	if e.Trace != nil && e.Trace.Traceparent != "" {
		field("trace")
		_ = value(e.Trace)
	}
	names := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		if !slices.Contains(envelopeFields, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		field(k)
		if err := json.Compact(&b, e.Extra[k]); err != nil {
			return nil, fmt.Errorf("wire: envelope field %q: %w", k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads one envelope, keeping unknown top-level fields in
// Extra. A field of the wrong JSON type is an error; a null is taken as
// absent (the gateway refuses null in every field but payload).
func (e *Envelope) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m == nil {
		return errors.New("wire: an envelope is a JSON object, not null")
	}
	var out Envelope
	str := func(name string, dst *string) error {
		if err := json.Unmarshal(m[name], dst); err != nil {
			return fmt.Errorf("wire: envelope field %s: %w", name, err)
		}
		return nil
	}
	for k, v := range m {
		var err error
		switch k {
		case "protocol":
			err = str(k, &out.Protocol)
		case "id":
			err = str(k, &out.ID)
		case "ts":
			err = str(k, &out.TS)
		case "from":
			err = str(k, &out.From)
		case "kind":
			err = str(k, &out.Kind)
		case "to":
			err = json.Unmarshal(v, &out.To)
		case "correlation_id":
			err = json.Unmarshal(v, &out.CorrelationID)
		case "context":
			if !isNull(v) {
				out.Context = v
			}
		case "payload":
			out.Payload = v // null is a payload
		case "lifecycle":
			err = json.Unmarshal(v, &out.Lifecycle)
		case "trace":
			// The gateway relays only a valid one; one it did not check
			// (another gateway's) that does not read is kept as it is.
			var t Trace
			if json.Unmarshal(v, &t) == nil && t.Traceparent != "" {
				out.Trace = &t
				break
			}
			if out.Extra == nil {
				out.Extra = map[string]json.RawMessage{}
			}
			out.Extra[k] = v
		default:
			if out.Extra == nil {
				out.Extra = map[string]json.RawMessage{}
			}
			out.Extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("wire: envelope field %s: %w", k, err)
		}
	}
	*e = out
	return nil
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// CorrelationID is the correlation_id field: one id (a JSON string) or
// several (a JSON array of strings), docs/protocol.md section 2. One id
// is written as a string, several as an array; an array of one id reads
// as that id (the same meaning). The gateway's errors and answers carry
// one id, the id of the envelope they are about.
type CorrelationID []string

// Has reports whether id is one of the ids.
func (c CorrelationID) Has(id string) bool { return slices.Contains(c, id) }

// MarshalJSON writes one id as a string, several as an array.
func (c CorrelationID) MarshalJSON() ([]byte, error) {
	if len(c) == 1 {
		return json.Marshal(c[0])
	}
	return json.Marshal([]string(c))
}

// UnmarshalJSON reads a string or an array of strings.
func (c *CorrelationID) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*c = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*c = CorrelationID{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errors.New("wire: correlation_id is a string or an array of strings")
	}
	*c = many
	return nil
}

// Context is the object form of an envelope's context field (MCPP
// ADR-k9j, docs/protocol.md section 3), and the context of a system/context
// event (which always carries the object form). id is 1 to 256 bytes,
// type up to 64, parent up to 256, the whole field at most
// max_context_bytes (4096). The first envelope that names an id creates the
// context, fixing its type and parent; later envelopes may repeat or omit
// them, but not change them (CodeContextConflict).
//
//	{"id": "reason-789", "type": "reasoning", "parent": "ctx-123", "metadata": {}}
type Context struct {
	ID       string          `json:"id"`
	Type     string          `json:"type,omitempty"`
	Parent   string          `json:"parent,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"` // a JSON object, relayed as sent
}

// JSON is c as the value of an envelope's context field.
func (c Context) JSON() json.RawMessage {
	b, err := json.Marshal(c)
	if err != nil {
		// Only Metadata can fail, and only when it is not JSON: write
		// the rest, which the gateway will judge.
		c.Metadata = nil
		b, _ = json.Marshal(c)
	}
	return b
}

// PathContext is the path form of the context field (ADR-p4m,
// docs/protocol.md section 3): "root/child/leaf", segments of
// [A-Za-z0-9_-]. It means {"id": "root/child/leaf", "parent": "root/child"}.
func PathContext(path string) json.RawMessage {
	b, _ := json.Marshal(path)
	return b
}

// ParseContext reads a context field in either form. A path becomes its
// object meaning: its id is the whole path and its parent the path
// without its last segment. An empty field is the zero Context. The
// syntax is checked only as far as JSON goes: the gateway judges the rest
// (CodeInvalidContext).
func ParseContext(raw json.RawMessage) (Context, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return Context{}, nil
	}
	if raw[0] == '"' {
		var path string
		if err := json.Unmarshal(raw, &path); err != nil {
			return Context{}, fmt.Errorf("wire: context path: %w", err)
		}
		c := Context{ID: path}
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			c.Parent = path[:i]
		}
		return c, nil
	}
	var c Context
	if err := json.Unmarshal(raw, &c); err != nil {
		return Context{}, fmt.Errorf("wire: context: %w", err)
	}
	return c, nil
}

// Mode is how a pod's history keeps an envelope (docs/protocol.md
// section 8).
type Mode string

// The lifecycle modes.
const (
	ModeDurable   Mode = "durable"   // the default: stored, replayed
	ModeTransient Mode = "transient" // stored and replayed whole until consumed, then replayed collapsed to its summary
	ModeEphemeral Mode = "ephemeral" // delivered live to those present, never stored, never replayed
)

// Lifecycle is an envelope's lifecycle field (docs/protocol.md section 8).
// Live delivery never depends on it; history does.
//
//	{"mode": "transient", "summary": "15 activity records (page 1/9, IDs: 72, 73, 74…)"}
//	{"mode": "ephemeral"}
//	{"consumes": ["env-41", "env-44"]}
type Lifecycle struct {
	// Mode is empty (meaning durable) or one of the modes.
	Mode Mode `json:"mode,omitempty"`
	// Summary is required with ModeTransient, 1 to 1024 bytes, and
	// allowed with it only: what a collapsed replay shows instead of the
	// payload.
	Summary string `json:"summary,omitempty"`
	// Consumes names 1 to 64 transient envelopes of the pod's history that
	// this one consumes: from then on history replays them collapsed
	// (Collapsed). It may come with any mode.
	Consumes []string `json:"consumes,omitempty"`
}
