package gateway

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestShutdownDeadPod: a pod removed while the drain waits for its log
// (its last participant left) is not waited for: the drain ends at once,
// not at the shutdown timeout.
func TestShutdownDeadPod(t *testing.T) {
	g, p := newPodForTest(t, "dead-pod", 0)
	// A frame this node published that its log will never hand back.
	p.published.Add(1)

	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	time.Sleep(200 * time.Millisecond) // the drain is waiting for the pod
	g.maybeRemovePod(p)
	if !p.isDead() {
		t.Fatal("the idle pod was not removed")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the drain waits for a pod that was removed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
}

// TestShutdownEndsDrainWaiters: an idle pod that waits to be removed
// until its frames come back from the history stream (removeWhenDrained)
// stops waiting when the gateway shuts down: the goroutine ends instead of
// holding the pod, and through it the gateway and its NATS server, for
// the life of the process.
func TestShutdownEndsDrainWaiters(t *testing.T) {
	g, p := newPodForTest(t, "waiting-pod", DefaultConfig().History)
	if _, stream := p.log.(*streamLog); !stream {
		t.Fatal("the default configuration has no history stream")
	}
	// A frame this node published that its log will never hand back.
	p.published.Add(1)
	g.maybeRemovePod(p)
	if !p.awaitingDrain.Load() {
		t.Fatal("the idle pod does not wait for its frame")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = g.Shutdown(ctx) // the drain gives up on the frame at the deadline
	for deadline := time.Now().Add(5 * time.Second); p.awaitingDrain.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pod still waits for its frame after the shutdown")
		}
	}
}

// newPodForTest starts a gateway (history as given, logs discarded) and
// opens a pod on it.
func newPodForTest(t *testing.T, name string, history int) (*Gateway, *Pod) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.History = history
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, refusal := g.pod(name)
	if refusal != nil {
		t.Fatal(refusal)
	}
	return g, p
}
