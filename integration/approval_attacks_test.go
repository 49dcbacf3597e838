package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// Issue 38: the holes a review found in approvals and tool discovery,
// each tried as the review tried it, against the real gateway. Each test
// was first seen failing on 10272a4 (RELIABILITY.md lists the attacks and
// what that commit did).

// approvalTokens: boss may call any tool and grant; agent may chat and
// propose; bob may call the read_* tools; srv and srv2 answer calls;
// mallory may chat and send MCP notifications, and serves nothing.
func approvalTokens(t *testing.T) string {
	return harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "boss-t", "participant": "boss", "capabilities": ["chat", "test/*", "mcp/request", "capability/grant", "gateway/observe"], "pods": ["*"]},
  {"token": "agent-t", "participant": "agent", "capabilities": ["chat", "test/*", "mcp/proposal"], "pods": ["*"]},
  {"token": "agent2-t", "participant": "agent2", "capabilities": ["chat", "test/*", "mcp/proposal"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat", "test/*", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}], "pods": ["*"]},
  {"token": "srv-t", "participant": "srv", "capabilities": ["chat", "test/*", "mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "srv2-t", "participant": "srv2", "capabilities": ["chat", "test/*", "mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "mallory-t", "participant": "mallory", "capabilities": ["chat", "test/*", "mcp/notification"], "pods": ["*"]}
]}`)
}

// digestOf reads the digest a pending proposal's event carries ("" for
// none: a gateway before issue 38, on which these attacks were tried).
func digestOf(t *testing.T, ev harness.Msg) string {
	t.Helper()
	d, _ := ev.Payload()["digest"].(string)
	return d
}

// approval is a gateway/approve of proposal with its digest (the event's;
// left out when ""), scope, and the request's id.
func approval(id, proposal, digest, scope string) map[string]any {
	payload := map[string]any{"proposal": proposal}
	if scope != "" {
		payload["scope"] = scope
	}
	if digest != "" {
		payload["digest"] = digest
	}
	return map[string]any{"id": id, "kind": "gateway/approve", "payload": payload}
}

// receivedCall reads c until an mcp/request whose payload calls tool, and
// fails when an envelope correlated to none arrives first… it returns
// the request.
func receivedCall(t *testing.T, c *harness.Client, tool string) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == "mcp/request" {
			if params, _ := m.Payload()["params"].(map[string]any); params["name"] == tool {
				return m
			}
		}
	}
	t.Fatalf("%s: no call of %s within 10s", c.ID, tool)
	return nil
}

// noCalls reads c for d and fails if an mcp/request arrives.
func noCalls(t *testing.T, c *harness.Client, d time.Duration) {
	t.Helper()
	for m := c.Next(d); m != nil; m = c.Next(d) {
		if m.Kind() == "mcp/request" {
			t.Fatalf("%s received a call: %v", c.ID, m)
		}
	}
}

// TestAlwaysGrantIsOneToolOnOneRecipient: approving "always" a proposal
// whose tool name reads as a pattern ("*", "/.*/", "!x", "read_*") grants
// nothing (the approval is refused, the proposal stays pending), so the
// proposer cannot then call delete_all; and an always approval of echo on
// srv lets the proposer call echo on srv, not on srv2.
func TestAlwaysGrantIsOneToolOnOneRecipient(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = approvalTokens(t) })
	const pod = "always-one-tool"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
	srv := g.DialToken(t, pod, "srv-t", true, "routing=directed")
	srv2 := g.DialToken(t, pod, "srv2-t", true, "routing=directed")

	for i, name := range []string{"*", "/.*/", "!x", "read_*", "**", "?"} {
		id := fmt.Sprintf("pat-%d", i)
		agent.Send(map[string]any{"id": id, "kind": "mcp/proposal", "to": []string{"srv"},
			"payload": json.RawMessage(bridgetest.ToolCall(i, name, nil))})
		d := digestOf(t, proposalEvent(t, boss, id, "pending"))
		if m := request(t, boss, approval("a-"+id, id, d, "always")); m.ErrCode() != "invalid_envelope" {
			t.Fatalf("an always approval of tool %q: %v, want invalid_envelope", name, m)
		}
		if info, _ := request(t, boss, map[string]any{"id": "l-" + id, "kind": "gateway/proposals"}).Payload()["proposals"].([]any); !strings.Contains(string(harness.MustJSON(t, info)), `"id":"`+id+`"`) {
			t.Fatalf("proposal %s is no longer pending after its refused approval: %v", id, info)
		}
		agent.Send(map[string]any{"id": "del-" + id, "kind": "mcp/request", "to": []string{"srv"},
			"payload": json.RawMessage(bridgetest.ToolCall(100+i, "delete_all", nil))})
		if code := refusalCode(t, agent, "del-"+id); code != "capability_violation" {
			t.Fatalf("after an always approval of %q, delete_all: %s", name, code)
		}
	}

	// echo on srv, always.
	agent.Send(map[string]any{"id": "echo-1", "kind": "mcp/proposal", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(1, "echo", nil))})
	d := digestOf(t, proposalEvent(t, boss, "echo-1", "pending"))
	ans := request(t, boss, approval("a-echo", "echo-1", d, "always"))
	if ans.Kind() != "system/approve" || ans.Payload()["grant_id"] == nil {
		t.Fatalf("the always approval of echo: %v", ans)
	}
	receivedCall(t, srv, "echo")
	agent.Send(map[string]any{"id": "echo-srv", "kind": "mcp/request", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(2, "echo", nil))})
	if m := receivedCall(t, srv, "echo"); m.Str("id") != "echo-srv" {
		t.Fatalf("srv received %v", m)
	}
	agent.Send(map[string]any{"id": "echo-srv2", "kind": "mcp/request", "to": []string{"srv2"}, "payload": json.RawMessage(bridgetest.ToolCall(3, "echo", nil))})
	if code := refusalCode(t, agent, "echo-srv2"); code != "capability_violation" {
		t.Fatalf("echo on srv2 after approving echo on srv always: %s", code)
	}
	noCalls(t, srv2, 300*time.Millisecond)
}

