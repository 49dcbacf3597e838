package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCapabilityForms: both forms of a capability, as token files, JWTs
// and capability/grant carry them.
func TestCapabilityForms(t *testing.T) {
	var caps []Capability
	in := `["chat", {"kind": "note"}, {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}},
	        {"kind": "x", "payload": null}, {"id": "mcp-response", "kind": "mcp/response"}]`
	if err := json.Unmarshal([]byte(in), &caps); err != nil {
		t.Fatal(err)
	}
	want := []struct{ kind, payload string }{
		{"chat", ""}, {"note", ""}, {"mcp/request", `{"method": "tools/call", "params": {"name": "read_*"}}`}, {"x", ""}, {"mcp/response", ""},
	}
	if len(caps) != len(want) {
		t.Fatalf("%d capabilities, want %d", len(caps), len(want))
	}
	for i, w := range want {
		if caps[i].Kind != w.kind || string(caps[i].Payload) != w.payload {
			t.Errorf("capability %d = {%q, %s}, want {%q, %s}", i, caps[i].Kind, caps[i].Payload, w.kind, w.payload)
		}
		if w.payload == "" && caps[i].Payload != nil {
			t.Errorf("capability %d: payload %q, want none", i, caps[i].Payload)
		}
	}
	// Written back, a capability without a payload pattern is a string
	// (what clients that know only kind patterns read), the others objects.
	out, err := json.Marshal(caps)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, out, `["chat", "note", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}, "x", "mcp/response"]`)
	roundTrip[[]Capability](t, `["chat", {"kind": "mcp/*", "payload": {"method": ["a", "b*"], "n": 1.5, "z": null}}]`)
}

func TestCapabilityRefused(t *testing.T) {
	cases := []struct{ in, says string }{
		{`5`, `a capability is a kind pattern`},
		{`["chat"]`, `a capability is a kind pattern`},
		{`null`, `a capability is a kind pattern`},
		{`true`, `a capability is a kind pattern`},
		{`{}`, `a capability object needs "kind"`},
		{`{"payload": {}}`, `a capability object needs "kind"`},
		{`{"kind": ["mcp/request", "mcp/proposal"]}`, `one pattern string`},
		{`{"kind": null}`, `one pattern string`},
		{`{"kind": 7}`, `one pattern string`},
		{`{"kind": "k", "payload": "tools/call"}`, `payload pattern, a JSON object`},
		{`{"kind": "k", "payload": ["a"]}`, `payload pattern, a JSON object`},
		{`{"kind": "k", "payload": 1}`, `payload pattern, a JSON object`},
	}
	for _, c := range cases {
		var capab Capability
		err := json.Unmarshal([]byte(c.in), &capab)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: error %v, want one that says %q", c.in, err, c.says)
		}
	}
	// In a list, the error comes out of json.Unmarshal as it is.
	var caps []Capability
	if err := json.Unmarshal([]byte(`["chat", {"kind": "k", "payload": "x"}]`), &caps); err == nil || !strings.Contains(err.Error(), "JSON object") {
		t.Errorf("a list with a bad capability: %v", err)
	}
}

func TestCapabilityString(t *testing.T) {
	if s := (Capability{Kind: "chat"}).String(); s != `"chat"` {
		t.Errorf("String() = %s", s)
	}
	c := Capability{Kind: "mcp/request", Payload: json.RawMessage(`{ "method" : "tools/call" }`)}
	if s := c.String(); s != `{"kind":"mcp/request","payload":{"method":"tools/call"}}` {
		t.Errorf("String() = %s", s)
	}
	bad := Capability{Kind: "k", Payload: json.RawMessage(`{`)}
	if s := bad.String(); !strings.Contains(s, `"k"`) || !strings.Contains(s, `"{"`) {
		t.Errorf("String() of a payload that is not JSON = %s", s)
	}
	if k := Kinds("a", "b*"); len(k) != 2 || k[0].Kind != "a" || k[1].Kind != "b*" || k[0].Payload != nil || k[1].Payload != nil {
		t.Errorf("Kinds() = %v", k)
	}
}
