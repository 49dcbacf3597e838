package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 23: identities from JWTs, revocation, kicks, and capabilities
// granted at run time (docs/protocol.md sections 1, 2 and 6).

const (
	testIssuer   = "https://idp.example"
	testAudience = "mcpp-test"
)

// jwtClaims are a valid token's claims for sub, an hour long.
func jwtClaims(sub string, extra map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iss": testIssuer, "aud": testAudience,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func signHS(t *testing.T, secret []byte, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signRS(t *testing.T, key *rsa.PrivateKey, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func publicPEM(t *testing.T, k *rsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// jwkOf is k's public half as a JWK.
func jwkOf(k *rsa.PrivateKey, kid string) map[string]any {
	b64 := base64.RawURLEncoding.EncodeToString
	return map[string]any{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

// refusalOf dials with token and returns the refused upgrade's status and
// JSON body.
func refusalOf(t *testing.T, g *harness.Gateway, pod, token string) (int, wire.Refusal) {
	t.Helper()
	c, resp, err := harness.DialWebSocket(g.WS, url.Values{"pod": {pod}}, harness.Bearer(token))
	if err == nil {
		_ = c.CloseNow()
		t.Fatalf("the upgrade to %s succeeded, want a refusal", pod)
	}
	if resp == nil {
		t.Fatalf("no HTTP answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r wire.Refusal
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the refusal is not JSON: %q", b)
	}
	if strings.Contains(string(b), token) {
		t.Fatalf("the refusal echoes the token: %s", b)
	}
	return resp.StatusCode, r
}

// post sends one envelope over HTTP with token and returns the status and
// the body.
func post(t *testing.T, g *harness.Gateway, pod, token string, env any) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/pods/"+pod+"/envelopes", bytes.NewReader(harness.MustJSON(t, env)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// jwtGateway starts a gateway that verifies HS256 tokens with a secret
// file and RS256 tokens with a PEM public key, requiring the test's
// issuer and audience.
func jwtGateway(t *testing.T, edit func(*gateway.Config)) (*harness.Gateway, []byte, *rsa.PrivateKey) {
	t.Helper()
	secret := []byte("0123456789abcdef0123456789abcdef-test-secret")
	key := rsaKey(t)
	secretFile := harness.WriteFile(t, "secret", string(secret))
	keyFile := harness.WriteFile(t, "public.pem", publicPEM(t, key))
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.JWTSecretFile, c.JWTPublicKeyFile = secretFile, keyFile
		c.JWTIssuer, c.JWTAudience = testIssuer, testAudience
		c.DefaultCapabilities = "chat,context/*,conclusion"
		if edit != nil {
			edit(c)
		}
	})
	return g, secret, key
}

// TestJWTFromFiles: HS256 and RS256 tokens from files name the
// participant (sub), its capabilities (caps, or --default-capabilities)
// and the pods it may join; every claim that fails is refused with its
// status and code and named in the message, which never holds the token.
func TestJWTFromFiles(t *testing.T) {
	t.Parallel()
	g, secret, key := jwtGateway(t, nil)
	const pod = "jwt-lab"

	alice := g.DialToken(t, pod, signHS(t, secret, jwtClaims("alice", map[string]any{"caps": []string{"chat", "tool/*"}, "pods": []string{"jwt-*"}})), true, "")
	if !harness.JSONEqual(alice.Welcome.Payload()["you"], map[string]any{"id": "alice", "capabilities": []string{"chat", "tool/*"}}) {
		t.Fatalf("alice's welcome you = %v", alice.Welcome.Payload()["you"])
	}
	bob := g.DialToken(t, pod, signRS(t, key, "", jwtClaims("bob", nil)), false, "")
	if !harness.JSONEqual(bob.Welcome.Payload()["you"], map[string]any{"id": "bob", "capabilities": []string{"chat", "context/*", "conclusion"}}) {
		t.Fatalf("bob's welcome you (no caps claim: --default-capabilities) = %v", bob.Welcome.Payload()["you"])
	}
	harness.PresenceOf(t, alice.Expect(), "join", "bob")
	alice.Send(map[string]any{"id": "a1", "kind": "tool/run"})
	bob.ExpectEnvelope("tool/run", "a1")
	bob.Send(map[string]any{"id": "b1", "kind": "tool/run"})
	bob.ExpectError("capability_violation")

	other := []byte("another-secret-another-secret-another-secret")
	refused := []struct {
		name, token string
		status      int
		code        wire.Code
		claim       string
	}{
		{"expired", signHS(t, secret, jwtClaims("carol", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})), 401, wire.CodeUnauthorized, "exp:"},
		{"not yet valid", signRS(t, key, "", jwtClaims("carol", map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), 401, wire.CodeUnauthorized, "nbf:"},
		{"wrong issuer", signHS(t, secret, jwtClaims("carol", map[string]any{"iss": "https://evil.example"})), 401, wire.CodeUnauthorized, "iss:"},
		{"wrong audience", signRS(t, key, "", jwtClaims("carol", map[string]any{"aud": "another-service"})), 401, wire.CodeUnauthorized, "aud:"},
		{"pod not allowed", signHS(t, secret, jwtClaims("carol", map[string]any{"pods": []string{"other-*"}})), 403, wire.CodeForbidden, "pods:"},
		{"bad signature", signHS(t, other, jwtClaims("carol", nil)), 401, wire.CodeUnauthorized, "signature:"},
		{"alg none", unsigned(t, jwtClaims("carol", nil)), 401, wire.CodeUnauthorized, "alg:"},
		{"RS256 token signed by another key", signRS(t, rsaKey(t), "", jwtClaims("carol", nil)), 401, wire.CodeUnauthorized, "signature:"},
	}
	for _, r := range refused {
		status, body := refusalOf(t, g, pod, r.token)
		if status != r.status || body.Code != r.code || !strings.HasPrefix(body.Message, r.claim) {
			t.Errorf("%s: HTTP %d %+v, want %d %s with a message naming %q", r.name, status, body, r.status, r.code, r.claim)
		}
		// HTTP publishing answers the same.
		status, b := post(t, g, pod, r.token, map[string]any{"kind": "chat"})
		if status != r.status || !strings.Contains(string(b), r.claim) || strings.Contains(string(b), r.token) {
			t.Errorf("%s over HTTP: %d %s", r.name, status, b)
		}
	}
	// Nothing refused reached the pod.
	alice.ExpectNothing(200 * time.Millisecond)
}

// unsigned is a token with alg none.
func unsigned(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWKSRotation: the gateway verifies RS256 tokens with a JWKS served
// by the test. Its key rotates: tokens of the new key join (the gateway
// fetches the JWKS again for a kid it does not know), tokens of the old
// one no longer do, and the connections made with the old key stay up.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := rsaKey(t), rsaKey(t)
	var jwks atomic.Value
	jwks.Store(harness.MustJSON(t, map[string]any{"keys": []any{jwkOf(k1, "k1")}}))
	var fetches atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks.Load().([]byte))
	}))
	t.Cleanup(idp.Close)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.JWTJWKSURL, c.JWTIssuer, c.JWTAudience = idp.URL+"/.well-known/jwks.json", testIssuer, testAudience
	})
	const pod = "jwks-lab"
	alice := g.DialToken(t, pod, signRS(t, k1, "k1", jwtClaims("alice", nil)), true, "")

	// The identity provider rotates: k2 in, k1 out.
	jwks.Store(harness.MustJSON(t, map[string]any{"keys": []any{jwkOf(k2, "k2")}}))
	before := fetches.Load()
	bob := g.DialToken(t, pod, signRS(t, k2, "k2", jwtClaims("bob", nil)), true, "")
	if fetches.Load() == before {
		t.Fatal("the gateway accepted a token of an unknown kid without fetching the JWKS")
	}
	harness.PresenceOf(t, alice.Expect(), "join", "bob")
	status, r := refusalOf(t, g, pod, signRS(t, k1, "k1", jwtClaims("carol", nil)))
	if status != http.StatusUnauthorized || !strings.HasPrefix(r.Message, "kid:") {
		t.Fatalf("a token of the key that left the JWKS: %d %+v", status, r)
	}
	// alice's connection, made with k1, is still up both ways.
	harness.ExpectBothWays(alice, bob, "from-alice", "from-bob")
}

