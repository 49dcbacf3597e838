package bridge

import (
	"math/rand/v2"
	"time"
)

// backoff is the wait before each restart of the MCP server: MinDelay,
// then twice as long after each failure in a row, up to MaxDelay, each
// wait drawn between half of it and all of it (jitter), so that bridges
// whose servers share a failing dependency do not all retry at once.
type backoff struct {
	min, max time.Duration
	next     time.Duration // the wait before the next attempt, before jitter
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, next: min}
}

// delay returns the wait before the next attempt and doubles the one
// after it.
func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// reset starts again from MinDelay: the server ran long enough that its
// next failure is a new one, not the same one again.
func (b *backoff) reset() { b.next = b.min }
