package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
)

// The team's identity provider of the OAuth tests (issue 37): zitadel/oidc's
// OpenID provider (its pkg/op), set up as its example server sets it up
// (exampleop.SetupServer, with the example's in-memory storage, users and
// login page), on a loopback port. What the example leaves to each
// deployment is set as a team would set its provider for the gateway:
//
//   - its clients are MCP hosts: public (native) clients with PKCE, one
//     whose access tokens live for a short while;
//   - access tokens are JWTs (RFC 9068) that carry the granted scopes in
//     scope, and whose aud is the resource the host asked for (RFC 8707),
//     as MCP's authorization specification asks of a host;
//   - each user is granted only the mcpp: scopes the team gave that user,
//     whatever the host asks for;
//   - a client may have the provider add claims of its own to its tokens.
//
// Users sign in on the provider's own login page, which the tests fill in
// over HTTP as a person's browser would.

// The provider's users (the example's) and their password.
const (
	idpPassword = "verysecure"
	idpAlice    = "id1" // test-user@127.0.0.1
	idpBob      = "id2" // test-user2
)

// The provider's clients: MCP hosts.
const (
	hostClient      = "mcp-host"       // access tokens of 5 minutes (the example's)
	shortHostClient = "mcp-host-short" // access tokens of 2 seconds
	claimsClient    = "mcp-host-claims"
	hostRedirect    = "http://localhost/auth/callback"
)

// teamIdP is the provider, served until the test ends.
type teamIdP struct {
	Issuer string // its issuer identifier: http://127.0.0.1:PORT
	Base   string // where it is served: the same, but for an impostor
	store  *idpStore
	logins atomic.Int32 // sign-ins completed on the login page
}

// startIdP serves a provider whose issuer identifier is issuer ("": its
// own address, http://127.0.0.1:PORT), on a port of its own: a provider
// served under another's issuer is an impostor, with keys of its own.
func startIdP(t *testing.T, issuer string, entitled map[string][]string) *teamIdP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if issuer == "" {
		issuer = "http://" + ln.Addr().String()
	}
	clients := map[string]*storage.Client{
		hostClient:      storage.NativeClient(hostClient, hostRedirect),
		shortHostClient: storage.NativeClient(shortHostClient, hostRedirect),
		claimsClient:    storage.NativeClient(claimsClient, hostRedirect),
	}
	store := &idpStore{
		Storage:   storage.NewStorageWithClients(storage.NewUserStore(issuer), clients),
		resources: map[string][]string{},
		entitled:  entitled,
		lifetime:  map[string]time.Duration{shortHostClient: 2 * time.Second},
		claims: map[string]map[string]any{
			// A provider that adds the gateway's JWT claims of issue 23 to
			// a host's access tokens: they grant nothing to an OAuth token.
			claimsClient: {"caps": []string{"*"}, "pods": []string{"*"}},
		},
	}
	router := exampleop.SetupServer(issuer, store, nil, false)
	server := &http.Server{Handler: withResource(router), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	t.Cleanup(func() { _ = server.Close() })
	return &teamIdP{Issuer: issuer, Base: "http://" + ln.Addr().String(), store: store}
}

// resourceKey carries the resource parameters of an authorization
// request (RFC 8707) to the storage, which the OP does not read.
type resourceKey struct{}

func withResource(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/auth" {
			if err := r.ParseForm(); err == nil && len(r.Form["resource"]) > 0 {
				r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, r.Form["resource"]))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// idpStore is the example's storage with the team's settings above.
type idpStore struct {
	*storage.Storage
	mu        sync.Mutex
	resources map[string][]string      // by authorization request
	entitled  map[string][]string      // user → the mcpp: scopes the team gave it
	lifetime  map[string]time.Duration // client → its access tokens' life
	claims    map[string]map[string]any
}

// hostClientOf is a client of the provider as the team set it: its access
// tokens are JWTs, and it may ask for the gateway's scopes.
type hostClientOf struct{ op.Client }

func (hostClientOf) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (hostClientOf) IsScopeAllowed(scope string) bool    { return strings.HasPrefix(scope, "mcpp:") }

func (s *idpStore) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return hostClientOf{c}, nil
}

// forResource is an authorization request for the resources its client
// asked for: its tokens' aud.
type forResource struct {
	*storage.AuthRequest
	aud []string
}

func (r *forResource) GetAudience() []string { return r.aud }

func (s *idpStore) withAudience(r op.AuthRequest, err error) (op.AuthRequest, error) {
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	aud := s.resources[r.GetID()]
	s.mu.Unlock()
	if len(aud) == 0 {
		return r, nil // the example's: the client id
	}
	return &forResource{AuthRequest: r.(*storage.AuthRequest), aud: aud}, nil
}

func (s *idpStore) CreateAuthRequest(ctx context.Context, req *oidc.AuthRequest, user string) (op.AuthRequest, error) {
	r, err := s.Storage.CreateAuthRequest(ctx, req, user)
	if err == nil {
		if res, _ := ctx.Value(resourceKey{}).([]string); len(res) > 0 {
			s.mu.Lock()
			s.resources[r.GetID()] = res
			s.mu.Unlock()
		}
	}
	return s.withAudience(r, err)
}

