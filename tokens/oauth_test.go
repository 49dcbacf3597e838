package tokens

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/wire"
)

// An OAuth issuer's access tokens, read by the rules of oauth.go and
// oauth_claims.go. The issuer here is the test's: its metadata and keys
// served as a provider serves them. The gateway's tests
// (integration/oauth_test.go) run a real OpenID provider.

// The gateway of these tests.
const testResource = "https://gw.example.com"

// issuerServer serves an issuer's metadata at the one well-known URL its
// form says, and its keys (a jwksServer): form "oauth" is RFC 8414's URL
// with the path inserted, "openid" OpenID Connect's inserted, "appended"
// OpenID Connect's appended.
type issuerServer struct {
	*httptest.Server
	URL     string // the issuer identifier: the server's address and path
	keys    *jwksServer
	meta    atomic.Pointer[map[string]any]
	fetches atomic.Int64
	status  atomic.Int64 // when not 0, the answer's status
}

func newIssuerServer(t *testing.T, path, form string, keys ...jwk) *issuerServer {
	t.Helper()
	s := &issuerServer{keys: newJWKSServer(t, keys...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := map[string]string{
			"oauth":    "/.well-known/oauth-authorization-server" + path,
			"openid":   "/.well-known/openid-configuration" + path,
			"appended": path + "/.well-known/openid-configuration",
		}[form]
		if r.URL.Path != want {
			http.NotFound(w, r)
			return
		}
		s.fetches.Add(1)
		if st := s.status.Load(); st != 0 {
			http.Error(w, "down", int(st))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(*s.meta.Load())
	}))
	t.Cleanup(s.Close)
	s.URL = s.Server.URL + path
	s.setMeta(map[string]any{"issuer": s.URL, "jwks_uri": s.keys.URL, "response_types_supported": []string{"code"}})
	return s
}

func (s *issuerServer) setMeta(m map[string]any) { s.meta.Store(&m) }

var rs256 = jwk{kid: "k1", alg: jwkset.AlgRS256, key: &rsaKey().PublicKey}

// oauthConfig takes the access tokens of iss, named team.
func oauthConfig(iss *issuerServer) Config {
	return Config{OAuthIssuers: []OAuthIssuer{{Name: "team", URL: iss.URL}}, OAuthResource: testResource}
}

// accessToken is a good access token of alice from iss for this gateway,
// with scopes; edit changes its claims.
func accessToken(t *testing.T, iss *issuerServer, scope string, edit func(jwt.MapClaims)) string {
	t.Helper()
	return sign(t, jwt.SigningMethodRS256, rsaKey(), "k1", claimsFor(func(c jwt.MapClaims) {
		c["iss"], c["aud"], c["scope"] = iss.URL, testResource, scope
		if edit != nil {
			edit(c)
		}
	}))
}