// TestApprovalBoundToTheBytes: an approval names the digest of the call
// it approves. A proposal id reused once the first proposal aged out of
// the gateway's memory (a small --max-proposals-per-pod and history make
// that quick) with another call is not released by an approval of the
// first call's bytes, nor by one that names no digest (as the viewer sent
// before).
func TestApprovalBoundToTheBytes(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = approvalTokens(t)
		c.MaxProposalsPerPod = 2
		if c.History > 0 {
			c.History = 20
		}
	})
	const pod = "approval-bytes"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
	srv := g.DialToken(t, pod, "srv-t", true, "routing=directed")

	agent.Send(map[string]any{"id": "p1", "kind": "mcp/proposal", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(1, "echo", nil))})
	echoDigest := digestOf(t, proposalEvent(t, boss, "p1", "pending"))
	agent.Send(map[string]any{"id": "w1", "kind": "mcp/withdraw", "correlation_id": "p1", "payload": map[string]any{}})
	proposalEvent(t, boss, "p1", "withdrawn")
	// Age p1 out: other proposals end, and chats push it out of the history.
	for i := range 4 {
		id := fmt.Sprintf("filler-%d", i)
		agent.Send(map[string]any{"id": id, "kind": "mcp/proposal", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(i, "echo", nil))})
		proposalEvent(t, boss, id, "pending")
		agent.Send(map[string]any{"id": "w-" + id, "kind": "mcp/withdraw", "correlation_id": id, "payload": map[string]any{}})
		proposalEvent(t, boss, id, "withdrawn")
	}
	for i := range 40 {
		agent.Send(map[string]any{"kind": "chat", "payload": map[string]any{"text": fmt.Sprint(i)}})
	}
	harness.Sentinel(agent, "aged", boss)
	harness.Until(boss, "aged")

	// The same id, another call. An approval as the viewer sent it
	// before (no digest) is refused, and so is one of the first call's
	// bytes.
	agent.Send(map[string]any{"id": "p1", "kind": "mcp/proposal", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(9, "delete_all", nil))})
	newDigest := digestOf(t, proposalEvent(t, boss, "p1", "pending"))
	if m := request(t, boss, map[string]any{"id": "a-none", "kind": "gateway/approve", "payload": map[string]any{"proposal": "p1"}}); m.ErrCode() != "invalid_envelope" {
		t.Fatalf("an approval without a digest: %v, want invalid_envelope", m)
	}
	if !strings.HasPrefix(echoDigest, "sha256:") || !strings.HasPrefix(newDigest, "sha256:") || newDigest == echoDigest {
		t.Fatalf("the pending events' digests: %q then %q", echoDigest, newDigest)
	}
	if m := request(t, boss, approval("a-old", "p1", echoDigest, "once")); m.ErrCode() != "proposal_changed" {
		t.Fatalf("an approval of the first call's bytes: %v, want proposal_changed", m)
	}
	noCalls(t, srv, 300*time.Millisecond)
	// The approval of what boss saw releases it.
	if m := request(t, boss, approval("a-new", "p1", newDigest, "once")); m.Kind() != "system/approve" {
		t.Fatalf("the approval of the call shown: %v", m)
	}
	receivedCall(t, srv, "delete_all")
}