// TestTokenExpiry: a connection whose token expires is closed with 4401
// within 2s of exp; one that sent a fresh token first (gateway/refresh)
// stays, with the fresh token's claims.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	g, secret, _ := jwtGateway(t, nil)
	const pod = "jwt-expiry"
	exp := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	short := func(sub string) string {
		return signHS(t, secret, jwtClaims(sub, map[string]any{"exp": exp.Unix()}))
	}
	watcher := g.DialToken(t, pod, signHS(t, secret, jwtClaims("watcher", nil)), true, "")
	alice := g.DialToken(t, pod, short("alice"), true, "")
	bob := g.DialToken(t, pod, short("bob"), true, "")

	// A refresh must name the same participant, and be valid itself.
	bob.Send(map[string]any{"id": "r0", "kind": "gateway/refresh", "payload": map[string]any{"token": signHS(t, secret, jwtClaims("mallory", nil))}})
	if e := bob.ExpectError("auth_violation"); e.Str("correlation_id") != "r0" {
		t.Fatalf("%v", e)
	}
	expired := signHS(t, secret, jwtClaims("bob", map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}))
	bob.Send(map[string]any{"id": "r1", "kind": "gateway/refresh", "payload": map[string]any{"token": expired}})
	if e := bob.ExpectError("unauthorized"); !strings.HasPrefix(e.Payload()["message"].(string), "exp:") || strings.Contains(fmt.Sprint(e), expired) {
		t.Fatalf("%v", e)
	}
	fresh := signHS(t, secret, jwtClaims("bob", map[string]any{"caps": []string{"chat", "tool/*"}}))
	bob.Send(map[string]any{"id": "r2", "kind": "gateway/refresh", "payload": map[string]any{"token": fresh}})
	ans := bob.ExpectKind("system/refresh")
	if ans.Str("correlation_id") != "r2" || ans.Payload()["participant"] != "bob" || ans.Payload()["expires"] == nil ||
		!harness.JSONEqual(ans.Payload()["capabilities"], []string{"chat", "tool/*"}) {
		t.Fatalf("refresh answer %v", ans)
	}
	// The fresh token's capabilities apply from the next envelope on.
	bob.Send(map[string]any{"id": "b-tool", "kind": "tool/run"})
	watcher.ExpectEnvelope("tool/run", "b-tool")

	code := alice.WaitClosed(time.Until(exp) + 5*time.Second)
	late := time.Since(exp)
	if code != wire.CloseTokenExpired {
		t.Fatalf("alice's connection closed with %d, want %d", code, wire.CloseTokenExpired)
	}
	if late < -50*time.Millisecond || late > 2*time.Second {
		t.Fatalf("alice's connection closed %v after exp, want within 2s (and not before)", late)
	}
	watcher.AwaitPresence("leave", "alice", 2*time.Second)
	// bob is still there, 2s past the old exp.
	time.Sleep(time.Until(exp.Add(2 * time.Second)))
	bob.Send(map[string]any{"id": "b-late", "kind": "chat"})
	if m := watcher.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != "b-late" {
		t.Fatalf("bob, refreshed, did not get through after the old exp: %v", m)
	}
	// An open gateway has nothing to refresh.
	open := harness.StartGateway(t, nil)
	c := open.Dial(t, "open", "dev", "")
	c.Send(map[string]any{"id": "r3", "kind": "gateway/refresh", "payload": map[string]any{"token": "x"}})
	c.ExpectError("unknown_request")
}

