package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Calls the gateway can vouch for (issue 29, docs/protocol.md section 11):
// an mcp/request names exactly one recipient; the answer goes to the
// requester alone; the gateway answers for a recipient that is absent,
// leaves or does not answer in time, drops a late answer and counts it,
// and bounds what is in flight.

// TestServesInWelcomeAndPresence: a participant that joins with
// serves=mcp is shown as an MCP server in presence and welcomes; a plain
// one carries no serves; another value is refused.
func TestServesInWelcomeAndPresence(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "serves"
	alice := g.Dial(t, pod, "alice", "")
	files := g.Dial(t, pod, "files", "serves=mcp")
	m := alice.Next(5 * time.Second)
	if m.Kind() != "system/presence" {
		t.Fatalf("alice got %v", m)
	}
	if who, _ := m.Payload()["participant"].(map[string]any); who["id"] != "files" || !harness.JSONEqual(who["serves"], []any{"mcp"}) {
		t.Fatalf("files' join: %v", m.Payload())
	}
	late := g.Dial(t, pod, "late", "")
	var sawFiles, sawAlice bool
	for _, p := range late.Welcome.Payload()["participants"].([]any) {
		p := p.(map[string]any)
		switch p["id"] {
		case "files":
			sawFiles = harness.JSONEqual(p["serves"], []any{"mcp"})
		case "alice":
			_, has := p["serves"]
			sawAlice = !has
		}
	}
	if !sawFiles || !sawAlice {
		t.Fatalf("late's welcome lists %v", late.Welcome.Payload()["participants"])
	}
	_ = files
	if status, body := harness.Refusal(t, g.WS, podQueryWith(pod, "x", "serves=a2a"), nil); status != 400 || !strings.Contains(body, "invalid_filter") {
		t.Fatalf("serves=a2a: %d %s", status, body)
	}
}

// podQueryWith is the upgrade query of id joining pod, with extra.
func podQueryWith(pod, id, extra string) map[string][]string {
	q := map[string][]string{"pod": {pod}, "participant": {id}}
	for _, kv := range strings.Split(extra, "&") {
		k, v, _ := strings.Cut(kv, "=")
		q[k] = append(q[k], v)
	}
	return q
}

