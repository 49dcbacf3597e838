package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// People in the loop (issue 30, docs/protocol.md section 11): proposals
// the gateway holds until someone allowed to make the call decides, bound
// to the exact call, kept in the history, with their events.

// proposalTokens: boss may call any tool and grant; agent may chat and
// propose, nothing more (the default where tokens are required); clerk may
// chat; tools is the bridge; watch may watch without presence (so may
// boss, whose observing connections probe the bridge).
func proposalTokens(t *testing.T, extra ...string) string {
	entries := append([]string{
		`{"token": "boss-t", "participant": "boss", "capabilities": ["chat", "test/*", "mcp/request", "capability/grant", "gateway/observe"], "pods": ["*"]}`,
		`{"token": "agent-t", "participant": "agent", "capabilities": ["chat", "mcp/proposal"], "pods": ["*"]}`,
		`{"token": "clerk-t", "participant": "clerk", "capabilities": ["chat"], "pods": ["*"]}`,
		`{"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]}`,
		`{"token": "watch-t", "participant": "watch", "capabilities": ["chat", "gateway/observe"], "pods": ["*"]}`,
	}, extra...)
	return harness.WriteFile(t, "tokens.json", `{"tokens": [`+strings.Join(entries, ",\n")+`]}`)
}

// propose sends agent's proposal of call to tools and returns its id.
func propose(t *testing.T, c *harness.Client, id, tool string) string {
	t.Helper()
	c.Send(map[string]any{"id": id, "kind": "mcp/proposal", "to": []string{"tools"},
		"payload": json.RawMessage(bridgetest.ToolCall(id, tool, map[string]any{"message": id}))})
	return id
}

// proposalEvent reads c until the system/proposal of proposal id in state.
func proposalEvent(t *testing.T, c *harness.Client, id, state string) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.ErrCode() != "" && m.Str("correlation_id") == id {
			t.Fatalf("%s: %s was refused: %v", c.ID, id, m.Payload())
		}
		if m.Kind() == "system/proposal" && m.Payload()["proposal"] == id && m.Payload()["state"] == state {
			return m
		}
	}
	t.Fatalf("%s: no system/proposal %s %s within 10s", c.ID, id, state)
	return nil
}

// answerTo reads c until the mcp/response correlated to request.
func answerTo(t *testing.T, c *harness.Client, request string) harness.Msg {
	t.Helper()
	return answerWithin(t, c, request, 10*time.Second)
}

// answerWithin is answerTo, waiting up to within.
func answerWithin(t *testing.T, c *harness.Client, request string, within time.Duration) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == "mcp/response" && harness.JSONEqual(m["correlation_id"], request) {
			return m
		}
	}
	t.Fatalf("%s: no answer to %s within %v", c.ID, request, within)
	return nil
}

// request sends an envelope from c and returns the gateway's answer to it
// (or its refusal).
func request(t *testing.T, c *harness.Client, env map[string]any) harness.Msg {
	t.Helper()
	id := env["id"].(string)
	c.Send(env)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Str("correlation_id") == id && strings.HasPrefix(m.Kind(), "system/") && m.Kind() != "system/proposal" {
			return m
		}
	}
	t.Fatalf("%s: no answer to %s within 10s", c.ID, id)
	return nil
}

