package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/wire"
)

// Who may do what, changed while the pod runs (docs/protocol.md sections
// 1 and 6): a fresh token for the connection, a kick, and capabilities
// granted and revoked at run time.

// Refresh gives the gateway a fresh token for this connection
// (gateway/refresh) before the current one expires: its claims apply from
// the answer on, and the client presents it on every later reconnection.
// It must name the same participant. A refusal is a *GatewayError whose
// message names the claim that failed.
func (c *Client) Refresh(ctx context.Context, token string) (wire.Refreshed, error) {
	ans, err := c.Request(ctx, wire.RequestRefresh, wire.Refresh{Token: token})
	if err != nil {
		return wire.Refreshed{}, err
	}
	var out wire.Refreshed
	if err := ans.DecodePayload(&out); err != nil {
		return out, fmt.Errorf("client: refresh: %w", err)
	}
	c.mu.Lock()
	// The next upgrade presents the new token, in the header: one the
	// URL's query carried is dropped from it.
	c.header = c.header.Clone()
	c.header.Set("Authorization", "Bearer "+token)
	if c.secret != "" {
		u := *c.base
		q := u.Query()
		q.Del(wire.QueryToken)
		u.RawQuery = q.Encode()
		c.base, c.secret = &u, ""
	}
	c.mu.Unlock()
	return out, nil
}

// Kick removes a participant from the pod (gateway/kick; the client needs
// the gateway/kick capability): every connection and MCP session of it
// is closed (code 4410), everyone sees it leave with reason, and its
// joins are refused for ban (0: it may come back at once; at most a
// week).
func (c *Client) Kick(ctx context.Context, k wire.Kick) (wire.Kicked, error) {
	ans, err := c.Request(ctx, wire.RequestKick, k)
	if err != nil {
		return wire.Kicked{}, err
	}
	var out wire.Kicked
	if err := ans.DecodePayload(&out); err != nil {
		return out, fmt.Errorf("client: kick: %w", err)
	}
	return out, nil
}

// Grant grants capabilities to another participant (capability/grant; the
// client needs the capability/grant capability). The grant is an envelope
// of the pod, sent to its recipient; the gateway answers with a
// system/capability whose grant_id names the grant (its envelope id), to
// Revoke it by. With g.Context set, the grant holds only in that context
// and its subtree, and ends when the context concludes.
func (c *Client) Grant(ctx context.Context, g wire.Grant) (wire.CapabilityEvent, error) {
	return c.capabilityChange(ctx, wire.KindGrant, g.Recipient, g)
}

// Revoke ends a grant (r.GrantID) or takes capabilities out of what the
// client granted r.Recipient (r.Capabilities) (capability/revoke). The
// recipient is told.
func (c *Client) Revoke(ctx context.Context, r wire.Revoke) (wire.CapabilityEvent, error) {
	return c.capabilityChange(ctx, wire.KindRevoke, r.Recipient, r)
}

// capabilityChange sends a grant or a revoke to recipient and waits for
// the gateway's answer. It is not sent again on a new connection (it is
// an envelope of the pod): when the connection is lost first, the error
// wraps ErrDisconnected.
func (c *Client) capabilityChange(ctx context.Context, kind, recipient string, payload any) (wire.CapabilityEvent, error) {
	env, err := wire.NewEnvelope(kind, payload)
	if err != nil {
		return wire.CapabilityEvent{}, fmt.Errorf("client: %s: %w", kind, err)
	}
	env.ID = uuid.NewString()
	env.To = []string{recipient}
	ans, _, err := c.roundTrip(ctx, env, false)
	if err != nil {
		return wire.CapabilityEvent{}, fmt.Errorf("client: %s %s: %w", kind, env.ID, err)
	}
	if ans.Kind == wire.KindError {
		ge := &GatewayError{Envelope: ans}
		if err := ans.DecodePayload(&ge.ErrorPayload); err != nil {
			return wire.CapabilityEvent{}, fmt.Errorf("client: %s %s: %w", kind, env.ID, err)
		}
		return wire.CapabilityEvent{}, fmt.Errorf("client: %s %s: %w", kind, env.ID, ge)
	}
	var out wire.CapabilityEvent
	if err := json.Unmarshal(ans.Payload, &out); err != nil {
		return out, fmt.Errorf("client: %s %s: %w", kind, env.ID, err)
	}
	return out, nil
}
