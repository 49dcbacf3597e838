package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// The gateway as an OAuth 2.1 resource server (docs/protocol.md sections 1
// and 9), as MCP's authorization specification (2025-06-18 and later) asks
// of a remote MCP server: with --oauth-issuer, it publishes its protected
// resource metadata (RFC 9728), every 401 on /ws, /mcp and a publish
// points to it (WWW-Authenticate: Bearer resource_metadata=…), and a 403
// for a pod the token's scopes do not name asks for the scope
// (error="insufficient_scope"). The tokens themselves are verified by
// package tokens, which finds each issuer's keys from its metadata.
//
// Its resource identifiers, from --oauth-resource R:
//
//	R                  the gateway: /ws and /pods/NAME/envelopes;
//	                   metadata at /.well-known/oauth-protected-resource
//	R/mcp              the MCP endpoint;
//	                   metadata at /.well-known/oauth-protected-resource/mcp
//	R/mcp?pod=NAME     a pod's MCP endpoint, the URL a host is given;
//	                   metadata at /.well-known/oauth-protected-resource/mcp?pod=NAME
//
// (R's path, when it has one, goes after oauth-protected-resource.) A host
// compares the metadata's resource with the URL it was given, query
// included (RFC 9728 section 3.3), so each pod's endpoint has its own;
// package tokens takes an access token for any of them (aud), one for a
// pod's endpoint in that pod alone.

// DefaultOAuthScopes are the scopes a host asks for besides the pod's own
// (--oauth-scopes): those of --default-capabilities where tokens are
// required, chat and proposing calls, which someone allowed must approve.
const DefaultOAuthScopes = tokens.ScopeCapPrefix + "chat " + tokens.ScopeCapPrefix + "mcp/proposal"

// oauthWellKnown is where protected resource metadata is (RFC 9728
// section 3).
const oauthWellKnown = "/.well-known/oauth-protected-resource"

// oauthOn reports whether OAuth access tokens are taken.
func (c *Config) oauthOn() bool { return len(c.OAuthIssuers) > 0 }

// oauthIssuers reads --oauth-issuer.
func (c *Config) oauthIssuers() ([]tokens.OAuthIssuer, error) {
	var out []tokens.OAuthIssuer
	for _, v := range c.OAuthIssuers {
		is, err := tokens.ParseOAuthIssuer(v)
		if err != nil {
			return nil, fmt.Errorf("--oauth-issuer: %w", err)
		}
		out = append(out, is)
	}
	return out, tokens.CheckOAuthIssuers(out)
}

// oauthError is what is wrong with the OAuth flags, or nil.
func (c *Config) oauthError() error {
	if !c.oauthOn() {
		if c.OAuthResource != "" {
			return errors.New("--oauth-resource is the audience of OAuth access tokens, which need --oauth-issuer")
		}
		return nil
	}
	if _, err := c.oauthIssuers(); err != nil {
		return err
	}
	if c.OAuthResource == "" {
		return errors.New("--oauth-issuer needs --oauth-resource, the gateway's public address (https://gw.example.com): the audience its access tokens must name")
	}
	if _, err := tokens.ParseOAuthResource(c.OAuthResource); err != nil {
		return fmt.Errorf("--oauth-resource: %w", err)
	}
	if _, err := tokens.ParseOAuthScopes(c.OAuthScopes); err != nil {
		return fmt.Errorf("--oauth-scopes: %w", err)
	}
	if strings.TrimSpace(c.OAuthParticipantClaim) == "" {
		return fmt.Errorf("--oauth-participant-claim must name a claim (default %s)", tokens.DefaultOAuthParticipantClaim)
	}
	return nil
}

// oauthResource is the gateway's side of OAuth: its identifiers, its
// metadata and the challenge of its refusals.
type oauthResource struct {
	id      string   // R: --oauth-resource, without a trailing slash
	origin  string   // R's scheme://host
	path    string   // R's path: "" or "/prefix"
	issuers []string // the issuers' identifiers, in the flags' order
	scopes  []string // --oauth-scopes
}

// newOAuthResource is the OAuth side of cfg, or nil without --oauth-issuer.
func newOAuthResource(cfg *Config) *oauthResource {
	if !cfg.oauthOn() {
		return nil
	}
	// Validate checked them all.
	id, _ := tokens.ParseOAuthResource(cfg.OAuthResource)
	u, _ := url.Parse(id)
	issuers, _ := cfg.oauthIssuers()
	scopes, _ := tokens.ParseOAuthScopes(cfg.OAuthScopes)
	o := &oauthResource{id: id, origin: u.Scheme + "://" + u.Host, path: u.Path, scopes: scopes}
	for _, is := range issuers {
		o.issuers = append(o.issuers, is.URL)
	}
	return o
}

