package history

import (
	"strings"
	"sync"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Entry is one stored frame of a pod's history, an accepted envelope or a
// system/context event, as filters and folding see it: its header, never
// its body, which stays in the stream. An entry holds no pointer: its
// header is kept as the frame has it (bytes, decoded when a reader asks)
// in its index's arena (arena.go), its id is found through a table keyed
// by hash (ids.go), its context's incarnation is a number, and the frame
// itself, until the stream stores it, is in the index's pending list. The
// garbage collector then marks a pod's entries, however many it keeps, as
// one object it never reads, not one or two objects each (issue 32).
type Entry struct {
	// Pos is the entry's place in the pod's order on this node: what
	// selections, resumes and cursors count in.
	Pos  uint64
	Time int64 // unix nanoseconds
	Size int   // of the envelope
	// loc is where the stream holds the entry's frame; zero until the
	// writer's message is stored (storedItems). Until then pending is
	// set, and the index's pending list has the frame itself, which the
	// writer holds anyway: a reader takes it from there, and never waits
	// for the stream.
	loc  Loc
	head span // the frame's header, in the index's arena
	// consumedBy is the id of the envelope that consumed this transient
	// one, in the index's arena, or empty.
	consumedBy span
	// tokens is the envelope's token estimate (envelope.EstimateTokens).
	tokens int32
	// collapseWeight and collapseLen are, for a transient envelope, the
	// envelope.TokenWeight and length of its collapsed form (Collapse):
	// without its consumer's id until it is consumed, whole from then on.
	// Both are 0 for a body that is not a JSON object, which a gateway
	// never stores (tests do).
	collapseWeight, collapseLen int32
	// inc is the incarnation of the context the entry is in, as its
	// index in the index's incarnations plus one (0 in the main
	// context): folding leaves out its entries once it concluded.
	inc     uint32
	kind    envelope.FrameKind
	flags   uint8
	pending bool
}

// incarnation is one life of a context id in the pod's order: from the
// first envelope that names it to its system/context event. An envelope
// that names the id after that starts another. refs counts the entries in
// it; it is forgotten once none is left and it is no longer open.
type incarnation struct {
	refs      uint32
	open      bool
	concluded bool
}

func (e *Entry) transient() bool { return e.flags&envelope.FlagTransient != 0 }

// Loc is where the stream holds an entry's frame: the sequence of its
// message and the frame's place in that message (a batch, batch.go).
type Loc struct {
	Seq uint64
	Off int
}

// liveRef is the place in the pod's order of a frame history does not
// keep (an ephemeral envelope, presence): a client that saw it last may
// resume from it. Its id is in the index's live arena.
type liveRef struct {
	id  span
	pos uint64
	at  int64
}

// pendingFrame is the frame of an entry the stream has not stored yet,
// kept until the writer says where it is, even once the entry is evicted
// (the writer holds the frame until then anyway; dropOldest bounds them). rec is made when a
// selection takes the entry while it is pending: the selection learns
// from it where the entry went, should the index evict it meanwhile.
type pendingFrame struct {
	pos   uint64
	frame []byte
	rec   *pendingRec
}

// pendingRec is what a selection knows of an entry it took while the
// stream had not stored it: its frame until then, its location after.
// The index updates it under its lock.
type pendingRec struct {
	frame   []byte
	loc     Loc
	settled bool // the writer said where it is: loc (zero: refused)
}

// Index is what a gateway node knows of one pod's history, in the pod's
// order: the header of every entry, which envelope ids it holds, which
// contexts have concluded and which transient envelopes were consumed.
// Replays and gateway/history decide from it what to send, then read only
// those bodies from the stream. An entry is in the index from the moment
// its pod applies it, which may be before the stream has stored it (a
// node that orders its pods itself delivers first and stores behind): its
// location comes from the writer, and readers wait for the writer (Sync)
// before they read.
//
// It mirrors the stream's own limits: --history entries and --history-age
// (Apply and Select evict past them), and --history-bytes, whose
// discarding of the stream's oldest messages Discard reports.
//
// Every entry applied, and every live frame, gets the next ordinal of its
// kind (ring.go); the id tables name them by it.
type Index struct {
	mu       sync.RWMutex
	scratch  envelope.Meta // decoded headers, under mu (write)
	entries  ring[Entry]   // oldest first
	ids      idTable       // the first entry of each envelope id
	heads    arena         // the entries' headers and their consumers' ids
	pending  []pendingFrame
	pendHead int
	live     ring[liveRef] // oldest first
	liveIDs  idTable       // the last live frame of each id
	liveArea arena         // the live frames' ids
	incs     []incarnation
	freeIncs []uint32
	open     map[string]uint32 // the current incarnation of each context id (inc)
	last     uint64
	// maxEntries bounds entries, and live frames apart; maxAge both.
	maxEntries int
	maxAge     int64
	changed    chan struct{}
}

// NewIndex makes the index of a pod whose stream keeps at most maxEntries
// per subject for at most maxAge.
func NewIndex(maxEntries int, maxAge time.Duration) *Index {
	return &Index{
		ids: newIDTable(), liveIDs: newIDTable(),
		open: map[string]uint32{}, maxEntries: maxEntries, maxAge: int64(maxAge),
	}
}

// Apply records frame, at pos in the pod's order: an entry, which it
// returns, or the place of a live frame (its marker, or the frame its
// marker stands for), which history does not keep but a client may
// resume from (nil). m is the frame's header, decoded, and size its
// body's. tokens is its body's envelope.EstimateTokens, which the caller
// computes once, before it takes the pod's order lock, for the context
// registry too; 0 has Apply compute it. loc is where the stream holds
// it, or zero when it is not stored yet: the index keeps the whole frame
// until the writer tells it where the stream stored it, and otherwise a
// copy of its header.
//
// The entry returned is the index's own, to hand at once to
// Writer.Append, which takes its Pos (ring.go): its place is another
// entry's once it has gone and enough have come after it.
//
// A transient envelope is also estimated as a replay sends it once it is
// consumed (collapsed): Apply builds that form once, with an empty
// consumer, and the consumer's id is added when it comes.
func (x *Index) Apply(pos uint64, at int64, frame []byte, m *envelope.Meta, size, tokens int, loc Loc) *Entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.last = pos
	defer x.notify()
	if m.Live() {
		if m.ID != "" {
			x.addLive(m.ID, pos, at)
		}
		x.consume(m.Consumes, m.ID)
		return nil
	}
	if m.Kind == envelope.FrameKick {
		return nil // the pod's, kept for its ban: nobody reads it back
	}
	e := Entry{Pos: pos, Time: at, Size: size, kind: m.Kind, flags: m.Flags, loc: loc}
	body := frame[len(frame)-size:]
	if tokens <= 0 {
		tokens = envelope.EstimateTokens(body)
	}
	e.tokens = clamp32(tokens)
	if e.transient() {
		e.collapseWeight, e.collapseLen = collapsedWeight(body)
	}
	e.head = x.heads.add(frame[:len(frame)-size]) // not the frame's memory, which goes once stored
	if loc.Seq == 0 {
		e.pending = true
		x.pending = append(x.pending, pendingFrame{pos: pos, frame: frame})
	}
	if id := m.ContextID; id != "" {
		inc := x.open[id]
		switch m.Kind {
		case envelope.FrameEnvelope:
			if inc == 0 {
				inc = x.newIncarnation(true)
				x.open[strings.Clone(id)] = inc
			}
		case envelope.FrameContextEvent:
			// The event ends the incarnation: the envelopes of it fold,
			// and the next envelope that names the id starts another.
			if inc == 0 {
				inc = x.newIncarnation(false) // its envelopes are older than the history
			}
			c := &x.incs[inc-1]
			c.concluded, c.open = true, false
			delete(x.open, id)
		}
		if inc != 0 {
			x.incs[inc-1].refs++
			e.inc = inc
		}
	}
	o, entry := x.entries.push(e) // entry stays readable (Pos) when the ring moves
	if id := envelope.HeaderID(x.heads.bytes(e.head)); id != "" {
		x.ids.insert(id, o, x.entryID) // the first one stands
	}
	x.consume(m.Consumes, m.ID)
	for x.len() > x.maxEntries {
		x.dropOldest()
	}
	x.expire(at)
	return entry
}

