package filter_test

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/wire"
)

// The fuzz targets of this file check, for any input, that building a
// filter never panics, that a refusal is always a *filter.Error (the
// gateway type-asserts it to answer invalid_filter), that an accepted
// filter is well formed and survives a round trip through its JSON form
// (the welcome's "filter", which a client may send back in
// gateway/filter), and that Admits never panics and keeps the rules of
// docs/protocol.md section 4 that hold whatever the filter says.

const self = "me"

// fuzzMetas are envelopes and context events of every shape the fan-out
// decides on; extra adds some that name the filter's own entries, so that
// the set look-ups are exercised with hits.
func fuzzMetas(f *filter.Filter) []envelope.Meta {
	metas := []envelope.Meta{
		{Kind: envelope.FrameEnvelope, From: "alice"},
		{Kind: envelope.FrameEnvelope, From: self},
		{Kind: envelope.FrameEnvelope, From: "alice", To: []string{self}},
		{Kind: envelope.FrameEnvelope, From: self, To: []string{self}},
		{Kind: envelope.FrameEnvelope, From: "alice", To: []string{"bob"}},
		{Kind: envelope.FrameEnvelope, From: "alice", To: []string{"bob", self}},
		{Kind: envelope.FrameEnvelope, From: "alice", ContextID: "r1", ContextType: "reasoning"},
		{Kind: envelope.FrameEnvelope, From: "alice", ContextID: "r1"},
		{Kind: envelope.FrameEnvelope, From: "alice", ContextID: "a/b/c", ContextType: "plan", Ancestors: []string{"a/b", "a"}, Flags: envelope.FlagPath},
		{Kind: envelope.FrameEnvelope, From: "alice", ContextID: "r2", ContextType: "reasoning", Flags: envelope.FlagConclusion, To: []string{"bob"}},
		{Kind: envelope.FrameContextEvent, From: wire.GatewayID, ContextID: "r1", ContextType: "reasoning", Flags: envelope.FlagConclusion},
		{Kind: envelope.FrameContextEvent, From: wire.GatewayID, ContextID: "c", ContextType: "x", Ancestors: []string{"p", "q"}, Flags: envelope.FlagConclusion, To: []string{self}},
	}
	for _, list := range [][]string{f.Types, f.ExcludeTypes, f.IDs} {
		for i, v := range list {
			if i == 3 {
				break
			}
			metas = append(metas,
				envelope.Meta{Kind: envelope.FrameEnvelope, From: "alice", ContextID: v, ContextType: v},
				envelope.Meta{Kind: envelope.FrameEnvelope, From: "alice", ContextID: "child", ContextType: "t", Ancestors: []string{"parent", v}},
				envelope.Meta{Kind: envelope.FrameEnvelope, From: "alice", ContextID: v, ContextType: "t", Flags: envelope.FlagConclusion, To: []string{self}},
			)
		}
	}
	return metas
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkAccepted checks an accepted filter: its fields, its JSON round
// trip, and Admits on every sample.
func checkAccepted(t *testing.T, f *filter.Filter) {
	t.Helper()
	if f == nil {
		t.Fatal("accepted without a filter")
	}
	if f.Contexts != wire.ContextsAll && f.Contexts != wire.ContextsNone {
		t.Fatalf("contexts %q accepted", f.Contexts)
	}
	if f.Routing != wire.RoutingAll && f.Routing != wire.RoutingDirected {
		t.Fatalf("routing %q accepted", f.Routing)
	}
	for _, list := range [][]string{f.Types, f.ExcludeTypes, f.IDs} {
		if list == nil || len(list) > filter.MaxEntries {
			t.Fatalf("list of %d entries (nil: %v)", len(list), list == nil)
		}
		for _, v := range list {
			if v == "" || len(v) > envelope.MaxContextIDBytes {
				t.Fatalf("entry %q accepted", v)
			}
			// No context type or id can hold invalid UTF-8 (the gateway
			// refuses such messages), and the welcome would report the
			// entry with U+FFFD in place of each bad byte.
			if !utf8.ValidString(v) {
				t.Fatalf("entry %q is not valid UTF-8", v)
			}
		}
	}

	// The effective filter, as the welcome shows it, is accepted back by
	// gateway/filter and means the same.
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatalf("an accepted filter does not marshal: %v", err)
	}
	back, err := filter.Default().Update(b)
	if err != nil {
		t.Fatalf("the JSON of an accepted filter is refused by Update: %v\n%s", err, b)
	}
	b2, _ := json.Marshal(back)
	var x, y any
	_ = json.Unmarshal(b, &x)
	_ = json.Unmarshal(b2, &y)
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("round trip changed the filter:\n%s\n%s", b, b2)
	}

	metas := fuzzMetas(f)
	for i := range metas {
		m := &metas[i]
		got := f.Admits(m, self)
		addressed := contains(m.To, self)
		switch {
		case addressed:
			// docs/protocol.md section 4: an envelope whose to names the
			// participant is always delivered, whatever the filter.
			if !got {
				t.Fatalf("%+v addressed to %s refused by %s", m, self, b)
			}
		case len(m.To) > 0 && f.Routing == wire.RoutingDirected:
			if got {
				t.Fatalf("routing=directed admitted %+v addressed to others", m)
			}
		case m.From == self && !f.Echo:
			if got {
				t.Fatalf("echo=0 admitted its own envelope %+v", m)
			}
		case m.ContextID == "":
			if got != f.Main {
				t.Fatalf("main=%v but Admits(main envelope) = %v", f.Main, got)
			}
		case contains(f.ExcludeTypes, m.ContextType):
			if got {
				t.Fatalf("exclude_types %v admitted %+v", f.ExcludeTypes, m)
			}
		case f.Contexts == wire.ContextsAll || contains(f.Types, m.ContextType) || contains(f.IDs, m.ContextID):
			if !got {
				t.Fatalf("%+v refused by %s", m, b)
			}
		}
	}
}

