package history

import "unsafe"

// arena keeps an index's byte strings (the entries' headers, their
// consumers' ids, the live frames' ids) in a few large segments without
// pointers instead of one small object each: the garbage collector marks
// a segment without reading it, and a pod of 1,000 entries holds a few
// segments, not a few thousand objects (issue 32). Bytes are only ever
// appended: a span, once given, is never written again, so the strings
// decoded from it (Meta's, Selected.ConsumedBy) stay valid for as long
// as someone holds them, after the index has let the segment go too.
//
// The index lets whole segments go (release) once nothing it keeps is in
// them: its strings are appended in the order of the pod, and dropped in
// that order.
type arena struct {
	segs  [][]byte // the segments held, oldest first: segs[i] is number first+i; the last is being filled
	first uint32
	held  int // the capacity of segs, in all
}

// span is where a string is in an arena: its segment's number, its
// offset and length. The zero span is the empty string.
type span struct{ seg, off, n uint32 }

// A new segment is as large as what the arena holds already (so that a
// pod's arena grows by doubling, and one that keeps little holds little),
// within these bounds, or as large as the string that needs it.
const (
	minSegment = 256
	maxSegment = 16 << 10
)

// add appends b and returns its span.
func (a *arena) add(b []byte) span {
	if len(b) == 0 {
		return span{}
	}
	last := len(a.segs) - 1
	if last < 0 || cap(a.segs[last])-len(a.segs[last]) < len(b) {
		size := minSegment
		for size < a.held && size < maxSegment {
			size *= 2
		}
		size = max(size, len(b))
		a.segs = append(a.segs, make([]byte, 0, size))
		a.held += size
		last++
	}
	s := a.segs[last]
	off := len(s)
	a.segs[last] = append(s, b...)
	return span{seg: a.first + uint32(last), off: uint32(off), n: uint32(len(b))}
}

// addString appends s and returns its span.
func (a *arena) addString(s string) span {
	return a.add(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// bytes is the string at s, in the arena's memory: never change it.
func (a *arena) bytes(s span) []byte {
	if s.n == 0 {
		return nil
	}
	seg := a.segs[s.seg-a.first]
	return seg[s.off : s.off+s.n : s.off+s.n]
}

// string is the string at s, in the arena's memory.
func (a *arena) string(s span) string {
	if s.n == 0 {
		return ""
	}
	b := a.bytes(s)
	return unsafe.String(&b[0], len(b))
}

// view is a copy of the arena as it is now, whose bytes read what the
// arena holds now without its owner's lock: the list of its segments is
// copied, and their bytes never change.
func (a *arena) view() arena {
	return arena{segs: append([][]byte(nil), a.segs...), first: a.first}
}

// release lets go of the segments numbered below keep: nothing the index
// keeps is in them. keep past the last segment lets all of them go.
func (a *arena) release(keep uint32) {
	n := 0
	for n < len(a.segs) && a.first+uint32(n) < keep {
		a.held -= cap(a.segs[n])
		n++
	}
	if n == 0 {
		return
	}
	rest := copy(a.segs, a.segs[n:])
	clear(a.segs[rest:])
	a.segs = a.segs[:rest]
	a.first += uint32(n)
	if rest == 0 {
		a.segs = nil // the next segment's number is first: numbers never go back
	}
}