// storedItems records where the stream holds the entries of a batch's
// items that are this index's: the message seq, each at its place in it
// (seq 0: the stream refused them, and they are not in the history after
// all).
func (x *Index) storedItems(items []item, seq uint64) {
	x.mu.Lock()
	for i := range items {
		if it := &items[i]; it.index == x {
			x.stored(it.pos, i, seq)
		}
	}
	x.mu.Unlock()
}

// stored records where the stream holds the entry at pos (seq 0:
// nowhere), and lets its frame go. Call it with mu held.
func (x *Index) stored(pos uint64, off int, seq uint64) {
	var loc Loc
	if seq != 0 {
		loc = Loc{Seq: seq, Off: off}
	}
	if i, ok := x.find(pos); ok {
		e := x.entries.at(i)
		if seq != 0 {
			e.loc = loc
		}
		e.pending = false
	}
	x.unpend(pos, loc)
}

// Located is where a selected entry is: in the stream (Loc), or, not
// stored yet, its Frame.
type Located struct {
	Loc
	Frame []byte
}

// Locations returns where the selected entries are; one with neither a
// Loc nor a Frame is no longer in the history (the stream refused it).
// An entry evicted from the index since it was selected is still found,
// where the selection knew it to be or learnt it went (pendingRec): the
// stream keeps Slack messages more than the index, so that a replay
// under way can still read it.
func (x *Index) Locations(sel []Selected) []Located {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Located, len(sel))
	for i := range sel {
		s := &sel[i]
		j, ok := x.find(s.Pos)
		switch {
		case ok:
		case s.rec == nil:
			out[i].Loc = s.loc
			continue
		case s.rec.settled:
			out[i].Loc = s.rec.loc
			continue
		default:
			out[i].Frame = s.rec.frame
			continue
		}
		e := x.entries.at(j)
		out[i].Loc = e.loc
		if e.pending {
			out[i].Frame = x.pendingFrame(e.Pos)
		}
	}
	return out
}

