package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cachedData is the bytes of message seq in the cache tests: its own,
// so that a message read from another's place shows.
func cachedData(seq uint64, n int) []byte {
	return bytes.Repeat([]byte{byte(seq), byte(seq >> 8), byte(seq >> 16)}, n/3+1)[:n]
}

// TestCacheKeepsTheNewest: messages of every size up to an eighth of the
// cache, put one after the other round the array many times over. After
// each, every message the cache still finds is the one put under that
// sequence, byte for byte, the newest ones that fit in seven eighths of
// it are all found, and it never holds more than its bytes. A larger
// message, and another pod's subject, are not found.
func TestCacheKeepsTheNewest(t *testing.T) {
	const size = 64 << 10
	c := NewCache(size)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := map[uint64]int{}
	for seq := uint64(1); seq <= 2000; seq++ {
		n := 1 + rng.IntN(size/8)
		sizes[seq] = n
		c.Put("mcpp.pod.a", StoredMsg{Seq: seq, Time: int64(seq), Data: cachedData(seq, n)})
		if st := c.Stats(); st.Bytes > size {
			t.Fatalf("after %d: holds %d bytes, more than %d", seq, st.Bytes, size)
		}
		fits := 0
		for s := seq; s >= 1 && s+50 > seq; s-- {
			m, ok := c.Get("mcpp.pod.a", s, nil)
			fits += sizes[s]
			if !ok {
				if fits <= size*7/8 {
					t.Fatalf("after %d: %d is not found, and the newest up to it take %d bytes of %d", seq, s, fits, size)
				}
				continue
			}
			if m.Seq != s || m.Time != int64(s) || !bytes.Equal(m.Data, cachedData(s, sizes[s])) {
				t.Fatalf("after %d: %d found as another message (seq %d, %d bytes)", seq, s, m.Seq, len(m.Data))
			}
		}
	}
	if _, ok := c.Get("mcpp.pod.b", 2000, nil); ok {
		t.Fatal("a message found under another pod's subject")
	}
	c.Put("mcpp.pod.a", StoredMsg{Seq: 2001, Data: make([]byte, size/8+1)})
	if _, ok := c.Get("mcpp.pod.a", 2001, nil); ok {
		t.Fatal("a message of more than an eighth of the cache was kept")
	}
	if NewCache(cacheMinBytes-1) != nil {
		t.Fatal("a cache below the least was made")
	}
}

