package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// tokenGateway starts a gateway with a token file of three participants:
// alice (token, every pod), bot (token_sha256, pods auth-lab-*) and carol
// (token, pod auth-exact only, chat only).
func tokenGateway(t *testing.T) *harness.Gateway {
	t.Helper()
	sum := sha256.Sum256([]byte("bot-secret"))
	file := harness.WriteFile(t, "tokens.json", fmt.Sprintf(`{"tokens": [
  {"token": "alice-secret", "participant": "alice", "capabilities": ["mcp/*", "chat"], "pods": ["*"]},
  {"token_sha256": %q, "participant": "bot", "capabilities": ["mcp/proposal:*", "chat"], "pods": ["auth-lab-*"]},
  {"token": "carol-secret", "participant": "carol", "capabilities": ["chat"], "pods": ["auth-exact", "auth-lab-1"]}
]}`, hex.EncodeToString(sum[:])))
	return harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file })
}

// TestAuthTokens: a token names the participant (whatever ?participant=
// says) and its capabilities, by header or by ?token=, in both token file
// forms; capabilities are enforced on kind.
func TestAuthTokens(t *testing.T) {
	t.Parallel()
	g := tokenGateway(t)
	const pod = "auth-lab-1"

	// Bearer header; ?participant= is ignored (even an invalid one).
	alice := g.DialToken(t, pod, "alice-secret", true, "participant=mallory")
	if !harness.JSONEqual(alice.Welcome.Payload()["you"], map[string]any{"id": "alice", "capabilities": []string{"mcp/*", "chat"}}) {
		t.Fatalf("alice's welcome you = %v", alice.Welcome.Payload()["you"])
	}
	// ?token= with a token_sha256 entry.
	bot := g.DialToken(t, pod, "bot-secret", false, "participant=bad%20id!")
	if bot.ID != "bot" {
		t.Fatalf("token_sha256 entry joined as %q", bot.ID)
	}
	if !harness.JSONEqual(bot.Welcome.Payload()["participants"], []any{map[string]any{"id": "alice", "capabilities": []string{"mcp/*", "chat"}}}) {
		t.Fatalf("bot's welcome participants = %v", bot.Welcome.Payload()["participants"])
	}
	harness.PresenceOf(t, alice.Expect(), "join", "bot")

	// Allowed kinds are relayed.
	for _, kind := range []string{"chat", "mcp/request:tools/call", "mcp/x"} {
		id := "ok-" + kind
		env := map[string]any{"id": id, "kind": kind}
		if kind == "mcp/request:tools/call" {
			// A call names its one recipient (docs/protocol.md section 11).
			env["to"], env["payload"] = []string{"bot"}, map[string]any{"jsonrpc": "2.0", "method": "tools/call"}
		}
		alice.Send(env)
		bot.ExpectEnvelope(kind, id)
	}
	bot.Send(map[string]any{"id": "bot-ok", "kind": "mcp/proposal:tools/call"})
	alice.ExpectEnvelope("mcp/proposal:tools/call", "bot-ok")

	// Kinds outside the capabilities are refused with the details.
	refused := []struct {
		who  *harness.Client
		kind string
		caps []string
	}{
		{alice, "admin/reset", []string{"mcp/*", "chat"}},
		{alice, "mcp", []string{"mcp/*", "chat"}}, // "mcp/*" needs the slash
		{alice, "chat2", []string{"mcp/*", "chat"}},
		{alice, "Chat", []string{"mcp/*", "chat"}},
		{bot, "mcp/request:tools/call", []string{"mcp/proposal:*", "chat"}},
		{bot, "mcp/proposal", []string{"mcp/proposal:*", "chat"}},
	}
	for i, r := range refused {
		id := fmt.Sprintf("cv-%d", i)
		r.who.Send(map[string]any{"id": id, "kind": r.kind})
		e := r.who.ExpectError("capability_violation")
		pl := e.Payload()
		if e.Str("correlation_id") != id || pl["attempted_kind"] != r.kind || !harness.JSONEqual(pl["your_capabilities"], r.caps) || pl["retryable"] != false {
			t.Fatalf("%s sending %q: error %v", r.who.ID, r.kind, e)
		}
	}
	// No capability grants system/*: that is reserved_kind.
	alice.Send(map[string]any{"id": "sys", "kind": "system/welcome"})
	alice.ExpectError("reserved_kind")

	// Nothing refused was relayed.
	harness.ExpectBothWays(alice, bot, "after", "after-bot")

	// The scheme of an Authorization header is case-insensitive
	// (RFC 9110, section 11.1).
	for _, h := range []string{"bearer alice-secret", "BEARER alice-secret", "Bearer  alice-secret"} {
		conn, err := harness.DialConn(g.WS, url.Values{"pod": {"auth-lab-2"}}, http.Header{"Authorization": {h}})
		if err != nil {
			t.Fatalf("Authorization: %q refused: %v", h, err)
		}
		if c := harness.StartClient(t, conn, true); c.ID != "alice" {
			t.Fatalf("Authorization: %q joined as %q", h, c.ID)
		}
		_ = conn.Close()
	}

	// A token whose pods list names this pod exactly.
	carol := g.DialToken(t, "auth-exact", "carol-secret", true, "")
	if carol.ID != "carol" {
		t.Fatalf("carol joined as %q", carol.ID)
	}
}