// TestRevokeBySIGHUP: an operator removes tokens from the token file and
// sends SIGHUP: the connections and MCP sessions of those tokens end
// (4403 for a connection), everyone sees them leave, and the tokens are
// refused from then on; the others stay.
func TestRevokeBySIGHUP(t *testing.T) {
	if harness.HistoryOff() {
		t.Log("the MCP session of this test needs history: it runs with the gateway's default")
	}
	t.Parallel()
	dir := t.TempDir()
	file := dir + "/tokens.json"
	write := func(entries ...string) {
		if err := os.WriteFile(file, []byte(`{"tokens": [`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const (
		alice = `{"token": "alice-t", "participant": "alice", "capabilities": ["*"], "pods": ["*"]}`
		bob   = `{"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]}`
		carol = `{"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]}`
	)
	write(alice, bob, carol)
	var env []string
	if harness.HistoryOff() {
		env = []string{"MCPP_HISTORY=10000"}
	}
	proc := harness.StartGatewayProc(t, env, "--listen", "127.0.0.1:0", "--tokens", file)
	g := proc.GW
	const pod = "revoke-lab"
	a := g.DialToken(t, pod, "alice-t", true, "")
	b := g.DialToken(t, pod, "bob-t", true, "")
	harness.PresenceOf(t, a.Expect(), "join", "bob")
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("carol-t")})
	harness.MCPOK(t, cs, "pod_participants", map[string]any{})
	a.AwaitPresence("join", "carol", 5*time.Second)

	write(alice)
	if err := proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := b.WaitClosed(5 * time.Second); code != wire.CloseRevoked {
		t.Fatalf("bob's connection closed with %d, want %d", code, wire.CloseRevoked)
	}
	left := map[string]bool{}
	for len(left) < 2 {
		m := a.Expect()
		if m.Kind() == "system/presence" && m.Payload()["event"] == "leave" {
			p, _ := m.Payload()["participant"].(map[string]any)
			left[p["id"].(string)] = true
		}
	}
	if !left["bob"] || !left["carol"] {
		t.Fatalf("left: %v, want bob and carol", left)
	}
	if status, _ := refusalOf(t, g, pod, "bob-t"); status != http.StatusUnauthorized {
		t.Fatalf("bob's revoked token: HTTP %d, want 401", status)
	}
	if status, _ := post(t, g, pod, "carol-t", map[string]any{"kind": "chat"}); status != http.StatusUnauthorized {
		t.Fatalf("carol's revoked token over HTTP: %d, want 401", status)
	}
	if !strings.Contains(proc.Stderr.String(), "tokens reloaded") {
		t.Fatalf("the gateway did not log the reload:\n%s", proc.Stderr)
	}
	// alice is unaffected.
	a.Send(map[string]any{"id": "still-here", "kind": "chat"})
	a.Send(map[string]any{"id": "f", "kind": "gateway/filter", "payload": map[string]any{}})
	a.ExpectKind("system/filter")
}

// kickTokens is a token file of a moderator that may kick and three
// participants that may not.
func kickTokens(t *testing.T) string {
	return harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "mod-t", "participant": "mod", "capabilities": ["chat", "gateway/kick"], "pods": ["*"]},
  {"token": "alice-t", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]}
]}`)
}

// TestKick: gateway/kick, over WebSocket, HTTP and MCP, closes the
// participant's connection with 4410, tells everyone why it left, and
// refuses its joins (and posts) while its ban lasts.
func TestKick(t *testing.T) {
	t.Parallel()
	file := kickTokens(t)
	// History on whatever MCPP_TEST_HISTORY says: the MCP endpoint needs it.
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file; c.History = 1000 })
	const pod = "kick-lab"
	mod := g.DialToken(t, pod, "mod-t", true, "")
	alice := g.DialToken(t, pod, "alice-t", true, "")
	bob := g.DialToken(t, pod, "bob-t", true, "")
	mod.AwaitPresence("join", "bob", 5*time.Second)
	alice.AwaitPresence("join", "bob", 5*time.Second)

	// Kicking needs the capability.
	bob.Send(map[string]any{"id": "k0", "kind": "gateway/kick", "payload": map[string]any{"participant": "alice"}})
	if e := bob.ExpectError("capability_violation"); e.Payload()["attempted_kind"] != "gateway/kick" {
		t.Fatalf("%v", e)
	}
	mod.Send(map[string]any{"id": "k-bad", "kind": "gateway/kick", "payload": map[string]any{"participant": "bob", "ban_ms": -1}})
	mod.ExpectError("invalid_envelope")

	const ban = 1500 * time.Millisecond
	mod.Send(map[string]any{"id": "k1", "kind": "gateway/kick", "payload": map[string]any{"participant": "bob", "reason": "looping", "ban_ms": ban.Milliseconds()}})
	var ans harness.Msg
	for ans == nil || ans.Kind() == "system/presence" {
		ans = mod.Expect()
	}
	if ans.Kind() != "system/kick" || ans.Str("correlation_id") != "k1" || ans.Payload()["participant"] != "bob" ||
		ans.Payload()["connections"] != 1.0 || ans.Payload()["banned_until"] == nil {
		t.Fatalf("kick answer %v", ans)
	}
	banned := time.Now()
	if code := bob.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("bob's connection closed with %d, want %d", code, wire.CloseKicked)
	}
	if reason := leaveReason(t, alice, "bob"); !strings.Contains(reason, "mod") || !strings.Contains(reason, "looping") {
		t.Fatalf("alice saw bob leave with reason %q, want who kicked and why", reason)
	}
	status, r := refusalOf(t, g, pod, "bob-t")
	if status != http.StatusForbidden || r.Code != wire.CodeForbidden || !strings.Contains(r.Message, "kicked") {
		t.Fatalf("bob's rejoin while banned: %d %+v", status, r)
	}
	if status, b := post(t, g, pod, "bob-t", map[string]any{"kind": "chat"}); status != http.StatusForbidden {
		t.Fatalf("bob's post while banned: %d %s", status, b)
	}
	if _, err := harness.MCPDial(g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("bob-t")}); err == nil {
		t.Fatal("bob's MCP session while banned was accepted")
	}
	time.Sleep(time.Until(banned.Add(ban + 100*time.Millisecond)))
	bob = g.DialToken(t, pod, "bob-t", true, "")
	alice.AwaitPresence("join", "bob", 5*time.Second)

	// Over HTTP, without a ban: alice may come back at once.
	status, b := post(t, g, pod, "mod-t", map[string]any{"id": "k2", "kind": "gateway/kick", "payload": map[string]any{"participant": "alice"}})
	var pa wire.PublishAnswer
	if err := json.Unmarshal(b, &pa); status != http.StatusOK || err != nil || len(pa.Results) != 1 ||
		!strings.Contains(string(pa.Results[0].Answer), `"participant":"alice"`) {
		t.Fatalf("kick over HTTP: %d %s", status, b)
	}
	if code := alice.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("alice's connection closed with %d, want %d", code, wire.CloseKicked)
	}
	alice = g.DialToken(t, pod, "alice-t", true, "")

	// Over MCP: the moderator's session kicks carol.
	carol := g.DialToken(t, pod, "carol-t", true, "")
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("mod-t")})
	res := harness.MCPOK(t, cs, "participant_kick", map[string]any{"participant": "carol", "reason": "spam"})
	if res.Out["participant"] != "carol" || res.Out["connections"] != 1.0 {
		t.Fatalf("participant_kick answered %v", res.Out)
	}
	if code := carol.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("carol's connection closed with %d, want %d", code, wire.CloseKicked)
	}
	if reason := leaveReason(t, alice, "carol"); !strings.Contains(reason, "spam") {
		t.Fatalf("carol left with reason %q", reason)
	}
	// An MCP session is kicked too: the moderator kicks itself.
	harness.MCPOK(t, cs, "participant_kick", map[string]any{"participant": "mod", "reason": "done"})
	if reason := leaveReason(t, alice, "mod"); !strings.Contains(reason, "done") {
		t.Fatalf("mod left with reason %q", reason)
	}
}

// leaveReason waits for c to see id leave and returns the reason given.
func leaveReason(t *testing.T, c *harness.Client, id string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() != "system/presence" || m.Payload()["event"] != "leave" {
			continue
		}
		if p, _ := m.Payload()["participant"].(map[string]any); p["id"] == id {
			r, _ := m.Payload()["reason"].(string)
			return r
		}
	}
	t.Fatalf("%s: no leave of %s within 5s", c.ID, id)
	return ""
}

// grantTokens: alice may grant and do anything; bob may chat, open
// contexts, and call one MCP method by its payload; carol may chat, grant,
// and call the read_* tools (what she grants: a grantor holds what it
// grants). Both may send the tests' sentinels (test/*).
func grantTokens(t *testing.T) string {
	return harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "alice-t", "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat", "test/*", "context/*", "conclusion",
     {"kind": "mcp/request", "payload": {"method": "tools/list"}}], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat", "test/*", "capability/grant",
     {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}], "pods": ["*"]}
]}`)
}

