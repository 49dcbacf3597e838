package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// Helpers of the sub-context and filter tests (contexts_test.go,
// filters_test.go).

const cxSentinelKind = "test/sentinel"

// Sentinel sends, from c, a main-context envelope addressed to every
// participant in to (addressed envelopes pass every filter). Everything c
// sent before it, and every event that those envelopes caused, reaches each
// of them before it.
func Sentinel(c *Client, tag string, to ...*Client) {
	c.T.Helper()
	ids := make([]string, 0, len(to))
	for _, r := range to {
		ids = append(ids, r.ID)
	}
	c.Send(map[string]any{"kind": cxSentinelKind, "to": ids, "payload": map[string]any{"tag": tag}})
}

// Until returns what c receives before the sentinel tagged tag, presence
// left out; it fails the test when nothing comes for 5s.
func Until(c *Client, tag string) []Msg {
	c.T.Helper()
	var out []Msg
	for {
		m := c.NextNonPresence(5 * time.Second)
		if m == nil {
			c.T.Fatalf("%s: no sentinel %q within 5s (got %s)", c.ID, tag, Labels(out))
		}
		if m.Kind() == cxSentinelKind && m.Payload()["tag"] == tag {
			return out
		}
		out = append(out, m)
	}
}

// Label names a received envelope for comparisons: the label of its
// payload, "event:ID" for system/context, "error:CODE" for system/error,
// otherwise its kind.
func Label(m Msg) string {
	switch m.Kind() {
	case "system/context":
		return "event:" + m.ContextID()
	case "system/error":
		return "error:" + m.ErrCode()
	}
	if l, ok := m.Payload()["label"].(string); ok {
		return l
	}
	return m.Kind()
}

func Labels(ms []Msg) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = Label(m)
	}
	return strings.Join(s, " ")
}

// LabelEnv builds an envelope of kind with a label payload and, unless ctx is
// nil, a context field (an object as a map, or a path string).
func LabelEnv(kind, label string, ctx any) map[string]any {
	m := map[string]any{"kind": kind, "payload": map[string]any{"label": label}}
	if ctx != nil {
		m["context"] = ctx
	}
	return m
}

// ContextField is an object context field; typ and parent may be "".
func ContextField(id, typ, parent string) map[string]any {
	c := map[string]any{"id": id}
	if typ != "" {
		c["type"] = typ
	}
	if parent != "" {
		c["parent"] = parent
	}
	return c
}

// Request sends a gateway request with an id and returns the next
// envelope that is not presence, checking that it answers the request.
func Request(c *Client, kind string, payload any, extra map[string]any) Msg {
	c.T.Helper()
	id := fmt.Sprintf("req-%d", time.Now().UnixNano())
	env := map[string]any{"id": id, "kind": kind}
	if payload != nil {
		env["payload"] = payload
	}
	for k, v := range extra {
		env[k] = v
	}
	c.Send(env)
	m := c.NextNonPresence(5 * time.Second)
	if m == nil {
		c.T.Fatalf("%s: no answer to %s within 5s", c.ID, kind)
	}
	if m.Str("correlation_id") != id {
		c.T.Fatalf("%s: answer to %s has correlation_id %q, want %q: %v", c.ID, kind, m.Str("correlation_id"), id, m)
	}
	if m.Str("from") != "system:gateway" {
		c.T.Fatalf("%s: answer from %q", c.ID, m.Str("from"))
	}
	return m
}

// Contexts asks gateway/contexts with payload and returns the list.
func Contexts(c *Client, payload any) []map[string]any {
	c.T.Helper()
	m := Request(c, "gateway/contexts", payload, nil)
	if m.Kind() != "system/contexts" {
		c.T.Fatalf("%s: gateway/contexts answered %s: %v", c.ID, m.Kind(), m.Payload())
	}
	raw, ok := m.Payload()["contexts"].([]any)
	if !ok {
		c.T.Fatalf("%s: system/contexts without a contexts array: %v", c.ID, m.Payload())
	}
	out := make([]map[string]any, len(raw))
	for i, e := range raw {
		out[i], _ = e.(map[string]any)
	}
	return out
}

// SortedIDs is the ids of a gateway/contexts list, sorted.
func SortedIDs(list []map[string]any) string {
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, fmt.Sprint(c["id"]))
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// ContextStats is the stats of a system/context event.
type ContextStats struct {
	Messages     int64    `json:"messages"`
	Bytes        int64    `json:"bytes"`
	Participants []string `json:"participants"`
	Depth        int      `json:"depth"`
	Created      string   `json:"created"`
	LastActivity string   `json:"last_activity"`
	Concluded    string   `json:"concluded"`
}

// ContextEvent checks that m is a system/context event of the context id
// concluded for reason, and returns its stats.
func ContextEvent(t *testing.T, m Msg, id, reason string) ContextStats {
	t.Helper()
	if m == nil || m.Kind() != "system/context" {
		t.Fatalf("got %v, want system/context for %s", m, id)
	}
	if m.ContextID() != id || m.Str("from") != "system:gateway" {
		t.Fatalf("got system/context of %q from %q, want %s from system:gateway", m.ContextID(), m.Str("from"), id)
	}
	pl := m.Payload()
	if pl["event"] != "concluded" || pl["reason"] != reason {
		t.Fatalf("%s: event %v reason %v, want concluded %s", id, pl["event"], pl["reason"], reason)
	}
	b, _ := json.Marshal(pl["stats"])
	var s ContextStats
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

// ParseTime parses a gateway timestamp.
func ParseTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return ts
}

// SameLabels checks that got holds exactly the labels of want, in any
// order.
func SameLabels(t *testing.T, who string, got []Msg, want ...string) {
	t.Helper()
	g := strings.Fields(Labels(got))
	w := append([]string{}, want...)
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, " ") != strings.Join(w, " ") {
		t.Errorf("%s received %q, want (in any order) %q", who, Labels(got), strings.Join(want, " "))
	}
}
