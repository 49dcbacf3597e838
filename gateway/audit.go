package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net/http"
	"slices"
	"time"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// The gateway's part of the audit trail (package audit, --audit-log): who
// joins and who is kept out, on every transport, and what a reload of the
// tokens or of the certificate changed. The pods record their own
// decisions (pod/audit.go) through the same Log (Node.Audit).

// credentialOf names the token of a verified identity, never the token.
func credentialOf(id *tokens.Identity) audit.Credential {
	c := audit.Credential{Auth: audit.AuthTokenFile, TokenSHA256: audit.ShortHash(id.TokenSHA256)}
	if id.Source == tokens.SourceJWT {
		c.Auth, c.Issuer, c.KeyID, c.JTI = audit.AuthJWT, id.Issuer, id.KeyID, id.JTI
	}
	return c
}

// presented names a token that was refused: its short hash alone.
func presented(token string) audit.Credential {
	return audit.Credential{TokenSHA256: audit.TokenHash(token)}
}

// auditJoin records a join of transport into pod: let in (e nil) as who,
// or refused with e. The remote address is the TCP peer's; the
// X-Forwarded-For header is written as received, never trusted (a client
// may send any), for an operator whose proxy sets it.
func (g *Gateway) auditJoin(r *http.Request, transport, podName string, who pod.Admitted, e *envelope.Error) {
	g.traceJoin(r, transport, podName, who, e)
	if !g.audit.On() {
		return
	}
	rec := audit.Record{Decision: audit.Join, Pod: podName, Participant: who.ID, Transport: transport,
		RemoteAddr: r.RemoteAddr, ForwardedFor: r.Header.Get("X-Forwarded-For"), Credential: who.Token}
	if rec.Auth == "" && g.verifier == nil {
		rec.Auth = audit.AuthOpen
	}
	if e != nil {
		rec.Decision, rec.Code, rec.Rule, rec.Message = audit.JoinRefused, string(e.Code), e.Rule, e.Message
	} else if who.Caps != nil {
		rec.Capabilities = who.Caps.Wire()
	}
	g.audit.Record(rec)
}

// transportOf is how a connection is in its pod.
func transportOf(r *participant.Participant) string {
	if r.Observes() {
		return audit.TransportObserve
	}
	return audit.TransportWS
}

// nobody is who a join refused before its token was read is.
var nobody pod.Admitted

// refuseJoin is refuse for a join that the trail records.
func (g *Gateway) refuseJoin(w http.ResponseWriter, r *http.Request, transport, podName string, who pod.Admitted, e *envelope.Error) {
	g.auditJoin(r, transport, podName, who, e)
	g.refuse(w, e)
}

// joinKey carries a join's request and identity through a context, to
// where the join is made (an MCP participant joins in mcpMember.start).
type joinKey struct{}

type joinAttempt struct {
	r   *http.Request
	who pod.Admitted
}

// joining is r's context, carrying the join of who.
func joining(r *http.Request, who pod.Admitted) context.Context {
	return context.WithValue(r.Context(), joinKey{}, joinAttempt{r: r, who: who})
}

// auditJoined records the join that ctx carries (joining), made.
func (g *Gateway) auditJoined(ctx context.Context, transport, podName string) {
	if j, ok := ctx.Value(joinKey{}).(joinAttempt); ok {
		g.auditJoin(j.r, transport, podName, j.who, nil)
	}
}

// Reload triggers, as the trail names them.
const (
	triggerSignal = "sighup"       // Reload, ReloadTLS: mcpp-gateway on SIGHUP
	triggerChange = "file_changed" // a watched file changed
)

// auditTokens records a reload of the tokens (err: it failed, and what
// was in force stays): the entries and keys it added and removed since
// the last reload, and whom it disconnected.
func (g *Gateway) auditTokens(trigger string, err error, gone []audit.Member) {
	if !g.audit.On() || g.verifier == nil {
		return
	}
	rec := audit.Record{Decision: audit.TokensReloaded, Trigger: trigger, Disconnected: gone}
	if err != nil {
		rec.Error = err.Error()
	}
	now := g.verifier.Trusted()
	g.trustedMu.Lock()
	was := g.trusted
	g.trusted = now
	g.trustedMu.Unlock()
	rec.Added, rec.Removed = entriesChanged(was.Entries, now.Entries), entriesChanged(now.Entries, was.Entries)
	rec.KeysAdded, rec.KeysRemoved = keysChanged(was.Keys, now.Keys), keysChanged(now.Keys, was.Keys)
	g.audit.Record(rec)
}

// entriesChanged are the entries of now that was lacks.
func entriesChanged(was, now []tokens.Entry) []audit.TokenEntry {
	var out []audit.TokenEntry
	for _, e := range now {
		if !slices.Contains(was, e) {
			out = append(out, audit.TokenEntry{Participant: e.Participant, TokenSHA256: audit.ShortHash(e.TokenSHA256)})
		}
	}
	return out
}

// keysChanged are the keys of now that was lacks.
func keysChanged(was, now []string) []string {
	var out []string
	for _, k := range now {
		if !slices.Contains(was, k) {
			out = append(out, k)
		}
	}
	return out
}

// auditTLS records a reload of the certificate: the one served before
// and the one served now (the same when err says the files did not
// load).
func (g *Gateway) auditTLS(trigger string, before *tls.Certificate, err error) {
	if !g.audit.On() {
		return
	}
	now := g.certs.current.Load()
	rec := audit.Record{Decision: audit.TLSReloaded, Trigger: trigger, PreviousSHA256: certHash(before), CertSHA256: certHash(now)}
	if err != nil {
		rec.Error = err.Error()
	}
	if now != nil && now.Leaf != nil {
		rec.Subject, rec.NotAfter = now.Leaf.Subject.String(), now.Leaf.NotAfter.UTC().Format(wire.TimeFormat)
	}
	g.audit.Record(rec)
}

// certHash is the SHA-256 of a certificate's leaf, in hex, as openssl x509
// -fingerprint -sha256 shows it (without colons).
func certHash(c *tls.Certificate) string {
	if c == nil || len(c.Certificate) == 0 {
		return ""
	}
	sum := sha256.Sum256(c.Certificate[0])
	return hex.EncodeToString(sum[:])
}

// auditCloseTimeout bounds the writing out of the trail at shutdown: a
// trail that blocks (a pipe nobody reads) never holds up the exit.
const auditCloseTimeout = 2 * time.Second
