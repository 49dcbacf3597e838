package tokens

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/internal/filewatch"
	"github.com/mcpp/gateway/wire"
)

// The verifier's fixed durations, each with its reason.
const (
	// Leeway is how far exp, nbf and iat may be missed: the clocks of the
	// gateway and of whoever signs the tokens differ by a little. A token
	// is valid from nbf - Leeway until exp + Leeway (Identity.Expires),
	// and one whose iat is later than now + Leeway is refused.
	Leeway = 1 * time.Second

	// UnknownKIDInterval is the least time between two fetches of the
	// JWKS caused by tokens that name a kid the JWKS lacks: a new key is
	// found within that time, and a flood of made-up kids costs the
	// JWKS's server one request per interval, not one per token.
	UnknownKIDInterval = 5 * time.Second

	// DefaultJWKSRefresh is how often the JWKS is fetched again when
	// Config.JWKSRefresh is zero, so that a key removed from it stops
	// being accepted for new joins even without a SIGHUP.
	DefaultJWKSRefresh = time.Hour

	// JWKSTimeout bounds one fetch of the JWKS, at start, at Reload and
	// later.
	JWKSTimeout = 10 * time.Second

	// MaxJWKSBytes is the largest JWKS answer read (1 MiB): a JWKS of a
	// few keys takes a few KiB, and a server that answers with more must
	// not make the gateway hold it all. A larger answer is a failed
	// fetch.
	MaxJWKSBytes = 1 << 20

	// MinSecretBytes is the shortest HMAC secret accepted: RFC 7518
	// section 3.2 asks for a key at least as long as the hash (HS256: 32
	// bytes). A shorter one can be found from any token by brute force.
	MinSecretBytes = 32

	// MinRSABits is the smallest RSA key accepted (RFC 7518 section 3.3
	// asks for 2048 bits or more).
	MinRSABits = 2048

	// DefaultWatchInterval is a good interval for Watch: files are
	// checked with one stat each, so a change is noticed within two
	// seconds at no real cost.
	DefaultWatchInterval = 2 * time.Second
)

// Config says where the verifier finds what it trusts. Each path or URL
// is a command-line flag of the gateway, and errors name the flag.
type Config struct {
	// File is the token file (--tokens): static tokens, each naming one
	// participant, its capabilities and its pods.
	File string
	// JWTSecretFile holds the raw HMAC secret (--jwt-secret-file) of
	// HS256, HS384 and HS512 tokens. One trailing newline is ignored.
	JWTSecretFile string
	// JWTPublicKeyFile holds one or more PEM public keys
	// (--jwt-public-key-file): RSA (RS*, PS*), ECDSA (ES256 on P-256,
	// ES384 on P-384, ES512 on P-521) or Ed25519 (EdDSA), as PUBLIC KEY,
	// RSA PUBLIC KEY or CERTIFICATE blocks.
	JWTPublicKeyFile string
	// JWKSURL is the address of a JSON Web Key Set (--jwt-jwks-url),
	// fetched at New, at Reload, every JWKSRefresh, and when a token
	// names a kid it lacks (at most once per UnknownKIDInterval).
	JWKSURL string
	// Issuer, when set, is the iss a JWT must have (--jwt-issuer).
	Issuer string
	// Audience, when set, must be one of a JWT's aud (--jwt-audience).
	Audience string
	// DefaultCapabilities are the capabilities of a JWT without a caps
	// claim (--default-capabilities). Nil: none.
	DefaultCapabilities []wire.Capability
	// JWKSRefresh is how often the JWKS is fetched again; zero means
	// DefaultJWKSRefresh, a negative value never.
	JWKSRefresh time.Duration
	// Logger receives warnings: a secret readable by others, a JWKS
	// fetched over plain HTTP, keys of the JWKS that are not used, a
	// refresh that failed, JWTs accepted without exp. Nil:
	// slog.Default().
	Logger *slog.Logger
	// HTTPClient fetches the JWKS. Nil: a client with JWKSTimeout. New
	// uses a copy that follows no redirect (a 3xx answer is a failed
	// fetch) and reads at most MaxJWKSBytes of an answer.
	HTTPClient *http.Client
	// AllowNoExp accepts JWTs without an exp claim
	// (--jwt-allow-no-exp). Unsafe: such a token is valid for as long as
	// its key is trusted, and one that leaks cannot be made to end short
	// of changing the key. Without it, a JWT without exp is refused
	// ("exp"). Tokens of the token file have no exp and are not
	// concerned, nor are OAuth access tokens, which always need one.
	AllowNoExp bool

	// OAuthIssuers are the authorization servers whose access tokens are
	// taken (--oauth-issuer, see oauth.go): each one's metadata is
	// fetched at New and at Reload, and its keys are those of the
	// metadata's jwks_uri, fetched and refreshed as JWKSURL is.
	OAuthIssuers []OAuthIssuer
	// OAuthResource is the gateway's resource identifier
	// (--oauth-resource, see ParseOAuthResource): an access token's aud
	// must name it (or its /mcp endpoint). Required with OAuthIssuers.
	OAuthResource string
	// OAuthParticipantClaim is the claim of an access token that names
	// its participant, after the issuer's name (--oauth-participant-claim;
	// "": DefaultOAuthParticipantClaim).
	OAuthParticipantClaim string
}

