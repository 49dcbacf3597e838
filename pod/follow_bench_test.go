package pod

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkFollow measures the two ways a node can follow the history
// stream's order without a JetStream consumer per pod (issue 21): the
// stream's RePublish, which a node takes with one core subscription per
// pod it serves (what OrderStream does), against one ordered consumer per
// node for all the pods. 100 pods store 256 B envelopes; the node serves
// all of them, or a tenth (a cluster of ten nodes, each serving its own
// pods). ns/op is per message stored, until every one the node serves
// reached it, both on the same embedded JetStream, publishing within a
// window so that neither is overrun.
func BenchmarkFollow(b *testing.B) {
	const pods, window = 100, 4096
	for _, way := range []string{"republish", "consumer"} {
		for _, served := range []int{pods, pods / 10} {
			b.Run(fmt.Sprintf("%s/serves-%d-of-%d", way, served, pods), func(b *testing.B) {
				benchFollow(b, way, pods, served, window)
			})
		}
	}
}

func benchFollow(b *testing.B, way string, pods, served, window int) {
	{
		{
			nc, js := benchStream(b, way == "republish")
			var got atomic.Int64
			switch way {
			case "republish":
				d := newDispatch(NewNATSBroker(nc))
				defer d.close()
				for i := range served {
					if _, err := d.subscribe(fmt.Sprint(i), fmt.Sprintf("mcpp.deliver.p%d", i), func(BrokerMsg, *Burst) { got.Add(1) }); err != nil {
						b.Fatal(err)
					}
				}
			case "consumer":
				ctx := context.Background()
				s, err := js.Stream(ctx, "BENCH")
				if err != nil {
					b.Fatal(err)
				}
				c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"mcpp.pod.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
				if err != nil {
					b.Fatal(err)
				}
				prefix := "mcpp.pod.p"
				cc, err := c.Consume(func(m jetstream.Msg) {
					// The node takes every pod's, and keeps those it serves.
					if n, _ := strconv.Atoi(m.Subject()[len(prefix):]); n < served {
						got.Add(1)
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				defer cc.Stop()
			}
			_ = nc.Flush()
			time.Sleep(100 * time.Millisecond)
			frame := make([]byte, 330)
			want := func(n int) int64 { // of the first n stored, those the node serves
				full, rest := n/pods, n%pods
				return int64(full*served + min(rest, served))
			}
			b.ResetTimer()
			for i := range b.N {
				for want(i)-got.Load() > int64(window) {
					time.Sleep(50 * time.Microsecond)
				}
				if err := nc.Publish(fmt.Sprintf("mcpp.pod.p%d", i%pods), frame); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for got.Load() < want(b.N) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			if n := got.Load(); n < want(b.N) {
				b.Fatalf("%d of %d reached the follower", n, want(b.N))
			}
		}
	}
}

// BenchmarkFollowLatency measures the same two ways at a steady 5,000
// messages a second (100 pods): how long a stored message takes to reach
// the follower, reported as the p50-ns and p99-ns of the run.
func BenchmarkFollowLatency(b *testing.B) {
	const pods, rate = 100, 5000
	for _, way := range []string{"republish", "consumer"} {
		b.Run(way, func(b *testing.B) {
			nc, js := benchStream(b, way == "republish")
			lat := make([]time.Duration, 0, b.N)
			var mu sync.Mutex
			record := func(data []byte) {
				var sent int64
				for _, c := range data[:19] {
					sent = sent*10 + int64(c-'0')
				}
				mu.Lock()
				lat = append(lat, time.Duration(time.Now().UnixNano()-sent))
				mu.Unlock()
			}
			switch way {
			case "republish":
				d := newDispatch(NewNATSBroker(nc))
				defer d.close()
				for i := range pods {
					if _, err := d.subscribe(fmt.Sprint(i), fmt.Sprintf("mcpp.deliver.p%d", i), func(m BrokerMsg, _ *Burst) { record(m.Data) }); err != nil {
						b.Fatal(err)
					}
				}
			case "consumer":
				ctx := context.Background()
				s, _ := js.Stream(ctx, "BENCH")
				c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"mcpp.pod.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
				if err != nil {
					b.Fatal(err)
				}
				cc, err := c.Consume(func(m jetstream.Msg) { record(m.Data()) })
				if err != nil {
					b.Fatal(err)
				}
				defer cc.Stop()
			}
			_ = nc.Flush()
			time.Sleep(100 * time.Millisecond)
			b.ResetTimer()
			tick := time.NewTicker(time.Second / rate * 10)
			for i := 0; i < b.N; i += 10 {
				<-tick.C
				for k := range min(10, b.N-i) {
					frame := fmt.Appendf(nil, "%019d%0311d", time.Now().UnixNano(), 0)
					_ = nc.Publish(fmt.Sprintf("mcpp.pod.p%d", (i+k)%pods), frame)
				}
			}
			tick.Stop()
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(lat)
				mu.Unlock()
				if n >= b.N || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			if len(lat) < b.N {
				b.Fatalf("%d of %d reached the follower", len(lat), b.N)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
		})
	}
}

// benchServer starts an embedded NATS server with JetStream on opts (its
// store in a temporary directory, wide limits), for the length of the
// benchmark, and connects to it in process.
func benchServer(b testing.TB, opts *server.Options) *nats.Conn {
	dir, _ := os.MkdirTemp("", "follow-bench")
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	opts.NoSigs, opts.NoLog, opts.JetStream, opts.StoreDir = true, true, true, dir
	opts.JetStreamMaxMemory, opts.MaxPending = 1<<30, 1<<30
	ns, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	ns.ReadyForConnections(10 * time.Second)
	b.Cleanup(ns.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// benchStream is an embedded JetStream with the history stream's shape.
func benchStream(b testing.TB, republish bool) (*nats.Conn, jetstream.JetStream) {
	nc := benchServer(b, &server.Options{ServerName: "bench", DontListen: true})
	js, _ := jetstream.New(nc)
	sc := jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"mcpp.pod.>"}, Storage: jetstream.MemoryStorage,
		MaxMsgsPerSubject: 2024, MaxBytes: 512 << 20, Discard: jetstream.DiscardOld, AllowDirect: true}
	if republish {
		sc.RePublish = &jetstream.RePublish{Source: "mcpp.pod.>", Destination: "mcpp.deliver.>"}
	}
	if _, err := js.CreateOrUpdateStream(context.Background(), sc); err != nil {
		b.Fatal(err)
	}
	return nc, js
}

// BenchmarkFollowCluster is BenchmarkFollow on a cluster of three
// embedded servers, the stream replicated on all three, each node
// following every pod: the stream's leader delivers each message once per
// node consumer, where it republishes it once and NATS routes it to the
// nodes that listen.
func BenchmarkFollowCluster(b *testing.B) {
	const pods, window = 100, 4096
	for _, way := range []string{"republish", "consumer"} {
		b.Run(way, func(b *testing.B) {
			conns := benchCluster(b, way == "republish")
			var got atomic.Int64
			for _, nc := range conns {
				switch way {
				case "republish":
					d := newDispatch(NewNATSBroker(nc))
					defer d.close()
					for i := range pods {
						if _, err := d.subscribe(fmt.Sprint(i), fmt.Sprintf("mcpp.deliver.p%d", i), func(BrokerMsg, *Burst) { got.Add(1) }); err != nil {
							b.Fatal(err)
						}
					}
				case "consumer":
					js, _ := jetstream.New(nc)
					ctx := context.Background()
					s, err := js.Stream(ctx, "BENCH")
					if err != nil {
						b.Fatal(err)
					}
					c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"mcpp.pod.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
					if err != nil {
						b.Fatal(err)
					}
					cc, err := c.Consume(func(jetstream.Msg) { got.Add(1) })
					if err != nil {
						b.Fatal(err)
					}
					defer cc.Stop()
				}
				_ = nc.Flush()
			}
			time.Sleep(500 * time.Millisecond)
			frame := make([]byte, 330)
			pub := conns[0]
			b.ResetTimer()
			for i := range b.N {
				for 3*int64(i)-got.Load() > int64(window) {
					time.Sleep(50 * time.Microsecond)
				}
				if err := pub.Publish(fmt.Sprintf("mcpp.pod.p%d", i%pods), frame); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for got.Load() < 3*int64(b.N) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			if n := got.Load(); n < 3*int64(b.N) {
				b.Fatalf("%d of %d reached the followers", n, 3*b.N)
			}
		})
	}
}

// benchCluster starts three embedded servers in a cluster, with the
// history stream's shape replicated on all three, and connects to each.
func benchCluster(b testing.TB, republish bool) []*nats.Conn {
	var routes []string
	ports := []int{}
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var conns []*nats.Conn
	for i, p := range ports {
		conns = append(conns, benchServer(b, &server.Options{ServerName: fmt.Sprint("s", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			Cluster: server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: p}, Routes: server.RoutesFromStr(strings.Join(routes, ","))}))
	}
	js, _ := jetstream.New(conns[0])
	sc := jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"mcpp.pod.>"}, Storage: jetstream.MemoryStorage, Replicas: 3,
		MaxMsgsPerSubject: 2024, MaxBytes: 512 << 20, Discard: jetstream.DiscardOld, AllowDirect: true}
	if republish {
		sc.RePublish = &jetstream.RePublish{Source: "mcpp.pod.>", Destination: "mcpp.deliver.>"}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateOrUpdateStream(ctx, sc)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cluster's stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return conns
}