// TestCallRules: the requests and answers the gateway refuses, and its
// own answers for a recipient.
func TestCallRules(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MCPRequestTimeout = time.Second
		c.MaxMCPRequestsPerParticipant = 2
	})
	const pod = "call-rules"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	bob := bridgetest.Dial(t, g.WS, pod, "bob")
	server := g.Dial(t, pod, "server", "serves=mcp&routing=directed")
	alice.AwaitJoin("server")

	// Not exactly one recipient.
	for _, to := range [][]string{nil, {"server", "bob"}} {
		env := map[string]any{"id": "r", "kind": "mcp/request", "payload": json.RawMessage(bridgetest.ToolCall(1, "x", nil))}
		if to != nil {
			env["to"] = to
		}
		server.Send(env)
		if e := server.ExpectErr("invalid_recipient"); !strings.Contains(e.Payload()["message"].(string), "exactly one recipient") {
			t.Fatalf("to %v: %v", to, e)
		}
	}

	// Absent: the gateway answers at once, correlated, from itself.
	a := alice.Call("nobody", bridgetest.ToolCall(7, "x", nil))
	if a.Error == nil || a.Error.Code != wire.RPCConnectionClosed || a.Reason() != wire.MCPReasonRecipientAbsent ||
		string(a.ID) != "7" || a.Envelope.From != wire.GatewayID {
		t.Fatalf("a call to nobody: %s from %s", a.Envelope.Payload, a.Envelope.From)
	}

	// The recipient answers: to may be left out, the gateway fills it;
	// an answer to someone else is refused, as is a second one.
	p := alice.Send("server", bridgetest.ToolCall("c1", "echo", nil))
	req := server.NextOf()
	if req.Str("id") != p.ID || req.Kind() != "mcp/request" {
		t.Fatalf("the server got %v", req)
	}
	server.Send(map[string]any{"id": "wrong-to", "kind": "mcp/response", "to": []string{"bob"}, "correlation_id": p.ID,
		"payload": map[string]any{"jsonrpc": "2.0", "id": "c1", "result": map[string]any{}}})
	server.ExpectErr("invalid_recipient")
	server.Send(map[string]any{"id": "ok", "kind": "mcp/response", "correlation_id": p.ID,
		"payload": map[string]any{"jsonrpc": "2.0", "id": "c1", "result": map[string]any{"content": []any{}}}})
	if ans := p.Await(); ans.Error != nil || ans.Envelope.From != "server" {
		t.Fatalf("the answer: %s", ans.Envelope.Payload)
	}
	server.Send(map[string]any{"id": "again", "kind": "mcp/response", "correlation_id": p.ID,
		"payload": map[string]any{"jsonrpc": "2.0", "id": "c1", "result": map[string]any{}}})
	server.ExpectErr("no_pending_request")

	// bob may not answer alice's request to the server.
	p = alice.Send("server", bridgetest.ToolCall("c2", "echo", nil))
	server.NextOf()
	bobRaw := g.Dial(t, pod, "bob2", "")
	bobRaw.Send(map[string]any{"id": "steal", "kind": "mcp/response", "to": []string{"alice"}, "correlation_id": p.ID,
		"payload": map[string]any{"jsonrpc": "2.0", "id": "c2", "result": map[string]any{}}})
	bobRaw.ExpectErr("no_pending_request")

	// No answer in time: the gateway's timeout answer, then the late one
	// is dropped and counted.
	late := harness.MetricOrZero(t, g.URL, "mcpp_mcp_late_responses_total")
	ans := p.Await()
	if ans.Error == nil || ans.Error.Code != wire.RPCRequestTimeout || ans.Reason() != wire.MCPReasonTimeout || string(ans.ID) != `"c2"` {
		t.Fatalf("the timeout answer: %s", ans.Envelope.Payload)
	}
	server.Send(map[string]any{"id": "late", "kind": "mcp/response", "correlation_id": p.ID,
		"payload": map[string]any{"jsonrpc": "2.0", "id": "c2", "result": map[string]any{}}})
	server.ExpectErr("no_pending_request")
	if got := harness.MetricOrZero(t, g.URL, "mcpp_mcp_late_responses_total"); got < late+1 {
		t.Fatalf("mcpp_mcp_late_responses_total %v, then %v", late, got)
	}

	// The bound on calls in flight: the third is refused, retryable.
	alice.Send("server", bridgetest.ToolCall(1, "a", nil))
	alice.Send("server", bridgetest.ToolCall(2, "b", nil))
	_, refused := alice.Send("server", bridgetest.ToolCall(3, "c", nil)).Outcome()
	if refused == nil || refused.Code != wire.CodeRequestLimitExceeded || !refused.Retryable {
		t.Fatalf("the third call in flight: %v", refused)
	}
	// A notification (no id) waits for nothing and is not counted: it
	// reaches the server though two calls are in flight.
	note := alice.Send("server", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	for m := server.NextOf(); m.Str("id") != note.ID; m = server.NextOf() {
	}

	// The recipient leaves: the gateway answers what it had in flight.
	p = bob.Send("server", bridgetest.ToolCall("c9", "slow", nil))
	for m := server.NextOf(); m.Str("id") != p.ID; m = server.NextOf() {
	}
	_ = server.Conn.Close()
	if ans := p.Await(); ans.Error == nil || ans.Reason() != wire.MCPReasonRecipientLeft || ans.Error.Code != wire.RPCConnectionClosed {
		t.Fatalf("the call to a recipient that left: %s", ans.Envelope.Payload)
	}
}

// TestCallsWithARealServer: capabilities decide which tools a participant
// may call on a real MCP server (the Go SDK's, through mcpp bridge): a
// call refused by its capabilities is answered by the server once a grant
// allows it.
func TestCallsWithARealServer(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "admin-t", "participant": "admin", "capabilities": ["*"], "pods": ["*"]},
  {"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "agent-t", "participant": "agent", "capabilities": ["chat",
     {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}], "pods": ["*"]}
]}`)
	})
	const pod = "real-server"
	admin := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "admin-t"})
	agent := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "agent-t"})
	startBridgeProc(t, g, admin, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	if text := agent.Call("tools", bridgetest.ToolCall(1, "echo", map[string]any{"message": "hi"})).Text(t); text != "Echo: hi" {
		t.Fatalf("echo answered %q", text)
	}
	if _, refused := agent.Send("tools", bridgetest.ToolCall(2, "pid", map[string]any{})).Outcome(); refused == nil || refused.Code != wire.CodeCapabilityViolation {
		t.Fatalf("a call its capabilities do not allow: %v", refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Client().Grant(ctx, wire.Grant{Recipient: "agent", Capabilities: []wire.Capability{{Kind: "mcp/request",
		Payload: json.RawMessage(`{"method": "tools/call", "params": {"name": "pid"}}`)}}}); err != nil {
		t.Fatal(err)
	}
	if a := agent.Call("tools", bridgetest.ToolCall(3, "pid", map[string]any{})); a.Error != nil || a.IsToolError() {
		t.Fatalf("the granted call: %s", a.Envelope.Payload)
	}
}
