package envelope

import (
	"strings"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"
)

// W3C trace context on an envelope (docs/protocol.md section 1, "Trace
// context"): an optional top-level trace object,
//
//	"trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=x"}
//
// read by Parse, never a reason to refuse an envelope: a trace that is
// not what W3C's Trace Context says is cut out of the relayed bytes (a
// valid traceparent is kept when only its tracestate, or another member
// of the object, was wrong), and the envelope is relayed without it.
// The gateway never decides anything by it; it continues it in its own
// spans, and fills one in (Envelope.SetTrace) where tracing is on and the
// sender gave none.

// MaxTracestateBytes is W3C's bound on a tracestate (its 32 list members
// are checked by OpenTelemetry's parser).
const MaxTracestateBytes = 512

// traceparentLen is the length of a version 00 traceparent:
// 00-TRACEID(32)-PARENTID(16)-FLAGS(2).
const traceparentLen = 55

// TraceContext is a span's context as a frame's header carries it between
// nodes (the span of the node that accepted the envelope): what the
// nodes that deliver it continue.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// Valid reports whether tc names a span.
func (tc TraceContext) Valid() bool { return tc.TraceID != [16]byte{} && tc.SpanID != [8]byte{} }

// ParseTraceparent reads a version 00 traceparent, lower-case hex, whose
// trace id and parent id are not all zeros (W3C Trace Context, level 1).
func ParseTraceparent(s string) (TraceContext, bool) {
	if len(s) != traceparentLen || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return TraceContext{}, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return TraceContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return TraceContext{}, false
	}
	f, ok := lowerHexByte(s[53], s[54])
	if !ok {
		return TraceContext{}, false
	}
	return TraceContext{TraceID: tid, SpanID: sid, Flags: f}, true
}

func lowerHexByte(a, b byte) (byte, bool) {
	hi, ok1 := lowerHex(a)
	lo, ok2 := lowerHex(b)
	return hi<<4 | lo, ok1 && ok2
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ValidTracestate reports whether s is a tracestate W3C allows: at most
// 512 bytes, at most 32 list members, each key=value of its grammar, no
// key twice.
func ValidTracestate(s string) bool {
	if len(s) > MaxTracestateBytes {
		return false
	}
	_, err := trace.ParseTraceState(s)
	return err == nil
}

// Traceparent writes tc as a version 00 traceparent.
func (tc TraceContext) Traceparent() string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, traceparentLen)
	b = append(b, "00-"...)
	for _, c := range tc.TraceID {
		b = append(b, digits[c>>4], digits[c&15])
	}
	b = append(b, '-')
	for _, c := range tc.SpanID {
		b = append(b, digits[c>>4], digits[c&15])
	}
	b = append(b, '-', digits[tc.Flags>>4], digits[tc.Flags&15])
	return string(b)
}

// parseTrace reads the trace member whose key begins at keyAt and whose
// value is v, as Parse meets it (after another member when keptBefore):
// a valid one is kept as sent; what is wrong is noted for Fill to cut out
// (every trace member then), and a valid traceparent of a trace otherwise
// wrong is kept, for Fill to write anew.
func (e *Envelope) parseTrace(data []byte, keyAt int, v gjson.Result, keptBefore bool) {
	e.traceCut = append(e.traceCut, memberSpan(data, keyAt, v.Index+len(v.Raw), keptBefore))
	if e.traceSeen {
		// Twice: receivers would disagree on which one counts.
		e.TraceMalformed, e.TraceParent, e.TraceState, e.traceKeep, e.traceFill = true, "", "", false, false
		e.traceCtx = TraceContext{}
		return
	}
	e.traceSeen = true
	if !v.IsObject() {
		e.TraceMalformed = true
		return
	}
	var parents, states, others int
	var parent, state gjson.Result
	v.ForEach(func(k, m gjson.Result) bool {
		switch k.Str {
		case "traceparent":
			parents++
			parent = m
		case "tracestate":
			states++
			state = m
		default:
			others++
		}
		return true
	})
	tc, ok := ParseTraceparent(parent.Str)
	if parents != 1 || parent.Type != gjson.String || !ok {
		e.TraceMalformed = true
		return
	}
	e.TraceParent, e.traceCtx = parent.Str, tc
	if states > 1 || states == 1 && (state.Type != gjson.String || !ValidTracestate(state.Str)) || others > 0 {
		e.TraceMalformed, e.traceFill = true, true // Fill writes the traceparent alone
		return
	}
	e.TraceState = state.Str
	e.traceKeep = true
}

// memberSpan is the span of an object member from its key (at keyAt) to
// the end of its value (valueEnd), with one comma that separates it from
// its neighbours: the one before it, after a member that stays
// (keptBefore), else the one after it, so that the object stays valid
// JSON once every trace member is cut out (kind, which an envelope must
// have, stays).
func memberSpan(data []byte, keyAt, valueEnd int, keptBefore bool) Span {
	if keptBefore {
		j := keyAt - 1
		for j > 0 && isSpace(data[j]) {
			j--
		}
		if data[j] == ',' {
			j--
			for j > 0 && isSpace(data[j]) {
				j--
			}
			return Span{j + 1, valueEnd}
		}
	}
	i := valueEnd
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	if i < len(data) && data[i] == ',' {
		i++
		for i < len(data) && isSpace(data[i]) {
			i++
		}
		return Span{keyAt, i}
	}
	return Span{keyAt, valueEnd}
}

// cutsTrace reports whether Fill cuts trace members out: every one of
// them, unless the one sent is relayed as it is.
func (e *Envelope) cutsTrace() bool { return len(e.traceCut) > 0 && !e.traceKeep }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// HasTrace reports whether the envelope carries a valid trace, as sent.
func (e *Envelope) HasTrace() bool { return e.TraceParent != "" }

// TraceContext is the span context the envelope's traceparent names (not
// Valid when it has none).
func (e *Envelope) TraceContext() TraceContext { return e.traceCtx }

// SetTrace has Fill write trace context the sender did not give: a
// traceparent (and a tracestate, when not ""), which the caller made
// valid. An envelope whose sender gave a valid traceparent keeps it.
func (e *Envelope) SetTrace(parent, state string) {
	if e.traceKeep || e.TraceParent != "" {
		return
	}
	e.TraceParent, e.TraceState, e.traceFill = parent, state, true
}

// appendTrace appends the trace member Fill writes, with its comma.
func appendTrace(dst []byte, parent, state string) []byte {
	dst = append(dst, `"trace":{"traceparent":"`...)
	dst = append(dst, parent...) // checked: hex and dashes
	dst = append(dst, '"')
	if state != "" {
		dst = append(dst, `,"tracestate":"`...)
		dst = appendTracestate(dst, state)
		dst = append(dst, '"')
	}
	return append(dst, `},`...)
}

// appendTracestate appends a valid tracestate as a JSON string's content:
// its grammar allows every printable ASCII character but ',' and '=' in
// values, so '"' and '\' are escaped.
func appendTracestate(dst []byte, s string) []byte {
	if !strings.ContainsAny(s, `"\`) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return dst
}
