package tokens

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/wire"
)

// TestHS256SecretFile: an HS256 token signed with the secret of
// --jwt-secret-file is alice, with the default capabilities, every pod,
// and Expires at exp plus Leeway. The file's trailing newline is not part
// of the secret.
func TestHS256SecretFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "jwt.secret", secret+"\n")
	v := newVerifier(t, Config{JWTSecretFile: path, DefaultCapabilities: wire.Kinds("chat", "mcp/*")})
	if !v.Enabled() {
		t.Fatal("a verifier with a secret says it is not enabled")
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	token := sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(func(c jwt.MapClaims) { c["exp"] = exp.Unix() }))
	id := mustVerify(t, v, token, "lab")
	if id.Participant != "alice" || id.Source != SourceJWT || id.Pod != "lab" ||
		!slices.Equal(id.Pods, []string{"*"}) || capsJSON(id.Capabilities) != `["chat","mcp/*"]` ||
		!id.Expires.Equal(exp.Add(Leeway)) {
		t.Errorf("identity: %+v; want alice, every pod, chat and mcp/*, expiring at %s", id, exp.Add(Leeway))
	}
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodHS384, jwt.SigningMethodHS512} {
		mustVerify(t, v, sign(t, m, []byte(secret), "", claimsFor(nil)), "lab")
	}
	// Signed with the newline as part of the secret: another secret.
	mustRefuse(t, v, sign(t, jwt.SigningMethodHS256, []byte(secret+"\n"), "", claimsFor(nil)), "lab", 401, ClaimSignature)
}

// TestPublicKeyFiles: RS256, PS256, ES256 and EdDSA tokens verify with the
// public keys of --jwt-public-key-file, given as PUBLIC KEY, RSA PUBLIC
// KEY or CERTIFICATE, one key a file or all in one; a token of another
// key is refused for its signature.
func TestPublicKeyFiles(t *testing.T) {
	dir := t.TempDir()
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey().PublicKey)}))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idp.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rsaKey().PublicKey, rsaKey())
	if err != nil {
		t.Fatal(err)
	}
	cert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	all := pemPublic(t, &rsaKey().PublicKey, &ecKey().PublicKey, edKey().Public())

	for _, c := range []struct {
		name   string
		pem    string
		method jwt.SigningMethod
		key    any
	}{
		{"RS256, PUBLIC KEY", pemPublic(t, &rsaKey().PublicKey), jwt.SigningMethodRS256, rsaKey()},
		{"RS512, RSA PUBLIC KEY", pkcs1, jwt.SigningMethodRS512, rsaKey()},
		{"RS256, CERTIFICATE", cert, jwt.SigningMethodRS256, rsaKey()},
		{"PS256", pemPublic(t, &rsaKey().PublicKey), jwt.SigningMethodPS256, rsaKey()},
		{"ES256", pemPublic(t, &ecKey().PublicKey), jwt.SigningMethodES256, ecKey()},
		{"EdDSA", pemPublic(t, edKey().Public()), jwt.SigningMethodEdDSA, edKey()},
		{"RS256 of three keys", all, jwt.SigningMethodRS256, rsaKey()},
		{"ES256 of three keys", all, jwt.SigningMethodES256, ecKey()},
		{"EdDSA of three keys", all, jwt.SigningMethodEdDSA, edKey()},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVerifier(t, Config{JWTPublicKeyFile: writeFile(t, dir, "key.pem", c.pem)})
			id := mustVerify(t, v, sign(t, c.method, c.key, "", claimsFor(nil)), "lab")
			if id.Participant != "alice" || id.Source != SourceJWT {
				t.Errorf("identity: %+v", id)
			}
		})
	}

	v := newVerifier(t, Config{JWTPublicKeyFile: writeFile(t, dir, "rsa.pem", pemPublic(t, &rsaKey().PublicKey))})
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey2(), "", claimsFor(nil)), "lab", 401, ClaimSignature)
	// An ECDSA token, where only an RSA key is configured.
	mustRefuse(t, v, sign(t, jwt.SigningMethodES256, ecKey(), "", claimsFor(nil)), "lab", 401, "alg")

	// ES384 is P-384's: a P-256 key does not verify it.
	p384 := must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
	v = newVerifier(t, Config{JWTPublicKeyFile: writeFile(t, dir, "ec.pem", pemPublic(t, &ecKey().PublicKey))})
	mustRefuse(t, v, sign(t, jwt.SigningMethodES384, p384, "", claimsFor(nil)), "lab", 401, "alg")
}

