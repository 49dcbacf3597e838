package integration

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestFilterPresets sends one envelope of each shape and checks what every
// preset of ADR-k9j (docs/protocol.md section 4) and the subtree and
// exclusion filters receive, events included.
func TestFilterPresets(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "filter-presets"
	alice := g.Dial(t, pod, "alice", "")
	type observer struct {
		query string
		want  []string // in the order sent
		c     *harness.Client
	}
	all := []string{"m1", "reason", "wf", "root", "child", "grand", "pq", "pqr", "pxq", "other-c", "event:other-1", "rc-c", "event:rc"}
	observers := []*observer{
		{query: "", want: all},
		{query: "contexts=all&main=1", want: all},
		// main only
		{query: "contexts=none", want: []string{"m1"}},
		// main plus a type
		{query: "contexts=none&types=reasoning", want: []string{"m1", "reason", "grand", "rc-c", "event:rc"}},
		// conclusions only
		{query: "contexts=none&conclusions=1", want: []string{"m1", "other-c", "event:other-1", "rc-c", "event:rc"}},
		// one context
		{query: "main=0&contexts=none&ids=reason-789", want: []string{"reason"}},
		// ids without subtree: only the named ones
		{query: "main=0&contexts=none&ids=root-1,p", want: []string{"root"}},
		// a subtree, object form: the root and its descendants, whatever their type
		{query: "main=0&contexts=none&ids=root-1&subtree=1", want: []string{"root", "child", "grand"}},
		// a subtree from the middle
		{query: "main=0&contexts=none&ids=child-1&subtree=1", want: []string{"child", "grand"}},
		// a subtree, path form: p's descendants, not px's
		{query: "main=0&contexts=none&ids=p&subtree=1", want: []string{"pq", "pqr"}},
		{query: "main=0&contexts=none&ids=p/q&subtree=1", want: []string{"pq", "pqr"}},
		// an excluded type
		{query: "exclude_types=reasoning", want: []string{"m1", "wf", "root", "child", "pq", "pqr", "pxq", "other-c", "event:other-1"}},
		// the excluded type wins over types, ids, subtree and conclusions
		{query: "main=0&contexts=none&types=reasoning&ids=reason-789,root-1&subtree=1&conclusions=1&exclude_types=reasoning",
			want: []string{"root", "child", "other-c", "event:other-1"}},
		// and over contexts=all
		{query: "main=0&exclude_types=reasoning,workflow,other", want: []string{"child", "pq", "pqr", "pxq"}},
	}
	var clients []*harness.Client
	for i, o := range observers {
		o.c = g.Dial(t, pod, "obs-"+string(rune('a'+i)), o.query)
		clients = append(clients, o.c)
	}
	// The welcome carries the effective filter.
	wf, _ := observers[3].c.Welcome.Payload()["filter"].(map[string]any)
	if !harness.JSONEqual(wf, map[string]any{"main": true, "contexts": "none", "types": []string{"reasoning"}, "exclude_types": []string{},
		"ids": []string{}, "subtree": false, "conclusions": false, "routing": "all", "echo": false, "batch": false}) {
		t.Fatalf("welcome filter %v", wf)
	}

	for _, e := range []map[string]any{
		harness.LabelEnv("chat", "m1", nil),
		harness.LabelEnv("reflection", "reason", harness.ContextField("reason-789", "reasoning", "")),
		harness.LabelEnv("step", "wf", harness.ContextField("wf-1", "workflow", "")),
		harness.LabelEnv("step", "root", harness.ContextField("root-1", "workflow", "")),
		harness.LabelEnv("step", "child", harness.ContextField("child-1", "", "root-1")),
		harness.LabelEnv("step", "grand", harness.ContextField("grand-1", "reasoning", "child-1")),
		harness.LabelEnv("step", "pq", "p/q"),
		harness.LabelEnv("step", "pqr", "p/q/r"),
		harness.LabelEnv("step", "pxq", "px/q"),
		harness.LabelEnv("conclusion", "other-c", harness.ContextField("other-1", "other", "")),
		harness.LabelEnv("reasoning/conclusion", "rc-c", harness.ContextField("rc", "reasoning", "")),
	} {
		alice.Send(e)
	}
	harness.Sentinel(alice, "presets", clients...)
	for _, o := range observers {
		got := harness.Until(o.c, "presets")
		if g, w := harness.Labels(got), strings.Join(o.want, " "); g != w {
			t.Errorf("filter %q received\n  %s\nwant\n  %s", o.query, g, w)
		}
	}
	// The sender, without echo, received none of its envelopes but the
	// gateway's events.
	harness.Sentinel(alice, "presets-self", alice)
	if got := harness.Labels(harness.Until(alice, "presets-self")); got != "event:other-1 event:rc" {
		t.Errorf("the sender received %q", got)
	}
}

