package pod

import (
	"sync"
	"sync/atomic"

	"github.com/mcpp/gateway/participant"
)

// Burst is what was queued in a pod's order while the writers of its
// members wait: the members something was queued for, each once, whose
// writers are to be woken when the burst ends (participant.Enqueue, then
// Flush), so that the burst goes out in one write per connection.
//
// The pod's order lock has one, the burst of one hold of the lock, which
// the fan-out fills (deliver) and which ends as the lock is let go
// (Pod.unlock). A burst may also span many holds of the lock, of one pod
// or several: the reader of a connection while it has more messages read,
// a POST's body, a dispatcher goroutine until its queues are empty. Its
// owner hands it to each hold (Pod.Handle, Pod.lockFor), the lock's burst
// is moved into it as the lock goes (Pod.unlockFor), and the writers are
// woken when its owner ends it (Flush). A Burst is its owner's goroutine's
// alone; the zero Burst is ready.
//
// seq numbers the burst (from the node's counter Node.burstSeq), and a
// member records the burst that last queued something for it
// (participant.BurstSeq), so that it is in the burst once however many
// envelopes were queued for it.
type Burst struct {
	members []*participant.Participant
	seq     uint64
}

// flushSmall is the most members flushUnlocking wakes from a list on its
// stack; a burst of more takes a list of flushLists (flushUnlockingLarge).
const flushSmall = 32

// flushKeep is the most members a burst's array (or a pooled list) keeps
// between flushes: a large pod's is given back.
const flushKeep = 4096

var flushLists = sync.Pool{New: func() any { return new([]*participant.Participant) }}

// open starts a burst: it takes the next number of seqs.
func (b *Burst) open(seqs *atomic.Uint64) { b.seq = seqs.Add(1) }

// within makes the lock's burst b part of held, a burst that spans
// several holds of the order lock: it takes held's number, opening held
// when it has none.
func (b *Burst) within(held *Burst, seqs *atomic.Uint64) {
	if held.seq == 0 {
		held.open(seqs)
	}
	b.seq = held.seq
}

// add puts r in the burst, once.
func (b *Burst) add(r *participant.Participant) {
	if r.BurstSeq != b.seq {
		r.BurstSeq = b.seq
		b.members = append(b.members, r)
	}
}

// handTo moves the burst's members to held, whose owner wakes them when
// it flushes.
func (b *Burst) handTo(held *Burst) {
	held.members = append(held.members, b.members...)
	clear(b.members)
	b.members = b.members[:0]
}

// Flush ends the burst: it wakes the writer of every member something was
// queued for in it. A nil Burst has nothing to flush.
func (b *Burst) Flush() {
	if b == nil {
		return
	}
	for i, r := range b.members {
		r.Flush()
		b.members[i] = nil
	}
	b.members = b.members[:0]
	if cap(b.members) > flushKeep {
		b.members = nil
	}
	b.seq = 0
}

// flushUnlocking empties the burst, lets mu go, and then wakes the writer
// of every member the burst held: the writers are woken outside the lock
// the members were queued under. Call it with mu held.
func (b *Burst) flushUnlocking(mu *sync.Mutex) {
	if len(b.members) == 0 {
		mu.Unlock()
		return
	}
	if len(b.members) > flushSmall {
		b.flushUnlockingLarge(mu)
		return
	}
	var small [flushSmall]*participant.Participant
	members := append(small[:0], b.members...)
	b.empty()
	mu.Unlock()
	for _, r := range members {
		r.Flush()
	}
}

// flushUnlockingLarge is flushUnlocking for a burst of more than
// flushSmall members: their list is a pooled one, not one allocated for
// each flush. Call it with mu held.
func (b *Burst) flushUnlockingLarge(mu *sync.Mutex) {
	list := flushLists.Get().(*[]*participant.Participant)
	members := append((*list)[:0], b.members...)
	b.empty()
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

// empty drops the burst's members, keeping its array up to flushKeep.
func (b *Burst) empty() {
	clear(b.members)
	b.members = b.members[:0]
	if cap(b.members) > flushKeep {
		b.members = nil
	}
}
