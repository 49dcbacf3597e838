package history

import (
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Admit decides whether an entry is for the reader (its filter,
// docs/protocol.md sections 4 and 8). It is called with the index's lock
// held, or after it (NewestWithin's count of the omitted entries), so it
// must not call the index.
type Admit func(m *envelope.Meta) bool

// Selected is one entry a replay sends.
type Selected struct {
	Pos  uint64
	Size int // as stored, also when it is sent collapsed
	// Tokens is the entry's token estimate as it is sent: collapsed when
	// it is, as stored otherwise (envelope.EstimateTokens of those bytes).
	Tokens int
	// ConsumedBy, when set, is the id of the envelope that consumed this
	// transient one: it is sent collapsed.
	ConsumedBy string
	// loc is where the entry was when it was selected, or rec, when the
	// stream had not stored it yet, where it went since (Locations looks
	// again: they are for one evicted since).
	loc Loc
	rec *pendingRec
}

// Selection is what a replay sends, oldest first, and what it left out.
type Selection struct {
	Entries []Selected
	// Folded counts the admitted entries that folding left out, among
	// those no older than the oldest one sent.
	Folded int
	// Collapsed counts the entries sent collapsed.
	Collapsed int
	// Last is the last position of the pod the selection looked at: the
	// reader is up to date to it.
	Last uint64
	// More is set when entries that would have been selected were left
	// out by a limit (older ones for Newest, NewestWithin and Page
	// without After, newer ones for After, Since and Page with After).
	More bool
	// Tokens is the sum of the Tokens of Entries.
	Tokens int
	// Omitted, set by NewestWithin, counts the entries older than the
	// ones sent that a replay would have sent with no budget (admitted,
	// and not folded when folding): what gateway/history returns before
	// the first one sent, with the same filter and fold.
	Omitted int
	// NextTokens is the token estimate of the entry a token bound
	// stopped at: the least budget that would have taken it too (0 when
	// no token bound stopped the selection).
	NextTokens int
}

// Newest selects the last n entries that admit passes (n <= 0: all of
// them), folded and collapsed when fold is set: a joiner's history=N
// (docs/protocol.md section 8).
func (x *Index) Newest(n int, fold bool, admit Admit) Selection {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	s := Selection{Last: x.last}
	for i := x.len() - 1; i >= 0; i-- {
		e := x.entries.at(i)
		if !x.admits(e, admit) {
			continue
		}
		if n > 0 && len(s.Entries) == n {
			if !fold || !x.folded(e) {
				s.More = true
				break
			}
			continue
		}
		if fold && x.folded(e) {
			s.Folded++
			continue
		}
		s.Entries = append(s.Entries, x.selected(e, fold, &s))
	}
	if n > 0 && len(s.Entries) == n {
		// Folded entries older than the oldest one sent are not "left
		// out" of this replay: only count those within its span.
		s.Folded = 0
		oldest := s.Entries[len(s.Entries)-1].Pos
		for i := x.len() - 1; i >= 0 && x.entries.at(i).Pos > oldest; i-- {
			if e := x.entries.at(i); fold && x.folded(e) && x.admits(e, admit) {
				s.Folded++
			}
		}
	}
	reverse(s.Entries)
	return s
}

// NewestWithin selects the newest contiguous stretch of the entries that
// admit passes, folded and collapsed when fold is set, whose tokens add
// up to at most maxTokens: a joiner's history=tokens:N (docs/protocol.md
// section 8). The stretch never splits an envelope and never skips one:
// it stops at the first (newest to oldest) that does not fit, so an
// entry alone over the budget is not sent, nor is anything older, and a
// reader that pages back from the oldest entry sent (gateway/history,
// before) finds exactly the Omitted ones. The selection depends on the
// index and admit alone: every join at the same moment with the same
// filter gets the same. Folded counts, as for Newest, the entries folding
// left out no older than the oldest one sent, or all of them when the
// whole history fit.
func (x *Index) NewestWithin(maxTokens int, fold bool, admit Admit) Selection {
	x.mu.Lock()
	x.expire(time.Now().UnixNano())
	s := Selection{Last: x.last}
	folded := 0 // s.Folded when the oldest entry so far was sent
	i := x.len() - 1
	for ; i >= 0; i-- {
		e := x.entries.at(i)
		if !x.admits(e, admit) {
			continue
		}
		if fold && x.folded(e) {
			s.Folded++
			continue
		}
		if t := e.sentTokens(fold); s.Tokens+t > maxTokens {
			s.More, s.NextTokens, s.Folded = true, t, folded
			break
		}
		s.Entries = append(s.Entries, x.selected(e, fold, &s))
		folded = s.Folded
	}
	// What the budget left out: every entry a replay would send from
	// where the stretch stopped, that one included. Which of them are
	// folded is taken now; their headers never change, so the filter
	// reads them after the lock is let go, through a view of the arena's
	// segments as they are now (which never change a header they hold):
	// a long history holds up the pod's order (Apply) while the headers'
	// places are copied (90 µs for 10,000 entries), not while every
	// header is decoded (ten times that).
	var rest []span
	var heads arena
	if i >= 0 {
		rest = make([]span, 0, i+1)
		for ; i >= 0; i-- {
			if e := x.entries.at(i); !(fold && x.folded(e)) {
				rest = append(rest, e.head)
			}
		}
		heads = x.heads.view()
	}
	x.mu.Unlock()
	var m envelope.Meta
	for _, head := range rest {
		_ = envelope.DecodeHeader(heads.bytes(head), &m)
		if admit(&m) {
			s.Omitted++
		}
	}
	reverse(s.Entries)
	return s
}

// After selects every entry after the entry or live frame id that admit
// passes, whole: a resume (docs/protocol.md section 8). found is false when id is not
// in the history (expired, or never there).
func (x *Index) After(id string, admit Admit) (s Selection, found bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	from, ok := x.seqOf(id)
	if !ok {
		return Selection{Last: x.last}, false
	}
	s = Selection{Last: x.last}
	for i := x.firstAfter(from); i < x.len(); i++ {
		if e := x.entries.at(i); x.admits(e, admit) {
			s.Entries = append(s.Entries, x.selected(e, false, &s))
		}
	}
	return s, true
}

// Since selects, oldest first, the entries after position after that
// admit passes, folded and collapsed when fold is set, at most limit of
// them and, when maxTokens is not 0, of at most maxTokens tokens: a
// reader's cursor (the MCP endpoint's pod_read). Last is where the reader
// is up to once it has them: just before the entry a bound stopped at,
// so that the next read starts with it. Like NewestWithin, a token bound
// never skips an entry: one alone over it stops the read with nothing
// selected (NextTokens says what it needs).
func (x *Index) Since(after uint64, limit, maxTokens int, fold bool, admit Admit) Selection {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	s := Selection{Last: x.last}
	for i := x.firstAfter(after); i < x.len(); i++ {
		e := x.entries.at(i)
		if !x.admits(e, admit) {
			continue
		}
		if fold && x.folded(e) {
			s.Folded++
			continue
		}
		if len(s.Entries) == limit {
			s.More, s.Last = true, e.Pos-1
			break
		}
		if t := e.sentTokens(fold); maxTokens > 0 && s.Tokens+t > maxTokens {
			s.More, s.Last, s.NextTokens = true, e.Pos-1, t
			break
		}
		s.Entries = append(s.Entries, x.selected(e, fold, &s))
	}
	return s
}

// PageQuery is a gateway/history request (docs/protocol.md section 6).
type PageQuery struct {
	Before, After string // envelope ids; at most one
	Context       string // keep this context and its descendants
	Limit         int
	Fold          bool
	MaxBytes      int // of the entries sent
	// MaxTokens bounds the tokens of the entries sent (0: no bound): the
	// page is the newest contiguous stretch before Before (or the oldest
	// after After) that fits it, whichever of it, Limit and MaxBytes
	// stops first. Unlike MaxBytes, which lets the first entry through
	// whatever its size so that paging goes on, it never lets an entry
	// over it through: the page is then empty, More set and NextTokens
	// the entry's tokens.
	MaxTokens int
}

// Page answers a gateway/history request. ok is false when Before or
// After names an id the history does not hold.
func (x *Index) Page(q PageQuery, admit Admit) (s Selection, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	s = Selection{Last: x.last}
	match := func(e *Entry) bool {
		m := &x.scratch
		x.meta(e, m)
		if q.Context != "" && m.ContextID != q.Context && !contains(m.Ancestors, q.Context) {
			return false
		}
		return admit(m)
	}
	lo, hi := 0, x.len() // the range looked at: [lo, hi)
	switch {
	case q.Before != "":
		e, found := x.lookup(q.Before)
		if !found {
			return s, false
		}
		hi = x.firstAfter(e.Pos) - 1
	case q.After != "":
		e, found := x.lookup(q.After)
		if !found {
			return s, false
		}
		lo = x.firstAfter(e.Pos)
	}
	bytes := 0
	take := func(e *Entry) bool {
		if q.Fold && x.folded(e) {
			s.Folded++
			return true
		}
		if len(s.Entries) == q.Limit || (len(s.Entries) > 0 && bytes+e.Size > q.MaxBytes) {
			s.More = true
			return false
		}
		if t := e.sentTokens(q.Fold); q.MaxTokens > 0 && s.Tokens+t > q.MaxTokens {
			s.More, s.NextTokens = true, t
			return false
		}
		bytes += e.Size
		s.Entries = append(s.Entries, x.selected(e, q.Fold, &s))
		return true
	}
	if q.After != "" {
		for i := lo; i < hi; i++ {
			if e := x.entries.at(i); match(e) && !take(e) {
				break
			}
		}
		return s, true
	}
	for i := hi - 1; i >= lo; i-- {
		if e := x.entries.at(i); match(e) && !take(e) {
			break
		}
	}
	reverse(s.Entries)
	return s, true
}

// selected is e as a replay sends it, counting a collapse and its
// tokens in s.
func (x *Index) selected(e *Entry, collapse bool, s *Selection) Selected {
	sel := Selected{Pos: e.Pos, Size: e.Size, Tokens: e.sentTokens(collapse), loc: e.loc}
	if e.pending {
		sel.rec = x.pendingRecOf(e.Pos)
	}
	if collapse && e.transient() && e.consumedBy.n != 0 {
		sel.ConsumedBy = x.heads.string(e.consumedBy)
		s.Collapsed++
	}
	s.Tokens += sel.Tokens
	return sel
}

// admits decodes e's header and asks admit. Call it with mu held (write).
func (x *Index) admits(e *Entry, admit Admit) bool {
	x.meta(e, &x.scratch)
	return admit(&x.scratch)
}

// seqOf finds the place of an entry or a live frame by id.
func (x *Index) seqOf(id string) (uint64, bool) {
	if e, ok := x.lookup(id); ok {
		return e.Pos, true
	}
	if o, ok := x.liveIDs.get(id, x.liveID); ok {
		return x.live.ord(o).pos, true
	}
	return 0, false
}

// firstAfter is the place in entries (at) of the first entry after pos.
func (x *Index) firstAfter(pos uint64) int {
	lo, hi := 0, x.len()
	for lo < hi {
		mid := (lo + hi) / 2
		if x.entries.at(mid).Pos <= pos {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func reverse(s []Selected) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
