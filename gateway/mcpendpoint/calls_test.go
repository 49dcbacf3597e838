package mcpendpoint

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// TestServerToolCall: a host's call of a server's tool is its
// participant's mcp/request to the server through the pod, with the
// host's arguments, in the sub-context the host opened last; the host
// gets the server's result as it came, an error result included; with
// sessions (MCP 2025-11-25) as without (the newest).
func TestServerToolCall(t *testing.T) {
	t.Run("newest", func(t *testing.T) { testServerToolCall(t, newestVersion) })
	t.Run(sessionsVersion, func(t *testing.T) { testServerToolCall(t, sessionsVersion) })
}

func testServerToolCall(t *testing.T, version string) {
	tp := newTestPod(t)
	files := tp.toolServer("files", echoServer("fail"))
	host := tp.host("claude", wire.Kinds("chat", "context/*", wire.KindConclusion, "mcp/request"), version)
	serverToolsAre(t, host, []string{"files__echo", "files__fail"})

	res := call(t, host, "files__echo", map[string]any{"message": "through the pod"})
	if res.IsError || textOf(res) != "Echo: through the pod" {
		t.Fatalf("files__echo answered %v %q", res.IsError, textOf(res))
	}
	env := files.nextCall(t)
	payload := env["payload"].(map[string]any)
	params := payload["params"].(map[string]any)
	if env["kind"] != wire.KindMCPRequest || env["from"] != "claude" || payload["method"] != "tools/call" ||
		params["name"] != "echo" || params["arguments"].(map[string]any)["message"] != "through the pod" || env["context"] != nil {
		t.Fatalf("the server received %v", env)
	}

	// In a sub-context the host opened, the call goes in it.
	res = call(t, host, "context_branch", map[string]any{"description": "look it up"})
	if res.IsError {
		t.Fatalf("context_branch: %s", textOf(res))
	}
	var branch struct {
		Context struct{ ID string } `json:"context"`
	}
	if err := json.Unmarshal([]byte(textOf(res)), &branch); err != nil || branch.Context.ID == "" {
		t.Fatalf("context_branch answered %s (%v)", textOf(res), err)
	}
	if res := call(t, host, "files__echo", map[string]any{"message": "inside"}); res.IsError || textOf(res) != "Echo: inside" {
		t.Fatalf("files__echo in the branch answered %v %q", res.IsError, textOf(res))
	}
	if cx, _ := files.nextCall(t)["context"].(map[string]any); cx["id"] != branch.Context.ID {
		t.Fatalf("the call in the branch came in context %v, want %s", cx, branch.Context.ID)
	}
	if res := call(t, host, "context_return", map[string]any{"context": branch.Context.ID, "summary": "found"}); res.IsError {
		t.Fatalf("context_return: %s", textOf(res))
	}
	// Once it is closed, calls go in the main conversation again.
	call(t, host, "files__echo", map[string]any{"message": "after"})
	if cx := files.nextCall(t)["context"]; cx != nil {
		t.Fatalf("the call after the branch closed came in context %v", cx)
	}

	// The server's error result reaches the host as it came.
	res = call(t, host, "files__fail", nil)
	if !res.IsError || textOf(res) != "failed on purpose" {
		t.Fatalf("files__fail answered %v %q", res.IsError, textOf(res))
	}
	files.nextCall(t)
}

// TestServerToolCallRefused: a call the pod refuses is the tool's error
// result, with the system/error payload a WebSocket participant would get
// ({"error": CODE, "message": TEXT, "retryable": …}), and the server
// hears nothing of it: here the host's second call while its first is in
// flight, over --max-mcp-requests-per-participant 1.
func TestServerToolCallRefused(t *testing.T) {
	tp := newTestPod(t, func(c *pod.Config) { c.MaxMCPRequestsPerParticipant = 1 })
	release := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "slow-server", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type": "object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	files := tp.toolServer("files", s)
	host := tp.host("claude", wire.Kinds("chat", "mcp/request"), newestVersion)
	serverToolsAre(t, host, []string{"files__slow"})

	first := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := host.CallTool(t.Context(), &mcp.CallToolParams{Name: "files__slow"})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		first <- res
	}()
	files.nextCall(t) // in flight at the server
	res := call(t, host, "files__slow", nil)
	var refusal wire.ErrorPayload
	if !res.IsError || json.Unmarshal([]byte(textOf(res)), &refusal) != nil {
		t.Fatalf("the second call answered %v %q", res.IsError, textOf(res))
	}
	if refusal.Code != wire.CodeRequestLimitExceeded || !refusal.Retryable || refusal.Message == "" {
		t.Fatalf("the second call was refused with %+v, want %s, retryable", refusal, wire.CodeRequestLimitExceeded)
	}
	select {
	case env := <-files.calls:
		t.Fatalf("the server received the refused call: %v", env)
	default:
	}
	close(release)
	if res := <-first; res.IsError || textOf(res) != "done" {
		t.Fatalf("the first call answered %v %q", res.IsError, textOf(res))
	}
	// Its answer released the bound: the next call goes through.
	if res := call(t, host, "files__slow", nil); res.IsError || textOf(res) != "done" {
		t.Fatalf("a call after the first was answered: %v %q", res.IsError, textOf(res))
	}
}
