package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// TestIndexTokensAsSent: each entry costs the estimate of the bytes a
// replay sends: the envelope as stored, or collapsed once consumed (its
// consumer's id as Collapse writes it, escapes included), and the
// estimate the caller gives when it gives one.
func TestIndexTokensAsSent(t *testing.T) {
	p := newPod(t, 100)
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "t1", Flags: envelope.FlagTransient})
	p.applySized(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "t2", Flags: envelope.FlagTransient}, 3000, 0)
	p.applySized(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "given"}, 100, 7)
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: `c<"1`, Consumes: []string{"t1"}})
	// A live frame consumes too, after the fact.
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "e1", Flags: envelope.FlagLive | envelope.FlagMarker, Consumes: []string{"t2"}})

	want := func(s Selected, id string) int {
		if id == "given" {
			return 7
		}
		if s.ConsumedBy != "" {
			return envelope.EstimateTokens(Collapse(p.bodies[id], s.ConsumedBy))
		}
		return envelope.EstimateTokens(p.bodies[id])
	}
	for _, fold := range []bool{true, false} {
		s := p.x.Newest(0, fold, all)
		if got := p.names(s); fold && got != `t1(c<"1) t2(e1) given c<"1` || !fold && got != `t1 t2 given c<"1` {
			t.Fatalf("fold %v: %s", fold, got)
		}
		sum := 0
		for _, e := range s.Entries {
			id := p.ids[e.Pos]
			if w := want(e, id); e.Tokens != w {
				t.Errorf("fold %v: %s costs %d tokens, want %d", fold, id, e.Tokens, w)
			}
			sum += e.Tokens
		}
		if s.Tokens != sum {
			t.Errorf("fold %v: selection's tokens %d, its entries' %d", fold, s.Tokens, sum)
		}
	}
	// Collapsing a large transient envelope is what saves its tokens.
	whole, collapsed := envelope.EstimateTokens(p.bodies["t2"]), p.x.Newest(0, true, all).Entries[1].Tokens
	if collapsed*5 > whole {
		t.Fatalf("t2 collapsed costs %d tokens, whole %d", collapsed, whole)
	}
}

// budgetPod is a pod's history with nested contexts, concluded ones,
// a consumed transient envelope and a context the reader's filter does
// not admit, each envelope of a known cost.
func budgetPod(t *testing.T) (*pod, Admit) {
	p := newPod(t, 100)
	env := func(id string, tokens int) {
		p.applySized(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: id}, 100, tokens)
	}
	in := func(id, ctx string, anc []string, conclusion bool, tokens int) {
		m := envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: id, ContextID: ctx, ContextType: "reasoning", Ancestors: anc}
		if conclusion {
			m.Flags |= envelope.FlagConclusion
		}
		p.applySized(m, 100, tokens)
	}
	event := func(id, ctx string, anc []string, tokens int) {
		p.applySized(envelope.Meta{Kind: envelope.FrameContextEvent, From: wire.GatewayID, ID: id,
			ContextID: ctx, ContextType: "reasoning", Ancestors: anc, Flags: envelope.FlagConclusion}, 100, tokens)
	}
	env("m1", 10)
	// p concludes, and its child pc with it: both folded to their events.
	in("p1", "p", nil, false, 7)
	in("pc1", "pc", []string{"p"}, false, 8)
	event("ev-p", "p", nil, 3)
	event("ev-pc", "pc", []string{"p"}, 3)
	// task stays active; its child r concludes with a conclusion.
	in("t1", "task", nil, false, 20)
	in("r1", "r", []string{"task"}, false, 30)
	in("r2", "r", []string{"task"}, true, 5)
	event("ev-r", "r", []string{"task"}, 4)
	in("o1", "other", nil, false, 50) // the reader's filter leaves it out
	env("m2", 10)
	p.applySized(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "x1", Flags: envelope.FlagTransient}, 400, 0)
	p.applySized(envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: "m3", Consumes: []string{"x1"}}, 100, 10)
	env("m4", 10)
	return p, func(m *envelope.Meta) bool { return m.ContextID != "other" }
}

