package harness

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// Helpers of the limit tests (limits_test.go, limits_env_test.go).

// EnvelopeJSON is the JSON of one envelope with an id, a kind and, unless
// ctx is nil, a context field.
func EnvelopeJSON(t *testing.T, id, kind string, ctx any) []byte {
	t.Helper()
	m := map[string]any{"id": id, "kind": kind, "payload": map[string]any{"n": id}}
	if ctx != nil {
		m["context"] = ctx
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SendAll writes the messages back to back and returns when the first
// write began.
func SendAll(c *Client, msgs [][]byte) time.Time {
	c.T.Helper()
	start := time.Now()
	for _, m := range msgs {
		c.SendRaw(m)
	}
	return start
}

// Tally is what became of envelopes sent with distinct ids: the ones a
// receiver got, in order, and the refusals the sender got, by id.
type Tally struct {
	Relayed []string
	Refused map[string]Msg
	Done    time.Time // when the last of them was accounted for
}

// Account reads the receiver and the sender until every id is either
// relayed or refused, failing on duplicates, strays and anything left
// unaccounted for after 10s: nothing may be dropped silently.
func Account(t *testing.T, sender, receiver *Client, ids []string) Tally {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	r := Tally{Refused: map[string]Msg{}}
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < len(ids) && time.Now().Before(deadline) {
		got := false
		if m := receiver.Next(5 * time.Millisecond); m != nil && m.Kind() != "system/presence" {
			got = true
			id := m.Str("id")
			if !want[id] {
				t.Fatalf("%s received an envelope that was not sent in this round: %v", receiver.ID, m)
			}
			if seen[id] {
				t.Fatalf("envelope %s delivered twice, or both delivered and refused", id)
			}
			seen[id] = true
			r.Relayed = append(r.Relayed, id)
		}
		if m := sender.Next(5 * time.Millisecond); m != nil && m.Kind() != "system/presence" {
			got = true
			id := m.Str("correlation_id")
			if m.Kind() != "system/error" || !want[id] {
				t.Fatalf("%s got %v, want a system/error about one of its envelopes", sender.ID, m)
			}
			if seen[id] {
				t.Fatalf("envelope %s refused twice, or both delivered and refused", id)
			}
			seen[id] = true
			r.Refused[id] = m
		}
		if got {
			r.Done = time.Now()
		}
	}
	if len(seen) != len(ids) {
		var missing []string
		for _, id := range ids {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		t.Fatalf("%d of %d envelopes neither relayed nor refused within 10s (dropped silently): %v", len(missing), len(ids), missing)
	}
	return r
}

// CountIn returns how many of ids are in set.
func CountIn(ids []string, set map[string]bool) int {
	n := 0
	for _, id := range ids {
		if set[id] {
			n++
		}
	}
	return n
}

// CheckRateRefusal checks a rate refusal: its code, retryable, and a
// positive retry_after_ms of at most maxMS.
func CheckRateRefusal(t *testing.T, m Msg, code string, maxMS float64) float64 {
	t.Helper()
	p := m.Payload()
	if m.ErrCode() != code {
		t.Fatalf("refusal %v: code %q, want %q", p, m.ErrCode(), code)
	}
	if r, _ := p["retryable"].(bool); !r {
		t.Fatalf("refusal %v: not retryable", p)
	}
	ms, ok := p["retry_after_ms"].(float64)
	if !ok || ms <= 0 || ms != float64(int64(ms)) {
		t.Fatalf("refusal %v: retry_after_ms must be a positive integer", p)
	}
	if maxMS > 0 && ms > maxMS {
		t.Fatalf("refusal %v: retry_after_ms %v, more than the %vms one token takes", p, ms, maxMS)
	}
	return ms
}

// Allowance is how many envelopes a bucket of burst tokens refilled at
// per a second can pass in elapsed, whatever the machine's speed.
func Allowance(burst int, per float64, elapsed time.Duration) int {
	return burst + int(per*elapsed.Seconds())
}

// JoinQuery is the query of an upgrade to pod as id.
func JoinQuery(pod, id string) url.Values {
	return url.Values{"pod": {pod}, "participant": {id}}
}

// ExpectOverCapacity checks that joining pod as id is refused with 503
// over_capacity.
func ExpectOverCapacity(t *testing.T, g *Gateway, pod, id string) {
	t.Helper()
	status, code := Refusal(t, g.WS, JoinQuery(pod, id), nil)
	if status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("join %s as %s: %d %q, want 503 over_capacity", pod, id, status, code)
	}
}

// TryDial joins pod as id, reporting whether the upgrade succeeded.
func TryDial(t *testing.T, g *Gateway, pod, id string) *Client {
	t.Helper()
	c, err := DialConn(g.WS, JoinQuery(pod, id), nil)
	if err != nil {
		return nil
	}
	return StartClient(t, c, true)
}

// ContextIDs asks the gateway for the contexts of c's pod in state and
// returns their ids.
func ContextIDs(t *testing.T, c *Client, state string) []string {
	t.Helper()
	var ids []string
	for _, o := range Contexts(c, map[string]any{"state": state}) {
		id, _ := o["id"].(string)
		ids = append(ids, id)
	}
	return ids
}

// A participant that joins just after another may also receive the other's
// join presence although the welcome already listed it (the join is fanned
// out after the newcomer is a member). These readers skip presence where
// the test is not about it, so that the tests do not depend on that race.

// ExpectOther is ExpectKind skipping presence.
func (c *Client) ExpectOther(kind string) Msg {
	c.T.Helper()
	return c.ofKind(c.NextOf(), kind)
}

// ExpectQuiet checks that nothing but presence arrives within d.
func (c *Client) ExpectQuiet(d time.Duration) {
	c.T.Helper()
	if m := c.NextNonPresence(d); m != nil {
		c.T.Fatalf("%s: got %v, want nothing", c.ID, m)
	}
}

// ExpectPresence waits for the presence event of participant id, skipping
// the presence of others; anything else fails the test.
func (c *Client) ExpectPresence(event, id string) Msg {
	c.T.Helper()
	for {
		m := c.ExpectKind("system/presence")
		p, _ := m.Payload()["participant"].(map[string]any)
		if m.Payload()["event"] == event && p["id"] == id {
			return m
		}
	}
}
