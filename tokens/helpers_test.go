package tokens

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// secret is an HMAC secret of the length RFC 7518 asks for.
const secret = "0123456789abcdef0123456789abcdef-mcpp"

// Keys made once for the whole test binary: an RSA key takes a while.
var (
	rsaKey  = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 2048)) })
	rsaKey2 = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 2048)) })
	ecKey   = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
	edKey   = sync.OnceValue(func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	})
)

func ecdsaP384() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P384(), rand.Reader) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// writeFile writes a file of the test's directory, readable by its owner
// only, as the gateway's files of secrets should be.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pemPublic writes public keys as PEM PUBLIC KEY (PKIX) blocks.
func pemPublic(t *testing.T, keys ...any) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	return b.String()
}

// claimsFor are the claims of a good token of alice, valid for an hour;
// edit changes them.
func claimsFor(edit func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub": "alice",
		"iat": now.Unix(),
		"nbf": now.Add(-time.Minute).Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}
	if edit != nil {
		edit(c)
	}
	return c
}

// sign makes a JWT with golang-jwt; kid, when not empty, goes in its
// header.
func sign(t *testing.T, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newVerifier(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// mustVerify verifies a token that must be accepted.
func mustVerify(t *testing.T, v *Verifier, token, pod string) *Identity {
	t.Helper()
	id, r := v.Verify(context.Background(), token, pod)
	if r != nil {
		t.Fatalf("refused: %d %s %s: %s", r.Status, r.Code, r.Claim, r.Message)
	}
	return id
}

// mustRefuse verifies a token that must be refused, with this status and
// naming this claim, and checks that the refusal does not give the token
// back, whole or in part.
func mustRefuse(t *testing.T, v *Verifier, token, pod string, status int, claim string) *Refusal {
	t.Helper()
	id, r := v.Verify(context.Background(), token, pod)
	if r == nil {
		t.Fatalf("accepted as %+v; want %d (%s)", id, status, claim)
	}
	if r.Status != status || r.Claim != claim {
		t.Fatalf("refused %d naming %q (%s); want %d naming %q", r.Status, r.Claim, r.Message, status, claim)
	}
	if want := map[int]string{401: "unauthorized", 403: "forbidden"}[status]; string(r.Code) != want || r.Wire().Code != r.Code {
		t.Fatalf("code %q; want %q", r.Code, want)
	}
	if r.Code.HTTPStatus() != r.Status {
		t.Fatalf("status %d, but the code %q is answered with %d", r.Status, r.Code, r.Code.HTTPStatus())
	}
	if !strings.Contains(r.Message, claim) && claim != ClaimToken {
		t.Fatalf("the message %q does not name the claim %q", r.Message, claim)
	}
	assertNoToken(t, r.Message, token)
	return r
}

// assertNoToken fails when msg contains the token or one of its parts.
func assertNoToken(t *testing.T, msg, token string) {
	t.Helper()
	if token == "" {
		return
	}
	if strings.Contains(msg, token) {
		t.Fatalf("the message %q contains the token", msg)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 && strings.Contains(msg, part) {
			t.Fatalf("the message %q contains a part of the token (%q)", msg, part)
		}
	}
}

// jwksServer serves a JWKS that a test changes, and counts its fetches.
type jwksServer struct {
	*httptest.Server
	body    atomic.Pointer[[]byte]
	fetches atomic.Int64
	failing atomic.Bool
	delay   atomic.Int64 // nanoseconds each answer waits
}

// jwk is one key of a served JWKS.
type jwk struct {
	kid string
	alg jwkset.ALG
	key any // a public key
}

func newJWKSServer(t *testing.T, keys ...jwk) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.serve(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		time.Sleep(time.Duration(s.delay.Load()))
		if s.failing.Load() {
			http.Error(w, "the identity provider is down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*s.body.Load())
	}))
	t.Cleanup(s.Close)
	return s
}

// serve replaces the keys served, as an identity provider that rotates
// its keys does.
func (s *jwksServer) serve(t *testing.T, keys ...jwk) {
	t.Helper()
	store := jwkset.NewMemoryStorage()
	for _, k := range keys {
		j, err := jwkset.NewJWKFromKey(k.key, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.kid, ALG: k.alg, USE: jwkset.UseSig},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.KeyWrite(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	body, err := store.JSONPublic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(body)
	s.body.Store(&b)
}
