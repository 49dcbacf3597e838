package pod

import (
	"testing"
	"time"
)

// TestLiveBodiesKept: a node keeps the body of its live frame until the
// stream has stored its marker and liveRetain has passed, so that a node
// whose follower is behind can still ask for it; past liveRetainBytes the
// oldest go first.
func TestLiveBodiesKept(t *testing.T) {
	stored := uint64(0)
	s := newLiveBodies(func(mark uint64) bool { return mark <= stored })
	now := time.Unix(1000, 0)
	s.keep(1, []byte("one"), now)
	s.appended(1, 1)
	s.keep(2, []byte("two"), now)
	s.appended(2, 2)
	s.evict(now.Add(time.Hour))
	if s.get(1) == nil || s.get(2) == nil {
		t.Fatal("a body whose marker the stream has not stored was dropped")
	}
	stored = 1
	s.evict(now.Add(time.Hour)) // marker 1 stored now
	s.evict(now.Add(time.Hour + liveRetain - time.Second))
	if s.get(1) == nil {
		t.Fatal("a body was dropped before liveRetain passed")
	}
	s.evict(now.Add(time.Hour + liveRetain))
	if s.get(1) != nil || s.get(2) == nil {
		t.Fatalf("after liveRetain: %q %q, want only two", s.get(1), s.get(2))
	}
	// Bodies stored together go together, not one liveRetain after
	// another.
	later := now.Add(2 * time.Hour)
	for seq := uint64(5); seq < 8; seq++ {
		s.keep(seq, []byte("x"), later)
		s.appended(seq, seq)
	}
	stored = 7
	s.evict(later)
	s.evict(later.Add(liveRetain))
	if s.get(2) != nil || s.get(5) != nil || s.get(7) != nil {
		t.Fatal("bodies stored at once did not go at once, liveRetain after")
	}
	big := make([]byte, liveRetainBytes/2+1)
	s.keep(3, big, now)
	s.keep(4, big, now)
	if s.get(3) != nil || s.get(4) == nil {
		t.Fatal("past liveRetainBytes the oldest do not go first")
	}
}
