package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// mcpGateway starts a gateway with history on, whatever MCPP_TEST_HISTORY
// says: the MCP endpoint reads the pod's history.
func mcpGateway(t *testing.T, edit func(*gateway.Config)) *harness.Gateway {
	t.Helper()
	return harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		if edit != nil {
			edit(c)
		}
	})
}

// mcpVersions are the two kinds of MCP clients: the SDK's newest protocol
// (no sessions) and the last one with sessions.
var mcpVersions = []struct{ name, version string }{{"sessionless", ""}, {"sessions", harness.MCPSessions}}

// TestMCPTools: every tool of docs/protocol.md section 9 is listed with
// schemas for its arguments and its result, and works as the participant.
func TestMCPTools(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.Dial(t, "mcp-tools", "alice", "")
	bob := harness.MCPConnect(t, g.URL, "mcp-tools", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "bob", 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := bob.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		// proposal_wait returns the result of a server's tool, whatever
		// its shape: it has no schema of its own for it.
		if tool.InputSchema == nil || tool.OutputSchema == nil && tool.Name != "proposal_wait" || tool.Description == "" {
			t.Errorf("%s: input schema %v, output schema %v, description %q", tool.Name, tool.InputSchema != nil, tool.OutputSchema != nil, tool.Description)
		}
	}
	sort.Strings(names)
	want := []string{"context_branch", "context_return", "participant_kick", "pod_contexts", "pod_filter", "pod_history", "pod_participants",
		"pod_proposals", "pod_read", "pod_send", "proposal_approve", "proposal_wait"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// The session is a participant: in the others' lists and in its own.
	dave := g.Dial(t, "mcp-tools", "dave", "")
	if ids := welcomeIDs(dave.Welcome); !slices.Contains(ids, "bob") {
		t.Fatalf("dave's welcome lists %v, without bob", ids)
	}
	alice.AwaitPresence("join", "dave", 5*time.Second)
	r := harness.MCPOK(t, bob, "pod_participants", nil)
	if ids := harness.IDsOf(r.Out["participants"]); strings.Join(sorted(ids), ",") != "alice,bob,dave" {
		t.Fatalf("pod_participants: %v", r.Out)
	}

	// pod_read: nothing yet; then what alice sends, as soon as she sends it.
	if r := harness.MCPOK(t, bob, "pod_read", nil); len(r.Envelopes()) != 0 || r.Out["more"] != false {
		t.Fatalf("the first pod_read: %v, want nothing", r.Out)
	}
	var got harness.ToolResult
	var elapsed time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		got, err = harness.MCPCallErr(bob, "pod_read", map[string]any{"wait_ms": 20000})
		elapsed = time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	alice.Send(map[string]any{"id": "a1", "kind": "chat", "payload": map[string]any{"text": "hello bob"}})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Envelopes(); len(e) != 1 || e[0].Str("id") != "a1" || e[0].Str("from") != "alice" {
		t.Fatalf("pod_read with wait_ms: %v", got.Out)
	}
	if elapsed > 5*time.Second {
		t.Fatalf("pod_read with wait_ms returned after %v: it should return when the envelope arrives", elapsed)
	}
	dave.ExpectEnvelope("chat", "a1")

	// pod_send, addressed and correlated; alice and dave see it as bob's.
	r = harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"text": "hi alice"},
		"to": []string{"alice"}, "correlation_id": "a1"})
	sent := r.Str("id")
	m := alice.NextNonPresence(5 * time.Second)
	if m == nil || m.Str("id") != sent || m.Str("from") != "bob" || m.Str("correlation_id") != "a1" || !harness.JSONEqual(m["to"], []string{"alice"}) {
		t.Fatalf("alice got %v, want bob's envelope %s", m, sent)
	}
	dave.ExpectEnvelope("chat", sent) // routing=all: also what is addressed to others

	// pod_history: the pod's past, bob's own envelopes included.
	r = harness.MCPOK(t, bob, "pod_history", map[string]any{"limit": 10})
	if ids := envelopeIDs(r.Envelopes()); strings.Join(ids, ",") != "a1,"+sent {
		t.Fatalf("pod_history: %v", r.Out)
	}

	// pod_contexts: alice opens one.
	alice.Send(map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": "t1", "type": "reasoning"}})
	harness.Eventually(t, 5*time.Second, "the context in pod_contexts", func() bool {
		r := harness.MCPOK(t, bob, "pod_contexts", nil)
		list, _ := r.Out["contexts"].([]any)
		return len(list) == 1 && list[0].(map[string]any)["id"] == "t1" && list[0].(map[string]any)["creator"] == "alice"
	})

	// pod_filter: the main conversation only.
	r = harness.MCPOK(t, bob, "pod_filter", map[string]any{"contexts": "none"})
	if r.Out["contexts"] != "none" || r.Out["main"] != true {
		t.Fatalf("pod_filter: %v", r.Out)
	}
	harness.MCPOK(t, bob, "pod_read", nil) // past t1's first envelope
	alice.Send(map[string]any{"id": "in-t1", "kind": "reasoning/step", "context": "t1"})
	alice.Send(map[string]any{"id": "main-2", "kind": "chat"})
	if e := harness.MCPReadAll(t, bob, 1); len(e) != 1 || e[0].Str("id") != "main-2" {
		t.Fatalf("pod_read with contexts=none: %v", e)
	}
}

