package pod

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/history"
)

// TestTailPastMeetsLive: a pod's tail hands its pod every message stored
// on its subjects once, in the stream's order: the past, read before
// Follow returns, then what the node's follower brings, including what
// was stored while the past was read (which the follower also brought),
// and nothing of the other pods' subjects.
func TestTailPastMeetsLive(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	store := func(subject string, i int) {
		done := make(chan struct{})
		c.stream.view("writer").Append(subject, []byte(fmt.Sprint(i)), "", func(uint64, bool, error) { close(done) })
		<-done
	}
	for i := range 50 {
		store(Subject("lab"), i)
		store(Subject("other"), i)
	}
	// While the tail reads the past, more is stored: the follower brings
	// it too, and the tail hands it once, after the past.
	var once sync.Once
	c.stream.scanned = func() {
		once.Do(func() {
			for i := 50; i < 60; i++ {
				store(Subject("lab"), i)
			}
		})
	}
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := f.Follow(ctx, "lab", []string{Subject("lab")}, func(subject string, m history.StoredMsg, _ *Burst) {
		mu.Lock()
		got = append(got, string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Stop()
	mu.Lock()
	past := len(got)
	mu.Unlock()
	if past < 50 {
		t.Fatalf("Follow returned with %d of the 50 messages of the past handed", past)
	}
	for i := 60; i < 100; i++ {
		store(Subject("lab"), i)
		store(Subject("other"), i)
	}
	waitFor(t, "the 100 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 100
	})
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 100 {
		t.Fatalf("the tail handed %d messages, want 100: %v", len(got), got)
	}
	for i, s := range got {
		if s != fmt.Sprint(i) {
			t.Fatalf("message %d is %s: out of order, twice, or another pod's", i, s)
		}
	}
	// Stopped, it hands nothing more.
	tl.Stop()
	store(Subject("lab"), 100)
	time.Sleep(50 * time.Millisecond)
	if len(got) != 100 {
		t.Fatal("a stopped tail handed a message")
	}
}

// TestPodClosedWhileReadingItsPast: a pod removed while it reads its past
// (the joiner that opened it gave up: it is idle) does not stay the
// follower's: its tail ends with it, and a pod of the same name opened
// after it is handed what is stored next. Before the fix, the closed pod
// kept its tail, and its live subscription, for nothing.
func TestPodClosedWhileReadingItsPast(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	var once sync.Once
	opened := make(chan *Pod, 1)
	c.stream.scanned = func() {
		// Within the first opening's Follow, once its past is read.
		once.Do(func() { n.RemoveIdle(<-opened) })
	}
	first, e := n.Pod("lab")
	if e != nil {
		t.Fatal(e)
	}
	opened <- first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.WaitReady(ctx); err == nil {
		t.Fatal("a pod closed while it read its past opened")
	}
	n.followMu.Lock()
	f := n.follow
	n.followMu.Unlock()
	f.mu.RLock()
	tl := f.tails[Subject("lab")]
	f.mu.RUnlock()
	if tl != nil {
		t.Fatal("the closed pod's tail is still the follower's")
	}
	second, err := n.readyPod(ctx, "lab")
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the closed pod was handed again")
	}
}
