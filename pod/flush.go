package pod

import (
	"sync"
	"sync/atomic"

	"github.com/mcpp/gateway/participant"
)

// flushSet is the members something was queued for whose writers are
// still to be woken. A member's writer is woken once for all that a
// burst queued for it (participant.Enqueue, then Flush), so that the
// burst goes out in one write per connection. The pod's order lock has
// one, which the fan-out fills (deliver) and which is flushed as the
// lock is let go (Pod.unlock), or handed to a sender that holds its
// flushes (Sender.Hold, Pod.unlockFor), whose own set is flushed at the
// end of its burst (Sender.Flush: a reader that has no more messages
// read, the end of a dispatcher's burst).
//
// scope numbers the span one flush covers (participant.FlushMark, from
// the node's counter Node.scopes), so that a member is in a set once
// however many envelopes were queued for it in that span.
type flushSet struct {
	members []*participant.Participant
	scope   uint64
}

// flushSmall is the most members flushUnlocking wakes from a list on its
// stack; a set of more takes a list of flushLists (flushUnlockingLarge).
const flushSmall = 32

// flushKeep is the most members a set's array (or a pooled list) keeps
// between flushes: a large pod's is given back.
const flushKeep = 4096

var flushLists = sync.Pool{New: func() any { return new([]*participant.Participant) }}

// open starts a scope of the set's own.
func (f *flushSet) open(scopes *atomic.Uint64) { f.scope = scopes.Add(1) }

// share makes the set's scope that of held, a set that spans several
// holds of the order lock (a sender that holds its flushes), opening one
// for held when it has none.
func (f *flushSet) share(held *flushSet, scopes *atomic.Uint64) {
	if held.scope == 0 {
		held.open(scopes)
	}
	f.scope = held.scope
}

// add puts r in the set, once in its scope.
func (f *flushSet) add(r *participant.Participant) {
	if r.FlushMark != f.scope {
		r.FlushMark = f.scope
		f.members = append(f.members, r)
	}
}

// handTo moves the set's members to held, whose owner wakes them when it
// flushes.
func (f *flushSet) handTo(held *flushSet) {
	held.members = append(held.members, f.members...)
	clear(f.members)
	f.members = f.members[:0]
}

// flush wakes the writer of every member and empties the set; its scope
// ends with it.
func (f *flushSet) flush() {
	for i, r := range f.members {
		r.Flush()
		f.members[i] = nil
	}
	f.members = f.members[:0]
	if cap(f.members) > flushKeep {
		f.members = nil
	}
	f.scope = 0
}

// flushUnlocking empties the set, lets mu go, and then wakes the writer
// of every member the set held: the writers are woken outside the lock
// the members were queued under. Call it with mu held.
func (f *flushSet) flushUnlocking(mu *sync.Mutex) {
	if len(f.members) == 0 {
		mu.Unlock()
		return
	}
	if len(f.members) > flushSmall {
		f.flushUnlockingLarge(mu)
		return
	}
	var small [flushSmall]*participant.Participant
	members := append(small[:0], f.members...)
	f.empty()
	mu.Unlock()
	for _, r := range members {
		r.Flush()
	}
}

// flushUnlockingLarge is flushUnlocking for a set of more than flushSmall
// members: their list is a pooled one, not one allocated for each flush.
// Call it with mu held.
func (f *flushSet) flushUnlockingLarge(mu *sync.Mutex) {
	list := flushLists.Get().(*[]*participant.Participant)
	members := append((*list)[:0], f.members...)
	f.empty()
	mu.Unlock()
	for _, r := range members {
		r.Flush()
	}
	clear(members)
	if cap(members) <= flushKeep {
		*list = members[:0]
		flushLists.Put(list)
	}
}

// empty drops the set's members, keeping its array up to flushKeep.
func (f *flushSet) empty() {
	clear(f.members)
	f.members = f.members[:0]
	if cap(f.members) > flushKeep {
		f.members = nil
	}
}
