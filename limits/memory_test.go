package limits

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fakeClock is a RegistryConfig.Now that only moves when told.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) time.Time {
	return time.Unix(0, c.ns.Add(int64(d)))
}

// heapSlack is how far above its start the live heap may end after the
// contexts are gone: what the runtime and the test keep for themselves,
// never the hundreds of bytes a context costs times 100,000 (the peak is
// tens of MiB).
const heapSlack = 512 << 10

func checkHeap(t *testing.T, what string, before, peak, after uint64) {
	t.Helper()
	t.Logf("%s: heap before %d KiB, at the peak %d KiB, after %d KiB (%+d KiB)",
		what, before>>10, peak>>10, after>>10, (int64(after)-int64(before))/1024)
	if peak < before+8<<20 {
		t.Fatalf("%s: the peak (%d KiB) is not well above the start (%d KiB): the test measures nothing", what, peak>>10, before>>10)
	}
	if after > before+heapSlack {
		t.Errorf("%s: the heap ends %d KiB above its start, more than %d KiB: memory of what is gone is kept",
			what, (after-before)>>10, heapSlack>>10)
	}
}

const memContexts = 100_000

// TestBucketSetMemory: 100,000 participants come, send, and go; once their
// buckets have refilled the set forgets them and the heap comes back.
func TestBucketSetMemory(t *testing.T) {
	s := NewBucketSet(Rate{Per: 10, Burst: 10}, Rate{Per: 1, Burst: 2})
	t0 := time.Unix(1_000_000, 0)
	before := heapAlloc()
	for i := 0; i < memContexts; i++ {
		id := "participant-" + strconv.Itoa(i)
		b := s.Acquire(id)
		Take(b.Send, t0)
		s.Release(id, t0)
	}
	if n := s.Len(); n != memContexts {
		t.Fatalf("%d participants with buckets, want %d: a departed participant with a drained bucket must keep it", s.Len(), memContexts)
	}
	peak := heapAlloc()
	s.Sweep(t0.Add(50 * time.Millisecond))
	if n := s.Len(); n != memContexts {
		t.Fatalf("%d participants with buckets after 50ms, want %d: the buckets have not refilled yet", n, memContexts)
	}
	s.Sweep(t0.Add(time.Second))
	if n := s.Len(); n != 0 {
		t.Fatalf("%d participants with buckets after they refilled, want 0", n)
	}
	after := heapAlloc()
	checkHeap(t, "100,000 departed participants", before, peak, after)
	runtime.KeepAlive(s)
}
