package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestTraceMalformedOnEveryPath: a trace field an attacker or a broken
// client writes wrong is cut out of what the others receive, on every
// way into a pod (WebSocket, POST, an MCP host's _meta), counted, and
// never refuses the envelope; another spelling of the field is refused
// as every field's is; a valid one is relayed as sent.
func TestTraceMalformedOnEveryPath(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
	const pod = "trace-attacks"
	bob := g.Dial(t, pod, "bob", "")
	mallory := g.Dial(t, pod, "mallory", "")
	next := func() harness.Msg {
		t.Helper()
		for {
			if m := bob.NextNonPresence(5 * time.Second); m == nil || m.Kind() != "system/presence" {
				if m == nil {
					t.Fatal("bob received nothing within 5s")
				}
				return m
			}
		}
	}
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	// Over WebSocket: each wrong trace is cut, the envelope relayed.
	for i, raw := range []string{
		`{"id":"w1","kind":"chat","trace":{"traceparent":"00-` + strings.Repeat("0", 32) + `-00f067aa0ba902b7-01"}}`,
		`{"id":"w2","kind":"chat","trace":{"traceparent":"` + valid + `","traceparent":"` + valid + `"}}`,
		`{"id":"w3","kind":"chat","trace":{"traceparent":"` + valid + `"},"trace":{"traceparent":"` + valid + `"}}`,
		`{"id":"w4","kind":"chat","trace":{"traceparent":{"nested":[1,2,3]}}}`,
		`{"id":"w5","kind":"chat","trace":"` + valid + `"}`,
	} {
		mallory.SendRaw([]byte(raw))
		if m := next(); m.Str("id") != raw[7:9] || m["trace"] != nil {
			t.Fatalf("case %d: bob received %v, want %s without a trace", i, m, raw[7:9])
		}
	}
	// A tracestate past W3C's bounds loses it, keeping the traceparent.
	mallory.SendRaw([]byte(`{"id":"w6","kind":"chat","trace":{"traceparent":"` + valid + `","tracestate":"` + strings.Repeat("k=v,", 40) + `k=v"}}`))
	if m := next(); m.Str("id") != "w6" || m["trace"].(map[string]any)["traceparent"] != valid || m["trace"].(map[string]any)["tracestate"] != nil {
		t.Fatalf("bob received %v, want w6 with the traceparent alone", m)
	}
	// Another spelling is a field of the envelope's rules in another case.
	mallory.SendRaw([]byte(`{"id":"w7","kind":"chat","TRACE":{"traceparent":"` + valid + `"}}`))
	mallory.ExpectError("invalid_envelope")

	// Over HTTP: the same.
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/pods/"+pod+"/envelopes?participant=mallory",
		strings.NewReader(`{"id":"h1","kind":"chat","trace":{"traceparent":"`+strings.ToUpper(valid)+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %v %v", err, resp)
	}
	resp.Body.Close()
	if m := next(); m.Str("id") != "h1" || m["trace"] != nil {
		t.Fatalf("bob received %v, want h1 without a trace", m)
	}

	// An MCP host's _meta: a wrong traceparent is none; a valid one is the
	// trace of the envelope its call makes.
	host := harness.MCPConnect(t, g.URL, pod, "host", harness.MCPOpts{})
	for _, tp := range []string{"00-zz-zz-01", valid} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := host.CallTool(ctx, &mcp.CallToolParams{Name: "pod_send", Arguments: map[string]any{"kind": "chat", "payload": map[string]any{"tp": tp}},
			Meta: mcp.Meta{"traceparent": tp}})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("pod_send: %v %v", err, res)
		}
		m := next()
		got, _ := m["trace"].(map[string]any)
		if tp == valid && (got == nil || got["traceparent"] != valid) || tp != valid && got != nil {
			t.Fatalf("with _meta.traceparent %q bob received %v", tp, m)
		}
	}

	// Counted: the five over WebSocket, the tracestate, the one over HTTP
	// (an MCP host's _meta is read by the gateway, never relayed).
	if n := harness.MetricOrZero(t, g.URL, "mcpp_trace_dropped_total"); n != 7 {
		t.Fatalf("mcpp_trace_dropped_total %v, want 7", n)
	}
}
