package history

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Entry is one stored frame of a pod's history, an accepted envelope or a
// system/context event, as filters and folding see it: its header, never
// its body, which stays in the stream. The header is kept as the frame has
// it (bytes, decoded when a reader asks: Meta), so that an entry holds few
// pointers for the garbage collector to follow, however many a pod keeps.
type Entry struct {
	// Pos is the entry's place in the pod's order on this node: what
	// selections, resumes and cursors count in.
	Pos  uint64
	Time int64 // unix nanoseconds
	Size int   // of the envelope
	head []byte
	// id is the envelope's id, in head; kind and flags are the header's.
	id    string
	kind  envelope.FrameKind
	flags uint8
	// tokens is the envelope's token estimate (envelope.EstimateTokens).
	// int32s: in the padding after flags, and the two below keep an entry
	// within the allocator's 144-byte class.
	tokens int32
	// collapseWeight and collapseLen are, for a transient envelope, the
	// envelope.TokenWeight and length of its collapsed form (Collapse):
	// without its consumer's id until it is consumed, whole from then on.
	// Both are 0 for a body that is not a JSON object, which a gateway
	// never stores (tests do).
	collapseWeight, collapseLen int32
	// loc is where the stream holds the entry's frame; zero until the
	// writer's message is stored (Stored). Until then frame is the frame
	// itself, which the writer holds anyway: a reader takes it from here,
	// and never waits for the stream.
	loc   Loc
	frame []byte
	// inc is the incarnation of the context the entry is in (nil in the
	// main context): folding leaves out its entries once it concluded.
	inc *incarnation
	// consumedBy is the id of the envelope that consumed this transient
	// one, or "".
	consumedBy string
}

// incarnation is one life of a context id in the pod's order: from the
// first envelope that names it to its system/context event. An envelope
// that names the id after that starts another.
type incarnation struct{ concluded bool }

// Folded reports whether replay leaves the entry out when it folds
// (docs/protocol.md section 8): its context has concluded, and it is neither one of the
// context's conclusion-kind envelopes nor its event.
func (e *Entry) Folded() bool {
	return e.inc != nil && e.inc.concluded && e.flags&envelope.FlagConclusion == 0
}

// Meta decodes the entry's header into m, whose strings then point into
// the entry: use them under the index's lock, or copy them.
func (e *Entry) Meta(m *envelope.Meta) {
	_ = envelope.DecodeHeader(e.head, m) // the index's own copy of a header it decoded
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
// resume from it.
type liveRef struct {
	id  string
	pos uint64
	at  int64
}

// Index is what a gateway node knows of one pod's history, in the pod's
// order: the header of every entry, which envelope ids it holds, which
// contexts have concluded and which transient envelopes were consumed.
// Replays and gateway/history decide from it what to send, then read only
// those bodies from the stream. An entry is in the index from the moment
// its pod applies it, which may be before the stream has stored it (a
// node that orders its pods itself delivers first and stores behind): its
// location comes with Stored, and readers wait for the writer (Sync)
// before they read.
//
// It mirrors the stream's own limits: --history entries and --history-age
// (Apply and Select evict past them), and --history-bytes, whose
// discarding of the stream's oldest messages Discard reports.
type Index struct {
	mu         sync.RWMutex
	scratch    envelope.Meta // decoded headers, under mu (write)
	entries    []*Entry      // oldest first, from head on
	head       int
	ids        map[string]*Entry
	live       []liveRef // oldest first, from liveHead on
	liveHead   int
	liveIDs    map[string]uint64
	open       map[string]*incarnation // the current incarnation of each context id
	last       uint64
	maxEntries int
	maxAge     int64
	changed    chan struct{}
}

// NewIndex makes the index of a pod whose stream keeps at most maxEntries
// per subject for at most maxAge.
func NewIndex(maxEntries int, maxAge time.Duration) *Index {
	return &Index{
		ids: map[string]*Entry{}, liveIDs: map[string]uint64{},
		open: map[string]*incarnation{}, maxEntries: maxEntries, maxAge: int64(maxAge),
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
// until Stored, and otherwise a copy of its header.
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
			x.addLive(strings.Clone(m.ID), pos, at)
		}
		x.consume(m.Consumes, m.ID)
		return nil
	}
	if m.Kind == envelope.FrameKick {
		return nil // the pod's, kept for its ban: nobody reads it back
	}
	e := &Entry{Pos: pos, Time: at, Size: size, kind: m.Kind, flags: m.Flags, loc: loc}
	body := frame[len(frame)-size:]
	if tokens <= 0 {
		tokens = envelope.EstimateTokens(body)
	}
	e.tokens = int32(min(tokens, math.MaxInt32))
	if e.transient() {
		e.collapseWeight, e.collapseLen = collapsedWeight(body)
	}
	head := frame[:len(frame)-size]
	e.head = append(make([]byte, 0, len(head)), head...) // not the frame's memory, which goes once stored
	if loc.Seq == 0 {
		e.frame = frame
	}
	e.id = envelope.HeaderID(e.head) // in the entry's memory, not the caller's
	if id := m.ContextID; id != "" {
		inc := x.open[id]
		switch m.Kind {
		case envelope.FrameEnvelope:
			if inc == nil {
				inc = &incarnation{}
				x.open[strings.Clone(id)] = inc
			}
		case envelope.FrameContextEvent:
			// The event ends the incarnation: the envelopes of it fold,
			// and the next envelope that names the id starts another.
			if inc == nil {
				inc = &incarnation{} // its envelopes are older than the history
			}
			inc.concluded = true
			delete(x.open, id)
		}
		e.inc = inc
	}
	x.entries = append(x.entries, e)
	if e.id != "" {
		if _, taken := x.ids[e.id]; !taken {
			x.ids[e.id] = e // the first one stands
		}
	}
	x.consume(m.Consumes, m.ID)
	for x.len() > x.maxEntries {
		x.dropOldest()
	}
	x.expire(at)
	return e
}

