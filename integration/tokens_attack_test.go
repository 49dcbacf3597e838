package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 31: tokens tried as an attacker would (docs/protocol.md section
// 1): a JWT that never expires, a JWT issued in the future, a JWKS key
// too weak to trust, a JWKS answer too large to hold, and a JWKS that
// sends the gateway elsewhere for its keys.

// TestJWTWithoutExpRefused: a JWT without exp (HS256 or RS256), or issued
// an hour from now, is refused at /ws and at POST /pods/NAME/envelopes
// with 401 and a message naming the claim, and nothing of it reaches the
// pod; a token of the token file, which has no exp, still joins. With
// --jwt-allow-no-exp the JWT without exp joins and publishes.
func TestJWTWithoutExpRefused(t *testing.T) {
	t.Parallel()
	tokenFile := harness.WriteFile(t, "tokens.json",
		`{"tokens": [{"token": "alice-t", "participant": "alice", "capabilities": ["*"], "pods": ["*"]}]}`)
	g, secret, key := jwtGateway(t, func(c *gateway.Config) { c.Tokens = tokenFile })
	const pod = "noexp-lab"
	alice := g.DialToken(t, pod, "alice-t", true, "")

	noExp := map[string]any{"exp": nil, "caps": []string{"*"}}
	for _, c := range []struct {
		name, token, says string
	}{
		{"HS256 without exp", signHS(t, secret, jwtClaims("mallory", noExp)), "exp: the token has no exp claim"},
		{"RS256 without exp", signRS(t, key, "", jwtClaims("mallory", noExp)), "exp: the token has no exp claim"},
		{"exp null", signHS(t, secret, jwtClaims("mallory", map[string]any{"caps": []string{"*"}, "exp": json.RawMessage("null")})), "exp: the token has no exp claim"},
		{"issued in an hour", signHS(t, secret, jwtClaims("mallory", map[string]any{"iat": time.Now().Add(time.Hour).Unix()})), "iat: "},
	} {
		status, r := refusalOf(t, g, pod, c.token)
		if status != http.StatusUnauthorized || r.Code != wire.CodeUnauthorized || !strings.HasPrefix(r.Message, c.says) {
			t.Errorf("%s at /ws: %d %+v; want 401 unauthorized %q…", c.name, status, r, c.says)
		}
		status, b := post(t, g, pod, c.token, map[string]any{"kind": "chat", "payload": map[string]any{"text": c.name}})
		var pr wire.Refusal
		if err := json.Unmarshal(b, &pr); status != http.StatusUnauthorized || err != nil || pr.Code != wire.CodeUnauthorized || !strings.HasPrefix(pr.Message, c.says) {
			t.Errorf("%s at POST: %d %s; want 401 unauthorized %q…", c.name, status, b, c.says)
		}
	}
	alice.ExpectNothing(200 * time.Millisecond)

	open, secret, _ := jwtGateway(t, func(c *gateway.Config) { c.JWTAllowNoExp = true })
	bob := open.DialToken(t, pod, signHS(t, secret, jwtClaims("bob", noExp)), true, "")
	if bob.Welcome.Payload()["you"].(map[string]any)["id"] != "bob" {
		t.Fatalf("bob's welcome: %v", bob.Welcome)
	}
	status, b := post(t, open, pod, signHS(t, secret, jwtClaims("carol", noExp)), map[string]any{"id": "c1", "kind": "chat"})
	if status != http.StatusOK {
		t.Fatalf("POST with a JWT without exp and --jwt-allow-no-exp: %d %s", status, b)
	}
	bob.ExpectEnvelope("chat", "c1")
}

// jwksHost serves a JWKS document that the test changes: as it is, grown
// to a size (spaces before its closing brace, so that it stays valid
// JSON and must be read to its end), or a redirect elsewhere.
type jwksHost struct {
	*httptest.Server
	doc      atomic.Value // []byte
	size     atomic.Int64
	redirect atomic.Value // string: where to, "" for none
	fetches  atomic.Int32
}

func newJWKSHost(t *testing.T, keys ...map[string]any) *jwksHost {
	t.Helper()
	h := &jwksHost{}
	h.doc.Store(harness.MustJSON(t, map[string]any{"keys": keys}))
	h.redirect.Store("")
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fetches.Add(1)
		if to := h.redirect.Load().(string); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		doc := h.doc.Load().([]byte)
		if n := int(h.size.Load()); n > len(doc) {
			var b bytes.Buffer
			b.Write(doc[:len(doc)-1])
			b.Write(bytes.Repeat([]byte(" "), n-len(doc)))
			b.WriteByte('}')
			doc = b.Bytes()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
		_, _ = w.Write(doc)
	}))
	t.Cleanup(h.Close)
	return h
}

