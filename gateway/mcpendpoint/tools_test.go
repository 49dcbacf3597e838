package mcpendpoint

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/wire"
)

// TestServerToolNames: a host lists the tools of each of the pod's MCP
// servers as SERVER__TOOL, within MCP's tool-name characters whatever the
// server and the tool are called; two servers' tools of one name are two
// tools, a server's tool named like the gateway's own does not replace
// it, a name over 128 bytes is not listed; each name calls the tool it
// names, at the server it names.
func TestServerToolNames(t *testing.T) {
	tp := newTestPod(t)
	long := strings.Repeat("x", 122) // files__ and 122 bytes: 129
	files := tp.toolServer("files", echoServer("read/file", "a b", long))
	bot := tp.toolServer("my_bot", echoServer("pod_send"))
	host := tp.host("claude", wire.Kinds("chat", "mcp/request"), newestVersion)

	serverToolsAre(t, host, []string{"files__a_20b", "files__echo", "files__read_2ffile", "my_5fbot__echo", "my_5fbot__pod_send"})
	for _, name := range toolNames(t, host) {
		for _, r := range name {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
				t.Errorf("%q holds %q, outside MCP's tool-name characters", name, r)
			}
		}
	}

	for _, tc := range []struct {
		name   string
		server *toolServer
		tool   string
		text   string
	}{
		{"files__read_2ffile", files, "read/file", "I am read/file"},
		{"files__a_20b", files, "a b", "I am a b"},
		{"files__echo", files, "echo", "Echo: to files"},
		{"my_5fbot__echo", bot, "echo", "Echo: to my_bot"},
		{"my_5fbot__pod_send", bot, "pod_send", "I am pod_send"},
	} {
		res := call(t, host, tc.name, map[string]any{"message": "to " + tc.server.id})
		if res.IsError || textOf(res) != tc.text {
			t.Errorf("%s answered %v %q, want %q", tc.name, res.IsError, textOf(res), tc.text)
		}
		env := tc.server.nextCall(t)
		params, _ := env["payload"].(map[string]any)["params"].(map[string]any)
		if env["from"] != "claude" || params["name"] != tc.tool {
			t.Errorf("%s reached %s as a call of %v from %v, want %q from claude", tc.name, tc.server.id, params["name"], env["from"], tc.tool)
		}
	}

	// The gateway's own pod_send is still the gateway's: it sends.
	res := call(t, host, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"text": "hi"}})
	if res.IsError || !strings.Contains(textOf(res), `"id"`) {
		t.Fatalf("pod_send answered %v %s", res.IsError, textOf(res))
	}
}

// TestServerToolsByCapability: a host lists the servers' tools that its
// capabilities let it call, or propose (someone allowed decides), and no
// other; a tool it was not shown cannot be called by its name.
func TestServerToolsByCapability(t *testing.T) {
	tp := newTestPod(t)
	files := tp.toolServer("files", echoServer("secret"))
	for _, tc := range []struct {
		id   string
		caps string
		want []string
	}{
		{"claude", `["chat", "mcp/request"]`, []string{"files__echo", "files__secret"}},
		{"narrow", `["chat", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}]`, []string{"files__echo"}},
		{"agent", `["chat", "mcp/proposal"]`, []string{"files__echo", "files__secret"}},
		// Last, so that the node has read the server's tools when they
		// list none: what they may not call.
		{"clerk", `["chat"]`, nil},
		{"other", `["chat", "mcp/request:tools/list"]`, nil},
	} {
		serverToolsAre(t, tp.host(tc.id, capsJSON(t, tc.caps), newestVersion), tc.want)
	}

	// A session of its own (MCP with sessions), the same participant.
	narrow := tp.host("narrow", capsJSON(t, `["chat", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}]`), sessionsVersion)
	if res := call(t, narrow, "files__echo", map[string]any{"message": "allowed"}); res.IsError || textOf(res) != "Echo: allowed" {
		t.Fatalf("narrow's files__echo: %v %q", res.IsError, textOf(res))
	}
	files.nextCall(t)
	_, err := narrow.CallTool(t.Context(), &mcp.CallToolParams{Name: "files__secret"})
	if err == nil || !strings.Contains(err.Error(), "files__secret") {
		t.Fatalf("narrow called files__secret, which it was not shown: %v", err)
	}
	select {
	case env := <-files.calls:
		t.Fatalf("files received a call narrow may not make: %v", env)
	default:
	}
}
