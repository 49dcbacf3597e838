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

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
)

// mcpGateway starts a gateway with history on, whatever MCPP_TEST_HISTORY
// says: the MCP endpoint reads the pod's history.
func mcpGateway(t *testing.T, edit func(*gateway.Config)) *testGateway {
	t.Helper()
	return startGateway(t, func(c *gateway.Config) {
		c.History = 1000
		if edit != nil {
			edit(c)
		}
	})
}

// mcpVersions are the two kinds of MCP clients: the SDK's newest protocol
// (no sessions) and the last one with sessions.
var mcpVersions = []struct{ name, version string }{{"sessionless", ""}, {"sessions", mcpSessions}}

// TestMCPTools: every tool of docs/protocol.md section 9 is listed with
// schemas for its arguments and its result, and works as the participant.
func TestMCPTools(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.dial(t, "mcp-tools", "alice", "")
	bob := mcpConnect(t, g.URL, "mcp-tools", "bob", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "bob", 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := bob.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("%s: input schema %v, output schema %v, description %q", tool.Name, tool.InputSchema != nil, tool.OutputSchema != nil, tool.Description)
		}
	}
	sort.Strings(names)
	want := []string{"context_branch", "context_return", "pod_contexts", "pod_filter", "pod_history", "pod_participants", "pod_read", "pod_send"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// The session is a participant: in the others' lists and in its own.
	dave := g.dial(t, "mcp-tools", "dave", "")
	if ids := welcomeIDs(dave.Welcome); !slices.Contains(ids, "bob") {
		t.Fatalf("dave's welcome lists %v, without bob", ids)
	}
	alice.expectPresence("join", "dave", 5*time.Second)
	r := mcpOK(t, bob, "pod_participants", nil)
	if ids := idsOf(r.Out["participants"]); strings.Join(sorted(ids), ",") != "alice,bob,dave" {
		t.Fatalf("pod_participants: %v", r.Out)
	}

	// pod_read: nothing yet; then what alice sends, as soon as she sends it.
	if r := mcpOK(t, bob, "pod_read", nil); len(r.envelopes()) != 0 || r.Out["more"] != false {
		t.Fatalf("the first pod_read: %v, want nothing", r.Out)
	}
	var got toolResult
	var elapsed time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		got, err = mcpCallErr(bob, "pod_read", map[string]any{"wait_ms": 20000})
		elapsed = time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	alice.send(map[string]any{"id": "a1", "kind": "chat", "payload": map[string]any{"text": "hello bob"}})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if e := got.envelopes(); len(e) != 1 || e[0].str("id") != "a1" || e[0].str("from") != "alice" {
		t.Fatalf("pod_read with wait_ms: %v", got.Out)
	}
	if elapsed > 5*time.Second {
		t.Fatalf("pod_read with wait_ms returned after %v: it should return when the envelope arrives", elapsed)
	}
	dave.expectEnvelope("chat", "a1")

	// pod_send, addressed and correlated; alice and dave see it as bob's.
	r = mcpOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"text": "hi alice"},
		"to": []string{"alice"}, "correlation_id": "a1"})
	sent := r.str("id")
	m := alice.nextNonPresence(5 * time.Second)
	if m == nil || m.str("id") != sent || m.str("from") != "bob" || m.str("correlation_id") != "a1" || !jsonEqual(m["to"], []string{"alice"}) {
		t.Fatalf("alice got %v, want bob's envelope %s", m, sent)
	}
	dave.expectEnvelope("chat", sent) // routing=all: also what is addressed to others

	// pod_history: the pod's past, bob's own envelopes included.
	r = mcpOK(t, bob, "pod_history", map[string]any{"limit": 10})
	if ids := envelopeIDs(r.envelopes()); strings.Join(ids, ",") != "a1,"+sent {
		t.Fatalf("pod_history: %v", r.Out)
	}

	// pod_contexts: alice opens one.
	alice.send(map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": "t1", "type": "reasoning"}})
	eventually(t, 5*time.Second, "the context in pod_contexts", func() bool {
		r := mcpOK(t, bob, "pod_contexts", nil)
		list, _ := r.Out["contexts"].([]any)
		return len(list) == 1 && list[0].(map[string]any)["id"] == "t1" && list[0].(map[string]any)["creator"] == "alice"
	})

	// pod_filter: the main conversation only.
	r = mcpOK(t, bob, "pod_filter", map[string]any{"contexts": "none"})
	if r.Out["contexts"] != "none" || r.Out["main"] != true {
		t.Fatalf("pod_filter: %v", r.Out)
	}
	mcpOK(t, bob, "pod_read", nil) // past t1's first envelope
	alice.send(map[string]any{"id": "in-t1", "kind": "reasoning/step", "context": "t1"})
	alice.send(map[string]any{"id": "main-2", "kind": "chat"})
	if e := mcpReadAll(t, bob, 1); len(e) != 1 || e[0].str("id") != "main-2" {
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
			alice := g.dial(t, pod, "alice", "")
			bob := mcpConnect(t, g.URL, pod, "bob", mcpOpts{version: v.version})
			if v.version == "" && bob.ID() != "" {
				t.Fatalf("the newest protocol got session %q", bob.ID())
			}
			if v.version != "" && bob.ID() == "" {
				t.Fatal("no session id")
			}
			alice.expectPresence("join", "bob", 5*time.Second)
			for i := range 3 {
				alice.send(map[string]any{"id": fmt.Sprintf("a%d", i), "kind": "chat", "payload": map[string]any{"n": i}})
				r := mcpOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"n": i}})
				if m := alice.nextNonPresence(5 * time.Second); m == nil || m.str("id") != r.str("id") || m.str("from") != "bob" {
					t.Fatalf("alice got %v, want bob's %s", m, r.str("id"))
				}
			}
			if ids := envelopeIDs(mcpReadAll(t, bob, 3)); strings.Join(ids, ",") != "a0,a1,a2" {
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
	obs := g.dial(t, "mcp-branch", "observer", "")
	bob := mcpConnect(t, g.URL, "mcp-branch", "bob", mcpOpts{version: mcpSessions})
	obs.expectPresence("join", "bob", 5*time.Second)

	r := mcpOK(t, bob, "context_branch", map[string]any{"description": "work out the answer"})
	c, _ := r.Out["context"].(map[string]any)
	id, _ := c["id"].(string)
	if len(id) != 36 || c["type"] != "reasoning" || c["depth"] != float64(1) || c["parent"] != nil {
		t.Fatalf("context_branch: %v", r.Out)
	}
	m := obs.nextNonPresence(5 * time.Second)
	if m == nil || m.kind() != "context/branch" || m.contextID() != id || m.str("from") != "bob" || m.payload()["description"] != "work out the answer" {
		t.Fatalf("the observer got %v, want the branch", m)
	}
	// A child of it is one deeper.
	r = mcpOK(t, bob, "context_branch", map[string]any{"description": "a detail", "type": "detail", "parent": id})
	child, _ := r.Out["context"].(map[string]any)
	if child["depth"] != float64(2) || child["parent"] != id || child["type"] != "detail" {
		t.Fatalf("the child: %v", r.Out)
	}
	if m := obs.nextOf(); m.kind() != "context/branch" || m.contextID() != child["id"] {
		t.Fatalf("the observer got %v, want the child's branch", m)
	}

	for i := range 2 {
		mcpOK(t, bob, "pod_send", map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": id}, "payload": map[string]any{"step": i}})
		if m := obs.nextNonPresence(5 * time.Second); m == nil || m.kind() != "reasoning/step" || m.contextID() != id {
			t.Fatalf("the observer got %v, want step %d", m, i)
		}
	}

	r = mcpOK(t, bob, "context_return", map[string]any{"context": id, "summary": "the answer is 42"})
	stats, _ := r.Out["stats"].(map[string]any)
	if r.str("context") != id || stats["messages"] != float64(4) || !jsonEqual(stats["participants"], []string{"bob"}) || stats["depth"] != float64(1) {
		t.Fatalf("context_return: %v", r.Out)
	}
	m = obs.nextNonPresence(5 * time.Second)
	if m == nil || m.kind() != "conclusion" || m.contextID() != id || m.payload()["summary"] != "the answer is 42" {
		t.Fatalf("the observer got %v, want the conclusion", m)
	}
	// The child concludes with its parent, after it.
	var events []msg
	for len(events) < 2 {
		m := obs.nextNonPresence(5 * time.Second)
		if m == nil {
			t.Fatalf("system/context events: %v", events)
		}
		events = append(events, m)
	}
	if events[0].kind() != "system/context" || events[0].contextID() != id || events[0].payload()["reason"] != "conclusion" {
		t.Fatalf("the observer got %v, want the context's system/context", events[0])
	}
	if !jsonEqual(events[0].payload()["stats"], stats) {
		t.Fatalf("the event's stats %v differ from context_return's %v", events[0].payload()["stats"], stats)
	}
	if events[1].contextID() != child["id"] || events[1].payload()["reason"] != "parent_concluded" {
		t.Fatalf("the child's event: %v", events[1])
	}

	r = mcpOK(t, bob, "pod_contexts", map[string]any{"state": "concluded"})
	if list, _ := r.Out["contexts"].([]any); len(list) != 2 {
		t.Fatalf("pod_contexts concluded: %v", r.Out)
	}
	mcpRefused(t, bob, "context_return", map[string]any{"context": id, "summary": "again"}, "invalid_context")
}

// TestMCPFoldedRead: pod_read folds a sub-context that concluded before
// it was read: only its conclusion and its system/context event.
func TestMCPFoldedRead(t *testing.T) {
	g := mcpGateway(t, nil)
	bob := mcpConnect(t, g.URL, "mcp-fold", "bob", mcpOpts{})
	mcpOK(t, bob, "pod_read", nil)
	alice := g.dial(t, "mcp-fold", "alice", "")
	obs := g.dial(t, "mcp-fold", "obs", "")
	alice.send(map[string]any{"id": "m1", "kind": "chat"})
	for i := range 3 {
		alice.send(map[string]any{"id": fmt.Sprintf("step%d", i), "kind": "reasoning/step", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	}
	alice.send(map[string]any{"id": "done", "kind": "conclusion", "context": "r1", "payload": map[string]any{"summary": "s"}})
	alice.send(map[string]any{"id": "m2", "kind": "chat"})
	for m := obs.nextOf(); m.str("id") != "m2"; m = obs.nextOf() {
	} // all of it is in the history now

	var got []string
	for !slices.Contains(got, "m2") {
		for _, m := range mcpReadAll(t, bob, 1) {
			if m.kind() == "system/context" {
				got = append(got, "event:"+m.contextID())
			} else {
				got = append(got, m.str("id"))
			}
		}
	}
	if strings.Join(got, ",") != "m1,done,event:r1,m2" {
		t.Fatalf("pod_read: %v, want m1, the conclusion, its event and m2", got)
	}
	// Unfolded, pod_history has the steps.
	r := mcpOK(t, bob, "pod_history", map[string]any{"fold": false, "context": "r1"})
	if n := len(r.envelopes()); n != 5 {
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
	alice := g.dial(t, "mcp-bad", "alice", "")
	bob := mcpConnect(t, g.URL, "mcp-bad", "bob", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "bob", 5*time.Second)
	alice.send(map[string]any{"kind": "reasoning/step", "context": map[string]any{"id": "alices", "type": "reasoning"}})
	eventually(t, 5*time.Second, "alice's context", func() bool {
		list, _ := mcpOK(t, bob, "pod_contexts", nil).Out["contexts"].([]any)
		return len(list) == 1
	})

	mcpRefused(t, bob, "pod_send", map[string]any{"kind": "system/welcome"}, "reserved_kind")
	r := mcpRefused(t, bob, "pod_send", map[string]any{"kind": "mcp/request:tools/call"}, "capability_violation")
	if r.Out["attempted_kind"] != "mcp/request:tools/call" || r.Out["retryable"] != false {
		t.Fatalf("capability_violation's details: %v", r.Out)
	}
	mcpRefused(t, bob, "pod_send", map[string]any{"kind": "chat", "context": map[string]any{"id": "a\u0001b"}}, "invalid_context")
	mcpRefused(t, bob, "pod_send", map[string]any{"kind": "gateway/history"}, "unknown_request")
	mcpRefused(t, bob, "pod_send", map[string]any{"kind": 42}, "invalid_envelope")
	mcpRefused(t, bob, "pod_send", map[string]any{"payload": "no kind"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_send", map[string]any{"kind": "chat", "to": "alice"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_read", map[string]any{"wait_ms": 999999}, "invalid_envelope")
	mcpRefused(t, bob, "pod_read", map[string]any{"limit": "ten"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_history", map[string]any{"before": "x", "after": "y"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_history", map[string]any{"before": "never-sent"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_contexts", map[string]any{"state": "sleeping"}, "invalid_envelope")
	mcpRefused(t, bob, "pod_filter", map[string]any{"contexts": "some"}, "invalid_filter")
	mcpRefused(t, bob, "pod_filter", map[string]any{"mian": true}, "invalid_filter")
	mcpRefused(t, bob, "context_branch", map[string]any{}, "invalid_envelope")
	root := mcpOK(t, bob, "context_branch", map[string]any{"description": "a root"}).Out["context"].(map[string]any)["id"]
	child := mcpOK(t, bob, "context_branch", map[string]any{"description": "its child", "parent": root}).Out["context"].(map[string]any)["id"]
	mcpRefused(t, bob, "context_branch", map[string]any{"description": "too deep", "parent": child}, "context_depth_exceeded")
	for _, id := range []any{root, child} {
		if m := alice.nextOf(); m.kind() != "context/branch" || m.contextID() != id {
			t.Fatalf("alice got %v, want the branch %v", m, id)
		}
	}
	mcpRefused(t, bob, "context_return", map[string]any{"context": "never-opened", "summary": "s"}, "invalid_context")
	mcpRefused(t, bob, "context_return", map[string]any{"context": "alices", "summary": "mine now"}, "auth_violation")
	if _, err := mcpCallErr(bob, "pod_teleport", map[string]any{}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("an unknown tool: %v, want a protocol error naming it", err)
	}

	// Bob's session goes on, and alice saw only what was relayed.
	r = mcpOK(t, bob, "pod_send", map[string]any{"kind": "chat", "payload": "still here"})
	if m := alice.nextNonPresence(5 * time.Second); m == nil || m.str("id") != r.str("id") {
		t.Fatalf("alice got %v, want bob's envelope after the refusals", m)
	}
	alice.expectNothing(200 * time.Millisecond)

	// The rate: every tool call takes a token of the participant's bucket.
	g2 := mcpGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 1, 3 })
	carol := mcpConnect(t, g2.URL, "mcp-rate", "carol", mcpOpts{version: mcpSessions})
	var limited toolResult
	for range 5 {
		if r := mcpCall(t, carol, "pod_participants", nil); r.IsError {
			limited = r
			break
		}
	}
	if limited.str("error") != "rate_limited" || limited.Out["retryable"] != true || limited.Out["retry_after_ms"].(float64) <= 0 {
		t.Fatalf("over the rate: %v", limited.Out)
	}
	time.Sleep(1100 * time.Millisecond)
	mcpOK(t, carol, "pod_send", map[string]any{"kind": "chat"})
}

// TestMCPSessionTimeout: a participant idle past --mcp-session-timeout
// leaves (the others hear it), with or without sessions; one that keeps
// calling stays; a session that ended answers no more calls.
func TestMCPSessionTimeout(t *testing.T) {
	g := mcpGateway(t, func(c *gateway.Config) { c.MCPSessionTimeout = 700 * time.Millisecond })
	alice := g.dial(t, "mcp-idle", "alice", "")
	for _, v := range mcpVersions {
		bob := mcpConnect(t, g.URL, "mcp-idle", "bob-"+v.name, mcpOpts{version: v.version})
		for range 6 {
			time.Sleep(200 * time.Millisecond)
			mcpOK(t, bob, "pod_read", nil)
		}
		idleFrom := time.Now()
		// One join, then one leave, the timeout after the last call.
		alice.expectPresence("join", "bob-"+v.name, 5*time.Second)
		alice.expectPresence("leave", "bob-"+v.name, 5*time.Second)
		if d := time.Since(idleFrom); d < 600*time.Millisecond {
			t.Fatalf("%s left %v after its last call, before the timeout", v.name, d)
		}
		if v.version != "" {
			if _, err := mcpCallErr(bob, "pod_read", nil); err == nil {
				t.Fatalf("a call on a session that timed out succeeded")
			}
		}
	}
	// A session closed by its client (DELETE) leaves at once.
	carol := mcpConnect(t, g.URL, "mcp-idle", "carol", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "carol", 5*time.Second)
	_ = carol.Close()
	if d := alice.expectPresence("leave", "carol", 5*time.Second); d > 500*time.Millisecond {
		t.Fatalf("carol left %v after closing her session", d)
	}
}

// TestMCPAuth: /mcp authenticates as /ws does.
func TestMCPAuth(t *testing.T) {
	file := writeFile(t, "tokens.json", `{"tokens": [
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
		{lab, bearer("wrong"), http.StatusUnauthorized, "unauthorized"},
		{g.URL + "/mcp?pod=elsewhere", bearer("bob-secret"), http.StatusForbidden, "forbidden"},
		{g.URL + "/mcp?pod=bad%20name", bearer("bob-secret"), http.StatusBadRequest, "invalid_pod"},
		{lab + "&contexts=sometimes", bearer("bob-secret"), http.StatusBadRequest, "invalid_filter"},
		{lab, http.Header{"Authorization": {"Bearer bob-secret"}, "Origin": {"https://evil.example"}}, http.StatusForbidden, "forbidden"},
	} {
		if status, code := mcpPost(t, c.url, c.header, mcpInitialize); status != c.status || code != c.code {
			t.Errorf("%s with %v: %d %s, want %d %s", c.url, c.header, status, code, c.status, c.code)
		}
	}
	// The token names the participant, whatever ?participant= says; its
	// capabilities apply.
	bob := mcpConnect(t, g.URL, "mcp-lab", "mallory", mcpOpts{header: bearer("bob-secret"), version: mcpSessions})
	r := mcpOK(t, bob, "pod_participants", nil)
	if ids := idsOf(r.Out["participants"]); strings.Join(ids, ",") != "bob" {
		t.Fatalf("pod_participants: %v", r.Out)
	}
	mcpRefused(t, bob, "context_branch", map[string]any{"description": "x"}, "capability_violation")

	// Open mode: ?participant= is required (an id made up per request
	// would make every request someone else).
	open := mcpGateway(t, nil)
	if status, code := mcpPost(t, open.URL+"/mcp?pod=p", nil, mcpInitialize); status != http.StatusBadRequest || code != "invalid_participant" {
		t.Fatalf("open mode without ?participant=: %d %s", status, code)
	}
}

// TestMCPSessionOfAnother: an MCP session is its creator's: a request
// that authenticates as someone else, or in another pod, is refused, and
// the session goes on.
func TestMCPSessionOfAnother(t *testing.T) {
	file := writeFile(t, "tokens.json", `{"tokens": [
  {"token": "bob-secret", "participant": "bob", "capabilities": ["*"], "pods": ["*"]},
  {"token": "eve-secret", "participant": "eve", "capabilities": ["*"], "pods": ["*"]}
]}`)
	g := mcpGateway(t, func(c *gateway.Config) { c.Tokens = file })
	bob := mcpConnect(t, g.URL, "mcp-own", "", mcpOpts{header: bearer("bob-secret"), version: mcpSessions})
	sid := bob.ID()
	list := `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pod_send", "arguments": {"kind": "chat"}}}`
	for _, c := range []struct {
		url   string
		token string
	}{
		{g.URL + "/mcp?pod=mcp-own", "eve-secret"},
		{g.URL + "/mcp?pod=mcp-other", "bob-secret"},
	} {
		h := bearer(c.token)
		h.Set("Mcp-Session-Id", sid)
		if status, code := mcpPost(t, c.url, h, list); status != http.StatusForbidden || code != "forbidden" {
			t.Fatalf("bob's session with %s at %s: %d %s, want 403 forbidden", c.token, c.url, status, code)
		}
	}
	// A session id nobody has is the SDK's 404: start a new session.
	h := bearer("eve-secret")
	h.Set("Mcp-Session-Id", "no-such-session")
	if status, _ := mcpPost(t, g.URL+"/mcp?pod=mcp-own", h, list); status != http.StatusNotFound {
		t.Fatalf("an unknown session: %d, want 404", status)
	}
	mcpOK(t, bob, "pod_send", map[string]any{"kind": "chat"})
	// The history has it once the pod's stream has given it back.
	var r toolResult
	eventually(t, 5*time.Second, "bob's envelope in the history", func() bool {
		r = mcpOK(t, bob, "pod_history", nil)
		return len(r.envelopes()) > 0
	})
	if e := r.envelopes(); len(e) != 1 || e[0].str("from") != "bob" {
		t.Fatalf("only bob's own envelope went out: %v", r.Out)
	}
}

// TestMCPReplacement: the MCP session and a WebSocket connection of one
// participant replace each other as two connections do, and nobody is
// told.
func TestMCPReplacement(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.dial(t, "mcp-repl", "alice", "")
	bob := mcpConnect(t, g.URL, "mcp-repl", "bob", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "bob", 5*time.Second)
	ws := g.dial(t, "mcp-repl", "bob", "")
	eventually(t, 5*time.Second, "the replaced session to end", func() bool {
		_, err := mcpCallErr(bob, "pod_participants", nil)
		return err != nil
	})
	bob2 := mcpConnect(t, g.URL, "mcp-repl", "bob", mcpOpts{version: mcpSessions})
	if code := ws.waitClosed(5 * time.Second); code != websocket.StatusCode(4000) {
		t.Fatalf("bob's connection closed with %d, want 4000", code)
	}
	mcpOK(t, bob2, "pod_send", map[string]any{"kind": "chat"})
	if m := alice.expect(); m.kind() != "chat" {
		t.Fatalf("alice got %v: a replacement is no presence change", m)
	}
}

// TestMCPWithoutHistory: /mcp reads the history, so without it it
// answers 503.
func TestMCPWithoutHistory(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.History = 0 })
	if status, code := mcpPost(t, g.URL+"/mcp?pod=p&participant=bob", nil, mcpInitialize); status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("/mcp without history: %d %s, want 503 over_capacity", status, code)
	}
	if _, err := mcpDial(g.URL, "p", "bob", mcpOpts{}); err == nil {
		t.Fatal("the SDK's client connected to a gateway without history")
	}
}

// TestMCPCluster: an MCP session on node 2 reads what a WebSocket
// participant on node 1 sent, and the other way round.
func TestMCPCluster(t *testing.T) {
	nodes := startCluster(t, 2, "--history", "1000")
	n1, n2 := nodes[0].gw, nodes[1].gw
	base2 := strings.TrimSuffix(strings.Replace(n2.WS, "ws://", "http://", 1), "/ws")
	alice := n1.dial(t, "mcp-cluster", "alice", "")
	bob := mcpConnect(t, base2, "mcp-cluster", "bob", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "bob", 5*time.Second)
	r := mcpOK(t, bob, "pod_participants", nil)
	if ids := idsOf(r.Out["participants"]); strings.Join(sorted(ids), ",") != "alice,bob" {
		t.Fatalf("pod_participants on node 2: %v", r.Out)
	}

	for i := range 3 {
		alice.send(map[string]any{"id": fmt.Sprintf("n1-%d", i), "kind": "chat"})
	}
	if ids := envelopeIDs(mcpReadAll(t, bob, 3)); strings.Join(ids, ",") != "n1-0,n1-1,n1-2" {
		t.Fatalf("bob on node 2 read %v", ids)
	}
	r = mcpOK(t, bob, "pod_send", map[string]any{"kind": "chat"})
	if m := alice.nextNonPresence(5 * time.Second); m == nil || m.str("id") != r.str("id") {
		t.Fatalf("alice on node 1 got %v, want bob's %s", m, r.str("id"))
	}
}

// TestMCPClusterMembers: a node asked for its members of a pod answers
// with its MCP participants too, so that the first welcome on another
// node lists them.
func TestMCPClusterMembers(t *testing.T) {
	nodes := startCluster(t, 2, "--history", "1000")
	n1, n2 := nodes[0].gw, nodes[1].gw
	base2 := strings.TrimSuffix(strings.Replace(n2.WS, "ws://", "http://", 1), "/ws")
	bob := mcpConnect(t, base2, "mcp-cluster-members", "bob", mcpOpts{version: mcpSessions})
	mcpOK(t, bob, "pod_participants", nil)
	// The pod opens on node 1 with this join: node 2 tells it of bob.
	alice := n1.dial(t, "mcp-cluster-members", "alice", "")
	if ids := welcomeIDs(alice.Welcome); strings.Join(ids, ",") != "bob" {
		t.Fatalf("alice's welcome on node 1 lists %v, want bob (an MCP participant on node 2)", ids)
	}
}

// TestMCPShutdown: MCP participants leave as the gateway begins to drain,
// so that the WebSocket participants hear of it before their own
// connections close with 1001.
func TestMCPShutdown(t *testing.T) {
	g := mcpGateway(t, nil)
	alice := g.dial(t, "mcp-shutdown", "alice", "")
	bob := mcpConnect(t, g.URL, "mcp-shutdown", "bob", mcpOpts{version: mcpSessions})
	alice.expectPresence("join", "bob", 5*time.Second)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	alice.expectPresence("leave", "bob", 5*time.Second)
	if code := alice.waitClosed(10 * time.Second); code != websocket.StatusGoingAway {
		t.Fatalf("alice's connection closed with %v, want 1001", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := mcpCallErr(bob, "pod_read", nil); err == nil {
		t.Fatal("bob's session still answers after the shutdown")
	}
}

func envelopeIDs(ms []msg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.str("id")
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
