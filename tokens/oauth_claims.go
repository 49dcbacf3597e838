package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// The scopes this gateway reads in an access token (docs/protocol.md
// section 1, "OAuth access tokens"). A scope is what the user let the host
// do at this gateway, so each one grants exactly what it names and no
// scope grants every kind:
//
//	mcpp:pod:POD    join POD: a pod name, or a pattern ("lab-*", "*")
//	mcpp:cap:KIND   send envelopes of KIND, a kind or a prefix pattern
//	                ("chat", "mcp/*", "gateway/kick"), never "*"
//	mcpp:call:TOOL  call the tools named TOOL (a name or a glob, "read_*")
//	                of the pod's MCP servers: the capability
//	                {"kind": "mcp/request", "payload": {"method":
//	                "tools/call", "params": {"name": TOOL}}}
//
// Other scopes (openid, profile, another application's) grant nothing
// here and are ignored; another mcpp: scope is refused, as a typo would be.
const (
	ScopePrefix     = "mcpp:"
	ScopePodPrefix  = "mcpp:pod:"
	ScopeCapPrefix  = "mcpp:cap:"
	ScopeCallPrefix = "mcpp:call:"
)

// ScopeForPod is the scope that lets a token join pod.
func ScopeForPod(pod string) string { return ScopePodPrefix + pod }

// grants are what a token's scopes grant.
type grants struct {
	pods []string
	caps []wire.Capability
}

// readScope adds what one scope grants to g; the error says why an mcpp:
// scope is not one this gateway reads.
func (g *grants) readScope(scope string) error {
	switch {
	case !strings.HasPrefix(scope, ScopePrefix):
		return nil // not ours: openid, profile, another application's
	case strings.HasPrefix(scope, ScopePodPrefix):
		pod := scope[len(ScopePodPrefix):]
		if !validPodPattern(pod) {
			return fmt.Errorf("%q: a pod scope names a pod (1 to 64 characters of [A-Za-z0-9._-]) or a pattern ending in * (\"lab-*\", \"*\")", clip(scope))
		}
		g.pods = append(g.pods, pod)
	case strings.HasPrefix(scope, ScopeCapPrefix):
		kind := scope[len(ScopeCapPrefix):]
		switch {
		case kind == "":
			return fmt.Errorf("%q names no kind", clip(scope))
		case kind == "*":
			return fmt.Errorf("%q: no scope grants every kind; name the kinds (%schat, %smcp/*)", clip(scope), ScopeCapPrefix, ScopeCapPrefix)
		}
		g.caps = append(g.caps, wire.Capability{Kind: kind})
	case strings.HasPrefix(scope, ScopeCallPrefix):
		tool := scope[len(ScopeCallPrefix):]
		if tool == "" {
			return fmt.Errorf("%q names no tool", clip(scope))
		}
		payload, _ := json.Marshal(map[string]any{"method": "tools/call", "params": map[string]string{"name": tool}})
		c := wire.Capability{Kind: wire.KindMCPRequest, Payload: payload}
		if _, err := capability.Compile([]wire.Capability{c}); err != nil {
			return fmt.Errorf("%q: the tool pattern does not compile: %v", clip(scope), err)
		}
		g.caps = append(g.caps, c)
	default:
		return fmt.Errorf("%q is not a scope this gateway reads (%sPOD, %sKIND, %sTOOL)", clip(scope), ScopePodPrefix, ScopeCapPrefix, ScopeCallPrefix)
	}
	return nil
}

// ParseOAuthScopes reads --oauth-scopes: scopes separated by spaces or
// commas, each a scope token of RFC 6749 section 3.3 and, when it begins
// with mcpp:, one that this gateway reads.
func ParseOAuthScopes(value string) ([]string, error) {
	fields := strings.FieldsFunc(value, func(r rune) bool { return r == ' ' || r == ',' })
	var g grants
	for _, s := range fields {
		for _, r := range s {
			if r < 0x21 || r > 0x7e || r == '"' || r == '\\' {
				return nil, fmt.Errorf("%q is not a scope (RFC 6749 section 3.3: printable ASCII but \" and \\)", s)
			}
		}
		if err := g.readScope(s); err != nil {
			return nil, err
		}
	}
	return fields, nil
}

