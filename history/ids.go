package history

import (
	"hash/maphash"
	"strings"
)

// idTable finds an index's entries, or its live frames, by envelope id
// without keeping the ids as strings, which the collector would have to
// follow one by one: the map is keyed by the id's hash and holds the
// ordinal of the entry (or live frame) that has it, whose own bytes (in
// the index's arena) are compared with the id asked for. Two ids with one
// hash are both found: the second goes to more, by its string, so that a
// collision never refuses a new id (duplicate_id) nor lets a duplicate
// through, nor resumes from the wrong place. With 64-bit hashes of a seed
// of this process's, more is empty but for the one in 2^64.
type idTable struct {
	byHash map[uint64]uint64
	more   map[string]uint64 // nil until a collision
}

var idSeed = maphash.MakeSeed()

// idHashMask is all ones; a test makes every id collide with it.
var idHashMask = ^uint64(0)

func idHash(id string) uint64 { return maphash.String(idSeed, id) & idHashMask }

func newIDTable() idTable { return idTable{byHash: map[uint64]uint64{}} }

// get finds id; idAt is the id of an ordinal in the table.
func (t *idTable) get(id string, idAt func(uint64) string) (uint64, bool) {
	if o, ok := t.byHash[idHash(id)]; ok && idAt(o) == id {
		return o, true
	}
	if t.more != nil {
		o, ok := t.more[id]
		return o, ok
	}
	return 0, false
}

// insert makes id name ordinal o unless it names one already (the first
// one stands), and reports whether it did.
func (t *idTable) insert(id string, o uint64, idAt func(uint64) string) bool {
	h := idHash(id)
	cur, taken := t.byHash[h]
	if taken && idAt(cur) == id {
		return false
	}
	if t.more != nil {
		if _, ok := t.more[id]; ok {
			return false
		}
	}
	if !taken {
		t.byHash[h] = o
		return true
	}
	if t.more == nil {
		t.more = map[string]uint64{}
	}
	t.more[strings.Clone(id)] = o
	return true
}

// put makes id name ordinal o, in place of what it named before.
func (t *idTable) put(id string, o uint64, idAt func(uint64) string) {
	h := idHash(id)
	cur, taken := t.byHash[h]
	if !taken || idAt(cur) == id {
		t.byHash[h] = o
		return
	}
	if t.more == nil {
		t.more = map[string]uint64{}
	}
	t.more[strings.Clone(id)] = o
}

// drop forgets id if it still names ordinal o (a later one may have taken
// it over).
func (t *idTable) drop(id string, o uint64) {
	h := idHash(id)
	if cur, ok := t.byHash[h]; ok && cur == o {
		delete(t.byHash, h)
		return
	}
	if cur, ok := t.more[id]; ok && cur == o {
		delete(t.more, id)
		if len(t.more) == 0 {
			t.more = nil
		}
	}
}
