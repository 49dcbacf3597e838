package history

import (
	"fmt"
	"testing"

	"github.com/mcpp/gateway/envelope"
)

// TestIDsWhoseHashesCollide: the index finds ids by their hash and checks
// the bytes; with every id given the same hash, each is still found as
// itself, never as another: a new id is never a duplicate, a held one
// always is, resumes and pages start where their id is, a consumer
// collapses the envelope it names, and an evicted id is forgotten while
// the others stay.
func TestIDsWhoseHashesCollide(t *testing.T) {
	defer func(mask uint64) { idHashMask = mask }(idHashMask)
	idHashMask = 0

	p := newPod(t, 4)
	p.env("a")
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "t", Flags: envelope.FlagTransient})
	p.env("b")
	for _, id := range []string{"a", "t", "b"} {
		if !p.x.Holds(id) {
			t.Fatalf("%s is in the history and not a duplicate", id)
		}
	}
	for _, id := range []string{"c", "", "a ", "A"} {
		if p.x.Holds(id) {
			t.Fatalf("%q is not in the history and is a duplicate", id)
		}
	}
	if s, ok := p.x.After("t", all); !ok || p.names(s) != "b" {
		t.Fatalf("resume after t: %v %s", ok, p.names(s))
	}
	if s, ok := p.x.Page(PageQuery{Before: "b", Limit: 10, MaxBytes: 1 << 20}, all); !ok || p.names(s) != "a t" {
		t.Fatalf("page before b: %v %s", ok, p.names(s))
	}
	p.apply(envelope.Meta{Kind: envelope.FrameEnvelope, ID: "c", Consumes: []string{"t"}})
	if got := p.names(p.x.Newest(0, true, all)); got != "a t(c) b c" {
		t.Fatalf("consumed: %s", got)
	}
	// A live frame's id, resumed from, beside the entries' ones.
	p.apply(envelope.Meta{Kind: envelope.FrameJoin, ID: "j", Flags: envelope.FlagLive | envelope.FlagMarker})
	p.env("d") // evicts a
	if s, ok := p.x.After("j", all); !ok || p.names(s) != "d" {
		t.Fatalf("resume after the live j: %v %s", ok, p.names(s))
	}
	if p.x.Holds("a") || p.x.Holds("j") {
		t.Fatal("an evicted id, or a live one, is a duplicate")
	}
	for _, id := range []string{"t", "b", "c", "d"} {
		if !p.x.Holds(id) {
			t.Fatalf("%s is in the history and not a duplicate after a was evicted", id)
		}
	}
	if _, ok := p.x.After("a", all); ok {
		t.Fatal("resumed after an evicted id")
	}
	// An id applied twice (as another node may): the first one stands,
	// and stays found until it goes.
	p.env("e") // evicts t
	p.env("d")
	if s, ok := p.x.After("d", all); !ok || p.names(s) != "e d" {
		t.Fatalf("resume after the first d: %v %s", ok, p.names(s))
	}
}

// TestArenaLetsSegmentsGo: a pod's index applies far more than it keeps;
// its arenas hold about what it keeps, not what it applied.
func TestArenaLetsSegmentsGo(t *testing.T) {
	p := newPod(t, 100)
	for i := range 20000 {
		p.env(fmt.Sprintf("e-%d-0f3a9c2e-5d4b-4c1e-9a7f", i))
		if i%3 == 0 {
			p.apply(envelope.Meta{Kind: envelope.FrameJoin, ID: fmt.Sprintf("presence-%d", i), Flags: envelope.FlagLive | envelope.FlagMarker})
		}
	}
	if p.x.Len() != 100 {
		t.Fatalf("%d entries, want 100", p.x.Len())
	}
	// 100 headers of about 60 bytes, and 100 ids of about 15: segments of
	// at most 16 KiB, the one being filled and those still referenced.
	if held := p.x.heads.held + p.x.liveArea.held; held > 4*maxSegment {
		t.Fatalf("the arenas hold %d bytes for 100 entries and 100 live ids", held)
	}
	if n := len(p.x.heads.segs) + len(p.x.liveArea.segs); n > 8 {
		t.Fatalf("the arenas hold %d segments", n)
	}
	// Nothing left: nothing held.
	p.x.Discard(^uint64(0))
	if p.x.Len() != 0 || p.x.heads.held != 0 {
		t.Fatalf("after everything was discarded: %d entries, %d bytes held", p.x.Len(), p.x.heads.held)
	}
	if got := p.names(p.x.Newest(0, true, all)); got != "" {
		t.Fatalf("after everything was discarded: %s", got)
	}
	p.env("again")
	if got := p.names(p.x.Newest(0, true, all)); got != "again" || !p.x.Holds("again") {
		t.Fatalf("an entry after the arena was emptied: %s", got)
	}
}