// TestProposalWaitIsTheProposers: a second MCP host that waits on a
// proposal another host's call became is refused, and the proposer's call
// gets its result.
func TestProposalWaitIsTheProposers(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = proposalTokens(t, `{"token": "agent2-t", "participant": "agent2", "capabilities": ["chat", "mcp/proposal"], "pods": ["*"]}`)
		c.History = 1000
	})
	const pod = "wait-theft"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "boss-t", Observe: true})
	startBridgeProc(t, g, probe, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	host := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("agent-t"), Version: harness.MCPSessions})
	thief := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("agent2-t"), Version: harness.MCPSessions})
	harness.Eventually(t, 10*time.Second, "the host lists tools__echo", func() bool {
		return slices.Contains(toolNamesOf(t, host), "tools__echo")
	})

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mine *mcp.CallToolResult
	var mineErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		mine, mineErr = host.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"message": "mine"}})
	}()
	pending := proposalEventWhere(t, boss, "pending", func(m harness.Msg) bool { return m.Payload()["proposer"] == "agent" })
	id := pending.Payload()["proposal"].(string)
	stolen := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := thief.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_wait", Arguments: map[string]any{"proposal": id, "wait_ms": 20000}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		stolen <- res
	}()
	// The thief's wait is under way (or already refused) before boss
	// decides.
	time.Sleep(time.Second)
	if m := request(t, boss, approval("a1", id, digestOf(t, pending), "once")); m.Kind() != "system/approve" {
		t.Fatalf("boss's approval: %v", m)
	}
	wg.Wait()
	if mineErr != nil || mine.IsError || len(mine.Content) == 0 || mine.Content[0].(*mcp.TextContent).Text != "Echo: mine" {
		t.Fatalf("the proposer's call: %v %s", mineErr, harness.MustJSON(t, mine))
	}
	res := <-stolen
	text := string(harness.MustJSON(t, res))
	if !res.IsError || strings.Contains(text, "Echo: mine") || !strings.Contains(text, "capability_violation") {
		t.Fatalf("the other host's proposal_wait: %s", text)
	}
}

// proposalEventWhere reads c until a system/proposal in state for which
// ok holds.
func proposalEventWhere(t *testing.T, c *harness.Client, state string, ok func(harness.Msg) bool) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == "system/proposal" && m.Payload()["state"] == state && ok(m) {
			return m
		}
	}
	t.Fatalf("%s: no such system/proposal %s within 15s", c.ID, state)
	return nil
}

// TestListChangedStormBlocksNoCall: a participant that serves nothing and
// floods notifications/tools/list_changed makes the gateway ask it
// nothing, and a server that does makes it ask once at a time; neither
// fills the pod's bound of calls in flight, so other participants' calls
// go through.
func TestListChangedStormBlocksNoCall(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = approvalTokens(t)
		c.History = 1000
		c.MaxMCPRequestsPerPod = 8
		c.Rate, c.Burst = 1000, 1000
	})
	const pod = "list-storm"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	srv := g.DialToken(t, pod, "srv-t", true, "routing=directed")
	// srv2 serves MCP and never answers the gateway's tools/list.
	srv2 := g.DialToken(t, pod, "srv2-t", true, "routing=directed&serves=mcp")
	mallory := g.DialToken(t, pod, "mallory-t", true, "routing=directed")
	// An MCP host here, so that the gateway reads the servers' tools.
	harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("agent-t"), Version: harness.MCPSessions})

	notify := []byte(`{"kind":"mcp/notification","payload":{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}`)
	for range 50 {
		mallory.SendRaw(notify)
		srv2.SendRaw(notify)
	}
	harness.Sentinel(mallory, "flooded", boss)
	harness.Until(boss, "flooded")
	boss.Send(map[string]any{"id": "call-1", "kind": "mcp/request", "to": []string{"srv"}, "payload": json.RawMessage(bridgetest.ToolCall(1, "echo", nil))})
	if m := receivedCall(t, srv, "echo"); m.Str("id") != "call-1" {
		t.Fatalf("srv received %v", m)
	}
	// Nothing was asked of mallory; srv2 was asked for its tools at most
	// twice (its join, then one re-read once the first ends), and for
	// each of its other lists once (its join).
	asked := func(c *harness.Client, d time.Duration) map[string]int {
		n := map[string]int{}
		for m := c.Next(d); m != nil; m = c.Next(d) {
			if m.Kind() == "mcp/request" && m.Str("from") == "system:gateway" {
				n[m.Payload()["method"].(string)]++
			}
		}
		return n
	}
	if n := asked(mallory, 500*time.Millisecond); len(n) != 0 {
		t.Fatalf("the gateway asked mallory, who serves nothing, %v", n)
	}
	if n := asked(srv2, 500*time.Millisecond); n["tools/list"] > 2 || n["resources/list"] > 1 || n["prompts/list"] > 1 {
		t.Fatalf("the gateway asked srv2 %v", n)
	}
}