// TestMCPBothWays: a WebSocket participant and an MCP session talk both
// ways, with the SDK's newest protocol (no sessions) and with sessions.
func TestMCPBothWays(t *testing.T) {
	g := mcpGateway(t, nil)
	for _, v := range mcpVersions {
		t.Run(v.name, func(t *testing.T) {
			pod := "mcp-ways-" + v.name
			alice := g.Dial(t, pod, "alice", "")
			bob := harness.MCPConnect(t, g.URL, pod, "bob", harness.MCPOpts{Version: v.version})
			if v.version == "" && bob.ID() != "" {
				t.Fatalf("the newest protocol got session %q", bob.ID())
			}
			if v.version != "" && bob.ID() == "" {
				t.Fatal("no session id")
			}
			alice.AwaitPresence("join", "bob", 5*time.Second)
			for i := range 3 {
				alice.Send(map[string]any{"id": fmt.Sprintf("a%d", i), "kind": "chat", "payload": map[string]any{"n": i}})
				r := harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"n": i}})
				if m := alice.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != r.Str("id") || m.Str("from") != "bob" {
					t.Fatalf("alice got %v, want bob's %s", m, r.Str("id"))
				}
			}
			if ids := envelopeIDs(harness.MCPReadAll(t, bob, 3)); strings.Join(ids, ",") != "a0,a1,a2" {
				t.Fatalf("bob read %v", ids)
			}
		})
	}
}

