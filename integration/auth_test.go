package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
)

// tokenGateway starts a gateway with a token file of three participants:
// alice (token, every pod), bot (token_sha256, pods auth-lab-*) and carol
// (token, pod auth-exact only, chat only).
func tokenGateway(t *testing.T) *testGateway {
	t.Helper()
	sum := sha256.Sum256([]byte("bot-secret"))
	file := writeFile(t, "tokens.json", fmt.Sprintf(`{"tokens": [
  {"token": "alice-secret", "participant": "alice", "capabilities": ["mcp/*", "chat"], "pods": ["*"]},
  {"token_sha256": %q, "participant": "bot", "capabilities": ["mcp/proposal:*", "chat"], "pods": ["auth-lab-*"]},
  {"token": "carol-secret", "participant": "carol", "capabilities": ["chat"], "pods": ["auth-exact", "auth-lab-1"]}
]}`, hex.EncodeToString(sum[:])))
	return startGateway(t, func(c *gateway.Config) { c.Tokens = file })
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// dialToken joins with a token given as a header (bearer=true) or in the
// query, with extra query parameters.
func (g *testGateway) dialToken(t *testing.T, pod, token string, header bool, extra string) *client {
	t.Helper()
	q, err := url.ParseQuery(extra)
	if err != nil {
		t.Fatal(err)
	}
	q.Set("pod", pod)
	var h http.Header
	if header {
		h = bearer(token)
	} else {
		q.Set("token", token)
	}
	c, resp, err := dialRaw(g.WS, q, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s with a token: %v (HTTP %d)", pod, err, status)
	}
	return startClient(t, c, true)
}

// TestAuthTokens: a token names the participant (whatever ?participant=
// says) and its capabilities, by header or by ?token=, in both token file
// forms; capabilities are enforced on kind.
func TestAuthTokens(t *testing.T) {
	t.Parallel()
	g := tokenGateway(t)
	const pod = "auth-lab-1"

	// Bearer header; ?participant= is ignored (even an invalid one).
	alice := g.dialToken(t, pod, "alice-secret", true, "participant=mallory")
	if !jsonEqual(alice.Welcome.payload()["you"], map[string]any{"id": "alice", "capabilities": []string{"mcp/*", "chat"}}) {
		t.Fatalf("alice's welcome you = %v", alice.Welcome.payload()["you"])
	}
	// ?token= with a token_sha256 entry.
	bot := g.dialToken(t, pod, "bot-secret", false, "participant=bad%20id!")
	if bot.ID != "bot" {
		t.Fatalf("token_sha256 entry joined as %q", bot.ID)
	}
	if !jsonEqual(bot.Welcome.payload()["participants"], []any{map[string]any{"id": "alice", "capabilities": []string{"mcp/*", "chat"}}}) {
		t.Fatalf("bot's welcome participants = %v", bot.Welcome.payload()["participants"])
	}
	presenceOf(t, alice.expect(), "join", "bot")

	// Allowed kinds are relayed.
	for _, kind := range []string{"chat", "mcp/request:tools/call", "mcp/x"} {
		id := "ok-" + kind
		alice.send(map[string]any{"id": id, "kind": kind})
		bot.expectEnvelope(kind, id)
	}
	bot.send(map[string]any{"id": "bot-ok", "kind": "mcp/proposal:tools/call"})
	alice.expectEnvelope("mcp/proposal:tools/call", "bot-ok")

	// Kinds outside the capabilities are refused with the details.
	refused := []struct {
		who  *client
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
		r.who.send(map[string]any{"id": id, "kind": r.kind})
		e := r.who.expectError("capability_violation")
		pl := e.payload()
		if e.str("correlation_id") != id || pl["attempted_kind"] != r.kind || !jsonEqual(pl["your_capabilities"], r.caps) || pl["retryable"] != false {
			t.Fatalf("%s sending %q: error %v", r.who.ID, r.kind, e)
		}
	}
	// No capability grants system/*: that is reserved_kind.
	alice.send(map[string]any{"id": "sys", "kind": "system/welcome"})
	alice.expectError("reserved_kind")

	// Nothing refused was relayed.
	alice.send(map[string]any{"id": "after", "kind": "chat"})
	bot.expectEnvelope("chat", "after")
	bot.send(map[string]any{"id": "after-bot", "kind": "chat"})
	alice.expectEnvelope("chat", "after-bot")
	alice.expectNothing(30 * time.Millisecond)
	bot.expectNothing(30 * time.Millisecond)

	// The scheme of an Authorization header is case-insensitive
	// (RFC 9110, section 11.1).
	for _, h := range []string{"bearer alice-secret", "BEARER alice-secret", "Bearer  alice-secret"} {
		conn, resp, err := dialRaw(g.WS, url.Values{"pod": {"auth-lab-2"}}, http.Header{"Authorization": {h}})
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("Authorization: %q refused: %v (HTTP %d)", h, err, status)
		}
		if c := startClient(t, conn, true); c.ID != "alice" {
			t.Fatalf("Authorization: %q joined as %q", h, c.ID)
		}
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}

	// A token whose pods list names this pod exactly.
	carol := g.dialToken(t, "auth-exact", "carol-secret", true, "")
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
		{"unknown bearer", q("pod", "auth-lab-1"), bearer("nope"), 401, "unauthorized"},
		{"unknown ?token", q("pod", "auth-lab-1", "token", "nope"), nil, 401, "unauthorized"},
		{"hash given as token", q("pod", "auth-lab-1", "token", hexSHA256("bot-secret")), nil, 401, "unauthorized"},
		{"not a bearer", q("pod", "auth-lab-1"), http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, 401, "unauthorized"},
		{"pod outside pattern", q("pod", "other"), bearer("bot-secret"), 403, "forbidden"},
		{"prefix without dash", q("pod", "auth-lab"), bearer("bot-secret"), 403, "forbidden"},
		{"exact pod only", q("pod", "auth-exact-2", "token", "carol-secret"), nil, 403, "forbidden"},
		{"bad pod", q("pod", "bad pod!"), bearer("alice-secret"), 400, "invalid_pod"},
		{"pod too long", q("pod", strings.Repeat("p", 65)), bearer("alice-secret"), 400, "invalid_pod"},
		{"no pod", q(), bearer("alice-secret"), 400, "invalid_pod"},
		{"bad filter", q("pod", "auth-lab-1", "routing", "sideways"), bearer("alice-secret"), 400, "invalid_filter"},
		{"bad bool", q("pod", "auth-lab-1", "echo", "maybe"), bearer("alice-secret"), 400, "invalid_filter"},
	}
	for _, tc := range cases {
		status, code := refusal(t, g.WS, tc.query, tc.header)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
	}
	// 64 characters is a valid pod name; the token still works after
	// all these refusals.
	c := g.dialToken(t, strings.Repeat("p", 64), "alice-secret", false, "")
	if c.ID != "alice" {
		t.Fatalf("joined as %q", c.ID)
	}
	ms := metricsOf(t, g.URL)
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
	g := startGateway(t, func(c *gateway.Config) { c.DefaultCapabilities = "chat,mcp/*" })
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
		status, code := refusal(t, g.WS, url.Values{"pod": {pod}, "participant": {tc.id}}, nil)
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
		status, code := refusal(t, g.WS, qv, nil)
		if status != 400 || code != "invalid_filter" {
			t.Errorf("filter %s: got %d %q, want 400 invalid_filter", tc.name, status, code)
		}
	}
	// Valid ids of every allowed character, the longest one included.
	long := strings.Repeat("a", 128)
	a := g.dial(t, pod, "A.z_0:9@x-y", "")
	b := g.dial(t, pod, long, "")
	if a.ID != "A.z_0:9@x-y" || b.ID != long {
		t.Fatalf("ids %q %q", a.ID, b.ID)
	}
	if !jsonEqual(a.Welcome.payload()["you"], map[string]any{"id": a.ID, "capabilities": []string{"chat", "mcp/*"}}) {
		t.Fatalf("open-mode you = %v", a.Welcome.payload()["you"])
	}
	// No participant parameter: an id is generated.
	conn, _, err := dialRaw(g.WS, url.Values{"pod": {pod}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon := startClient(t, conn, true)
	if anon.ID == "" || anon.ID == a.ID || anon.ID == b.ID {
		t.Fatalf("generated id %q", anon.ID)
	}
	// The default capabilities are enforced.
	a.send(map[string]any{"id": "k1", "kind": "other"})
	e := a.expectErr("capability_violation")
	if e.payload()["attempted_kind"] != "other" || !jsonEqual(e.payload()["your_capabilities"], []string{"chat", "mcp/*"}) {
		t.Fatalf("capability_violation %v", e.payload())
	}
	a.send(map[string]any{"id": "k2", "kind": "mcp/request:x"})
	b.expectEnvelope("mcp/request:x", "k2")
	anon.expectEnvelope("mcp/request:x", "k2")
}
