package history

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFollowBridgesALostConsumer: while every consumer the follower makes
// is taken from it as soon as it is made (as after a kill of the stream's
// leader, when the consumers made on the server chosen never deliver),
// the follower still brings every message the stream stores, once each,
// in the stream's order, read by direct gets; and once the consumers
// stay, they deliver the rest, nothing twice.
func TestFollowBridgesALostConsumer(t *testing.T) {
	s := openStream(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []uint64
	delivered := make(chan struct{}, 1000)
	_, stop, err := s.Follow(ctx, []string{"mcpp.pod.>"}, func(_ string, m StoredMsg) {
		mu.Lock()
		got = append(got, m.Seq)
		mu.Unlock()
		delivered <- struct{}{}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	appendOne := func(i int) uint64 {
		t.Helper()
		return appendAll(t, s, []string{fmt.Sprintf("mcpp.pod.p%d", i%3)}, [][]byte{frameOf(fmt.Sprintf("e%d", i))})[0]
	}
	wantDelivered := func(what string, want []uint64) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= len(want) {
				break
			}
			select {
			case <-delivered:
			case <-deadline:
				t.Fatalf("%s: the follower brought %d of %d messages in 20 s", what, n, len(want))
			}
		}
		time.Sleep(300 * time.Millisecond) // anything more would be twice
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the follower brought %v, want %v", what, got, want)
		}
	}
	var want []uint64
	want = append(want, appendOne(0))
	wantDelivered("before", want)

	// The stream takes one consumer at most, and a stranger's takes the
	// place of the follower's, which is deleted: the follower cannot make
	// another, and reads the stream without one.
	setMaxConsumers := func(n int) {
		t.Helper()
		cfg := s.stream.CachedInfo().Config
		cfg.MaxConsumers = n
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	var followers []string
	for name := range s.stream.ConsumerNames(ctx).Name() {
		followers = append(followers, name)
	}
	stranger, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "stranger", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatalf("the stranger's consumer: %v", err)
	}
	setMaxConsumers(1)
	for _, name := range followers {
		if err := s.stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 30; i++ {
		want = append(want, appendOne(i))
		time.Sleep(20 * time.Millisecond)
	}
	wantDelivered("while the follower could not make a consumer", want)
	if names := consumerNames(ctx, s); len(names) != 1 || names[0] != stranger.CachedInfo().Name {
		t.Fatalf("the stream's consumers: %v, want the stranger's alone", names)
	}
	setMaxConsumers(-1)
	if err := s.stream.DeleteConsumer(ctx, "stranger"); err != nil {
		t.Fatal(err)
	}
	for i := 31; i <= 40; i++ {
		want = append(want, appendOne(i))
	}
	wantDelivered("after", want)
	if names := consumerNames(ctx, s); len(names) != 1 {
		t.Fatalf("the stream's consumers after: %v, want the follower's", names)
	}
}

func consumerNames(ctx context.Context, s *Stream) []string {
	var names []string
	for name := range s.stream.ConsumerNames(ctx).Name() {
		names = append(names, name)
	}
	return names
}

// TestBridgeReadCrossesGaps: where the stream's answers skip sequences (a
// replica catching up lacks them; here they were deleted, which a replica
// answers the same way), the bridge asks the stream's leader what comes
// next, a window of sequences at once, and brings every message the
// stream holds, once each, in order, across gaps shorter and longer than
// its window.
func TestBridgeReadCrossesGaps(t *testing.T) {
	s := openStream(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var frames [][]byte
	var subjects []string
	for i := range 400 {
		frames = append(frames, frameOf(fmt.Sprintf("e%d", i)))
		subjects = append(subjects, fmt.Sprintf("mcpp.pod.p%d", i%3))
	}
	seqs := appendAll(t, s, subjects, frames)
	var want []uint64
	for i, seq := range seqs {
		gap := (i >= 100 && i < 100+leaderWindow+17) || i%5 == 3 || (i >= 300 && i < 303)
		if !gap {
			want = append(want, seq)
			continue
		}
		if err := s.stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	f := &streamConsumer{s: s, subjects: []string{"mcpp.pod.>"}, next: seqs[0], stop: make(chan struct{}),
		fn: func(_ string, m StoredMsg) { got = append(got, m.Seq) }}
	n, err := f.bridgeRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || n != len(want) {
		t.Fatalf("the bridge brought %d messages (said %d): %v\nwant %d: %v", len(got), n, got, len(want), want)
	}
	// Past each of the gaps (more than 60) the leader said what comes
	// next, and the window after it.
	if a := s.Answers(); a.Bridged != uint64(len(want)) || a.FromLeader < 60 {
		t.Fatalf("counted %d messages read without a consumer, %d of them from the leader; want %d, at least 60 from the leader", a.Bridged, a.FromLeader, len(want))
	}
}

// TestReadBatchAnswersOnce: a batch's answers come to the read alone, not
// also to the connection's subscription for requests' answers (nats.go's
// response inbox, which takes every subject under its prefix): there
// each answer of a large read was one more message for nobody, and under
// issue 38's full-size faults that subscription fell behind ("slow
// consumer") and dropped the answers of requests waiting on it.
func TestReadBatchAnswersOnce(t *testing.T) {
	s := openStream(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const total = 200
	var subjects []string
	var frames [][]byte
	for i := range total {
		subjects = append(subjects, "mcpp.pod.p")
		frames = append(frames, frameOf(fmt.Sprint("e", i)))
	}
	seqs := appendAll(t, s, subjects, frames)
	for _, nc := range s.reads {
		// A request made first, as the follower's reads of the leader are:
		// nats.go then subscribes to its response inbox.
		if _, _, err := s.leaderNextOn(ctx, "mcpp.pod.p", seqs[0]); err != nil {
			t.Fatal(err)
		}
		before := nc.Stats().InMsgs
		read := 0
		if _, err := s.readBatch(ctx, "mcpp.pod.p", seqs[0], total, func(string, StoredMsg) (bool, error) {
			read++
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		// Each message once, and the batch's end.
		if got := nc.Stats().InMsgs - before; read != total || got > uint64(read)+1 {
			t.Fatalf("a read of %d messages (%d handed) brought the connection %d messages", total, read, got)
		}
	}
}

// TestFollowLeavesAConsumerThatStalls: a consumer that stays alive (its
// heartbeats come) but delivers nothing while the stream stores this
// node's messages, as one on a replica stuck catching up does (issue 38's
// full-size run 33: a node's follower brought nothing back for 30 s with
// no error, and the node closed its members), is left: the follower reads
// the stream without it, and brings every message, in order.
func TestFollowLeavesAConsumerThatStalls(t *testing.T) {
	s := openStream(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []uint64
	_, stop, err := s.Follow(ctx, []string{"mcpp.pod.>"}, func(_ string, m StoredMsg) {
		mu.Lock()
		got = append(got, m.Seq)
		mu.Unlock()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The follower's consumer pauses: the server keeps it, and its
	// heartbeats, but it delivers nothing.
	for _, name := range consumerNames(ctx, s) {
		if _, err := s.stream.PauseConsumer(ctx, name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var want []uint64
	for i := range 20 {
		want = append(want, appendAll(t, s, []string{fmt.Sprintf("mcpp.pod.p%d", i%3)}, [][]byte{frameOf(fmt.Sprintf("e%d", i))})[0])
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // anything more would be twice
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("with its consumer paused, the follower brought %v in 20 s, want %v", got, want)
	}
}

// TestFollowSaysWhereItStarts: Follow tells the first sequence it hands
// on, before it has handed anything (a node's follower on an idle
// stream): everything below was stored before, and the next message the
// stream stores is that one.
func TestFollowSaysWhereItStarts(t *testing.T) {
	s := openStream(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var before []uint64
	for i := range 5 {
		before = append(before, appendAll(t, s, []string{fmt.Sprintf("mcpp.pod.p%d", i%3)}, [][]byte{frameOf(fmt.Sprintf("e%d", i))})[0])
	}
	brought := make(chan uint64, 10)
	from, stop, err := s.Follow(ctx, []string{"mcpp.pod.>"}, func(_ string, m StoredMsg) { brought <- m.Seq }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if want := before[len(before)-1] + 1; from != want {
		t.Fatalf("Follow starts at %d, want %d (after the stream's last)", from, want)
	}
	next := appendAll(t, s, []string{"mcpp.pod.p0"}, [][]byte{frameOf("after")})[0]
	select {
	case seq := <-brought:
		if seq != from || next != from {
			t.Fatalf("the follower brought %d first, the stream stored %d; it said it starts at %d", seq, next, from)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follower brought nothing in 20 s")
	}
}