// TestMCPBranchReturn: context_branch opens a sub-context that a
// WebSocket observer sees open; context_return concludes it, the observer
// gets the conclusion and the system/context event, and the return result
// carries the same stats.
func TestMCPBranchReturn(t *testing.T) {
	g := mcpGateway(t, nil)
	obs := g.Dial(t, "mcp-branch", "observer", "")
	bob := harness.MCPConnect(t, g.URL, "mcp-branch", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	obs.AwaitPresence("join", "bob", 5*time.Second)

	r := harness.MCPOK(t, bob, "context_branch", map[string]any{"description": "work out the answer"})
	c, _ := r.Out["context"].(map[string]any)
	id, _ := c["id"].(string)
	if len(id) != 36 || c["type"] != "reasoning" || c["depth"] != float64(1) || c["parent"] != nil {
		t.Fatalf("context_branch: %v", r.Out)
	}
	m := obs.NextNonPresence(5 * time.Second)
	if m == nil || m.Kind() != "context/branch" || m.ContextID() != id || m.Str("from") != "bob" || m.Payload()["description"] != "work out the answer" {
		t.Fatalf("the observer got %v, want the branch", m)
	}
	// A child of it is one deeper.
	r = harness.MCPOK(t, bob, "context_branch", map[string]any{"description": "a detail", "type": "detail", "parent": id})
	child, _ := r.Out["context"].(map[string]any)
	if child["depth"] != float64(2) || child["parent"] != id || child["type"] != "detail" {
		t.Fatalf("the child: %v", r.Out)
	}
	if m := obs.NextOf(); m.Kind() != "context/branch" || m.ContextID() != child["id"] {
		t.Fatalf("the observer got %v, want the child's branch", m)
	}

	for i := range 2 {
		harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": id}, "payload": map[string]any{"step": i}})
		if m := obs.NextNonPresence(5 * time.Second); m == nil || m.Kind() != "reasoning/step" || m.ContextID() != id {
			t.Fatalf("the observer got %v, want step %d", m, i)
		}
	}

	r = harness.MCPOK(t, bob, "context_return", map[string]any{"context": id, "summary": "the answer is 42"})
	stats, _ := r.Out["stats"].(map[string]any)
	if r.Str("context") != id || stats["messages"] != float64(4) || !harness.JSONEqual(stats["participants"], []string{"bob"}) || stats["depth"] != float64(1) {
		t.Fatalf("context_return: %v", r.Out)
	}
	m = obs.NextNonPresence(5 * time.Second)
	if m == nil || m.Kind() != "conclusion" || m.ContextID() != id || m.Payload()["summary"] != "the answer is 42" {
		t.Fatalf("the observer got %v, want the conclusion", m)
	}
	// The child concludes with its parent, after it.
	var events []harness.Msg
	for len(events) < 2 {
		m := obs.NextNonPresence(5 * time.Second)
		if m == nil {
			t.Fatalf("system/context events: %v", events)
		}
		events = append(events, m)
	}
	if events[0].Kind() != "system/context" || events[0].ContextID() != id || events[0].Payload()["reason"] != "conclusion" {
		t.Fatalf("the observer got %v, want the context's system/context", events[0])
	}
	if !harness.JSONEqual(events[0].Payload()["stats"], stats) {
		t.Fatalf("the event's stats %v differ from context_return's %v", events[0].Payload()["stats"], stats)
	}
	if events[1].ContextID() != child["id"] || events[1].Payload()["reason"] != "parent_concluded" {
		t.Fatalf("the child's event: %v", events[1])
	}

	r = harness.MCPOK(t, bob, "pod_contexts", map[string]any{"state": "concluded"})
	if list, _ := r.Out["contexts"].([]any); len(list) != 2 {
		t.Fatalf("pod_contexts concluded: %v", r.Out)
	}
	harness.MCPRefused(t, bob, "context_return", map[string]any{"context": id, "summary": "again"}, "invalid_context")
}

// TestMCPFoldedRead: pod_read folds a sub-context that concluded before
// it was read: only its conclusion and its system/context event.
func TestMCPFoldedRead(t *testing.T) {
	g := mcpGateway(t, nil)
	bob := harness.MCPConnect(t, g.URL, "mcp-fold", "bob", harness.MCPOpts{})
	harness.MCPOK(t, bob, "pod_read", nil)
	alice := g.Dial(t, "mcp-fold", "alice", "")
	obs := g.Dial(t, "mcp-fold", "obs", "")
	alice.Send(map[string]any{"id": "m1", "kind": "chat"})
	for i := range 3 {
		alice.Send(map[string]any{"id": fmt.Sprintf("step%d", i), "kind": "reasoning/step", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	}
	alice.Send(map[string]any{"id": "done", "kind": "conclusion", "context": "r1", "payload": map[string]any{"summary": "s"}})
	alice.Send(map[string]any{"id": "m2", "kind": "chat"})
	for m := obs.NextOf(); m.Str("id") != "m2"; m = obs.NextOf() {
	} // all of it is in the history now

	var got []string
	for !slices.Contains(got, "m2") {
		for _, m := range harness.MCPReadAll(t, bob, 1) {
			if m.Kind() == "system/context" {
				got = append(got, "event:"+m.ContextID())
			} else {
				got = append(got, m.Str("id"))
			}
		}
	}
	if strings.Join(got, ",") != "m1,done,event:r1,m2" {
		t.Fatalf("pod_read: %v, want m1, the conclusion, its event and m2", got)
	}
	// Unfolded, pod_history has the steps.
	r := harness.MCPOK(t, bob, "pod_history", map[string]any{"fold": false, "context": "r1"})
	if n := len(r.Envelopes()); n != 5 {
		t.Fatalf("pod_history unfolded in r1: %d envelopes, want 5", n)
	}
}

// TestMCPRefusals: bad input gets a refusal in the protocol's shape (isError,
// {"error", "message"}) or a clear protocol error, and nobody else is
// affected.
func TestMCPRefusals(t *testing.T) {
	g := mcpGateway(t, func(c *gateway.Config) {
		c.DefaultCapabilities = "chat,context/branch,conclusion,reasoning/*"
		c.MaxDepth = 2
	})
	alice := g.Dial(t, "mcp-bad", "alice", "")
	bob := harness.MCPConnect(t, g.URL, "mcp-bad", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "bob", 5*time.Second)
	alice.Send(map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": "alices", "type": "reasoning"}})
	harness.Eventually(t, 5*time.Second, "alice's context", func() bool {
		list, _ := harness.MCPOK(t, bob, "pod_contexts", nil).Out["contexts"].([]any)
		return len(list) == 1
	})

	harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": "system/welcome"}, "reserved_kind")
	r := harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": "mcp/request:tools/call"}, "capability_violation")
	if r.Out["attempted_kind"] != "mcp/request:tools/call" || r.Out["retryable"] != false {
		t.Fatalf("capability_violation's details: %v", r.Out)
	}
	harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": "chat", "context": map[string]any{"id": "a\u0001b"}}, "invalid_context")
	harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": "gateway/history"}, "unknown_request")
	harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": 42}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_send", map[string]any{"payload": "no kind"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_send", map[string]any{"kind": "chat", "to": "alice"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_read", map[string]any{"wait_ms": 999999}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_read", map[string]any{"limit": "ten"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_history", map[string]any{"before": "x", "after": "y"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_history", map[string]any{"before": "never-sent"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_contexts", map[string]any{"state": "sleeping"}, "invalid_envelope")
	harness.MCPRefused(t, bob, "pod_filter", map[string]any{"contexts": "some"}, "invalid_filter")
	harness.MCPRefused(t, bob, "pod_filter", map[string]any{"mian": true}, "invalid_filter")
	harness.MCPRefused(t, bob, "context_branch", map[string]any{}, "invalid_envelope")
	root := harness.MCPOK(t, bob, "context_branch", map[string]any{"description": "a root"}).Out["context"].(map[string]any)["id"]
	child := harness.MCPOK(t, bob, "context_branch", map[string]any{"description": "its child", "parent": root}).Out["context"].(map[string]any)["id"]
	harness.MCPRefused(t, bob, "context_branch", map[string]any{"description": "too deep", "parent": child}, "context_depth_exceeded")
	for _, id := range []any{root, child} {
		if m := alice.NextOf(); m.Kind() != "context/branch" || m.ContextID() != id {
			t.Fatalf("alice got %v, want the branch %v", m, id)
		}
	}
	harness.MCPRefused(t, bob, "context_return", map[string]any{"context": "never-opened", "summary": "s"}, "invalid_context")
	harness.MCPRefused(t, bob, "context_return", map[string]any{"context": "alices", "summary": "mine now"}, "auth_violation")
	if _, err := harness.MCPCallErr(bob, "pod_teleport", map[string]any{}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("an unknown tool: %v, want a protocol error naming it", err)
	}

	// Bob's session goes on, and alice saw only what was relayed.
	r = harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": "still here"})
	if m := alice.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != r.Str("id") {
		t.Fatalf("alice got %v, want bob's envelope after the refusals", m)
	}
	alice.ExpectNothing(200 * time.Millisecond)

	// The rate: every tool call takes a token of the participant's bucket.
	g2 := mcpGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 1, 3 })
	carol := harness.MCPConnect(t, g2.URL, "mcp-rate", "carol", harness.MCPOpts{Version: harness.MCPSessions})
	var limited harness.ToolResult
	for range 5 {
		if r := harness.MCPCall(t, carol, "pod_participants", nil); r.IsError {
			limited = r
			break
		}
	}
	if limited.Str("error") != "rate_limited" || limited.Out["retryable"] != true || limited.Out["retry_after_ms"].(float64) <= 0 {
		t.Fatalf("over the rate: %v", limited.Out)
	}
	time.Sleep(1100 * time.Millisecond)
	harness.MCPOK(t, carol, "pod_send", map[string]any{"kind": "chat"})
}

// TestMCPSessionTimeout: a participant idle past --mcp-session-timeout
// leaves (the others hear it), with or without sessions; one that keeps
// calling stays; a session that ended answers no more calls.
func TestMCPSessionTimeout(t *testing.T) {
	g := mcpGateway(t, func(c *gateway.Config) { c.MCPSessionTimeout = 700 * time.Millisecond })
	alice := g.Dial(t, "mcp-idle", "alice", "")
	for _, v := range mcpVersions {
		bob := harness.MCPConnect(t, g.URL, "mcp-idle", "bob-"+v.name, harness.MCPOpts{Version: v.version})
		for range 6 {
			time.Sleep(200 * time.Millisecond)
			harness.MCPOK(t, bob, "pod_read", nil)
		}
		idleFrom := time.Now()
		// One join, then one leave, the timeout after the last call.
		alice.AwaitPresence("join", "bob-"+v.name, 5*time.Second)
		alice.AwaitPresence("leave", "bob-"+v.name, 5*time.Second)
		if d := time.Since(idleFrom); d < 600*time.Millisecond {
			t.Fatalf("%s left %v after its last call, before the timeout", v.name, d)
		}
		if v.version != "" {
			if _, err := harness.MCPCallErr(bob, "pod_read", nil); err == nil {
				t.Fatalf("a call on a session that timed out succeeded")
			}
		}
	}
	// A session closed by its client (DELETE) leaves at once.
	carol := harness.MCPConnect(t, g.URL, "mcp-idle", "carol", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "carol", 5*time.Second)
	_ = carol.Close()
	if d := alice.AwaitPresence("leave", "carol", 5*time.Second); d > 500*time.Millisecond {
		t.Fatalf("carol left %v after closing her session", d)
	}
}

// TestMCPAuth: /mcp authenticates as /ws does.
func TestMCPAuth(t *testing.T) {
	file := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "bob-secret", "participant": "bob", "capabilities": ["chat"], "pods": ["mcp-lab"]},
  {"token": "eve-secret", "participant": "eve", "capabilities": ["*"], "pods": ["*"]}
]}`)
	g := mcpGateway(t, func(c *gateway.Config) { c.Tokens = file })
	lab := g.URL + "/mcp?pod=mcp-lab"
	for _, c := range []struct {
		url    string
		header http.Header
		status int
		code   string
	}{
		{lab, nil, http.StatusUnauthorized, "unauthorized"},
		{lab, harness.Bearer("wrong"), http.StatusUnauthorized, "unauthorized"},
		{g.URL + "/mcp?pod=elsewhere", harness.Bearer("bob-secret"), http.StatusForbidden, "forbidden"},
		{g.URL + "/mcp?pod=bad%20name", harness.Bearer("bob-secret"), http.StatusBadRequest, "invalid_pod"},
		{lab + "&contexts=sometimes", harness.Bearer("bob-secret"), http.StatusBadRequest, "invalid_filter"},
		{lab, http.Header{"Authorization": {"Bearer bob-secret"}, "Origin": {"https://evil.example"}}, http.StatusForbidden, "forbidden"},
	} {
		if status, code := harness.MCPPost(t, c.url, c.header, harness.MCPInitialize); status != c.status || code != c.code {
			t.Errorf("%s with %v: %d %s, want %d %s", c.url, c.header, status, code, c.status, c.code)
		}
	}
	// The token names the participant, whatever ?participant= says; its
	// capabilities apply.
	bob := harness.MCPConnect(t, g.URL, "mcp-lab", "mallory", harness.MCPOpts{Header: harness.Bearer("bob-secret"), Version: harness.MCPSessions})
	r := harness.MCPOK(t, bob, "pod_participants", nil)
	if ids := harness.IDsOf(r.Out["participants"]); strings.Join(ids, ",") != "bob" {
		t.Fatalf("pod_participants: %v", r.Out)
	}
	harness.MCPRefused(t, bob, "context_branch", map[string]any{"description": "x"}, "capability_violation")

	// Open mode: ?participant= is required (an id made up per request
	// would make every request someone else).
	open := mcpGateway(t, nil)
	if status, code := harness.MCPPost(t, open.URL+"/mcp?pod=p", nil, harness.MCPInitialize); status != http.StatusBadRequest || code != "invalid_participant" {
		t.Fatalf("open mode without ?participant=: %d %s", status, code)
	}
}

// TestMCPSessionOfAnother: an MCP session is its creator's: a request
// that authenticates as someone else, or in another pod, is refused, and
// the session goes on.
func TestMCPSessionOfAnother(t *testing.T) {
	file := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "bob-secret", "participant": "bob", "capabilities": ["*"], "pods": ["*"]},
  {"token": "eve-secret", "participant": "eve", "capabilities": ["*"], "pods": ["*"]}
]}`)
	g := mcpGateway(t, func(c *gateway.Config) { c.Tokens = file })
	bob := harness.MCPConnect(t, g.URL, "mcp-own", "", harness.MCPOpts{Header: harness.Bearer("bob-secret"), Version: harness.MCPSessions})
	sid := bob.ID()
	list := `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pod_send", "arguments": {"kind": "chat"}}}`
	for _, c := range []struct {
		url   string
		token string
	}{
		{g.URL + "/mcp?pod=mcp-own", "eve-secret"},
		{g.URL + "/mcp?pod=mcp-other", "bob-secret"},
	} {
		h := harness.Bearer(c.token)
		h.Set("Mcp-Session-Id", sid)
		if status, code := harness.MCPPost(t, c.url, h, list); status != http.StatusForbidden || code != "forbidden" {
			t.Fatalf("bob's session with %s at %s: %d %s, want 403 forbidden", c.token, c.url, status, code)
		}
	}
	// A session id nobody has is the SDK's 404: start a new session.
	h := harness.Bearer("eve-secret")
	h.Set("Mcp-Session-Id", "no-such-session")
	if status, _ := harness.MCPPost(t, g.URL+"/mcp?pod=mcp-own", h, list); status != http.StatusNotFound {
		t.Fatalf("an unknown session: %d, want 404", status)
	}
	harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "chat"})
	// The history has it once the pod's stream has given it back.
	var r harness.ToolResult
	harness.Eventually(t, 5*time.Second, "bob's envelope in the history", func() bool {
		r = harness.MCPOK(t, bob, "pod_history", nil)
		return len(r.Envelopes()) > 0
	})
	if e := r.Envelopes(); len(e) != 1 || e[0].Str("from") != "bob" {
		t.Fatalf("only bob's own envelope went out: %v", r.Out)
	}
}