// grant sends a capability/grant from c and returns the gateway's answer.
func grant(t *testing.T, c *harness.Client, id string, payload map[string]any) harness.Msg {
	t.Helper()
	c.Send(map[string]any{"id": id, "kind": "capability/grant", "to": []string{payload["recipient"].(string)}, "payload": payload})
	for {
		m := c.Expect()
		if m.Kind() == "system/capability" || m.Kind() == "system/error" {
			if m.Str("correlation_id") != id {
				t.Fatalf("answer %v does not name grant %s", m, id)
			}
			return m
		}
	}
}

// sendsAs sends an envelope from c and reports whether to received it
// (true) or c was refused with capability_violation (false).
func sendsAs(t *testing.T, c, to *harness.Client, id string, env map[string]any) bool {
	t.Helper()
	env["id"] = id
	c.Send(env)
	// The answer to a request comes after the refusals of what came
	// before it; the sentinel reaches to after what c sent before it.
	c.Send(map[string]any{"id": id + "-sync", "kind": "gateway/filter", "payload": map[string]any{}})
	harness.Sentinel(c, id+"-end", to)
	refused := false
	for {
		m := c.Expect()
		if m.ErrCode() != "" && m.Str("correlation_id") == id {
			if m.ErrCode() != "capability_violation" {
				t.Fatalf("%s: refused with %v", id, m)
			}
			refused = true
		}
		if m.Kind() == "system/filter" && m.Str("correlation_id") == id+"-sync" {
			break
		}
	}
	relayed := false
	for _, m := range harness.Until(to, id+"-end") {
		if m.Str("id") == id {
			relayed = true
		}
	}
	if relayed == refused {
		t.Fatalf("%s: relayed %v and refused %v", id, relayed, refused)
	}
	return relayed
}