// TestFilterRuntimeChange changes a filter with gateway/filter: the answer
// is the effective filter, a partial update keeps the other fields, a bad
// one is invalid_filter and leaves the filter as it was.
func TestFilterRuntimeChange(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "filter-runtime"
	alice := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "")

	ans := harness.Request(bob, "gateway/filter", map[string]any{"contexts": "none", "types": []string{"reasoning"}}, nil)
	if ans.Kind() != "system/filter" {
		t.Fatalf("gateway/filter answered %v", ans)
	}
	if to, _ := ans["to"].([]any); len(to) != 1 || to[0] != "bob" {
		t.Fatalf("answer to %v", ans["to"])
	}
	want := map[string]any{"main": true, "contexts": "none", "types": []any{"reasoning"}, "exclude_types": []any{},
		"ids": []any{}, "subtree": false, "conclusions": false, "routing": "all", "echo": false, "batch": false}
	if !reflect.DeepEqual(ans.Payload(), want) {
		t.Fatalf("effective filter\n got %v\nwant %v", ans.Payload(), want)
	}

	send := func(tag string) {
		alice.Send(harness.LabelEnv("chat", tag+"-main", nil))
		alice.Send(harness.LabelEnv("step", tag+"-reason", harness.ContextField("r", "reasoning", "")))
		alice.Send(harness.LabelEnv("step", tag+"-wf", harness.ContextField("w", "workflow", "")))
		harness.Sentinel(alice, tag, bob)
	}
	send("one")
	if got := harness.Labels(harness.Until(bob, "one")); got != "one-main one-reason" {
		t.Fatalf("after the first change bob received %q", got)
	}

	// A partial update keeps the fields it does not name.
	ans = harness.Request(bob, "gateway/filter", map[string]any{"main": false}, nil)
	want["main"] = false
	if ans.Kind() != "system/filter" || !reflect.DeepEqual(ans.Payload(), want) {
		t.Fatalf("partial update answered %s %v, want %v", ans.Kind(), ans.Payload(), want)
	}
	send("two")
	if got := harness.Labels(harness.Until(bob, "two")); got != "two-reason" {
		t.Fatalf("after the partial update bob received %q", got)
	}

	// Bad filters: invalid_filter, and the filter stays.
	for _, bad := range []map[string]any{
		{"contexts": "some"},
		{"routing": "everyone"},
		{"main": "no"},
		{"types": "workflow"},
		{"ids": []string{""}},
		{"bogus": true},
		{"main": true, "contexts": "bad"}, // all or nothing: main does not change either
	} {
		m := harness.Request(bob, "gateway/filter", bad, nil)
		if m.ErrCode() != "invalid_filter" {
			t.Fatalf("gateway/filter %v answered %v, want invalid_filter", bad, m)
		}
		if r, _ := m.Payload()["retryable"].(bool); r {
			t.Fatal("invalid_filter is retryable")
		}
	}
	// A payload that is not a filter object does not fit the request.
	if m := harness.Request(bob, "gateway/filter", []string{"main"}, nil); m.ErrCode() != "invalid_envelope" {
		t.Fatalf("gateway/filter with an array answered %v", m)
	}
	send("three")
	if got := harness.Labels(harness.Until(bob, "three")); got != "three-reason" {
		t.Fatalf("after refused updates bob received %q", got)
	}
	// An empty update answers the filter as it is.
	if ans = harness.Request(bob, "gateway/filter", map[string]any{}, nil); !reflect.DeepEqual(ans.Payload(), want) {
		t.Fatalf("empty update answered %v", ans.Payload())
	}

	// Back to everything; a change applies to envelopes accepted after the
	// answer, from any sender.
	ans = harness.Request(bob, "gateway/filter", map[string]any{"main": true, "contexts": "all", "types": []string{}}, nil)
	if ans.Kind() != "system/filter" {
		t.Fatalf("%v", ans)
	}
	send("four")
	if got := harness.Labels(harness.Until(bob, "four")); got != "four-main four-reason four-wf" {
		t.Fatalf("after the reset bob received %q", got)
	}
	// The answer was never relayed to alice.
	harness.Sentinel(bob, "alice-sees", alice)
	if got := harness.Until(alice, "alice-sees"); len(got) != 0 {
		t.Fatalf("alice received %s", harness.Labels(got))
	}
}

