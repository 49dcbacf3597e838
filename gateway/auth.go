package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// Who a request is (docs/protocol.md section 1): with --tokens, a JWT flag
// or --oauth-issuer, the participant its token names (tokens.Verifier: the
// token file, a JWT verified with the configured keys, or an OAuth
// issuer's access token); without, anyone, named by ?participant=, with
// --default-capabilities.

// newVerifier builds the token verifier of the flags (nil in open mode).
func newVerifier(ctx context.Context, cfg *Config, defaults []wire.Capability) (*tokens.Verifier, error) {
	issuers, err := cfg.oauthIssuers()
	if err != nil {
		return nil, err
	}
	resource := ""
	if len(issuers) > 0 {
		resource, _ = tokens.ParseOAuthResource(cfg.OAuthResource) // Validate checked it
	}
	v, err := tokens.New(ctx, tokens.Config{
		File: cfg.Tokens, JWTSecretFile: cfg.JWTSecretFile, JWTPublicKeyFile: cfg.JWTPublicKeyFile,
		JWKSURL: cfg.JWTJWKSURL, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
		AllowNoExp:          cfg.JWTAllowNoExp,
		DefaultCapabilities: defaults, Logger: cfg.logger(),
		OAuthIssuers: issuers, OAuthResource: resource, OAuthParticipantClaim: cfg.OAuthParticipantClaim,
	})
	if err != nil {
		return nil, err
	}
	if !v.Enabled() {
		return nil, nil
	}
	return v, nil
}

// authenticate decides who a request is (docs/protocol.md section 1): the
// token's participant, or ?participant= in open mode (made up when absent
// and generate is set, required otherwise). When it refuses the token, it
// sets w's WWW-Authenticate header (challenge) for the refusal the caller
// then writes.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, podName string, generate bool) (pod.Admitted, *envelope.Error) {
	q := r.URL.Query()
	token := q.Get("token")
	if h := r.Header.Get("Authorization"); h != "" {
		// The scheme is case-insensitive (RFC 9110, section 11.1).
		if scheme, t, ok := strings.Cut(strings.TrimSpace(h), " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(t)
		}
	}
	if g.verifier != nil {
		a, ref, e := g.verifyToken(r.Context(), token, podName)
		if e != nil {
			g.challenge(w, r, podName, token == "", e, ref)
			return a, e
		}
		// The token names the participant: ?participant= is ignored
		// (clients that send one in every URL keep working).
		return a, nil
	}
	id := q.Get("participant")
	if id == "" && !q.Has("participant") {
		if !generate {
			return pod.Admitted{}, envelope.Errorf(wire.CodeInvalidParticipant, "?participant=ID is required without a token file")
		}
		id = "anon-" + uuid.NewString()[:12]
	}
	if !envelope.ValidParticipantID(id) || strings.HasPrefix(id, "system:") {
		return pod.Admitted{}, envelope.Errorf(wire.CodeInvalidParticipant,
			"participant must be 1 to 128 characters of [A-Za-z0-9._:@-], not starting with system:")
	}
	return pod.Admitted{ID: id, Caps: g.defaultCaps, Credential: &participant.Credential{}}, nil
}

// verify checks a token for a pod: who it names, what it may send, and
// its credential (until when, and whether it was revoked since). It is
// also the node's check of a gateway/refresh.
func (g *Gateway) verify(ctx context.Context, token, podName string) (pod.Admitted, *envelope.Error) {
	a, _, e := g.verifyToken(ctx, token, podName)
	return a, e
}