// TestGrantScopedToContext: a grant scoped to a context holds in that
// context and its subtree only, and ends, with a word to its recipient,
// the moment the context concludes: by a conclusion kind, and by timeout.
func TestGrantScopedToContext(t *testing.T) {
	t.Parallel()
	file := grantTokens(t)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file })
	const pod = "grant-lab"
	alice, bob := grantPair(t, g, pod)

	task := map[string]any{"id": "task-1", "type": "task"}
	alice.Send(harness.LabelEnv("context/branch", "open-task", task))
	sub := map[string]any{"id": "task-1-sub", "type": "step", "parent": "task-1"}
	alice.Send(harness.LabelEnv("context/branch", "open-sub", sub))
	other := map[string]any{"id": "other-1", "type": "task"}
	alice.Send(harness.LabelEnv("context/branch", "open-other", other))

	if sendsAs(t, bob, alice, "before", map[string]any{"kind": "tool/run", "context": "task-1"}) {
		t.Fatal("bob ran a tool before any grant")
	}
	ans := grant(t, alice, "g-task", map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}, "context": "task-1", "reason": "for this task"})
	if ans.Kind() != "system/capability" || ans.Payload()["event"] != "granted" || ans.Payload()["grant_id"] != "g-task" ||
		ans.Payload()["context"] != "task-1" || !harness.JSONEqual(ans.Payload()["capabilities"], []string{"tool/*"}) {
		t.Fatalf("grant answer %v", ans)
	}
	// The recipient receives the grant itself.
	for m := bob.Expect(); m.Str("id") != "g-task"; m = bob.Expect() {
	}

	if !sendsAs(t, bob, alice, "in-task", map[string]any{"kind": "tool/run", "context": "task-1"}) {
		t.Fatal("bob's tool run in the granted context was refused")
	}
	if !sendsAs(t, bob, alice, "in-sub", map[string]any{"kind": "tool/run", "context": "task-1-sub"}) {
		t.Fatal("bob's tool run in a child of the granted context was refused")
	}
	if sendsAs(t, bob, alice, "in-main", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the scoped grant held outside its context (main)")
	}
	if sendsAs(t, bob, alice, "in-other", map[string]any{"kind": "tool/run", "context": "other-1"}) {
		t.Fatal("the scoped grant held in another context")
	}

	// The context concludes: the grant ends with it, and bob is told.
	alice.Send(map[string]any{"id": "done", "kind": "conclusion", "context": "task-1", "payload": map[string]any{"summary": "done"}})
	ended := capabilityEvent(t, bob, "ended")
	if ended.Payload()["grant_id"] != "g-task" || ended.Payload()["context"] != "task-1" {
		t.Fatalf("bob was told %v", ended)
	}
	if sendsAs(t, bob, alice, "after", map[string]any{"kind": "tool/run", "context": "task-1"}) {
		t.Fatal("the grant held after its context concluded")
	}

	// By timeout: a context nobody speaks in for --context-timeout.
	g = harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file; c.ContextTimeout = 2 * time.Second })
	alice, bob = grantPair(t, g, pod)
	alice.Send(harness.LabelEnv("context/branch", "open-quick", map[string]any{"id": "quick", "type": "task"}))
	grant(t, alice, "g-quick", map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}, "context": "quick"})
	if !sendsAs(t, bob, alice, "quick-1", map[string]any{"kind": "tool/run", "context": "quick"}) {
		t.Fatal("bob's tool run in the second granted context was refused")
	}
	start := time.Now()
	ended = capabilityEvent(t, bob, "ended")
	if ended.Payload()["grant_id"] != "g-quick" || time.Since(start) > 5*time.Second {
		t.Fatalf("bob was told %v after %v", ended, time.Since(start))
	}
	if sendsAs(t, bob, alice, "quick-2", map[string]any{"kind": "tool/run", "context": "quick"}) {
		t.Fatal("the grant held after its context timed out")
	}
}

