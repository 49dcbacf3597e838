package history

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// sinkStream is a Backend that stores nothing and acknowledges each
// message at once, with the next sequence: what the writer itself costs,
// without a stream's own (Memory copies every message; JetStream's client
// and server allocate theirs).
type sinkStream struct {
	mu  sync.Mutex
	seq uint64
}

func (s *sinkStream) Append(_ string, _ []byte, _ string, done func(uint64, bool, error)) {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	done(seq, false, nil)
}

func (s *sinkStream) Read(context.Context, string, []uint64, func(StoredMsg) error) error { return nil }
func (s *sinkStream) Scan(context.Context, []string, uint64, func(string, StoredMsg) error) error {
	return nil
}
func (s *sinkStream) Follow(context.Context, []string, func(string, StoredMsg), func(error)) (uint64, func(), error) {
	return 1, func() {}, nil
}
func (s *sinkStream) FirstSeq(context.Context) (uint64, error) { return 1, nil }
func (s *sinkStream) Ready(context.Context) error              { return nil }

// BenchmarkWriterAppend: what the history writer allocates for each frame
// appended and stored, the stream's own costs aside (sinkStream): 1,000
// pods that each append one frame in turn, the writer synced after each
// round (each batch is then one frame: the many-pods bench's case), and
// one pod that appends bursts of 64 frames (a batch each, or a few). The
// frames' index entries are applied before the timer starts; each stored
// batch tells its index where its entries are. allocs/frame is per frame
// appended, the writer's goroutine's included.
//
//	go test -run '^$' -bench WriterAppend -benchmem ./history/
func BenchmarkWriterAppend(b *testing.B) {
	for _, c := range []struct{ pods, burst int }{{1000, 1000}, {1, 64}} {
		pods := c.pods
		b.Run(fmt.Sprintf("pods=%d/burst=%d", c.pods, c.burst), func(b *testing.B) {
			w := NewWriter(&sinkStream{}, WriterOptions{Node: "n"})
			defer w.Close()
			xs, subjects, frames := make([]*Index, pods), make([]string, pods), make([][]byte, pods)
			metas := make([]envelope.Meta, pods)
			for p := range pods {
				xs[p] = NewIndex(b.N/pods+1, time.Hour)
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
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				p := i % pods
				w.Append(subjects[p], frames[p], xs[p], entries[i], "")
				if i%c.burst == c.burst-1 || i == b.N-1 {
					if err := w.Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/frame")
			for p, x := range xs {
				if x.Len() > 0 {
					if l := x.Locations(x.Newest(1, false, all).Entries); l[0].Seq == 0 {
						b.Fatalf("pod %d: its newest entry is not stored after Sync", p)
					}
				}
			}
		})
	}
}