// jwksConfig is a gateway's configuration that takes the JWKS at url.
func jwksConfig(c *gateway.Config, url string) {
	c.JWTJWKSURL, c.JWTIssuer, c.JWTAudience = url, testIssuer, testAudience
}

// refusesToStart checks that a gateway with the JWKS at url does not
// start, and that why names the flag and says what.
func refusesToStart(t *testing.T, url, what string) {
	t.Helper()
	cfg := gatewaytest.Config()
	jwksConfig(&cfg, url)
	_, stop, err := gatewaytest.Serve(cfg)
	if err == nil {
		stop()
		t.Fatalf("a gateway whose JWKS %s started", what)
	}
	for _, says := range []string{"--jwt-jwks-url", what} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("the gateway refused to start with %q; want …%s…", err, says)
		}
	}
}

// TestJWKSWeakKeyRefused: a 1024-bit RSA key in the JWKS is not used: a
// token signed with it is refused at /ws and at POST, saying the key is
// too weak, while a token of the JWKS's 2048-bit key joins; a JWKS whose
// only key is the weak one stops the gateway at start.
func TestJWKSWeakKeyRefused(t *testing.T) {
	t.Parallel()
	good := rsaKey(t)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	idp := newJWKSHost(t, jwkOf(good, "good"), jwkOf(weak, "weak"))
	g := harness.StartGateway(t, func(c *gateway.Config) { jwksConfig(c, idp.URL) })
	const pod = "weak-lab"
	alice := g.DialToken(t, pod, signRS(t, good, "good", jwtClaims("alice", nil)), true, "")

	forged := signRS(t, weak, "weak", jwtClaims("mallory", map[string]any{"caps": []string{"*"}}))
	status, r := refusalOf(t, g, pod, forged)
	if status != http.StatusUnauthorized || !strings.HasPrefix(r.Message, "kid:") || !strings.Contains(r.Message, "too weak") {
		t.Errorf("a token of the 1024-bit key at /ws: %d %+v", status, r)
	}
	status, b := post(t, g, pod, forged, map[string]any{"kind": "chat"})
	if status != http.StatusUnauthorized || !strings.Contains(string(b), "too weak") {
		t.Errorf("a token of the 1024-bit key at POST: %d %s", status, b)
	}
	alice.ExpectNothing(200 * time.Millisecond)

	refusesToStart(t, newJWKSHost(t, jwkOf(weak, "weak")).URL, "1024 bits")
}

// TestJWKSOversizedOrRedirectingRefused: a JWKS answer of 1 MiB starts
// the gateway, one byte more does not; a JWKS that answers with a
// redirect does not either, and the address it points to is never
// fetched.
func TestJWKSOversizedOrRedirectingRefused(t *testing.T) {
	t.Parallel()
	key := rsaKey(t)
	idp := newJWKSHost(t, jwkOf(key, "k1"))
	idp.size.Store(1 << 20)
	g := harness.StartGateway(t, func(c *gateway.Config) { jwksConfig(c, idp.URL) })
	g.DialToken(t, "big-lab", signRS(t, key, "k1", jwtClaims("alice", nil)), true, "")

	idp.size.Store(1<<20 + 1)
	refusesToStart(t, idp.URL, "larger than 1 MiB")

	evil := newJWKSHost(t, jwkOf(rsaKey(t), "k1"))
	idp.size.Store(0)
	idp.redirect.Store(evil.URL)
	refusesToStart(t, idp.URL, "302 Found")
	if n := evil.fetches.Load(); n != 0 {
		t.Errorf("the redirect's address was fetched %d times", n)
	}
}