// TestMCPReplacement: the MCP session and a WebSocket connection of one
// participant replace each other as two connections do, and nobody is
// told.
func TestMCPReplacement(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.Dial(t, "mcp-repl", "alice", "")
	bob := harness.MCPConnect(t, g.URL, "mcp-repl", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "bob", 5*time.Second)
	ws := g.Dial(t, "mcp-repl", "bob", "")
	harness.Eventually(t, 5*time.Second, "the replaced session to end", func() bool {
		_, err := harness.MCPCallErr(bob, "pod_participants", nil)
		return err != nil
	})
	bob2 := harness.MCPConnect(t, g.URL, "mcp-repl", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	if code := ws.WaitClosed(5 * time.Second); code != wire.CloseReplaced {
		t.Fatalf("bob's connection closed with %d, want 4000", code)
	}
	harness.MCPOK(t, bob2, "pod_send", map[string]any{"kind": "chat"})
	if m := alice.Expect(); m.Kind() != "chat" {
		t.Fatalf("alice got %v: a replacement is no presence change", m)
	}
}

// TestMCPWithoutHistory: /mcp reads the history, so without it it
// answers 503.
func TestMCPWithoutHistory(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 0 })
	if status, code := harness.MCPPost(t, g.URL+"/mcp?pod=p&participant=bob", nil, harness.MCPInitialize); status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("/mcp without history: %d %s, want 503 over_capacity", status, code)
	}
	if _, err := harness.MCPDial(g.URL, "p", "bob", harness.MCPOpts{}); err == nil {
		t.Fatal("the SDK's client connected to a gateway without history")
	}
}