// checkRefused checks that a refusal is a *filter.Error with a message.
func checkRefused(t *testing.T, f *filter.Filter, err error) {
	t.Helper()
	fe, ok := err.(*filter.Error)
	if !ok {
		t.Fatalf("error %T (%v), want *filter.Error", err, err)
	}
	if fe == nil || fe.Message == "" {
		t.Fatalf("error without a message: %#v", err)
	}
	if f != nil {
		t.Fatalf("refused with a filter: %+v", f)
	}
}

// FuzzFromQuery: the upgrade's query, as url.ParseQuery reads it.
func FuzzFromQuery(f *testing.F) {
	for _, s := range []string{
		"", "main=0", "contexts=none&types=reasoning", "contexts=none&conclusions=1",
		"main=0&contexts=none&ids=reason-789&subtree=1", "exclude_types=reasoning,plan",
		"routing=directed&echo=1&batch=1", "main=true&echo=false", "main=2", "contexts=some",
		"main=1&main=0", "types=,,a,%20b%20,", "ids=%00", "types=%ff%fe", "types=" + strings.Repeat("%ff", 22), "pod=lab&token=x&participant=y",
		"routing=", "subtree=yes", "exclude_types=" + string(make([]byte, 70)),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s) // what parsed is used, as the server does
		got, err := filter.FromQuery(q)
		if err != nil {
			checkRefused(t, got, err)
			return
		}
		checkAccepted(t, got)
	})
}

// FuzzUpdate: a gateway/filter payload applied to the default filter and
// to a filter with every field changed. The filter it is applied to never
// changes (filters are immutable: the fan-out reads them without a lock).
func FuzzUpdate(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"main":false}`, `{"contexts":"none","types":["reasoning"]}`,
		`{"ids":["a","b"],"subtree":true,"conclusions":true}`, `{"routing":"directed","echo":true,"batch":true}`,
		`{"exclude_types":["x"]}`, `{"main":null}`, `{"Main":false}`, `{"main":1}`, `{"types":"a"}`,
		`{"types":["a",null]}`, `{"types":[""]}`, `{"main":true,"main":false}`, `{"m\u0061in":false}`,
		`[]`, `null`, `"x"`, `{"contexts":"some"}`, `{"types":["\u0001"]}`, `{"ids":[` + `"x",` + `"y"]}`,
		`{"main":false`, "\xff", `{"types":["\ud800"]}`,
	} {
		f.Add([]byte(s))
	}
	bases := []*filter.Filter{filter.Default()}
	if q, err := url.ParseQuery("main=0&contexts=none&types=a,b&exclude_types=c&ids=d&subtree=1&conclusions=1&routing=directed&echo=1&batch=1"); err == nil {
		if b, err := filter.FromQuery(q); err == nil {
			bases = append(bases, b)
		}
	}
	if len(bases) != 2 {
		f.Fatal("base filters do not build")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, base := range bases {
			before, _ := json.Marshal(base)
			got, err := base.Update(append([]byte(nil), data...))
			if after, _ := json.Marshal(base); string(after) != string(before) {
				t.Fatalf("Update changed the filter it was applied to:\n%s\n%s", before, after)
			}
			if err != nil {
				checkRefused(t, got, err)
				continue
			}
			checkAccepted(t, got)
		}
	})
}