// TestFilterAddressedEnvelopes: an envelope whose to names the receiver
// passes any filter, exclusions included; one addressed to others passes
// only the filters that would admit it anyway, unless routing is directed.
func TestFilterAddressedEnvelopes(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "filter-addressed"
	alice := g.Dial(t, pod, "alice", "")
	nothing := g.Dial(t, pod, "nothing", "main=0&contexts=none")
	excl := g.Dial(t, pod, "excl", "exclude_types=reasoning")
	directed := g.Dial(t, pod, "directed", "routing=directed")
	carol := g.Dial(t, pod, "carol", "")

	for _, e := range []map[string]any{
		harness.LabelEnv("chat", "main-all", nil),
		harness.LabelEnv("step", "ctx-all", harness.ContextField("r", "reasoning", "")),
	} {
		alice.Send(e)
	}
	to := func(e map[string]any, ids ...string) map[string]any {
		e["to"] = ids
		return e
	}
	alice.Send(to(harness.LabelEnv("chat", "main-to-nothing", nil), "nothing"))
	alice.Send(to(harness.LabelEnv("step", "ctx-to-nothing", harness.ContextField("r", "", "")), "nothing"))
	alice.Send(to(harness.LabelEnv("step", "ctx-to-excl", harness.ContextField("r", "", "")), "excl"))
	alice.Send(to(harness.LabelEnv("step", "ctx-to-carol", harness.ContextField("r", "", "")), "carol"))
	alice.Send(to(harness.LabelEnv("chat", "main-to-carol", nil), "carol"))
	alice.Send(to(harness.LabelEnv("chat", "main-to-carol-and-directed", nil), "carol", "directed"))
	alice.Send(to(harness.LabelEnv("conclusion", "conclusion-to-nothing", harness.ContextField("r", "", "")), "nothing"))
	harness.Sentinel(alice, "addr", nothing, excl, directed, carol)

	if got := harness.Labels(harness.Until(nothing, "addr")); got != "main-to-nothing ctx-to-nothing conclusion-to-nothing" {
		// The event of r's conclusion is not addressed: the filter drops it.
		t.Errorf("main=0&contexts=none received %q", got)
	}
	if got := harness.Labels(harness.Until(excl, "addr")); got != "main-all main-to-nothing ctx-to-excl main-to-carol main-to-carol-and-directed" {
		t.Errorf("exclude_types=reasoning received %q", got)
	}
	if got := harness.Labels(harness.Until(directed, "addr")); got != "main-all ctx-all main-to-carol-and-directed event:r" {
		t.Errorf("routing=directed received %q", got)
	}
	if got := harness.Labels(harness.Until(carol, "addr")); got != "main-all ctx-all main-to-nothing ctx-to-nothing ctx-to-excl ctx-to-carol main-to-carol main-to-carol-and-directed conclusion-to-nothing event:r" {
		t.Errorf("carol received %q", got)
	}
	// A sender addressing itself receives its envelope, even without echo.
	alice.Send(to(harness.LabelEnv("chat", "to-self", nil), "alice"))
	if m := alice.NextNonPresence(5 * time.Second); m == nil || harness.Label(m) != "event:r" {
		t.Fatalf("alice: %v, want the event of r first", m)
	}
	if m := alice.NextNonPresence(5 * time.Second); m == nil || harness.Label(m) != "to-self" {
		t.Fatalf("alice: %v, want her envelope addressed to herself", m)
	}
}

