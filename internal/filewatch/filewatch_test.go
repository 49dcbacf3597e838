package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestChanged: a file rewritten (another size), renamed into place (as a
// Kubernetes Secret is updated), removed, or created where there was none
// is a change; a file left alone is not.
func TestChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.json")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "one")
	var s Seen
	s.Read(path)
	if s.Changed() {
		t.Fatal("a file left alone changed")
	}
	write(path, "three")
	if !s.Changed() {
		t.Fatal("a rewritten file did not change")
	}
	s.Read(path)
	next := filepath.Join(dir, "next")
	write(next, "three") // same size, another file
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if !s.Changed() {
		t.Fatal("a file renamed into place did not change")
	}
	s.Read(path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !s.Changed() {
		t.Fatal("a removed file did not change")
	}
	s.Read(path)
	if s.Changed() {
		t.Fatal("a file still missing changed")
	}
	write(path, "back")
	if !s.Changed() {
		t.Fatal("a file that appeared did not change")
	}
}

// TestPoll: reload runs when changed says so, until ctx ends.
func TestPoll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var reloads atomic.Int32
	done := make(chan struct{})
	go func() {
		Poll(ctx, time.Millisecond, func() bool { return true }, func() {
			if reloads.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Poll did not return when its context ended")
	}
	if n := reloads.Load(); n < 3 {
		t.Fatalf("%d reloads", n)
	}
}
