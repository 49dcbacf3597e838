package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// BenchmarkReadReplay: one replay's read of a pod's whole past (200
// messages) from a stream in JetStream's file store that 100 pods wrote
// to in turn, as a gateway node reads it for a joiner with history=all;
// without the node's cache (every read asks the stream) and with it
// (the pod's messages are in it, as after the pod's opening scanned
// them); without it, in batches of readBatch messages and of the 256
// asked before issue 38's run 34. scan is the same past read by a Scan
// of the pod's subject, as a pod's opening read it before run 46 (a
// Scan does not know which sequences are the pod's, so it asks the
// stream, cache or not); an opening now reads by sequence what the
// node's follower brought (pod/seqs.go), as the others do, once the
// node has scanned what the stream held before its follower started,
// every pod's at once: every-pod is that scan of the whole stream (its
// 20,000 messages, 100 pods' pasts, in one op). msgs/s is the messages
// read a second.
//
//	go test -run '^$' -bench ReadReplay ./history/
func BenchmarkReadReplay(b *testing.B) {
	for _, c := range []struct {
		name         string
		cache, batch int
		scan         bool
	}{
		{fmt.Sprint("cache=off/batch=", readBatch), 0, readBatch, false},
		{"cache=off/batch=256", 0, 256, false},
		{"cache=on", 64 << 20, readBatch, false},
		{"scan", 64 << 20, readBatch, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchReadReplay(b, c.cache, c.batch, c.scan, false) })
	}
	b.Run("every-pod", func(b *testing.B) { benchReadReplay(b, 64<<20, readBatch, true, true) })
}