// TestProposals: propose, approve once (the call runs once; the same call
// again is a proposal again); approve always (the next identical call runs
// directly, another tool's does not); reject; withdraw, by the proposer
// alone; decisions by participants that may not make the call refused;
// decisions on ended proposals refused; events to the proposer and to who
// could approve, not to others.
func TestProposals(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = proposalTokens(t) })
	const pod = "proposals"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
	clerk := g.DialToken(t, pod, "clerk-t", true, "routing=directed")
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "boss-t", Observe: true})
	startBridgeProc(t, g, probe, pod, "tools", []string{"--token", "tools-t"}, goServer(t))

	// agent may not call; it proposes.
	agent.Send(map[string]any{"id": "direct", "kind": "mcp/request", "to": []string{"tools"}, "payload": json.RawMessage(bridgetest.ToolCall(1, "echo", nil))})
	agent.ExpectErr("capability_violation")
	p1 := propose(t, agent, "p1", "echo")
	pending := proposalEvent(t, boss, p1, "pending")
	d1 := digestOf(t, pending)
	if pl := pending.Payload(); pl["proposer"] != "agent" || pl["to"] != "tools" || !harness.JSONEqual(pending["to"], []any{"agent", "boss"}) {
		t.Fatalf("the pending event: %v to %v", pl, pending["to"])
	}
	proposalEvent(t, agent, p1, "pending")

	// clerk may not make the call: it decides nothing.
	if m := request(t, clerk, approval("a0", p1, d1, "")); m.ErrCode() != "capability_violation" {
		t.Fatalf("clerk's approval: %v", m)
	}
	clerk.Send(map[string]any{"id": "r0", "kind": "mcp/reject", "correlation_id": p1, "payload": map[string]any{"reason": "no"}})
	clerk.ExpectErr("capability_violation")
	clerk.Send(map[string]any{"id": "w0", "kind": "mcp/withdraw", "correlation_id": p1, "payload": map[string]any{}})
	clerk.ExpectErr("capability_violation")

	// boss approves once: the call is released, from agent, naming boss;
	// its answer goes to agent.
	ans := request(t, boss, approval("a1", p1, d1, ""))
	if ans.Kind() != "system/approve" || ans.Payload()["state"] != "approved" || ans.Payload()["by"] != "boss" {
		t.Fatalf("the approval's answer: %v", ans)
	}
	released := ans.Payload()["request"].(string)
	approved := proposalEvent(t, agent, p1, "approved")
	if approved.Payload()["request"] != released {
		t.Fatalf("agent was told %v", approved.Payload())
	}
	resp := answerTo(t, agent, released)
	if !strings.Contains(string(harness.MustJSON(t, resp["payload"])), "Echo: p1") {
		t.Fatalf("the answer to the released call: %v", resp)
	}
	// Deciding it again is refused.
	if m := request(t, boss, approval("a2", p1, d1, "")); m.ErrCode() != "proposal_not_pending" {
		t.Fatalf("a second approval: %v", m)
	}
	agent.Send(map[string]any{"id": "w1", "kind": "mcp/withdraw", "correlation_id": p1, "payload": map[string]any{}})
	agent.ExpectErr("proposal_not_pending")
	// Once is once: the same call is refused, and a proposal again.
	agent.Send(map[string]any{"id": "direct2", "kind": "mcp/request", "to": []string{"tools"}, "payload": json.RawMessage(bridgetest.ToolCall(2, "echo", nil))})
	agent.ExpectErr("capability_violation")

	// Approve always: the proposer may make the call from now on, not
	// another tool's.
	p2 := propose(t, agent, "p2", "echo")
	d2 := digestOf(t, proposalEvent(t, boss, p2, "pending"))
	ans = request(t, boss, approval("a3", p2, d2, "always"))
	if ans.Payload()["scope"] != "always" || ans.Payload()["grant_id"] == nil {
		t.Fatalf("an always approval's answer: %v", ans)
	}
	answerTo(t, agent, ans.Payload()["request"].(string))
	agent.Send(map[string]any{"id": "direct3", "kind": "mcp/request", "to": []string{"tools"}, "payload": json.RawMessage(bridgetest.ToolCall(3, "echo", map[string]any{"message": "again"}))})
	if resp := answerTo(t, agent, "direct3"); !strings.Contains(string(harness.MustJSON(t, resp["payload"])), "Echo: again") {
		t.Fatalf("the call granted always: %v", resp)
	}
	agent.Send(map[string]any{"id": "direct4", "kind": "mcp/request", "to": []string{"tools"}, "payload": json.RawMessage(bridgetest.ToolCall(4, "pid", nil))})
	agent.ExpectErr("capability_violation")

	// Reject, with a reason.
	p3 := propose(t, agent, "p3", "pid")
	proposalEvent(t, boss, p3, "pending")
	boss.Send(map[string]any{"id": "r1", "kind": "mcp/reject", "correlation_id": p3, "payload": map[string]any{"reason": "unsafe"}})
	if ev := proposalEvent(t, agent, p3, "rejected"); ev.Payload()["reason"] != "unsafe" || ev.Payload()["by"] != "boss" {
		t.Fatalf("the rejection: %v", ev.Payload())
	}
	// Withdraw, by the proposer.
	p4 := propose(t, agent, "p4", "pid")
	d4 := digestOf(t, proposalEvent(t, boss, p4, "pending"))
	agent.Send(map[string]any{"id": "w2", "kind": "mcp/withdraw", "correlation_id": p4, "payload": map[string]any{"reason": "no_longer_needed"}})
	proposalEvent(t, boss, p4, "withdrawn")
	if m := request(t, boss, approval("a4", p4, d4, "")); m.ErrCode() != "proposal_not_pending" {
		t.Fatalf("an approval of a withdrawn proposal: %v", m)
	}

	// Fulfilled the MEW way: an mcp/request correlated to the proposal
	// with the same call (whatever its JSON-RPC id) fulfils it; another
	// call leaves it pending. Its answer goes to the fulfiller.
	p5 := propose(t, agent, "p5", "echo")
	proposalEvent(t, boss, p5, "pending")
	boss.Send(map[string]any{"id": "f-other", "kind": "mcp/request", "to": []string{"tools"}, "correlation_id": p5,
		"payload": json.RawMessage(bridgetest.ToolCall("x", "echo", map[string]any{"message": "something else"}))})
	answerTo(t, boss, "f-other")
	boss.Send(map[string]any{"id": "f-same", "kind": "mcp/request", "to": []string{"tools"}, "correlation_id": p5,
		"payload": json.RawMessage(bridgetest.ToolCall(99, "echo", map[string]any{"message": "p5"}))})
	if ev := proposalEvent(t, agent, p5, "fulfilled"); ev.Payload()["by"] != "boss" || ev.Payload()["request"] != "f-same" {
		t.Fatalf("the fulfilment: %v", ev.Payload())
	}
	answerTo(t, boss, "f-same")

	// The list: nothing pending; all five with their states.
	list := request(t, boss, map[string]any{"id": "l1", "kind": "gateway/proposals", "payload": map[string]any{"state": "all"}})
	var states []string
	for _, p := range list.Payload()["proposals"].([]any) {
		p := p.(map[string]any)
		states = append(states, p["id"].(string)+":"+p["state"].(string))
	}
	if got := strings.Join(states, " "); got != "p1:approved p2:approved p3:rejected p4:withdrawn p5:fulfilled" {
		t.Fatalf("gateway/proposals all: %s", got)
	}
	if list := request(t, boss, map[string]any{"id": "l2", "kind": "gateway/proposals"}); len(list.Payload()["proposals"].([]any)) != 0 {
		t.Fatalf("pending: %v", list.Payload())
	}
	// clerk, who could approve none, was told of none.
	harness.Sentinel(boss, "clerk-end", clerk)
	for _, m := range harness.Until(clerk, "clerk-end") {
		if m.Kind() == "system/proposal" {
			t.Fatalf("clerk was told %v", m)
		}
	}
}

