package harness

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// reading is a connection read in the background until it ends: Client
// and Peer both keep how it ended, and differ only in what they do with
// each message.
type reading struct {
	ended chan struct{}
	mu    sync.Mutex
	err   error
}

func newReading() reading { return reading{ended: make(chan struct{})} }

// run reads conn until it ends, handing each message to take.
func (r *reading) run(conn FrameConn, take func([]byte)) {
	defer close(r.ended)
	for {
		b, err := conn.Read(context.Background(), nil)
		if err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		take(b)
	}
}

// CloseErr is how the connection ended (nil while it is open).
func (r *reading) CloseErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// IsOpen reports whether the connection is still open.
func (r *reading) IsOpen() bool {
	select {
	case <-r.ended:
		return false
	default:
		return true
	}
}

// waitClosed waits for the connection of id to end and returns its close
// code; it fails the test after d.
func (r *reading) waitClosed(t *testing.T, id string, d time.Duration) wire.CloseCode {
	t.Helper()
	select {
	case <-r.ended:
	case <-time.After(d):
		t.Fatalf("%s: connection still open after %v", id, d)
	}
	return closeCode(r.CloseErr())
}
