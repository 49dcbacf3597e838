package history

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// pod builds an index entry by entry, the way the fan-out applies a pod's
// stream, and names the sequences by envelope id.
type pod struct {
	t      *testing.T
	x      *Index
	seq    uint64
	at     time.Time
	ids    map[uint64]string
	bodies map[string][]byte // by envelope id
}

func newPod(t *testing.T, max int) *pod {
	return &pod{t: t, x: NewIndex(max, time.Hour), at: time.Now(), ids: map[uint64]string{}, bodies: map[string][]byte{}}
}

// apply applies an envelope of 100 bytes (or as few as its header
// needs), whose tokens Apply estimates.
func (p *pod) apply(m envelope.Meta) uint64 {
	return p.applySized(m, 100, 0)
}

// applySized applies an envelope of size bytes (or as few as its header
// needs) that the caller says costs tokens (0: Apply estimates it).
func (p *pod) applySized(m envelope.Meta, size, tokens int) uint64 {
	p.seq++
	p.ids[p.seq] = m.ID
	body := envelopeJSON(&m, size)
	p.bodies[m.ID] = body
	p.x.Apply(p.seq, p.at.UnixNano(), envelope.Frame(&m, body), &m, len(body), tokens, Loc{Seq: p.seq}) // stored at once, at its position
	return p.seq
}

// envelopeJSON is an envelope of m's id, kind, context and lifecycle, its
// payload padded so that it has size bytes, if it can.
func envelopeJSON(m *envelope.Meta, size int) []byte {
	v := map[string]any{"protocol": "mcpp/v0.1", "id": m.ID, "from": m.From, "kind": "note"}
	if m.Kind == envelope.FrameContextEvent {
		v["kind"] = "system/context"
	}
	if m.ContextID != "" {
		v["context"] = map[string]string{"id": m.ContextID}
	}
	if m.Transient() {
		v["lifecycle"] = map[string]string{"mode": "transient", "summary": "rows of " + m.ID}
	}
	if len(m.Consumes) > 0 {
		v["lifecycle"] = map[string]any{"consumes": m.Consumes}
	}
	v["payload"] = ""
	b, _ := json.Marshal(v)
	if pad := size - len(b); pad > 0 {
		v["payload"] = strings.Repeat("words of a row ", pad/15+1)[:pad]
		b, _ = json.Marshal(v)
	}
	return b
}

func (p *pod) env(id string) uint64 {
	return p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: id})
}

func (p *pod) in(id, ctx string, conclusion bool) uint64 {
	m := envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: id, ContextID: ctx, ContextType: "reasoning"}
	if conclusion {
		m.Flags |= envelope.FlagConclusion
	}
	return p.apply(m)
}

func (p *pod) concluded(eventID, ctx string) uint64 {
	return p.apply(envelope.Meta{Kind: envelope.FrameContextEvent, From: wire.GatewayID, ID: eventID,
		ContextID: ctx, ContextType: "reasoning", Flags: envelope.FlagConclusion})
}

// names lists a selection by envelope id, collapsed ones as id(by).
func (p *pod) names(s Selection) string {
	var out []string
	for _, e := range s.Entries {
		n := p.ids[e.Pos]
		if e.ConsumedBy != "" {
			n += "(" + e.ConsumedBy + ")"
		}
		out = append(out, n)
	}
	return strings.Join(out, " ")
}

func all(*envelope.Meta) bool { return true }

func TestIndexFoldsConcludedContexts(t *testing.T) {
	p := newPod(t, 100)
	p.env("m1")
	p.in("r1", "r", false)
	p.in("r2", "r", false)
	p.in("a1", "active", false)
	p.in("r3", "r", true) // the conclusion-kind envelope
	p.concluded("ev-r", "r")
	p.env("m2")
	// The id is named again: a new incarnation, active, replayed whole.
	p.in("r4", "r", false)

	s := p.x.Newest(0, true, all)
	if got := p.names(s); got != "m1 a1 r3 ev-r m2 r4" {
		t.Fatalf("folded replay: %s", got)
	}
	if s.Folded != 2 {
		t.Fatalf("folded %d, want 2 (r1, r2)", s.Folded)
	}
	if got := p.names(p.x.Newest(0, false, all)); got != "m1 r1 r2 a1 r3 ev-r m2 r4" {
		t.Fatalf("fold=0: %s", got)
	}
	// N counts what is replayed, and F only what is left out within it.
	s = p.x.Newest(4, true, all)
	if got := p.names(s); got != "r3 ev-r m2 r4" || s.Folded != 0 {
		t.Fatalf("history=4: %s, folded %d", got, s.Folded)
	}
	s = p.x.Newest(5, true, all)
	if got := p.names(s); got != "a1 r3 ev-r m2 r4" || s.Folded != 0 {
		t.Fatalf("history=5: %s, folded %d", got, s.Folded)
	}
	s = p.x.Newest(6, true, all)
	if got := p.names(s); got != "m1 a1 r3 ev-r m2 r4" || s.Folded != 2 {
		t.Fatalf("history=6: %s, folded %d", got, s.Folded)
	}
}

