package tokens

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// An OAuth resource server (docs/protocol.md section 1, "OAuth access
// tokens"): with Config.OAuthIssuers, the verifier also takes the access
// tokens of the team's identity provider, as MCP's authorization
// specification asks of a remote MCP server. Each issuer's keys come from
// its metadata (oauth_metadata.go); an access token is routed to its
// issuer by its iss, verified by that issuer's keys with the JWT rules of
// the --jwt-* flags (alg, kid, signature, exp required, nbf, iat, iss),
// and read by the rules of oauth_claims.go: its aud must name this
// gateway, its participant is the issuer's name and a claim, and its
// scope grants its pods and capabilities.

// DefaultOAuthParticipantClaim is the claim that names an access token's
// participant when Config.OAuthParticipantClaim is empty: sub is the one
// claim every identity provider sets, unique and stable for the issuer.
const DefaultOAuthParticipantClaim = "sub"

// OAuthIssuer is an authorization server whose access tokens the verifier
// takes (--oauth-issuer [NAME=]URL).
type OAuthIssuer struct {
	// Name begins the participant id of each of its tokens (NAME:VALUE),
	// so that two issuers, or an issuer and the token file, never name
	// the same participant. 1 to 32 characters of [A-Za-z0-9._-], not
	// "system".
	Name string
	// URL is its issuer identifier (RFC 8414): the iss of its tokens,
	// exactly, and where its metadata is found.
	URL string
}

// maxIssuerName bounds an issuer's name: the participant id that begins
// with it holds 128 characters in all.
const maxIssuerName = 32

// ParseOAuthIssuer reads one value of --oauth-issuer: URL, or NAME=URL.
// Without a name, the name is the URL's host (with its port, if any):
// "https://idp.example.com" names its participants idp.example.com:sub.
func ParseOAuthIssuer(value string) (OAuthIssuer, error) {
	is := OAuthIssuer{URL: value}
	if name, rest, ok := strings.Cut(value, "="); ok && !strings.ContainsAny(name, ":/") {
		is.Name, is.URL = name, rest
	}
	u, err := url.Parse(is.URL)
	switch {
	case err != nil:
		return is, fmt.Errorf("%q: %w", value, err)
	case u.Scheme != "https" && u.Scheme != "http" || u.Host == "":
		return is, fmt.Errorf("%q is not an https:// address: an issuer identifier is one (RFC 8414)", value)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return is, fmt.Errorf("%q: an issuer identifier has no query, fragment or user (RFC 8414 section 2)", value)
	}
	if is.Name == "" {
		is.Name = u.Host
	}
	if !validIssuerName(is.Name) {
		return is, fmt.Errorf("%q: the name %q must be 1 to %d characters of [A-Za-z0-9._:-], and not system: give one as NAME=URL", value, is.Name, maxIssuerName)
	}
	return is, nil
}

func validIssuerName(name string) bool {
	if name == "" || len(name) > maxIssuerName || name == "system" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == ':') {
			return false
		}
	}
	return true
}

// ParseOAuthResource reads --oauth-resource: the gateway's public address,
// its resource identifier (RFC 9728, RFC 8707), which the access tokens
// meant for it name in their aud. It is an https:// URL (http:// only on
// a loopback address, for development), with a path when the gateway is
// served under one, and no query or fragment; it is returned without a
// trailing slash ("https://gw.example.com/" is "https://gw.example.com").
func ParseOAuthResource(value string) (string, error) {
	u, err := url.Parse(value)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q: %w", value, err)
	case u.Host == "" || u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname())):
		return "", fmt.Errorf("%q must be the gateway's public https:// address (http:// only on a loopback address), e.g. https://gw.example.com", value)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "":
		return "", fmt.Errorf("%q: a resource identifier has no query, fragment or user (RFC 9728)", value)
	}
	for _, r := range u.Path {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._~-", r)) {
			return "", fmt.Errorf("%q: its path may hold [A-Za-z0-9/._~-] only", value)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// oauthRules are how one issuer's access tokens are read.
type oauthRules struct {
	name     string // OAuthIssuer.Name: the participant's prefix, before ":"
	resource string // Config.OAuthResource, without a trailing slash
	claim    string // the claim that names the participant
}

// audienceFits reports whether one of aud names this gateway (RFC 8707):
// its resource identifier R (or R/), its MCP endpoint R/mcp, or the MCP
// endpoint of pod itself, R/mcp?pod=POD (with any other parameters of
// /mcp): what a host asks for when its server's URL is /mcp?pod=POD. A
// token for one pod's endpoint joins that pod alone.
func (r *oauthRules) audienceFits(aud []string, pod string) bool {
	for _, a := range aud {
		switch a {
		case r.resource, r.resource + "/", r.resource + "/mcp":
			return true
		}
		q, ok := strings.CutPrefix(a, r.resource+"/mcp?")
		if !ok || pod == "" {
			continue
		}
		if v, err := url.ParseQuery(q); err == nil && len(v["pod"]) == 1 && v["pod"][0] == pod {
			return true
		}
	}
	return false
}

// issuer is one OAuth issuer, as the last load found it.
type issuer struct {
	OAuthIssuer
	v    *Verifier          // its keys and its rules
	stop context.CancelFunc // ends v's refresh of its keys
}

// checkOAuth finds the mistakes of the OAuth part of a Config that need no
// fetch to see.
func (v *Verifier) checkOAuth() error {
	c := v.cfg
	if len(c.OAuthIssuers) == 0 {
		if c.OAuthResource != "" {
			return errors.New("--oauth-resource: it is the audience of OAuth access tokens, which need --oauth-issuer")
		}
		return nil
	}
	if c.OAuthResource == "" {
		return errors.New("--oauth-issuer needs --oauth-resource, the gateway's public address (https://gw.example.com): the audience its access tokens must name")
	}
	if r, err := ParseOAuthResource(c.OAuthResource); err != nil || r != c.OAuthResource {
		return fmt.Errorf("--oauth-resource: %q is not in its canonical form (ParseOAuthResource: %q, %v)", c.OAuthResource, r, err)
	}
	if err := CheckOAuthIssuers(c.OAuthIssuers); err != nil {
		return err
	}
	for _, is := range c.OAuthIssuers {
		if u, err := url.Parse(is.URL); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
			v.log.Warn("an OAuth issuer's metadata and keys are fetched over plain HTTP: whoever sits between the gateway and the issuer can make the gateway trust any key; use https://",
				"flag", "--oauth-issuer", "issuer", is.URL)
		}
	}
	return nil
}

