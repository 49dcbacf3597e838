package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The pod's tools for an MCP host (issue 29, docs/protocol.md section 9):
// an MCP host on /mcp (the official Go SDK's client) sees the tools of the
// pod's MCP servers (here the Go SDK server of testdata, bridged with mcpp
// bridge), named SERVER__TOOL, listed where its capabilities allow the
// call; it is told when they change; calling one goes through the pod as
// an mcp/request of its participant, in the sub-context it opened last,
// and folds away with it.

// toolNamesOf lists the names of the host's tools.
func toolNamesOf(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestMCPHostCallsPodServers: the host lists the bridged server's tools
// beside its own and calls one; its participant's capabilities decide
// which are listed; a server that joins or leaves is a list change.
func TestMCPHostCallsPodServers(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		c.Tokens = harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "host-t", "participant": "claude", "capabilities": ["chat", "context/*", "conclusion", "mcp/request"], "pods": ["*"]},
  {"token": "narrow-t", "participant": "narrow", "capabilities": ["chat",
     {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}], "pods": ["*"]},
  {"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "watch-t", "participant": "watcher", "capabilities": ["chat", "mcp/request"], "pods": ["*"]}
]}`)
	})
	const pod = "host-tools"
	watcher := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "watch-t"})
	bridge := startBridgeProc(t, g, watcher, pod, "tools", []string{"--token", "tools-t"}, goServer(t))

	changed := make(chan struct{}, 16)
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("host-t"), Version: harness.MCPSessions,
		Client: &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}}})
	names := toolNamesOf(t, cs)
	for _, want := range []string{"pod_send", "tools__echo", "tools__pid"} {
		if !slices.Contains(names, want) {
			t.Fatalf("the host's tools %v lack %s", names, want)
		}
	}
	narrow := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("narrow-t"), Version: harness.MCPSessions})
	if got := toolNamesOf(t, narrow); !slices.Contains(got, "tools__echo") || slices.Contains(got, "tools__pid") {
		t.Fatalf("a host that may call echo alone lists %v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"message": "through the pod"}})
	if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "Echo: through the pod" {
		t.Fatalf("tools__echo: %v %+v", err, res)
	}
	// A server that leaves is a change of the host's list.
	drain(changed)
	bridge.stop()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the host was not told that the server's tools are gone")
	}
	if got := toolNamesOf(t, cs); slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "tools__") }) {
		t.Fatalf("after the server left the host lists %v", got)
	}
	// And one that joins.
	startBridgeProc(t, g, watcher, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the host was not told of the server's tools")
	}
	harness.Eventually(t, 10*time.Second, "the server's tools listed again", func() bool {
		return slices.Contains(toolNamesOf(t, cs), "tools__echo")
	})
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestMCPHostCallFoldsAway: a host's call made inside the sub-context it
// opened goes in that sub-context, and a late joiner's folded history
// shows the conclusion, not the call.
func TestMCPHostCallFoldsAway(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
	const pod = "host-fold"
	watcher := bridgetest.Dial(t, g.WS, pod, "watcher")
	startBridgeProc(t, g, watcher, pod, "tools", nil, goServer(t))
	cs := harness.MCPConnect(t, g.URL, pod, "claude", harness.MCPOpts{})
	branch := harness.MCPOK(t, cs, "context_branch", map[string]any{"description": "look it up"})
	cx := branch.Out["context"].(map[string]any)["id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"message": "inside"}})
	if err != nil || res.IsError {
		t.Fatalf("tools__echo: %v %+v", err, res)
	}
	harness.MCPOK(t, cs, "context_return", map[string]any{"context": cx, "summary": "found it"})

	tx := g.Dial(t, pod, "tx", "")
	late := g.Dial(t, pod, "late", "history=all")
	harness.Sentinel(tx, "late-end", late)
	var kinds []string
	for _, m := range harness.Until(late, "late-end") {
		if m.ContextID() == cx {
			kinds = append(kinds, m.Kind())
		}
	}
	if slices.Contains(kinds, "mcp/request") || slices.Contains(kinds, "mcp/response") || !slices.Contains(kinds, "conclusion") {
		t.Fatalf("the folded history of the sub-context holds %v, want its conclusion and not the call", kinds)
	}
	raw := g.Dial(t, pod, "raw", "history=all&fold=0")
	harness.Sentinel(tx, "raw-end", raw)
	var calls int
	for _, m := range harness.Until(raw, "raw-end") {
		if m.ContextID() == cx && (m.Kind() == "mcp/request" || m.Kind() == "mcp/response") {
			calls++
			if m.Kind() == "mcp/request" && m.Str("from") != "claude" {
				t.Fatalf("the call was made by %s", m.Str("from"))
			}
		}
	}
	if calls != 2 {
		t.Fatalf("the unfolded history holds %d envelopes of the call in the sub-context, want its request and its answer", calls)
	}
}