// TestClaims: pods and caps as a JWT gives them; aud as a list. (A token
// without exp: TestJWTWithoutExp.)
func TestClaims(t *testing.T) {
	path := writeFile(t, t.TempDir(), "jwt.secret", secret)
	v := newVerifier(t, Config{JWTSecretFile: path, Audience: "mcpp", Issuer: "https://idp.test/", DefaultCapabilities: wire.Kinds("*")})
	token := func(edit func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(func(c jwt.MapClaims) {
			c["iss"], c["aud"] = "https://idp.test/", "mcpp"
			edit(c)
		}))
	}

	id := mustVerify(t, v, token(func(c jwt.MapClaims) {
		c["caps"] = []any{"chat", map[string]any{"kind": "mcp/request", "payload": map[string]any{"method": "tools/call"}}}
	}), "lab")
	caps, _ := json.Marshal(id.Capabilities)
	if string(caps) != `["chat",{"kind":"mcp/request","payload":{"method":"tools/call"}}]` {
		t.Errorf("caps: %s", caps)
	}
	if id := mustVerify(t, v, token(func(c jwt.MapClaims) { c["caps"] = []any{} }), "lab"); id.Capabilities == nil || len(id.Capabilities) != 0 {
		t.Errorf("caps []: %#v; want none", id.Capabilities)
	}
	if id := mustVerify(t, v, token(func(c jwt.MapClaims) {}), "lab"); capsJSON(id.Capabilities) != `["*"]` {
		t.Errorf("no caps: %#v; want the default", id.Capabilities)
	}

	pods := token(func(c jwt.MapClaims) { c["pods"] = []string{"lab", "lab-*"} })
	for _, pod := range []string{"lab", "lab-1", "lab-"} {
		if id := mustVerify(t, v, pods, pod); !slices.Equal(id.Pods, []string{"lab", "lab-*"}) {
			t.Errorf("pods: %v", id.Pods)
		}
	}
	for _, pod := range []string{"labs", "other"} {
		mustRefuse(t, v, pods, pod, 403, "pods")
	}
	mustRefuse(t, v, token(func(c jwt.MapClaims) { c["pods"] = []string{} }), "lab", 403, "pods")

	mustVerify(t, v, token(func(c jwt.MapClaims) { c["aud"] = []string{"other", "mcpp"} }), "lab")
	if id := mustVerify(t, v, token(func(c jwt.MapClaims) { c["sub"] = "bot@lab.example:7" }), ""); id.Participant != "bot@lab.example:7" || id.Pod != "" {
		t.Errorf("identity: %+v", id)
	}
}

