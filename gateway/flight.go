package gateway

import (
	"sync"
	"sync/atomic"
)

// flight bounds the bytes of envelopes this node has put into the history
// stream and not yet seen back from it, all pods together.
//
// The stream keeps --history-bytes for all pods and discards its oldest
// entries past that, whether every node's follower has read them or not.
// Entries in flight are the newest, so they are discarded only when the
// bytes in flight alone are over --history-bytes: with many pods flooding
// at once, each within its own backlog bound, that happens, and an entry
// discarded before the follower read it would never be delivered live.
// Holding the node's bytes in flight under its share of --history-bytes
// makes that impossible: a sender over the budget waits before its
// envelope is read on, and TCP slows it down, as the pod's own backlog
// bound does.
type flight struct {
	budget  int64 // 0: no bound (history off)
	used    atomic.Int64
	waiting atomic.Int32
	mu      sync.Mutex
	freed   chan struct{} // closed and replaced when bytes are given back
}

// acquire waits until n more bytes fit the budget, or until nothing else
// is in flight (one envelope larger than the budget still goes alone),
// and takes them. It returns what to give back to release.
func (f *flight) acquire(n int64) int64 {
	if f.budget == 0 {
		return 0
	}
	if u := f.used.Add(n); u <= f.budget || u == n {
		return n
	}
	f.used.Add(-n)
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	for {
		f.mu.Lock()
		if f.freed == nil {
			f.freed = make(chan struct{})
		}
		freed := f.freed
		f.mu.Unlock()
		if u := f.used.Add(n); u <= f.budget || u == n {
			return n
		}
		f.used.Add(-n)
		<-freed
	}
}

// add counts n bytes in flight without waiting: an envelope published
// under a reservation made by acquire.
func (f *flight) add(n int64) {
	if f.budget != 0 {
		f.used.Add(n)
	}
}

// release gives back n bytes (never below zero: a pod that closes gives
// back its backlog while a last frame of it may still be counted back).
func (f *flight) release(n int64) {
	if f.budget == 0 || n == 0 {
		return
	}
	for {
		u := f.used.Load()
		if f.used.CompareAndSwap(u, max(0, u-n)) {
			break
		}
	}
	if f.waiting.Load() > 0 {
		f.mu.Lock()
		if f.freed != nil {
			close(f.freed)
			f.freed = nil
		}
		f.mu.Unlock()
	}
}