// TestLocationsOfEvictedEntries: a replay under way reads the entries it
// selected even after the index evicted them (the stream keeps Slack
// more): a stored one where the stream has it, one that was not stored
// yet from its frame until the stream has it; an entry the stream
// refused is nowhere.
func TestLocationsOfEvictedEntries(t *testing.T) {
	x := NewIndex(2, 0)
	frames := map[uint64][]byte{}
	apply := func(pos uint64, id string, loc Loc) uint64 {
		m := envelope.Meta{Kind: envelope.FrameEnvelope, From: "a", ID: id}
		f := envelope.Frame(&m, []byte(`{"id":"`+id+`"}`))
		frames[pos] = f
		return x.Apply(pos, 1, f, &m, len(f)-len(envelope.Frame(&m, nil)), 1, loc).Pos
	}
	apply(1, "stored", Loc{Seq: 10, Off: 2})
	pending := apply(2, "pending", Loc{})
	sel := x.Newest(0, false, all).Entries
	apply(3, "x", Loc{Seq: 11})
	apply(4, "y", Loc{Seq: 12}) // both evicted
	if l := x.Locations(sel); string(l[1].Frame) != string(frames[2]) {
		t.Fatalf("the evicted entry not stored yet: %+v", l[1])
	}
	stored(x, pending, 0, 13)
	locs := x.Locations(sel)
	if locs[0].Loc != (Loc{Seq: 10, Off: 2}) || locs[0].Frame != nil {
		t.Fatalf("the evicted stored entry: %+v", locs[0])
	}
	if locs[1].Loc != (Loc{Seq: 13}) || locs[1].Frame != nil {
		t.Fatalf("the evicted entry that was not stored when selected, stored since: %+v", locs[1])
	}
	// In the index: where it is now, or nowhere once refused.
	z := apply(5, "z", Loc{})
	sel = x.Newest(0, false, all).Entries
	if l := x.Locations(sel); string(l[1].Frame) != string(frames[5]) {
		t.Fatalf("an entry not stored yet: %+v", l[1])
	}
	stored(x, z, 3, 14)
	if l := x.Locations(sel); l[1].Loc != (Loc{Seq: 14, Off: 3}) || l[1].Frame != nil {
		t.Fatalf("an entry stored since it was selected: %+v", l[1])
	}
	w := apply(6, "w", Loc{})
	sel = x.Newest(1, false, all).Entries
	stored(x, w, 0, 0)
	if l := x.Locations(sel); l[0].Seq != 0 || l[0].Frame != nil {
		t.Fatalf("an entry the stream refused: %+v", l[0])
	}
	// Evicted before the stream refused it: nowhere either.
	v := apply(7, "v", Loc{})
	sel = x.Newest(1, false, all).Entries
	apply(8, "u", Loc{Seq: 15})
	apply(9, "t", Loc{Seq: 16})
	stored(x, v, 0, 0)
	if l := x.Locations(sel); l[0].Seq != 0 || l[0].Frame != nil {
		t.Fatalf("an evicted entry the stream refused: %+v", l[0])
	}
}

// stored is what the writer tells the index of the entry at pos once the
// stream answered.
func stored(x *Index, pos uint64, off int, seq uint64) {
	x.mu.Lock()
	x.stored(pos, off, seq)
	x.mu.Unlock()
}
