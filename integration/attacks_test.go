package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 31: capabilities tried as an attacker would, from outside, on
// every path. Each test was first seen failing on the gateway before the
// issue (RELIABILITY.md lists the attacks).

// attackTokens: admin may do anything; mod may kick only bot-*; granter
// may grant only to bot-* (and chat); bob may call only the read_* tools;
// lead may grant and run tools; the rest may chat and send sentinels.
func attackTokens(t *testing.T) string {
	return harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "admin-t", "participant": "admin", "capabilities": ["*"], "pods": ["*"]},
  {"token": "mod-t", "participant": "mod", "capabilities": ["chat", "test/*", {"kind": "gateway/kick", "payload": {"participant": "bot-*"}}], "pods": ["*"]},
  {"token": "granter-t", "participant": "granter", "capabilities": ["chat", "test/*", {"kind": "capability/grant", "payload": {"recipient": "bot-*"}}], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat", "test/*", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}], "pods": ["*"]},
  {"token": "lead-t", "participant": "lead", "capabilities": ["chat", "test/*", "capability/grant", "tool/*"], "pods": ["*"]},
  {"token": "files-t", "participant": "files", "capabilities": ["chat", "test/*", "mcp/response"], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat", "test/*"], "pods": ["*"]},
  {"token": "mallory-t", "participant": "mallory", "capabilities": ["chat", "test/*"], "pods": ["*"]},
  {"token": "bot-1-t", "participant": "bot-1", "capabilities": ["chat", "test/*"], "pods": ["*"]}
]}`)
}

// postRaw POSTs body, as sent, with token and returns the status and
// the answer's results.
func postRaw(t *testing.T, g *harness.Gateway, pod, token, body string) (int, []wire.PublishResult) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/pods/"+pod+"/envelopes", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a wire.PublishAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a.Results
}

// refusalOf reads c until the system/error correlated to id, skipping
// everything else, and returns its code.
func refusalCode(t *testing.T, c *harness.Client, id string) string {
	t.Helper()
	for {
		m := c.Expect()
		if m.Kind() == "system/error" && m.Str("correlation_id") == id {
			return m.ErrCode()
		}
		if m.Str("correlation_id") == id {
			t.Fatalf("%s: %s was answered %v, not refused", c.ID, id, m)
		}
	}
}

// stillIn checks that c is still in the pod: a sentinel of its own
// reaches to.
func stillIn(t *testing.T, c, to *harness.Client, id string) {
	t.Helper()
	harness.Sentinel(c, id, to)
	harness.Until(to, id)
}

// TestCaseVariantKick: a moderator allowed to kick only bot-* cannot kick
// admin with a second key spelt otherwise ("Participant", "\u0050…"), over
// HTTP or WebSocket: the payload is refused, and admin stays.
func TestCaseVariantKick(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t) })
	const pod = "case-kick"
	admin := g.DialToken(t, pod, "admin-t", true, "")
	mod := g.DialToken(t, pod, "mod-t", true, "")
	admin.AwaitPresence("join", "mod", 5*time.Second)
	for _, payload := range []string{
		`{"participant":"bot-1","Participant":"admin","ban_ms":60000}`,
		`{"participant":"bot-1","\u0050articipant":"admin","ban_ms":60000}`,
		`{"Participant":"admin","participant":"bot-1","ban_ms":60000}`,
		`{"PARTICIPANT":"admin","ban_ms":60000}`,
	} {
		env := `{"kind":"gateway/kick","payload":` + payload + `}`
		status, results := postRaw(t, g, pod, "mod-t", env)
		if status != http.StatusOK || len(results) != 1 || results[0].Error == nil {
			t.Fatalf("POST %s: %d %+v, want a refusal", payload, status, results)
		}
		mod.SendRaw([]byte(`{"id":"k","kind":"gateway/kick","payload":` + payload + `}`))
		refusalCode(t, mod, "k")
	}
	stillIn(t, admin, mod, "admin-here")
	// The pattern still lets mod kick a bot.
	bot := g.DialToken(t, pod, "bot-1-t", true, "")
	status, results := postRaw(t, g, pod, "mod-t", `{"kind":"gateway/kick","payload":{"participant":"bot-1"}}`)
	if status != http.StatusOK || len(results) != 1 || results[0].Error != nil {
		t.Fatalf("mod's kick of bot-1: %d %+v", status, results)
	}
	if code := bot.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("bot-1 closed with %d", code)
	}
}

// TestCaseVariantGrantAndCall: a grant whose pattern names the recipient,
// and a tool call whose pattern names the tool, cannot carry a second
// spelling of the key for the receiver to read, over WebSocket, HTTP and
// MCP.
func TestCaseVariantGrantAndCall(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t); c.History = 1000 })
	const pod = "case-grant"
	granter := g.DialToken(t, pod, "granter-t", true, "")
	bob := g.DialToken(t, pod, "bob-t", true, "")
	files := g.DialToken(t, pod, "files-t", true, "")
	mallory := g.DialToken(t, pod, "mallory-t", true, "")
	files.AwaitPresence("join", "mallory", 5*time.Second)

	grantEnv := `{"id":"g1","kind":"capability/grant","payload":{"recipient":"bot-1","Recipient":"mallory","capabilities":["chat"]}}`
	granter.SendRaw([]byte(grantEnv))
	granter.ExpectErr("ambiguous_payload")
	if _, results := postRaw(t, g, pod, "granter-t", grantEnv); len(results) != 1 || results[0].Error == nil {
		t.Fatalf("grant over HTTP: %+v", results)
	}
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("granter-t")})
	harness.MCPRefused(t, cs, "pod_send", map[string]any{"kind": "capability/grant",
		"payload": json.RawMessage(`{"recipient":"bot-1","RECIPIENT":"mallory","capabilities":["chat"]}`)}, "ambiguous_payload")

	call := `{"id":"c1","kind":"mcp/request","to":["files"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_notes","NAME":"delete_all","arguments":{}}}}`
	bob.SendRaw([]byte(call))
	bob.ExpectErr("ambiguous_payload")
	stillIn(t, bob, files, "bob-end")
	for _, m := range harness.Until(mallory, "bob-end") {
		if m.Kind() == "capability/grant" || m.Kind() == "mcp/request" {
			t.Fatalf("mallory received %v", m)
		}
	}
}

// TestGrantNeverExceedsGrantor: a grantor cannot name itself, nor grant
// what it does not hold, over any path.
func TestGrantNeverExceedsGrantor(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t) })
	const pod = "no-amplify"
	lead := g.DialToken(t, pod, "lead-t", true, "")
	carol := g.DialToken(t, pod, "carol-t", true, "")
	lead.AwaitPresence("join", "carol", 5*time.Second)
	for _, tc := range []struct{ name, payload string }{
		{"itself", `{"recipient":"lead","capabilities":["*"]}`},
		{"everything", `{"recipient":"carol","capabilities":["*"]}`},
		{"a kick", `{"recipient":"carol","capabilities":["gateway/kick"]}`},
		{"more of a kind than it holds", `{"recipient":"carol","capabilities":["tool*"]}`},
	} {
		if _, results := postRaw(t, g, pod, "lead-t", `{"kind":"capability/grant","payload":`+tc.payload+`}`); len(results) != 1 ||
			results[0].Error == nil || results[0].Error.Code != wire.CodeCapabilityViolation {
			t.Errorf("lead grants %s over HTTP: %+v", tc.name, results)
		}
	}
	if ans := grant(t, lead, "g-ok", map[string]any{"recipient": "carol", "capabilities": []string{"tool/run"}}); ans.Payload()["event"] != "granted" {
		t.Fatalf("a grant of what lead holds: %v", ans)
	}
	if !sendsAs(t, carol, lead, "run", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the grant did not hold")
	}
	if sendsAs(t, carol, lead, "kick-free", map[string]any{"kind": "tool/other/gateway"}) {
		// tool/* held by lead covers tool/other/gateway, but carol was
		// granted tool/run alone.
		t.Fatal("carol sent what she was not granted")
	}
}

// TestScopedGrantStaysInItsContext: a grant of capability/grant and
// gateway/kick scoped to task-1 gives nothing outside task-1's subtree:
// not a pod-wide grant (to itself or another), not a kick, even from an
// envelope in task-1.
func TestScopedGrantStaysInItsContext(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t) })
	const pod = "scoped-grant"
	admin := g.DialToken(t, pod, "admin-t", true, "")
	carol := g.DialToken(t, pod, "carol-t", true, "")
	mallory := g.DialToken(t, pod, "mallory-t", true, "")
	admin.AwaitPresence("join", "mallory", 5*time.Second)
	admin.Send(map[string]any{"id": "open", "kind": "test/open", "context": map[string]any{"id": "task-1", "type": "task"}})
	if ans := grant(t, admin, "g-scoped", map[string]any{"recipient": "carol", "context": "task-1",
		"capabilities": []string{"capability/grant", "gateway/kick", "note"}}); ans.Payload()["event"] != "granted" {
		t.Fatalf("scoped grant: %v", ans)
	}
	for _, tc := range []struct {
		name string
		env  map[string]any
	}{
		{"grants itself * for the pod", map[string]any{"kind": "capability/grant", "payload": map[string]any{"recipient": "carol", "capabilities": []string{"*"}}}},
		{"grants mallory a note for the pod", map[string]any{"kind": "capability/grant", "payload": map[string]any{"recipient": "mallory", "capabilities": []string{"note"}}}},
		{"kicks mallory from task-1", map[string]any{"kind": "gateway/kick", "context": "task-1", "payload": map[string]any{"participant": "mallory"}}},
		{"kicks mallory", map[string]any{"kind": "gateway/kick", "payload": map[string]any{"participant": "mallory"}}},
	} {
		id := strings.ReplaceAll(tc.name, " ", "-")
		tc.env["id"] = id
		carol.Send(tc.env)
		if code := refusalCode(t, carol, id); code != "capability_violation" {
			t.Errorf("carol %s: %s", tc.name, code)
		}
	}
	stillIn(t, mallory, admin, "mallory-here")
	// Within task-1 she may grant what she holds there.
	if ans := grant(t, carol, "g-in", map[string]any{"recipient": "mallory", "context": "task-1", "capabilities": []string{"note"}}); ans.Payload()["event"] != "granted" {
		t.Fatalf("a grant within task-1: %v", ans)
	}
}

// TestRevocationCascades: revoking a grant ends every grant made through
// it, and their recipients are told.
func TestRevocationCascades(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t) })
	const pod = "cascade"
	admin := g.DialToken(t, pod, "admin-t", true, "")
	carol := g.DialToken(t, pod, "carol-t", true, "")
	mallory := g.DialToken(t, pod, "mallory-t", true, "")
	admin.AwaitPresence("join", "mallory", 5*time.Second)
	if ans := grant(t, admin, "g-carol", map[string]any{"recipient": "carol", "capabilities": []string{"capability/grant", "tool/*"}}); ans.Payload()["event"] != "granted" {
		t.Fatal(ans)
	}
	if ans := grant(t, carol, "g-mallory", map[string]any{"recipient": "mallory", "capabilities": []string{"tool/run"}}); ans.Payload()["event"] != "granted" {
		t.Fatal(ans)
	}
	if !sendsAs(t, mallory, admin, "run-1", map[string]any{"kind": "tool/run"}) {
		t.Fatal("mallory's grant did not hold")
	}
	admin.Send(map[string]any{"id": "rv", "kind": "capability/revoke", "payload": map[string]any{"recipient": "carol", "grant_id": "g-carol"}})
	if ev := capabilityEvent(t, mallory, "ended"); ev.Payload()["grant_id"] != "g-mallory" {
		t.Fatalf("mallory was told %v", ev)
	}
	if sendsAs(t, mallory, admin, "run-2", map[string]any{"kind": "tool/run"}) {
		t.Fatal("a grant made through a revoked grant still held")
	}
}

// TestControlKindsNeverEphemeral: a grant, a revoke or a kick that would
// be kept out of the history (ephemeral, or transient) is refused: a node
// that reads the pod again would not see it (a revoked grant would come
// back).
func TestControlKindsNeverEphemeral(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = attackTokens(t) })
	const pod = "no-ephemeral-control"
	admin := g.DialToken(t, pod, "admin-t", true, "")
	carol := g.DialToken(t, pod, "carol-t", true, "")
	admin.AwaitPresence("join", "carol", 5*time.Second)
	if ans := grant(t, admin, "g1", map[string]any{"recipient": "carol", "capabilities": []string{"tool/run"}}); ans.Payload()["event"] != "granted" {
		t.Fatal(ans)
	}
	for _, env := range []map[string]any{
		{"kind": "capability/revoke", "payload": map[string]any{"recipient": "carol", "grant_id": "g1"}, "lifecycle": map[string]any{"mode": "ephemeral"}},
		{"kind": "capability/grant", "payload": map[string]any{"recipient": "carol", "capabilities": []string{"tool/x"}}, "lifecycle": map[string]any{"mode": "ephemeral"}},
		{"kind": "capability/grant", "payload": map[string]any{"recipient": "carol", "capabilities": []string{"tool/x"}}, "lifecycle": map[string]any{"mode": "transient", "summary": "s"}},
		{"kind": "gateway/kick", "payload": map[string]any{"participant": "carol"}, "lifecycle": map[string]any{"mode": "ephemeral"}},
	} {
		env["id"] = "e"
		admin.Send(env)
		if code := refusalCode(t, admin, "e"); code != "invalid_envelope" {
			t.Errorf("%v: %s", env, code)
		}
	}
	if !sendsAs(t, carol, admin, "still", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the ephemeral revoke took effect")
	}
}
