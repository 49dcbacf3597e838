package limits

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/envelope"
)

// Rate is one token bucket's settings: Per tokens a second, Burst at most.
type Rate struct {
	Per   float64
	Burst int
}

// NewLimiter builds a limiter that starts full.
func (r Rate) NewLimiter() *rate.Limiter { return rate.NewLimiter(rate.Limit(r.Per), r.Burst) }

// Take takes one token from l at now, or reports how long until one is
// there. A refused take leaves the bucket as it was.
func Take(l *rate.Limiter, now time.Time) (ok bool, retryAfter time.Duration) {
	res := l.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second // a zero burst never refills
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		if d < time.Millisecond {
			d = time.Millisecond
		}
		return false, d
	}
	return true, 0
}

// RateError builds a rate refusal with its retry delay.
func RateError(code envelope.Code, retryAfter time.Duration, format string, args ...any) *envelope.Error {
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
}

// NewBucketSet makes an empty set.
func NewBucketSet(send, create Rate) *BucketSet {
	return &BucketSet{send: send, create: create, byID: make(map[string]*Buckets)}
}

// Acquire returns id's buckets for a new connection.
func (s *BucketSet) Acquire(id string) *Buckets {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.byID[id]
	if b == nil {
		b = &Buckets{Send: s.send.NewLimiter(), Create: s.create.NewLimiter()}
		s.byID[id] = b
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