func TestIndexEventWithoutItsEnvelopes(t *testing.T) {
	p := newPod(t, 100)
	p.concluded("ev-x", "x") // the context's envelopes are older than the history
	p.in("x1", "x", false)   // a new incarnation
	if got := p.names(p.x.Newest(0, true, all)); got != "ev-x x1" {
		t.Fatalf("%s", got)
	}
}

func TestIndexCollapsesConsumedTransients(t *testing.T) {
	p := newPod(t, 100)
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "t1", Flags: envelope.FlagTransient})
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "t2", Flags: envelope.FlagTransient})
	p.env("d1")
	// Unknown, durable and (later) already consumed ids are ignored.
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "c1", Consumes: []string{"t1", "d1", "nope"}})
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "c2", Consumes: []string{"t1"}})
	s := p.x.Newest(0, true, all)
	if got := p.names(s); got != "t1(c1) t2 d1 c1 c2" || s.Collapsed != 1 {
		t.Fatalf("collapsed: %s (%d)", got, s.Collapsed)
	}
	if got := p.names(p.x.Newest(0, false, all)); got != "t1 t2 d1 c1 c2" {
		t.Fatalf("fold=0 does not collapse: %s", got)
	}
	// An ephemeral envelope (a live frame's marker) consumes too.
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "e1", Flags: envelope.FlagLive | envelope.FlagMarker, Consumes: []string{"t2"}})
	if got := p.names(p.x.Newest(0, true, all)); got != "t1(c1) t2(e1) d1 c1 c2" {
		t.Fatalf("consumed by a live envelope: %s", got)
	}
}

func TestIndexResume(t *testing.T) {
	p := newPod(t, 100)
	p.env("a")
	p.in("r1", "r", false)
	p.apply(envelope.Meta{Kind: envelope.FrameJoin, ID: "presence-1", Flags: envelope.FlagLive | envelope.FlagMarker})
	p.concluded("ev", "r")
	p.env("b")
	s, ok := p.x.After("a", all)
	if !ok || p.names(s) != "r1 ev b" {
		t.Fatalf("resume after a: %v %s (resume is unfolded)", ok, p.names(s))
	}
	// A client whose last envelope was a live one resumes from its place.
	s, ok = p.x.After("presence-1", all)
	if !ok || p.names(s) != "ev b" {
		t.Fatalf("resume after a live frame: %v %s", ok, p.names(s))
	}
	if _, ok := p.x.After("never", all); ok {
		t.Fatal("resumed after an unknown id")
	}
	s, ok = p.x.After("b", all)
	if !ok || len(s.Entries) != 0 || s.Last != p.seq {
		t.Fatalf("resume after the last: %v %+v", ok, s)
	}
}

func TestIndexEvictsLikeTheStream(t *testing.T) {
	p := newPod(t, 3)
	for i := 1; i <= 5; i++ {
		p.env(fmt.Sprint("e", i))
	}
	if got := p.names(p.x.Newest(0, true, all)); got != "e3 e4 e5" {
		t.Fatalf("past --history: %s", got)
	}
	if _, ok := p.x.After("e2", all); ok {
		t.Fatal("resumed after an evicted id")
	}
	if p.x.Holds("e2") || !p.x.Holds("e3") {
		t.Fatal("an evicted id is a duplicate, or a kept one is not")
	}
	p.x.Discard(5) // --history-bytes took e3 and e4
	if got := p.names(p.x.Newest(0, true, all)); got != "e5" {
		t.Fatalf("after Discard: %s", got)
	}
	// Age.
	q := newPod(t, 10)
	q.x, q.at = NewIndex(10, time.Minute), time.Now().Add(-2*time.Minute)
	q.env("old")
	q.at = time.Now()
	q.env("new")
	if got := q.names(q.x.Newest(0, true, all)); got != "new" {
		t.Fatalf("past --history-age: %s", got)
	}
}

