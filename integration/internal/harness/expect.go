package harness

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// NextOf returns the next envelope that is not presence, failing after 5s.
func (c *Client) NextOf() Msg {
	c.T.Helper()
	return c.arrived(c.NextNonPresence(5 * time.Second))
}

// ExpectEnvelope returns the next envelope that is not presence and checks
// that it has this kind and id.
func (c *Client) ExpectEnvelope(kind, id string) Msg {
	c.T.Helper()
	m := c.NextOf()
	if m.Kind() != kind || m.Str("id") != id {
		c.T.Fatalf("%s: got %s id=%q (%v), want %s id=%q", c.ID, m.Kind(), m.Str("id"), m, kind, id)
	}
	return m
}

// PresenceOf checks that m is a presence event of this kind about id.
func PresenceOf(t *testing.T, m Msg, event, id string) {
	t.Helper()
	if m == nil || m.Kind() != "system/presence" {
		t.Fatalf("got %v, want system/presence %s of %s", m, event, id)
	}
	pl := m.Payload()
	who, _ := pl["participant"].(map[string]any)
	if pl["event"] != event || who["id"] != id {
		t.Fatalf("got presence %v, want %s of %s", pl, event, id)
	}
	if m.Str("from") != "system:gateway" {
		t.Fatalf("presence from %q, want system:gateway", m.Str("from"))
	}
}

// Relayed returns the next envelope that is not presence (checking its id
// unless id is "") and the raw text message that carried it. The client
// must not be batching.
func (c *Client) Relayed(id string) (Msg, []byte) {
	c.T.Helper()
	m := c.NextOf()
	if id != "" && m.Str("id") != id {
		c.T.Fatalf("%s: got %v, want id %q", c.ID, m, id)
	}
	// The raw message comes before its decoded envelope; older raw
	// messages (already read as envelopes) are skipped.
	for {
		select {
		case b := <-c.Raw:
			var r Msg
			if json.Unmarshal(b, &r) == nil && r.Str("id") == m.Str("id") {
				return m, b
			}
		case <-time.After(5 * time.Second):
			c.T.Fatalf("%s: raw message of %q not found", c.ID, m.Str("id"))
		}
	}
}

// ExpectErr is ExpectError skipping presence events.
func (c *Client) ExpectErr(code string) Msg {
	c.T.Helper()
	m := c.NextOf()
	if m.ErrCode() != code {
		c.T.Fatalf("%s: got %v, want system/error %q", c.ID, m, code)
	}
	return m
}

// WaitText reads envelopes until one whose payload text is text.
func (c *Client) WaitText(text string) {
	c.T.Helper()
	for {
		m := c.Expect()
		if s, _ := m.Payload()["text"].(string); s == text {
			return
		}
	}
}

// NextNonPresenceOrLeave waits for the leave presence of id, failing on
// anything else but presence; it returns nil after d.
func (c *Client) NextNonPresenceOrLeave(d time.Duration, id string) Msg {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for {
		m := c.Next(time.Until(deadline))
		if m == nil {
			return nil
		}
		if m.Kind() != "system/presence" {
			c.T.Fatalf("%s: got %v while waiting for %s to leave", c.ID, m, id)
		}
		who, _ := m.Payload()["participant"].(map[string]any)
		if m.Payload()["event"] == "leave" && who["id"] == id {
			return m
		}
	}
}

// RawWithCx waits for a raw message containing sub; it reads the parsed
// copy too so that both streams stay in step.
func (c *Client) RawWithCx(t *testing.T, sub string) []byte {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case b := <-c.Raw:
			if strings.Contains(string(b), sub) {
				return b
			}
		case <-deadline:
			t.Fatalf("%s: no message containing %s within 5s", c.ID, sub)
		}
	}
}

// AwaitPresence skips envelopes until a presence event of this kind about
// id, failing after within; it returns how long that took.
func (c *Client) AwaitPresence(event, id string, within time.Duration) time.Duration {
	c.T.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == "system/presence" && m.Payload()["event"] == event {
			if p, _ := m.Payload()["participant"].(map[string]any); p["id"] == id {
				return time.Since(start)
			}
		}
	}
	c.T.Fatalf("%s: no presence %s of %s within %v", c.ID, event, id, within)
	return 0
}

// ExpectBothWays has a send a chat envelope with id aID that b receives,
// and b one with id bID that a receives; then neither receives anything
// more. After refused envelopes, it shows that none was relayed and that
// both connections still work.
func ExpectBothWays(a, b *Client, aID, bID string) {
	a.T.Helper()
	a.Send(map[string]any{"id": aID, "kind": "chat"})
	b.ExpectEnvelope("chat", aID)
	b.Send(map[string]any{"id": bID, "kind": "chat"})
	a.ExpectEnvelope("chat", bID)
	a.ExpectNothing(30 * time.Millisecond)
	b.ExpectNothing(30 * time.Millisecond)
}
