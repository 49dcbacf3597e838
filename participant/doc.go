// Package participant is one WebSocket connection in one pod: who it is
// (id, capabilities, the protocol it speaks), what it wants (its filter) and
// what is on its way to it (a bounded send queue, written by one writer at
// a time).
//
// The pod's fan-out never blocks on a participant: Enqueue either queues
// the shared bytes of an envelope or, when the queue is full, cuts the
// participant as a slow consumer (close code 4008), and one Flush at the
// end of the fan-out's burst has what it queued written. Memory per
// connection is so bounded by the queue's limits (a number of messages and
// their bytes), and one stalled reader cannot slow the others.
//
// One concern a file, in the order a message meets them: read.go reads
// the participant's messages for the pod (ReadLoop), participant.go is who
// it is and what it wants, queue.go what is on its way to it, write.go its
// writer, which frames what is queued itself (frame.go) and writes it on
// the connection the upgrade hijacked, whose buffers it keeps small
// (netconn.go), ping.go the janitor's watch of it, close.go its end. The
// WebSocket library reads frames, answers pings and closes.
package participant