// TestFilterRegisteredTypeCounts: filters see the type registered when the
// context was created, whatever a later envelope repeats or omits; naming
// another type is refused and reaches no one.
func TestFilterRegisteredTypeCounts(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "filter-registered-type"
	alice := g.Dial(t, pod, "alice", "")
	reasoners := g.Dial(t, pod, "reasoners", "main=0&contexts=none&types=reasoning")
	noReason := g.Dial(t, pod, "no-reason", "main=0&exclude_types=reasoning")
	untypedOnly := g.Dial(t, pod, "untyped", "main=0&exclude_types=reasoning,workflow")

	alice.Send(harness.LabelEnv("step", "created", harness.ContextField("rt", "reasoning", "")))
	alice.Send(harness.LabelEnv("step", "omitted", harness.ContextField("rt", "", "")))
	alice.Send(harness.LabelEnv("step", "path-form", "rt")) // a one-segment path names rt without a type
	alice.Send(map[string]any{"id": "conflict-1", "kind": "step", "context": harness.ContextField("rt", "workflow", ""), "payload": map[string]any{"label": "other-type"}})
	alice.Send(harness.LabelEnv("step", "repeated", harness.ContextField("rt", "reasoning", "")))
	// The reverse: created without a type, a later envelope cannot add one.
	alice.Send(harness.LabelEnv("step", "untyped-created", harness.ContextField("ut", "", "")))
	alice.Send(map[string]any{"id": "conflict-2", "kind": "step", "context": harness.ContextField("ut", "reasoning", ""), "payload": map[string]any{"label": "typed-later"}})
	alice.Send(harness.LabelEnv("step", "untyped-again", "ut"))
	harness.Sentinel(alice, "types", reasoners, noReason, untypedOnly, alice)

	if got := harness.Labels(harness.Until(reasoners, "types")); got != "created omitted path-form repeated" {
		t.Errorf("types=reasoning received %q", got)
	}
	if got := harness.Labels(harness.Until(noReason, "types")); got != "untyped-created untyped-again" {
		t.Errorf("exclude_types=reasoning received %q", got)
	}
	if got := harness.Labels(harness.Until(untypedOnly, "types")); got != "untyped-created untyped-again" {
		t.Errorf("exclude_types=reasoning,workflow received %q", got)
	}
	errs := harness.Until(alice, "types")
	if got := harness.Labels(errs); got != "error:context_conflict error:context_conflict" {
		t.Fatalf("alice received %q", got)
	}
	if errs[0].Str("correlation_id") != "conflict-1" || errs[1].Str("correlation_id") != "conflict-2" {
		t.Fatalf("errors correlate %q and %q", errs[0].Str("correlation_id"), errs[1].Str("correlation_id"))
	}
	// The registry still has the first types.
	list := harness.Contexts(alice, map[string]any{"state": "all"})
	for _, c := range list {
		switch c["id"] {
		case "rt":
			if c["type"] != "reasoning" || c["messages"] != float64(4) {
				t.Errorf("rt: %v", c)
			}
		case "ut":
			if c["type"] != nil || c["messages"] != float64(2) {
				t.Errorf("ut: %v", c)
			}
		}
	}
	if harness.SortedIDs(list) != "rt,ut" {
		t.Fatalf("contexts %s", harness.SortedIDs(list))
	}
}
