package pod

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mcpp/gateway/internal/wait"
)

// TestBrokers holds both brokers to one contract, the NATS one on an
// embedded NATS server: what one node publishes reaches every subscriber,
// this node's too, in the order published, on a goroutine of the
// broker's (Publish does not wait for it); an unsubscribed function is
// not called again; a request is answered by the subscriber of its
// subject, or fails at once when there is none; a closed broker's
// subscriptions hear nothing more.
func TestBrokers(t *testing.T) {
	for _, kind := range []string{"memory", "nats"} {
		t.Run(kind, func(t *testing.T) {
			var a, b Broker
			switch kind {
			case "memory":
				bus := NewMemoryBus()
				a, b = bus.Broker(), bus.Broker()
			case "nats":
				nc := benchServer(t, &server.Options{ServerName: "brokers", DontListen: true})
				a, b = NewNATSBroker(nc), NewNATSBroker(nc)
			}
			defer a.Close()
			defer b.Close()
			brokerContract(t, a, b)
		})
	}
}

func brokerContract(t *testing.T, a, b Broker) {
	type got struct {
		who  string
		data string
	}
	var mu sync.Mutex
	var seen []got
	record := func(who string) func(BrokerMsg) {
		return func(m BrokerMsg) {
			mu.Lock()
			seen = append(seen, got{who, string(m.Data)})
			mu.Unlock()
		}
	}
	subA, err := a.Subscribe("mcpp.live.lab", record("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe("mcpp.live.lab", record("b")); err != nil {
		t.Fatal(err)
	}
	count := func(who string) (n int, inOrder bool) {
		mu.Lock()
		defer mu.Unlock()
		inOrder = true
		for _, g := range seen {
			if g.who == who {
				if g.data != fmt.Sprint(n) {
					inOrder = false
				}
				n++
			}
		}
		return n, inOrder
	}
	for i := range 100 {
		if err := a.Publish("mcpp.live.lab", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every message at both subscribers", func() bool {
		na, _ := count("a")
		nb, _ := count("b")
		return na == 100 && nb == 100
	})
	for _, who := range []string{"a", "b"} {
		if _, inOrder := count(who); !inOrder {
			t.Fatalf("%s got the messages out of order", who)
		}
	}

	// Publish does not wait for the subscribers: their functions run on
	// the broker's goroutines, never the publisher's, so one that waits
	// for the publisher to go on does not hold it up.
	goOn, waited := make(chan struct{}), make(chan bool, 1)
	if _, err := b.Subscribe("mcpp.live.wait", func(BrokerMsg) {
		select {
		case <-goOn:
			waited <- false
		case <-time.After(5 * time.Second):
			waited <- true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("mcpp.live.wait", nil); err != nil {
		t.Fatal(err)
	}
	close(goOn)
	select {
	case blocked := <-waited:
		if blocked {
			t.Fatal("Publish waited for the subscriber's function: it ran on the publisher's goroutine")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber never got the message")
	}

	subA.Unsubscribe()
	if err := b.Publish("mcpp.live.lab", []byte("100")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's 101st", func() bool { n, _ := count("b"); return n == 101 })
	if n, _ := count("a"); n != 100 {
		t.Fatalf("a heard %d after it unsubscribed", n-100)
	}

	if _, err := b.Subscribe("mcpp.nodes.bodies.b", func(m BrokerMsg) {
		_ = b.Publish(m.Reply, append([]byte("body of "), m.Data...))
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer, err := a.Request(ctx, "mcpp.nodes.bodies.b", []byte("7"))
	if err != nil || string(answer) != "body of 7" {
		t.Fatalf("request: %q, %v", answer, err)
	}
	if _, err := a.Request(ctx, "mcpp.nodes.bodies.gone", []byte("7")); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("a request nobody subscribes to: %v, want ErrNoResponders", err)
	}

	b.Close()
	if err := a.Publish("mcpp.live.lab", []byte("101")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n, _ := count("b"); n != 101 {
		t.Fatalf("b heard %d after it closed", n-101)
	}
}

// waitFor waits, at most 5 s, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, 5*time.Second, what, cond)
}
