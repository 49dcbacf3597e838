package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

func TestParseAccepts(t *testing.T) {
	var e Envelope
	in := []byte(`{"protocol":"mcpp/v0.1","id":"m1","ts":"t","from":"alice","to":["bob","carol"],` +
		`"kind":"mcp/request:tools/call","correlation_id":["a","b"],"context":{"id":"c"},"payload":{"x":[1,2]},"extra":{"k":1}}`)
	if err := e.Parse(in); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if e.Kind != "mcp/request:tools/call" || e.ID != "m1" || e.From != "alice" || !e.HasFrom || !e.HasTS {
		t.Fatalf("fields: %+v", e)
	}
	if strings.Join(e.To, ",") != "bob,carol" {
		t.Fatalf("to = %v", e.To)
	}
	if string(e.Context) != `{"id":"c"}` || string(e.Payload) != `{"x":[1,2]}` {
		t.Fatalf("context %q payload %q", e.Context, e.Payload)
	}
	if got := string(in[e.ProtocolSpan.Start:e.ProtocolSpan.End]); got != `"mcpp/v0.1"` {
		t.Fatalf("protocol span covers %q", got)
	}
	out, _ := e.Fill("alice", time.Now())
	if !bytes.Equal(out, in) {
		t.Fatalf("an envelope with every field is not relayed as sent:\n%s\n%s", out, in)
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name, in string
		code     wire.Code
	}{
		{"not json", `{"kind":`, wire.CodeInvalidJSON},
		{"array", `["kind"]`, wire.CodeInvalidJSON},
		{"string", `"x"`, wire.CodeInvalidJSON},
		{"two objects", `{"kind":"a"}{"kind":"b"}`, wire.CodeInvalidJSON},
		{"invalid utf-8", "{\"kind\":\"a\xff\"}", wire.CodeInvalidJSON},
		{"deep", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), wire.CodeInvalidJSON},
		{"no kind", `{"payload":1}`, wire.CodeInvalidEnvelope},
		{"empty kind", `{"kind":""}`, wire.CodeInvalidEnvelope},
		{"kind number", `{"kind":1}`, wire.CodeInvalidEnvelope},
		{"null kind", `{"kind":null}`, wire.CodeInvalidEnvelope},
		{"null to", `{"kind":"a","to":null}`, wire.CodeInvalidEnvelope},
		{"null context", `{"kind":"a","context":null}`, wire.CodeInvalidEnvelope},
		{"to string", `{"kind":"a","to":"bob"}`, wire.CodeInvalidEnvelope},
		{"to bad id", `{"kind":"a","to":["b b"]}`, wire.CodeInvalidEnvelope},
		{"id empty", `{"kind":"a","id":""}`, wire.CodeInvalidEnvelope},
		{"id long", `{"kind":"a","id":"` + strings.Repeat("x", 129) + `"}`, wire.CodeInvalidEnvelope},
		{"id number", `{"kind":"a","id":7}`, wire.CodeInvalidEnvelope},
		{"ts number", `{"kind":"a","ts":7}`, wire.CodeInvalidEnvelope},
		{"from number", `{"kind":"a","from":7}`, wire.CodeInvalidEnvelope},
		{"correlation object", `{"kind":"a","correlation_id":{}}`, wire.CodeInvalidEnvelope},
		{"correlation array of numbers", `{"kind":"a","correlation_id":[1]}`, wire.CodeInvalidEnvelope},
		{"duplicate from", `{"kind":"a","from":"x","from":"y"}`, wire.CodeInvalidEnvelope},
		{"duplicate escaped", `{"kind":"a","fr\u006fm":"x","from":"y"}`, wire.CodeInvalidEnvelope},
		{"protocol number", `{"kind":"a","protocol":1}`, wire.CodeInvalidEnvelope},
		{"protocol unknown", `{"kind":"a","protocol":"mcp/v9"}`, wire.CodeUnsupportedProtocol},
		{"envelope error wins over protocol", `{"protocol":"mcp/v9"}`, wire.CodeInvalidEnvelope},
		{"reserved field in another case", `{"kind":"a","Approval":{"by":"x"}}`, wire.CodeInvalidEnvelope},
		{"reserved field escaped in another case", `{"kind":"a","\u004bind":"b"}`, wire.CodeInvalidEnvelope},
		{"known field in upper case", `{"kind":"a","PAYLOAD":{}}`, wire.CodeInvalidEnvelope},
		{"field with a NUL", `{"kind":"a","kind\u0000":"b"}`, wire.CodeInvalidEnvelope},
		{"unknown field with a NUL", `{"kind":"a","note\u0000":"b"}`, wire.CodeInvalidEnvelope},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e Envelope
			err := e.Parse([]byte(c.in))
			if err == nil || err.Code != c.code {
				t.Fatalf("Parse(%.60q) = %v, want %s", c.in, err, c.code)
			}
			if err.Message == "" {
				t.Fatal("an error without a message")
			}
		})
	}
}

