package envelope

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

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