// TestRefusals: every claim that fails is refused with its status, code
// and claim, in words that never contain the token.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	rsaPEM := pemPublic(t, &rsaKey().PublicKey)
	v := newVerifier(t, Config{
		JWTSecretFile:    writeFile(t, dir, "jwt.secret", secret),
		JWTPublicKeyFile: writeFile(t, dir, "rsa.pem", rsaPEM),
		Issuer:           "https://idp.test/",
		Audience:         "mcpp",
	})
	good := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		return claimsFor(func(c jwt.MapClaims) {
			c["iss"], c["aud"], c["pods"] = "https://idp.test/", "mcpp", []string{"lab-*"}
			if edit != nil {
				edit(c)
			}
		})
	}
	hs := func(edit func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodHS256, []byte(secret), "", good(edit))
	}
	rs := func(edit func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodRS256, rsaKey(), "", good(edit))
	}
	// The cases are good tokens but for one thing.
	mustVerify(t, v, hs(nil), "lab-1")
	mustVerify(t, v, rs(nil), "lab-1")

	hour := time.Hour
	for _, c := range []struct {
		name   string
		token  string
		status int
		claim  string
		says   string
	}{
		{"expired", hs(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-hour).Unix() }), 401, "exp", "expired at"},
		{"expired, RS256", rs(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-hour).Unix() }), 401, "exp", "expired at"},
		{"not yet valid", hs(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(hour).Unix() }), 401, "nbf", "not valid before"},
		{"exp not a number", hs(func(c jwt.MapClaims) { c["exp"] = "tomorrow" }), 401, "exp", "must be a number"},
		{"wrong issuer", hs(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" }), 401, "iss", `"https://idp.test/"`},
		{"no issuer", hs(func(c jwt.MapClaims) { delete(c, "iss") }), 401, "iss", "no iss claim"},
		{"wrong audience", hs(func(c jwt.MapClaims) { c["aud"] = []string{"other", "another"} }), 401, "aud", `"mcpp"`},
		{"no audience", hs(func(c jwt.MapClaims) { delete(c, "aud") }), 401, "aud", "no aud claim"},
		{"pod not allowed", hs(nil), 403, "pods", `may not join pod "lab"`},
		{"pods not a list", hs(func(c jwt.MapClaims) { c["pods"] = "lab-*" }), 401, "pods", "must be a list"},
		{"caps not capabilities", hs(func(c jwt.MapClaims) { c["caps"] = []any{42} }), 401, "caps", "must be a list of capabilities"},
		{"no sub", hs(func(c jwt.MapClaims) { delete(c, "sub") }), 401, "sub", "no sub claim"},
		{"sub of the gateway", hs(func(c jwt.MapClaims) { c["sub"] = "system:gateway" }), 401, "sub", "not a valid participant id"},
		{"sub not a string", hs(func(c jwt.MapClaims) { c["sub"] = 7 }), 401, "sub", "must be a string"},
		{"bad signature, HS256", sign(t, jwt.SigningMethodHS256, []byte(secret+"-other"), "", good(nil)), 401, ClaimSignature, "does not verify"},
		{"bad signature, RS256", sign(t, jwt.SigningMethodRS256, rsaKey2(), "", good(nil)), 401, ClaimSignature, "does not verify"},
		{"claims changed after signing", tamper(t, hs(nil)), 401, ClaimSignature, "does not verify"},
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", good(nil)), 401, "alg", `"none" is not accepted`},
		{"alg unknown", withHeader(t, hs(nil), `{"alg":"XX256","typ":"JWT"}`), 401, "alg", "no algorithm that this gateway knows"},
		{"alg absent", withHeader(t, hs(nil), `{"typ":"JWT"}`), 401, "alg", "no algorithm"},
		{"ES256 without an ECDSA key", sign(t, jwt.SigningMethodES256, ecKey(), "", good(nil)), 401, "alg", `"ES256" is not accepted`},
		{"malformed", "abc.def.ghi", 401, ClaimToken, "not a well-formed JWT"},
		{"claims not an object", withClaims(t, hs(nil), `["alice"]`), 401, ClaimToken, "not a well-formed JWT"},
		{"not a JWT", "plain-opaque-token", 401, ClaimToken, "not a JWT"},
		{"no token", "", 401, ClaimToken, "a token is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mustRefuse(t, v, c.token, "lab", c.status, c.claim)
			if !strings.Contains(r.Message, c.says) {
				t.Errorf("message %q; want …%s…", r.Message, c.says)
			}
		})
	}
}

// TestHMACWithPublicKey: a token signed with HMAC using the public key as
// the secret (the algorithm confusion attack) is refused: public keys are
// never HMAC secrets.
func TestHMACWithPublicKey(t *testing.T) {
	dir := t.TempDir()
	rsaPEM := pemPublic(t, &rsaKey().PublicKey)
	forged := sign(t, jwt.SigningMethodHS256, []byte(rsaPEM), "", claimsFor(nil))

	v := newVerifier(t, Config{JWTPublicKeyFile: writeFile(t, dir, "rsa.pem", rsaPEM)})
	if r := mustRefuse(t, v, forged, "lab", 401, "alg"); !strings.Contains(r.Message, `"HS256" is not accepted`) {
		t.Errorf("message: %q", r.Message)
	}
	// With a secret as well, HS256 is checked with the secret alone.
	v = newVerifier(t, Config{JWTPublicKeyFile: writeFile(t, dir, "rsa.pem", rsaPEM), JWTSecretFile: writeFile(t, dir, "jwt.secret", secret)})
	mustRefuse(t, v, forged, "lab", 401, ClaimSignature)
	// The same with a JWKS that serves the key, named by its kid.
	s := newJWKSServer(t, jwk{kid: "rsa-1", key: &rsaKey().PublicKey})
	v = newVerifier(t, Config{JWKSURL: s.URL})
	mustRefuse(t, v, sign(t, jwt.SigningMethodHS256, []byte(rsaPEM), "rsa-1", claimsFor(nil)), "lab", 401, "alg")
}

