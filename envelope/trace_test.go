package envelope

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const (
	tp  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

// TestTraceRelayedOrCut: a valid trace is relayed byte for byte; what is
// wrong in one is cut out of the relayed bytes and noted, never a
// refusal; a valid traceparent is kept when only the rest was wrong.
func TestTraceRelayedOrCut(t *testing.T) {
	for _, c := range []struct {
		name, in  string
		out       string // the relayed bytes, after the filled protocol, id, ts and from
		malformed bool
		parent    string
	}{
		{"valid", `{"kind":"a","trace":{"traceparent":"` + tp + `","tracestate":"ro=1,k@v=x y"}}`,
			`"kind":"a","trace":{"traceparent":"` + tp + `","tracestate":"ro=1,k@v=x y"}}`, false, tp},
		{"escaped key, relayed as sent", `{"\u0074race":{"traceparent":"` + tp + `"},"kind":"a"}`,
			`"\u0074race":{"traceparent":"` + tp + `"},"kind":"a"}`, false, tp},
		{"none", `{"kind":"a"}`, `"kind":"a"}`, false, ""},
		{"upper-case hex", `{"kind":"a","trace":{"traceparent":"` + strings.ToUpper(tp) + `"}}`, `"kind":"a"}`, true, ""},
		{"version 01", `{"kind":"a","trace":{"traceparent":"01` + tp[2:] + `"}}`, `"kind":"a"}`, true, ""},
		{"longer than version 00", `{"kind":"a","trace":{"traceparent":"` + tp + `-00"}}`, `"kind":"a"}`, true, ""},
		{"zero trace id", `{"kind":"a","trace":{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}`, `"kind":"a"}`, true, ""},
		{"zero parent id", `{"kind":"a","trace":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}}`, `"kind":"a"}`, true, ""},
		{"bad flags", `{"kind":"a","trace":{"traceparent":"` + tp[:53] + `0g"}}`, `"kind":"a"}`, true, ""},
		{"first member", `{"trace":{"traceparent":"x"} , "kind":"a"}`, `"kind":"a"}`, true, ""},
		{"not an object", `{"kind":"a","trace":"` + tp + `"}`, `"kind":"a"}`, true, ""},
		{"null", `{"kind":"a","trace":null}`, `"kind":"a"}`, true, ""},
		{"no traceparent", `{"kind":"a","trace":{"tracestate":"a=1"}}`, `"kind":"a"}`, true, ""},
		{"traceparent not a string", `{"kind":"a","trace":{"traceparent":7}}`, `"kind":"a"}`, true, ""},
		{"traceparent twice", `{"kind":"a","trace":{"traceparent":"` + tp + `","traceparent":"` + tp2 + `"}}`, `"kind":"a"}`, true, ""},
		{"trace twice", `{"kind":"a","trace":{"traceparent":"` + tp + `"},"trace":{"traceparent":"` + tp2 + `"}}`, `"kind":"a"}`, true, ""},
		{"trace twice in a row, last", `{"kind":"a","trace":{},"trace":{}}`, `"kind":"a"}`, true, ""},
		{"bad tracestate: traceparent kept", `{"kind":"a","trace":{"traceparent":"` + tp + `","tracestate":"A=1"}}`,
			`"trace":{"traceparent":"` + tp + `"},"kind":"a"}`, true, tp},
		{"33 tracestate members: traceparent kept", `{"kind":"a","trace":{"traceparent":"` + tp + `","tracestate":"` + members(33) + `"}}`,
			`"trace":{"traceparent":"` + tp + `"},"kind":"a"}`, true, tp},
		{"tracestate over 512 bytes: traceparent kept", `{"kind":"a","trace":{"traceparent":"` + tp + `","tracestate":"a=` + strings.Repeat("x", 255) + `,b=` + strings.Repeat("x", 255) + `"}}`,
			`"trace":{"traceparent":"` + tp + `"},"kind":"a"}`, true, tp},
		{"another member: traceparent kept", `{"kind":"a","trace":{"traceparent":"` + tp + `","baggage":"k=v"}}`,
			`"trace":{"traceparent":"` + tp + `"},"kind":"a"}`, true, tp},
	} {
		t.Run(c.name, func(t *testing.T) {
			var e Envelope
			if err := e.Parse([]byte(c.in)); err != nil {
				t.Fatalf("refused: %v", err)
			}
			out, _ := e.Fill("alice", time.Unix(0, 0))
			head := `{"protocol":"mcpp/v0.1","id":"` + e.ID + `","ts":"1970-01-01T00:00:00.000Z","from":"alice",`
			if string(out) != head+c.out || !json.Valid(out) {
				t.Fatalf("relayed\n%s\nwant\n%s", out, head+c.out)
			}
			if e.TraceMalformed != c.malformed || e.TraceParent != c.parent {
				t.Fatalf("malformed %v, traceparent %q", e.TraceMalformed, e.TraceParent)
			}
		})
	}
}

func members(n int) string {
	var b []string
	for i := range n {
		b = append(b, "k"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))+"=1")
	}
	return strings.Join(b, ",")
}

// TestTraceFilled: the gateway's trace goes in where the sender gave
// none, and a sender's own is never replaced.
func TestTraceFilled(t *testing.T) {
	var e Envelope
	if err := e.Parse([]byte(`{"kind":"a","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	e.SetTrace(tp2, "")
	out, _ := e.Fill("bob", time.Unix(0, 0))
	var got struct {
		Trace struct{ Traceparent, Tracestate string }
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Trace.Traceparent != tp2 || got.Trace.Tracestate != "" {
		t.Fatalf("%s: %v", out, err)
	}
	e.Reset()
	in := `{"id":"x","protocol":"mcpp/v0.1","ts":"t","from":"bob","kind":"a","trace":{"traceparent":"` + tp + `"}}`
	if err := e.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	e.SetTrace(tp2, "")
	if out, _ := e.Fill("bob", time.Unix(0, 0)); string(out) != in {
		t.Fatalf("the sender's trace was replaced: %s", out)
	}
}

// TestTraceReservedSpelling: "Trace" is another case of a field the
// envelope's rules give a meaning: refused, as "Kind" is.
func TestTraceReservedSpelling(t *testing.T) {
	var e Envelope
	if err := e.Parse([]byte(`{"kind":"a","Trace":{"traceparent":"` + tp + `"}}`)); err == nil || !strings.Contains(err.Message, `"Trace"`) {
		t.Fatalf("got %v", err)
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	tc, ok := ParseTraceparent(tp)
	if !ok || tc.Traceparent() != tp || tc.Flags != 1 {
		t.Fatalf("%v %q", ok, tc.Traceparent())
	}
}
