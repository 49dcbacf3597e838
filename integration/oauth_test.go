package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 37: MCP hosts sign in with the team's identity provider
// (docs/protocol.md sections 1 and 9). The gateway takes the access
// tokens of a real OpenID provider (zitadel/oidc, oauth_idp_test.go); a
// host is the official MCP Go SDK's client with its OAuth handler, which
// finds everything from the gateway's 401: the protected resource
// metadata, the provider's metadata, the scopes to ask for; a user signs
// in on the provider's login page; the host joins the pod and sees the
// tools its scopes let it call.

// teamScopes are the mcpp: scopes the team gave each user at its
// provider: alice may read the notes and work in the oauth- pods (and, by
// the team's mistake, holds mcpp:cap:*, which the gateway refuses); bob
// may chat in oauth-lab.
var teamScopes = map[string][]string{
	idpAlice: {"mcpp:pod:oauth-lab", "mcpp:pod:oauth-other", "mcpp:pod:oauth-atk", "mcpp:cap:chat", "mcpp:call:read_*", "mcpp:cap:*"},
	idpBob:   {"mcpp:pod:oauth-lab", "mcpp:cap:chat"},
}

// oauthGateway starts a gateway that takes idp's access tokens (its
// participants are team:SUB), whose resource identifier is its own
// address, with hosts asking for mcpp:cap:chat besides the pod, and a
// token file for the pod's MCP server (tools), a watcher and a probe of
// the server.
func oauthGateway(t *testing.T, idp *teamIdP) *harness.Gateway {
	t.Helper()
	ln := gatewaytest.Listen(t)
	return harness.StartGatewayOn(t, ln, func(c *gateway.Config) {
		c.History = 1000
		c.OAuthIssuers = gateway.FlagList{"team=" + idp.Issuer}
		c.OAuthResource = "http://" + ln.Addr().String()
		c.OAuthScopes = "mcpp:cap:chat"
		c.Tokens = harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "watch-t", "participant": "watcher", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "probe-t", "participant": "probe", "capabilities": ["mcp/request"], "pods": ["*"]}
]}`)
	})
}

// notesServer is the pod's MCP server: the Go SDK's, over Streamable
// HTTP, with a tool that reads the team's note and one that erases them.
func notesServer(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	type note struct {
		Note string `json:"note"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "read_note", Description: "Reads the team's note."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, note, error) {
			return nil, note{Note: "ship on Friday"}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "erase_notes", Description: "Erases every note."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, note, error) {
			return nil, note{Note: "erased"}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startNotesBridge bridges the notes server into pod as participant id,
// with token, until the test ends, and waits until probe sees it answer.
func startNotesBridge(t *testing.T, g *harness.Gateway, probe *bridgetest.Requester, pod, id, token string) {
	t.Helper()
	logs := &harness.SyncBuffer{}
	b, err := bridge.New(bridge.Config{
		Gateway: g.WS,
		Client:  client.Options{Pod: pod, Participant: id, Token: token},
		Server:  bridge.Server{URL: notesServer(t)},
		Logf:    func(format string, args ...any) { fmt.Fprintf(logs, format+"\n", args...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("the bridge's log:\n%s", logs)
		}
	})
	probe.AwaitJoin(id)
	probe.AwaitUp(id)
}

// oauthHost is a host's OAuth handler, as the MCP Go SDK gives it: a
// client registered at the provider (as most teams' providers have no
// dynamic registration), authorization code with PKCE, the user's sign-in
// on the provider's login page. more are scopes the user asks for besides
// those the gateway names (Claude Code's oauth.scopes).
func oauthHost(t *testing.T, idp *teamIdP, user string, more ...string) *auth.AuthorizationCodeHandler {
	t.Helper()
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		PreregisteredClient:      &oauthex.ClientCredentials{ClientID: hostClient, Issuer: idp.Issuer},
		RedirectURL:              hostRedirect,
		AuthorizationCodeFetcher: idp.fetcher(user),
		ScopeFilter:              func(s []string) []string { return append(s, more...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hostJoins connects a host with h to pod's MCP endpoint, as a host
// configured with the URL /mcp?pod=POD and no token does.
func hostJoins(g *harness.Gateway, pod string, h auth.OAuthHandler) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-host", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.URL + "/mcp?pod=" + pod, OAuthHandler: h, MaxRetries: -1}, nil)
}

func mustJoin(t *testing.T, g *harness.Gateway, pod string, h auth.OAuthHandler) *mcp.ClientSession {
	t.Helper()
	cs, err := hostJoins(g, pod, h)
	if err != nil {
		t.Fatalf("the host could not join %s: %v", pod, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// bearerOf is the access token h holds.
func bearerOf(t *testing.T, h *auth.AuthorizationCodeHandler) string {
	t.Helper()
	ts, err := h.TokenSource(context.Background())
	if err != nil || ts == nil {
		t.Fatalf("the host holds no token: %v", err)
	}
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// refused is a refusal as a host gets it: the status, the JSON body of
// docs/protocol.md section 1, and the WWW-Authenticate challenge's
// parameters ("scheme" is its scheme).
type refused struct {
	status    int
	body      wire.Refusal
	challenge map[string]string
}

func refusedOf(t *testing.T, resp *http.Response, token string) refused {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := refused{status: resp.StatusCode, challenge: map[string]string{}}
	if err := json.Unmarshal(b, &r.body); err != nil {
		t.Fatalf("the refusal (%d) is not JSON: %q", resp.StatusCode, b)
	}
	if token != "" && strings.Contains(string(b)+strings.Join(resp.Header.Values("WWW-Authenticate"), ""), token) {
		t.Fatal("the refusal gives the token back")
	}
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		t.Fatalf("WWW-Authenticate %q: %v", resp.Header.Values("WWW-Authenticate"), err)
	}
	if len(cs) == 1 {
		r.challenge = cs[0].Params
		if r.challenge == nil {
			r.challenge = map[string]string{}
		}
		r.challenge["scheme"] = cs[0].Scheme
	}
	return r
}

// atMCP is a host's first request to pod's MCP endpoint (initialize)
// with token ("": none).
func atMCP(t *testing.T, g *harness.Gateway, pod, token string) refused {
	t.Helper()
	body := `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}`
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/mcp?pod="+pod, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return refusedOf(t, resp, token)
}

// atWS is an upgrade to /ws?pod=POD with token, which must be refused.
func atWS(t *testing.T, g *harness.Gateway, pod, token string) refused {
	t.Helper()
	c, resp, err := harness.DialWebSocket(g.WS, url.Values{"pod": {pod}}, harness.Bearer(token))
	if err == nil {
		_ = c.CloseNow()
		t.Fatalf("the upgrade to %s succeeded, want a refusal", pod)
	}
	if resp == nil {
		t.Fatalf("no HTTP answer: %v", err)
	}
	return refusedOf(t, resp, token)
}

// atPublish is a POST of one chat envelope to pod with token.
func atPublish(t *testing.T, g *harness.Gateway, pod, token string) refused {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/pods/"+pod+"/envelopes", bytes.NewReader([]byte(`{"kind": "chat", "payload": {"text": "hi"}}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return refusedOf(t, resp, token)
}

// TestOAuthHostSignsIn: a host given only /mcp?pod=oauth-lab finds the
// gateway's metadata in its 401, signs its user in at the team's
// provider, joins, and sees exactly the tools its scopes allow; asked for
// another pod it signs in again for it (403 insufficient_scope), unless
// the provider will not grant it; a token for another audience is
// refused with the challenge that starts it all again.
func TestOAuthHostSignsIn(t *testing.T) {
	t.Parallel()
	idp := startIdP(t, "", teamScopes)
	g := oauthGateway(t, idp)
	const pod = "oauth-lab"
	watcher := g.DialToken(t, pod, "watch-t", true, "")
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "probe-t"})
	startNotesBridge(t, g, probe, pod, "tools", "tools-t")

	// What a host reads before it signs in: the 401 of its first
	// request, and the metadata it points to, checked as the SDK checks
	// them (the resource is the URL the host was given).
	r := atMCP(t, g, pod, "")
	mcpMeta := g.URL + "/.well-known/oauth-protected-resource/mcp?pod=" + pod
	if r.status != http.StatusUnauthorized || r.body.Code != wire.CodeUnauthorized || r.challenge["scheme"] != "bearer" ||
		r.challenge["resource_metadata"] != mcpMeta || r.challenge["scope"] != "mcpp:pod:oauth-lab mcpp:cap:chat" || r.challenge["error"] != "" {
		t.Fatalf("a request without a token: %+v", r)
	}
	ctx := context.Background()
	prm, err := oauthex.GetProtectedResourceMetadata(ctx, mcpMeta, g.URL+"/mcp?pod="+pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prm.AuthorizationServers, []string{idp.Issuer}) || !slices.Equal(prm.ScopesSupported, []string{"mcpp:pod:oauth-lab", "mcpp:cap:chat"}) ||
		!slices.Equal(prm.BearerMethodsSupported, []string{"header"}) {
		t.Fatalf("the pod's metadata: %+v", prm)
	}
	for resource, at := range map[string]string{g.URL: "", g.URL + "/mcp": "/mcp"} {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, g.URL+"/.well-known/oauth-protected-resource"+at, resource, nil)
		if err != nil || !slices.Equal(prm.AuthorizationServers, []string{idp.Issuer}) || !slices.Equal(prm.ScopesSupported, []string{"mcpp:cap:chat"}) {
			t.Fatalf("the metadata of %s: %+v %v", resource, prm, err)
		}
	}

	// alice's host asks for the read tools too; she signs in and joins.
	alice := oauthHost(t, idp, idpAlice, "mcpp:call:read_*")
	cs := mustJoin(t, g, pod, alice)
	if n := idp.logins.Load(); n != 1 {
		t.Fatalf("alice signed in %d times", n)
	}
	awaitMsg(t, watcher, "team:id1's join", func(m harness.Msg) bool {
		p := m.Payload()
		who, _ := p["participant"].(map[string]any)
		return m.Kind() == "system/presence" && p["event"] == "join" && who["id"] == "team:id1"
	})
	names := toolNamesOf(t, cs)
	if !slices.Contains(names, "pod_send") || !slices.Contains(names, "tools__read_note") || slices.Contains(names, "tools__erase_notes") {
		t.Fatalf("alice (chat, read_*) lists %v: want tools__read_note and not tools__erase_notes", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__read_note", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "ship on Friday") {
		t.Fatalf("tools__read_note: %v %s", err, resultText(res))
	}
	if out := harness.MCPCall(t, cs, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"text": "signed in"}}); out.IsError {
		t.Fatalf("alice's chat: %+v", out)
	}
	awaitMsg(t, watcher, "alice's chat, from team:id1", func(m harness.Msg) bool {
		return m.Kind() == "chat" && m.Str("from") == "team:id1"
	})
	if out := harness.MCPCall(t, cs, "pod_send", map[string]any{"kind": "gateway/kick", "payload": map[string]any{"participant": "bob"}}); !out.IsError {
		t.Fatalf("alice sent what no scope of hers grants: %+v", out)
	}
	out := harness.MCPCall(t, cs, "pod_send", map[string]any{"kind": "task/assign", "payload": map[string]any{}})
	if !out.IsError || out.Str("error") != string(wire.CodeCapabilityViolation) {
		t.Fatalf("alice sent task/assign, which no scope of hers grants: %+v", out)
	}

	// bob's host asks for what the gateway names; bob may only chat.
	bob := oauthHost(t, idp, idpBob)
	bcs := mustJoin(t, g, pod, bob)
	if names := toolNamesOf(t, bcs); !slices.Contains(names, "pod_send") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "tools__") }) {
		t.Fatalf("bob (chat) lists %v: want none of the notes tools", names)
	}

	// Another pod: alice's token does not name it (403
	// insufficient_scope); her host signs in again for it and joins.
	other := mustJoin(t, g, "oauth-other", alice)
	if n := idp.logins.Load(); n != 3 {
		t.Fatalf("%d sign-ins after alice's step-up; want 3 (alice, bob, alice)", n)
	}
	if out := harness.MCPCall(t, other, "pod_send", map[string]any{"kind": "chat", "payload": map[string]any{"text": "here too"}}); out.IsError {
		t.Fatalf("alice's chat in oauth-other: %+v", out)
	}
	// bob's provider does not grant him that pod: his step-up ends in the
	// same refusal, which says which scope it takes.
	if _, err := hostJoins(g, "oauth-other", bob); err == nil {
		t.Fatal("bob joined oauth-other, which no scope of his names")
	}
	r = atMCP(t, g, "oauth-other", bearerOf(t, bob))
	if r.status != http.StatusForbidden || r.body.Code != wire.CodeForbidden || r.challenge["error"] != "insufficient_scope" ||
		r.challenge["scope"] != "mcpp:pod:oauth-other mcpp:cap:chat" || !strings.HasPrefix(r.challenge["error_description"], "scope: ") ||
		r.challenge["resource_metadata"] != g.URL+"/.well-known/oauth-protected-resource/mcp?pod=oauth-other" {
		t.Fatalf("bob's token for oauth-other: %+v", r)
	}

	// A token the provider minted for another resource is refused on
	// every path, with a challenge that names this gateway's metadata.
	foreign := idp.token(t, hostClient, idpAlice, []string{"https://other.example/mcp"}, []string{"openid", "mcpp:pod:oauth-lab", "mcpp:cap:chat"})
	for path, r := range map[string]refused{
		"/mcp": atMCP(t, g, pod, foreign), "/ws": atWS(t, g, pod, foreign), "POST": atPublish(t, g, pod, foreign),
	} {
		meta := g.URL + "/.well-known/oauth-protected-resource"
		if path == "/mcp" {
			meta = mcpMeta
		}
		if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.body.Message, "aud: ") || r.challenge["error"] != "invalid_token" ||
			r.challenge["resource_metadata"] != meta || !strings.HasPrefix(r.challenge["error_description"], "aud: ") {
			t.Errorf("a token for another audience at %s: %+v", path, r)
		}
	}
}

