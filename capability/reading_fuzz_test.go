package capability_test

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// kickPayload is the payload of gateway/kick, as the gateway reads it and
// as a Go receiver would.
type kickPayload struct {
	Participant string `json:"participant"`
	Reason      string `json:"reason"`
	BanMS       int64  `json:"ban_ms"`
}

// FuzzOneReading holds the matcher and the gateway's decoding to one
// reading of a payload (docs/protocol.md section 2, issue 31): for any
// payload that capability.Ambiguous lets through, when the pattern
// {"participant": "bot-*"} allows it, every reading of it names a bot:
// the gateway's own (envelope.DecodePayload), Go's encoding/json (which
// matches field names ignoring case and takes the last), and the exact,
// last-key-wins reading of JavaScript. And wherever the gateway decodes a
// payload, encoding/json reads the same values. Run it with
//
//	go test -fuzz FuzzOneReading ./capability/
func FuzzOneReading(f *testing.F) {
	for _, s := range []string{
		`{"participant":"bot-1"}`,
		`{"participant":"bot-1","Participant":"admin","ban_ms":60000}`,
		`{"participant":"bot-1","\u0050articipant":"admin"}`,
		`{"Participant":"admin"}`,
		`{"participant":"bot-1","participant":"admin"}`,
		`{"participant":"bot-1","reason":"r","REASON":"x"}`,
		`{"participant":"bot-1","nested":{"a":1,"A":2}}`,
		`{"participant":"bot-1","ban_ms":5}`,
		`{"partıcipant":"admin","participant":"bot-1"}`,
		`{"participant":"bot-1","particIpant":"admin"}`,
	} {
		f.Add([]byte(s))
	}
	set := capability.MustCompile([]wire.Capability{{Kind: wire.RequestKick, Payload: json.RawMessage(`{"participant": "bot-*"}`)}})
	bot := func(s string) bool { ok, _ := path.Match("bot-*", s); return ok && !strings.Contains(s, "/") }
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) {
			return
		}
		if _, _, _, ambiguous := capability.Ambiguous(payload); ambiguous {
			return // refused: ambiguous_payload
		}
		var gw, std kickPayload
		gwErr := envelope.DecodePayload(payload, &gw, false)
		stdErr := json.Unmarshal(payload, &std)
		if gwErr == nil && stdErr == nil && gw != std {
			t.Fatalf("%s: the gateway reads %+v, encoding/json %+v", payload, gw, std)
		}
		if !set.Allows(wire.RequestKick, payload) {
			return
		}
		if gwErr == nil && !bot(gw.Participant) {
			t.Fatalf("%s: the pattern allowed it, and the gateway reads participant %q", payload, gw.Participant)
		}
		if stdErr == nil && !bot(std.Participant) {
			t.Fatalf("%s: the pattern allowed it, and encoding/json reads participant %q", payload, std.Participant)
		}
		// JavaScript: the last key spelt exactly so.
		last := ""
		gjson.ParseBytes(payload).ForEach(func(k, v gjson.Result) bool {
			if k.Str == "participant" {
				last = v.String()
			}
			return true
		})
		if !bot(last) {
			t.Fatalf("%s: the pattern allowed it, and JavaScript reads participant %q", payload, last)
		}
	})
}

// TestAmbiguous: keys equal ignoring case, at any depth, in every
// spelling, and none where there is none.
func TestAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		payload, where string
	}{
		{`{"a":1,"A":2}`, "payload"},
		{`{"a":1,"a":2}`, "payload"},
		{`{"x":{"y":[{"key":1,"KEY":2}]}}`, "payload.x.y[]"},
		{`{"\u0041":1,"a":2}`, "payload"},
		{`{"k":1,"\u212a":2}`, "payload"},                  // the Kelvin sign
		{`{"s":1,"ſ":2}`, "payload"},                       // the long s
		{`{"straße":1,"STRASSE":2,"Straße":3}`, "payload"}, // simple folding: ß is not SS, Straße is straße
		{`{"name":1,"name\u0000":2}`, "payload"},           // the same up to a NUL
		{`{"x":{"name\u0000x":2}}`, "payload.x"},           // a key with a NUL, alone
		{`{"` + strings.Repeat(`k`, 3) + `":1,"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":1,"r":1,"KKK":2}`, "payload"},
	} {
		where, a, b, ok := capability.Ambiguous([]byte(tc.payload))
		if !ok || where != tc.where {
			t.Errorf("%s: ambiguous %v at %q (%q, %q), want at %q", tc.payload, ok, where, a, b, tc.where)
		}
	}
	for _, p := range []string{`{}`, `{"a":{"a":1}}`, `[{"a":1},{"A":1}]`, `{"a":"A","b":["a","A"]}`, `"x"`, `{"ß":1,"ss":2}`, `{"a\"":1,"a":2}`} {
		if where, a, b, ok := capability.Ambiguous([]byte(p)); ok {
			t.Errorf("%s: ambiguous at %q (%q, %q)", p, where, a, b)
		}
	}
}
