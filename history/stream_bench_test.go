package history

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/envelope"
)

// BenchmarkWriterStream: what storing a frame costs the gateway's process
// with the real stream, as a gateway with history on runs it (issue 39):
// the writer, nats.go and the embedded JetStream (its file store, written
// asynchronously, as the temporary store is), all in this process. pods
// pods append one 256 B frame each in turn, every pod's frames to its own
// subject with its index entry, as a single node does; paced appends them
// at a rate (a gateway at 6,000 pods of 3 stores 6,000 a second, a frame
// at a time as its readers accept them), flat appends as fast as the
// writer takes them. cpu-µs/frame is the process's CPU time (every
// goroutine: the writer's, NATS's client and server) over the frames,
// allocs/frame its allocations, GCs/kframe its collections a thousand
// frames.
//
//	go test -run '^$' -bench WriterStream -benchtime 12000x ./history/
func BenchmarkWriterStream(b *testing.B) {
	for _, c := range []struct {
		name string
		pods int
		rate int // frames a second, 0: flat out
	}{
		{"pods=6000/paced=6000", 6000, 6000},
		{"pods=100/paced=6000", 100, 6000},
		{"pods=6000/flat", 6000, 0},
		{"pods=1000/flat", 1000, 0},
	} {
		b.Run(c.name, func(b *testing.B) { benchWriterStream(b, c.pods, c.rate) })
	}
}

func benchWriterStream(b *testing.B, pods, rate int) {
	s := openBenchStream(b)
	w := NewWriter(s, WriterOptions{Node: "n"})
	defer w.Close()
	xs, subjects, frames := make([]*Index, pods), make([]string, pods), make([][]byte, pods)
	metas := make([]envelope.Meta, pods)
	for p := range pods {
		xs[p] = NewIndex(1000, time.Hour)
		subjects[p] = fmt.Sprintf("mcpp.pod.p%d", p)
		metas[p] = envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "alice", ID: fmt.Sprintf("p%d", p)}
		frames[p] = envelope.Frame(&metas[p], make([]byte, 256))
	}
	entries := make([]*Entry, b.N)
	at := time.Now().UnixNano()
	for i := range b.N {
		p := i % pods
		entries[i] = xs[p].Apply(uint64(i/pods+1), at, frames[p], &metas[p], 256, 64, Loc{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Every pod's subject once, so that the stream knows them all, as a
	// gateway's does once its pods have spoken.
	for p := range pods {
		w.Append(subjects[p], frames[p], nil, nil, "")
	}
	if err := w.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	const tick = time.Millisecond
	for i := 0; i < b.N; {
		n := b.N - i
		if rate > 0 {
			// As many as are due by now: a gateway's readers append as
			// their envelopes come.
			due := int(time.Since(start) * time.Duration(rate) / time.Second)
			if due <= i {
				time.Sleep(tick)
				continue
			}
			n = min(n, due-i)
		}
		for range n {
			p := i % pods
			w.Append(subjects[p], frames[p], xs[p], entries[i], "")
			i++
		}
	}
	if err := w.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/frame")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/frame")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "B/frame")
	b.ReportMetric(float64(after.NumGC-before.NumGC)*1000/float64(b.N), "GCs/kframe")
	for p, x := range xs {
		if x.Len() > 0 {
			if l := x.Locations(x.Newest(1, false, all).Entries); l[0].Seq == 0 {
				b.Fatalf("pod %d: its newest entry is not stored after Sync", p)
			}
		}
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openBenchStream is openStream with the gateway's default store: files
// in a temporary directory, written asynchronously.
func openBenchStream(b *testing.B) *Stream {
	dir := b.TempDir()
	ns, err := server.NewServer(&server.Options{
		ServerName: "history-bench", DontListen: true, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir, JetStreamMaxMemory: 512 << 20, JetStreamMaxStore: 1 << 30, MaxPending: 1 << 30,
	})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("NATS not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, nc, Config{Subjects: []string{"mcpp.pod.>"}, Entries: 1000, MaxAge: 24 * time.Hour,
		MaxBytes: 256 << 20, MaxMsgSize: 4 << 20, File: true, Temporary: true, Own: true}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close()
		nc.Close()
		ns.Shutdown()
	})
	return s
}
