package tokens

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/wire"
)

// TestJWTWithoutExp: a JWT without exp would live until its key changes,
// so it is refused (401, naming exp) unless Config.AllowNoExp says
// otherwise; then it never expires. exp spelled null counts as absent.
// A token of the token file has no exp and is not affected.
func TestJWTWithoutExp(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		File:             writeFile(t, dir, "tokens.json", `{"tokens": [{"token": "file-token", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]}]}`),
		JWTSecretFile:    writeFile(t, dir, "jwt.secret", secret),
		JWTPublicKeyFile: writeFile(t, dir, "rsa.pem", pemPublic(t, &rsaKey().PublicKey)),
	}
	noExp := func(c jwt.MapClaims) { delete(c, "exp") }
	nullExp := func(c jwt.MapClaims) { c["exp"] = nil }
	tokens := []string{
		sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(noExp)),
		sign(t, jwt.SigningMethodRS256, rsaKey(), "", claimsFor(noExp)),
		sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(nullExp)),
	}

	v := newVerifier(t, cfg)
	for _, token := range tokens {
		r := mustRefuse(t, v, token, "lab", 401, "exp")
		if !strings.HasPrefix(r.Message, "exp: the token has no exp claim") {
			t.Errorf("message %q; want exp: the token has no exp claim…", r.Message)
		}
	}
	if id := mustVerify(t, v, "file-token", "lab"); id.Participant != "bob" || !id.Expires.IsZero() {
		t.Errorf("the token file's token: %+v", id)
	}

	cfg.AllowNoExp = true
	v = newVerifier(t, cfg)
	for _, token := range tokens {
		if id := mustVerify(t, v, token, "lab"); id.Participant != "alice" || !id.Expires.IsZero() {
			t.Errorf("with AllowNoExp: %+v; want alice, never expiring", id)
		}
	}
	// AllowNoExp does not make an expired token good.
	mustRefuse(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(func(c jwt.MapClaims) {
		c["exp"] = time.Now().Add(-time.Hour).Unix()
	})), "lab", 401, "exp")
}

// TestIssuedAt: a JWT issued in the future (beyond Leeway) is refused,
// naming iat: a clock that runs ahead at the identity provider, or a
// token minted to be used later. An iat that is not a number is refused;
// an absent one, or one in the past, is accepted.
func TestIssuedAt(t *testing.T) {
	v := newVerifier(t, Config{JWTSecretFile: writeFile(t, t.TempDir(), "jwt.secret", secret), DefaultCapabilities: wire.Kinds("chat")})
	at := time.Now().Truncate(time.Second)
	v.now = func() time.Time { return at }
	withIAT := func(iat any) string {
		return sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(func(c jwt.MapClaims) {
			c["iat"], c["nbf"], c["exp"] = iat, at.Add(-time.Hour).Unix(), at.Add(time.Hour).Unix()
			if iat == nil {
				delete(c, "iat")
			}
		}))
	}
	for _, iat := range []any{nil, at.Add(-time.Hour).Unix(), at.Unix(), at.Add(Leeway).Unix()} {
		mustVerify(t, v, withIAT(iat), "lab")
	}
	for _, c := range []struct {
		iat  any
		says string
	}{
		{at.Add(Leeway + time.Second).Unix(), "iat: the token was issued at " + at.Add(Leeway+time.Second).UTC().Format(time.RFC3339) + ", in the future"},
		{at.Add(24 * time.Hour).Unix(), "in the future"},
		{"yesterday", "iat: the claim must be a number"},
	} {
		if r := mustRefuse(t, v, withIAT(c.iat), "lab", 401, "iat"); !strings.Contains(r.Message, c.says) {
			t.Errorf("iat %v: message %q; want …%s…", c.iat, r.Message, c.says)
		}
	}
}
