package limits

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// Rate is one token bucket's settings: Per tokens a second, Burst at most.
type Rate struct {
	Per   float64
	Burst int
}

// NewLimiter builds a limiter that starts full.
func (r Rate) NewLimiter() *rate.Limiter { return rate.NewLimiter(rate.Limit(r.Per), r.Burst) }

// maxRetryAfter bounds the delays Take reports.
const maxRetryAfter = 1000 * time.Hour

// Take takes one token from l at now, or reports how long until one is
// there. A refused take leaves the bucket as it was, even when other
// goroutines use the same bucket at once: the check and the take are one
// step under the limiter's lock (a reservation cancelled afterwards would
// not be: a reservation made in between keeps the cancelled one's token).
func Take(l *rate.Limiter, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.AllowN(now, 1) {
		return true, 0
	}
	per := float64(l.Limit())
	if l.Burst() < 1 || per <= 0 || math.IsNaN(per) {
		return false, time.Second // a bucket that never holds a token
	}
	missing := 1 - l.TokensAt(now)
	wait := math.Ceil(missing / per * float64(time.Second))
	if wait > float64(maxRetryAfter) {
		return false, maxRetryAfter // a very slow rate: do not overflow
	}
	d := time.Duration(wait)
	if d < time.Millisecond {
		d = time.Millisecond // taken by someone else since, or rounding
	}
	return false, d
}

// RateError builds a rate refusal with its retry delay.
func RateError(code wire.Code, retryAfter time.Duration, format string, args ...any) *envelope.Error {
	e := envelope.Errorf(code, format, args...)
	e.RetryAfter = retryAfter
	return e
}

// Buckets are one participant's token buckets.
type Buckets struct {
	Send   *rate.Limiter // every envelope and request it sends
	Create *rate.Limiter // the contexts it opens
	users  int
	left   time.Time
}

// BucketSet holds the buckets of a pod's participants by id. They belong to
// the participant, not the connection: a replacing connection, or one that
// comes back at once, gets the same buckets, so reconnecting never refills
// them. A departed participant's buckets are forgotten once they would be
// full anyway, so memory follows the participants present.
type BucketSet struct {
	mu     sync.Mutex
	send   Rate
	create Rate
	byID   map[string]*Buckets
	// peak is the most entries byID has held since it was made: a Go map
	// keeps the room of its largest size, so the set makes a new one when
	// it has shrunk well below it.
	peak int
}

// shrinkBelow is the size under which a set is not worth rebuilding.
const shrinkBelow = 64

// NewBucketSet makes an empty set.
func NewBucketSet(send, create Rate) *BucketSet {
	return &BucketSet{send: send, create: create, byID: make(map[string]*Buckets)}
}

// BucketKey names a participant's buckets in a pod, the key of Acquire
// and Release: one participant's connections, publishes and MCP sessions
// in a pod share them. Pod names and participant ids hold no "/".
func BucketKey(pod, id string) string { return pod + "/" + id }

// Acquire returns id's buckets for a new connection.
func (s *BucketSet) Acquire(id string) *Buckets {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.byID[id]
	if b == nil {
		b = &Buckets{Send: s.send.NewLimiter(), Create: s.create.NewLimiter()}
		s.byID[id] = b
		s.peak = max(s.peak, len(s.byID))
	}
	b.users++
	return b
}

// Release is called when a connection using id's buckets ends.
func (s *BucketSet) Release(id string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.byID[id]; b != nil {
		b.users--
		b.left = now
		if b.users <= 0 && b.full(now) {
			delete(s.byID, id)
			s.shrink()
		}
	}
}

// Sweep forgets the buckets of departed participants that have refilled.
func (s *BucketSet) Sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.byID {
		if b.users <= 0 && b.full(now) {
			delete(s.byID, id)
		}
	}
	s.shrink()
}

// shrink gives back the room of a map that has emptied out: it copies
// byID once it holds a quarter of its peak, so the copies cost O(1) for
// each entry that left.
func (s *BucketSet) shrink() {
	if s.peak < shrinkBelow || len(s.byID) > s.peak/4 {
		return
	}
	m := make(map[string]*Buckets, len(s.byID))
	for id, b := range s.byID {
		m[id] = b
	}
	s.byID, s.peak = m, len(m)
}

// Len is the number of participants with buckets.
func (s *BucketSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func (b *Buckets) full(now time.Time) bool {
	return b.Send.TokensAt(now) >= float64(b.Send.Burst()) && b.Create.TokensAt(now) >= float64(b.Create.Burst())
}