func TestIndexHolds(t *testing.T) {
	p := newPod(t, 10)
	if p.x.Holds("x") {
		t.Fatal("an id never applied is held")
	}
	p.env("x")
	if !p.x.Holds("x") {
		t.Fatal("an id in the history is not a duplicate")
	}
	// Not yet stored (no location): it is held all the same.
	m := envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "y"}
	p.x.Apply(99, p.at.UnixNano(), envelope.Frame(&m, make([]byte, 10)), &m, 10, 0, Loc{})
	if !p.x.Holds("y") {
		t.Fatal("an entry the stream has not stored yet is not a duplicate")
	}
}

func TestIndexPage(t *testing.T) {
	p := newPod(t, 100)
	for i := 1; i <= 5; i++ {
		p.env(fmt.Sprint("m", i))
	}
	p.in("c1", "task", false)
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "c2", ContextID: "task/sub", Ancestors: []string{"task"}})
	p.in("o1", "other", false)
	page := func(q PageQuery) string {
		if q.Limit == 0 {
			q.Limit = 100
		}
		if q.MaxBytes == 0 {
			q.MaxBytes = 1 << 20
		}
		s, ok := p.x.Page(q, all)
		if !ok {
			return "unknown id"
		}
		return fmt.Sprintf("%s more=%v", p.names(s), s.More)
	}
	for _, c := range []struct {
		q    PageQuery
		want string
	}{
		{PageQuery{Limit: 3}, "c1 c2 o1 more=true"},
		{PageQuery{Before: "c1", Limit: 2}, "m4 m5 more=true"},
		{PageQuery{Before: "m2", Limit: 2}, "m1 more=false"},
		{PageQuery{After: "m3", Limit: 2}, "m4 m5 more=true"},
		{PageQuery{After: "c2"}, "o1 more=false"},
		{PageQuery{Context: "task"}, "c1 c2 more=false"},
		{PageQuery{Context: "task/sub"}, "c2 more=false"},
		{PageQuery{After: "m1", MaxBytes: 250}, "m2 m3 more=true"},
		{PageQuery{Before: "nope"}, "unknown id"},
		{PageQuery{After: "nope"}, "unknown id"},
	} {
		if got := page(c.q); got != c.want {
			t.Errorf("%+v: %s, want %s", c.q, got, c.want)
		}
	}
}

func TestIndexSince(t *testing.T) {
	p := newPod(t, 100)
	p.env("a")
	cursor := p.x.Last()
	p.in("r1", "r", false)
	p.in("r2", "r", true)
	p.concluded("ev", "r")
	p.env("b")
	s := p.x.Since(cursor, 2, 0, true, all)
	if got := p.names(s); got != "r2 ev" || !s.More {
		t.Fatalf("since, limit 2: %s more=%v", got, s.More)
	}
	s = p.x.Since(s.Last, 10, 0, true, all)
	if got := p.names(s); got != "b" || s.More || s.Last != p.seq {
		t.Fatalf("next read: %s more=%v last=%d", got, s.More, s.Last)
	}
}

func TestIndexWakesReaders(t *testing.T) {
	p := newPod(t, 10)
	ch := p.x.Changed()
	select {
	case <-ch:
		t.Fatal("closed before anything was applied")
	default:
	}
	p.env("a")
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("Changed not closed by Apply")
	}
}

func TestCollapse(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"id":"t1","kind":"tool/result","payload":{"rows":[1,2,3]},"lifecycle":{"mode":"transient","summary":"3 rows"},"x":1}`,
			`{"id":"t1","kind":"tool/result","payload":{"collapsed":true,"summary":"3 rows","consumed_by":"c\"1"},"lifecycle":{"mode":"transient","summary":"3 rows"},"x":1}`},
		{`{"lifecycle":{"summary":"s\u00e9","mode":"transient"},"kind":"k"}`,
			`{"payload":{"collapsed":true,"summary":"s\u00e9","consumed_by":"c\"1"},"lifecycle":{"summary":"s\u00e9","mode":"transient"},"kind":"k"}`},
		{`{"kind":"k","payload":null,"lifecycle":{"mode":"transient","summary":"s"}}`,
			`{"kind":"k","payload":{"collapsed":true,"summary":"s","consumed_by":"c\"1"},"lifecycle":{"mode":"transient","summary":"s"}}`},
	} {
		got := Collapse([]byte(c.in), `c"1`)
		if string(got) != c.want {
			t.Errorf("Collapse(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("not JSON: %s", got)
		}
	}
}
