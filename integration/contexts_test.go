package integration

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// cxFull is an envelope with every field the gateway would fill, so that it
// is relayed byte for byte and its size is len of the result.
func cxFull(t *testing.T, id, from, kind string, ctx any, label string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"protocol": "mcpp/v0.1", "id": id, "ts": "2026-11-22T10:00:00.000Z", "from": from,
		"kind": kind, "context": ctx, "payload": map[string]any{"label": label},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cxErrors checks that what c received before the sentinel is exactly
// errors of code, correlated with ids in order.
func cxErrors(t *testing.T, got []harness.Msg, code string, ids ...string) {
	t.Helper()
	if len(got) != len(ids) {
		var cids []string
		for _, m := range got {
			cids = append(cids, m.Str("correlation_id")+"="+fmt.Sprint(m.Payload()["message"]))
		}
		t.Fatalf("received %q (%q), want %d %s errors", harness.Labels(got), cids, len(ids), code)
	}
	for i, m := range got {
		if m.ErrCode() != code || m.Str("correlation_id") != ids[i] {
			t.Fatalf("message %d: %s correlated with %q, want %s for %s", i, harness.Label(m), m.Str("correlation_id"), code, ids[i])
		}
		if r, _ := m.Payload()["retryable"].(bool); r {
			t.Fatalf("%s is retryable", code)
		}
		if msg, _ := m.Payload()["message"].(string); msg == "" {
			t.Fatalf("%s without a message", code)
		}
	}
}

// cxByID indexes a gateway/contexts list.
func cxByID(list []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, c := range list {
		out[fmt.Sprint(c["id"])] = c
	}
	return out
}

func TestContextDepthLimit(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil) // --max-depth 5
	const pod = "ctx-depth"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "")
	bad := func(id string, ctx any) {
		alice.Send(map[string]any{"id": id, "kind": "step", "context": ctx, "payload": map[string]any{"label": id}})
	}

	// An object chain of five, then a sixth.
	alice.Send(harness.LabelEnv("step", "d1", harness.ContextField("d1", "", "")))
	for i := 2; i <= 5; i++ {
		alice.Send(harness.LabelEnv("step", fmt.Sprintf("d%d", i), harness.ContextField(fmt.Sprintf("d%d", i), "", fmt.Sprintf("d%d", i-1))))
	}
	bad("bad-d6", harness.ContextField("d6", "", "d5"))
	// Paths: a path of n segments has depth n.
	alice.Send(harness.LabelEnv("step", "p5", "a/b/c/d/e"))
	bad("bad-p6", "a/b/c/d/e/f")
	bad("bad-p6b", "q/r/s/t/u/v")
	// An unknown parent counts as a root: its child has depth 2.
	alice.Send(harness.LabelEnv("step", "u2", harness.ContextField("u2", "", "nowhere")))
	for i := 3; i <= 5; i++ {
		alice.Send(harness.LabelEnv("step", fmt.Sprintf("u%d", i), harness.ContextField(fmt.Sprintf("u%d", i), "", fmt.Sprintf("u%d", i-1))))
	}
	bad("bad-u6", harness.ContextField("u6", "", "u5"))
	// A path under a deep registered object counts the registered depth.
	alice.Send(harness.LabelEnv("step", "m", harness.ContextField("m", "", "d3"))) // depth 4
	alice.Send(harness.LabelEnv("step", "mn", "m/n"))                              // depth 5
	bad("bad-mno", "m/n/o")
	// The deepest contexts still take envelopes.
	alice.Send(harness.LabelEnv("step", "d5-again", harness.ContextField("d5", "", "d4")))
	harness.Sentinel(alice, "depth", alice, obs)

	cxErrors(t, harness.Until(alice, "depth"), "context_depth_exceeded", "bad-d6", "bad-p6", "bad-p6b", "bad-u6", "bad-mno")
	if got := harness.Labels(harness.Until(obs, "depth")); got != "d1 d2 d3 d4 d5 p5 u2 u3 u4 u5 m mn d5-again" {
		t.Fatalf("obs received %q", got)
	}
	byID := cxByID(harness.Contexts(alice, map[string]any{"state": "all"}))
	for id, depth := range map[string]float64{"d1": 1, "d5": 5, "a/b/c/d/e": 5, "u2": 2, "u5": 5, "m": 4, "m/n": 5} {
		if c := byID[id]; c == nil || c["depth"] != depth {
			t.Errorf("%s: %v, want depth %v", id, c, depth)
		}
	}
	for _, id := range []string{"d6", "u6", "a/b/c/d/e/f", "m/n/o"} {
		if byID[id] != nil {
			t.Errorf("refused context %s was registered", id)
		}
	}
}

