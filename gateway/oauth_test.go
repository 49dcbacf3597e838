package gateway

import (
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// TestConfigOAuth: the OAuth flags, from the command line and the
// environment, and each mistake named by its flag.
func TestConfigOAuth(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--oauth-issuer", "team=https://idp.example.com", "--oauth-issuer", "https://login.example.org/t/v2.0",
		"--oauth-resource", "https://gw.example.com/"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.OAuthIssuers, FlagList{"team=https://idp.example.com", "https://login.example.org/t/v2.0"}) {
		t.Fatalf("--oauth-issuer twice: %v", cfg.OAuthIssuers)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.OAuthScopes != DefaultOAuthScopes || cfg.OAuthParticipantClaim != "sub" || !cfg.tokensRequired() {
		t.Fatalf("defaults: %q %q %v", cfg.OAuthScopes, cfg.OAuthParticipantClaim, cfg.tokensRequired())
	}

	env := DefaultConfig()
	fs = flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
	env.RegisterFlags(fs)
	_ = fs.Parse(nil)
	if err := ApplyEnv(fs, func(k string) (string, bool) {
		v, ok := map[string]string{"MCPP_OAUTH_ISSUER": "a=https://a.example, b=https://b.example", "MCPP_OAUTH_RESOURCE": "https://gw.example.com"}[k]
		return v, ok
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env.OAuthIssuers, FlagList{"a=https://a.example", "b=https://b.example"}) || env.Validate() != nil {
		t.Fatalf("MCPP_OAUTH_ISSUER: %v %v", env.OAuthIssuers, env.Validate())
	}

	for name, c := range map[string]struct {
		edit func(*Config)
		says string
	}{
		"no resource":       {func(c *Config) { c.OAuthResource = "" }, "--oauth-issuer needs --oauth-resource"},
		"resource alone":    {func(c *Config) { c.OAuthIssuers = nil }, "--oauth-resource"},
		"plain resource":    {func(c *Config) { c.OAuthResource = "http://gw.example.com" }, "--oauth-resource"},
		"resource query":    {func(c *Config) { c.OAuthResource = "https://gw.example.com/?pod=a" }, "--oauth-resource"},
		"bad issuer":        {func(c *Config) { c.OAuthIssuers = FlagList{"idp.example.com"} }, "--oauth-issuer"},
		"same name":         {func(c *Config) { c.OAuthIssuers = FlagList{"https://idp.example.com/a", "https://idp.example.com/b"} }, "both named"},
		"twice":             {func(c *Config) { c.OAuthIssuers = FlagList{"https://idp.example.com", "https://idp.example.com"} }, "twice"},
		"every kind":        {func(c *Config) { c.OAuthScopes = "mcpp:cap:*" }, "--oauth-scopes"},
		"no claim":          {func(c *Config) { c.OAuthParticipantClaim = " " }, "--oauth-participant-claim"},
		"system as issuer":  {func(c *Config) { c.OAuthIssuers = FlagList{"system=https://idp.example.com"} }, "--oauth-issuer"},
		"unknown mcpp:form": {func(c *Config) { c.OAuthScopes = "mcpp:everything" }, "--oauth-scopes"},
	} {
		bad := DefaultConfig()
		bad.OAuthIssuers, bad.OAuthResource = FlagList{"https://idp.example.com"}, "https://gw.example.com"
		c.edit(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: Validate() = %v; want …%s…", name, err, c.says)
		}
	}
}

// TestOAuthMetadataServed: the metadata of the gateway, of its MCP
// endpoint and of a pod's, under --oauth-resource's path, each read as the
// MCP SDK's client reads it (its resource the URL it was asked for); a
// token in the query never reaches the metadata.
func TestOAuthMetadataServed(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.OAuthIssuers, cfg.OAuthResource, cfg.OAuthScopes = FlagList{"team=https://idp.example.com"}, srv.URL+"/mcpp", "mcpp:cap:chat"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	o := newOAuthResource(&cfg)
	o.register(mux)
	for _, c := range []struct{ at, resource, scopes string }{
		{"", srv.URL + "/mcpp", "mcpp:cap:chat"},
		{"/mcp", srv.URL + "/mcpp/mcp", "mcpp:cap:chat"},
		{"/mcp?pod=lab&contexts=none", srv.URL + "/mcpp/mcp?pod=lab&contexts=none", "mcpp:pod:lab mcpp:cap:chat"},
	} {
		meta, err := oauthex.GetProtectedResourceMetadata(t.Context(), srv.URL+"/.well-known/oauth-protected-resource/mcpp"+c.at, c.resource, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.at, err)
		}
		if !slices.Equal(meta.AuthorizationServers, []string{"https://idp.example.com"}) || strings.Join(meta.ScopesSupported, " ") != c.scopes ||
			!slices.Equal(meta.BearerMethodsSupported, []string{"header"}) {
			t.Errorf("%s: %+v", c.at, meta)
		}
	}
	resp, err := http.Get(srv.URL + "/.well-known/oauth-protected-resource/mcpp/mcp?pod=lab&token=s3cr3t")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if meta["resource"] != srv.URL+"/mcpp/mcp?pod=lab" {
		t.Errorf("with a token in the query, the resource is %v", meta["resource"])
	}
	r := httptest.NewRequest(http.MethodPost, "/mcp?token=s3cr3t&pod=lab", nil)
	if got := o.metadataURL(r); got != srv.URL+"/.well-known/oauth-protected-resource/mcpp/mcp?pod=lab" {
		t.Errorf("the metadata of /mcp?token=…&pod=lab is at %s", got)
	}
	if got := o.metadataURL(httptest.NewRequest(http.MethodGet, "/ws?pod=lab", nil)); got != srv.URL+"/.well-known/oauth-protected-resource/mcpp" {
		t.Errorf("the metadata of /ws is at %s", got)
	}
}

// TestChallengeText: what goes in a challenge's quoted strings stays in
// them, and an error_description holds only what RFC 6750 allows.
func TestChallengeText(t *testing.T) {
	if got := quoted(`a "b" \c`); got != `"a \"b\" \\c"` {
		t.Errorf("quoted: %s", got)
	}
	got := description("kid: no key has kid \"x\\y…\"\nz é")
	if got != "kid: no key has kid 'x/y...'?z ?" {
		t.Errorf("description: %q", got)
	}
	cs, err := oauthex.ParseWWWAuthenticate([]string{"Bearer resource_metadata=" + quoted("https://gw/x?a=\"b\"") + ", error_description=" + quoted(got)})
	if err != nil || len(cs) != 1 || cs[0].Params["resource_metadata"] != `https://gw/x?a="b"` || cs[0].Params["error_description"] != got {
		t.Errorf("parsed back: %+v %v", cs, err)
	}
}