func benchReadReplay(b *testing.B, cache, batch int, scan, everyPod bool) {
	const pods, each = 100, 200
	s, _ := openStreamWith(b, Config{Entries: 1000, CacheBytes: cache, File: true})
	s.batch = batch
	seqs := make([][]uint64, pods)
	for p := range pods {
		seqs[p] = make([]uint64, each)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for n := range each {
		for p := range pods {
			wg.Add(1)
			s.Append(fmt.Sprintf("mcpp.pod.p%d", p), frameOf(fmt.Sprintf("p%d-%d-%0200d", p, n, 0)), "", func(seq uint64, _ bool, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				seqs[p][n] = seq
				if err != nil {
					failed = err
				}
			})
		}
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	read := func(p int) {
		n := 0
		subject := fmt.Sprintf("mcpp.pod.p%d", p)
		var err error
		if scan {
			err = s.Scan(ctx, []string{subject}, 1, func(string, StoredMsg) error { n++; return nil })
		} else {
			err = s.Read(ctx, subject, seqs[p], func(StoredMsg) error { n++; return nil })
		}
		if err != nil || n != each {
			b.Fatalf("read %d of %d: %v", n, each, err)
		}
	}
	if everyPod {
		b.ResetTimer()
		for range b.N {
			n := 0
			if err := s.Scan(ctx, []string{"mcpp.pod.>"}, 1, func(string, StoredMsg) error { n++; return nil }); err != nil || n != pods*each {
				b.Fatalf("scanned %d of %d: %v", n, pods*each, err)
			}
		}
		b.ReportMetric(float64(b.N*pods*each)/b.Elapsed().Seconds(), "msgs/s")
		return
	}
	for p := range pods {
		read(p) // with a cache: what a pod's opening leaves there
	}
	b.ResetTimer()
	for i := range b.N {
		read(i % pods)
	}
	b.ReportMetric(float64(b.N*each)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLeaderReads: reading 1,000 messages from the stream's leader,
// as a follower does past a replica that lacks them: one message get at
// a time, and windows of leaderWindow sequences asked at once
// (leaderNextMany). The stream is in process: across a network each
// message get waits a round trip more, which the windows share.
//
//	go test -run '^$' -bench LeaderReads ./history/
func BenchmarkLeaderReads(b *testing.B) {
	const total = 1000
	s := openStream(b, 2000)
	ctx := context.Background()
	for i := range total {
		done := make(chan error, 1)
		s.Append(fmt.Sprintf("mcpp.pod.p%d", i%10), frameOf(fmt.Sprint("e", i)), "", func(_ uint64, _ bool, err error) { done <- err })
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	for _, window := range []int{1, leaderWindow} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			for b.Loop() {
				read := 0
				for next := uint64(1); ; {
					answers := s.leaderNextMany(ctx, "mcpp.pod.>", next, window)
					last := next
					for _, a := range answers {
						if a.err != nil {
							b.Fatal(a.err)
						}
						if a.m != nil && a.m.Seq >= last {
							read++
							last = a.m.Seq + 1
						}
					}
					if answers[len(answers)-1].m == nil {
						break
					}
					next = last
				}
				if read != total {
					b.Fatalf("read %d messages, want %d", read, total)
				}
			}
			b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAcksUnderReads: what the stream's acknowledgements wait while
// a node that has just started reads the pasts of 1,000 pods at once (a
// storm of pods opened after a restart). 1,000 pods' 200 messages of 1.1
// KB each are stored in JetStream's file store; the server is started
// again on the store's directory, so that its blocks load from disk as
// the node's reads come; then 1,000 Scans run on four reading connections
// (gateway/nats.go's readConns) while a message is appended every 5 ms
// and waited for. Batches of readBatch messages (batch=32) against the
// 256 the reads asked for before issue 38's run 34 (batch=256), in one
// run. ack-p50-ms and ack-max-ms are the acknowledgements' waits,
// storm-s how long the reads took, pods-unread the Scans that failed
// within the 30 s a pod's opening waits (pod.openTimeout).
//
//	go test -run '^$' -bench AcksUnderReads -benchtime 3x ./history/
func BenchmarkAcksUnderReads(b *testing.B) {
	const pods, each = 1000, 200
	dir := b.TempDir()
	s, stop := openStreamIn(b, dir, 4)
	body := strings.Repeat("x", 1000)
	var wg sync.WaitGroup
	for n := range each {
		for p := range pods {
			wg.Add(1)
			s.Append(fmt.Sprintf("mcpp.pod.p%d", p), frameOf(fmt.Sprintf("p%d-%d-%s", p, n, body)), "", func(_ uint64, _ bool, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
	}
	stop()
	for _, batch := range []int{readBatch, 256} {
		b.Run(fmt.Sprint("batch=", batch), func(b *testing.B) {
			var acks []time.Duration
			var storm time.Duration
			var failures int64
			probe := 0
			for b.Loop() {
				b.StopTimer()
				s, stop := openStreamIn(b, dir, 4) // cold: its blocks are on disk
				s.batch = batch
				b.StartTimer()
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var reads sync.WaitGroup
				var read, failed atomic.Int64
				for p := range pods {
					reads.Add(1)
					go func() {
						defer reads.Done()
						err := s.Scan(ctx, []string{fmt.Sprintf("mcpp.pod.p%d", p)}, 1, func(string, StoredMsg) error {
							read.Add(1)
							return nil
						})
						if err != nil {
							failed.Add(1)
						}
					}()
				}
				stormDone := make(chan struct{})
				go func() { reads.Wait(); close(stormDone) }()
				for waiting := true; waiting; {
					done := make(chan struct{})
					t0 := time.Now()
					probe++
					s.Append("mcpp.probe", frameOf(fmt.Sprint("probe-", probe)), "", func(uint64, bool, error) { close(done) })
					<-done
					acks = append(acks, time.Since(t0))
					select {
					case <-stormDone:
						waiting = false
					case <-time.After(5 * time.Millisecond):
					}
				}
				storm += time.Since(start)
				cancel()
				b.StopTimer()
				if failed.Load() == 0 && read.Load() != pods*each {
					b.Fatalf("read %d messages, want %d", read.Load(), pods*each)
				}
				failures += failed.Load()
				stop()
				b.StartTimer()
			}
			slices.Sort(acks)
			b.ReportMetric(float64(acks[len(acks)/2].Microseconds())/1000, "ack-p50-ms")
			b.ReportMetric(float64(acks[len(acks)-1].Microseconds())/1000, "ack-max-ms")
			b.ReportMetric(storm.Seconds()/float64(b.N), "storm-s")
			b.ReportMetric(float64(failures)/float64(b.N), "pods-unread")
		})
	}
}

// openStreamIn opens the history stream of a NATS server on the store in
// dir (as it is, when the directory holds one), reading on reads
// connections of its own; stop shuts them down, keeping the store.
func openStreamIn(b *testing.B, dir string, reads int) (s *Stream, stop func()) {
	b.Helper()
	ns, err := server.NewServer(&server.Options{
		ServerName: "history-test", DontListen: true, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir, JetStreamMaxMemory: 256 << 20, MaxPending: 1 << 30,
	})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(time.Minute) {
		b.Fatal("NATS not ready")
	}
	conns := make([]*nats.Conn, 1+reads)
	for i := range conns {
		if conns[i], err = nats.Connect("", nats.InProcessServer(ns)); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err = Open(ctx, conns[0], Config{Subjects: []string{"mcpp.pod.>", "mcpp.probe"}, Entries: 1000, MaxAge: time.Hour,
		MaxBytes: 1 << 30, MaxMsgSize: 4 << 20, File: true, Reads: conns[1:]}, "test")
	if err != nil {
		b.Fatal(err)
	}
	return s, func() {
		s.Close()
		closeConns(conns)
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

func closeConns(conns []*nats.Conn) {
	for _, c := range conns {
		c.Close()
	}
}
