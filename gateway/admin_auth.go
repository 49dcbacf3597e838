package gateway

import (
	"bytes"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// Who may call the operator's API (docs/protocol.md section 7): with
// tokens, a token that holds wire.CapabilityAdmin itself, and the pods
// the API reaches for it are the token's pods; in open mode, a request
// from this machine to a loopback address, for every pod.

// operator is who calls the operator's API.
type operator struct {
	// id is the token's participant, for the log ("" in open mode).
	id string
	// pods are the token's pod patterns (a token file's pods, a JWT's
	// pods claim, an access token's mcpp:pod: scopes); ["*"] in open mode.
	pods []string
}

// reaches reports whether the operator's token may reach pod.
func (o *operator) reaches(pod string) bool {
	for _, p := range o.pods {
		if capability.MatchKind(p, pod) {
			return true
		}
	}
	return false
}

// everyPod reports whether the operator reaches every pod: a node-wide
// call (a drain) needs it.
func (o *operator) everyPod() bool { return slices.Contains(o.pods, "*") }

// name is the operator for the log.
func (o *operator) name() string {
	if o.id == "" {
		return "loopback (open mode)"
	}
	return o.id
}

// holdsAdmin reports whether caps hold the operator's capability: one of
// exactly that kind whose payload pattern is absent or {} (any payload).
// A wildcard ("*", "gateway/*") does not: it was handed out for a pod's
// envelopes, and must not turn into the power over every pod and the
// node. Grants made in a pod are never looked at.
func holdsAdmin(caps []wire.Capability) bool {
	for _, c := range caps {
		if c.Kind != wire.CapabilityAdmin {
			continue
		}
		if p := bytes.TrimSpace(c.Payload); c.Payload == nil || bytes.Equal(p, []byte("null")) || emptyObject(p) {
			return true
		}
	}
	return false
}

// emptyObject reports whether b is the JSON object {} (white space
// allowed inside).
func emptyObject(b []byte) bool {
	return len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}' && len(bytes.TrimSpace(b[1:len(b)-1])) == 0
}

// authorizeAdmin decides whether r may call the operator's API: the
// browser's origin, then the token (Authorization: Bearer only; never
// ?token=, which would put it in logs and histories), then the
// capability. In open mode only a request to a loopback Host from a
// loopback address is answered: the gateway's port may be reachable from
// elsewhere, and a web page may make a visitor's browser ask a name it
// rebinds to 127.0.0.1 (its Host is then the page's).
func (g *Gateway) authorizeAdmin(w http.ResponseWriter, r *http.Request) (*operator, *envelope.Error) {
	if !g.originAllowed(r) {
		return nil, envelope.Errorf(wire.CodeForbidden, "origin %q may not call the operator's API (see --allowed-origins)", r.Header.Get("Origin"))
	}
	if g.verifier == nil {
		if !loopbackPeer(r.RemoteAddr) || !loopbackHost(r.Host) {
			return nil, envelope.Errorf(wire.CodeForbidden,
				"this gateway runs open (no --tokens, JWT key or --oauth-issuer): its operator's API answers only requests from this machine to a loopback address (127.0.0.1, [::1], localhost); give it tokens to operate it from elsewhere")
		}
		return &operator{pods: []string{"*"}}, nil
	}
	token := ""
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, t, ok := strings.Cut(strings.TrimSpace(h), " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		e := envelope.Errorf(wire.CodeUnauthorized, "the operator's API needs a token that holds %s, in Authorization: Bearer TOKEN (never in the URL)", wire.CapabilityAdmin)
		g.adminChallenge(w, r, "", e.Message)
		return nil, e
	}
	id, ref := g.verifier.Verify(r.Context(), token, "")
	if ref != nil {
		e := envelope.Errorf(wire.CodeUnauthorized, "%s", ref.Message)
		g.adminChallenge(w, r, "invalid_token", e.Message)
		return nil, e
	}
	if !holdsAdmin(id.Capabilities) {
		e := envelope.Errorf(wire.CodeForbidden,
			"%s's token does not hold %s: the operator's API needs a capability of exactly that kind, without a payload pattern (* and gateway/* do not give it, nor does a grant in a pod)",
			id.Participant, wire.CapabilityAdmin)
		if id.Source == tokens.SourceOAuth {
			g.adminChallenge(w, r, "insufficient_scope", e.Message)
		}
		return nil, e
	}
	return &operator{id: id.Participant, pods: id.Pods}, nil
}

// adminScope is what an OAuth host asks for to operate every pod.
var adminScope = tokens.ScopeCapPrefix + wire.CapabilityAdmin + " " + tokens.ScopePodPrefix + "*"

// adminChallenge sets the WWW-Authenticate header of a refused token, as
// section 1's challenges (oauth.go) but for the operator's scope: Bearer,
// with the gateway's resource_metadata and the scope under OAuth, and
// error ("": none, for a request without a token) with its description.
func (g *Gateway) adminChallenge(w http.ResponseWriter, r *http.Request, errCode, message string) {
	var params []string
	if g.oauth != nil {
		params = append(params, "resource_metadata="+quoted(g.oauth.metadataURL(r)), "scope="+quoted(adminScope))
	}
	if errCode != "" {
		params = append(params, "error="+quoted(errCode), "error_description="+quoted(description(message)))
	}
	v := "Bearer"
	if len(params) > 0 {
		v += " " + strings.Join(params, ", ")
	}
	w.Header().Set("WWW-Authenticate", v)
}

// loopbackPeer reports whether a request's remote address is a loopback
// one.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a Host header names a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
