package tokens

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// TestJWKSRotation: an identity provider whose JWKS rotates from key a to
// key b while tokens of a are in use. Tokens of b verify as soon as they
// come (their unknown kid fetches the JWKS); once a left the JWKS, new
// tokens of a are refused, while the identity verified with a is not
// revoked, even by a reload.
func TestJWKSRotation(t *testing.T) {
	a := jwk{kid: "key-a", alg: jwkset.AlgRS256, key: &rsaKey().PublicKey}
	b := jwk{kid: "key-b", alg: jwkset.AlgES256, key: &ecKey().PublicKey}
	s := newJWKSServer(t, a)
	v := newVerifier(t, Config{JWKSURL: s.URL})
	if got := s.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches at start; want 1", got)
	}

	tokenA := sign(t, jwt.SigningMethodRS256, rsaKey(), "key-a", claimsFor(nil))
	idA := mustVerify(t, v, tokenA, "lab")
	tokenB := sign(t, jwt.SigningMethodES256, ecKey(), "key-b", claimsFor(func(c jwt.MapClaims) { c["sub"] = "bob" }))

	// The provider publishes b beside a, then signs with b.
	s.serve(t, a, b)
	if id := mustVerify(t, v, tokenB, "lab"); id.Participant != "bob" {
		t.Errorf("identity of b: %+v", id)
	}
	if got := s.fetches.Load(); got != 2 {
		t.Errorf("%d fetches after the first token of b; want 2 (one for its kid)", got)
	}
	mustVerify(t, v, tokenA, "lab")

	// Then a leaves the JWKS. Until the JWKS is fetched again, a is still
	// known; after the reload (SIGHUP), new tokens of a are refused.
	s.serve(t, b)
	mustVerify(t, v, tokenA, "lab")
	if err := v.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := mustRefuse(t, v, tokenA, "lab", 401, "kid"); !strings.Contains(r.Message, `"key-a"`) {
		t.Errorf("message: %q", r.Message)
	}
	mustVerify(t, v, tokenB, "lab")
	if v.Revoked(idA) {
		t.Error("the identity verified with a is revoked: it should end at its own exp")
	}
}