// CheckOAuthIssuers finds the mistakes of a list of issuers that no fetch
// needs to see: a name that is not one, an issuer given twice, and two
// issuers of the same name, whose participants would be confused.
func CheckOAuthIssuers(issuers []OAuthIssuer) error {
	names, urls := map[string]string{}, map[string]bool{}
	for _, is := range issuers {
		if !validIssuerName(is.Name) {
			return fmt.Errorf("--oauth-issuer %s: the name %q must be 1 to %d characters of [A-Za-z0-9._:-], and not system", is.URL, is.Name, maxIssuerName)
		}
		if urls[is.URL] {
			return fmt.Errorf("--oauth-issuer %s is given twice", is.URL)
		}
		if other, ok := names[is.Name]; ok {
			return fmt.Errorf("--oauth-issuer: %s and %s are both named %q, so their participants could be confused: name one of them (NAME=URL)", other, is.URL, is.Name)
		}
		names[is.Name], urls[is.URL] = is.URL, true
	}
	return nil
}

// loadIssuers fetches every issuer's metadata and keys, and makes the
// verifier of each. All or nothing: when one fails, those made are
// stopped and the error names every issuer that failed.
func (v *Verifier) loadIssuers(ctx context.Context) ([]*issuer, error) {
	var (
		out  []*issuer
		errs []error
	)
	claim := v.cfg.OAuthParticipantClaim
	if claim == "" {
		claim = DefaultOAuthParticipantClaim
	}
	for _, is := range v.cfg.OAuthIssuers {
		meta, err := v.discover(ctx, is.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("--oauth-issuer %s: %w", is.URL, err))
			continue
		}
		life, stop := context.WithCancel(v.life)
		iv, err := newWith(ctx, life, Config{
			JWKSURL: meta.JWKSURI, Issuer: is.URL,
			JWKSRefresh: v.cfg.JWKSRefresh, Logger: v.log, HTTPClient: v.cfg.HTTPClient,
		}, &oauthRules{name: is.Name, resource: v.cfg.OAuthResource, claim: claim})
		if err != nil {
			stop()
			errs = append(errs, err) // it names --oauth-issuer URL
			continue
		}
		iv.now = func() time.Time { return v.now() } // a test that moves v's clock moves its issuers'
		out = append(out, &issuer{OAuthIssuer: is, v: iv, stop: stop})
	}
	if len(errs) > 0 {
		stopIssuers(out)
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// stopIssuers ends the background refresh of the issuers' keys.
func stopIssuers(issuers []*issuer) {
	for _, is := range issuers {
		is.stop()
	}
}

// issuerOf is the OAuth issuer whose iss token carries, or nil when it is
// not a JWT or carries another iss. The iss is read before the signature
// is checked: it only chooses whose keys check it.
func (s *state) issuerOf(token string) *issuer {
	if len(s.issuers) == 0 {
		return nil
	}
	iss := unverifiedIssuer(token)
	for _, is := range s.issuers {
		if iss != "" && iss == is.URL {
			return is
		}
	}
	return nil
}

// unknownIssuer is the refusal of a token that is neither in the token
// file nor an issuer's access token, when OAuth issuers are the only JWTs
// the verifier takes; nil without issuers.
func (s *state) unknownIssuer(token string) *Refusal {
	switch {
	case len(s.issuers) == 0:
		return nil
	case strings.Count(token, ".") != 2 && s.file != nil:
		return unauthorized(ClaimToken, "unknown token: neither in the token file nor an access token of --oauth-issuer (a JWT)")
	case strings.Count(token, ".") != 2:
		// An opaque access token, say: the gateway reads access tokens
		// itself, and asks the issuer nothing per request.
		return unauthorized(ClaimToken, "the token is not a JWT (header.claims.signature): this gateway takes access tokens that are JWTs (RFC 9068)")
	}
	iss := unverifiedIssuer(token)
	urls := make([]string, len(s.issuers))
	for i, is := range s.issuers {
		urls[i] = is.URL
	}
	if iss == "" {
		return unauthorized("iss", "iss: the token has no iss claim; it must be one of %s (--oauth-issuer)", strings.Join(urls, ", "))
	}
	return unauthorized("iss", "iss: %q is not an issuer this gateway trusts; it trusts %s (--oauth-issuer)", clip(iss), strings.Join(urls, ", "))
}

// unverifiedIssuer reads the iss of a JWT without checking anything else:
// "" when token is not three parts whose second is a JSON object with a
// string iss. It decodes as the JWT library does (base64url without
// padding, encoding/json, the last of repeated keys).
func unverifiedIssuer(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Iss
}
