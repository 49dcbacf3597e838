package tokens

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// weakRSAKey is an RSA key under MinRSABits, as an old identity provider
// might still publish.
var weakRSAKey = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 1024)) })

// TestJWKSWeakKeys: a JWKS key is held to the minimums of a PEM key. A
// 1024-bit RSA key beside a good one is not used: a token that names it
// is refused, saying it is too weak (also when a key file is configured
// beside the JWKS), and a token without kid signed with it does not
// verify; the weak key is logged. A JWKS whose every key for signatures
// is refused stops New, and at Reload keeps the keys fetched before.
func TestJWKSWeakKeys(t *testing.T) {
	good := jwk{kid: "good", alg: jwkset.AlgRS256, key: &rsaKey().PublicKey}
	weak := jwk{kid: "weak", alg: jwkset.AlgRS256, key: &weakRSAKey().PublicKey}
	s := newJWKSServer(t, good, weak)
	var logged bytes.Buffer
	v := newVerifier(t, Config{JWKSURL: s.URL, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	goodToken := sign(t, jwt.SigningMethodRS256, rsaKey(), "good", claimsFor(nil))
	mustVerify(t, v, goodToken, "lab")

	weakToken := sign(t, jwt.SigningMethodRS256, weakRSAKey(), "weak", claimsFor(nil))
	r := mustRefuse(t, v, weakToken, "lab", 401, "kid")
	for _, says := range []string{`"weak"`, "too weak", "1024 bits", "at least 2048"} {
		if !strings.Contains(r.Message, says) {
			t.Errorf("message %q; want …%s…", r.Message, says)
		}
	}
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, weakRSAKey(), "", claimsFor(nil)), "lab", 401, ClaimSignature)
	if !strings.Contains(logged.String(), "weak") || !strings.Contains(logged.String(), "1024 bits") {
		t.Errorf("the weak key was not logged: %s", logged.String())
	}

	// With a key file beside the JWKS, the weak key's token is still
	// refused for its key, not tried with the file's.
	withFile := newVerifier(t, Config{JWKSURL: s.URL, JWTPublicKeyFile: writeFile(t, t.TempDir(), "rsa.pem", pemPublic(t, &rsaKey2().PublicKey))})
	if r := mustRefuse(t, withFile, weakToken, "lab", 401, "kid"); !strings.Contains(r.Message, "too weak") {
		t.Errorf("message %q; want …too weak…", r.Message)
	}

	// Only weak keys: New fails, naming the flag and the key.
	only := newJWKSServer(t, weak)
	_, err := New(context.Background(), Config{JWKSURL: only.URL, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.HasPrefix(err.Error(), "--jwt-jwks-url: ") || !strings.Contains(err.Error(), `"weak"`) || !strings.Contains(err.Error(), "1024 bits") {
		t.Errorf("New with a JWKS of a 1024-bit key: %v", err)
	}

	// The provider replaces its keys with the weak one: the reload fails
	// and the good key stays in use.
	s.serve(t, weak)
	if err := v.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "1024 bits") {
		t.Errorf("Reload with a JWKS of a 1024-bit key: %v", err)
	}
	mustVerify(t, v, goodToken, "lab")
	mustRefuse(t, v, weakToken, "lab", 401, "kid")
}

// answerServer serves the JWKS of one good key, and then what a test
// tells it: the same JWKS grown to a size, or a redirect.
type answerServer struct {
	*httptest.Server
	jwks     []byte
	size     atomic.Int64 // bytes of the answer (the JWKS, padded); 0: the JWKS as it is
	chunked  atomic.Bool  // no Content-Length
	redirect atomic.Int64 // a 3xx status to answer instead, to redirectTo
	to       string
}

func newAnswerServer(t *testing.T, redirectTo string) *answerServer {
	t.Helper()
	s := &answerServer{to: redirectTo}
	js := newJWKSServer(t, jwk{kid: "good", alg: jwkset.AlgRS256, key: &rsaKey().PublicKey})
	s.jwks = *js.body.Load()
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code := int(s.redirect.Load()); code != 0 {
			http.Redirect(w, r, s.to, code)
			return
		}
		body := s.jwks
		if n := int(s.size.Load()); n > 0 {
			// Spaces before the closing brace: the JSON stays valid and
			// whoever decodes it must read it to the end.
			object := bytes.TrimSpace(body)
			var b bytes.Buffer
			b.Write(object[:len(object)-1])
			b.Write(bytes.Repeat([]byte(" "), n-len(object)))
			b.WriteByte('}')
			body = b.Bytes()
		}
		w.Header().Set("Content-Type", "application/json")
		if !s.chunked.Load() {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		for len(body) > 0 {
			n := min(len(body), 32<<10)
			if _, err := w.Write(body[:n]); err != nil {
				return
			}
			body = body[n:]
			if s.chunked.Load() {
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestJWKSAnswerBounded: a JWKS answer of MaxJWKSBytes is read; one byte
// more is refused, with or without Content-Length: at New, which fails
// naming the flag and the bound, and later, when the keys fetched before
// stay in use.
func TestJWKSAnswerBounded(t *testing.T) {
	if MaxJWKSBytes != 1<<20 {
		t.Fatalf("MaxJWKSBytes is %d; the documentation says 1 MiB", MaxJWKSBytes)
	}
	s := newAnswerServer(t, "")
	token := sign(t, jwt.SigningMethodRS256, rsaKey(), "good", claimsFor(nil))
	for _, chunked := range []bool{false, true} {
		s.chunked.Store(chunked)
		s.size.Store(MaxJWKSBytes)
		mustVerify(t, newVerifier(t, Config{JWKSURL: s.URL}), token, "lab")

		s.size.Store(MaxJWKSBytes + 1)
		_, err := New(context.Background(), Config{JWKSURL: s.URL, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.HasPrefix(err.Error(), "--jwt-jwks-url: ") || !strings.Contains(err.Error(), "larger than 1 MiB") {
			t.Errorf("chunked %v: New with a JWKS of 1 MiB + 1 byte: %v", chunked, err)
		}
	}

	s.size.Store(0)
	var logged bytes.Buffer
	v := newVerifier(t, Config{JWKSURL: s.URL, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	s.size.Store(8 << 20)
	if err := v.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("Reload with a JWKS of 8 MiB: %v", err)
	}
	mustVerify(t, v, token, "lab")
	// An unknown kid fetches it again, in vain.
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey(), "other", claimsFor(nil)), "lab", 401, "kid")
	if !strings.Contains(logged.String(), "larger than 1 MiB") {
		t.Errorf("the failed fetch was not logged: %s", logged.String())
	}
	mustVerify(t, v, token, "lab")
}

// TestJWKSRedirect: a JWKS that answers with a redirect is a failed fetch
// that names the status, and the address it points to is never fetched
// (whoever controls the first server's answers must not choose the keys
// by sending the gateway elsewhere). At New it stops the verifier, also
// with a Config.HTTPClient, which is left as it was; later, the keys
// fetched before stay in use, and a token of the other server's key is
// refused.
func TestJWKSRedirect(t *testing.T) {
	evil := newJWKSServer(t, jwk{kid: "evil", alg: jwkset.AlgRS256, key: &rsaKey2().PublicKey})
	s := newAnswerServer(t, evil.URL)
	client := &http.Client{}
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		s.redirect.Store(int64(code))
		for _, c := range []*http.Client{nil, client} {
			_, err := New(context.Background(), Config{JWKSURL: s.URL, HTTPClient: c, Logger: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.HasPrefix(err.Error(), "--jwt-jwks-url: ") || !strings.Contains(err.Error(), fmt.Sprintf("%d %s", code, http.StatusText(code))) ||
				!strings.Contains(err.Error(), "redirect") {
				t.Errorf("New with a JWKS that answers %d: %v", code, err)
			}
		}
	}
	if client.CheckRedirect != nil || client.Transport != nil {
		t.Error("New changed the Config's HTTPClient")
	}

	s.redirect.Store(0)
	var logged bytes.Buffer
	v := newVerifier(t, Config{JWKSURL: s.URL, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	good := sign(t, jwt.SigningMethodRS256, rsaKey(), "good", claimsFor(nil))
	mustVerify(t, v, good, "lab")
	s.redirect.Store(http.StatusFound)
	mustRefuse(t, v, sign(t, jwt.SigningMethodRS256, rsaKey2(), "evil", claimsFor(nil)), "lab", 401, "kid")
	if err := v.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "302 Found") {
		t.Errorf("Reload with a JWKS that redirects: %v", err)
	}
	mustVerify(t, v, good, "lab")
	if !strings.Contains(logged.String(), "302 Found") {
		t.Errorf("the failed fetch was not logged: %s", logged.String())
	}
	if n := evil.fetches.Load(); n != 0 {
		t.Errorf("the address of the redirect was fetched %d times", n)
	}
}
