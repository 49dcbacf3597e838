package history

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkReadReplay: one replay's read of a pod's whole past (200
// messages) from a stream in JetStream's file store that 100 pods wrote
// to in turn, as a gateway node reads it for a joiner with history=all;
// without the node's cache (every read asks the stream) and with it
// (the pod's messages are in it, as after the pod's opening scanned
// them). msgs/s is the messages read a second.
//
//	go test -run '^$' -bench ReadReplay ./history/
func BenchmarkReadReplay(b *testing.B) {
	for _, c := range []struct {
		name  string
		cache int
	}{{"cache=off", 0}, {"cache=on", 64 << 20}} {
		b.Run(c.name, func(b *testing.B) { benchReadReplay(b, c.cache) })
	}
}

func benchReadReplay(b *testing.B, cache int) {
	const pods, each = 100, 200
	s, _ := openStreamWith(b, Config{Entries: 1000, CacheBytes: cache, File: true})
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
		if err := s.Read(ctx, fmt.Sprintf("mcpp.pod.p%d", p), seqs[p], func(StoredMsg) error { n++; return nil }); err != nil || n != each {
			b.Fatalf("read %d of %d: %v", n, each, err)
		}
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