// Source says where an identity comes from.
type Source string

// The sources of an identity.
const (
	SourceFile  Source = "file"  // an entry of the token file
	SourceJWT   Source = "jwt"   // a JWT
	SourceOAuth Source = "oauth" // an access token of an OAuth issuer
)

// Identity is who a verified token says its bearer is.
type Identity struct {
	// Participant is the participant id: the token file's participant,
	// or the JWT's sub.
	Participant string
	// Capabilities are the capabilities the participant is given (the
	// token file's capabilities; the JWT's caps, or
	// Config.DefaultCapabilities without one). Never nil.
	Capabilities []wire.Capability
	// Pods are the patterns of the pods the token may join ("*" matches
	// every pod, "lab-*" those that start with "lab-", "lab" that one): a
	// JWT without a pods claim has ["*"].
	Pods []string
	// Pod is the pod the token was verified for ("" when none was named).
	Pod string
	// Expires is the instant from which Verify refuses the token: a JWT's
	// exp plus Leeway. Zero: never (a token of the file, or a JWT without
	// exp under Config.AllowNoExp). A connection should end by then
	// unless its client sent a fresh token.
	Expires time.Time
	// Source is where the identity comes from.
	Source Source
	// TokenSHA256 is the SHA-256 of the token: what Revoked looks up, and
	// a key for the identity that is safe to log or keep.
	TokenSHA256 [sha256.Size]byte
	// Issuer, KeyID and JTI are a JWT's iss, the kid of its header and its
	// jti (each "" when absent): which token it was, for the audit trail.
	Issuer, KeyID, JTI string
}

// Claims that a Refusal names besides the JWT's own claims (exp, nbf,
// iat, iss, aud, sub, pods, caps) and header parameters (alg, kid).
const (
	// ClaimToken: the token is missing, unknown, or not a JWT at all.
	ClaimToken = "token"
	// ClaimSignature: the JWT's signature does not verify.
	ClaimSignature = "signature"
	// ClaimScope: an OAuth access token's scope does not parse, or does
	// not grant the pod (403: a scope would).
	ClaimScope = "scope"
)

// Refusal says why a token was refused, in words that a client can act
// on. Its message names the claim and never contains the token.
type Refusal struct {
	// Status is the HTTP status of the refused upgrade: 401, or 403 when
	// the token is good but may not join the pod.
	Status int
	// Code is wire.CodeUnauthorized (401) or wire.CodeForbidden (403).
	Code wire.Code
	// Claim is what failed: "exp", "nbf", "iat", "iss", "aud", "sub",
	// "pods", "caps", "alg", "kid", ClaimScope, ClaimSignature or
	// ClaimToken (or, for an OAuth access token, the claim that names its
	// participant).
	Claim string
	// Message is the refusal in words, for the client.
	Message string
}

// Wire is the JSON body of the refused upgrade.
func (r *Refusal) Wire() wire.Refusal { return wire.Refusal{Code: r.Code, Message: r.Message} }

func unauthorized(claim, format string, args ...any) *Refusal {
	return &Refusal{Status: http.StatusUnauthorized, Code: wire.CodeUnauthorized, Claim: claim, Message: fmt.Sprintf(format, args...)}
}

func forbidden(claim, format string, args ...any) *Refusal {
	return &Refusal{Status: http.StatusForbidden, Code: wire.CodeForbidden, Claim: claim, Message: fmt.Sprintf(format, args...)}
}