// awaitMsg waits for the envelope c receives that match says is the one,
// skipping the others.
func awaitMsg(t *testing.T, c *harness.Client, what string, match func(harness.Msg) bool) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := c.Next(time.Until(deadline)); m != nil && match(m) {
			return m
		}
	}
	t.Fatalf("%s did not arrive within 10s", what)
	return nil
}

// TestOAuthAttacks: access tokens as an attacker brings them: from an
// issuer the gateway does not trust, from an impostor that claims the
// trusted issuer with keys of its own, re-signed under the trusted key's
// kid, for other audiences only, expired, with a scope that would grant
// everything, with the claims of issue 23's JWTs added; and issuers whose
// metadata sends the gateway elsewhere or is too large to read.
func TestOAuthAttacks(t *testing.T) {
	t.Parallel()
	idp := startIdP(t, "", teamScopes)
	g := oauthGateway(t, idp)
	const pod = "oauth-atk"
	scopes := []string{"openid", "mcpp:pod:oauth-atk", "mcpp:cap:chat"}
	watcher := g.DialToken(t, pod, "watch-t", true, "")

	// The good token, for comparison: it joins as team:id1, with chat.
	good := idp.token(t, hostClient, idpAlice, []string{g.URL}, scopes)
	alice := g.DialToken(t, pod, good, true, "")
	if you := alice.Welcome.Payload()["you"].(map[string]any); you["id"] != "team:id1" || fmt.Sprint(you["capabilities"]) != "[chat]" {
		t.Fatalf("alice's welcome: %v", you)
	}
	watcher.ExpectKind("system/presence")
	// A list of audiences that holds this gateway's among others is one
	// for it.
	both := idp.token(t, hostClient, idpAlice, []string{"https://other.example", g.URL + "/mcp"}, scopes)
	if r := atPublish(t, g, pod, both); r.status != http.StatusOK {
		// atPublish reads a refusal; a 200's body is {"results": …}.
		t.Fatalf("a token whose aud lists this gateway's /mcp: %+v", r)
	}
	watcher.ExpectKind("chat")

	stranger := startIdP(t, "", teamScopes)
	impostor := startIdP(t, idp.Issuer, teamScopes)
	forged := reSigned(t, good)
	expiring := idp.token(t, shortHostClient, idpAlice, []string{g.URL}, scopes)
	for _, c := range []struct{ name, token, says string }{
		{"an issuer not configured", stranger.token(t, hostClient, idpAlice, []string{g.URL}, scopes), "iss: "},
		{"an impostor of the issuer, with its own key", impostor.token(t, hostClient, idpAlice, []string{g.URL}, scopes), "kid: "},
		{"the issuer's token re-signed under its kid", forged, "signature: "},
		{"audiences that are all another's", idp.token(t, hostClient, idpAlice, []string{"https://other.example", "https://other.example/mcp"}, scopes), "aud: "},
		{"a pod's audience for another pod", idp.token(t, hostClient, idpAlice, []string{g.URL + "/mcp?pod=oauth-lab"}, scopes), "aud: "},
		{"a scope that would grant every kind", idp.token(t, hostClient, idpAlice, []string{g.URL}, append(scopes, "mcpp:cap:*")), "scope: "},
	} {
		for path, r := range map[string]refused{"/ws": atWS(t, g, pod, c.token), "/mcp": atMCP(t, g, pod, c.token), "POST": atPublish(t, g, pod, c.token)} {
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.body.Message, c.says) || r.challenge["error"] != "invalid_token" || r.challenge["resource_metadata"] == "" {
				t.Errorf("%s at %s: %+v; want 401 %q… with a challenge", c.name, path, r, c.says)
			}
		}
	}
	watcher.ExpectNothing(200 * time.Millisecond)

	// The provider that adds caps ["*"] and pods ["*"] to a token grants
	// nothing by them: the token has its scopes' chat, in its scopes' pod.
	claimed := idp.token(t, claimsClient, idpAlice, []string{g.URL}, scopes)
	if you := g.DialToken(t, pod, claimed, true, "").Welcome.Payload()["you"].(map[string]any); fmt.Sprint(you["capabilities"]) != "[chat]" {
		t.Errorf("a token with caps [\"*\"] beside its scopes has %v", you["capabilities"])
	}
	if r := atWS(t, g, "oauth-else", claimed); r.status != http.StatusForbidden || r.challenge["error"] != "insufficient_scope" {
		t.Errorf("a token with pods [\"*\"] beside its scopes, for another pod: %+v", r)
	}
	// A token without the gateway's scopes joins nowhere, and never with
	// --default-capabilities.
	bare := idp.token(t, hostClient, idpAlice, []string{g.URL}, []string{"openid"})
	if r := atWS(t, g, pod, bare); r.status != http.StatusForbidden || r.challenge["error"] != "insufficient_scope" || r.challenge["scope"] != "mcpp:pod:oauth-atk mcpp:cap:chat" {
		t.Errorf("a token without the gateway's scopes: %+v", r)
	}

	// The short-lived token once it has expired.
	parsed, _, err := jwt.NewParser().ParseUnverified(expiring, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	until, _ := parsed.Claims.GetExpirationTime()
	time.Sleep(time.Until(until.Add(1500 * time.Millisecond)))
	if r := atWS(t, g, pod, expiring); r.status != http.StatusUnauthorized || !strings.HasPrefix(r.body.Message, "exp: ") || r.challenge["error"] != "invalid_token" {
		t.Errorf("an expired token: %+v", r)
	}

	// Issuers whose metadata redirects, or is over 1 MiB: the gateway
	// does not start, and says why.
	front := metadataFront(t, idp)
	for _, c := range []struct{ path, says string }{{"/redirect", "302 Found"}, {"/large", "larger than 1 MiB"}} {
		cfg := gatewaytest.Config()
		cfg.OAuthIssuers = gateway.FlagList{front.URL + c.path}
		cfg.OAuthResource = "http://127.0.0.1:8080"
		_, stop, err := gatewaytest.Serve(cfg)
		if err == nil {
			stop()
			t.Fatalf("a gateway whose issuer's metadata is %s started", c.path)
		}
		for _, says := range []string{"--oauth-issuer " + front.URL + c.path, c.says} {
			if !strings.Contains(err.Error(), says) {
				t.Errorf("the gateway refused to start with %q; want …%s…", err, says)
			}
		}
	}
	if n := front.elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's address was fetched %d times", n)
	}
}