// grantPair joins alice and bob, both following every context.
func grantPair(t *testing.T, g *harness.Gateway, pod string) (alice, bob *harness.Client) {
	t.Helper()
	alice = g.DialToken(t, pod, "alice-t", true, "contexts=all")
	bob = g.DialToken(t, pod, "bob-t", true, "contexts=all")
	alice.AwaitPresence("join", "bob", 5*time.Second)
	return alice, bob
}

// capabilityEvent skips envelopes until a system/capability of event.
func capabilityEvent(t *testing.T, c *harness.Client, event string) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m != nil && m.Kind() == "system/capability" && m.Payload()["event"] == event {
			return m
		}
	}
	t.Fatalf("%s: no system/capability %s within 10s", c.ID, event)
	return nil
}

// TestGrantPayloadPattern: capabilities match the payload as well as the
// kind, in a token's capabilities and in a grant; a revoke ends a grant
// (its recipient is told), and only a holder of capability/grant may
// grant.
func TestGrantPayloadPattern(t *testing.T) {
	t.Parallel()
	file := grantTokens(t)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file })
	const pod = "pattern-lab"
	alice := g.DialToken(t, pod, "alice-t", true, "")
	bob := g.DialToken(t, pod, "bob-t", true, "")
	carol := g.DialToken(t, pod, "carol-t", true, "")
	alice.AwaitPresence("join", "carol", 5*time.Second)
	bob.AwaitPresence("join", "carol", 5*time.Second)

	call := func(method, tool string) map[string]any {
		p := map[string]any{"jsonrpc": "2.0", "id": 1, "method": method}
		if tool != "" {
			p["params"] = map[string]any{"name": tool, "arguments": map[string]any{}}
		}
		return map[string]any{"kind": "mcp/request", "to": []string{"alice"}, "payload": p}
	}
	if !sendsAs(t, bob, alice, "list", call("tools/list", "")) {
		t.Fatal("the token's payload pattern did not allow tools/list")
	}
	bob.Send(map[string]any{"id": "call0", "kind": "mcp/request", "to": []string{"alice"}, "payload": call("tools/call", "read_file")["payload"]})
	if e := bob.ExpectError("capability_violation"); !strings.Contains(e.Payload()["message"].(string), "payload") {
		t.Fatalf("%v", e)
	}

	// bob may not grant; carol may, but only a grant of her own is hers
	// to revoke.
	bob.Send(map[string]any{"id": "g-bob", "kind": "capability/grant", "to": []string{"bob"},
		"payload": map[string]any{"recipient": "bob", "capabilities": []string{"*"}}})
	bob.ExpectError("capability_violation")

	pattern := map[string]any{"kind": "mcp/request", "payload": map[string]any{"method": "tools/call", "params": map[string]any{"name": "read_*"}}}
	if ans := grant(t, carol, "g-read", map[string]any{"recipient": "bob", "capabilities": []any{pattern}}); ans.Payload()["event"] != "granted" {
		t.Fatalf("grant answer %v", ans)
	}
	if !sendsAs(t, bob, alice, "read", call("tools/call", "read_file")) {
		t.Fatal("the granted payload pattern did not allow read_file")
	}
	if sendsAs(t, bob, alice, "write", call("tools/call", "write_file")) {
		t.Fatal("the granted payload pattern allowed write_file")
	}
	alice.Send(map[string]any{"id": "rv-alice", "kind": "capability/revoke", "to": []string{"bob"}, "payload": map[string]any{"recipient": "bob", "grant_id": "g-read"}})
	alice.ExpectError("capability_violation")

	carol.Send(map[string]any{"id": "rv", "kind": "capability/revoke", "to": []string{"bob"}, "payload": map[string]any{"recipient": "bob", "grant_id": "g-read"}})
	if ev := capabilityEvent(t, bob, "revoked"); ev.Payload()["grant_id"] != "g-read" {
		t.Fatalf("bob was told %v", ev)
	}
	if sendsAs(t, bob, alice, "read-again", call("tools/call", "read_file")) {
		t.Fatal("the grant held after it was revoked")
	}
}