// TestNewestWithinBudget: the replay is the newest contiguous stretch of
// the folded, filtered history that fits the budget; omitted counts the
// rest exactly, and paging back before the first one replayed finds it.
func TestNewestWithinBudget(t *testing.T) {
	p, admit := budgetPod(t)
	x1 := envelope.EstimateTokens(Collapse(p.bodies["x1"], "m3"))
	full := p.x.Newest(0, true, admit)
	if got := p.names(full); got != "m1 ev-p ev-pc t1 r2 ev-r m2 x1(m3) m3 m4" || full.Folded != 3 {
		t.Fatalf("the folded history: %s, folded %d", got, full.Folded)
	}
	for _, c := range []struct {
		budget         int
		want           string
		omitted, next  int
		folded, tokens int
	}{
		{9, "", 10, 10, 0, 0}, // the newest alone is over it: nothing, not a skip
		{10, "m4", 9, 10, 0, 10},
		{19, "m4", 9, 10, 0, 10},
		{20 + x1, "x1(m3) m3 m4", 7, 10, 0, 20 + x1},
		{38 + x1, "ev-r m2 x1(m3) m3 m4", 5, 5, 0, 34 + x1},
		// r1 (folded) lies between t1 and r2: counted once t1 is sent.
		{58 + x1, "r2 ev-r m2 x1(m3) m3 m4", 4, 20, 0, 39 + x1},
		{59 + x1, "t1 r2 ev-r m2 x1(m3) m3 m4", 3, 3, 1, 59 + x1}, // a tie: exactly the budget
		{75 + x1, "m1 ev-p ev-pc t1 r2 ev-r m2 x1(m3) m3 m4", 0, 0, 3, 75 + x1},
		{1 << 20, "m1 ev-p ev-pc t1 r2 ev-r m2 x1(m3) m3 m4", 0, 0, 3, 75 + x1},
	} {
		s := p.x.NewestWithin(c.budget, true, admit)
		if got := p.names(s); got != c.want || s.Omitted != c.omitted || s.NextTokens != c.next ||
			s.Folded != c.folded || s.Tokens != c.tokens || s.More != (c.omitted > 0) {
			t.Errorf("budget %d: %q omitted %d next %d folded %d tokens %d more %v; want %q omitted %d next %d folded %d tokens %d",
				c.budget, got, s.Omitted, s.NextTokens, s.Folded, s.Tokens, s.More, c.want, c.omitted, c.next, c.folded, c.tokens)
		}
	}

	// Every budget, against the definition: the longest suffix of the
	// folded history that fits; the omitted ones are what gateway/history
	// returns before the first one replayed.
	for budget := 0; budget <= full.Tokens+1; budget++ {
		k, sum := 0, 0
		for k < len(full.Entries) && sum+full.Entries[len(full.Entries)-1-k].Tokens <= budget {
			sum += full.Entries[len(full.Entries)-1-k].Tokens
			k++
		}
		s := p.x.NewestWithin(budget, true, admit)
		want := Selection{Entries: full.Entries[len(full.Entries)-k:]}
		if p.names(s) != p.names(want) || s.Tokens != sum || s.Omitted != len(full.Entries)-k {
			t.Fatalf("budget %d: %s (%d tokens, %d omitted), want %s (%d tokens, %d omitted)",
				budget, p.names(s), s.Tokens, s.Omitted, p.names(want), sum, len(full.Entries)-k)
		}
		if k == 0 || s.Omitted == 0 {
			continue
		}
		back, ok := p.x.Page(PageQuery{Before: p.ids[s.Entries[0].Pos], Limit: 1000, Fold: true, MaxBytes: 1 << 30}, admit)
		if got, want := p.names(back), p.names(Selection{Entries: full.Entries[:len(full.Entries)-k]}); !ok || got != want || len(back.Entries) != s.Omitted {
			t.Fatalf("budget %d: paging back before %s finds %q, want the %d omitted: %q", budget, p.ids[s.Entries[0].Pos], got, s.Omitted, want)
		}
	}

	// Unfolded, the budget counts every envelope whole.
	s := p.x.NewestWithin(33+envelope.EstimateTokens(p.bodies["x1"]), false, admit)
	if got := p.names(s); got != "m2 x1 m3 m4" || s.Omitted != 9 || s.Collapsed != 0 {
		t.Fatalf("fold=0: %s omitted %d collapsed %d", got, s.Omitted, s.Collapsed)
	}
}

// TestPageMaxTokens: gateway/history's max_tokens takes the newest
// contiguous stretch before before (the oldest after after) that fits,
// Limit capping it too, whichever stops first.
func TestPageMaxTokens(t *testing.T) {
	p, admit := budgetPod(t)
	x1 := envelope.EstimateTokens(Collapse(p.bodies["x1"], "m3"))
	page := func(q PageQuery) string {
		if q.Limit == 0 {
			q.Limit = 100
		}
		q.Fold, q.MaxBytes = true, 1<<20
		s, ok := p.x.Page(q, admit)
		if !ok {
			return "unknown id"
		}
		return fmt.Sprintf("%s more=%v tokens=%d next=%d", p.names(s), s.More, s.Tokens, s.NextTokens)
	}
	for _, c := range []struct {
		q    PageQuery
		want string
	}{
		{PageQuery{MaxTokens: 20}, "m3 m4 more=true tokens=20 next=" + fmt.Sprint(x1)},
		{PageQuery{MaxTokens: 1000, Limit: 2}, "m3 m4 more=true tokens=20 next=0"},        // the limit stops first
		{PageQuery{Before: "m2", MaxTokens: 29}, "t1 r2 ev-r more=true tokens=29 next=3"}, // a tie
		{PageQuery{Before: "m2", MaxTokens: 28}, "r2 ev-r more=true tokens=9 next=20"},
		{PageQuery{Before: "m2", MaxTokens: 29, Limit: 1}, "ev-r more=true tokens=4 next=0"},
		{PageQuery{Before: "ev-p", MaxTokens: 10}, "m1 more=false tokens=10 next=0"},
		{PageQuery{Before: "ev-p", MaxTokens: 9}, " more=true tokens=0 next=10"}, // alone over it: nothing
		{PageQuery{After: "m1", MaxTokens: 26}, "ev-p ev-pc t1 more=true tokens=26 next=5"},
		{PageQuery{After: "ev-r", MaxTokens: 10 + x1}, "m2 x1(m3) more=true tokens=" + fmt.Sprint(10+x1) + " next=10"},
		{PageQuery{Context: "task", MaxTokens: 25}, "r2 ev-r more=true tokens=9 next=20"},
	} {
		if got := page(c.q); got != c.want {
			t.Errorf("%+v: %s, want %s", c.q, got, c.want)
		}
	}
}

