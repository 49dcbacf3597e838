package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/wire"
)

// gjsonValidMax is the largest message validJSON checks with gjson,
// whose validator recurses once per level of nesting: at most 4 KiB of
// nesting keeps a hostile message's stack small. Larger ones go to
// encoding/json's scanner, which does not recurse (and stops at 10,000
// levels).
const gjsonValidMax = 4 << 10

// validJSON reports whether data is one JSON value, as encoding/json.Valid
// does (FuzzValidJSON holds them to the same answer). gjson's validator
// costs half of encoding/json's scanner, which was a tenth of the
// gateway's CPU at ten recipients an envelope (BENCHMARKS.md).
func validJSON(data []byte) bool {
	if len(data) <= gjsonValidMax {
		return gjson.ValidBytes(data)
	}
	return json.Valid(data)
}

// Parse reads one message into e, reporting the first rule of
// docs/protocol.md section 2 that it breaks in the order of the error table:
// invalid_json, then invalid_envelope, then unsupported_protocol. The checks
// that need the sender (from, capabilities, size, context, limits) are the
// caller's.
//
// Parse rewrites raw newlines (which valid JSON allows only as white space
// between tokens) to spaces in place, so that every accepted envelope fits on
// one line of a batched delivery; no field changes by it.
func (e *Envelope) Parse(data []byte) *Error {
	e.Reset()
	e.Raw = data
	if !validJSON(data) {
		return Errorf(wire.CodeInvalidJSON, "the message is not valid JSON")
	}
	if !utf8.Valid(data) {
		return Errorf(wire.CodeInvalidJSON, "the message is not valid UTF-8")
	}
	start := firstNonSpace(data)
	if start < 0 || data[start] != '{' {
		return Errorf(wire.CodeInvalidJSON, "the message is not a JSON object")
	}
	if bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		for i, c := range data {
			if c == '\n' || c == '\r' {
				data[i] = ' '
			}
		}
	}

	var (
		bad         *Error
		badProtocol bool
		seen        uint16
		hasKind     bool
		keptBefore  bool // a member other than trace came before
	)
	fail := func(format string, args ...any) {
		if bad == nil {
			bad = Errorf(wire.CodeInvalidEnvelope, format, args...)
		}
	}
	gjson.Parse(bytesString(data)).ForEach(func(k, v gjson.Result) bool {
		if k.Str == "trace" {
			// Never a refusal: what is wrong in it is cut out (trace.go).
			e.parseTrace(data, k.Index, v, keptBefore)
			return true
		}
		keptBefore = true
		bit, known := fieldBits[k.Str]
		if !known {
			// Unknown top-level fields are relayed untouched, but for
			// one that a receiver could read as the envelope's own: in
			// another case, or with a NUL (docs/protocol.md section 2).
			if msg := misleadingField(k.Str); msg != "" {
				fail("%s", msg)
			}
			return true
		}
		if seen&bit != 0 {
			fail("field %q appears twice", k.Str)
			return true
		}
		seen |= bit
		if v.Type == gjson.Null && k.Str != "payload" {
			fail("field %q is null", k.Str)
			return true
		}
		switch k.Str {
		case "protocol":
			if v.Type != gjson.String {
				fail("protocol must be a string")
				return true
			}
			e.Protocol = v.Str
			e.ProtocolSpan = Span{v.Index, v.Index + len(v.Raw)}
			if v.Str != wire.ProtocolMCPP && v.Str != wire.ProtocolMCPX {
				badProtocol = true
			}
		case "id":
			if v.Type != gjson.String || len(v.Str) == 0 || len(v.Str) > MaxIDBytes {
				fail("id must be a string of 1 to %d bytes", MaxIDBytes)
				return true
			}
			e.ID = v.Str
		case "ts":
			if v.Type != gjson.String {
				fail("ts must be a string")
				return true
			}
			e.HasTS = true
		case "from":
			if v.Type != gjson.String {
				fail("from must be a string")
				return true
			}
			e.From, e.HasFrom = v.Str, true
		case "to":
			if !v.IsArray() {
				fail("to must be an array of participant ids")
				return true
			}
			v.ForEach(func(_, p gjson.Result) bool {
				if p.Type != gjson.String || !ValidParticipantID(p.Str) {
					fail("to must be an array of participant ids")
					return false
				}
				e.To = append(e.To, p.Str)
				return true
			})
		case "kind":
			if v.Type != gjson.String || len(v.Str) == 0 {
				fail("kind must be a non-empty string")
				return true
			}
			e.Kind, hasKind = v.Str, true
		case "correlation_id":
			ok := v.Type == gjson.String
			if v.IsArray() {
				ok = true
				v.ForEach(func(_, c gjson.Result) bool {
					ok = c.Type == gjson.String
					return ok
				})
			}
			if !ok {
				fail("correlation_id must be a string or an array of strings")
			}
		case "context":
			e.Context = data[v.Index : v.Index+len(v.Raw)]
		case "payload":
			e.Payload = data[v.Index : v.Index+len(v.Raw)]
		case "lifecycle":
			if msg := e.parseLifecycle(v); msg != "" {
				fail("%s", msg)
			}
		}
		return true
	})
	if bad == nil && !hasKind {
		fail("kind is required")
	}
	if bad != nil {
		return bad
	}
	if badProtocol {
		return Errorf(wire.CodeUnsupportedProtocol, "protocol %q is not supported (use %s or %s)", e.Protocol, wire.ProtocolMCPP, wire.ProtocolMCPX)
	}
	return nil
}

// ReservedFields are the top-level fields the envelope's own rules give a
// meaning: those Parse reads (trace among them), and those the gateway
// writes (approval, on a call it released for an approved proposal).
var ReservedFields = []string{"protocol", "id", "ts", "from", "to", "kind", "correlation_id", "context", "payload", "lifecycle", "trace", "approval"}

// misleadingField says why an unknown top-level field may not be relayed,
// or "": it names a reserved field in another case (Go's encoding/json,
// among others, reads keys ignoring case, and would take "Approval" for
// the gateway's "approval"), or it has a NUL (a C-string parser reads
// "kind\u0000" as a second "kind").
func misleadingField(key string) string {
	if strings.IndexByte(key, 0) >= 0 {
		return fmt.Sprintf("field %q has a NUL: a receiver could read it as %q", key, key[:strings.IndexByte(key, 0)])
	}
	for _, f := range ReservedFields {
		if key != f && strings.EqualFold(key, f) {
			return fmt.Sprintf("field %q is %q in another case: receivers could read one for the other; send %q, or another name", key, f, f)
		}
	}
	return ""
}

var fieldBits = map[string]uint16{
	"protocol": 1 << 0, "id": 1 << 1, "ts": 1 << 2, "from": 1 << 3, "to": 1 << 4,
	"kind": 1 << 5, "correlation_id": 1 << 6, "context": 1 << 7, "payload": 1 << 8,
	"lifecycle": 1 << 9,
}

func firstNonSpace(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return -1
}