// TestMCPCluster: an MCP session on node 2 reads what a WebSocket
// participant on node 1 sent, and the other way round.
func TestMCPCluster(t *testing.T) {
	nodes := startCluster(t, 2, "--history", "1000")
	n1, n2 := nodes[0].GW, nodes[1].GW
	base2 := strings.TrimSuffix(strings.Replace(n2.WS, "ws://", "http://", 1), "/ws")
	alice := n1.Dial(t, "mcp-cluster", "alice", "")
	bob := harness.MCPConnect(t, base2, "mcp-cluster", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "bob", 5*time.Second)
	r := harness.MCPOK(t, bob, "pod_participants", nil)
	if ids := harness.IDsOf(r.Out["participants"]); strings.Join(sorted(ids), ",") != "alice,bob" {
		t.Fatalf("pod_participants on node 2: %v", r.Out)
	}

	for i := range 3 {
		alice.Send(map[string]any{"id": fmt.Sprintf("n1-%d", i), "kind": "chat"})
	}
	if ids := envelopeIDs(harness.MCPReadAll(t, bob, 3)); strings.Join(ids, ",") != "n1-0,n1-1,n1-2" {
		t.Fatalf("bob on node 2 read %v", ids)
	}
	r = harness.MCPOK(t, bob, "pod_send", map[string]any{"kind": "chat"})
	if m := alice.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != r.Str("id") {
		t.Fatalf("alice on node 1 got %v, want bob's %s", m, r.Str("id"))
	}
}

