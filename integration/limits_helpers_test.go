package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// Helpers of the limit tests (limits_test.go, limits_env_test.go). Their
// names start with lim so that they cannot clash with other test files.

// limEnvelope is the JSON of one envelope with an id, a kind and, unless
// ctx is nil, a context field.
func limEnvelope(t *testing.T, id, kind string, ctx any) []byte {
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

// limSendAll writes the messages back to back and returns when the first
// write began.
func limSendAll(c *client, msgs [][]byte) time.Time {
	c.t.Helper()
	start := time.Now()
	for _, m := range msgs {
		c.sendRaw(m)
	}
	return start
}

// limTally is what became of envelopes sent with distinct ids: the ones a
// receiver got, in order, and the refusals the sender got, by id.
type limTally struct {
	relayed []string
	refused map[string]msg
	done    time.Time // when the last of them was accounted for
}

// limAccount reads the receiver and the sender until every id is either
// relayed or refused, failing on duplicates, strays and anything left
// unaccounted for after 10s: nothing may be dropped silently.
func limAccount(t *testing.T, sender, receiver *client, ids []string) limTally {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	r := limTally{refused: map[string]msg{}}
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < len(ids) && time.Now().Before(deadline) {
		got := false
		if m := receiver.next(5 * time.Millisecond); m != nil && m.kind() != "system/presence" {
			got = true
			id := m.str("id")
			if !want[id] {
				t.Fatalf("%s received an envelope that was not sent in this round: %v", receiver.ID, m)
			}
			if seen[id] {
				t.Fatalf("envelope %s delivered twice, or both delivered and refused", id)
			}
			seen[id] = true
			r.relayed = append(r.relayed, id)
		}
		if m := sender.next(5 * time.Millisecond); m != nil && m.kind() != "system/presence" {
			got = true
			id := m.str("correlation_id")
			if m.kind() != "system/error" || !want[id] {
				t.Fatalf("%s got %v, want a system/error about one of its envelopes", sender.ID, m)
			}
			if seen[id] {
				t.Fatalf("envelope %s refused twice, or both delivered and refused", id)
			}
			seen[id] = true
			r.refused[id] = m
		}
		if got {
			r.done = time.Now()
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

// limCount returns how many of ids are in set.
func limCount(ids []string, set map[string]bool) int {
	n := 0
	for _, id := range ids {
		if set[id] {
			n++
		}
	}
	return n
}

// limCheckRefusal checks a rate refusal: its code, retryable, and a
// positive retry_after_ms of at most maxMS.
func limCheckRefusal(t *testing.T, m msg, code string, maxMS float64) float64 {
	t.Helper()
	p := m.payload()
	if m.errCode() != code {
		t.Fatalf("refusal %v: code %q, want %q", p, m.errCode(), code)
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

// limAllowance is how many envelopes a bucket of burst tokens refilled at
// per a second can pass in elapsed, whatever the machine's speed.
func limAllowance(burst int, per float64, elapsed time.Duration) int {
	return burst + int(per*elapsed.Seconds())
}

// limQuery is the query of an upgrade to pod as id.
func limQuery(pod, id string) url.Values {
	return url.Values{"pod": {pod}, "participant": {id}}
}

// limExpectOverCapacity checks that joining pod as id is refused with 503
// over_capacity.
func limExpectOverCapacity(t *testing.T, g *testGateway, pod, id string) {
	t.Helper()
	status, code := refusal(t, g.WS, limQuery(pod, id), nil)
	if status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("join %s as %s: %d %q, want 503 over_capacity", pod, id, status, code)
	}
}

// limTryDial joins pod as id, reporting whether the upgrade succeeded.
func limTryDial(t *testing.T, g *testGateway, pod, id string) *client {
	t.Helper()
	c, resp, err := dialRaw(g.WS, limQuery(pod, id), nil)
	if err != nil {
		if resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil
	}
	return startClient(t, c, true)
}

// limContextIDs asks the gateway for the contexts of c's pod in state and
// returns their ids.
func limContextIDs(t *testing.T, c *client, state string) []string {
	t.Helper()
	reqID := fmt.Sprintf("q-%d", time.Now().UnixNano())
	c.send(map[string]any{"id": reqID, "kind": "gateway/contexts", "payload": map[string]any{"state": state}})
	m := limKind(t, c, "system/contexts")
	if m.str("correlation_id") != reqID {
		t.Fatalf("system/contexts answers %q, want %q", m.str("correlation_id"), reqID)
	}
	list, _ := m.payload()["contexts"].([]any)
	var ids []string
	for _, e := range list {
		o, _ := e.(map[string]any)
		id, _ := o["id"].(string)
		ids = append(ids, id)
	}
	return ids
}

// A participant that joins just after another may also receive the other's
// join presence although the welcome already listed it (the join is fanned
// out after the newcomer is a member). These readers skip presence where
// the test is not about it, so that the tests do not depend on that race.

// limKind is expectKind, skipping presence.
func limKind(t *testing.T, c *client, kind string) msg {
	t.Helper()
	m := c.nextOf()
	if m.kind() != kind {
		t.Fatalf("%s: got %s (%v), want %s", c.ID, m.kind(), m, kind)
	}
	return m
}

// limQuiet checks that nothing but presence arrives within d.
func limQuiet(t *testing.T, c *client, d time.Duration) {
	t.Helper()
	if m := c.nextNonPresence(d); m != nil {
		t.Fatalf("%s: got %v, want nothing", c.ID, m)
	}
}

// limPresence waits for the presence event of participant id, skipping
// the presence of others; anything else fails the test.
func limPresence(t *testing.T, c *client, event, id string) msg {
	t.Helper()
	for {
		m := c.expectKind("system/presence")
		p, _ := m.payload()["participant"].(map[string]any)
		if m.payload()["event"] == event && p["id"] == id {
			return m
		}
	}
}