// TestLeeway: exp and nbf are honoured within Leeway, not beyond.
func TestLeeway(t *testing.T) {
	v := newVerifier(t, Config{JWTSecretFile: writeFile(t, t.TempDir(), "jwt.secret", secret)})
	at := time.Now().Truncate(time.Second)
	token := sign(t, jwt.SigningMethodHS256, []byte(secret), "", claimsFor(func(c jwt.MapClaims) {
		c["nbf"], c["exp"] = at.Unix(), at.Add(time.Minute).Unix()
	}))
	for _, c := range []struct {
		now   time.Time
		claim string // "" when accepted
	}{
		{at.Add(-Leeway - time.Millisecond), "nbf"},
		{at.Add(-Leeway / 2), ""},
		{at.Add(time.Minute + Leeway/2), ""},
		{at.Add(time.Minute + Leeway), "exp"},
	} {
		v.now = func() time.Time { return c.now }
		_, r := v.Verify(context.Background(), token, "lab")
		switch {
		case c.claim == "" && r != nil:
			t.Errorf("at %s: refused (%s)", c.now.Sub(at), r.Message)
		case c.claim != "" && (r == nil || r.Claim != c.claim):
			t.Errorf("at %s: %+v; want refused for %s", c.now.Sub(at), r, c.claim)
		}
	}
}

// TestNewErrors: each mistake of the configuration stops New, and the
// error names the flag.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	small := must(rsa.GenerateKey(rand.Reader, 1024))
	private := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(ecKey()))}))
	down := newJWKSServer(t)
	down.failing.Store(true)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"short secret", Config{JWTSecretFile: writeFile(t, dir, "short.secret", "hunter2\n")}, "--jwt-secret-file: the secret is 7 bytes; HMAC needs at least 32"},
		{"missing secret", Config{JWTSecretFile: dir + "/none.secret"}, "--jwt-secret-file: open"},
		{"no PEM", Config{JWTPublicKeyFile: writeFile(t, dir, "empty.pem", "not a key\n")}, "--jwt-public-key-file: no PEM block found"},
		{"private key", Config{JWTPublicKeyFile: writeFile(t, dir, "private.pem", private)}, "--jwt-public-key-file: PEM block 1 is a private key"},
		{"small RSA key", Config{JWTPublicKeyFile: writeFile(t, dir, "small.pem", pemPublic(t, &small.PublicKey))}, "--jwt-public-key-file: PEM block 1 (PUBLIC KEY): the RSA key has 1024 bits"},
		{"issuer without keys", Config{Issuer: "https://idp.test/"}, "--jwt-issuer: no JWT can be verified without"},
		{"audience without keys", Config{File: writeFile(t, dir, "t.json", `{"tokens": []}`), Audience: "mcpp"}, "--jwt-audience: no JWT can be verified without"},
		{"JWKS URL not http", Config{JWKSURL: "ftp://idp.test/jwks.json"}, "--jwt-jwks-url: \"ftp://idp.test/jwks.json\" is not an http:// or https:// address"},
		{"JWKS down", Config{JWKSURL: down.URL}, "--jwt-jwks-url: fetching " + down.URL},
		{"two at once", Config{JWTSecretFile: writeFile(t, dir, "s2", "x"), JWTPublicKeyFile: writeFile(t, dir, "e2.pem", "")}, "--jwt-secret-file: the secret is 1 bytes; HMAC needs at least 32 (RFC 7518 section 3.2), e.g. `head -c 32 /dev/urandom | base64`\n--jwt-public-key-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := New(context.Background(), c.cfg)
			if err == nil {
				t.Fatalf("accepted: %+v", v)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q; want …%s…", err, c.want)
			}
		})
	}
}

func capsJSON(caps []wire.Capability) string { return string(must(json.Marshal(caps))) }

// tamper changes a signed token's claims, keeping its signature.
func tamper(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := jwt.NewParser().DecodeSegment(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	c["sub"] = "mallory"
	return withClaims(t, token, string(must(json.Marshal(c))))
}

// withHeader replaces a token's header, keeping its claims and signature.
func withHeader(t *testing.T, token, header string) string {
	parts := strings.Split(token, ".")
	parts[0] = (&jwt.Token{}).EncodeSegment([]byte(header))
	return strings.Join(parts, ".")
}

// withClaims replaces a token's claims, keeping its header and signature.
func withClaims(t *testing.T, token, claims string) string {
	parts := strings.Split(token, ".")
	parts[1] = (&jwt.Token{}).EncodeSegment([]byte(claims))
	return strings.Join(parts, ".")
}
