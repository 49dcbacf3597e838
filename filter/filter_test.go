package filter

import (
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

func mustQuery(t *testing.T, q string) *Filter {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromQuery(v)
	if err != nil {
		t.Fatalf("FromQuery(%q): %v", q, err)
	}
	return f
}

// jsonOf is the filter's JSON form as a generic map.
func jsonOf(t *testing.T, f *Filter) map[string]any {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDefaultJSON(t *testing.T) {
	b, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"main":true,"contexts":"all","types":[],"exclude_types":[],"ids":[],"subtree":false,"conclusions":false,"routing":"all","echo":false,"batch":false}`
	if string(b) != want {
		t.Fatalf("default filter\n got %s\nwant %s", b, want)
	}
	// The query of no filter parameter is the default; other parameters
	// are not the filter's business.
	f := mustQuery(t, "pod=lab&token=x&participant=alice&protocol=mcpx/v0.1")
	if !reflect.DeepEqual(jsonOf(t, f), jsonOf(t, Default())) {
		t.Fatalf("empty query: %v", jsonOf(t, f))
	}
}

func TestFromQuery(t *testing.T) {
	f := mustQuery(t, "main=0&contexts=none&types=reasoning,%20workflow&exclude_types=secret&ids=a,b,,c&subtree=1&conclusions=true&routing=directed&echo=1&batch=1")
	want := map[string]any{
		"main": false, "contexts": "none", "types": []any{"reasoning", "workflow"},
		"exclude_types": []any{"secret"}, "ids": []any{"a", "b", "c"}, "subtree": true,
		"conclusions": true, "routing": "directed", "echo": true, "batch": true,
	}
	if got := jsonOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %v\nwant %v", got, want)
	}
	// false and 0 are the same; an empty list is an empty list.
	f = mustQuery(t, "main=false&echo=0&types=&subtree=0")
	if f.Main || f.Echo || f.Subtree || len(f.Types) != 0 || f.Types == nil {
		t.Fatalf("%+v", f)
	}
	// The presets of ADR-k9j.
	for q, want := range map[string]map[string]any{
		"contexts=none":                       {"main": true, "contexts": "none", "types": []any{}},
		"contexts=none&types=reasoning":       {"main": true, "contexts": "none", "types": []any{"reasoning"}},
		"contexts=none&conclusions=1":         {"main": true, "contexts": "none", "conclusions": true},
		"main=0&contexts=none&ids=reason-789": {"main": false, "contexts": "none", "ids": []any{"reason-789"}},
	} {
		got := jsonOf(t, mustQuery(t, q))
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("%s: %s = %v, want %v", q, k, got[k], v)
			}
		}
	}
}

func TestFromQueryRefuses(t *testing.T) {
	long := strings.Repeat("x", envelope.MaxContextIDBytes+1)
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "t" + strconv.Itoa(i)
	}
	for _, q := range []url.Values{
		{"main": {"2"}},
		{"main": {"yes"}},
		{"main": {""}},
		{"echo": {"TRUE"}},
		{"subtree": {"on"}},
		{"conclusions": {"-1"}},
		{"batch": {"x"}},
		{"contexts": {"some"}},
		{"contexts": {""}},
		{"contexts": {"ALL"}},
		{"routing": {"direct"}},
		{"main": {"1", "0"}},
		{"types": {"a", "b"}},
		{"types": {"a\x01b"}},
		{"exclude_types": {strings.Repeat("t", envelope.MaxContextTypeBytes+1)}},
		{"ids": {long}},
		{"ids": {"ok,bad\x7f"}},
		{"types": {strings.Join(many, ",")}},
	} {
		f, err := FromQuery(q)
		if err == nil {
			t.Errorf("FromQuery(%v) = %+v, want an error", q, f)
			continue
		}
		var fe *Error
		if !errors.As(err, &fe) || fe.Message == "" || !strings.HasPrefix(err.Error(), "invalid_filter: ") {
			t.Errorf("FromQuery(%v): error %#v is not a filter.Error with a message", q, err)
		}
	}
	// At the limits: accepted.
	exact := make([]string, MaxEntries)
	for i := range exact {
		exact[i] = "t" + strconv.Itoa(i)
	}
	if _, err := FromQuery(url.Values{"types": {strings.Join(exact, ",")}, "ids": {long[:envelope.MaxContextIDBytes]}}); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
}

func TestUpdate(t *testing.T) {
	old := mustQuery(t, "contexts=none&types=reasoning&echo=1")
	before := jsonOf(t, old)

	f, err := old.Update([]byte(`{"main": false}`))
	if err != nil {
		t.Fatal(err)
	}
	got := jsonOf(t, f)
	want := jsonOf(t, old)
	want["main"] = false
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("partial update keeps the other fields\n got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(jsonOf(t, old), before) {
		t.Fatal("Update changed the old filter")
	}

	f, err = f.Update([]byte(` {"ids": ["r1", "r2"], "subtree": true, "types": [], "routing": "directed", "contexts": "all", "exclude_types": ["x"], "conclusions": true, "batch": true, "echo": false} `))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{
		"main": false, "contexts": "all", "types": []any{}, "exclude_types": []any{"x"},
		"ids": []any{"r1", "r2"}, "subtree": true, "conclusions": true, "routing": "directed",
		"echo": false, "batch": true,
	}
	if got := jsonOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %v\nwant %v", got, want)
	}
	// The compiled sets follow the update.
	m := &envelope.Meta{From: "bob", ContextID: "q", ContextType: "reasoning"}
	if !f.Admits(m, "alice") {
		t.Fatal("contexts=all after the update does not admit a context envelope")
	}
	m.ContextType = "x"
	if f.Admits(m, "alice") {
		t.Fatal("exclude_types=x after the update admits x")
	}
	// An empty object changes nothing.
	same, err := f.Update([]byte(`{}`))
	if err != nil || !reflect.DeepEqual(jsonOf(t, same), jsonOf(t, f)) {
		t.Fatalf("{}: %v %v", err, jsonOf(t, same))
	}
}

func TestUpdateRefuses(t *testing.T) {
	f := Default()
	for _, p := range []string{
		`{"contexts": "some"}`,
		`{"routing": "everyone"}`,
		`{"main": "yes"}`,
		`{"main": 1}`,
		`{"types": "reasoning"}`,
		`{"types": [1]}`,
		`{"ids": [""]}`,
		`{"ids": ["a\u0000"]}`,
		`{"exclude_types": ["` + strings.Repeat("t", 65) + `"]}`,
		`{"bogus": true}`,
		`{"Main": false}`, // field names are exact
		`{"main": true, "main": false}`,
		`{"main": null}`,
		`{"types": null}`,
		`{"types": ["a", null]}`,
		`{"contexts": 1}`,
		`null`,
		`{"main": true`,
		`{} {}`,
		`{"main": true} x`,
		`[]`,
		`"main"`,
		`{`,
		``,
	} {
		n, err := f.Update([]byte(p))
		if err == nil {
			t.Errorf("Update(%s) = %v, want an error", p, jsonOf(t, n))
			continue
		}
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("Update(%s): %T is not a filter.Error", p, err)
		}
	}
	if !reflect.DeepEqual(jsonOf(t, f), jsonOf(t, Default())) {
		t.Fatal("a refused update changed the filter")
	}
}

// admitCase is one envelope (or event) and whether a participant admits it.
type admitCase struct {
	name string
	m    envelope.Meta
	want bool
}

func ctxMeta(from, id, typ string, anc ...string) envelope.Meta {
	return envelope.Meta{Kind: envelope.FrameEnvelope, From: from, ContextID: id, ContextType: typ, Ancestors: anc}
}

func conclusion(m envelope.Meta) envelope.Meta {
	m.Flags |= envelope.FlagConclusion
	return m
}

func to(m envelope.Meta, ids ...string) envelope.Meta {
	m.To = ids
	return m
}

func event(id, typ string, anc ...string) envelope.Meta {
	return envelope.Meta{Kind: envelope.FrameContextEvent, Flags: envelope.FlagConclusion, From: wire.GatewayID,
		ContextID: id, ContextType: typ, Ancestors: anc}
}

func TestAdmits(t *testing.T) {
	const self = "me"
	main := envelope.Meta{Kind: envelope.FrameEnvelope, From: "bob"}
	reason := ctxMeta("bob", "reason-789", "reasoning")
	flow := ctxMeta("bob", "wf", "workflow")
	untyped := ctxMeta("bob", "u", "")
	child := ctxMeta("bob", "child", "workflow", "reason-789")
	grandchild := ctxMeta("bob", "gc", "", "child", "reason-789")
	own := envelope.Meta{Kind: envelope.FrameEnvelope, From: self}

	for _, tc := range []struct {
		query string
		cases []admitCase
	}{
		{"", []admitCase{
			{"main", main, true},
			{"context", reason, true},
			{"untyped context", untyped, true},
			{"event", event("wf", "workflow"), true},
			{"own envelope", own, false},
			{"own envelope in a context", ctxMeta(self, "x", ""), false},
			{"own envelope addressed to self", to(own, self), true},
			{"addressed to others", to(main, "carol"), true},
			{"addressed to others and self", to(main, "carol", self), true},
		}},
		{"echo=1", []admitCase{
			{"own envelope", own, true},
			{"own context envelope", ctxMeta(self, "x", ""), true},
		}},
		{"contexts=none", []admitCase{
			{"main", main, true},
			{"context", reason, false},
			{"event", event("reason-789", "reasoning"), false},
			{"conclusion", conclusion(reason), false},
			{"context addressed to self", to(reason, self), true},
			{"event addressed to self", to(event("wf", ""), self), true},
		}},
		{"contexts=none&types=reasoning", []admitCase{
			{"main", main, true},
			{"reasoning", reason, true},
			{"workflow", flow, false},
			{"untyped", untyped, false},
			{"child of reasoning, typed workflow", child, false},
			{"reasoning event", event("reason-789", "reasoning"), true},
			{"workflow event", event("wf", "workflow"), false},
		}},
		{"contexts=none&conclusions=1", []admitCase{
			{"main", main, true},
			{"context", reason, false},
			{"conclusion", conclusion(reason), true},
			{"conclusion in untyped", conclusion(untyped), true},
			{"event", event("wf", "workflow"), true},
		}},
		{"main=0&contexts=none&ids=reason-789", []admitCase{
			{"main", main, false},
			{"main addressed to self", to(main, self), true},
			{"the context", reason, true},
			{"its event", event("reason-789", "reasoning"), true},
			{"a child", child, false},
			{"the child's event", event("child", "workflow", "reason-789"), false},
			{"another", flow, false},
		}},
		{"main=0&contexts=none&ids=reason-789&subtree=1", []admitCase{
			{"the context", reason, true},
			{"a child", child, true},
			{"a grandchild", grandchild, true},
			{"the grandchild's event", event("gc", "", "child", "reason-789"), true},
			{"another", flow, false},
			{"a context whose id has the id as prefix", ctxMeta("bob", "reason-789x", ""), false},
			{"main", main, false},
		}},
		{"main=0&contexts=none&ids=child&subtree=1", []admitCase{
			{"the parent", reason, false},
			{"the context", child, true},
			{"below it", grandchild, true},
		}},
		{"exclude_types=reasoning", []admitCase{
			{"main", main, true},
			{"reasoning", reason, false},
			{"reasoning event", event("reason-789", "reasoning"), false},
			{"workflow", flow, true},
			{"untyped", untyped, true},
			{"reasoning addressed to self", to(reason, self), true},
			{"child of reasoning, typed workflow", child, true},
		}},
		{"contexts=all&types=reasoning&ids=reason-789&conclusions=1&subtree=1&exclude_types=reasoning", []admitCase{
			{"reasoning", reason, false},
			{"reasoning conclusion", conclusion(reason), false},
			{"reasoning event", event("reason-789", "reasoning"), false},
			{"reasoning addressed to self", to(reason, self), true},
			{"workflow child", child, true},
		}},
		{"exclude_types=", []admitCase{
			{"untyped", untyped, true},
		}},
		{"routing=directed", []admitCase{
			{"broadcast", main, true},
			{"addressed to others", to(main, "carol"), false},
			{"context addressed to others", to(reason, "carol"), false},
			{"addressed to self", to(main, self), true},
			{"addressed to others and self", to(main, "carol", self), true},
			{"own, addressed to others", to(own, "carol"), false},
		}},
		{"routing=directed&main=0&contexts=none", []admitCase{
			{"addressed to self", to(main, self), true},
			{"context addressed to self", to(reason, self), true},
			{"broadcast", main, false},
		}},
	} {
		f := mustQuery(t, tc.query)
		for _, c := range tc.cases {
			m := c.m
			if got := f.Admits(&m, self); got != c.want {
				t.Errorf("filter %q, %s: Admits = %v, want %v", tc.query, c.name, got, c.want)
			}
		}
	}
}

// admitsFixtures are filters and envelopes of every shape, for the
// allocation test and the benchmark.
func admitsFixtures(t testing.TB) ([]*Filter, []envelope.Meta) {
	var fs []*Filter
	for _, q := range []string{
		"", "contexts=none", "contexts=none&types=reasoning", "contexts=none&conclusions=1",
		"main=0&contexts=none&ids=reason-789", "main=0&contexts=none&ids=a,b,c,reason-789&subtree=1",
		"exclude_types=reasoning", "routing=directed&echo=1",
	} {
		v, _ := url.ParseQuery(q)
		f, err := FromQuery(v)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	ms := []envelope.Meta{
		{From: "bob"},
		ctxMeta("bob", "reason-789", "reasoning"),
		ctxMeta("bob", "gc", "", "child", "parent", "reason-789"),
		conclusion(ctxMeta("bob", "x", "workflow")),
		event("gc", "", "child", "reason-789"),
		to(ctxMeta("bob", "x", "reasoning"), "carol", "dave", "me"),
		to(envelope.Meta{From: "bob"}, "carol"),
		{From: "me"},
	}
	return fs, ms
}

func TestAdmitsAllocatesNothing(t *testing.T) {
	fs, ms := admitsFixtures(t)
	n := 0
	allocs := testing.AllocsPerRun(200, func() {
		for _, f := range fs {
			for i := range ms {
				if f.Admits(&ms[i], "me") {
					n++
				}
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("Admits allocates %v times per round, want 0", allocs)
	}
	if n == 0 {
		t.Fatal("nothing admitted: the fixtures test nothing")
	}
}

func BenchmarkAdmits(b *testing.B) {
	fs, ms := admitsFixtures(b)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		f := fs[i%len(fs)]
		if f.Admits(&ms[i%len(ms)], "me") {
			n++
		}
	}
	_ = n
}