// Verifier verifies the tokens that participants present: entries of the
// token file and JWTs. It is safe for concurrent use; Reload replaces what
// it trusts at once, never half.
type Verifier struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	now    func() time.Time // time.Now; tests move it
	// life is the verifier's life (New's ctx): the JWKS is refreshed in
	// the background until it ends, an OAuth issuer's until its own
	// (shorter) life ends.
	life context.Context
	// jwksURL is Config.JWKSURL for logs and errors, less any password;
	// jwksFlag names where it comes from ("--jwt-jwks-url", or the
	// --oauth-issuer whose metadata gave it).
	jwksURL  string
	jwksFlag string
	// oauth, when set, makes this verifier an OAuth issuer's
	// (oauth.go): its tokens are access tokens, read by oauthRules.
	oauth *oauthRules

	state    atomic.Pointer[state]
	reloadMu sync.Mutex // one Reload, or one JWKS swap, at a time

	// seen is what each file looked like when it was last read (Watch).
	seen filewatch.Seen

	// The fetch of the JWKS for an unknown kid: at most one at a time
	// (kidFetch, which later callers wait for), and at most one per
	// UnknownKIDInterval (kidLimiter).
	kidMu      sync.Mutex
	kidFetch   *jwksFetch
	kidLimiter *rate.Limiter
}

// state is what the verifier trusts at one time. It is never changed once
// stored: Reload stores a new one.
type state struct {
	file       *tokenFile // nil without --tokens
	secret     []byte     // nil without --jwt-secret-file
	publicKeys []any      // of --jwt-public-key-file
	jwks       *jwksKeys  // nil without --jwt-jwks-url
	// issuers are the OAuth issuers (--oauth-issuer), each with a
	// verifier of its own.
	issuers []*issuer
	// methods are the algorithms that the configured keys verify: the
	// parser refuses any other alg before it looks for a key.
	methods []string
	parser  *jwt.Parser // nil when no JWT key is configured
}

// New reads the token file and the keys that cfg names, and fetches the
// JWKS; an error names the flag at fault. ctx is the verifier's life: when
// it ends, the JWKS is no longer refreshed in the background.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	return newWith(ctx, ctx, cfg, nil)
}

// newWith is New, with the fetches made under ctx and the background
// refresh for life; rules, when set, make it an OAuth issuer's verifier.
func newWith(ctx, life context.Context, cfg Config, rules *oauthRules) (*Verifier, error) {
	v := &Verifier{
		cfg:        cfg,
		log:        cfg.Logger,
		now:        time.Now,
		life:       life,
		jwksFlag:   "--jwt-jwks-url",
		oauth:      rules,
		kidLimiter: rate.NewLimiter(rate.Every(UnknownKIDInterval), 1),
	}
	fix := "give --jwt-jwks-url the address that serves the JWKS"
	if rules != nil {
		v.jwksFlag = "--oauth-issuer " + cfg.Issuer
		fix = "the issuer's metadata must name, as its jwks_uri, the address that serves the keys"
	}
	v.client = jwksClient(cfg.HTTPClient, "a JWKS", fix)
	if v.log == nil {
		v.log = slog.Default()
	}
	if err := v.checkConfig(); err != nil {
		return nil, err
	}
	s, err := v.load(ctx)
	if err != nil {
		return nil, err
	}
	v.state.Store(s)
	if cfg.JWKSURL != "" && cfg.JWKSRefresh >= 0 {
		every := cfg.JWKSRefresh
		if every == 0 {
			every = DefaultJWKSRefresh
		}
		go v.refreshJWKS(life, every)
	}
	return v, nil
}

