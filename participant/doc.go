// Package participant is one WebSocket connection in one pod: who it is
// (id, capabilities, the protocol it speaks), what it wants (its filter) and
// what is on its way to it (a bounded send queue drained by one writer).
//
// The pod's fan-out never blocks on a participant: Deliver either queues the
// shared bytes of an envelope or, when the queue is full, cuts the
// participant as a slow consumer (close code 4008). Memory per connection is
// so bounded by the queue's length times the message size, and one stalled
// reader cannot slow the others.
package participant
