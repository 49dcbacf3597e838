package bridge

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

func TestSwapProgressToken(t *testing.T) {
	for _, tc := range []struct {
		params, want, old string
	}{
		{`{"name": "x", "_meta": {"progressToken": "a", "other": 1}}`, `{"_meta":{"other":1,"progressToken":7},"name":"x"}`, `"a"`},
		{`{"_meta": {"progressToken": 12}}`, `{"_meta":{"progressToken":7}}`, `12`},
		{`{"name": "x"}`, `{"name": "x"}`, ``},                                           // no _meta: untouched
		{`{"_meta": {"progressToken": null}}`, `{"_meta": {"progressToken": null}}`, ``}, // null is no token
		{`[1, 2]`, `[1, 2]`, ``},
		{``, ``, ``},
	} {
		got, old := swapProgressToken(json.RawMessage(tc.params), numberToken(7))
		if string(got) != tc.want || string(old) != tc.old {
			t.Errorf("%s: got %s, token %s; want %s, token %s", tc.params, got, old, tc.want, tc.old)
		}
	}
}

func TestParseRequest(t *testing.T) {
	for payload, ok := range map[string]bool{
		`{"jsonrpc": "2.0", "id": 1, "method": "ping"}`:     true,
		`{"jsonrpc": "2.0", "id": "a", "method": "ping"}`:   true,
		`{"jsonrpc": "2.0", "method": "notifications/x"}`:   true,
		`{"jsonrpc": "2.0", "id": 1.5e3, "method": "ping"}`: true,
		`{"jsonrpc": "2.0", "id": null, "method": "ping"}`:  false,
		`{"jsonrpc": "2.0", "id": {}, "method": "ping"}`:    false,
		`{"jsonrpc": "2.0", "id": [1], "method": "ping"}`:   false,
		`{"jsonrpc": "2.0", "id": true, "method": "ping"}`:  false,
		`{"jsonrpc": "2.0", "id": 1, "result": {}}`:         false,
		`{"id": 1, "method": "ping"}`:                       false,
		`{"jsonrpc": "2.0", "id": 1, "method": 5}`:          false,
		`not json`: false,
	} {
		if _, err := parseRequest([]byte(payload)); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok %v", payload, err, ok)
		}
	}
}

func TestResponseKind(t *testing.T) {
	for kind, want := range map[string]string{
		wire.KindMCPRequest:                wire.KindMCPResponse,
		"mcp/request:tools/call":           "mcp/response:tools/call",
		"mcp/request:tools/call:read_file": "mcp/response:tools/call:read_file",
	} {
		if got := responseKind(kind); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
}

// TestBackoff: each wait is between half its step and the step, the
// steps double from the least to the most, and a reset starts over.
func TestBackoff(t *testing.T) {
	b := newBackoff(500*time.Millisecond, 30*time.Second)
	step := 500 * time.Millisecond
	for range 12 {
		d := b.delay()
		if d < step/2 || d > step {
			t.Fatalf("a wait of %v, want between %v and %v", d, step/2, step)
		}
		step = min(2*step, 30*time.Second)
	}
	b.reset()
	if d := b.delay(); d > 500*time.Millisecond {
		t.Fatalf("after a reset: %v", d)
	}
}

// TestFitToLimit: an answer too large for the gateway becomes an error
// that says so, under the request's id.
func TestFitToLimit(t *testing.T) {
	env := &wire.Envelope{Kind: wire.KindMCPResponse, To: []string{"alice"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"result":{"text":"` + strings.Repeat("x", 2000) + `"}}`)}
	fitToLimit(env, 1000)
	var a struct {
		ID    json.RawMessage
		Error struct {
			Code int
			Data struct{ Reason string }
		}
	}
	if err := json.Unmarshal(env.Payload, &a); err != nil || string(a.ID) != "3" || a.Error.Code != -32603 || a.Error.Data.Reason != ReasonResponseTooLarge {
		t.Fatalf("%s", env.Payload)
	}
	small := &wire.Envelope{Kind: wire.KindMCPResponse, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"result":{}}`)}
	fitToLimit(small, 1000)
	if string(small.Payload) != `{"jsonrpc":"2.0","id":3,"result":{}}` {
		t.Fatalf("a small answer was changed: %s", small.Payload)
	}
}

// TestParseRequestReadsExactKeys: the gateway matches payload patterns
// key by key, case-sensitively, and Go's encoding/json matches field
// names ignoring case, taking the last. A request that names a member
// twice, in two cases, would reach the server as the copy the gateway
// did not check: it is refused.
func TestParseRequestReadsExactKeys(t *testing.T) {
	for _, payload := range []string{
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file"}, "Params": {"name": "delete_file"}}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "Method": "tools/call"}`,
		`{"jsonrpc": "2.0", "id": 1, "ID": 2, "method": "ping"}`,
		`{"jsonrpc": "2.0", "Id": 2, "method": "ping"}`,
		`{"JSONRPC": "2.0", "jsonrpc": "2.0", "id": 1, "method": "ping"}`,
		`{"jsonrpc": "2.0", "id": 1, "METHOD": "tools/call"}`,
	} {
		r, err := parseRequest([]byte(payload))
		if err == nil {
			t.Errorf("%s: accepted as %s %s", payload, *r.Method, r.Params)
		}
	}
}
