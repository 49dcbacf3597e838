package contexts

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
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

// fakeClock is a Config.Now that only moves when told.
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

// TestRegistryMemorySpike opens 100,000 contexts at once (roots with a
// child each, from 1,000 creators), lets them all time out, then passes
// the retention: the heap must come back to where it started.
func TestRegistryMemorySpike(t *testing.T) {
	clock := newFakeClock()
	var events atomic.Int64
	r := NewRegistry(Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: 5 * time.Minute, ContextRetention: 10 * time.Minute,
			MaxContextsPerParticipant: memContexts, MaxContextsPerPod: memContexts,
			ContextRate: 50, ContextBurst: 100,
			ConclusionKinds: "conclusion",
		},
		Now: clock.Now,
	}, func(cs []Concluded) { events.Add(int64(len(cs))) })
	defer r.Close()
	var acc Accepted
	commit := func(*Accepted) {}
	before := heapAlloc()

	for i := 0; i < memContexts; i++ {
		id := "ctx-" + strconv.Itoa(i)
		c := envelope.Context{ID: id, Type: "reasoning"}
		if i%2 == 1 {
			c.Parent = "ctx-" + strconv.Itoa(i-1)
		}
		req := Request{Context: c, Kind: "chat", Sender: "p" + strconv.Itoa(i%1000), Size: 100, Now: clock.Advance(time.Microsecond)}
		if e := r.Accept(&req, &acc, commit); e != nil {
			t.Fatalf("context %d: %v", i, e)
		}
	}
	acc = Accepted{}
	if a, _ := r.Counts(); a != memContexts {
		t.Fatalf("%d active contexts, want %d", a, memContexts)
	}
	peak := heapAlloc()

	r.Expire(clock.Advance(5*time.Minute + time.Second))
	if a, k := r.Counts(); a != 0 || k != memContexts {
		t.Fatalf("after the timeout: %d active, %d retained; want 0 and %d", a, k, memContexts)
	}
	if n := events.Load(); n != memContexts {
		t.Fatalf("%d contexts reported concluded, want %d", n, memContexts)
	}
	r.Expire(clock.Advance(10*time.Minute + time.Second))
	if a, k := r.Counts(); a != 0 || k != 0 || !r.Empty() {
		t.Fatalf("after the retention: %d active, %d retained, empty %v", a, k, r.Empty())
	}
	after := heapAlloc()
	checkHeap(t, "100,000 contexts at once", before, peak, after)
	runtime.KeepAlive(r)
}

// TestRegistryMemoryChurn opens and concludes 100,000 contexts one after
// the other with the default caps (a conclusion kind ends each), then
// passes the retention.
func TestRegistryMemoryChurn(t *testing.T) {
	clock := newFakeClock()
	r := NewRegistry(Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: 5 * time.Minute, ContextRetention: 10 * time.Minute,
			MaxContextsPerParticipant: 256, MaxContextsPerPod: 10000,
			ContextRate: 50, ContextBurst: 100,
			ConclusionKinds: "conclusion",
		},
		Now: clock.Now,
	}, nil)
	defer r.Close()
	var acc Accepted
	concluded := 0
	commit := func(a *Accepted) { concluded += len(a.Concluded) }
	before := heapAlloc()
	var peak uint64

	for i := 0; i < memContexts; i++ {
		id := "churn/" + strconv.Itoa(i)
		c := envelope.Context{ID: id, Parent: "churn", Path: true, Segments: 2}
		sender := "p" + strconv.Itoa(i%100)
		req := Request{Context: c, Kind: "chat", Sender: sender, Size: 100, Now: clock.Advance(time.Microsecond)}
		if e := r.Accept(&req, &acc, commit); e != nil {
			t.Fatalf("context %d: %v", i, e)
		}
		req = Request{Context: c, Kind: "conclusion", Sender: sender, Size: 100, Now: clock.Advance(time.Microsecond)}
		if e := r.Accept(&req, &acc, commit); e != nil {
			t.Fatalf("concluding context %d: %v", i, e)
		}
		if i == memContexts/2 {
			peak = heapAlloc()
		}
	}
	acc = Accepted{}
	if concluded != memContexts {
		t.Fatalf("%d contexts concluded, want %d", concluded, memContexts)
	}
	if a, k := r.Counts(); a != 0 || k > 10000 {
		t.Fatalf("%d active, %d retained: the retained ones must stay within --max-contexts-per-pod", a, k)
	}
	r.Expire(clock.Advance(10*time.Minute + time.Second))
	if a, k := r.Counts(); a != 0 || k != 0 || !r.Empty() {
		t.Fatalf("after the retention: %d active, %d retained, empty %v", a, k, r.Empty())
	}
	after := heapAlloc()
	t.Logf("churn: heap before %d KiB, half way %d KiB, after %d KiB (%+d KiB)", before>>10, peak>>10, after>>10, (int64(after)-int64(before))/1024)
	if after > before+heapSlack {
		t.Errorf("churn: the heap ends %d KiB above its start, more than %d KiB", (after-before)>>10, heapSlack>>10)
	}
	runtime.KeepAlive(r)
}