// appendAll stores frames on subjects (one each), in order, and returns
// their sequences.
func appendAll(t *testing.T, s *Stream, subjects []string, frames [][]byte) []uint64 {
	t.Helper()
	seqs := make([]uint64, len(frames))
	for i, f := range frames {
		done := make(chan error, 1)
		s.Append(subjects[i], f, "", func(seq uint64, _ bool, err error) {
			seqs[i] = seq
			done <- err
		})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return seqs
}

// readAll is Read's messages.
func readAll(ctx context.Context, s *Stream, subject string, want []uint64) ([]StoredMsg, error) {
	var got []StoredMsg
	err := s.Read(ctx, subject, want, func(m StoredMsg) error {
		got = append(got, m)
		return nil
	})
	return got, err
}

// TestReadTakesTheCache: a read takes what the node's cache holds from it
// and reads the rest from the stream, handing them in the order asked,
// so that a message the stream no longer holds but the cache does is
// still read; what it reads from the stream it keeps. A message is only
// found under its own pod's subject.
func TestReadTakesTheCache(t *testing.T) {
	s, _ := openStreamWith(t, Config{Entries: 100, CacheBytes: 1 << 20})
	var subjects []string
	var frames [][]byte
	for i := range 20 {
		subjects = append(subjects, []string{"mcpp.pod.a", "mcpp.pod.b"}[i%2])
		frames = append(frames, frameOf(fmt.Sprintf("m%d", i)))
	}
	seqs := appendAll(t, s, subjects, frames)
	var podA []uint64
	for i, seq := range seqs {
		if i%2 == 0 {
			podA = append(podA, seq)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, got []StoredMsg, want []uint64) {
		t.Helper()
		var gotSeqs []uint64
		for _, m := range got {
			gotSeqs = append(gotSeqs, m.Seq)
			i := slices.Index(seqs, m.Seq)
			if i < 0 || !bytes.Equal(m.Data, frames[i]) {
				t.Fatalf("%s: %d read with another message's bytes", what, m.Seq)
			}
		}
		if !slices.Equal(gotSeqs, want) {
			t.Fatalf("%s: read %v, want %v", what, gotSeqs, want)
		}
	}

	// Every other one first: those come from the stream, and are kept.
	var odd []uint64
	for i, seq := range podA {
		if i%2 == 1 {
			odd = append(odd, seq)
		}
	}
	got, err := readAll(ctx, s, "mcpp.pod.a", odd)
	if err != nil {
		t.Fatal(err)
	}
	check("the odd ones", got, odd)
	if st := s.CacheStats(); st.Hits != 0 || st.Misses != uint64(len(odd)) {
		t.Fatalf("after the first read: %+v, want 0 hits and %d misses", st, len(odd))
	}
	// All of them: the odd ones from the cache, between the others read
	// from the stream, in order.
	got, err = readAll(ctx, s, "mcpp.pod.a", podA)
	if err != nil {
		t.Fatal(err)
	}
	check("all", got, podA)
	if st := s.CacheStats(); st.Hits != uint64(len(odd)) {
		t.Fatalf("after the second read: %+v, want %d hits", st, len(odd))
	}
	// Gone from the stream, still in the cache: read.
	for _, seq := range podA[3:6] {
		if err := s.stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	got, err = readAll(ctx, s, "mcpp.pod.a", podA)
	if err != nil {
		t.Fatal(err)
	}
	check("after the stream lost three", got, podA)
	// Pod b's reader asking for pod a's sequences is not given them.
	_, err = readAll(ctx, s, "mcpp.pod.b", podA[:1])
	if missing := (*MissingError)(nil); !errors.As(err, &missing) || missing.Seq != podA[0] {
		t.Fatalf("pod a's message read as pod b's: %v", err)
	}
}

// TestScanAndFollowFillTheCache: the messages a pod's opening scans and
// the ones the node's follower brings are in the cache, and a replay of
// them after the stream lost them reads them whole.
func TestScanAndFollowFillTheCache(t *testing.T) {
	s, _ := openStreamWith(t, Config{Entries: 100, CacheBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	frames := [][]byte{frameOf("past1"), frameOf("past2")}
	past := appendAll(t, s, []string{"mcpp.pod.a", "mcpp.pod.a"}, frames)
	if err := s.Scan(ctx, []string{"mcpp.pod.a"}, 1, func(string, StoredMsg) error { return nil }); err != nil {
		t.Fatal(err)
	}
	followed := make(chan uint64, 10)
	_, stop, err := s.Follow(ctx, []string{"mcpp.pod.>"}, func(_ string, m StoredMsg) { followed <- m.Seq }, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	frames = append(frames, frameOf("live"))
	live := appendAll(t, s, []string{"mcpp.pod.a"}, frames[2:])
	select {
	case seq := <-followed:
		if seq != live[0] {
			t.Fatalf("followed %d, want %d", seq, live[0])
		}
	case <-ctx.Done():
		t.Fatal("the follower brought nothing")
	}
	all := append(past, live...)
	for _, seq := range all {
		if err := s.stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readAll(ctx, s, "mcpp.pod.a", all)
	if err != nil {
		t.Fatalf("reading what the stream lost: %v", err)
	}
	for i, m := range got {
		if m.Seq != all[i] || !bytes.Equal(m.Data, frames[i]) {
			t.Fatalf("read %d as %d, %q", all[i], m.Seq, m.Data)
		}
	}
	if len(got) != len(all) {
		t.Fatalf("read %d of %d", len(got), len(all))
	}
}

// BenchmarkCachePut: what keeping a message costs the node's follower,
// which puts every message the stream stores (a batch of a pod's frames,
// here 1 KiB), round a 64 MiB cache.
//
//	go test -run '^$' -bench CachePut ./history/
func BenchmarkCachePut(b *testing.B) {
	c := NewCache(64 << 20)
	data := make([]byte, 1<<10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := range b.N {
		c.Put("mcpp.pod.lab", StoredMsg{Seq: uint64(i + 1), Data: data})
	}
}

// TestScanOfEveryPodNamesEachSubject: a scan of every pod's subjects at
// once (the wildcard a node scans what the stream held before its
// follower started with, pod/seqs.go) hands each message with the
// subject it is on, in the stream's order, and keeps each in the cache
// under that subject: a pod's read by sequence then finds it there.
func TestScanOfEveryPodNamesEachSubject(t *testing.T) {
	s, _ := openStreamWith(t, Config{Entries: 1000, CacheBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var subjects []string
	var frames [][]byte
	for i := range 600 { // more than one batch of a wildcard
		subjects = append(subjects, fmt.Sprintf("mcpp.pod.p%d", i%3))
		frames = append(frames, frameOf(fmt.Sprint(i)))
	}
	seqs := appendAll(t, s, subjects, frames)
	i := 0
	err := s.Scan(ctx, []string{"mcpp.pod.>"}, 1, func(subject string, m StoredMsg) error {
		if m.Seq != seqs[i] || subject != subjects[i] {
			return fmt.Errorf("message %d: seq %d on %q, want %d on %q", i, m.Seq, subject, seqs[i], subjects[i])
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(seqs) {
		t.Fatalf("the scan handed %d messages, want %d", i, len(seqs))
	}
	before := s.CacheStats()
	if _, err := readAll(ctx, s, "mcpp.pod.p1", []uint64{seqs[1], seqs[4]}); err != nil {
		t.Fatal(err)
	}
	if after := s.CacheStats(); after.Hits-before.Hits != 2 || after.Misses != before.Misses {
		t.Fatalf("a read after the scan: %d hits, %d misses; want 2 hits, none missed", after.Hits-before.Hits, after.Misses-before.Misses)
	}
}