// TestOAuthAccessToken: a good access token's participant is the
// issuer's name and its sub; its scopes are its pods and capabilities,
// and nothing else is; a pod they do not name is 403 "scope".
func TestOAuthAccessToken(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	v := newVerifier(t, oauthConfig(iss))
	tok := accessToken(t, iss, "openid mcpp:pod:lab mcpp:pod:team-* mcpp:cap:chat mcpp:call:read_* other:scope", func(c jwt.MapClaims) {
		// issue 23's claims grant nothing to an access token.
		c["caps"], c["pods"] = []string{"*"}, []string{"*"}
	})
	id := mustVerify(t, v, tok, "lab")
	call := wire.Capability{Kind: "mcp/request", Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"read_*"}}`)}
	if id.Participant != "team:alice" || id.Source != SourceOAuth || !slices.Equal(id.Pods, []string{"lab", "team-*"}) ||
		len(id.Capabilities) != 2 || id.Capabilities[0].Kind != "chat" || id.Capabilities[1].Kind != call.Kind || string(id.Capabilities[1].Payload) != string(call.Payload) {
		t.Fatalf("identity: %+v", id)
	}
	if id.Expires.IsZero() {
		t.Error("an access token's identity has no expiry")
	}
	mustVerify(t, v, tok, "team-red")
	if r := mustRefuse(t, v, tok, "ops", 403, ClaimScope); !strings.Contains(r.Message, "mcpp:pod:ops") {
		t.Errorf("message: %q", r.Message)
	}
	// Okta's and Entra's scp, a list or a string.
	for _, scp := range []any{[]string{"mcpp:pod:lab", "mcpp:cap:chat"}, "mcpp:pod:lab mcpp:cap:chat"} {
		id := mustVerify(t, v, accessToken(t, iss, "", func(c jwt.MapClaims) { delete(c, "scope"); c["scp"] = scp }), "lab")
		if len(id.Capabilities) != 1 || id.Capabilities[0].Kind != "chat" {
			t.Errorf("scp %v: %+v", scp, id.Capabilities)
		}
	}
	// Without the gateway's scopes: no pod, and no capability (never
	// --default-capabilities, which a host could get by asking for less).
	bare := accessToken(t, iss, "openid profile", nil)
	mustRefuse(t, v, bare, "lab", 403, ClaimScope)
	v2 := newVerifier(t, func() Config { c := oauthConfig(iss); c.DefaultCapabilities = wire.Kinds("*"); return c }())
	if id := mustVerify(t, v2, accessToken(t, iss, "mcpp:pod:lab", nil), "lab"); len(id.Capabilities) != 0 {
		t.Errorf("a token without capability scopes has %v", id.Capabilities)
	}
}

// TestOAuthAudience: aud must name this gateway (RFC 8707): R, R/, R/mcp,
// or R/mcp?pod=POD for the pod joined; anything else, however close, is
// 401 "aud".
func TestOAuthAudience(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	v := newVerifier(t, oauthConfig(iss))
	withAud := func(aud any) string {
		return accessToken(t, iss, "mcpp:pod:*", func(c jwt.MapClaims) {
			if aud == nil {
				delete(c, "aud")
			} else {
				c["aud"] = aud
			}
		})
	}
	for _, aud := range []any{
		testResource, testResource + "/", testResource + "/mcp", testResource + "/mcp?pod=lab",
		testResource + "/mcp?pod=lab&contexts=none", testResource + "/mcp?contexts=none&pod=lab",
		[]string{"https://other.example", testResource + "/mcp"},
	} {
		mustVerify(t, v, withAud(aud), "lab")
	}
	for _, aud := range []any{
		nil, "", "https://other.example", []string{"https://other.example", "https://other.example/mcp"},
		"https://gw.example.com.evil", "http://gw.example.com", testResource + "/mcpx", testResource + "/mcp/",
		testResource + "/mcp?pod=ops", testResource + "/mcp?pod=lab&pod=ops", testResource + "/mcp?podx=lab",
		testResource + "/ws", "HTTPS://GW.EXAMPLE.COM",
	} {
		mustRefuse(t, v, withAud(aud), "lab", 401, "aud")
	}
	mustRefuse(t, v, withAud(5), "lab", 401, "aud")
}

// TestOAuthScopesRefused: an mcpp: scope that this gateway does not read
// is 401 "scope", as is one that would grant every kind; other scopes are
// ignored.
func TestOAuthScopesRefused(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	v := newVerifier(t, oauthConfig(iss))
	for _, scope := range []string{
		"mcpp:pod:lab mcpp:cap:*", "mcpp:pod:lab mcpp:cap:", "mcpp:pod:", "mcpp:pod:a/b", "mcpp:pod:lab mcpp:admin",
		"mcpp:pod:lab mcpp:call:", "mcpp:pod:lab mcpp:call:/(/",
	} {
		r := mustRefuse(t, v, accessToken(t, iss, scope, nil), "lab", 401, ClaimScope)
		if strings.Contains(scope, "mcpp:cap:*") && !strings.Contains(r.Message, "no scope grants every kind") {
			t.Errorf("%q: %q", scope, r.Message)
		}
	}
	// MCPP:CAP:* is not the gateway's: it grants nothing, and the token has
	// its pod alone.
	if id := mustVerify(t, v, accessToken(t, iss, "mcpp:pod:lab MCPP:CAP:*", nil), "lab"); len(id.Capabilities) != 0 {
		t.Errorf("MCPP:CAP:* gave %v", id.Capabilities)
	}
	for _, scope := range []any{5, map[string]any{"a": 1}, []any{"mcpp:pod:lab", 5}} {
		mustRefuse(t, v, accessToken(t, iss, "", func(c jwt.MapClaims) { c["scope"] = scope }), "lab", 401, ClaimScope)
	}
}

// TestOAuthParticipant: the participant is the issuer's name and the
// claim --oauth-participant-claim names (sub by default); one that makes
// no valid id is 401 naming the claim.
func TestOAuthParticipant(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	v := newVerifier(t, oauthConfig(iss))
	for _, sub := range []any{nil, "", 5, "auth0|12345", strings.Repeat("x", 124)} {
		tok := accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) {
			if sub == nil {
				delete(c, "sub")
			} else {
				c["sub"] = sub
			}
		})
		r := mustRefuse(t, v, tok, "lab", 401, "sub")
		if sub == "auth0|12345" && !strings.Contains(r.Message, "--oauth-participant-claim") {
			t.Errorf("message: %q", r.Message)
		}
	}
	cfg := oauthConfig(iss)
	cfg.OAuthParticipantClaim = "email"
	ve := newVerifier(t, cfg)
	tok := accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { c["sub"], c["email"] = "auth0|12345", "alice@example.com" })
	if id := mustVerify(t, ve, tok, "lab"); id.Participant != "team:alice@example.com" {
		t.Errorf("participant %q", id.Participant)
	}
	mustRefuse(t, ve, accessToken(t, iss, "mcpp:pod:lab", nil), "lab", 401, "email")
}

// TestOAuthJWTRules: an access token is held to issue 23's JWT rules: exp
// required (whatever --jwt-allow-no-exp says), iat not in the future, an
// alg of the issuer's keys (never HMAC), the issuer's own keys.
func TestOAuthJWTRules(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	cfg := oauthConfig(iss)
	cfg.AllowNoExp = true
	cfg.JWTSecretFile = writeFile(t, t.TempDir(), "secret", secret)
	v := newVerifier(t, cfg)
	r := mustRefuse(t, v, accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { delete(c, "exp") }), "lab", 401, "exp")
	if !strings.Contains(r.Message, "access token") {
		t.Errorf("message: %q", r.Message)
	}
	mustRefuse(t, v, accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), "lab", 401, "exp")
	mustRefuse(t, v, accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() }), "lab", 401, "iat")
	claims := claimsFor(func(c jwt.MapClaims) { c["iss"], c["aud"], c["scope"] = iss.URL, testResource, "mcpp:pod:lab" })
	// Signed with the gateway's HMAC secret, which verifies --jwt tokens.
	mustRefuse(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret), "", claims), "lab", 401, "alg")
	// Signed with another RSA key under the issuer's kid.
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey2(), "k1", claims), "lab", 401, ClaimSignature)
	// A --jwt token of another iss is still the secret's to verify.
	if id := mustVerify(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nil)), "lab"); id.Source != SourceJWT || id.Participant != "alice" {
		t.Errorf("a --jwt token: %+v", id)
	}
}

// TestOAuthUnknownIssuer: with OAuth issuers alone, a JWT of another iss is
// 401 "iss" naming those trusted; a token that is not a JWT, 401 "token".
func TestOAuthUnknownIssuer(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	v := newVerifier(t, oauthConfig(iss))
	other := accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { c["iss"] = "https://idp.evil" })
	if r := mustRefuse(t, v, other, "lab", 401, "iss"); !strings.Contains(r.Message, iss.URL) || !strings.Contains(r.Message, "https://idp.evil") {
		t.Errorf("message: %q", r.Message)
	}
	mustRefuse(t, v, accessToken(t, iss, "mcpp:pod:lab", func(c jwt.MapClaims) { delete(c, "iss") }), "lab", 401, "iss")
	mustRefuse(t, v, "not-a-jwt", "lab", 401, ClaimToken)
	mustRefuse(t, v, "", "lab", 401, ClaimToken)
}

// TestOAuthDiscovery: an issuer's metadata is found where MCP's
// authorization specification looks (RFC 8414 first, OpenID Connect
// next, path inserted, then appended); metadata that names another
// issuer, names no jwks_uri, or answers 500 stops New, naming the flag.
func TestOAuthDiscovery(t *testing.T) {
	for _, c := range []struct{ path, form string }{
		{"", "oauth"}, {"", "openid"}, {"/realms/team", "oauth"}, {"/realms/team", "openid"}, {"/realms/team", "appended"},
	} {
		iss := newIssuerServer(t, c.path, c.form, rs256)
		v := newVerifier(t, oauthConfig(iss))
		mustVerify(t, v, accessToken(t, iss, "mcpp:pod:lab", nil), "lab")
		if n := iss.fetches.Load(); n != 1 {
			t.Errorf("%s %s: the metadata was fetched %d times", c.path, c.form, n)
		}
	}
	iss := newIssuerServer(t, "/t", "openid", rs256)
	for _, c := range []struct {
		name string
		edit func()
		says string
	}{
		{"another issuer", func() { iss.setMeta(map[string]any{"issuer": iss.URL + "/", "jwks_uri": iss.keys.URL}) }, "names the issuer"},
		{"no jwks_uri", func() { iss.setMeta(map[string]any{"issuer": iss.URL}) }, "no http(s) jwks_uri"},
		{"500", func() { iss.status.Store(500) }, "500"},
		{"not found", func() { iss.status.Store(404) }, "no metadata found"},
	} {
		c.edit()
		_, err := New(context.Background(), oauthConfig(iss))
		if err == nil || !strings.Contains(err.Error(), "--oauth-issuer "+iss.URL) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: New: %v", c.name, err)
		}
		iss.status.Store(0)
	}
}

// TestOAuthReload: a reload fetches each issuer's metadata and keys again
// (a new jwks_uri is followed); one that fails keeps what the verifier
// had; the keys of a replaced issuer are no longer refreshed.
func TestOAuthReload(t *testing.T) {
	iss := newIssuerServer(t, "", "openid", rs256)
	cfg := oauthConfig(iss)
	cfg.JWKSRefresh = 20 * time.Millisecond
	v := newVerifier(t, cfg)
	tok := accessToken(t, iss, "mcpp:pod:lab", nil)
	mustVerify(t, v, tok, "lab")

	// The provider moves to a new key, at a new address.
	moved := newJWKSServer(t, jwk{kid: "k2", alg: jwkset.AlgRS256, key: &rsaKey2().PublicKey})
	iss.setMeta(map[string]any{"issuer": iss.URL, "jwks_uri": moved.URL})
	if err := v.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := sign(t, jwt.SigningMethodRS256, rsaKey2(), "k2", claimsFor(func(c jwt.MapClaims) {
		c["iss"], c["aud"], c["scope"] = iss.URL, testResource, "mcpp:pod:lab"
	}))
	mustVerify(t, v, fresh, "lab")
	mustRefuse(t, v, tok, "lab", 401, "kid")
	before := iss.keys.fetches.Load()
	time.Sleep(100 * time.Millisecond)
	if n := iss.keys.fetches.Load() - before; n > 1 {
		t.Errorf("the old keys were fetched %d times after the reload", n)
	}

	// A reload that cannot reach the metadata keeps what was there.
	iss.status.Store(503)
	if err := v.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "--oauth-issuer") {
		t.Fatalf("Reload: %v", err)
	}
	mustVerify(t, v, fresh, "lab")
}

// TestOAuthBesideTokens: the token file, --jwt keys and an OAuth issuer
// together: each token is verified by its own source.
func TestOAuthBesideTokens(t *testing.T) {
	iss := newIssuerServer(t, "", "oauth", rs256)
	dir := t.TempDir()
	cfg := oauthConfig(iss)
	cfg.File = writeFile(t, dir, "tokens.json", `{"tokens": [{"token": "s3cr3t", "participant": "bot", "capabilities": ["chat"], "pods": ["*"]}]}`)
	cfg.JWKSURL = newJWKSServer(t, jwk{kid: "j1", alg: jwkset.AlgES256, key: &ecKey().PublicKey}).URL
	v := newVerifier(t, cfg)
	if id := mustVerify(t, v, "s3cr3t", "lab"); id.Source != SourceFile || id.Participant != "bot" {
		t.Errorf("the file's token: %+v", id)
	}
	if id := mustVerify(t, v, sign(t, jwt.SigningMethodES256, ecKey(), "j1", claimsFor(nil)), "lab"); id.Source != SourceJWT {
		t.Errorf("the JWKS's token: %+v", id)
	}
	if id := mustVerify(t, v, accessToken(t, iss, "mcpp:pod:lab", nil), "lab"); id.Source != SourceOAuth || id.Participant != "team:alice" {
		t.Errorf("the issuer's token: %+v", id)
	}
	// The JWKS's key does not speak for the issuer.
	mustRefuse(t, v, sign(t, jwt.SigningMethodES256, ecKey(), "j1", claimsFor(func(c jwt.MapClaims) {
		c["iss"], c["aud"], c["scope"] = iss.URL, testResource, "mcpp:pod:lab"
	})), "lab", 401, "kid")
}

// TestParseOAuthFlags: the values of --oauth-issuer, --oauth-resource and
// --oauth-scopes, good and bad.
func TestParseOAuthFlags(t *testing.T) {
	for in, want := range map[string]OAuthIssuer{
		"https://idp.example.com":             {Name: "idp.example.com", URL: "https://idp.example.com"},
		"team=https://idp.example.com/realms": {Name: "team", URL: "https://idp.example.com/realms"},
		"http://127.0.0.1:9998":               {Name: "127.0.0.1:9998", URL: "http://127.0.0.1:9998"},
	} {
		if got, err := ParseOAuthIssuer(in); err != nil || got != want {
			t.Errorf("ParseOAuthIssuer(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "idp.example.com", "ftp://idp", "https://idp/?a=1", "https://idp/#x", "system=https://idp",
		"a b=https://idp", strings.Repeat("n", 33) + "=https://idp", "https://u:p@idp"} {
		if got, err := ParseOAuthIssuer(in); err == nil {
			t.Errorf("ParseOAuthIssuer(%q) = %+v", in, got)
		}
	}
	if err := CheckOAuthIssuers([]OAuthIssuer{{"a", "https://x"}, {"a", "https://y"}}); err == nil || !strings.Contains(err.Error(), "both named") {
		t.Errorf("two issuers of one name: %v", err)
	}
	for in, want := range map[string]string{
		"https://gw.example.com": "https://gw.example.com", "https://gw.example.com/": "https://gw.example.com",
		"https://gw.example.com/mcpp/": "https://gw.example.com/mcpp", "http://127.0.0.1:8080": "http://127.0.0.1:8080",
		"http://localhost:8080": "http://localhost:8080",
	} {
		if got, err := ParseOAuthResource(in); err != nil || got != want {
			t.Errorf("ParseOAuthResource(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "gw.example.com", "http://gw.example.com", "https://gw.example.com/?pod=a", "https://gw.example.com/#a", "https://gw.example.com/{x}"} {
		if got, err := ParseOAuthResource(in); err == nil {
			t.Errorf("ParseOAuthResource(%q) = %q", in, got)
		}
	}
	if got, err := ParseOAuthScopes("mcpp:cap:chat, mcpp:call:read_* openid"); err != nil || !slices.Equal(got, []string{"mcpp:cap:chat", "mcpp:call:read_*", "openid"}) {
		t.Errorf("ParseOAuthScopes: %v %v", got, err)
	}
	for _, in := range []string{"mcpp:cap:*", "mcpp:nope", `a"b`, "é"} {
		if _, err := ParseOAuthScopes(in); err == nil {
			t.Errorf("ParseOAuthScopes(%q) took it", in)
		}
	}
}
