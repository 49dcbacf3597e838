package pod

import (
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// TestBurstSpansPods: one Burst held across envelopes of two pods (as a
// dispatcher goroutine holds one for every pod it serves) keeps the
// writers of both pods' members waiting until it is flushed; then each
// member receives what was queued for it, in order. Without a burst the
// writers are woken as the order lock goes.
func TestBurstSpansPods(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	a, b := openPod(t, n, "a"), openPod(t, n, "b")
	bob, dave := join(t, a, "bob", joinOpts{}), join(t, b, "dave", joinOpts{})
	for _, m := range []*member{bob, dave} {
		for m.nextOf()["kind"] != wire.KindWelcome {
		}
	}
	alice, carol := sender(a, "alice", wire.Kinds("chat")...), sender(b, "carol", wire.Kinds("chat")...)
	burst := new(Burst)
	for i := range 3 {
		for _, to := range []struct {
			p *Pod
			s *Sender
		}{{a, alice}, {b, carol}} {
			if c := handleIn(t, to.p, to.s, burst, chat(to.s.ID+string(rune('0'+i)), i)); c != "" {
				t.Fatalf("%s refused: %s", to.s.ID, c)
			}
		}
	}
	bob.quiet(300 * time.Millisecond)
	dave.quiet(0)
	burst.Flush()
	for _, m := range []*member{bob, dave} {
		for i := range 3 {
			if v := m.nextEnv(); payloadN(v) != i || v["kind"] != "chat" {
				t.Fatalf("%s: envelope %d is %v", m.id, i, v)
			}
		}
	}
	if c := handle(t, a, alice, chat("alone", 9)); c != "" {
		t.Fatal(c)
	}
	if v := bob.nextEnv(); v["id"] != "alone" {
		t.Fatalf("bob, after an envelope in no burst: %v", v)
	}
}
