package history

import (
	"hash/maphash"
	"sync"
)

// Cache keeps the stream's newest messages that a node has in hand (its
// follower brought them, a pod's opening scanned them, a replay read
// them), up to a number of bytes (--history-cache), so that a replay, a
// resume or a history page takes them from memory and does not ask the
// stream again. A message's bytes never change once stored under its
// sequence, so a cached one is never stale; one the stream discarded
// since (a limit) is still served, which is what the selection that
// asked for it counted on.
//
// What it is for: after a kill under a join storm (issue 38's full-size
// runs 18 and 19) a thousand joiners' replays of a pod's whole past read
// the stream, where every pod's messages are interleaved, and took more
// than 30 s; a pod opened on a node reads its past once, and each of its
// joiners' replays read it again.
//
// Its bytes are one array, written round and round, oldest overwritten
// first, and neither its table nor its order holds a pointer: the
// garbage collector marks three objects however many messages it keeps,
// and scans none of them (issue 32).
type Cache struct {
	mu   sync.Mutex
	max  int    // bytes, the array's length once grown
	buf  []byte // grows to max, then is written round
	head uint64 // bytes written in all: the next one's place is head % max
	at   map[uint64]cached
	// order is the sequences in at, oldest first, from first on: the
	// ones overwritten leave at from the front.
	order []uint64
	first int
	seed  maphash.Seed

	hits, misses uint64
}

// cached is where the array holds one message.
type cached struct {
	off     uint64 // in all bytes written (head)
	n       int32
	subject uint64 // its subject's hash
	time    int64
}

// cacheMinBytes is the smallest cache worth keeping: a smaller
// --history-cache keeps none.
const cacheMinBytes = 64 << 10

// NewCache makes a cache of at most max bytes, or nil (no cache) when
// max is below 64 KiB. A nil *Cache keeps nothing and finds nothing.
func NewCache(max int) *Cache {
	if max < cacheMinBytes {
		return nil
	}
	return &Cache{max: max, at: map[uint64]cached{}, seed: maphash.MakeSeed()}
}

// Put keeps m, stored on subject, unless it is kept already or larger
// than an eighth of the cache (a message that would push out many
// others, for one read).
func (c *Cache) Put(subject string, m StoredMsg) {
	if c == nil || len(m.Data) > c.max/8 || m.Seq == 0 {
		return
	}
	h := maphash.String(c.seed, subject)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.at[m.Seq]; ok {
		return
	}
	n := uint64(len(m.Data))
	off := c.head
	if rest := uint64(c.max) - off%uint64(c.max); n > rest {
		off += rest // not split across the array's end: it starts again at 0
	}
	end := off + n
	// What the new bytes overwrite leaves the table.
	for c.first < len(c.order) {
		old := c.at[c.order[c.first]]
		if old.off+uint64(c.max) >= end {
			break
		}
		delete(c.at, c.order[c.first])
		c.first++
	}
	if c.first > len(c.order)/2 && c.first > 64 {
		c.order = append(c.order[:0], c.order[c.first:]...)
		c.first = 0
	}
	start := int(off % uint64(c.max))
	if need := start + int(n); need > len(c.buf) {
		// Grown as it fills, to max at most: an idle node pays for what
		// it read, not for the bound.
		c.buf = append(c.buf, make([]byte, min(c.max, max(need, 2*len(c.buf)))-len(c.buf))...)
	}
	copy(c.buf[start:], m.Data)
	c.head = end
	c.at[m.Seq] = cached{off: off, n: int32(n), subject: h, time: m.Time}
	c.order = append(c.order, m.Seq)
}

// Get appends a copy of the message at seq, stored on subject, to dst
// and returns it, and whether it was there.
func (c *Cache) Get(subject string, seq uint64, dst []byte) (StoredMsg, bool) {
	if c == nil {
		return StoredMsg{}, false
	}
	h := maphash.String(c.seed, subject)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.at[seq]
	if !ok || e.subject != h {
		c.misses++
		return StoredMsg{}, false
	}
	c.hits++
	start := int(e.off % uint64(c.max))
	return StoredMsg{Seq: seq, Time: e.time, Data: append(dst, c.buf[start:start+int(e.n)]...)}, true
}

// CacheStats is what a cache did: the messages it gave and the ones it
// did not have, and the bytes of memory it takes (its array, which grows
// as it fills, to its bound).
type CacheStats struct {
	Hits, Misses uint64
	Bytes        int64
}

// Stats reports what c did.
func (c *Cache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits, Misses: c.misses, Bytes: int64(len(c.buf))}
}