// checkConfig finds the mistakes of a Config that no file needs reading
// to see.
func (v *Verifier) checkConfig() error {
	c := v.cfg
	jwtKeys := c.JWTSecretFile != "" || c.JWTPublicKeyFile != "" || c.JWKSURL != ""
	if c.Issuer != "" && !jwtKeys {
		return errors.New("--jwt-issuer: no JWT can be verified without --jwt-secret-file, --jwt-public-key-file or --jwt-jwks-url")
	}
	if c.Audience != "" && !jwtKeys {
		return errors.New("--jwt-audience: no JWT can be verified without --jwt-secret-file, --jwt-public-key-file or --jwt-jwks-url")
	}
	if c.AllowNoExp && jwtKeys {
		v.log.Warn("JWTs without an exp claim are accepted: such a token is valid for as long as its key is trusted, and one that leaks cannot be ended short of changing the key",
			"flag", "--jwt-allow-no-exp")
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil {
			return fmt.Errorf("%s: %w", v.jwksFlag, err)
		}
		v.jwksURL = u.Redacted()
		if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http:// or https:// address", v.jwksFlag, v.jwksURL)
		}
		if u.Scheme == "http" && !loopback(u.Hostname()) {
			v.log.Warn("the JWKS is fetched over plain HTTP: whoever sits between the gateway and its server can make the gateway trust any key; use https://",
				"flag", v.jwksFlag, "url", v.jwksURL)
		}
	}
	return v.checkOAuth()
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Enabled reports whether anything is configured to verify tokens with:
// without, the gateway runs open.
func (v *Verifier) Enabled() bool {
	c := v.cfg
	return c.File != "" || c.JWTSecretFile != "" || c.JWTPublicKeyFile != "" || c.JWKSURL != "" || len(c.OAuthIssuers) > 0
}

// Verify decides whether token may join pod, and as whom. A token of the
// token file is looked up first; a JWT whose iss is an OAuth issuer's is
// verified by that issuer's rules alone (oauth.go); any other token is
// verified as a JWT, when JWT keys are configured. The refusal is 401
// unless the token is good and only the pod is not allowed (403). An
// empty pod skips the pod check (Identity.Pod is then "").
func (v *Verifier) Verify(ctx context.Context, token, pod string) (*Identity, *Refusal) {
	if token == "" {
		return nil, unauthorized(ClaimToken, "a token is required (Authorization: Bearer TOKEN, or ?token=)")
	}
	s := v.state.Load()
	hash := sha256.Sum256([]byte(token))
	if s.file != nil {
		if e, ok := s.file.lookup(hash); ok {
			if pod != "" && !matchAny(e.pods, pod) {
				return nil, forbidden("pods", "pods: this token may not join pod %q", pod)
			}
			return &Identity{
				Participant:  e.participant,
				Capabilities: slices.Clone(e.capabilities),
				Pods:         slices.Clone(e.pods),
				Pod:          pod,
				Source:       SourceFile,
				TokenSHA256:  hash,
			}, nil
		}
	}
	if is := s.issuerOf(token); is != nil {
		id, r := is.v.verifyOAuth(ctx, is.v.state.Load(), token, pod)
		if r != nil {
			return nil, r
		}
		id.Pod, id.TokenSHA256 = pod, hash
		return id, nil
	}
	if !s.jwtEnabled() {
		if r := s.unknownIssuer(token); r != nil {
			return nil, r
		}
		return nil, unauthorized(ClaimToken, "unknown token")
	}
	if strings.Count(token, ".") != 2 {
		if s.file != nil {
			return nil, unauthorized(ClaimToken, "unknown token: neither in the token file nor a JWT (header.claims.signature)")
		}
		return nil, unauthorized(ClaimToken, "the token is not a JWT (header.claims.signature)")
	}
	id, r := v.verifyJWT(ctx, s, token)
	if r != nil {
		return nil, r
	}
	if pod != "" && !matchAny(id.Pods, pod) {
		return nil, forbidden("pods", "pods: this token may not join pod %q", pod)
	}
	id.Pod, id.TokenSHA256 = pod, hash
	return id, nil
}

func (s *state) jwtEnabled() bool { return len(s.methods) > 0 }

// Reload reads the token file and the key files again and fetches the
// JWKS again (SIGHUP). When any of them fails, the verifier keeps what it
// had and the error names the flags at fault. Afterwards, Revoked says
// which verified identities the new token file no longer has.
func (v *Verifier) Reload(ctx context.Context) error {
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	s, err := v.load(ctx)
	if err != nil {
		return err
	}
	old := v.state.Swap(s)
	stopIssuers(old.issuers) // the new ones refresh their keys from now on
	return nil
}

// Revoked reports whether an identity that Verify gave is no longer good
// since the last Reload: a token of the file that the file no longer has,
// that now names another participant, or whose pods no longer allow
// Identity.Pod. A JWT is never revoked by a reload, even when its key left
// the JWKS: it ends at its own exp.
func (v *Verifier) Revoked(id *Identity) bool {
	if id == nil || id.Source != SourceFile {
		return false
	}
	s := v.state.Load()
	if s.file == nil {
		return true
	}
	e, ok := s.file.byHash[id.TokenSHA256]
	return !ok || e.participant != id.Participant || (id.Pod != "" && !matchAny(e.pods, id.Pod))
}

