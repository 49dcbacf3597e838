package participant

import "sync"

// Queue is a FIFO of messages waiting for the writer, bounded in number
// and in bytes (so that one reader that stops cannot pin its queue's worth
// of the largest envelopes). Its ring grows on demand up to its limit, so
// an idle connection holds almost nothing.
type Queue struct {
	mu         sync.Mutex
	ring       [][]byte
	head       int
	n          int
	bytes      int
	limit      int
	limitBytes int
	closed     bool
	// draining refuses what the fan-out delivers but not the gateway's
	// answers to the participant, until closed.
	draining bool
	// ready holds a token while the queue may have something the writer
	// has not been told of (signal); the writer waits on it.
	ready chan struct{}
}

// init makes q a queue of at most limit messages and limitBytes bytes
// (0: no byte bound). A Queue is a participant's, in it (not one object
// more a connection); it is never copied.
func (q *Queue) init(limit, limitBytes int) {
	q.limit, q.limitBytes, q.ready = limit, limitBytes, make(chan struct{}, 1)
}

// Push appends b. It reports false when the queue is full (in number, or
// in bytes: one message is always let in, whatever its size) or closed, or
// draining and b is not an answer; the caller then cuts the participant
// (unless it is closing anyway).
func (q *Queue) Push(b []byte, answer bool) bool {
	q.mu.Lock()
	if q.closed || (q.draining && !answer) || q.n >= q.limit || (q.limitBytes > 0 && q.n > 0 && q.bytes+len(b) > q.limitBytes) {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)%len(q.ring)] = b
	q.n++
	q.bytes += len(b)
	q.mu.Unlock()
	return true
}

// signal tells a waiting writer that the queue may be non-empty.
func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// minRing is the smallest ring a queue holds.
const minRing = 8

func (q *Queue) grow() {
	size := 2 * len(q.ring)
	if size < minRing {
		size = minRing
	}
	if size > q.limit {
		size = q.limit
	}
	ring := make([][]byte, size)
	for i := 0; i < q.n; i++ {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// PopUpTo moves at most max messages to dst, oldest first, and stops
// before the one that would bring their size over maxBytes (it always moves
// one when there is one).
func (q *Queue) PopUpTo(dst [][]byte, max, maxBytes int) [][]byte {
	q.mu.Lock()
	size := 0
	for q.n > 0 && max > 0 {
		b := q.ring[q.head]
		if size += len(b); size > maxBytes && len(dst) > 0 {
			break
		}
		dst = append(dst, b)
		q.ring[q.head] = nil
		q.head = (q.head + 1) % len(q.ring)
		q.n--
		q.bytes -= len(b)
		max--
	}
	// The ring stays while the connection is busy (dropping it after each
	// burst made the next one grow it again, five allocations a burst);
	// the writer gives it back when it goes idle (compact).
	q.mu.Unlock()
	return dst
}

// compact gives the ring back when the queue is empty; the writer calls it
// when it goes idle.
func (q *Queue) compact() {
	q.mu.Lock()
	if q.n == 0 {
		q.ring, q.head = nil, 0
	}
	q.mu.Unlock()
}

// shrink gives back a ring that a burst grew, once the queue is empty;
// the smallest ring stays, so that a connection that is sent one
// envelope at a time does not allocate one for each. Watch calls it once
// the connection was not written to since the previous Watch: a
// connection written from its senders' goroutines (writeNow) has no
// writer that goes idle, and one that is sent bursts keeps its ring
// while they come.
func (q *Queue) shrink() {
	q.mu.Lock()
	if q.n == 0 && len(q.ring) > minRing {
		q.ring, q.head = nil, 0
	}
	q.mu.Unlock()
}

// Len is the number of messages waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Size is the number of messages waiting and their bytes.
func (q *Queue) Size() (n, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.bytes
}

// Drain refuses further pushes but answers; what is queued can still be
// popped.
func (q *Queue) Drain() {
	q.mu.Lock()
	q.draining = true
	q.mu.Unlock()
}

// Close refuses further pushes; what is queued can still be popped.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
