package tokens

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/wire"
)

// The algorithms of each kind of key. A key verifies only the algorithms
// of its kind, so that neither alg "none" nor a token signed with HMAC
// using a public key as the secret is ever accepted.
var (
	hmacMethods       = []string{"HS256", "HS384", "HS512"}
	rsaMethods        = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	ed25519Methods    = []string{"EdDSA"}
	asymmetricMethods = append(append(append([]string{}, rsaMethods...), "ES256", "ES384", "ES512"), ed25519Methods...)
)

// methodsOf returns the algorithms that key may verify: ECDSA's depend on
// its curve (RFC 7518 section 3.4).
func methodsOf(key any) []string {
	switch k := key.(type) {
	case []byte:
		return hmacMethods
	case *rsa.PublicKey:
		return rsaMethods
	case ed25519.PublicKey:
		return ed25519Methods
	case *ecdsa.PublicKey:
		switch k.Curve.Params().Name {
		case "P-256":
			return []string{"ES256"}
		case "P-384":
			return []string{"ES384"}
		case "P-521":
			return []string{"ES512"}
		}
	}
	return nil
}

func fits(key any, method string) bool { return slices.Contains(methodsOf(key), method) }

// keyKind names a key's kind in a refusal.
func keyKind(key any) string {
	switch key.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "ECDSA"
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", key)
}

// parseSecret reads --jwt-secret-file: the raw secret, less one trailing
// newline (that an editor adds).
func parseSecret(data []byte) ([]byte, error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if len(data) < MinSecretBytes {
		return nil, fmt.Errorf("the secret is %d bytes; HMAC needs at least %d (RFC 7518 section 3.2), e.g. `head -c 32 /dev/urandom | base64`", len(data), MinSecretBytes)
	}
	return data, nil
}

// parsePublicKeys reads --jwt-public-key-file: one or more PEM blocks,
// each a PUBLIC KEY (PKIX: RSA, ECDSA or Ed25519), an RSA PUBLIC KEY
// (PKCS #1) or a CERTIFICATE, whose public key is taken and whose dates
// are not checked.
func parsePublicKeys(data []byte) ([]any, error) {
	var keys []any
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		default:
			if strings.Contains(block.Type, "PRIVATE KEY") {
				return nil, fmt.Errorf("PEM block %d is a private key (%s): give the gateway the public key only (`openssl pkey -pubout`)", n, block.Type)
			}
			return nil, fmt.Errorf("PEM block %d is a %s, not a PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", n, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, block.Type, err)
		}
		if err := checkPublicKey(key); err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, block.Type, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found (-----BEGIN PUBLIC KEY-----)")
	}
	return keys, nil
}

// checkPublicKey refuses the keys that can verify no JWT algorithm, and
// RSA keys too short to be safe.
func checkPublicKey(key any) error {
	if k, ok := key.(*rsa.PublicKey); ok && k.N.BitLen() < MinRSABits {
		return fmt.Errorf("the RSA key has %d bits, too weak: at least %d are needed", k.N.BitLen(), MinRSABits)
	}
	if methodsOf(key) == nil {
		return fmt.Errorf("a %T verifies no JWT algorithm: use an RSA, ECDSA (P-256, P-384, P-521) or Ed25519 key", key)
	}
	return nil
}

// registered are the registered claims of a JWT (RFC 7519 section 4.1) as
// they came, each decoded when asked for, so that a claim of the wrong type
// is refused by name rather than as a malformed token. The library checks
// exp, nbf, iat, iss and aud through these jwt.Claims methods.
type registered struct {
	Iss json.RawMessage `json:"iss"`
	Sub json.RawMessage `json:"sub"`
	Aud json.RawMessage `json:"aud"`
	Exp json.RawMessage `json:"exp"`
	Nbf json.RawMessage `json:"nbf"`
	Iat json.RawMessage `json:"iat"`
}

// claims are the claims of a JWT of --jwt-* keys: the registered ones,
// which the library checks, and this gateway's, which Validate checks.
// Every check of a claim is here (oauth_claims.go for an OAuth issuer's
// access tokens) or in the library, nowhere else.
type claims struct {
	registered
	Pods json.RawMessage `json:"pods"`
	Caps json.RawMessage `json:"caps"`
	JTI  json.RawMessage `json:"jti"`

	// What Validate found, for the identity.
	subject string
	pods    []string
	caps    []wire.Capability
	hasCaps bool
}

// refusalError carries a Refusal through the library, which wraps the
// errors of the key function and of the claims.
type refusalError struct{ r *Refusal }