func (s *idpStore) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	return s.withAudience(s.Storage.AuthRequestByID(ctx, id))
}

func (s *idpStore) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	return s.withAudience(s.Storage.AuthRequestByCode(ctx, code))
}

// unwrap gives the example's storage its own request back.
func unwrap(r op.TokenRequest) op.TokenRequest {
	if f, ok := r.(*forResource); ok {
		return f.AuthRequest
	}
	return r
}

// clientOf is the client a token request is for.
func clientOf(r op.TokenRequest) string {
	if c, ok := unwrap(r).(interface{ GetClientID() string }); ok {
		return c.GetClientID()
	}
	return ""
}

func (s *idpStore) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, unwrap(r))
	if life, ok := s.lifetime[clientOf(r)]; ok && err == nil {
		exp = time.Now().Add(life)
	}
	return id, exp, err
}

func (s *idpStore) CreateAccessAndRefreshTokens(ctx context.Context, r op.TokenRequest, current string) (string, string, time.Time, error) {
	return s.Storage.CreateAccessAndRefreshTokens(ctx, unwrap(r), current)
}

// GetPrivateClaimsFromRequest puts the scopes the user was granted in the
// access token's scope claim (RFC 9068): those asked for that the team
// gave the user, and those that are not the gateway's.
func (s *idpStore) GetPrivateClaimsFromRequest(_ context.Context, r op.TokenRequest, scopes []string) (map[string]any, error) {
	var granted []string
	for _, sc := range scopes {
		if !strings.HasPrefix(sc, "mcpp:") || slices.Contains(s.entitled[r.GetSubject()], sc) {
			granted = append(granted, sc)
		}
	}
	claims := map[string]any{"scope": strings.Join(granted, " ")}
	for k, v := range s.claims[clientOf(r)] {
		claims[k] = v
	}
	return claims, nil
}

// signIn plays a person's browser: it opens the authorization URL, signs
// in as user on the provider's login page, and returns the authorization
// response the provider redirects to the host's redirect URI with, without
// following it (nothing listens there: the host reads it).
func (p *teamIdP) signIn(ctx context.Context, authURL, user string) (*auth.AuthorizationResult, error) {
	jar, _ := cookiejar.New(nil)
	issuer, _ := url.Parse(p.Issuer)
	base, _ := url.Parse(p.Base)
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			if strings.HasPrefix(req.URL.String(), hostRedirect) {
				return http.ErrUseLastResponse
			}
			if req.URL.Host == issuer.Host {
				// An impostor's pages send the browser to the issuer's
				// address: its victim's machine resolves that name to
				// the impostor.
				req.URL.Host = base.Host
			}
			return nil
		}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	resp, err := browser.Do(req)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		return nil, fmt.Errorf("no login page at %s: %s %s", authURL, resp.Status, page)
	}
	username := "test-user2"
	if user == idpAlice {
		username = "test-user@127.0.0.1"
	}
	form := url.Values{"id": {string(m[1])}, "username": {username}, "password": {idpPassword}}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, resp.Request.URL.Scheme+"://"+resp.Request.URL.Host+"/login/username",
		strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = browser.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	back, err := resp.Location()
	if err != nil || !strings.HasPrefix(back.String(), hostRedirect) {
		return nil, fmt.Errorf("signing in did not come back to the host: %s %v", resp.Status, err)
	}
	q := back.Query()
	if q.Get("code") == "" {
		return nil, fmt.Errorf("the provider answered %s: %s", q.Get("error"), q.Get("error_description"))
	}
	p.logins.Add(1)
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// fetcher is a host's AuthorizationCodeFetcher that signs in as user.
func (p *teamIdP) fetcher(user string) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		return p.signIn(ctx, args.URL, user)
	}
}

// token signs user in with client, asking for scopes and for the access
// token of resources (RFC 8707, as many as given), as a host does with
// golang.org/x/oauth2 (what the MCP SDK's handler uses), and returns the
// access token.
func (p *teamIdP) token(t *testing.T, client, user string, resources, scopes []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	meta := p.discovery(t)
	cfg := &oauth2.Config{ClientID: client, RedirectURL: hostRedirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: meta.AuthorizationEndpoint, TokenURL: meta.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier))
	for _, r := range resources {
		authURL += "&resource=" + url.QueryEscape(r)
	}
	res, err := p.signIn(ctx, authURL, user)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.Exchange(ctx, res.Code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("the token request: %v", err)
	}
	return tok.AccessToken
}

// idpMeta is what a host reads of the provider's metadata.
type idpMeta struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
}

func (p *teamIdP) discovery(t *testing.T) idpMeta {
	t.Helper()
	resp, err := http.Get(p.Base + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m idpMeta
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.TokenEndpoint == "" {
		t.Fatalf("the provider's metadata: %v %+v", err, m)
	}
	// An impostor names the issuer's addresses: reach it at its own.
	m.AuthorizationEndpoint = strings.Replace(m.AuthorizationEndpoint, p.Issuer, p.Base, 1)
	m.TokenEndpoint = strings.Replace(m.TokenEndpoint, p.Issuer, p.Base, 1)
	return m
}
