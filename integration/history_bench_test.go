package integration

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	mcpp "github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// benchGateway is an in-process gateway for the history benchmarks, with
// the limits opened wide so that they measure history, not rates.
func benchGateway(b *testing.B) string {
	b.Helper()
	return harness.StartGateway(b, func(cfg *gateway.Config) {
		cfg.History = 1000
		cfg.Rate, cfg.Burst = 1e6, 1000000
		cfg.SendQueue = 1 << 14
	}).WS
}

// benchDial joins pod with query and returns the connection, its welcome
// read.
func benchDial(b *testing.B, ws, pod, query string) *mcpp.Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mcpp.DialConn(ctx, ws+"?"+query, mcpp.Options{Pod: pod})
	if err != nil {
		b.Fatal(err)
	}
	if w, err := c.Read(ctx, nil); err != nil || !strings.Contains(string(w), `"system/welcome"`) {
		b.Fatalf("welcome: %v %.100s", err, w)
	}
	return c
}

// benchFill sends n envelopes of about 256 bytes to pod, ids ID-0…, and
// waits until a reader has them all (so that they are in the history).
func benchFill(b *testing.B, ws, pod string, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reader := benchDial(b, ws, pod, "participant=reader")
	defer reader.CloseNow()
	sender := benchDial(b, ws, pod, "participant=sender&main=0&contexts=none&routing=directed")
	defer sender.CloseNow()
	pad := strings.Repeat("x", 256-len(`{"id":"ID-0000","kind":"chat","payload":{"text":""}}`))
	go func() {
		for i := 0; i < n; i++ {
			msg := fmt.Sprintf(`{"id":"ID-%04d","kind":"chat","payload":{"text":"%s"}}`, i, pad)
			if err := sender.Write(ctx, []byte(msg)); err != nil {
				return
			}
		}
	}()
	for got := 0; got < n; {
		m, err := reader.Read(ctx, nil)
		if err != nil {
			b.Fatalf("filling: %v after %d", err, got)
		}
		if strings.Contains(string(m), `"kind":"chat"`) {
			got++
		}
	}
}

// readN reads c until it has n envelopes of kind chat.
func readN(b *testing.B, c *mcpp.Conn, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		m, err := c.Read(ctx, nil)
		if err != nil {
			b.Fatalf("read %d of %d: %v", got, n, err)
		}
		got += strings.Count(string(m), `"kind":"chat"`)
	}
}

// BenchmarkHistoryReplay1000 is the time for a joiner to get a pod's
// 1,000 envelopes of 256 B (history=1000): upgrade, welcome and replay, as
// the joiner reads them. BENCHMARKS.md, goal under 50 ms.
func BenchmarkHistoryReplay1000(b *testing.B) {
	ws := benchGateway(b)
	benchFill(b, ws, "replay", 1000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := benchDial(b, ws, "replay", fmt.Sprintf("participant=joiner-%d&history=1000", i))
		readN(b, c, 1000)
		_ = c.CloseNow()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/replay")
}

// BenchmarkHistoryResume100 is the time for a participant to resume after
// its last 100 envelopes (resume=ID): upgrade, welcome and the 100.
func BenchmarkHistoryResume100(b *testing.B) {
	ws := benchGateway(b)
	benchFill(b, ws, "resume", 1000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := benchDial(b, ws, "resume", fmt.Sprintf("participant=back-%d&resume=ID-0899", i))
		readN(b, c, 100)
		_ = c.CloseNow()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/resume")
}

// BenchmarkHistoryMemory is the memory that 1,000 stored envelopes of 256 B
// cost the gateway (the in-memory stream and the index): the live heap of
// the process before and after 10 pods of 1,000 each, per 1,000.
//
// Each store of --history-store is measured: the history in JetStream's
// files (the default) and in its memory store, the Go heap. The
// collector's work is the heap's objects: objects/1000-envelopes counts
// them.
func BenchmarkHistoryMemory(b *testing.B) {
	for _, store := range []string{gateway.HistoryStoreFile, gateway.HistoryStoreMemory} {
		b.Run(store, func(b *testing.B) {
			for b.Loop() {
				ws := harness.StartGateway(b, func(cfg *gateway.Config) {
					cfg.History = 1000
					cfg.Rate, cfg.Burst = 1e6, 1000000
					cfg.SendQueue = 1 << 14
					cfg.HistoryStore = store
				}).WS
				benchFill(b, ws, "warm", 10) // one-off allocations before the baseline
				before, objects := liveHeap(), liveObjects()
				for p := 0; p < 10; p++ {
					benchFill(b, ws, fmt.Sprintf("mem-%d", p), 1000)
				}
				after := liveHeap()
				b.ReportMetric(float64(after-before)/10/1024, "KiB/1000-envelopes")
				b.ReportMetric(float64(liveObjects()-objects)/10, "objects/1000-envelopes")
				runtime.KeepAlive(ws)
			}
		})
	}
}

// liveObjects is the count of the heap's objects after two collections.
func liveObjects() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