// validPodPattern reports whether p is a pod name, or a pattern: "*", or a
// name's beginning followed by "*".
func validPodPattern(p string) bool {
	if p == "" {
		return false
	}
	p = strings.TrimSuffix(p, "*")
	if len(p) > 64 {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// oauthClaims are an access token's claims: the registered ones, which
// the library checks (exp, nbf, iat, iss), and the ones Validate reads,
// in this order: aud, the participant's claim, scope.
type oauthClaims struct {
	registered
	rules *oauthRules
	pod   string // the pod the token is verified for: a pod's own audience fits it alone

	participantRaw json.RawMessage // the claim rules.claim names
	scopeRaw       json.RawMessage // scope (RFC 9068), or scp when absent
	scopeClaim     string          // "scope" or "scp"

	// What Validate found, for the identity.
	participant string
	grants
}

// UnmarshalJSON keeps the registered claims and the claims Validate reads,
// whichever claim names the participant.
func (c *oauthClaims) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &c.registered); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	c.participantRaw = all[c.rules.claim]
	c.scopeRaw, c.scopeClaim = all["scope"], "scope"
	if absent(c.scopeRaw) && !absent(all["scp"]) {
		// Okta and Microsoft Entra name it scp.
		c.scopeRaw, c.scopeClaim = all["scp"], "scp"
	}
	return nil
}

// Validate reads the claims that make an access token this gateway's; the
// library calls it after the signature and its own checks.
func (c *oauthClaims) Validate() error {
	r := c.rules
	aud, err := c.GetAudience()
	if err != nil {
		return err
	}
	if len(aud) == 0 {
		return claimRefusal("aud", "aud: the access token has no aud claim; it must name this gateway (%s): ask the identity provider for a token for that resource", r.resource)
	}
	if !r.audienceFits(aud, c.pod) {
		shown := make([]string, 0, 3)
		for _, a := range aud[:min(len(aud), 3)] {
			shown = append(shown, fmt.Sprintf("%q", clip(a)))
		}
		return claimRefusal("aud", "aud: the access token is for %s, not for this gateway (%s, %s/mcp, or %s/mcp?pod=%s)",
			strings.Join(shown, ", "), r.resource, r.resource, r.resource, c.pod)
	}

	var value string
	if !absent(c.participantRaw) && json.Unmarshal(c.participantRaw, &value) != nil {
		return claimRefusal(r.claim, "%s: the claim must be a string, which names the participant", r.claim)
	}
	if value == "" {
		return claimRefusal(r.claim, "%s: the access token has no %s claim, which names the participant (--oauth-participant-claim)", r.claim, r.claim)
	}
	c.participant = r.name + ":" + value
	if !validParticipant(c.participant) {
		return claimRefusal(r.claim, "%s: %q gives the participant id %q, which is not one (1 to 128 characters of [A-Za-z0-9._:@-]): name another claim with --oauth-participant-claim",
			r.claim, clip(value), clip(c.participant))
	}

	scopes, err := c.scopes()
	if err != nil {
		return err
	}
	for _, s := range scopes {
		if err := c.readScope(s); err != nil {
			return claimRefusal(ClaimScope, "scope: %v", err)
		}
	}
	return nil
}

// scopes are the token's scopes: a space-separated string (RFC 9068, RFC
// 8693), or a list of strings (as some providers write scp).
func (c *oauthClaims) scopes() ([]string, error) {
	if absent(c.scopeRaw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(c.scopeRaw, &s) == nil {
		return strings.Fields(s), nil
	}
	var list []string
	if json.Unmarshal(c.scopeRaw, &list) == nil {
		return list, nil
	}
	return nil, claimRefusal(ClaimScope, "scope: the %s claim must be a space-separated string of scopes (or a list of them)", c.scopeClaim)
}

// verifyOAuth verifies an access token of this verifier's issuer for pod:
// its alg, its key, its signature, its registered claims, then those of
// oauthClaims, and last whether its scopes let it join pod (403).
func (v *Verifier) verifyOAuth(ctx context.Context, s *state, token, pod string) (*Identity, *Refusal) {
	c := &oauthClaims{rules: v.oauth, pod: pod}
	tok, err := s.parser.ParseWithClaims(token, c, v.keyFunc(ctx, s))
	if err != nil {
		return nil, v.refusalOf(s, tok, c, err)
	}
	if pod != "" && !matchAny(c.pods, pod) {
		return nil, forbidden(ClaimScope, "scope: this access token may not join pod %q: its scopes name no %s (nor a pattern that matches it)", pod, ScopeForPod(pod))
	}
	id := &Identity{
		Participant:  c.participant,
		Capabilities: append([]wire.Capability{}, c.caps...),
		Pods:         append([]string{}, c.pods...),
		Source:       SourceOAuth,
	}
	if exp, _ := c.GetExpirationTime(); exp != nil {
		id.Expires = exp.Add(Leeway)
	}
	return id, nil
}