// load reads everything that the Config names into a new state. Each
// failure is named by its flag, and all of them are reported together.
func (v *Verifier) load(ctx context.Context) (*state, error) {
	c := v.cfg
	s := &state{}
	var errs []error
	if c.File != "" {
		data, err := v.readFile(c.File)
		if err == nil {
			s.file, err = parseFile(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--tokens: %w", err))
		}
	}
	if c.JWTSecretFile != "" {
		data, err := v.readFile(c.JWTSecretFile)
		if err == nil {
			s.secret, err = parseSecret(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--jwt-secret-file: %w", err))
		}
	}
	if c.JWTPublicKeyFile != "" {
		data, err := v.readFile(c.JWTPublicKeyFile)
		if err == nil {
			s.publicKeys, err = parsePublicKeys(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--jwt-public-key-file: %w", err))
		}
	}
	if c.JWKSURL != "" {
		keys, err := v.fetchJWKS(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.jwksFlag, err))
		}
		s.jwks = keys
	}
	if len(c.OAuthIssuers) > 0 && len(errs) == 0 {
		// Each issuer's metadata and keys, fetched only once the rest has
		// loaded: a Reload that fails keeps everything it had.
		var err error
		if s.issuers, err = v.loadIssuers(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	v.build(s)
	return s, nil
}

// build works out, once the keys are known, which algorithms a JWT may
// use and the parser that checks its registered claims.
func (v *Verifier) build(s *state) {
	var methods []string
	if s.secret != nil {
		methods = append(methods, hmacMethods...)
	}
	for _, k := range s.publicKeys {
		methods = append(methods, methodsOf(k)...)
	}
	if s.jwks != nil {
		// The JWKS's keys change without a Reload, so every asymmetric
		// algorithm stays open to it; each key takes only its own.
		methods = append(methods, asymmetricMethods...)
	}
	slices.Sort(methods)
	s.methods = slices.Compact(methods)
	if len(s.methods) == 0 {
		return
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(s.methods),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
		// iat must be a number, and not later than now (with Leeway).
		jwt.WithIssuedAt(),
	}
	if !v.cfg.AllowNoExp {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	s.parser = jwt.NewParser(opts...)
}

// readFile reads one of the configured files, noting what it looked like
// (for Watch) before reading it, so that a change made while it is read is
// seen by the next check. A file that others than its owner and its group
// may read, or that its group may write, is reported, since it holds
// secrets.
func (v *Verifier) readFile(path string) ([]byte, error) {
	v.seen.Read(path)
	st, err := os.Stat(path)
	// Others than the owner and its group: a Kubernetes Secret mounted
	// with the pod's fsGroup is group-readable by design, and the group
	// is the gateway's own.
	if err == nil && st.Mode().Perm()&0o027 != 0 && path != v.cfg.JWTPublicKeyFile {
		v.log.Warn("a file of secrets is readable by others than its owner and group, or writable by its group; chmod 600 it", "path", path, "mode", st.Mode().Perm().String())
	}
	return os.ReadFile(path)
}

// changed reports whether one of the configured files differs from what
// the last read saw.
func (v *Verifier) changed() bool { return v.seen.Changed() }

// Watch checks the configured files every interval (one stat each; see
// DefaultWatchInterval) and, when one of them changed (its size, its
// modification time, or which file the path names), reloads as Reload
// does and calls reloaded with the result, so that the caller can close
// what Revoked now says. It returns when ctx ends. A file that changes
// into something broken is reported once, not at every check, and the
// verifier keeps what it had until the file changes again. A file edited
// in place may be seen half written: that is reported, and the next check
// reloads the whole. An edit that keeps the size within one tick of the
// file system's clock can be missed; replacing the file (rename) or
// SIGHUP never is.
func (v *Verifier) Watch(ctx context.Context, interval time.Duration, reloaded func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	filewatch.Poll(ctx, interval, v.changed, func() {
		err := v.Reload(ctx)
		if ctx.Err() == nil && reloaded != nil {
			reloaded(err)
		}
	})
}

// matchAny reports whether pod matches one of patterns (the capability
// patterns' kind rules: "*", a prefix ending in "*", or exact).
func matchAny(patterns []string, pod string) bool {
	for _, p := range patterns {
		if capability.MatchKind(p, pod) {
			return true
		}
	}
	return false
}