// verifyToken is verify with the verifier's refusal, when it refused: what
// a challenge needs to know of it.
func (g *Gateway) verifyToken(ctx context.Context, token, podName string) (pod.Admitted, *tokens.Refusal, *envelope.Error) {
	id, ref := g.verifier.Verify(ctx, token, podName)
	if ref != nil {
		// 401 or 403 with the code; the message names the claim, never
		// the token.
		return pod.Admitted{Token: presented(token)}, ref, envelope.Errorf(ref.Code, "%s", ref.Message).Ruled(ref.Claim)
	}
	caps, err := capability.Compile(id.Capabilities)
	if err != nil {
		return pod.Admitted{}, nil, envelope.Errorf(wire.CodeUnauthorized, "caps: the token's capabilities do not compile: %v", err)
	}
	cred := &participant.Credential{Revoked: func() bool { return g.verifier.Revoked(id) }}
	if !id.Expires.IsZero() {
		// The verifier's leeway is for clocks that disagree at the door;
		// a connection ends at the token's own exp.
		cred.Expires = id.Expires.Add(-tokens.Leeway)
	}
	return pod.Admitted{ID: id.Participant, Caps: caps, Credential: cred, Token: credentialOf(id)}, nil, nil
}

// Reload reads the token file and the JWT keys again (SIGHUP), and ends
// the connections and MCP sessions whose token is gone (4403 revoked). A
// file that does not load keeps the previous tokens; its error is
// returned.
func (g *Gateway) Reload(ctx context.Context) error {
	if g.verifier == nil {
		return nil
	}
	err := g.verifier.Reload(ctx)
	if err != nil {
		g.log.Error("reloading the tokens failed; the previous ones stay in force", "err", err)
	} else {
		g.log.Info("tokens reloaded")
	}
	g.auditTokens(triggerSignal, err, g.sweepRevoked())
	return err
}

// sweepRevoked ends whoever is in on a token that is no longer valid,
// and reports whom.
func (g *Gateway) sweepRevoked() []audit.Member {
	var gone []audit.Member
	for _, p := range g.node.Pods() {
		for _, r := range p.Members() {
			if c := r.Credential(); c.Revoked != nil && c.Revoked() {
				p.Remove(r, "revoked", participant.StatusRevoked)
				gone = append(gone, audit.Member{Pod: p.Name, Participant: r.ID, Transport: transportOf(r)})
			}
		}
	}
	gone = append(gone, g.mcp.EndRevoked()...)
	if len(gone) > 0 {
		g.log.Info("revoked tokens: connections and MCP sessions ended", "count", len(gone))
	}
	return gone
}

// expire ends, with 4401, a connection whose token expired: the
// janitor's, every second, so within a second of exp.
func expire(p *pod.Pod, r *participant.Participant, now time.Time) {
	if exp := r.Credential().Expires; !exp.IsZero() && !now.Before(exp) {
		p.Remove(r, "token expired", participant.StatusTokenExpired)
	}
}

// watchTokens reloads the tokens when their files change (a token
// revoked by editing the file takes effect within
// tokens.DefaultWatchInterval), until ctx ends.
func (g *Gateway) watchTokens(ctx context.Context) {
	if g.verifier == nil {
		return
	}
	g.verifier.Watch(ctx, tokens.DefaultWatchInterval, func(err error) {
		if err != nil {
			g.log.Error("a token file changed and does not load; the previous tokens stay in force", "err", err)
			g.auditTokens(triggerChange, err, nil)
			return
		}
		g.log.Info("a token file changed: tokens reloaded")
		g.auditTokens(triggerChange, nil, g.sweepRevoked())
	})
}

// DescribeAuth says how the gateway authenticates, for its start log.
func (g *Gateway) DescribeAuth() string {
	if g.verifier == nil {
		return "open (development)"
	}
	var parts []string
	if g.cfg.Tokens != "" {
		parts = append(parts, "token file")
	}
	if g.cfg.jwtOn() {
		parts = append(parts, "JWT")
	}
	if g.cfg.oauthOn() {
		parts = append(parts, fmt.Sprintf("OAuth: %s", strings.Join(g.cfg.OAuthIssuers, ", ")))
	}
	return fmt.Sprintf("tokens (%s)", strings.Join(parts, ", "))
}