// reSigned is token with its header and claims as they are, signed by a
// key of the attacker's.
func reSigned(t *testing.T, token string) string {
	t.Helper()
	parsed, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, parsed.Claims)
	forged.Header["kid"] = parsed.Header["kid"]
	s, err := forged.SignedString(rsaKey(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// front stands before the team's provider as a misconfigured or hostile
// one would, for an issuer identifier under its own address:
// FRONT/redirect redirects every metadata request to FRONT/elsewhere,
// FRONT/large answers with the provider's own metadata grown past 1 MiB
// (spaces before its closing brace: still valid JSON, to be read to its
// end).
type front struct {
	*httptest.Server
	elsewhere atomic.Int32 // requests that reached FRONT/elsewhere
}

func metadataFront(t *testing.T, idp *teamIdP) *front {
	t.Helper()
	resp, err := http.Get(idp.Base + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc = bytes.TrimSpace(doc)
	large := append(append(append([]byte{}, doc[:len(doc)-1]...), bytes.Repeat([]byte(" "), 1<<20)...), '}')
	f := &front{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/elsewhere"):
			f.elsewhere.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(doc)
		case strings.HasSuffix(r.URL.Path, "/redirect"):
			http.Redirect(w, r, f.URL+"/elsewhere", http.StatusFound)
		case strings.HasSuffix(r.URL.Path, "/large"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(large)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}