// consume marks the transient entries named by ids as consumed by by.
// Ids that are unknown, durable or already consumed are ignored.
func (x *Index) consume(ids []string, by string) {
	for _, id := range ids {
		o, ok := x.ids.get(id, x.entryID)
		if !ok {
			continue
		}
		if e := x.entryAt(o); e.transient() && e.consumedBy.n == 0 {
			e.consumedBy = x.heads.addString(by)
			e.addConsumer(by)
		}
	}
}

func (x *Index) addLive(id string, pos uint64, at int64) {
	o, _ := x.live.push(liveRef{id: x.liveArea.addString(id), pos: pos, at: at})
	x.liveIDs.put(id, o, x.liveID)
	for x.live.len() > x.maxEntries {
		x.dropOldestLive()
	}
}

func (x *Index) len() int { return x.entries.len() }

// entryAt is the entry of ordinal o, which the index holds.
func (x *Index) entryAt(o uint64) *Entry { return x.entries.ord(o) }

// entryID is the envelope id of the entry of ordinal o, in the arena.
func (x *Index) entryID(o uint64) string {
	return envelope.HeaderID(x.heads.bytes(x.entryAt(o).head))
}

// liveID is the id of the live frame of ordinal o, in the arena.
func (x *Index) liveID(o uint64) string { return x.liveArea.string(x.live.ord(o).id) }

// lookup finds the entry of an envelope id.
func (x *Index) lookup(id string) (*Entry, bool) {
	o, ok := x.ids.get(id, x.entryID)
	if !ok {
		return nil, false
	}
	return x.entryAt(o), true
}

// meta decodes e's header into m, whose strings then point into the
// index's arena, which never changes them.
func (x *Index) meta(e *Entry, m *envelope.Meta) {
	_ = envelope.DecodeHeader(x.heads.bytes(e.head), m) // the index's own copy of a header it decoded
}

// folded reports whether replay leaves e out when it folds
// (docs/protocol.md section 8): its context has concluded, and it is
// neither one of the context's conclusion-kind envelopes nor its event.
func (x *Index) folded(e *Entry) bool {
	return e.inc != 0 && x.incs[e.inc-1].concluded && e.flags&envelope.FlagConclusion == 0
}

// newIncarnation starts an incarnation, with no entry in it yet.
func (x *Index) newIncarnation(open bool) uint32 {
	c := incarnation{open: open}
	if n := len(x.freeIncs); n > 0 {
		i := x.freeIncs[n-1]
		x.freeIncs = x.freeIncs[:n-1]
		x.incs[i] = c
		return i + 1
	}
	x.incs = append(x.incs, c)
	return uint32(len(x.incs))
}

// leaveIncarnation is an entry of inc going.
func (x *Index) leaveIncarnation(inc uint32) {
	c := &x.incs[inc-1]
	if c.refs--; c.refs == 0 && !c.open {
		*c = incarnation{}
		x.freeIncs = append(x.freeIncs, inc-1)
	}
}

// find is the place in entries (at) of the entry at pos.
func (x *Index) find(pos uint64) (int, bool) {
	if pos == 0 {
		return 0, false
	}
	i := x.firstAfter(pos - 1)
	if i == x.len() || x.entries.at(i).Pos != pos {
		return 0, false
	}
	return i, true
}

// pendingFrame is the frame of the entry at pos, not stored yet.
func (x *Index) pendingFrame(pos uint64) []byte {
	if i, ok := x.pendingAt(pos); ok {
		return x.pending[i].frame
	}
	return nil
}