// TestProposalExpires: a proposal nobody decides expires after
// --proposal-timeout, and its proposer is told.
func TestProposalExpires(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = proposalTokens(t); c.ProposalTimeout = time.Second })
	agent := g.DialToken(t, "expiry", "agent-t", true, "")
	p := propose(t, agent, "p-exp", "echo")
	proposalEvent(t, agent, p, "pending")
	if ev := proposalEvent(t, agent, p, "expired"); ev.Payload()["by"] != wire.GatewayID {
		t.Fatalf("the expiry: %v", ev.Payload())
	}
}

// TestProposalSurvivesRestart: with --history-dir, a pending proposal is
// pending again after the gateway restarts, and is approved then.
func TestProposalSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := proposalTokens(t)
	gp := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--tokens", tokens, "--history", "1000", "--history-dir", dir)
	agent := gp.GW.DialToken(t, "restart", "agent-t", true, "")
	p := propose(t, agent, "p-restart", "echo")
	proposalEvent(t, agent, p, "pending")
	gp.Restart()
	boss := gp.GW.DialToken(t, "restart", "boss-t", true, "")
	list := request(t, boss, map[string]any{"id": "l", "kind": "gateway/proposals"})
	ids := harness.IDsOf(list.Payload()["proposals"])
	if !slices.Equal(ids, []string{p}) {
		t.Fatalf("pending after the restart: %v", list.Payload())
	}
	digest := list.Payload()["proposals"].([]any)[0].(map[string]any)["digest"].(string)
	ans := request(t, boss, approval("a", p, digest, ""))
	if ans.Payload()["state"] != "approved" {
		t.Fatalf("the approval after the restart: %v", ans)
	}
}

