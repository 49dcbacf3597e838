package integration

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// Helpers of the sub-context and filter tests (contexts_test.go,
// filters_test.go). Their names start with cx so that they do not meet the
// other test files' helpers.

const cxSentinelKind = "test/sentinel"

// cxSentinel sends, from c, a main-context envelope addressed to every
// participant in to (addressed envelopes pass every filter). Everything c
// sent before it, and every event that those envelopes caused, reaches each
// of them before it.
func cxSentinel(c *client, tag string, to ...*client) {
	c.t.Helper()
	ids := make([]string, 0, len(to))
	for _, r := range to {
		ids = append(ids, r.ID)
	}
	c.send(map[string]any{"kind": cxSentinelKind, "to": ids, "payload": map[string]any{"tag": tag}})
}

// cxUntil returns what c receives before the sentinel tagged tag, presence
// left out; it fails the test when nothing comes for 5s.
func cxUntil(c *client, tag string) []msg {
	c.t.Helper()
	var out []msg
	for {
		m := c.nextNonPresence(5 * time.Second)
		if m == nil {
			c.t.Fatalf("%s: no sentinel %q within 5s (got %s)", c.ID, tag, cxLabels(out))
		}
		if m.kind() == cxSentinelKind && m.payload()["tag"] == tag {
			return out
		}
		out = append(out, m)
	}
}

// cxLabel names a received envelope for comparisons: the label of its
// payload, "event:ID" for system/context, "error:CODE" for system/error,
// otherwise its kind.
func cxLabel(m msg) string {
	switch m.kind() {
	case "system/context":
		return "event:" + m.contextID()
	case "system/error":
		return "error:" + m.errCode()
	}
	if l, ok := m.payload()["label"].(string); ok {
		return l
	}
	return m.kind()
}

func cxLabels(ms []msg) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = cxLabel(m)
	}
	return strings.Join(s, " ")
}

// cxEnv builds an envelope of kind with a label payload and, unless ctx is
// nil, a context field (an object as a map, or a path string).
func cxEnv(kind, label string, ctx any) map[string]any {
	m := map[string]any{"kind": kind, "payload": map[string]any{"label": label}}
	if ctx != nil {
		m["context"] = ctx
	}
	return m
}

// cxCtx is an object context field; typ and parent may be "".
func cxCtx(id, typ, parent string) map[string]any {
	c := map[string]any{"id": id}
	if typ != "" {
		c["type"] = typ
	}
	if parent != "" {
		c["parent"] = parent
	}
	return c
}

// cxRequest sends a gateway request with an id and returns the next
// envelope that is not presence, checking that it answers the request.
func cxRequest(c *client, kind string, payload any, extra map[string]any) msg {
	c.t.Helper()
	id := fmt.Sprintf("req-%d", time.Now().UnixNano())
	env := map[string]any{"id": id, "kind": kind}
	if payload != nil {
		env["payload"] = payload
	}
	for k, v := range extra {
		env[k] = v
	}
	c.send(env)
	m := c.nextNonPresence(5 * time.Second)
	if m == nil {
		c.t.Fatalf("%s: no answer to %s within 5s", c.ID, kind)
	}
	if m.str("correlation_id") != id {
		c.t.Fatalf("%s: answer to %s has correlation_id %q, want %q: %v", c.ID, kind, m.str("correlation_id"), id, m)
	}
	if m.str("from") != "system:gateway" {
		c.t.Fatalf("%s: answer from %q", c.ID, m.str("from"))
	}
	return m
}

// cxContexts asks gateway/contexts with payload and returns the list.
func cxContexts(c *client, payload any) []map[string]any {
	c.t.Helper()
	m := cxRequest(c, "gateway/contexts", payload, nil)
	if m.kind() != "system/contexts" {
		c.t.Fatalf("%s: gateway/contexts answered %s: %v", c.ID, m.kind(), m.payload())
	}
	raw, ok := m.payload()["contexts"].([]any)
	if !ok {
		c.t.Fatalf("%s: system/contexts without a contexts array: %v", c.ID, m.payload())
	}
	out := make([]map[string]any, len(raw))
	for i, e := range raw {
		out[i], _ = e.(map[string]any)
	}
	return out
}

// cxContextIDs is the ids of a gateway/contexts list, sorted.
func cxContextIDs(list []map[string]any) string {
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, fmt.Sprint(c["id"]))
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// cxStats is the stats of a system/context event.
type cxStats struct {
	Messages     int64    `json:"messages"`
	Bytes        int64    `json:"bytes"`
	Participants []string `json:"participants"`
	Depth        int      `json:"depth"`
	Created      string   `json:"created"`
	LastActivity string   `json:"last_activity"`
	Concluded    string   `json:"concluded"`
}

// cxEvent checks that m is a system/context event of the context id
// concluded for reason, and returns its stats.
func cxEvent(t *testing.T, m msg, id, reason string) cxStats {
	t.Helper()
	if m == nil || m.kind() != "system/context" {
		t.Fatalf("got %v, want system/context for %s", m, id)
	}
	if m.contextID() != id || m.str("from") != "system:gateway" {
		t.Fatalf("got system/context of %q from %q, want %s from system:gateway", m.contextID(), m.str("from"), id)
	}
	pl := m.payload()
	if pl["event"] != "concluded" || pl["reason"] != reason {
		t.Fatalf("%s: event %v reason %v, want concluded %s", id, pl["event"], pl["reason"], reason)
	}
	b, _ := json.Marshal(pl["stats"])
	var s cxStats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: stats %s: %v", id, b, err)
	}
	for _, ts := range []string{s.Created, s.LastActivity, s.Concluded} {
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Fatalf("%s: stats time %q: %v", id, ts, err)
		}
	}
	if s.Created > s.LastActivity || s.LastActivity > s.Concluded {
		t.Fatalf("%s: created %s, last activity %s, concluded %s are out of order", id, s.Created, s.LastActivity, s.Concluded)
	}
	return s
}

// cxTime parses a gateway timestamp.
func cxTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return ts
}

// cxSameLabels checks that got holds exactly the labels of want, in any
// order.
func cxSameLabels(t *testing.T, who string, got []msg, want ...string) {
	t.Helper()
	g := strings.Fields(cxLabels(got))
	w := append([]string{}, want...)
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, " ") != strings.Join(w, " ") {
		t.Errorf("%s received %q, want (in any order) %q", who, cxLabels(got), strings.Join(want, " "))
	}
}