// pendingRecOf is the record a selection keeps of the entry at pos, not
// stored yet, made the first time one asks.
func (x *Index) pendingRecOf(pos uint64) *pendingRec {
	i, ok := x.pendingAt(pos)
	if !ok {
		return nil
	}
	p := &x.pending[i]
	if p.rec == nil {
		p.rec = &pendingRec{frame: p.frame}
	}
	return p.rec
}

func (x *Index) pendingAt(pos uint64) (int, bool) {
	lo, hi := x.pendHead, len(x.pending)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if x.pending[mid].pos < pos {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(x.pending) && x.pending[lo].pos == pos && x.pending[lo].frame != nil
}

// unpend lets the frame of the entry at pos go: the stream has it at
// loc (zero: the stream refused it).
func (x *Index) unpend(pos uint64, loc Loc) {
	if i, ok := x.pendingAt(pos); ok {
		p := &x.pending[i]
		if p.rec != nil {
			p.rec.frame, p.rec.loc, p.rec.settled = nil, loc, true
		}
		*p = pendingFrame{pos: pos}
	}
	for x.pendHead < len(x.pending) && x.pending[x.pendHead].frame == nil {
		x.pendHead++
	}
	x.compactPending()
}

// compactPending starts the pending list's array anew once half of it is
// dead, and reuses it whole once all of it is (the writer stores in
// order, so that is most of the time).
func (x *Index) compactPending() {
	switch {
	case x.pendHead == len(x.pending):
		if cap(x.pending) > 1024 {
			x.pending = nil
		} else {
			clear(x.pending)
			x.pending = x.pending[:0]
		}
		x.pendHead = 0
	case x.pendHead >= 64 && x.pendHead*2 >= len(x.pending):
		x.pending = append(make([]pendingFrame, 0, 2*(len(x.pending)-x.pendHead)), x.pending[x.pendHead:]...)
		x.pendHead = 0
	}
}

func (x *Index) dropOldest() {
	e := x.entries.at(0)
	if id := envelope.HeaderID(x.heads.bytes(e.head)); id != "" {
		x.ids.drop(id, x.entries.first)
	}
	if e.inc != 0 {
		x.leaveIncarnation(e.inc)
	}
	x.entries.pop()
	// The frames of evicted entries the stream has not stored yet wait
	// for the writer, up to Slack of them (what a replay may still read
	// of the evicted): a writer that never answers (closed, or holding
	// for long) leaves the index as many as it keeps, not all.
	for len(x.pending)-x.pendHead > x.maxEntries+Slack {
		x.pending[x.pendHead] = pendingFrame{}
		x.pendHead++
		for x.pendHead < len(x.pending) && x.pending[x.pendHead].frame == nil {
			x.pendHead++
		}
	}
	x.compactPending()
	// The arena's segments before the oldest entry's header hold
	// nothing the index keeps: its headers and its consumers' ids come
	// after it.
	keep := ^uint32(0)
	if x.len() > 0 {
		keep = x.entries.at(0).head.seg
	}
	x.heads.release(keep)
}

func (x *Index) dropOldestLive() {
	r := x.live.at(0)
	x.liveIDs.drop(x.liveArea.string(r.id), x.live.first)
	x.live.pop()
	keep := ^uint32(0)
	if x.live.len() > 0 {
		keep = x.live.at(0).id.seg
	}
	x.liveArea.release(keep)
}

// expire drops what is older than the history's age at now.
func (x *Index) expire(now int64) {
	if x.maxAge <= 0 {
		return
	}
	for x.len() > 0 && x.entries.at(0).Time < now-x.maxAge {
		x.dropOldest()
	}
	for x.live.len() > 0 && x.live.at(0).at < now-x.maxAge {
		x.dropOldestLive()
	}
}

// Discard drops the entries the stream no longer holds: those stored
// below first, its oldest sequence (--history-bytes discards the
// stream's oldest messages, whichever pod they belong to).
func (x *Index) Discard(first uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.len() > 0 {
		if seq := x.entries.at(0).loc.Seq; seq == 0 || seq >= first {
			break
		}
		x.dropOldest()
	}
}

// Holds reports whether the pod's history holds an envelope with id
// (duplicate_id).
func (x *Index) Holds(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.ids.get(id, x.entryID)
	return ok
}

// Last is the position of the last frame applied.
func (x *Index) Last() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.last
}

// Len is the number of entries.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.len()
}

// Changed returns a channel that is closed when the next frame is applied.
func (x *Index) Changed() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.changed == nil {
		x.changed = make(chan struct{})
	}
	return x.changed
}

// notify closes the channel of Changed, when someone took one: most
// frames are applied with nobody waiting.
func (x *Index) notify() {
	if x.changed != nil {
		close(x.changed)
		x.changed = nil
	}
}