// TestParseRelaysUnknownFields: unknown top-level fields, in any case,
// pass untouched when they are not the envelope's own in another case.
func TestParseRelaysUnknownFields(t *testing.T) {
	for _, in := range []string{`{"kind":"a","Note":1}`, `{"kind":"a","approval":{}}`, `{"kind":"a","kinds":1,"Payloads":2}`} {
		var e Envelope
		if err := e.Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%s) = %v", in, err)
		}
	}
}

func TestParseUnescapesKind(t *testing.T) {
	var e Envelope
	if err := e.Parse([]byte(`{"kind":"sys\u0074em/x"}`)); err != nil {
		t.Fatal(err)
	}
	if !e.IsSystem() {
		t.Fatalf("an escaped system/ kind is not seen as system: %q", e.Kind)
	}
}

func TestParseNewlinesBecomeSpaces(t *testing.T) {
	var e Envelope
	in := []byte("{\n  \"kind\": \"chat\",\r\n  \"payload\": {\"text\": \"a\\nb\"}\n}")
	if err := e.Parse(in); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(in, "\r\n") {
		t.Fatalf("raw newlines left: %q", in)
	}
	var v map[string]any
	if err := json.Unmarshal(in, &v); err != nil || v["payload"].(map[string]any)["text"] != "a\nb" {
		t.Fatalf("the envelope changed meaning: %v %v", v, err)
	}
}

func TestFill(t *testing.T) {
	var e Envelope
	in := []byte(` {"kind":"chat","payload":{"a":1},"x-custom":true}`)
	if err := e.Parse(in); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 10, 0, 0, 123e6, time.UTC)
	out, span := e.Fill("alice", now)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("filled envelope is not JSON: %s", out)
	}
	if v["protocol"] != wire.ProtocolMCPP || v["from"] != "alice" || v["ts"] != "2026-11-22T10:00:00.123Z" || v["x-custom"] != true {
		t.Fatalf("filled: %s", out)
	}
	if id, _ := v["id"].(string); len(id) != 36 || id != e.ID {
		t.Fatalf("id %q, e.ID %q", id, e.ID)
	}
	if got := string(out[span.Start:span.End]); got != `"mcpp/v0.1"` {
		t.Fatalf("span covers %q", got)
	}
	if !bytes.HasSuffix(out, []byte(`"kind":"chat","payload":{"a":1},"x-custom":true}`)) {
		t.Fatalf("the sender's bytes changed: %s", out)
	}
}

func TestFillKeepsSentProtocolSpan(t *testing.T) {
	var e Envelope
	in := []byte(`{"kind":"chat","protocol":"mcpx/v0.1"}`)
	if err := e.Parse(in); err != nil {
		t.Fatal(err)
	}
	out, span := e.Fill("bob", time.Now())
	if got := string(out[span.Start:span.End]); got != `"mcpx/v0.1"` {
		t.Fatalf("span covers %q in %s", got, out)
	}
}

