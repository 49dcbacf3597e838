package history

import (
	"time"

	"github.com/mcpp/gateway/envelope"
)

// Admit decides whether an entry is for the reader (its filter,
// docs/protocol.md sections 4 and 8).
type Admit func(m *envelope.Meta) bool

// Selected is one entry a replay sends.
type Selected struct {
	Pos  uint64
	Size int
	// ConsumedBy, when set, is the id of the envelope that consumed this
	// transient one: it is sent collapsed.
	ConsumedBy string
	entry      *Entry
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
	// out by a limit (older ones for Newest and Page without After, newer
	// ones for After, Since and Page with After).
	More bool
}

// Newest selects the last n entries that admit passes (n <= 0: all of
// them), folded and collapsed when fold is set: a joiner's history=N
// (docs/protocol.md section 8).
func (x *Index) Newest(n int, fold bool, admit Admit) Selection {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	s := Selection{Last: x.last}
	for i := len(x.entries) - 1; i >= x.head; i-- {
		e := x.entries[i]
		if !x.admits(e, admit) {
			continue
		}
		if n > 0 && len(s.Entries) == n {
			if !fold || !e.Folded() {
				s.More = true
				break
			}
			continue
		}
		if fold && e.Folded() {
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
		for i := len(x.entries) - 1; i >= x.head && x.entries[i].Pos > oldest; i-- {
			if e := x.entries[i]; fold && e.Folded() && x.admits(e, admit) {
				s.Folded++
			}
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
	for _, e := range x.entries[x.firstAfter(from):] {
		if x.admits(e, admit) {
			s.Entries = append(s.Entries, Selected{Pos: e.Pos, Size: e.Size, entry: e})
		}
	}
	return s, true
}

// Since selects, oldest first, at most limit entries after position
// after that admit passes, folded and collapsed when fold is set: a
// reader's cursor (the MCP endpoint's pod_read). Last is where the reader
// is up to once it has them.
func (x *Index) Since(after uint64, limit int, fold bool, admit Admit) Selection {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expire(time.Now().UnixNano())
	s := Selection{Last: x.last}
	for _, e := range x.entries[x.firstAfter(after):] {
		if !x.admits(e, admit) {
			continue
		}
		if fold && e.Folded() {
			s.Folded++
			continue
		}
		if len(s.Entries) == limit {
			s.More, s.Last = true, s.Entries[len(s.Entries)-1].Pos
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
		e.Meta(m)
		if q.Context != "" && m.ContextID != q.Context && !contains(m.Ancestors, q.Context) {
			return false
		}
		return admit(m)
	}
	lo, hi := x.head, len(x.entries) // the range looked at: [lo, hi)
	switch {
	case q.Before != "":
		e := x.ids[q.Before]
		if e == nil {
			return s, false
		}
		hi = x.firstAfter(e.Pos) - 1
	case q.After != "":
		e := x.ids[q.After]
		if e == nil {
			return s, false
		}
		lo = x.firstAfter(e.Pos)
	}
	bytes := 0
	take := func(e *Entry) bool {
		if q.Fold && e.Folded() {
			s.Folded++
			return true
		}
		if len(s.Entries) == q.Limit || (len(s.Entries) > 0 && bytes+e.Size > q.MaxBytes) {
			s.More = true
			return false
		}
		bytes += e.Size
		s.Entries = append(s.Entries, x.selected(e, q.Fold, &s))
		return true
	}
	if q.After != "" {
		for i := lo; i < hi; i++ {
			if e := x.entries[i]; match(e) && !take(e) {
				break
			}
		}
		return s, true
	}
	for i := hi - 1; i >= lo; i-- {
		if e := x.entries[i]; match(e) && !take(e) {
			break
		}
	}
	reverse(s.Entries)
	return s, true
}

// selected is e as a replay sends it, counting a collapse in s.
func (x *Index) selected(e *Entry, collapse bool, s *Selection) Selected {
	sel := Selected{Pos: e.Pos, Size: e.Size, entry: e}
	if collapse && e.transient() && e.consumedBy != "" {
		sel.ConsumedBy = e.consumedBy
		s.Collapsed++
	}
	return sel
}

// admits decodes e's header and asks admit. Call it with mu held (write).
func (x *Index) admits(e *Entry, admit Admit) bool {
	e.Meta(&x.scratch)
	return admit(&x.scratch)
}

// seqOf finds the place of an entry or a live frame by id.
func (x *Index) seqOf(id string) (uint64, bool) {
	if e := x.ids[id]; e != nil {
		return e.Pos, true
	}
	seq, ok := x.liveIDs[id]
	return seq, ok
}

// firstAfter is the index in entries of the first entry after pos.
func (x *Index) firstAfter(pos uint64) int {
	lo, hi := x.head, len(x.entries)
	for lo < hi {
		mid := (lo + hi) / 2
		if x.entries[mid].Pos <= pos {
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