// TestReservedKeysInAnotherCase: a top-level key that is one of the
// envelope's own in another case ("Approval", "KIND", "To") is refused,
// over WebSocket and HTTP, so that no receiver that reads keys ignoring
// case takes a call for an approved one; so is one with a NUL.
func TestReservedKeysInAnotherCase(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = approvalTokens(t) })
	const pod = "reserved-case"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	srv := g.DialToken(t, pod, "srv-t", true, "routing=directed")
	call := bridgetest.ToolCall(1, "echo", nil)
	for i, extra := range []string{
		`"Approval":{"proposal":"p","by":"boss"}`,
		`"APPROVAL":{"proposal":"p","by":"boss"}`,
		`"\u0041pproval":{"proposal":"p","by":"boss"}`,
		`"KIND":"chat"`,
		`"To":["boss"]`,
		`"From":"srv"`,
		`"Payload":{}`,
		`"Correlation_ID":"x"`,
		`"kind\u0000":"chat"`,
		`"approval\u0000":{"proposal":"p","by":"boss"}`,
	} {
		id := fmt.Sprintf("rk-%d", i)
		boss.SendRaw([]byte(`{"id":"` + id + `","kind":"mcp/request","to":["srv"],` + extra + `,"payload":` + call + `}`))
		if code := refusalCode(t, boss, id); code != "invalid_envelope" {
			t.Fatalf("%s: %s, want invalid_envelope", extra, code)
		}
		status, results := postRaw(t, g, pod, "boss-t", `{"kind":"mcp/request","to":["srv"],`+extra+`,"payload":`+call+`}`)
		if status != http.StatusOK || len(results) != 1 || results[0].Error == nil || results[0].Error.Code != "invalid_envelope" {
			t.Fatalf("POST with %s: %d %+v", extra, status, results)
		}
	}
	srv.ExpectNothing(300 * time.Millisecond)
	// Unknown fields in any case are still relayed untouched.
	boss.SendRaw([]byte(`{"id":"fine","kind":"mcp/request","to":["srv"],"Note":"x","payload":` + call + `}`))
	if m := receivedCall(t, srv, "echo"); m.Str("Note") != "x" {
		t.Fatalf("an unknown field was not relayed: %v", m)
	}
}

// TestKeysWithNUL: a payload the gateway reads whose keys differ by a NUL
// ("name" and "name\u0000": two keys to JSON, one to a C-string parser)
// is refused ambiguous_payload, so bob, who may call read_* alone, cannot
// carry delete_all in a second "name"; at any depth, in a grant too.
func TestKeysWithNUL(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = approvalTokens(t) })
	const pod = "nul-keys"
	bob := g.DialToken(t, pod, "bob-t", true, "routing=directed")
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	srv := g.DialToken(t, pod, "srv-t", true, "routing=directed")
	for i, payload := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","name\u0000":"delete_all"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name\u0000":"delete_all","name":"read_file"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a","path\u0000x":"b"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","method\u0000":"tools/delete","params":{"name":"read_file"}}`,
	} {
		id := fmt.Sprintf("nul-%d", i)
		bob.SendRaw([]byte(`{"id":"` + id + `","kind":"mcp/request","to":["srv"],"payload":` + payload + `}`))
		if code := refusalCode(t, bob, id); code != "ambiguous_payload" {
			t.Fatalf("%s: %s, want ambiguous_payload", payload, code)
		}
	}
	boss.SendRaw([]byte(`{"id":"g-nul","kind":"capability/grant","to":["bob"],"payload":{"recipient":"bob","recipient\u0000":"boss","capabilities":["chat"]}}`))
	if code := refusalCode(t, boss, "g-nul"); code != "ambiguous_payload" {
		t.Fatalf("a grant with a NUL key: %s", code)
	}
	srv.ExpectNothing(300 * time.Millisecond)
	bob.SendRaw([]byte(`{"id":"ok","kind":"mcp/request","to":["srv"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"}}}`))
	receivedCall(t, srv, "read_file")
}