// TestMCPClusterMembers: a node asked for its members of a pod answers
// with its MCP participants too, so that the first welcome on another
// node lists them.
func TestMCPClusterMembers(t *testing.T) {
	nodes := startCluster(t, 2, "--history", "1000")
	n1, n2 := nodes[0].GW, nodes[1].GW
	base2 := strings.TrimSuffix(strings.Replace(n2.WS, "ws://", "http://", 1), "/ws")
	bob := harness.MCPConnect(t, base2, "mcp-cluster-members", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	harness.MCPOK(t, bob, "pod_participants", nil)
	// The pod opens on node 1 with this join: node 2 tells it of bob.
	alice := n1.Dial(t, "mcp-cluster-members", "alice", "")
	if ids := welcomeIDs(alice.Welcome); strings.Join(ids, ",") != "bob" {
		t.Fatalf("alice's welcome on node 1 lists %v, want bob (an MCP participant on node 2)", ids)
	}
}

// TestMCPShutdown: MCP participants leave as the gateway begins to drain,
// so that the WebSocket participants hear of it before their own
// connections close with 1001.
func TestMCPShutdown(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.Dial(t, "mcp-shutdown", "alice", "")
	bob := harness.MCPConnect(t, g.URL, "mcp-shutdown", "bob", harness.MCPOpts{Version: harness.MCPSessions})
	alice.AwaitPresence("join", "bob", 5*time.Second)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	alice.AwaitPresence("leave", "bob", 5*time.Second)
	if code := alice.WaitClosed(10 * time.Second); code != wire.CloseGoingAway {
		t.Fatalf("alice's connection closed with %v, want 1001", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := harness.MCPCallErr(bob, "pod_read", nil); err == nil {
		t.Fatal("bob's session still answers after the shutdown")
	}
}

func envelopeIDs(ms []harness.Msg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Str("id")
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