// TestGrantAcrossCluster: a grant made on one node of a three-node
// cluster is enforced on the others, for the recipient's connection
// there and for a new one; its revocation too.
func TestGrantAcrossCluster(t *testing.T) {
	t.Parallel()
	// alice holds what she grants (delegation never amplifies); bob and
	// carol may not run tools.
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "alice-t", "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat", "probe", "test/*", "capability/*"], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat", "probe", "test/*", "capability/*"], "pods": ["*"]},
  `+probeTokens+`
]}`)
	nodes := startCluster(t, 3, "--tokens", tokens)
	const pod = "grant-cluster"
	alice := nodes[0].GW.DialToken(t, pod, "alice-t", true, "")
	bob := nodes[1].GW.DialToken(t, pod, "bob-t", true, "")
	carol := nodes[2].GW.DialToken(t, pod, "carol-t", true, "")
	alice.AwaitPresence("join", "carol", 10*time.Second)
	if sendsAs(t, bob, alice, "before", map[string]any{"kind": "tool/run"}) {
		t.Fatal("bob ran a tool before any grant")
	}
	grant(t, alice, "g-1", map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}})
	// Node 2 applies the grant before it hands it to bob.
	for m := bob.Expect(); m.Str("id") != "g-1"; m = bob.Expect() {
	}
	if !sendsAs(t, bob, alice, "on-node-2", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the grant made on node 1 did not hold on node 2")
	}
	if sendsAs(t, carol, alice, "carol", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the grant to bob let carol run a tool")
	}
	// bob moves to node 3: the grant is the pod's, not the connection's.
	_ = bob.Conn.Close()
	alice.AwaitPresence("leave", "bob", 10*time.Second)
	bob = nodes[2].GW.DialToken(t, pod, "bob-t", true, "")
	alice.AwaitPresence("join", "bob", 10*time.Second)
	if !sendsAs(t, bob, alice, "on-node-3", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the grant made on node 1 did not hold on node 3")
	}
	alice.Send(map[string]any{"id": "rv", "kind": "capability/revoke", "to": []string{"bob"}, "payload": map[string]any{"recipient": "bob", "grant_id": "g-1"}})
	capabilityEvent(t, bob, "revoked")
	if sendsAs(t, bob, alice, "after", map[string]any{"kind": "tool/run"}) {
		t.Fatal("the revoked grant still held on node 3")
	}
}
