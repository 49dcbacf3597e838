package bench

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The bench client shares the machine, and its latencies, with the
// server it measures: a collection of its own in the window would stall
// its readers and add its pause to the server's figures. So --pods turns
// this process's collector off for the window and the drain after it
// (debug.SetGCPercent(-1)), with a memory limit as a guard: should the
// client allocate that much, the runtime collects after all, and the
// collections and pauses it did are reported beside the server's.

// clientGuardMin is the least headroom the client gets over what it holds
// at the start of the window before its collector runs after all.
const clientGuardMin = 1 << 30

// clientGC is what the bench client's own collector did in a window.
type clientGC struct {
	Off         bool          // its collector was off
	Limit       int64         // the memory limit that guarded it, in bytes
	Collections uint64        // collections it did anyway (the guard reached)
	Pauses      uint64        // stop-the-world pauses of its collector
	PauseMax    time.Duration // the longest of them, rounded up to its histogram bucket
	Assist      time.Duration // CPU time its goroutines spent in mark assists
}

var clientGCMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/memory/classes/total:bytes",
}

// clientCollectorOff collects once (what the joins left is not the
// window's), turns this process's collector off with a guard of half the
// memory available (at least clientGuardMin), and returns the function
// that turns it back on and says what it did meanwhile.
func clientCollectorOff() func() clientGC {
	runtime.GC()
	before := readClientGC()
	guard := max(int64(clientGuardMin), memAvailable()/2)
	limit := int64(before[3].Value.Uint64()) + guard
	oldLimit := debug.SetMemoryLimit(limit)
	oldPercent := debug.SetGCPercent(-1)
	return func() clientGC {
		after := readClientGC()
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
		g := clientGC{Off: true, Limit: limit,
			Collections: after[0].Value.Uint64() - before[0].Value.Uint64(),
			Assist:      time.Duration((after[2].Value.Float64() - before[2].Value.Float64()) * float64(time.Second)),
		}
		h0, h1 := before[1].Value.Float64Histogram(), after[1].Value.Float64Histogram()
		for i := range h1.Counts {
			n := h1.Counts[i] - h0.Counts[i]
			if n == 0 {
				continue
			}
			g.Pauses += n
			top := h1.Buckets[i+1]
			if math.IsInf(top, 1) {
				top = h1.Buckets[i]
			}
			g.PauseMax = max(g.PauseMax, time.Duration(top*float64(time.Second)))
		}
		return g
	}
}

func readClientGC() []metrics.Sample {
	s := make([]metrics.Sample, len(clientGCMetrics))
	for i, name := range clientGCMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}
