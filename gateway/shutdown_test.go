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
	cfg := DefaultConfig()
	cfg.History = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, refusal := g.pod("dead-pod")
	if refusal != nil {
		t.Fatal(refusal)
	}
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
