package history

import (
	"testing"
	"time"
)

// TestAckWaitFollowsALateStream: an answer that comes after the writer
// gave up on it doubles the wait, once for what was given up on before
// it grew (so that a round of late answers does not double it again and
// again), again for what was given up on under the grown wait, up to
// maxAckWait; quick answers meanwhile do not shrink it; answers well
// within the wait, once none has come late for ackCalm, bring it back to
// Config.AckWait, never below.
func TestAckWaitFollowsALateStream(t *testing.T) {
	s := &Stream{cfg: Config{AckWait: AckWait}, ackWait: AckWait}
	s.token, s.gaveUp = 10, 6 // tokens 1 to 6 were given up on

	s.adaptWait(3, false, time.Time{})
	if s.ackWait != 2*AckWait {
		t.Fatalf("after a late answer the wait is %v, want %v", s.ackWait, 2*AckWait)
	}
	// Sent before the wait grew, given up on after it, under the grown
	// wait, and answered later still: the wait grows again (before, it
	// did not, and the writer gave the same messages up every 8 s).
	s.gaveUp = 9
	s.adaptWait(8, false, time.Time{})
	if s.ackWait != 4*AckWait {
		t.Fatalf("a late answer to a message given up on under the grown wait left it at %v, want %v", s.ackWait, 4*AckWait)
	}
	s.ackWait, s.grownGaveUp, s.gaveUp = 2*AckWait, 6, 6
	s.adaptWait(4, false, time.Time{}) // sent before it grew: no second doubling
	s.adaptWait(6, false, time.Time{})
	if s.ackWait != 2*AckWait {
		t.Fatalf("late answers of one round grew the wait to %v, want %v", s.ackWait, 2*AckWait)
	}
	s.adaptWait(9, false, time.Time{}) // not given up on (failed another way): no change
	if s.ackWait != 2*AckWait {
		t.Fatalf("an answer to a message not given up on changed the wait to %v", s.ackWait)
	}

	for round := uint64(1); round <= 10; round++ { // late, round after round
		s.token += 10
		s.gaveUp = s.token - 1
		s.adaptWait(s.token-1, false, time.Time{})
	}
	if s.ackWait != maxAckWait {
		t.Fatalf("after many late rounds the wait is %v, want the bound %v", s.ackWait, maxAckWait)
	}

	s.adaptWait(s.token, true, time.Now().Add(-maxAckWait/2)) // in time, but not well within
	if s.ackWait != maxAckWait {
		t.Fatalf("an answer after half the wait shrank it to %v", s.ackWait)
	}
	for range 100 {
		s.adaptWait(s.token, true, time.Now())
	}
	if s.ackWait != maxAckWait {
		t.Fatalf("quick answers just after a late one shrank the wait to %v", s.ackWait)
	}
	s.lateAt = time.Now().Add(-ackCalm - time.Second) // calm since
	for range 100 {
		s.adaptWait(s.token, true, time.Now())
	}
	if s.ackWait != AckWait {
		t.Fatalf("after many quick answers the wait is %v, want %v", s.ackWait, AckWait)
	}

	own := &Stream{} // the gateway's own stream waits as long as it takes
	own.gaveUp, own.token = 5, 5
	own.adaptWait(1, false, time.Time{})
	if own.ackWait != 0 {
		t.Fatalf("a stream without an acknowledgement wait got one: %v", own.ackWait)
	}
}
