package history

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkWriterCluster is the writer across a network: a stream
// replicated on three embedded NATS servers of one cluster, frames of 256
// bytes appended to one pod or spread over 100, until all are stored (the
// cost of sending a pod's next message only once its previous one is
// stored, against the pipeline before it: run it on both commits).
func BenchmarkWriterCluster(b *testing.B) {
	nc := benchClusterConn(b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var s *Stream
	for {
		var err error
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second) // one try, while the cluster elects its leaders
		s, err = Open(octx, nc, Config{Subjects: []string{"mcpp.pod.>"}, Entries: 100000, MaxAge: time.Hour,
			MaxBytes: 256 << 20, MaxMsgSize: 4 << 20, Replicas: 3, AckWait: AckWait}, "bench")
		ocancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer s.Close()
	frame := frameOf(strings.Repeat("x", 200))
	for _, pods := range []int{1, 100} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			w := NewWriter(s, WriterOptions{Node: "bench", IDs: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			defer w.Close()
			b.SetBytes(int64(len(frame)))
			b.ResetTimer()
			for i := range b.N {
				w.Append(fmt.Sprintf("mcpp.pod.p%d", i%pods), frame, nil, nil, "")
				if i%4096 == 4095 {
					if err := w.Sync(ctx); err != nil { // bounded in flight, as the pods' flow is
						b.Fatal(err)
					}
				}
			}
			if err := w.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// benchClusterConn starts three embedded NATS servers with JetStream in one
// cluster, and connects to the first.
func benchClusterConn(b *testing.B) *nats.Conn { return connectTo(b, startCluster(b)[0]) }