// Stored records where the stream holds entries: the message seq, at
// offs in it (seq 0: the stream refused them, and they are not in the
// history after all).
func (x *Index) Stored(entries []*Entry, offs []int, seq uint64) {
	x.mu.Lock()
	for i, e := range entries {
		if seq != 0 {
			e.loc = Loc{Seq: seq, Off: offs[i]}
		}
		e.frame = nil
	}
	x.mu.Unlock()
}

// Located is where a selected entry is: in the stream (Loc), or, not
// stored yet, its Frame.
type Located struct {
	Loc
	Frame []byte
}

// Locations returns where the selected entries are; one with neither a
// Loc nor a Frame is no longer in the history (the stream refused it).
func (x *Index) Locations(sel []Selected) []Located {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Located, len(sel))
	for i, s := range sel {
		out[i] = Located{Loc: s.entry.loc, Frame: s.entry.frame}
	}
	return out
}

// consume marks the transient entries named by ids as consumed by by.
// Ids that are unknown, durable or already consumed are ignored.
func (x *Index) consume(ids []string, by string) {
	for _, id := range ids {
		if e := x.ids[id]; e != nil && e.transient() && e.consumedBy == "" {
			e.consumedBy = strings.Clone(by)
			e.addConsumer(by)
		}
	}
}

func (x *Index) addLive(id string, pos uint64, at int64) {
	x.live = append(x.live, liveRef{id: id, pos: pos, at: at})
	x.liveIDs[id] = pos
	for len(x.live)-x.liveHead > x.maxEntries {
		x.dropOldestLive()
	}
}

func (x *Index) len() int { return len(x.entries) - x.head }

func (x *Index) dropOldest() {
	e := x.entries[x.head]
	x.entries[x.head] = nil
	x.head++
	if x.ids[e.id] == e {
		delete(x.ids, e.id)
	}
	// Slicing off the front never frees the array's start: copy once
	// half of it is dead, so that each copy costs O(1) per entry gone.
	if x.head >= 64 && x.head*2 >= len(x.entries) {
		x.entries = append(make([]*Entry, 0, 2*x.len()), x.entries[x.head:]...)
		x.head = 0
	}
}

func (x *Index) dropOldestLive() {
	r := x.live[x.liveHead]
	x.live[x.liveHead] = liveRef{}
	x.liveHead++
	if x.liveIDs[r.id] == r.pos {
		delete(x.liveIDs, r.id)
	}
	if x.liveHead >= 64 && x.liveHead*2 >= len(x.live) {
		x.live = append(make([]liveRef, 0, 2*(len(x.live)-x.liveHead)), x.live[x.liveHead:]...)
		x.liveHead = 0
	}
}

// expire drops what is older than the history's age at now.
func (x *Index) expire(now int64) {
	if x.maxAge <= 0 {
		return
	}
	for x.len() > 0 && x.entries[x.head].Time < now-x.maxAge {
		x.dropOldest()
	}
	for len(x.live) > x.liveHead && x.live[x.liveHead].at < now-x.maxAge {
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
		if seq := x.entries[x.head].loc.Seq; seq == 0 || seq >= first {
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
	_, ok := x.ids[id]
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