// register serves the metadata of the gateway and of its MCP endpoint.
func (o *oauthResource) register(mux *http.ServeMux) {
	mux.HandleFunc(oauthWellKnown+o.path, func(w http.ResponseWriter, r *http.Request) {
		o.serveMetadata(w, r, o.id, "")
	})
	mux.HandleFunc(oauthWellKnown+o.path+"/mcp", func(w http.ResponseWriter, r *http.Request) {
		resource, pod := o.id+"/mcp", ""
		if q := mcpQuery(r.URL); q != "" {
			resource += "?" + q
			pod = r.URL.Query().Get("pod")
		}
		o.serveMetadata(w, r, resource, pod)
	})
}

// serveMetadata answers with the protected resource metadata of resource
// (RFC 9728 section 2), through the MCP Go SDK's handler (GET, and
// OPTIONS for a browser's preflight: the document is public). A pod's
// resource asks for its pod's scope first.
func (o *oauthResource) serveMetadata(w http.ResponseWriter, r *http.Request, resource, pod string) {
	name := "MCPP pod gateway"
	if envelope.ValidPodName(pod) {
		name += ": pod " + pod
	}
	auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   o.issuers,
		ScopesSupported:        o.scopesFor(pod),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           name,
	}).ServeHTTP(w, r)
}

// scopesFor are the scopes a host asks for to join pod ("": none in
// particular): the pod's own, then --oauth-scopes.
func (o *oauthResource) scopesFor(pod string) []string {
	if !envelope.ValidPodName(pod) {
		return o.scopes
	}
	return append([]string{tokens.ScopeForPod(pod)}, o.scopes...)
}

// metadataURL is the address of the metadata of the resource r asked
// for: a pod's MCP endpoint's for /mcp (with the query the host was
// given), the gateway's for the rest.
func (o *oauthResource) metadataURL(r *http.Request) string {
	if r.URL.Path != "/mcp" {
		return o.origin + oauthWellKnown + o.path
	}
	u := o.origin + oauthWellKnown + o.path + "/mcp"
	if q := mcpQuery(r.URL); q != "" {
		u += "?" + q
	}
	return u
}

// mcpQuery is the query of an /mcp URL as a resource identifier keeps it:
// as it came, so that it reads back as the URL the host was given, less a
// token= the host should not have put in it (which would go to the
// identity provider in the resource parameter).
func mcpQuery(u *url.URL) string {
	q := u.Query()
	if !q.Has("token") {
		return u.RawQuery
	}
	q.Del("token")
	return q.Encode()
}

// challenge sets the WWW-Authenticate header of a refusal of the token on
// /ws, /mcp or a publish (RFC 6750 section 3): Bearer, with
// resource_metadata and the scope to ask for under OAuth (RFC 9728
// section 5.1); error="invalid_token" and its description on a 401 whose
// request had a token (none for a request without one, RFC 6750 section
// 3.1); error="insufficient_scope" on a 403 because an access token's
// scopes do not name the pod. Other refusals set nothing.
func (g *Gateway) challenge(w http.ResponseWriter, r *http.Request, pod string, noToken bool, e *envelope.Error, ref *tokens.Refusal) {
	var params []string
	if g.oauth != nil {
		params = append(params, "resource_metadata="+quoted(g.oauth.metadataURL(r)),
			"scope="+quoted(strings.Join(g.oauth.scopesFor(pod), " ")))
	}
	switch {
	case e.Code == wire.CodeUnauthorized && noToken:
	case e.Code == wire.CodeUnauthorized:
		params = append(params, `error="invalid_token"`, "error_description="+quoted(description(e.Message)))
	case g.oauth != nil && ref != nil && ref.Status == http.StatusForbidden && ref.Claim == tokens.ClaimScope:
		params = append(params, `error="insufficient_scope"`, "error_description="+quoted(description(e.Message)))
	default:
		return
	}
	v := "Bearer"
	if len(params) > 0 {
		v += " " + strings.Join(params, ", ")
	}
	w.Header().Set("WWW-Authenticate", v)
}

// quoted writes s as a quoted-string (RFC 9110 section 5.6.4).
func quoted(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// description writes a refusal's message in the characters an
// error_description may hold (RFC 6750 section 3: printable ASCII but "
// and \): quotes become ', anything else outside them ?.
func description(msg string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '"':
			return '\''
		case r == '\\':
			return '/'
		case r < 0x20 || r > 0x7e:
			return '?'
		}
		return r
	}, strings.ReplaceAll(msg, "…", "..."))
}