func TestContextConflict(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "ctx-conflict"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	bob := g.Dial(t, pod, "bob", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "")
	bad := func(c *harness.Client, id string, ctx any) {
		c.Send(map[string]any{"id": id, "kind": "step", "context": ctx, "payload": map[string]any{"label": id}})
	}
	alice.Send(harness.LabelEnv("step", "k-created", harness.ContextField("k", "reasoning", "p")))
	alice.Send(harness.LabelEnv("step", "xy-created", "x/y"))
	// Two senders are ordered by nothing: bob waits until both exist.
	for _, want := range []string{"k-created", "xy-created"} {
		if m := obs.NextNonPresence(5 * time.Second); m == nil || harness.Label(m) != want {
			t.Fatalf("obs: %v, want %s", m, want)
		}
	}
	bad(bob, "bad-type", harness.ContextField("k", "workflow", ""))
	bad(bob, "bad-parent", harness.ContextField("k", "", "q"))
	bad(alice, "bad-both", harness.ContextField("k", "reasoning", "q"))
	bob.Send(harness.LabelEnv("step", "k-omitted", harness.ContextField("k", "", "")))
	bob.Send(harness.LabelEnv("step", "k-repeated", harness.ContextField("k", "reasoning", "p")))
	bad(alice, "bad-path-parent", harness.ContextField("x/y", "", "z"))
	bad(alice, "bad-path-type", harness.ContextField("x/y", "t", ""))
	bob.Send(harness.LabelEnv("step", "xy-object", harness.ContextField("x/y", "", "x")))
	harness.Sentinel(alice, "conflict", alice, obs)
	harness.Sentinel(bob, "conflict", bob, obs)

	cxErrors(t, harness.Until(alice, "conflict"), "context_conflict", "bad-both", "bad-path-parent", "bad-path-type")
	cxErrors(t, harness.Until(bob, "conflict"), "context_conflict", "bad-type", "bad-parent")
	// bob's and alice's sentinels: the second may come before bob's
	// envelopes, so take what comes before both.
	rest := harness.Until(obs, "conflict")
	rest = append(rest, harness.Until(obs, "conflict")...)
	harness.SameLabels(t, "obs", rest, "k-omitted", "k-repeated", "xy-object")
	k := cxByID(harness.Contexts(obs, nil))["k"]
	if k == nil || k["type"] != "reasoning" || k["parent"] != "p" || k["messages"] != float64(3) || k["creator"] != "alice" {
		t.Fatalf("k: %v", k)
	}
	if p, _ := k["participants"].([]any); !reflect.DeepEqual(p, []any{"alice", "bob"}) {
		t.Fatalf("k participants %v: refused envelopes count no sender", k["participants"])
	}
}

func TestContextCycle(t *testing.T) {
	t.Parallel()
	// --max-depth 12: docs/protocol.md section 3 counts a chain built from
	// the leaf up whole, and this one is ten long.
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxDepth = 12 })
	const pod = "ctx-cycle"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "")
	bad := func(id string, ctx any) {
		alice.Send(map[string]any{"id": id, "kind": "step", "context": ctx, "payload": map[string]any{"label": id}})
	}
	bad("bad-self", harness.ContextField("s", "", "s"))
	alice.Send(harness.LabelEnv("step", "A", harness.ContextField("A", "", "B")))
	bad("bad-BA", harness.ContextField("B", "", "A"))
	alice.Send(harness.LabelEnv("step", "B-root", harness.ContextField("B", "", "")))
	// A long chain, created from the leaf up: a cycle closing it far from
	// where it starts is still a cycle.
	for i := 1; i <= 9; i++ {
		alice.Send(harness.LabelEnv("step", fmt.Sprintf("c%d", i), harness.ContextField(fmt.Sprintf("c%d", i), "", fmt.Sprintf("c%d", i+1))))
	}
	bad("bad-long", harness.ContextField("c10", "", "c1"))
	// Mixed forms.
	alice.Send(harness.LabelEnv("step", "x", harness.ContextField("x", "", "x/y")))
	bad("bad-path", "x/y")
	harness.Sentinel(alice, "cycle", alice, obs)

	cxErrors(t, harness.Until(alice, "cycle"), "context_cycle", "bad-self", "bad-BA", "bad-long", "bad-path")
	if got := harness.Labels(harness.Until(obs, "cycle")); got != "A B-root c1 c2 c3 c4 c5 c6 c7 c8 c9 x" {
		t.Fatalf("obs received %q", got)
	}
	if ids := harness.SortedIDs(harness.Contexts(obs, nil)); ids != "A,B,c1,c2,c3,c4,c5,c6,c7,c8,c9,x" {
		t.Fatalf("registered %s", ids)
	}
}

