package envelope

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// FuzzValidJSON holds validJSON to encoding/json.Valid's answer, on both
// sides of gjsonValidMax.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-0.5e+3,"x\u00e9\n",true,false,null,{}]}`, ` {} `, "\t[]\r\n", `01`, `-`, `1.`, `1e`, `1e+`,
		`"\x"`, `"\u12"`, "\"a\x01\"", `{"a"}`, `{"a":1,}`, `[1,]`, `[`, `"`, ``, ` `, `nul`, `truex`,
		"\xff", `"\xff"`, `{"a":1}{`, `[[[[[[[[[[]]]]]]]]]]`, `{"a":"b" "c":1}`,
	} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, data []byte, pad int) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json.Valid %v", data, got, want)
		}
		// The same value past gjsonValidMax, padded with white space.
		big := append(bytes.Repeat([]byte{' '}, gjsonValidMax+1+pad%64), data...)
		if got, want := validJSON(big), json.Valid(big); got != want {
			t.Fatalf("validJSON(padded %q) = %v, encoding/json.Valid %v", data, got, want)
		}
	})
}

// FuzzParse checks that no input crashes the parser, that an accepted
// envelope stays valid JSON once filled, and that filling keeps every byte
// the sender wrote.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"kind":"chat"}`,
		`{"protocol":"mcpp/v0.1","id":"m1","ts":"t","from":"alice","to":["bob"],"kind":"k","correlation_id":"c","context":{"id":"r","type":"reasoning","parent":"p","metadata":{}},"payload":{"a":[1,"x",null]}}`,
		`{"kind":"a","context":"root/child/leaf"}`,
		`{"kind":"sys\u0074em/x","from":"x","from":"y"}`,
		"{\n\"kind\":\"a\"\r\n}",
		`[1,2]`, `{"kind":`, "\xff", `{"kind":"a","to":null}`,
		`{"kind":"a","trace":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=1"}}`,
		`{"trace":{"traceparent":"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},"protocol":"mcpx/v0.1","kind":"a"}`,
		`{"kind":"a","trace":7,"trace":{"traceparent":"x"}}`,
		`{"kind":"a" , "trace" : {"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=1,a=2"} }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append([]byte(nil), data...)
		var e Envelope
		if err := e.Parse(in); err != nil {
			if err.Code == "" || err.Message == "" {
				t.Fatalf("error without code or message: %+v", err)
			}
			return
		}
		if e.Kind == "" {
			t.Fatal("accepted without a kind")
		}
		if e.Context != nil {
			_, _ = ParseContext(e.Context, 4096)
		}
		var protoTok string
		if e.Protocol != "" {
			protoTok = string(in[e.ProtocolSpan.Start:e.ProtocolSpan.End])
		}
		out, span := e.Fill("p1", time.Unix(0, 0))
		if !json.Valid(out) {
			t.Fatalf("filled envelope is not JSON: %q", out)
		}
		if bytes.ContainsAny(out, "\r\n") {
			t.Fatalf("filled envelope has a raw newline: %q", out)
		}
		if span.Valid() {
			p := string(out[span.Start:span.End])
			if p != `"mcpp/v0.1"` && p != `"mcpx/v0.1"` && p[0] != '"' {
				t.Fatalf("protocol span covers %q", p)
			}
		}
		if protoTok != "" && string(out[span.Start:span.End]) != protoTok {
			t.Fatalf("protocol span covers %q, not %q", out[span.Start:span.End], protoTok)
		}
		if e.TraceMalformed {
			// What was wrong in the trace is cut out: what is left reads
			// with a valid trace or none, and nothing to cut.
			var again Envelope
			if err := again.Parse(append([]byte(nil), out...)); err != nil || again.TraceMalformed || again.Kind != e.Kind {
				t.Fatalf("%q filled as %q: %v, malformed %v", in, out, err, again.TraceMalformed)
			}
			return
		}
		if !bytes.Contains(out, bytes.TrimLeft(in, " \t")[1:]) {
			t.Fatalf("the sender's bytes are not kept: %q -> %q", in, out)
		}
	})
}

// FuzzContext checks the context parser on any input.
func FuzzContext(f *testing.F) {
	for _, s := range []string{`{"id":"r1","type":"reasoning","parent":"p","metadata":{"a":1}}`, `"a/b/c"`, `"a//b"`, `{"id":""}`, `7`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // the envelope parser refuses it before
		}
		c, err := ParseContext(data, 4096)
		if err != nil {
			if err.Code != wire.CodeInvalidContext {
				t.Fatalf("code %s", err.Code)
			}
			return
		}
		if c.ID == "" || len(c.ID) > MaxContextIDBytes || len(c.Type) > MaxContextTypeBytes {
			t.Fatalf("accepted %+v", c)
		}
		if c.Path && c.Segments < 1 {
			t.Fatalf("path without segments: %+v", c)
		}
	})
}
