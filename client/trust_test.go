package client

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/wire"
)

// trustGateway serves a gateway with a token file (alice may do anything,
// bob may chat) and an HMAC secret for JWTs; it returns the secret.
func trustGateway(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	secret := []byte("a-test-secret-of-at-least-32-bytes-long")
	if err := os.WriteFile(tokens, []byte(`{"tokens": [
  {"token": "alice-t", "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	url := startGateway(t, func(c *gateway.Config) {
		c.Tokens, c.JWTSecretFile, c.DefaultCapabilities = tokens, filepath.Join(dir, "secret"), "chat"
	})
	return url, secret
}

// Grant and Revoke: the recipient may send a kind while the grant holds;
// Kick ends the kicked client with ErrKicked, which does not reconnect.
func TestGrantRevokeKick(t *testing.T) {
	url, _ := trustGateway(t)
	alice := dial(t, url, Options{Pod: "trust", Token: "alice-t"})
	expect[*Welcome](t, alice)
	bob := dial(t, url, Options{Pod: "trust", Token: "bob-t"})
	expect[*Welcome](t, bob)

	ev, err := alice.Grant(ctxT(t), wire.Grant{Recipient: "bob", Capabilities: wire.Kinds("tool/*")})
	if err != nil || ev.Event != wire.CapabilityGranted || ev.GrantID == "" || ev.Recipient != "bob" {
		t.Fatalf("Grant: %+v, %v", ev, err)
	}
	if m := expect[*Message](t, bob); m.Envelope.Kind != wire.KindGrant || m.Envelope.ID != ev.GrantID {
		t.Fatalf("bob received %+v, want the grant", m.Envelope)
	}
	if _, err := bob.Send(ctxT(t), &wire.Envelope{ID: "run-1", Kind: "tool/run"}); err != nil {
		t.Fatal(err)
	}
	if m := expect[*Message](t, alice); m.Envelope.ID != "run-1" {
		t.Fatalf("alice received %+v", m.Envelope)
	}
	if _, err := alice.Revoke(ctxT(t), wire.Revoke{Recipient: "bob", GrantID: ev.GrantID}); err != nil {
		t.Fatal(err)
	}
	_, _ = bob.Send(ctxT(t), &wire.Envelope{ID: "run-2", Kind: "tool/run"})
	var ge *GatewayError
	for {
		e := next(t, bob)
		if g, ok := e.(*GatewayError); ok {
			ge = g
			break
		}
	}
	if ge.Code != wire.CodeCapabilityViolation || ge.RefusedID() != "run-2" {
		t.Fatalf("after the revoke: %+v", ge.ErrorPayload)
	}
	// A grant from who may not grant is a *GatewayError.
	if _, err := bob.Grant(ctxT(t), wire.Grant{Recipient: "alice", Capabilities: wire.Kinds("chat")}); !errors.As(err, &ge) || ge.Code != wire.CodeCapabilityViolation {
		t.Fatalf("bob's grant: %v", err)
	}

	k, err := alice.Kick(ctxT(t), wire.Kick{Participant: "bob", Reason: "done", BanMS: 60000})
	if err != nil || k.Participant != "bob" || k.Connections != 1 || k.BannedUntil == nil {
		t.Fatalf("Kick: %+v, %v", k, err)
	}
	for {
		_, err := bob.Next(ctxT(t))
		if err == nil {
			continue
		}
		var ce *ClosedError
		if !errors.Is(err, ErrKicked) || !errors.As(err, &ce) || ce.Code != wire.CloseKicked {
			t.Fatalf("bob's Next after the kick: %v", err)
		}
		break
	}
	time.Sleep(200 * time.Millisecond)
	if bob.connected() {
		t.Fatal("bob reconnected after a kick")
	}
}

// Refresh: a fresh JWT keeps the connection past the first one's exp; a
// connection not refreshed ends at exp with ErrTokenExpired, and the
// client does not reconnect with its expired token.
func TestRefresh(t *testing.T) {
	url, secret := trustGateway(t)
	mint := func(sub string, exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(2 * time.Second)
	kept := dial(t, url, Options{Pod: "refresh", Token: mint("carol", exp)})
	expect[*Welcome](t, kept)
	lapsed := dial(t, url, Options{Pod: "refresh", Token: mint("dave", exp)})
	expect[*Welcome](t, lapsed)

	r, err := kept.Refresh(ctxT(t), mint("carol", time.Now().Add(time.Hour)))
	if err != nil || r.Participant != "carol" || r.Expires == nil {
		t.Fatalf("Refresh: %+v, %v", r, err)
	}
	var ge *GatewayError
	if _, err := kept.Refresh(ctxT(t), mint("mallory", time.Now().Add(time.Hour))); !errors.As(err, &ge) || ge.Code != wire.CodeAuthViolation {
		t.Fatalf("a refresh naming someone else: %v", err)
	}
	for {
		_, err := lapsed.Next(ctxT(t))
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("dave's Next after exp: %v", err)
		}
		break
	}
	if !kept.connected() {
		t.Fatal("carol, refreshed, was disconnected at the old exp")
	}
	if _, err := kept.Send(ctxT(t), &wire.Envelope{Kind: "chat"}); err != nil {
		t.Fatal(err)
	}
	if err := kept.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
