package history

import (
	"strings"
	"sync"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Entry is one stored frame of a pod's history, an accepted envelope or a
// system/context event, as filters and folding see it: its header, never
// its body, which stays in the stream.
type Entry struct {
	Seq  uint64
	Time int64 // unix nanoseconds
	Size int   // of the envelope
	Meta envelope.Meta
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
	return e.inc != nil && e.inc.concluded && !e.Meta.Conclusion()
}

// liveRef is the place in the pod's order of a frame history does not
// keep (an ephemeral envelope, presence): a client that saw it last may
// resume from it.
type liveRef struct {
	id  string
	seq uint64
	at  int64
}

// Index is what a gateway node knows of one pod's history, built from the
// pod's stream in its order: the header of every entry the stream keeps,
// which envelope ids it holds, which contexts have concluded and which
// transient envelopes were consumed. Replays and gateway/history decide
// from it what to send, then read only those bodies from the stream.
//
// It mirrors the stream's own limits: --history entries and --history-age
// (Apply and Select evict past them), and --history-bytes, whose
// discarding of the stream's oldest entries Discard reports.
type Index struct {
	mu         sync.RWMutex
	entries    []*Entry // oldest first, from head on
	head       int
	ids        map[string]*Entry
	live       []liveRef // oldest first, from liveHead on
	liveHead   int
	liveIDs    map[string]uint64
	reserved   map[string]struct{}
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
		ids: map[string]*Entry{}, liveIDs: map[string]uint64{}, reserved: map[string]struct{}{},
		open: map[string]*incarnation{}, maxEntries: maxEntries, maxAge: int64(maxAge),
		changed: make(chan struct{}),
	}
}

// Apply records the frame the stream delivered at seq, in the stream's
// order: an entry, or the place of a live frame (its marker, or the frame
// its marker stands for), which history does not keep but a client may
// resume from. m's strings may point into the frame: the index keeps
// copies.
func (x *Index) Apply(seq uint64, at int64, m *envelope.Meta, size int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.last = seq
	defer x.notify()
	if m.Live() {
		if m.ID != "" {
			x.addLive(strings.Clone(m.ID), seq, at)
		}
		x.consume(m.Consumes, m.ID)
		return
	}
	e := &Entry{Seq: seq, Time: at, Size: size, Meta: cloneMeta(m)}
	if id := m.ContextID; id != "" {
		inc := x.open[id]
		switch m.Kind {
		case envelope.FrameEnvelope:
			if inc == nil {
				inc = &incarnation{}
				x.open[e.Meta.ContextID] = inc
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
	if e.Meta.ID != "" {
		if _, taken := x.ids[e.Meta.ID]; !taken {
			x.ids[e.Meta.ID] = e // the first one stands
		}
		delete(x.reserved, e.Meta.ID)
	}
	x.consume(m.Consumes, m.ID)
	for x.len() > x.maxEntries {
		x.dropOldest()
	}
	x.expire(at)
}

// consume marks the transient entries named by ids as consumed by by.
// Ids that are unknown, durable or already consumed are ignored.
func (x *Index) consume(ids []string, by string) {
	for _, id := range ids {
		if e := x.ids[id]; e != nil && e.Meta.Transient() && e.consumedBy == "" {
			e.consumedBy = strings.Clone(by)
		}
	}
}

func (x *Index) addLive(id string, seq uint64, at int64) {
	x.live = append(x.live, liveRef{id: id, seq: seq, at: at})
	x.liveIDs[id] = seq
	for len(x.live)-x.liveHead > x.maxEntries {
		x.dropOldestLive()
	}
}

func (x *Index) len() int { return len(x.entries) - x.head }

func (x *Index) dropOldest() {
	e := x.entries[x.head]
	x.entries[x.head] = nil
	x.head++
	if x.ids[e.Meta.ID] == e {
		delete(x.ids, e.Meta.ID)
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
	if x.liveIDs[r.id] == r.seq {
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

// Discard drops the entries below first, the stream's oldest sequence:
// --history-bytes discards the stream's oldest entries, whichever pod they
// belong to.
func (x *Index) Discard(first uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.len() > 0 && x.entries[x.head].Seq < first {
		x.dropOldest()
	}
	for len(x.live) > x.liveHead && x.live[x.liveHead].seq < first {
		x.dropOldestLive()
	}
}

// Reserve claims id for an envelope about to be published, and reports
// false when the pod's history already holds it, or another envelope
// being published claimed it (duplicate_id). The claim ends when Apply
// sees the envelope, or with Release when it is refused after all.
func (x *Index) Reserve(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.ids[id]; ok {
		return false
	}
	if _, ok := x.reserved[id]; ok {
		return false
	}
	x.reserved[strings.Clone(id)] = struct{}{}
	return true
}

// Release ends a claim of Reserve for an envelope that was not published.
func (x *Index) Release(id string) {
	x.mu.Lock()
	delete(x.reserved, id)
	x.mu.Unlock()
}

// Last is the sequence of the last frame applied.
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
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.changed
}

func (x *Index) notify() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// cloneMeta copies m's strings and slices, which point into a frame, so
// that the index does not keep the frame (and its body) alive.
func cloneMeta(m *envelope.Meta) envelope.Meta {
	c := *m
	c.Origin = ""
	c.From = strings.Clone(m.From)
	c.To = cloneStrings(m.To)
	c.ContextID = strings.Clone(m.ContextID)
	c.ContextType = strings.Clone(m.ContextType)
	c.ContextParent = strings.Clone(m.ContextParent)
	c.Ancestors = cloneStrings(m.Ancestors)
	c.ID = strings.Clone(m.ID)
	c.Incarnation = ""
	c.Consumes = nil // applied at once; not needed later
	return c
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strings.Clone(v)
	}
	return out
}
