package history

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
func benchClusterConn(b *testing.B) *nats.Conn {
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var first *server.Server
	for i, p := range ports {
		ns, err := server.NewServer(&server.Options{ServerName: fmt.Sprint("w", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			NoSigs: true, NoLog: true, JetStream: true, StoreDir: b.TempDir(), MaxPending: 1 << 30,
			JetStreamMaxMemory: 1 << 30, JetStreamMaxStore: 1 << 30,
			Cluster: server.ClusterOpts{Name: "wbench", Host: "127.0.0.1", Port: p}, Routes: server.RoutesFromStr(strings.Join(routes, ","))})
		if err != nil {
			b.Fatal(err)
		}
		go ns.Start()
		b.Cleanup(ns.Shutdown)
		if !ns.ReadyForConnections(30 * time.Second) {
			b.Fatal("NATS not ready")
		}
		if i == 0 {
			first = ns
		}
	}
	nc, err := nats.Connect("", nats.InProcessServer(first))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}