func (e *refusalError) Error() string { return e.r.Message }

func claimRefusal(claim, format string, args ...any) error {
	return &refusalError{unauthorized(claim, format, args...)}
}

func absent(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func numericDate(claim string, raw json.RawMessage) (*jwt.NumericDate, error) {
	if absent(raw) {
		return nil, nil
	}
	var d jwt.NumericDate
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, claimRefusal(claim, "%s: the claim must be a number of seconds since 1970-01-01T00:00:00Z", claim)
	}
	return &d, nil
}

func stringClaim(claim string, raw json.RawMessage) (string, error) {
	if absent(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", claimRefusal(claim, "%s: the claim must be a string", claim)
	}
	return s, nil
}

func (c *registered) GetExpirationTime() (*jwt.NumericDate, error) { return numericDate("exp", c.Exp) }
func (c *registered) GetNotBefore() (*jwt.NumericDate, error)      { return numericDate("nbf", c.Nbf) }
func (c *registered) GetIssuedAt() (*jwt.NumericDate, error)       { return numericDate("iat", c.Iat) }
func (c *registered) GetIssuer() (string, error)                   { return stringClaim("iss", c.Iss) }
func (c *registered) GetSubject() (string, error)                  { return stringClaim("sub", c.Sub) }

func (c *registered) GetAudience() (jwt.ClaimStrings, error) {
	if absent(c.Aud) {
		return nil, nil
	}
	var aud jwt.ClaimStrings
	if err := json.Unmarshal(c.Aud, &aud); err != nil {
		return nil, claimRefusal("aud", "aud: the claim must be a string or a list of strings")
	}
	return aud, nil
}

// Validate checks the claims of this gateway (sub, pods, caps); the
// library calls it after the signature and its own checks.
func (c *claims) Validate() error {
	sub, err := c.GetSubject()
	if err != nil {
		return err
	}
	if sub == "" {
		return claimRefusal("sub", "sub: the token has no sub claim, which names the participant")
	}
	if !validParticipant(sub) {
		return claimRefusal("sub", "sub: the claim is not a valid participant id (1 to 128 characters of [A-Za-z0-9._:@-], not starting with system:)")
	}
	c.subject = sub
	if !absent(c.Pods) {
		if err := json.Unmarshal(c.Pods, &c.pods); err != nil || c.pods == nil {
			return claimRefusal("pods", `pods: the claim must be a list of pod names or patterns ("lab", "lab-*", "*")`)
		}
		for _, p := range c.pods {
			if p == "" {
				return claimRefusal("pods", "pods: the claim has an empty pod name")
			}
		}
	}
	if !absent(c.Caps) {
		if err := json.Unmarshal(c.Caps, &c.caps); err != nil || c.caps == nil {
			return claimRefusal("caps", `caps: the claim must be a list of capabilities ("chat", "mcp/*", or {"kind": PATTERN, "payload": PATTERN})`)
		}
		c.hasCaps = true
	}
	return nil
}

// verifyJWT verifies a token as a JWT with the keys of s: its alg, its
// key, its signature, then its claims. The refusal names what failed
// first, in that order.
func (v *Verifier) verifyJWT(ctx context.Context, s *state, token string) (*Identity, *Refusal) {
	c := &claims{}
	tok, err := s.parser.ParseWithClaims(token, c, v.keyFunc(ctx, s))
	if err != nil {
		return nil, v.refusalOf(s, tok, c, err)
	}
	id := &Identity{
		Participant:  c.subject,
		Capabilities: c.caps,
		Pods:         c.pods,
		Source:       SourceJWT,
	}
	// Named for the audit trail only; a jti of another type is no
	// refusal (nothing here decides by it).
	id.Issuer, _ = c.GetIssuer()
	id.JTI, _ = stringClaim("jti", c.JTI)
	id.KeyID, _ = tok.Header["kid"].(string)
	if !c.hasCaps {
		id.Capabilities = append([]wire.Capability{}, v.cfg.DefaultCapabilities...)
	}
	if id.Pods == nil {
		id.Pods = []string{"*"}
	}
	if exp, _ := c.GetExpirationTime(); exp != nil {
		id.Expires = exp.Add(Leeway)
	}
	return id, nil
}

