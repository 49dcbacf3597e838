package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP endpoint's tests drive /mcp with the official SDK's own client
// over real HTTP, as an LLM host would.

// MCPSessions is the protocol version of the last MCP revision with
// sessions (Mcp-Session-Id); the SDK's client, left to itself, speaks the
// newest, which has none.
const MCPSessions = "2025-11-25"

// MCPOpts are how a test connects.
type MCPOpts struct {
	query   string      // extra query parameters ("k=v&k2=v2")
	Header  http.Header // extra headers (Authorization)
	Version string      // the protocol version to ask for; "" the SDK's newest
	// Client are the client's options (its handlers of notifications).
	Client *mcp.ClientOptions
}

// MCPConnect connects an MCP client to base (http://host:port) for pod as
// participant id (open mode; "" for none) and returns its session.
func MCPConnect(t *testing.T, base, pod, id string, o MCPOpts) *mcp.ClientSession {
	t.Helper()
	cs, err := MCPDial(base, pod, id, o)
	if err != nil {
		t.Fatalf("MCP connect to %s as %s: %v", pod, id, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func MCPDial(base, pod, id string, o MCPOpts) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpp-integration-test", Version: "1"}, o.Client)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   mcpURL(base, pod, id, o.query),
		HTTPClient: &http.Client{Transport: headerTransport{o.Header}},
		MaxRetries: -1,
	}
	return client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: o.Version})
}

// mcpURL is /mcp's URL for pod as id with extra query parameters.
func mcpURL(base, pod, id, query string) string {
	q, _ := url.ParseQuery(query)
	q.Set("pod", pod)
	if id != "" {
		q.Set("participant", id)
	}
	return base + "/mcp?" + q.Encode()
}

// headerTransport adds headers to every request.
type headerTransport struct{ h http.Header }

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, vs := range t.h {
			r.Header[k] = vs
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// ToolResult is a tool call's structured result, decoded.
type ToolResult struct {
	IsError bool
	Out     map[string]any
}

func (r ToolResult) Str(key string) string { s, _ := r.Out[key].(string); return s }

// Envelopes decodes an envelopes result.
func (r ToolResult) Envelopes() []Msg {
	list, _ := r.Out["envelopes"].([]any)
	out := make([]Msg, len(list))
	for i, v := range list {
		out[i], _ = v.(map[string]any)
	}
	return out
}

// MCPCall calls a tool and checks what docs/protocol.md section 9 says of every
// result: one text content item holding the JSON of its structured
// content. A protocol error fails the test; use MCPCallErr to expect one.
func MCPCall(t *testing.T, cs *mcp.ClientSession, tool string, args any) ToolResult {
	t.Helper()
	r, err := MCPCallErr(cs, tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

func MCPCallErr(cs *mcp.ClientSession, tool string, args any) (ToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return ToolResult{}, err
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return ToolResult{}, err
	}
	out := ToolResult{IsError: res.IsError}
	if err := json.Unmarshal(raw, &out.Out); err != nil || out.Out == nil {
		return out, fmt.Errorf("%s: structured content %s is not a JSON object", tool, raw)
	}
	if len(res.Content) != 1 {
		return out, fmt.Errorf("%s: %d content items, want 1", tool, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return out, fmt.Errorf("%s: the content item is %T, not text", tool, res.Content[0])
	}
	var fromText any
	if err := json.Unmarshal([]byte(text.Text), &fromText); err != nil || !JSONEqual(fromText, out.Out) {
		return out, fmt.Errorf("%s: the text item %q is not the structured content %s", tool, text.Text, raw)
	}
	return out, nil
}

// MCPRefused calls a tool and expects a refusal with code.
func MCPRefused(t *testing.T, cs *mcp.ClientSession, tool string, args any, code string) ToolResult {
	t.Helper()
	r := MCPCall(t, cs, tool, args)
	if !r.IsError || r.Str("error") != code || r.Str("message") == "" {
		t.Fatalf("%s(%v): got %v (isError %v), want a refusal %s with a message", tool, args, r.Out, r.IsError, code)
	}
	return r
}

// MCPOK calls a tool and expects success.
func MCPOK(t *testing.T, cs *mcp.ClientSession, tool string, args any) ToolResult {
	t.Helper()
	r := MCPCall(t, cs, tool, args)
	if r.IsError {
		t.Fatalf("%s(%v) refused: %v", tool, args, r.Out)
	}
	return r
}

// MCPReadAll reads with pod_read until n envelopes have come (waiting up
// to 5 s for each) and returns them.
func MCPReadAll(t *testing.T, cs *mcp.ClientSession, n int) []Msg {
	t.Helper()
	var out []Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		r := MCPOK(t, cs, "pod_read", map[string]any{"wait_ms": 5000})
		out = append(out, r.Envelopes()...)
	}
	if len(out) < n {
		t.Fatalf("pod_read: %d envelopes within 10s, want %d: %v", len(out), n, out)
	}
	return out
}

// MCPPost sends one JSON-RPC message to /mcp as a client of the protocol
// with sessions would, and returns the HTTP status and, for a refusal in
// the gateway's JSON, its error code.
func MCPPost(t *testing.T, endpoint string, header http.Header, body string) (status int, code string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", MCPSessions)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var refusal struct{ Error, Message string }
	if json.Unmarshal(b, &refusal) == nil && refusal.Error != "" && refusal.Message == "" {
		t.Fatalf("a refusal without a message: %s", b)
	}
	return resp.StatusCode, refusal.Error
}

// MCPInitialize is an initialize request's body.
const MCPInitialize = `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}`