// TestAuthRefusals: upgrades refused with 401, 403 and 400, each with its
// JSON error code.
func TestAuthRefusals(t *testing.T) {
	t.Parallel()
	g := tokenGateway(t)
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		name   string
		query  url.Values
		header http.Header
		status int
		code   string
	}{
		{"no token", q("pod", "auth-lab-1"), nil, 401, "unauthorized"},
		{"no token, participant given", q("pod", "auth-lab-1", "participant", "alice"), nil, 401, "unauthorized"},
		{"unknown bearer", q("pod", "auth-lab-1"), harness.Bearer("nope"), 401, "unauthorized"},
		{"unknown ?token", q("pod", "auth-lab-1", "token", "nope"), nil, 401, "unauthorized"},
		{"hash given as token", q("pod", "auth-lab-1", "token", hexSHA256("bot-secret")), nil, 401, "unauthorized"},
		{"not a bearer", q("pod", "auth-lab-1"), http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, 401, "unauthorized"},
		{"pod outside pattern", q("pod", "other"), harness.Bearer("bot-secret"), 403, "forbidden"},
		{"prefix without dash", q("pod", "auth-lab"), harness.Bearer("bot-secret"), 403, "forbidden"},
		{"exact pod only", q("pod", "auth-exact-2", "token", "carol-secret"), nil, 403, "forbidden"},
		{"bad pod", q("pod", "bad pod!"), harness.Bearer("alice-secret"), 400, "invalid_pod"},
		{"pod too long", q("pod", strings.Repeat("p", 65)), harness.Bearer("alice-secret"), 400, "invalid_pod"},
		{"no pod", q(), harness.Bearer("alice-secret"), 400, "invalid_pod"},
		{"bad filter", q("pod", "auth-lab-1", "routing", "sideways"), harness.Bearer("alice-secret"), 400, "invalid_filter"},
		{"bad bool", q("pod", "auth-lab-1", "echo", "maybe"), harness.Bearer("alice-secret"), 400, "invalid_filter"},
	}
	for _, tc := range cases {
		status, code := harness.Refusal(t, g.WS, tc.query, tc.header)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
	}
	// 64 characters is a valid pod name; the token still works after
	// all these refusals.
	c := g.DialToken(t, strings.Repeat("p", 64), "alice-secret", false, "")
	if c.ID != "alice" {
		t.Fatalf("joined as %q", c.ID)
	}
	ms := harness.MetricsOf(t, g.URL)
	if ms[`mcpp_upgrade_refusals_total{code="unauthorized"}`] != 6 || ms[`mcpp_upgrade_refusals_total{code="forbidden"}`] != 3 {
		t.Errorf("refusal metrics: unauthorized %v, forbidden %v",
			ms[`mcpp_upgrade_refusals_total{code="unauthorized"}`], ms[`mcpp_upgrade_refusals_total{code="forbidden"}`])
	}
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestAuthOpenMode: without a token file the participant id comes from
// ?participant= (or is generated), invalid ids are refused with 400, and
// capabilities are --default-capabilities.
func TestAuthOpenMode(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.DefaultCapabilities = "chat,mcp/*" })
	const pod = "auth-open"
	for _, tc := range []struct {
		name, id string
	}{
		{"space", "bad id"},
		{"bang", "bob!"},
		{"system", "system:gateway"},
		{"system prefix", "system:me"},
		{"too long", strings.Repeat("a", 129)},
		{"empty", ""},
		{"slash", "a/b"},
	} {
		status, code := harness.Refusal(t, g.WS, url.Values{"pod": {pod}, "participant": {tc.id}}, nil)
		if status != 400 || code != "invalid_participant" {
			t.Errorf("participant %s: got %d %q, want 400 invalid_participant", tc.name, status, code)
		}
	}
	for _, tc := range []struct{ name, query string }{
		{"routing", "routing=sideways"},
		{"contexts", "contexts=some"},
		{"main", "main=yes"},
		{"batch twice", "batch=1&batch=0"},
	} {
		qv, _ := url.ParseQuery(tc.query)
		qv.Set("pod", pod)
		qv.Set("participant", "x")
		status, code := harness.Refusal(t, g.WS, qv, nil)
		if status != 400 || code != "invalid_filter" {
			t.Errorf("filter %s: got %d %q, want 400 invalid_filter", tc.name, status, code)
		}
	}
	// Valid ids of every allowed character, the longest one included.
	long := strings.Repeat("a", 128)
	a := g.Dial(t, pod, "A.z_0:9@x-y", "")
	b := g.Dial(t, pod, long, "")
	if a.ID != "A.z_0:9@x-y" || b.ID != long {
		t.Fatalf("ids %q %q", a.ID, b.ID)
	}
	if !harness.JSONEqual(a.Welcome.Payload()["you"], map[string]any{"id": a.ID, "capabilities": []string{"chat", "mcp/*"}}) {
		t.Fatalf("open-mode you = %v", a.Welcome.Payload()["you"])
	}
	// No participant parameter: an id is generated.
	conn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon := harness.StartClient(t, conn, true)
	if anon.ID == "" || anon.ID == a.ID || anon.ID == b.ID {
		t.Fatalf("generated id %q", anon.ID)
	}
	// The default capabilities are enforced.
	a.Send(map[string]any{"id": "k1", "kind": "other"})
	e := a.ExpectErr("capability_violation")
	if e.Payload()["attempted_kind"] != "other" || !harness.JSONEqual(e.Payload()["your_capabilities"], []string{"chat", "mcp/*"}) {
		t.Fatalf("capability_violation %v", e.Payload())
	}
	a.Send(map[string]any{"id": "k2", "kind": "mcp/notification:x"})
	b.ExpectEnvelope("mcp/notification:x", "k2")
	anon.ExpectEnvelope("mcp/notification:x", "k2")
}
