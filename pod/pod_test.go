package pod

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// TestJoinAndFanOut: a joiner's welcome lists who is there; an envelope
// reaches every other member (not its sender, who did not ask for echo)
// as sent, and only the members whose filter admits it.
func TestJoinAndFanOut(t *testing.T) {
	n, _ := testNode(t, 0, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	if w := alice.next(); w["kind"] != wire.KindWelcome {
		t.Fatalf("alice's first message: %v", w)
	}
	bob := join(t, p, "bob", joinOpts{})
	welcome := bob.next()
	others := welcome["payload"].(map[string]any)["participants"].([]any)
	if len(others) != 1 || others[0].(map[string]any)["id"] != "alice" {
		t.Fatalf("bob's welcome lists %v, want alice", others)
	}
	if v := alice.next(); v["kind"] != wire.KindPresence {
		t.Fatalf("alice: %v, want bob's join", v)
	}
	carol := join(t, p, "carol", joinOpts{query: "contexts=none"})
	carol.next()

	alice.send(chat("m1", 1))
	alice.send(map[string]any{"id": "r1", "kind": "reasoning/step", "context": map[string]any{"id": "r", "type": "reasoning"}})
	if v := bob.nextOf(); v["id"] != "m1" || v["from"] != "alice" {
		t.Fatalf("bob: %v, want m1 from alice", v)
	}
	if v := bob.nextOf(); v["id"] != "r1" {
		t.Fatalf("bob: %v, want r1", v)
	}
	if v := carol.nextOf(); v["id"] != "m1" {
		t.Fatalf("carol: %v, want m1", v)
	}
	carol.quiet(100 * time.Millisecond) // not r1: contexts=none
	alice.quiet(100 * time.Millisecond) // no echo
}

// TestReplayMeetsLive: a joiner that asks for the whole history while
// another member sends gets every envelope once, in order: the replay
// ends exactly where its live envelopes begin.
func TestReplayMeetsLive(t *testing.T) {
	n, _ := testNode(t, 1000, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	const total = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			alice.send(chat(fmt.Sprint("m", i), i))
		}
	}()
	time.Sleep(time.Millisecond) // let some go before the join
	late := join(t, p, "late", joinOpts{want: HistoryWant{N: -1, Fold: true}})
	<-done
	w := late.next()
	replayed := int(w["payload"].(map[string]any)["history"].(map[string]any)["replayed"].(float64))
	for i := range total {
		v := late.nextOf()
		if got := payloadN(v); got != i {
			t.Fatalf("envelope %d is %d (%d replayed): a gap or a duplicate", i, got, replayed)
		}
	}
	late.quiet(100 * time.Millisecond)
	t.Logf("%d replayed, %d live", replayed, total-replayed)
}

// TestResumeWhileTheStreamIsBehind: the history stream has stored nothing
// of a burst yet (it is held), and a participant resumes after one of its
// envelopes: it gets exactly what came after, from the index, which keeps
// what the stream has not stored; once the stream stores it, the same
// resume reads the stream and gives the same.
func TestResumeWhileTheStreamIsBehind(t *testing.T) {
	n, mem := testNode(t, 1000, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	mem.Hold()
	for i := range 200 {
		alice.send(chat(fmt.Sprint("m", i), i))
	}
	if n.Writer.Pending() == 0 {
		t.Fatal("the writer has stored the burst: the stream is not behind")
	}
	check := func(who string) {
		r := join(t, p, who, joinOpts{want: HistoryWant{Resume: "m149", Fold: true}})
		w := r.next()
		h := w["payload"].(map[string]any)["history"].(map[string]any)
		if h["resumed"] != true || h["replayed"] != float64(50) {
			t.Fatalf("%s: welcome's history %v, want resumed with 50", who, h)
		}
		for i := 150; i < 200; i++ {
			if got := payloadN(r.nextOf()); got != i {
				t.Fatalf("%s: got %d, want %d", who, got, i)
			}
		}
		r.quiet(100 * time.Millisecond)
	}
	check("behind")
	mem.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Writer.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("stored")
}

// TestThrottle: a sender waits while the history writer holds more than
// the node's flight budget, and goes on once the stream takes it.
func TestThrottle(t *testing.T) {
	n, mem := testNode(t, 1000, func(c *Config) { c.FlightBytes = 4 << 10 })
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	mem.Hold()
	for i := range 100 {
		alice.send(chat(fmt.Sprint("m", i), i))
	}
	waited := make(chan struct{})
	go func() {
		p.Throttle(alice.burst)
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("the sender did not wait, with the writer over its budget")
	case <-time.After(200 * time.Millisecond):
	}
	mem.Release()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the sender still waits after the stream took everything")
	}
}

// TestSlowReaderCut: a member that stops reading is cut (4008) when its
// queue fills, and the others get everything.
func TestSlowReaderCut(t *testing.T) {
	n, _ := testNode(t, 0, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	bob := join(t, p, "bob", joinOpts{})
	bob.next()
	cut := make(chan string, 1)
	slow := join(t, p, "slow", joinOpts{sendQueue: 8, noRead: true, onCut: func(why string) { cut <- why }})
	// Once cut it reads again: what its socket held, then the close
	// frame (the gateway gives the closing handshake 5 s).
	closed := make(chan error, 1)
	go func() {
		<-cut
		var err error
		for err == nil {
			_, _, err = slow.conn.Read(context.Background())
		}
		closed <- err
	}()
	// More than the sockets' buffers hold, in small envelopes.
	const total = 300
	big := string(make([]byte, 16<<10))
	for i := range total {
		alice.send(map[string]any{"id": fmt.Sprint("m", i), "kind": "chat", "payload": map[string]any{"n": i, "pad": big}})
	}
	for i := range total {
		if got := payloadN(bob.nextOf()); got != i {
			t.Fatalf("bob: got %d, want %d", got, i)
		}
	}
	err := <-closed
	if code := websocketCode(err); code != int(wire.CloseSlowConsumer) {
		t.Fatalf("slow: closed with %v, want 4008", err)
	}
}
