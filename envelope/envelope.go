package envelope

import "unsafe"

// Limits on single fields that docs/protocol.md section 2 fixes.
const (
	MaxIDBytes          = 128
	MaxParticipantBytes = 128
	MaxPodBytes         = 64
)

// Span is a half-open byte range [Start, End) of a message.
type Span struct{ Start, End int }

// Valid reports whether the span was set.
func (s Span) Valid() bool { return s.End > s.Start }

// Envelope is what the gateway reads from one message. Its strings may point
// into the message's bytes: they are valid only as long as those bytes are,
// and whatever outlives the message (a registry entry, say) must be cloned.
type Envelope struct {
	// Raw is the message as received.
	Raw []byte

	Protocol     string // as sent, or "" when absent
	ProtocolSpan Span   // the JSON string token, quotes included
	ID           string // as sent, or "" when absent
	HasTS        bool
	From         string // as sent, or "" when absent
	HasFrom      bool
	To           []string
	Kind         string
	// Context is the raw JSON of the context field, or nil. It is checked
	// by ParseContext only when the kind needs it (gateway requests ignore
	// their context, docs/protocol.md section 6).
	Context []byte
	// Payload is the raw JSON of the payload field, or nil.
	Payload []byte
	// Mode and Consumes are what the lifecycle field says (docs/protocol.md
	// section 8); Consumes point into the message.
	Mode     Mode
	Consumes []string

	// TraceParent and TraceState are the envelope's W3C trace context
	// (trace.go): as sent when valid, or what SetTrace gave; "" when
	// none. TraceMalformed says a trace field was cut out, or written
	// anew, because something in it was not valid.
	TraceParent    string
	TraceState     string
	TraceMalformed bool
	traceCtx       TraceContext
	// traceCut are the trace members Fill cuts out; traceKeep says the
	// one sent is relayed as it is, traceFill that Fill writes one.
	traceCut             []Span
	traceSeen, traceKeep bool
	traceFill            bool
}

// Reset clears e for reuse, keeping the capacity of its slices.
func (e *Envelope) Reset() {
	to, consumes, cut := e.To[:0], e.Consumes[:0], e.traceCut[:0]
	*e = Envelope{To: to, Consumes: consumes, traceCut: cut}
}

// IsGatewayRequest reports whether the kind is a request to the gateway.
func (e *Envelope) IsGatewayRequest() bool { return hasPrefix(e.Kind, "gateway/") }

// IsSystem reports whether the kind is reserved to the gateway.
func (e *Envelope) IsSystem() bool { return hasPrefix(e.Kind, "system/") }

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// ValidParticipantID reports whether id has the syntax of docs/protocol.md
// section 1: 1 to 128 characters of [A-Za-z0-9._:@-].
func ValidParticipantID(id string) bool {
	if len(id) == 0 || len(id) > MaxParticipantBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// ValidPodName reports whether name has the syntax of docs/protocol.md
// section 1: 1 to 64 characters of [A-Za-z0-9._-].
func ValidPodName(name string) bool {
	if len(name) == 0 || len(name) > MaxPodBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}

// bytesString views b as a string without copying; b must not change while
// the string is in use.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
