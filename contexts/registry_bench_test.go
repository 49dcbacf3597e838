package contexts

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
)

// benchRegistry is a registry whose caps and rates stay out of the way.
func benchRegistry(n int) *Registry {
	return NewRegistry(Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: time.Hour, ContextRetention: time.Hour,
			MaxContextsPerParticipant: n, MaxContextsPerPod: n,
			ContextRate: 1e9, ContextBurst: 1 << 30,
			ConclusionKinds: "conclusion",
		},
	}, nil)
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkRegistryBytesPerContext reports the heap a registry holds per
// active context, with 100,000 active contexts (a third of them children of
// another, from 100 creators, each with a type), envelope ids included.
func BenchmarkRegistryBytesPerContext(b *testing.B) {
	const n = 100_000
	b.ReportAllocs()
	var perContext float64
	for it := 0; it < b.N; it++ {
		b.StopTimer()
		before := liveHeap()
		b.StartTimer()
		r := benchRegistry(n)
		var acc Accepted
		commit := func(*Accepted) {}
		now := time.Now()
		for i := 0; i < n; i++ {
			c := envelope.Context{ID: "ctx-" + strconv.Itoa(i), Type: "reasoning"}
			if i%3 == 2 {
				c.Parent = "ctx-" + strconv.Itoa(i-1)
			}
			req := Request{Context: c, Kind: "chat", Sender: "participant-" + strconv.Itoa(i%100), Size: 200, Now: now}
			if e := r.Accept(&req, &acc, commit); e != nil {
				b.Fatal(e)
			}
		}
		b.StopTimer()
		acc = Accepted{}
		if a, _ := r.Counts(); a != n {
			b.Fatalf("%d active contexts, want %d", a, n)
		}
		after := liveHeap()
		perContext = float64(after-before) / n
		runtime.KeepAlive(r)
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(perContext, "B/context")
}

// BenchmarkRegistryEnvelopeInExistingContext is the registry's cost for
// one envelope in a context that exists: what every envelope in a context
// pays at ingress, with a commit that does nothing.
func BenchmarkRegistryEnvelopeInExistingContext(b *testing.B) {
	for _, tc := range []struct {
		name string
		ctx  envelope.Context
	}{
		{"root", envelope.Context{ID: "reason-789", Type: "reasoning"}},
		{"depth3", envelope.Context{ID: "c3", Parent: "c2"}},
		{"path3", envelope.Context{ID: "a/b/c", Parent: "a/b", Path: true, Segments: 3}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := benchRegistry(1000)
			defer r.Close()
			var acc Accepted
			commit := func(*Accepted) {}
			now := time.Now()
			for _, c := range []envelope.Context{{ID: "c1"}, {ID: "c2", Parent: "c1"}, tc.ctx} {
				req := Request{Context: c, Kind: "chat", Sender: "alice", Size: 200, Now: now}
				if e := r.Accept(&req, &acc, commit); e != nil {
					b.Fatal(e)
				}
			}
			req := Request{Context: tc.ctx, Kind: "chat", Sender: "alice", Size: 200}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req.Now = now.Add(time.Duration(i) * time.Microsecond)
				if e := r.Accept(&req, &acc, commit); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// TestRegistryEnvelopeInExistingContextAllocs holds the hot path to no
// allocation: an envelope in an existing context (sent by one of its
// senders) allocates nothing in the registry.
func TestRegistryEnvelopeInExistingContextAllocs(t *testing.T) {
	r := benchRegistry(1000)
	defer r.Close()
	var acc Accepted
	commit := func(*Accepted) {}
	now := time.Now()
	for _, c := range []envelope.Context{{ID: "c1"}, {ID: "c2", Parent: "c1"}, {ID: "c3", Parent: "c2", Type: "t"}} {
		req := Request{Context: c, Kind: "chat", Sender: "alice", Size: 200, Now: now}
		if e := r.Accept(&req, &acc, commit); e != nil {
			t.Fatal(e)
		}
	}
	req := Request{Context: envelope.Context{ID: "c3"}, Kind: "chat", Sender: "alice", Size: 200, Now: now}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		req.Now = now.Add(time.Duration(i) * time.Microsecond)
		if e := r.Accept(&req, &acc, commit); e != nil {
			t.Fatal(e)
		}
	})
	if allocs != 0 {
		t.Fatalf("an envelope in an existing context allocates %v times in the registry, want 0", allocs)
	}
}