// refusalOf turns the library's error into the refusal that names the
// claim. The library stops at the first of: a malformed token, an
// unknown or refused alg, the key function, the signature; then it checks
// every claim and joins what failed, of which exp, nbf, iat, iss and aud
// are named first.
func (v *Verifier) refusalOf(s *state, tok *jwt.Token, c jwt.Claims, err error) *Refusal {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized(ClaimToken, "the token is not a well-formed JWT: three base64url parts (header.claims.signature), the first two JSON objects")
	case tok == nil || tok.Method == nil:
		return unauthorized("alg", "alg: the token's header names no algorithm that this gateway knows; accepted: %s", strings.Join(s.methods, ", "))
	case !slices.Contains(s.methods, tok.Method.Alg()):
		return unauthorized("alg", "alg: %q is not accepted; accepted: %s (those of the configured keys)", tok.Method.Alg(), strings.Join(s.methods, ", "))
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := c.GetExpirationTime()
		return unauthorized("exp", "exp: the token expired at %s", exp.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		nbf, _ := c.GetNotBefore()
		return unauthorized("nbf", "nbf: the token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		iat, _ := c.GetIssuedAt()
		return unauthorized("iat", "iat: the token was issued at %s, in the future (clocks may differ by %s)", iat.UTC().Format(time.RFC3339), Leeway)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return unauthorized("iss", "iss: the token's issuer is not %q (--jwt-issuer)", v.cfg.Issuer)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauthorized("aud", "aud: the token's audience does not include %q (--jwt-audience)", v.cfg.Audience)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		// exp is required unless AllowNoExp; iss and aud when configured.
		if exp, err := c.GetExpirationTime(); !v.cfg.AllowNoExp && exp == nil && err == nil {
			if v.oauth != nil {
				return unauthorized("exp", "exp: the access token has no exp claim; this gateway takes only access tokens that expire")
			}
			return unauthorized("exp", "exp: the token has no exp claim; this gateway takes only tokens that expire (see --jwt-allow-no-exp)")
		}
		if iss, _ := c.GetIssuer(); v.cfg.Issuer != "" && iss == "" {
			return unauthorized("iss", "iss: the token has no iss claim; it must be %q (--jwt-issuer)", v.cfg.Issuer)
		}
		return unauthorized("aud", "aud: the token has no aud claim; it must include %q (--jwt-audience)", v.cfg.Audience)
	}
	var re *refusalError
	if errors.As(err, &re) {
		return re.r
	}
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		return unauthorized(ClaimSignature, "signature: the token's signature does not verify with the configured keys")
	}
	return unauthorized(ClaimToken, "the token could not be verified")
}

// keyFunc chooses the key that verifies a token: the secret for HMAC; for
// the others, the JWKS's key of the token's kid when there is one (its
// kind and its own alg must fit the token's alg), otherwise every key of
// the file and of the JWKS that fits the alg.
func (v *Verifier) keyFunc(ctx context.Context, s *state) jwt.Keyfunc {
	return func(tok *jwt.Token) (any, error) {
		method := tok.Method.Alg()
		if slices.Contains(hmacMethods, method) {
			// Only the secret file holds HMAC keys: a JWKS's "oct" keys
			// are never used, nor any public key as a secret.
			if s.secret == nil {
				return nil, &refusalError{unauthorized("alg", "alg: %q needs --jwt-secret-file, which this gateway lacks", method)}
			}
			return s.secret, nil
		}
		kidValue, hasKID := tok.Header["kid"]
		kid, ok := kidValue.(string)
		if hasKID && !ok {
			return nil, &refusalError{unauthorized("kid", "kid: the header's kid must be a string")}
		}
		var keys []any
		for _, k := range s.publicKeys {
			if fits(k, method) {
				keys = append(keys, k)
			}
		}
		if kid != "" && s.jwks != nil {
			key, r, known := v.jwksKey(ctx, s.jwks, kid, method)
			switch {
			case r != nil && !known && len(keys) > 0:
				// Not a key of the JWKS: perhaps one of the file, which
				// has no kids. A key of the JWKS that is refused is not
				// tried with the file's.
			case r != nil:
				return nil, &refusalError{r}
			default:
				return key, nil
			}
		} else if s.jwks != nil {
			for _, k := range s.jwks.all() {
				if fits(k, method) {
					keys = append(keys, k)
				}
			}
		}
		switch len(keys) {
		case 0:
			return nil, &refusalError{unauthorized("alg", "alg: no configured key verifies %q", method)}
		case 1:
			return keys[0], nil
		}
		set := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, len(keys))}
		for i, k := range keys {
			set.Keys[i] = k
		}
		return set, nil
	}
}

// publicOf returns the public half of a key that a JWKS gave in full.
func publicOf(key any) any {
	if k, ok := key.(crypto.Signer); ok {
		return k.Public()
	}
	return key
}