// TestJWKSUnknownKID: a flood of tokens that name kids the JWKS lacks
// fetches it once, not once a token; the tokens of a key added meanwhile
// all verify, the others are refused; after UnknownKIDInterval, an
// unknown kid fetches it again.
func TestJWKSUnknownKID(t *testing.T) {
	a := jwk{kid: "key-a", key: &rsaKey().PublicKey}
	s := newJWKSServer(t, a)
	v := newVerifier(t, Config{JWKSURL: s.URL})
	if v.kidLimiter.Limit() != rate.Every(UnknownKIDInterval) {
		t.Fatalf("the unknown-kid limiter allows %v a second; want one per %s", v.kidLimiter.Limit(), UnknownKIDInterval)
	}
	// A shorter interval, so that the test need not wait 5 s for the
	// second fetch; the flood below ends well within it.
	const interval = 2 * time.Second
	v.kidLimiter = rate.NewLimiter(rate.Every(interval), 1)

	newKey := jwk{kid: "key-new", key: &rsaKey2().PublicKey}
	s.serve(t, a, newKey)
	s.delay.Store(int64(50 * time.Millisecond)) // so that the flood meets the fetch under way
	good := sign(t, jwt.SigningMethodRS256, rsaKey2(), "key-new", claimsFor(nil))
	flood := make([]string, 100)
	for i := range flood {
		flood[i] = good
		if i%2 == 1 {
			flood[i] = sign(t, jwt.SigningMethodRS256, rsaKey(), fmt.Sprintf("made-up-%d", i), claimsFor(nil))
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, len(flood))
	for _, token := range flood {
		wg.Go(func() {
			_, r := v.Verify(context.Background(), token, "lab")
			switch {
			case token == good && r != nil:
				errs <- "a token of the new key was refused: " + r.Message
			case token != good && (r == nil || r.Claim != "kid"):
				errs <- fmt.Sprintf("a made-up kid: %+v", r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if time.Since(start) > interval {
		t.Fatalf("the flood took %s, more than the interval: the count below means nothing", time.Since(start))
	}
	if got := s.fetches.Load(); got != 2 {
		t.Errorf("%d fetches; want 2: one at start, one for the flood", got)
	}

	time.Sleep(interval)
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey(), "made-up-again", claimsFor(nil)), "lab", 401, "kid")
	if got := s.fetches.Load(); got != 3 {
		t.Errorf("%d fetches; want 3: an unknown kid after the interval fetches again", got)
	}
}

// TestJWKSKeyChecks: a JWKS key verifies only the algorithms of its kind
// and its own alg; a token without kid is tried with every key that fits.
func TestJWKSKeyChecks(t *testing.T) {
	s := newJWKSServer(t,
		jwk{kid: "rsa", alg: jwkset.AlgRS256, key: &rsaKey().PublicKey},
		jwk{kid: "rsa-any-alg", key: &rsaKey().PublicKey},
		jwk{kid: "ec", key: &ecKey().PublicKey},
		jwk{kid: "ed", key: edKey().Public()})
	v := newVerifier(t, Config{JWKSURL: s.URL})

	mustVerify(t, v, sign(t, jwt.SigningMethodES256, ecKey(), "ec", claimsFor(nil)), "lab")
	mustVerify(t, v, sign(t, jwt.SigningMethodEdDSA, edKey(), "ed", claimsFor(nil)), "lab")
	// No kid: each key that fits is tried.
	mustVerify(t, v, sign(t, jwt.SigningMethodRS256, rsaKey(), "", claimsFor(nil)), "lab")
	mustVerify(t, v, sign(t, jwt.SigningMethodEdDSA, edKey(), "", claimsFor(nil)), "lab")

	// The RSA key says RS256: RS512 is refused, though RSA.
	if r := mustRefuse(t, v, sign(t, jwt.SigningMethodRS512, rsaKey(), "rsa", claimsFor(nil)), "lab", 401, "alg"); !strings.Contains(r.Message, "is for RS256") {
		t.Errorf("message: %q", r.Message)
	}
	mustVerify(t, v, sign(t, jwt.SigningMethodPS512, rsaKey(), "rsa-any-alg", claimsFor(nil)), "lab")
	// An ECDSA token that names an RSA key.
	if r := mustRefuse(t, v, sign(t, jwt.SigningMethodES256, ecKey(), "rsa-any-alg", claimsFor(nil)), "lab", 401, "alg"); !strings.Contains(r.Message, "an RSA key, which does not verify \"ES256\"") {
		t.Errorf("message: %q", r.Message)
	}
	// ES384 without kid: no key of the JWKS is on P-384.
	mustRefuse(t, v, sign(t, jwt.SigningMethodES384, must(ecdsaP384()), "", claimsFor(nil)), "lab", 401, "alg")
	// A kid that is not a string.
	token := sign(t, jwt.SigningMethodES256, ecKey(), "", claimsFor(nil))
	mustRefuse(t, v, withHeader(t, token, `{"alg":"ES256","kid":7}`), "lab", 401, "kid")
	// Signed by another key that claims the kid of the JWKS's.
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey2(), "rsa", claimsFor(nil)), "lab", 401, ClaimSignature)
}

// TestJWKSDown: a JWKS that cannot be fetched leaves the keys of the last
// fetch in use, at Reload as in the background, and the error names the
// flag.
func TestJWKSDown(t *testing.T) {
	s := newJWKSServer(t, jwk{kid: "key-a", key: &rsaKey().PublicKey})
	var logged bytes.Buffer
	v := newVerifier(t, Config{JWKSURL: s.URL, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	token := sign(t, jwt.SigningMethodRS256, rsaKey(), "key-a", claimsFor(nil))
	s.failing.Store(true)
	err := v.Reload(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "--jwt-jwks-url: ") || !strings.Contains(err.Error(), "500") {
		t.Errorf("Reload: %v", err)
	}
	mustVerify(t, v, token, "lab")
	// An unknown kid's fetch fails as well, and changes nothing.
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey(), "key-z", claimsFor(nil)), "lab", 401, "kid")
	mustVerify(t, v, token, "lab")
	if !strings.Contains(logged.String(), "the JWKS could not be fetched again; its previous keys stay in use") ||
		!strings.Contains(logged.String(), "a token names a kid that the JWKS lacks") {
		t.Errorf("the failed fetch was not logged: %s", logged.String())
	}
}

// TestJWKSRefresh: the JWKS is fetched again every JWKSRefresh, so that a
// key removed from it is refused without a reload.
func TestJWKSRefresh(t *testing.T) {
	a := jwk{kid: "key-a", key: &rsaKey().PublicKey}
	s := newJWKSServer(t, a)
	v := newVerifier(t, Config{JWKSURL: s.URL, JWKSRefresh: 50 * time.Millisecond})
	token := sign(t, jwt.SigningMethodRS256, rsaKey(), "key-a", claimsFor(nil))
	mustVerify(t, v, token, "lab")
	// Spend the unknown kid's fetch, so that only the refresh can
	// fetch the JWKS from now on.
	v.kidLimiter = rate.NewLimiter(0, 0)
	s.serve(t, jwk{kid: "key-b", key: &ecKey().PublicKey})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, r := v.Verify(context.Background(), token, "lab"); r != nil {
			if r.Claim != "kid" {
				t.Fatalf("refused for %s: %s", r.Claim, r.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key that left the JWKS is still accepted after 5 s (%d fetches)", s.fetches.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJWKSHTTPClient: the JWKS is fetched with Config.HTTPClient; one
// fetched over plain HTTP from another host than this one is warned
// about. (The client dials the test's server whatever the host named.)
func TestJWKSHTTPClient(t *testing.T) {
	s := newJWKSServer(t, jwk{kid: "key-a", key: &rsaKey().PublicKey})
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.Listener.Addr().String())
		},
	}}
	var logged bytes.Buffer
	v := newVerifier(t, Config{
		JWKSURL:    "http://user:hunter2@idp.example/jwks.json",
		HTTPClient: client,
		Logger:     slog.New(slog.NewTextHandler(&logged, nil)),
	})
	mustVerify(t, v, sign(t, jwt.SigningMethodRS256, rsaKey(), "key-a", claimsFor(nil)), "lab")
	if !strings.Contains(logged.String(), "the JWKS is fetched over plain HTTP") {
		t.Errorf("no warning: %s", logged.String())
	}
	if strings.Contains(logged.String(), "hunter2") {
		t.Errorf("the log gives the URL's password: %s", logged.String())
	}
}
