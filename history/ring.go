package history

// ring holds an index's entries (or live frames), oldest first, in an
// array it reuses: each one applied gets the next ordinal, and the one of
// ordinal o is at o modulo the array's length, a power of two. Dropping
// the oldest moves nothing and appending allocates nothing until the
// array is full; it then doubles, and halves once three quarters of it
// are empty. A slice that kept its oldest at 0 had to copy what it kept
// each time half of it had gone, a new array each time.
//
// An item's slot is written once, when it comes, and afterwards only in
// the fields its index updates: a slot is not reused before its item has
// gone and as many others have come as the array holds. A pointer to an
// item (Apply's Entry) therefore reads its Pos right while the caller
// still holds the pod's order lock, even after the array was replaced:
// the old one is never written again.
type ring[T any] struct {
	buf   []T
	first uint64 // the ordinal of the oldest
	n     int
}

// minRingSize is the array a ring starts with.
const minRingSize = 8

func (r *ring[T]) len() int { return r.n }

// at is the i-th oldest item, 0 <= i < len.
func (r *ring[T]) at(i int) *T { return &r.buf[(r.first+uint64(i))&uint64(len(r.buf)-1)] }

// ord is the item of ordinal o, which the ring holds (has).
func (r *ring[T]) ord(o uint64) *T { return &r.buf[o&uint64(len(r.buf)-1)] }

// has reports whether the ring holds the item of ordinal o.
func (r *ring[T]) has(o uint64) bool { return o >= r.first && o-r.first < uint64(r.n) }

// push appends v and returns its ordinal and place.
func (r *ring[T]) push(v T) (uint64, *T) {
	if r.n == len(r.buf) {
		r.resize(max(minRingSize, 2*len(r.buf)))
	}
	o := r.first + uint64(r.n)
	p := r.ord(o)
	*p = v
	r.n++
	return o, p
}

// pop drops the oldest.
func (r *ring[T]) pop() {
	r.first++
	r.n--
	switch {
	case r.n == 0:
		r.buf = nil
	case len(r.buf) > minRingSize && r.n*4 <= len(r.buf):
		r.resize(len(r.buf) / 2)
	}
}

func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	for o := r.first; o < r.first+uint64(r.n); o++ {
		buf[o&uint64(size-1)] = *r.ord(o)
	}
	r.buf = buf
}
