package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// An OAuth issuer's metadata (RFC 8414, or OpenID Connect Discovery 1.0)
// says where its keys are: jwks_uri. The document's shape is the MCP Go
// SDK's oauthex.AuthServerMeta; the fetch is ours, since the SDK's
// (oauthex.GetAuthServerMeta) is a client's: it refuses an issuer without
// PKCE and one on a private address, which a resource server has no
// reason to refuse (a team's identity provider is often on its own
// network), and it follows redirects. Ours is the JWKS's client: no
// redirect, at most 1 MiB, JWKSTimeout.

// metadataURLs are where an issuer's metadata may be, in the order MCP's
// authorization specification (2025-11-25, "Authorization Server
// Metadata Discovery") has a host try them: RFC 8414's well-known URL
// first, then OpenID Connect's, each with the well-known part inserted
// before the issuer's path, and last OpenID Connect's appended to it.
func metadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, err
	}
	path := strings.TrimRight(u.Path, "/")
	at := func(p string) string {
		c := *u
		c.Path, c.RawPath = p, ""
		return c.String()
	}
	if path == "" {
		return []string{at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")}, nil
	}
	return []string{
		at("/.well-known/oauth-authorization-server" + path),
		at("/.well-known/openid-configuration" + path),
		at(path + "/.well-known/openid-configuration"),
	}, nil
}

// discover fetches the issuer's metadata from the first of metadataURLs
// that has it. An answer of 4xx means "not here": the next URL is tried.
// Any other answer that is not a good document fails the discovery: a
// redirect (not followed), an answer over MaxJWKSBytes, a status other
// than 200, a body that is not a JSON object, an issuer other than the
// one asked for (RFC 8414 section 3.3: metadata may not speak for
// another issuer), or no http(s) jwks_uri.
func (v *Verifier) discover(ctx context.Context, issuer string) (*oauthex.AuthServerMeta, error) {
	urls, err := metadataURLs(issuer)
	if err != nil {
		return nil, err
	}
	client := jwksClient(v.cfg.HTTPClient, "an issuer's metadata",
		"give --oauth-issuer the issuer identifier itself (its tokens' iss), whose metadata is served at its well-known addresses")
	ctx, cancel := context.WithTimeout(ctx, JWKSTimeout)
	defer cancel()
	var missing []string
	for _, u := range urls {
		meta, status, err := fetchMetadata(ctx, client, u)
		switch {
		case err != nil:
			return nil, fmt.Errorf("fetching its metadata at %s: %w", u, err)
		case status >= 400 && status < 500:
			missing = append(missing, fmt.Sprintf("%s (%d)", u, status))
			continue
		case meta.Issuer != issuer:
			return nil, fmt.Errorf("its metadata at %s names the issuer %q, not %q: give --oauth-issuer exactly the issuer its tokens carry as iss", u, meta.Issuer, issuer)
		}
		if j, err := url.Parse(meta.JWKSURI); err != nil || j.Host == "" || j.Scheme != "https" && j.Scheme != "http" {
			return nil, fmt.Errorf("its metadata at %s names no http(s) jwks_uri (%q), where its keys would be", u, meta.JWKSURI)
		}
		return meta, nil
	}
	return nil, fmt.Errorf("no metadata found: %s", strings.Join(missing, ", "))
}

// fetchMetadata fetches one metadata URL: the document when it answers
// 200, the status alone when it answers 4xx.
func fetchMetadata(ctx context.Context, client *http.Client, u string) (*oauthex.AuthServerMeta, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// A redirect or an answer too large says all there is to say.
		var answer *jwksAnswerError
		if errors.As(err, &answer) {
			return nil, 0, answer
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, resp.StatusCode, nil
	case resp.StatusCode != http.StatusOK:
		return nil, resp.StatusCode, fmt.Errorf("the answer is %s, not 200 OK", resp.Status)
	}
	var meta oauthex.AuthServerMeta
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("the answer is not a metadata document (a JSON object): %w", err)
	}
	return &meta, resp.StatusCode, nil
}