// TestProposalAcrossCluster: a proposal made on one node of a cluster is
// approved on another, and its proposer, on the first, gets the call's
// answer (the gateway's, as no server is there to make it).
func TestProposalAcrossCluster(t *testing.T) {
	t.Parallel()
	tokens := proposalTokens(t, probeTokens)
	nodes := startCluster(t, 3, "--tokens", tokens)
	const pod = "proposal-cluster"
	agent := nodes[0].GW.DialToken(t, pod, "agent-t", true, "")
	boss := nodes[1].GW.DialToken(t, pod, "boss-t", true, "")
	agent.AwaitPresence("join", "boss", 10*time.Second)
	p := propose(t, agent, "p-cluster", "echo")
	digest := digestOf(t, proposalEvent(t, boss, p, "pending"))
	ans := request(t, boss, approval("a", p, digest, ""))
	if ans.Payload()["state"] != "approved" {
		t.Fatalf("the approval on node 2: %v", ans)
	}
	proposalEvent(t, agent, p, "approved")
	resp := answerTo(t, agent, ans.Payload()["request"].(string))
	if !strings.Contains(string(harness.MustJSON(t, resp["payload"])), wire.MCPReasonRecipientAbsent) {
		t.Fatalf("the answer: %v", resp)
	}
	// Node 3 knows it ended too.
	clerk := nodes[2].GW.DialToken(t, pod, "boss-t", true, "")
	if m := request(t, clerk, approval("a2", p, digest, "")); m.ErrCode() != "proposal_not_pending" {
		t.Fatalf("an approval on node 3: %v", m)
	}
}

// TestMCPHostCallBecomesProposal: an MCP host that may propose but not
// make a call sees the server's tools; its call becomes a proposal, and
// returns the server's answer once someone approves it.
func TestMCPHostCallBecomesProposal(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = proposalTokens(t); c.History = 1000 })
	const pod = "host-proposal"
	boss := g.DialToken(t, pod, "boss-t", true, "routing=directed")
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "boss-t", Observe: true})
	startBridgeProc(t, g, probe, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("agent-t")})
	if names := toolNamesOf(t, cs); !slices.Contains(names, "tools__echo") {
		t.Fatalf("a host that may propose does not list the tool: %v", names)
	}
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"message": "may I?"}})
		done <- result{res, err}
	}()
	var id, digest string
	for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); {
		if m := boss.Next(time.Until(deadline)); m != nil && m.Kind() == "system/proposal" && m.Payload()["state"] == "pending" {
			id, digest = m.Payload()["proposal"].(string), digestOf(t, m)
		}
	}
	if id == "" {
		t.Fatal("boss was told of no proposal")
	}
	request(t, boss, approval("a", id, digest, ""))
	r := <-done
	if r.err != nil || r.res.IsError || r.res.Content[0].(*mcp.TextContent).Text != "Echo: may I?" {
		t.Fatalf("the host's call after the approval: %v %+v", r.err, r.res)
	}
}

// TestObserve: observe=1 watches the pod without presence: no join or
// leave event, not in welcomes or participant lists (over MCP too); it
// needs gateway/observe, and without it the upgrade is refused.
func TestObserve(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = proposalTokens(t); c.History = 1000 })
	const pod = "observe"
	clerk := g.DialToken(t, pod, "clerk-t", true, "")
	if status, body := harness.Refusal(t, g.WS, url.Values{"pod": {pod}, "observe": {"1"}}, harness.Bearer("clerk-t")); status != http.StatusForbidden {
		t.Fatalf("observe=1 without gateway/observe: %d %s", status, body)
	}
	watch := g.DialToken(t, pod, "watch-t", true, "observe=1")
	agent := g.DialToken(t, pod, "agent-t", true, "")
	for _, id := range harness.IDsOf(agent.Welcome.Payload()["participants"]) {
		if id == "watch" {
			t.Fatal("a later welcome lists the observer")
		}
	}
	agent.Send(map[string]any{"id": "hello", "kind": "chat", "payload": map[string]any{"text": "hi"}})
	if m := watch.NextOf(); m.Str("id") != "hello" {
		t.Fatalf("the observer got %v", m)
	}
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("boss-t")})
	res := harness.MCPOK(t, cs, "pod_participants", map[string]any{})
	if ids := harness.IDsOf(res.Out["participants"]); slices.Contains(ids, "watch") {
		t.Fatalf("pod_participants lists the observer: %v", ids)
	}
	_ = watch.Conn.Close()
	harness.Sentinel(agent, "end", clerk)
	seen := []harness.Msg{clerk.Welcome}
	for m := clerk.Next(5 * time.Second); m != nil && m.Kind() != "test/sentinel"; m = clerk.Next(5 * time.Second) {
		seen = append(seen, m)
	}
	for _, m := range seen {
		if strings.Contains(string(harness.MustJSON(t, m)), `"watch"`) {
			t.Fatalf("clerk heard of the observer: %v", m)
		}
	}
}