func TestValidNames(t *testing.T) {
	for id, ok := range map[string]bool{"alice": true, "a.b_c:d@e-f": true, "": false, "a b": false, strings.Repeat("a", 128): true, strings.Repeat("a", 129): false, "é": false} {
		if ValidParticipantID(id) != ok {
			t.Errorf("ValidParticipantID(%q) = %v", id, !ok)
		}
	}
	for pod, ok := range map[string]bool{"lab": true, "lab.team-1_x": true, "": false, "a:b": false, "a/b": false, strings.Repeat("p", 64): true, strings.Repeat("p", 65): false} {
		if ValidPodName(pod) != ok {
			t.Errorf("ValidPodName(%q) = %v", pod, !ok)
		}
	}
}

func TestParseContext(t *testing.T) {
	good := map[string]Context{
		`{"id":"r1"}`: {ID: "r1"},
		`{"id":"r1","type":"reasoning","parent":"p"}`: {ID: "r1", Type: "reasoning", Parent: "p"},
		`{"id":"r1","metadata":{"a":[1]}}`:            {ID: "r1"},
		`"root"`:                                      {ID: "root", Path: true, Segments: 1},
		`"root/child/leaf"`:                           {ID: "root/child/leaf", Parent: "root/child", Path: true, Segments: 3},
	}
	for in, want := range good {
		got, err := ParseContext([]byte(in), 4096)
		if err != nil || got != want {
			t.Errorf("ParseContext(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := []string{`{}`, `{"id":""}`, `{"id":1}`, `{"id":"a\u0001"}`, `{"id":"a","type":""}`,
		`{"id":"a","type":"` + strings.Repeat("t", 65) + `"}`, `{"id":"` + strings.Repeat("i", 257) + `"}`,
		`{"id":"a","metadata":[]}`, `{"id":"a","other":1}`, `{"id":"a","id":"b"}`, `""`, `"a//b"`, `"/a"`, `"a/"`,
		`"a b"`, `"a.b"`, `5`, `[]`, `true`}
	for _, in := range bad {
		if _, err := ParseContext([]byte(in), 4096); err == nil || err.Code != wire.CodeInvalidContext {
			t.Errorf("ParseContext(%.40s) = %v, want invalid_context", in, err)
		}
	}
	if _, err := ParseContext([]byte(`{"id":"a","metadata":{"x":"`+strings.Repeat("m", 100)+`"}}`), 64); err == nil {
		t.Error("a context over the byte limit was accepted")
	}
}

func TestFrameRoundTrip(t *testing.T) {
	m := Meta{Kind: FrameEnvelope, Flags: FlagConclusion, Origin: "n1", From: "alice", To: []string{"bob", "carol"},
		ContextID: "c", ContextType: "reasoning", ContextParent: "p", Ancestors: []string{"p", "root"}, Protocol: Span{1, 12}}
	body := []byte(`{"protocol":"mcpp/v0.1","kind":"x"}`)
	frame := AppendFrame(nil, &m, body)
	var got Meta
	b, err := DecodeFrame(frame, &got)
	if err != nil || !bytes.Equal(b, body) {
		t.Fatalf("DecodeFrame: %v %q", err, b)
	}
	if got.Kind != m.Kind || got.Flags != m.Flags || got.Origin != m.Origin || got.From != m.From ||
		strings.Join(got.To, ",") != "bob,carol" || got.ContextID != "c" || got.ContextType != "reasoning" || got.ContextParent != "p" ||
		strings.Join(got.Ancestors, ",") != "p,root" || got.Protocol != m.Protocol {
		t.Fatalf("round trip: %+v", got)
	}
	for i := 0; i < len(frame)-len(body); i++ {
		if _, err := DecodeFrame(frame[:i], &got); err == nil {
			t.Fatalf("a frame cut at %d decoded", i)
		}
	}
}