func TestContextInvalidSyntax(t *testing.T) {
	t.Parallel()
	const maxBytes = 400
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MaxContextBytes = maxBytes })
	const pod = "ctx-invalid"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "")

	sized := func(n int) string {
		head, tail := `{"id":"big","metadata":{"p":"`, `"}}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	cases := []string{
		`{"id":""}`,
		`{"id":"a\u0001b"}`,
		`{"id":"a\nb"}`,
		`{"id":"x","type":"t\u007f"}`,
		`{"id":"x","parent":"p\u0085"}`,
		`{"id":5}`,
		`{"id":"x","type":7}`,
		`{"type":"reasoning"}`,
		`{}`,
		`{"id":"x","id":"y"}`,
		`{"id":"x","metadata":5}`,
		`{"id":"x","metadata":[]}`,
		`{"id":"x","metadata":"m"}`,
		`{"id":"x","metadata":null}`,
		`{"id":"x","extra":1}`,
		`{"id":"` + strings.Repeat("i", 257) + `"}`,
		`{"id":"x","type":"` + strings.Repeat("t", 65) + `"}`,
		`""`,
		`"a//b"`,
		`"/a"`,
		`"a/"`,
		`"a b"`,
		`"a.b"`,
		`"a/b\u0000"`,
		`"é"`,
		`5`,
		`[]`,
		`["a"]`,
		`true`,
		sized(maxBytes + 1),
	}
	var ids []string
	for i, c := range cases {
		id := fmt.Sprintf("bad-%d", i)
		ids = append(ids, id)
		alice.SendRaw([]byte(fmt.Sprintf(`{"id":%q,"kind":"step","context":%s,"payload":{"label":%q}}`, id, c, id)))
	}
	// At the limits: accepted.
	alice.SendRaw([]byte(`{"kind":"step","context":` + sized(maxBytes) + `,"payload":{"label":"at-limit"}}`))
	alice.SendRaw([]byte(`{"kind":"step","context":{"id":"` + strings.Repeat("i", 256) + `","type":"` + strings.Repeat("t", 64) + `"},"payload":{"label":"long-names"}}`))
	alice.SendRaw([]byte(`{"kind":"step","context":"A-z_0/9-x","payload":{"label":"path-chars"}}`))
	alice.SendRaw([]byte(`{"kind":"step","context":{"id":"ünïcødé ok","metadata":{"any":[1,{"x":null}]}},"payload":{"label":"unicode"}}`))
	// null is not a context: the field breaks section 2.
	alice.SendRaw([]byte(`{"id":"null-ctx","kind":"step","context":null,"payload":{"label":"null"}}`))
	harness.Sentinel(alice, "invalid", alice, obs)

	got := harness.Until(alice, "invalid")
	if len(got) != len(ids)+1 {
		t.Fatalf("alice received %q", harness.Labels(got))
	}
	cxErrors(t, got[:len(ids)], "invalid_context", ids...)
	cxErrors(t, got[len(ids):], "invalid_envelope", "null-ctx")
	if got := harness.Labels(harness.Until(obs, "invalid")); got != "at-limit long-names path-chars unicode" {
		t.Fatalf("obs received %q", got)
	}
	// The context field is relayed exactly as sent.
	alice.SendRaw([]byte(`{"kind":"step","context":{ "metadata" : {"k": [1, 2.50]}, "id":"raw" },"payload":{"label":"raw"}}`))
	if b := obs.RawWithCx(t, `"raw"`); !strings.Contains(string(b), `"context":{ "metadata" : {"k": [1, 2.50]}, "id":"raw" }`) {
		t.Fatalf("context not relayed as sent: %s", b)
	}
}

// TestContextTimeoutWithActivity keeps a context busy for three times the
// timeout, then lets it go idle: it concludes once, by timeout, after its
// last envelope, with the stats of what was relayed in it.
func TestContextTimeoutWithActivity(t *testing.T) {
	// Not parallel: the pacing below is the point of the test.
	const timeout = 500 * time.Millisecond
	g := harness.StartGateway(t, func(c *gateway.Config) { c.ContextTimeout = timeout })
	const pod = "ctx-timeout"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	bob := g.Dial(t, pod, "bob", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "")
	ctx := harness.ContextField("t1", "reasoning", "ghost")

	var size int64
	var labels []string
	start := time.Now()
	for i := 0; time.Since(start) < 3*timeout; i++ {
		sender := alice
		if i%2 == 1 {
			sender = bob
		}
		label := fmt.Sprintf("e%d", i)
		b := cxFull(t, label, sender.ID, "step", ctx, label)
		sender.SendRaw(b)
		size += int64(len(b))
		labels = append(labels, label)
		time.Sleep(timeout / 10)
	}
	// The last one is filled by the gateway: its ts is the gateway's clock
	// when it was accepted, which is the context's last activity.
	alice.Send(harness.LabelEnv("step", "last", ctx))
	labels = append(labels, "last")
	// A refused envelope neither counts nor keeps the context alive.
	time.Sleep(timeout / 5)
	bob.Send(map[string]any{"id": "refused", "kind": "step", "context": harness.ContextField("t1", "other", ""), "payload": map[string]any{"label": "refused"}})

	var got []harness.Msg
	for {
		m := obs.NextNonPresence(5 * time.Second)
		if m == nil {
			t.Fatalf("no system/context within 5s after %s", harness.Labels(got))
		}
		if m.Kind() == "system/context" {
			// Each sender's envelopes come in order; the two senders'
			// only by the pacing, so compare them as sets.
			harness.SameLabels(t, "obs before the event", got, labels...)
			last := got[len(got)-1]
			if harness.Label(last) != "last" {
				t.Fatalf("obs received %s before the event: the last envelope is not last", harness.Labels(got))
			}
			filled := fmt.Sprintf(`"protocol":"mcpp/v0.1","id":%q,"ts":%q,"from":"alice",`, last.Str("id"), last.Str("ts"))
			b, _ := json.Marshal(harness.LabelEnv("step", "last", ctx))
			size += int64(len(b) + len(filled))

			s := harness.ContextEvent(t, m, "t1", "timeout")
			if s.Messages != int64(len(labels)) || s.Bytes != size || s.Depth != 2 ||
				!reflect.DeepEqual(s.Participants, []string{"alice", "bob"}) {
				t.Fatalf("stats %+v, want %d messages, %d bytes, depth 2, participants alice and bob", s, len(labels), size)
			}
			if s.LastActivity != last.Str("ts") {
				t.Fatalf("last activity %s, want the last accepted envelope's %s", s.LastActivity, last.Str("ts"))
			}
			if idle := harness.ParseTime(t, s.Concluded).Sub(harness.ParseTime(t, s.LastActivity)); idle < timeout {
				t.Fatalf("concluded after %v idle, before the timeout of %v", idle, timeout)
			}
			if busy := harness.ParseTime(t, s.LastActivity).Sub(harness.ParseTime(t, s.Created)); busy < 2*timeout {
				t.Fatalf("the context lived %v before its last envelope", busy)
			}
			ctxField, _ := m["context"].(map[string]any)
			if !reflect.DeepEqual(ctxField, map[string]any{"id": "t1", "type": "reasoning", "parent": "ghost"}) {
				t.Fatalf("event context %v", m["context"])
			}
			break
		}
		got = append(got, m)
	}
	harness.Sentinel(bob, "timeout", bob, obs)
	cxErrors(t, harness.Until(bob, "timeout"), "context_conflict", "refused")
	if rest := harness.Until(obs, "timeout"); len(rest) != 0 {
		t.Fatalf("after the event obs received %s", harness.Labels(rest))
	}
	c := cxByID(harness.Contexts(obs, map[string]any{"state": "all"}))["t1"]
	if c == nil || c["state"] != "concluded" || c["reason"] != "timeout" || c["messages"] != float64(len(labels)) {
		t.Fatalf("t1 after its timeout: %v", c)
	}
}

// TestContextConclusionCascade concludes a tree with a conclusion kind:
// the envelope comes first, then the root's event, then each child's after
// its parent's; each event goes exactly to the participants whose filter
// admits a conclusion-kind envelope in its context.
func TestContextConclusionCascade(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "ctx-cascade"
	alice := g.Dial(t, pod, "alice", "")
	everything := []string{"step:R", "step:C1", "step:G", "step:C2", "step:X", "conclusion:R", "event:R", "event:C1", "event:G", "event:C2"}
	observers := []struct {
		id, query string
		want      []string
	}{
		{"all", "", everything},
		{"none", "contexts=none", nil},
		{"conc", "contexts=none&conclusions=1", []string{"conclusion:R", "event:R", "event:C1", "event:G", "event:C2"}},
		{"type", "contexts=none&types=reasoning", []string{"step:R", "step:C2", "conclusion:R", "event:R", "event:C2"}},
		{"excl", "exclude_types=reasoning", []string{"step:C1", "step:G", "step:X", "event:C1", "event:G"}},
		{"ids", "main=0&contexts=none&ids=R", []string{"step:R", "conclusion:R", "event:R"}},
		{"sub", "main=0&contexts=none&ids=R&subtree=1", []string{"step:R", "step:C1", "step:G", "step:C2", "conclusion:R", "event:R", "event:C1", "event:G", "event:C2"}},
		{"subC1", "main=0&contexts=none&ids=C1&subtree=1", []string{"step:C1", "step:G", "event:C1", "event:G"}},
		{"mcpx", "protocol=mcpx/v0.1&contexts=none&conclusions=1", []string{"conclusion:R", "event:R", "event:C1", "event:G", "event:C2"}},
	}
	clients := map[string]*harness.Client{}
	var all []*harness.Client
	for _, o := range observers {
		clients[o.id] = g.Dial(t, pod, o.id, o.query)
		all = append(all, clients[o.id])
	}
	alice.Send(harness.LabelEnv("step", "step:R", harness.ContextField("R", "reasoning", "")))
	alice.Send(harness.LabelEnv("step", "step:C1", harness.ContextField("C1", "workflow", "R")))
	alice.Send(harness.LabelEnv("step", "step:G", harness.ContextField("G", "", "C1")))
	alice.Send(harness.LabelEnv("step", "step:C2", harness.ContextField("C2", "reasoning", "R")))
	alice.Send(harness.LabelEnv("step", "step:X", harness.ContextField("X", "workflow", "")))
	alice.Send(harness.LabelEnv("conclusion", "conclusion:R", harness.ContextField("R", "", "")))
	harness.Sentinel(alice, "cascade", all...)

	parent := map[string]string{"event:C1": "event:R", "event:C2": "event:R", "event:G": "event:C1"}
	for _, o := range observers {
		got := harness.Until(clients[o.id], "cascade")
		harness.SameLabels(t, o.id, got, o.want...)
		// Order: the envelopes as sent, the concluding envelope before any
		// event, each event after its parent's.
		pos := map[string]int{}
		firstEvent := len(got)
		for i, m := range got {
			l := harness.Label(m)
			pos[l] = i
			if strings.HasPrefix(l, "event:") {
				firstEvent = min(firstEvent, i)
			} else if i > firstEvent {
				t.Errorf("%s: %s after an event: %s", o.id, l, harness.Labels(got))
			}
			if p, ok := parent[l]; ok {
				if pp, seen := pos[p]; !seen && contains(o.want, p) || seen && pp > i {
					t.Errorf("%s: %s before %s: %s", o.id, l, p, harness.Labels(got))
				}
			}
		}
		var envs []string
		for _, l := range strings.Fields(harness.Labels(got[:firstEvent])) {
			envs = append(envs, l)
		}
		var wantEnvs []string
		for _, l := range o.want {
			if !strings.HasPrefix(l, "event:") {
				wantEnvs = append(wantEnvs, l)
			}
		}
		if strings.Join(envs, " ") != strings.Join(wantEnvs, " ") {
			t.Errorf("%s: envelopes %v, want %v in order", o.id, envs, wantEnvs)
		}
		if o.id == "mcpx" {
			for _, m := range got {
				if m.Str("protocol") != "mcpx/v0.1" {
					t.Errorf("mcpx participant received %s with protocol %q", harness.Label(m), m.Str("protocol"))
				}
			}
		}
		if o.id != "all" {
			continue
		}
		events := map[string]harness.Msg{}
		for _, m := range got {
			if m.Kind() == "system/context" {
				events[m.ContextID()] = m
			}
		}
		r := harness.ContextEvent(t, events["R"], "R", "conclusion")
		if r.Messages != 2 || r.Depth != 1 || !reflect.DeepEqual(r.Participants, []string{"alice"}) {
			t.Errorf("R stats %+v", r)
		}
		for id, want := range map[string]struct {
			ctx   map[string]any
			depth int
		}{
			"C1": {map[string]any{"id": "C1", "type": "workflow", "parent": "R"}, 2},
			"G":  {map[string]any{"id": "G", "parent": "C1"}, 3},
			"C2": {map[string]any{"id": "C2", "type": "reasoning", "parent": "R"}, 2},
		} {
			s := harness.ContextEvent(t, events[id], id, "parent_concluded")
			if s.Depth != want.depth || s.Messages != 1 || s.Concluded != r.Concluded {
				t.Errorf("%s stats %+v (R concluded %s)", id, s, r.Concluded)
			}
			if c, _ := events[id]["context"].(map[string]any); !reflect.DeepEqual(c, want.ctx) {
				t.Errorf("%s event context %v, want %v", id, c, want.ctx)
			}
		}
		if c, _ := events["R"]["context"].(map[string]any); !reflect.DeepEqual(c, map[string]any{"id": "R", "type": "reasoning"}) {
			t.Errorf("R event context %v", c)
		}
	}
	// The sender receives the events too (they are the gateway's), and X is
	// the one active context left.
	harness.Sentinel(alice, "cascade-self", alice)
	harness.SameLabels(t, "alice", harness.Until(alice, "cascade-self"), "event:R", "event:C1", "event:G", "event:C2")
	if ids := harness.SortedIDs(harness.Contexts(alice, nil)); ids != "X" {
		t.Fatalf("active after the cascade: %s", ids)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestContextReopen: an envelope naming a concluded id opens a new context,
// with its own type, parent and counters.
func TestContextReopen(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "ctx-reopen"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "contexts=none&conclusions=1")

	alice.Send(harness.LabelEnv("step", "a1", harness.ContextField("ro", "reasoning", "")))
	alice.Send(harness.LabelEnv("step", "a2", harness.ContextField("ro", "", "")))
	alice.Send(harness.LabelEnv("conclusion", "a3", harness.ContextField("ro", "", "")))
	// Reopened with another type and a parent: no conflict with the old one.
	alice.Send(harness.LabelEnv("step", "b1", harness.ContextField("ro", "workflow", "ghost")))
	alice.Send(harness.LabelEnv("reasoning/end", "b2", harness.ContextField("ro", "", "")))
	// And once more, left active.
	alice.Send(harness.LabelEnv("step", "c1", "ro"))
	harness.Sentinel(alice, "reopen", obs, alice)

	got := harness.Until(obs, "reopen")
	if l := harness.Labels(got); l != "a3 event:ro b2 event:ro" {
		t.Fatalf("obs received %q", l)
	}
	first := harness.ContextEvent(t, got[1], "ro", "conclusion")
	second := harness.ContextEvent(t, got[3], "ro", "conclusion")
	if first.Messages != 3 || first.Depth != 1 || second.Messages != 2 || second.Depth != 2 {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	if second.Created < first.Concluded {
		t.Fatalf("the second context was created at %s, before the first concluded at %s", second.Created, first.Concluded)
	}
	if c, _ := got[3]["context"].(map[string]any); !reflect.DeepEqual(c, map[string]any{"id": "ro", "type": "workflow", "parent": "ghost"}) {
		t.Fatalf("second event context %v", c)
	}
	if rest := harness.Until(alice, "reopen"); len(rest) != 0 {
		t.Fatalf("alice received %s", harness.Labels(rest))
	}
	// All three are queryable: the concluded ones until their retention.
	list := harness.Contexts(alice, map[string]any{"state": "all", "id": "ro"})
	if len(list) != 3 {
		t.Fatalf("gateway/contexts id=ro: %v", list)
	}
	var states, types []string
	var messages []float64
	for _, c := range list {
		states = append(states, fmt.Sprint(c["state"]))
		types = append(types, fmt.Sprint(c["type"]))
		messages = append(messages, c["messages"].(float64))
	}
	if fmt.Sprint(states, types, messages) != "[concluded concluded active] [reasoning workflow <nil>] [3 2 1]" {
		t.Fatalf("incarnations: %v %v %v", states, types, messages)
	}
	if active := harness.Contexts(alice, map[string]any{"id": "ro"}); len(active) != 1 || active[0]["messages"] != float64(1) {
		t.Fatalf("active ro: %v", active)
	}
}

// TestContextManyTimeouts opens 5,000 contexts and checks that each
// concludes by timeout, none early, all within a bounded time.
func TestContextManyTimeouts(t *testing.T) {
	// Not parallel: it is about timers firing on time.
	const n = 5000
	const timeout = time.Second
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.ContextTimeout = timeout
		c.ContextRetention = time.Minute
		c.Rate, c.Burst = 1e6, 1e6
		c.ContextCreateRate, c.ContextCreateBurst = 1e6, 1e6
		c.MaxContextsPerParticipant, c.MaxContextsPerPod = 2*n, 2*n
		c.SendQueue = 4 * n
	})
	const pod = "ctx-many"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	obs := g.Dial(t, pod, "obs", "main=0&contexts=none&conclusions=1")

	start := time.Now()
	for i := 0; i < n; i++ {
		alice.SendRaw(fmt.Appendf(nil, `{"kind":"step","context":{"id":"many-%d","type":"load"},"payload":{}}`, i))
	}
	sent := time.Now()
	deadline := sent.Add(timeout + 30*time.Second)
	seen := make(map[string]bool, n)
	var maxLate time.Duration
	for len(seen) < n {
		m := obs.Next(time.Until(deadline))
		if m == nil {
			t.Fatalf("%d of %d system/context events by %v after the last envelope", len(seen), n, timeout+30*time.Second)
		}
		if m.Kind() == "system/presence" {
			continue
		}
		id := m.ContextID()
		s := harness.ContextEvent(t, m, id, "timeout")
		if !strings.HasPrefix(id, "many-") || seen[id] {
			t.Fatalf("event for %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
		if s.Messages != 1 || s.Depth != 1 || !reflect.DeepEqual(s.Participants, []string{"alice"}) {
			t.Fatalf("%s stats %+v", id, s)
		}
		idle := harness.ParseTime(t, s.Concluded).Sub(harness.ParseTime(t, s.LastActivity))
		if idle < timeout {
			t.Fatalf("%s concluded after %v idle, before the timeout", id, idle)
		}
		maxLate = max(maxLate, idle-timeout)
	}
	t.Logf("%d contexts sent in %v; all concluded %v after the last was sent; latest conclusion %v after its timeout",
		n, sent.Sub(start), time.Since(sent), maxLate)
	if maxLate > 10*time.Second {
		t.Errorf("a context concluded %v after its timeout", maxLate)
	}
	if active := harness.Contexts(alice, nil); len(active) != 0 {
		t.Fatalf("%d contexts still active", len(active))
	}
	if concluded := harness.Contexts(alice, map[string]any{"state": "concluded", "limit": 2 * n}); len(concluded) != n {
		t.Fatalf("%d concluded contexts, want %d", len(concluded), n)
	}
}

// TestContextsRequest checks gateway/contexts: states, selection, limit,
// fields, and that concluded contexts are forgotten after the retention.
func TestContextsRequest(t *testing.T) {
	t.Parallel()
	const retention = time.Second
	g := harness.StartGateway(t, func(c *gateway.Config) { c.ContextRetention = retention })
	const pod = "ctx-query"
	alice := g.Dial(t, pod, "alice", "main=0&contexts=none")
	bob := g.Dial(t, pod, "bob", "main=0&contexts=none")

	var q1Bytes int
	for i := 0; i < 2; i++ {
		b := cxFull(t, fmt.Sprintf("q1-%d", i), "alice", "step", harness.ContextField("q1", "reasoning", ""), "q1")
		q1Bytes += len(b)
		alice.SendRaw(b)
	}
	harness.Sentinel(alice, "q1", bob) // q1 is older than q2
	harness.Until(bob, "q1")
	bob.Send(harness.LabelEnv("step", "q2", harness.ContextField("q2", "workflow", "q1")))
	harness.Sentinel(bob, "q2", alice)
	harness.Until(alice, "q2")
	alice.Send(harness.LabelEnv("conclusion", "q3", harness.ContextField("q3", "reasoning", "")))
	alice.Send(harness.LabelEnv("step", "zq", "zz/q"))
	harness.Sentinel(alice, "sent", alice)
	harness.Until(alice, "sent")

	active := harness.Contexts(alice, nil)
	if ids := harness.SortedIDs(active); ids != "q1,q2,zz/q" {
		t.Fatalf("active: %s", ids)
	}
	if active[0]["id"] != "q1" {
		t.Fatalf("not oldest first: %v", active)
	}
	fields := []string{"id", "type", "parent", "depth", "state", "reason", "creator", "messages", "bytes", "created", "last_activity", "concluded"}
	for _, c := range active {
		for _, f := range fields {
			if _, ok := c[f]; !ok {
				t.Fatalf("%v has no %s", c, f)
			}
		}
	}
	byID := cxByID(active)
	q1 := byID["q1"]
	if q1["type"] != "reasoning" || q1["parent"] != nil || q1["depth"] != float64(1) || q1["state"] != "active" ||
		q1["reason"] != nil || q1["creator"] != "alice" || q1["messages"] != float64(2) || q1["bytes"] != float64(q1Bytes) ||
		q1["concluded"] != nil {
		t.Fatalf("q1: %v (bytes want %d)", q1, q1Bytes)
	}
	harness.ParseTime(t, q1["created"].(string))
	harness.ParseTime(t, q1["last_activity"].(string))
	q2 := byID["q2"]
	if q2["type"] != "workflow" || q2["parent"] != "q1" || q2["depth"] != float64(2) || q2["creator"] != "bob" || q2["messages"] != float64(1) {
		t.Fatalf("q2: %v", q2)
	}
	if zq := byID["zz/q"]; zq["type"] != nil || zq["parent"] != "zz" || zq["depth"] != float64(2) {
		t.Fatalf("zz/q: %v", zq)
	}

	concluded := harness.Contexts(bob, map[string]any{"state": "concluded"})
	if len(concluded) != 1 {
		t.Fatalf("concluded: %v", concluded)
	}
	q3 := concluded[0]
	if q3["id"] != "q3" || q3["state"] != "concluded" || q3["reason"] != "conclusion" || q3["messages"] != float64(1) {
		t.Fatalf("q3: %v", q3)
	}
	if s, _ := q3["concluded"].(string); harness.ParseTime(t, s).Before(harness.ParseTime(t, q3["created"].(string))) {
		t.Fatalf("q3 concluded %v", q3["concluded"])
	}

	for _, c := range []struct {
		payload any
		want    string
	}{
		{map[string]any{"state": "all"}, "q1,q2,q3,zz/q"},
		{map[string]any{"state": "active"}, "q1,q2,zz/q"},
		{map[string]any{"id": "q2"}, "q2"},
		{map[string]any{"id": "q3"}, ""},
		{map[string]any{"id": "q3", "state": "all"}, "q3"},
		{map[string]any{"type": "reasoning"}, "q1"},
		{map[string]any{"type": "reasoning", "state": "all"}, "q1,q3"},
		{map[string]any{"state": "all", "limit": 1}, "q1"},
		{map[string]any{"state": "all", "limit": 2}, "q1,q2"},
		{map[string]any{}, "q1,q2,zz/q"},
	} {
		if got := harness.SortedIDs(harness.Contexts(bob, c.payload)); got != c.want {
			t.Errorf("gateway/contexts %v: %s, want %s", c.payload, got, c.want)
		}
	}
	for _, bad := range []any{
		map[string]any{"state": "done"},
		map[string]any{"limit": 0},
		map[string]any{"limit": "ten"},
		map[string]any{"bogus": 1},
		"active",
		[]any{},
	} {
		if m := harness.Request(bob, "gateway/contexts", bad, nil); m.ErrCode() != "invalid_envelope" {
			t.Errorf("gateway/contexts %v answered %v, want invalid_envelope", bad, m)
		}
	}

	// After the retention q3 is forgotten; the active ones stay.
	deadline := time.Now().Add(retention + 10*time.Second)
	for {
		if ids := harness.SortedIDs(harness.Contexts(bob, map[string]any{"state": "all"})); ids == "q1,q2,zz/q" {
			break
		} else if ids != "q1,q2,q3,zz/q" {
			t.Fatalf("while waiting for the retention: %s", ids)
		}
		if time.Now().After(deadline) {
			t.Fatalf("q3 still listed %v after its retention of %v", retention+10*time.Second, retention)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGatewayRequestIgnoresContext: a gateway/* request's context is
// neither checked nor registered, and the request is never relayed.
func TestGatewayRequestIgnoresContext(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "ctx-requests"
	alice := g.Dial(t, pod, "alice", "")
	obs := g.Dial(t, pod, "obs", "")
	alice.Send(harness.LabelEnv("step", "live", harness.ContextField("live", "reasoning", "")))
	if m := obs.NextNonPresence(5 * time.Second); m == nil || harness.Label(m) != "live" {
		t.Fatalf("obs: %v", m)
	}

	for _, ctx := range []any{
		harness.ContextField("gx", "t", ""),
		harness.ContextField("live", "other", "elsewhere"), // would conflict
		harness.ContextField("live", "", "live"),           // would be a cycle
		"a//b",                                             // invalid
		5,
		"a/b/c/d/e/f/g", // too deep
	} {
		m := harness.Request(alice, "gateway/contexts", nil, map[string]any{"context": ctx})
		if m.Kind() != "system/contexts" {
			t.Fatalf("gateway/contexts with context %v answered %v", ctx, m)
		}
		m = harness.Request(alice, "gateway/filter", map[string]any{}, map[string]any{"context": ctx})
		if m.Kind() != "system/filter" {
			t.Fatalf("gateway/filter with context %v answered %v", ctx, m)
		}
	}
	if m := harness.Request(alice, "gateway/nope", nil, map[string]any{"context": "a//b"}); m.ErrCode() != "unknown_request" {
		t.Fatalf("gateway/nope answered %v", m)
	}
	// A conclusion kind is no gateway request; but a gateway request in a
	// context concludes nothing and counts nothing.
	all := harness.Contexts(alice, map[string]any{"state": "all"})
	if len(all) != 1 || all[0]["id"] != "live" || all[0]["messages"] != float64(1) || all[0]["state"] != "active" {
		t.Fatalf("contexts after the requests: %v", all)
	}
	harness.Sentinel(alice, "requests", obs)
	if got := harness.Until(obs, "requests"); len(got) != 0 {
		t.Fatalf("obs received %s", harness.Labels(got))
	}
}