// TestSinceMaxTokens: a cursor read within a budget takes the oldest
// entries after it that fit, and the next read starts with the one that
// did not: reading on finds every entry once.
func TestSinceMaxTokens(t *testing.T) {
	p, admit := budgetPod(t)
	full := p.x.Newest(0, true, admit)
	var got []string
	cursor := uint64(0)
	for reads := 0; ; reads++ {
		if reads > 20 {
			t.Fatal("the reads do not end")
		}
		s := p.x.Since(cursor, 3, 25, true, admit)
		if s.Tokens > 25 || len(s.Entries) > 3 {
			t.Fatalf("a read of %d entries, %d tokens", len(s.Entries), s.Tokens)
		}
		if len(s.Entries) == 0 && s.More {
			// The next entry alone is over the budget: read it with one
			// that fits it.
			if s.NextTokens <= 25 {
				t.Fatalf("nothing read, next %d tokens", s.NextTokens)
			}
			s = p.x.Since(s.Last, 3, s.NextTokens, true, admit)
			if len(s.Entries) != 1 {
				t.Fatalf("with the budget it needs: %s", p.names(s))
			}
		}
		if n := p.names(s); n != "" {
			got = append(got, n)
		}
		cursor = s.Last
		if !s.More {
			break
		}
	}
	if strings.Join(got, " ") != p.names(full) {
		t.Fatalf("read %q, the history is %q", strings.Join(got, " "), p.names(full))
	}
}

// BenchmarkReplay: a joiner's replay of a pod of 10,000 stored entries
// (envelopes, 40% of them in contexts that conclude, and the contexts'
// events) within a token budget (history=tokens:N) and the same replay
// by count (history=N, N the entries the budget took), in one run. The
// budget's selection also reads every older entry's header to count the
// omitted ones, after it has let the index's lock go.
func BenchmarkReplay(b *testing.B) {
	const n = 10000
	x := NewIndex(n, time.Hour)
	at := time.Now().UnixNano()
	pos := uint64(0)
	for i := 0; x.Len() < n; i++ {
		m := envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n1", From: "alice", ID: fmt.Sprintf("e-%d-0f3a9c2e-5d4b-4c1e", i)}
		if i%10 < 4 { // 40% in contexts, some of which conclude
			m.ContextID, m.ContextType = fmt.Sprintf("r-%d", i/10), "reasoning"
			if i%10 == 3 {
				m.Flags |= envelope.FlagConclusion
			}
		}
		body := envelopeJSON(&m, 200+(i%7)*300)
		pos++
		x.Apply(pos, at, envelope.Frame(&m, body), &m, len(body), 0, Loc{Seq: pos})
		if i%10 == 3 {
			ev := envelope.Meta{Kind: envelope.FrameContextEvent, From: wire.GatewayID, ID: fmt.Sprintf("ev-%d", i/10),
				ContextID: m.ContextID, ContextType: "reasoning", Flags: envelope.FlagConclusion}
			evBody := envelopeJSON(&ev, 400)
			pos++
			x.Apply(pos, at, envelope.Frame(&ev, evBody), &ev, len(evBody), 0, Loc{Seq: pos})
		}
	}
	admit := func(m *envelope.Meta) bool { return m.ContextType != "tool" }
	for _, budget := range []int{8000, 64000} {
		within := x.NewestWithin(budget, true, admit)
		count := len(within.Entries)
		b.Run(fmt.Sprintf("tokens:%d", budget), func(b *testing.B) {
			for b.Loop() {
				x.NewestWithin(budget, true, admit)
			}
			b.ReportMetric(float64(count), "entries")
			b.ReportMetric(float64(within.Omitted), "omitted")
		})
		b.Run(fmt.Sprintf("count:%d", count), func(b *testing.B) {
			for b.Loop() {
				x.Newest(count, true, admit)
			}
			b.ReportMetric(float64(count), "entries")
		})
	}
}
