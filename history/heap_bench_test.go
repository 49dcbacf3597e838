package history

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// What a pod's history index costs the Go heap and its collector, entry
// by entry (issue 32): the objects and bytes a stored entry holds, and
// the wall time of a collection with many pods' indexes live. Run them
// with -benchtime=1x (each iteration builds every index anew):
//
//	go test -run '^$' -bench 'IndexHeap|IndexGC' -benchtime=1x -count 3 ./history/

// heapFrames are the frames of one pod as a gateway stores them: an
// envelope id of a UUID's length, a sender, the node's sequence, the
// protocol's span; one in five in a context, which one in four of those
// concludes (its event follows), one in ten transient, consumed by the
// next.
func heapFrames(pod, n int) (frames [][]byte, metas []envelope.Meta, sizes []int) {
	for i := 0; len(frames) < n; i++ {
		m := envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "node-a", From: fmt.Sprintf("agent-%02d", i%3),
			Seq: uint64(pod*n + i + 1), ID: fmt.Sprintf("%08x-5d4b-4c1e-9a7f-%012x", pod, i), Protocol: envelope.Span{Start: 12, End: 23}}
		if i%5 == 0 {
			m.ContextID, m.ContextType = fmt.Sprintf("task-%d", i/20), "reasoning"
		}
		if i%10 == 1 {
			m.Flags |= envelope.FlagTransient
		}
		if i%10 == 2 {
			m.Consumes = []string{fmt.Sprintf("%08x-5d4b-4c1e-9a7f-%012x", pod, i-1)}
		}
		body := envelopeJSON(&m, 300)
		frames, metas, sizes = append(frames, envelope.Frame(&m, body)), append(metas, m), append(sizes, len(body))
		if i%20 == 15 {
			ev := envelope.Meta{Kind: envelope.FrameContextEvent, Origin: "node-a", From: wire.GatewayID,
				ID: fmt.Sprintf("ev-%08x-%d", pod, i), ContextID: fmt.Sprintf("task-%d", i/20), ContextType: "reasoning", Flags: envelope.FlagConclusion}
			evBody := envelopeJSON(&ev, 200)
			frames, metas, sizes = append(frames, envelope.Frame(&ev, evBody)), append(metas, ev), append(sizes, len(evBody))
		}
	}
	return frames[:n], metas[:n], sizes[:n]
}

// fillIndexes applies each pod's frames to an index of its own, as a
// node does, each one stored at once (its location known), so that the
// index holds what it holds in the steady state: headers, not frames.
func fillIndexes(pods, entries int, frames [][][]byte, metas [][]envelope.Meta, sizes [][]int) []*Index {
	xs := make([]*Index, pods)
	at := time.Now().UnixNano()
	for p := range xs {
		xs[p] = NewIndex(entries, time.Hour)
	}
	for i := range entries {
		for p, x := range xs {
			pos := uint64(i + 1)
			x.Apply(pos, at, frames[p][i], &metas[p][i], sizes[p][i], 0, Loc{Seq: uint64(p*entries+i) + 1})
		}
	}
	return xs
}

func heapInput(pods, entries int) ([][][]byte, [][]envelope.Meta, [][]int) {
	frames, metas, sizes := make([][][]byte, pods), make([][]envelope.Meta, pods), make([][]int, pods)
	for p := range pods {
		frames[p], metas[p], sizes[p] = heapFrames(p, entries)
	}
	return frames, metas, sizes
}

func liveHeap() (objects, bytes uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapObjects, ms.HeapAlloc
}

// BenchmarkIndexHeap: the heap objects and bytes that 10 pods of 1,000
// stored entries each hold, per entry (HeapObjects and HeapAlloc after a
// collection, before and after the indexes are filled).
func BenchmarkIndexHeap(b *testing.B) {
	const pods, entries = 10, 1000
	frames, metas, sizes := heapInput(pods, entries)
	var objs, bytes float64
	for b.Loop() {
		o0, b0 := liveHeap()
		xs := fillIndexes(pods, entries, frames, metas, sizes)
		o1, b1 := liveHeap()
		runtime.KeepAlive(xs)
		objs += float64(int64(o1-o0)) / (pods * entries)
		bytes += float64(int64(b1-b0)) / (pods * entries)
	}
	b.ReportMetric(objs/float64(b.N), "objects/entry")
	b.ReportMetric(bytes/float64(b.N), "B/entry")
}

// BenchmarkIndexGC: the wall time of a collection (runtime.GC, whose
// mark is most of it) with 2,000 pods of 100 stored entries each live,
// about as many entries as 6,000 pods held 40 s into the many-pods
// bench, against the same collection with the indexes gone (mark-ns is
// the difference).
func BenchmarkIndexGC(b *testing.B) {
	const pods, entries = 2000, 100
	frames, metas, sizes := heapInput(pods, entries)
	xs := fillIndexes(pods, entries, frames, metas, sizes)
	frames, metas, sizes = nil, nil, nil
	gc := func() time.Duration {
		runtime.GC()
		const rounds = 10
		start := time.Now()
		for range rounds {
			runtime.GC()
		}
		return time.Since(start) / rounds
	}
	var with, without time.Duration
	for b.Loop() {
		with = gc()
	}
	runtime.KeepAlive(xs)
	xs = nil
	without = gc()
	b.ReportMetric(float64(with.Nanoseconds()), "gc-ns")
	b.ReportMetric(float64((with - without).Nanoseconds()), "mark-ns")
}
