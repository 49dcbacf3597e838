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
