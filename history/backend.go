package history

import (
	"context"
	"errors"
	"fmt"
)

// StoredMsg is one stored message of a pod's history: a frame, or a batch of
// frames (Frames reads both).
type StoredMsg struct {
	Seq  uint64
	Time int64 // unix nanoseconds: when the stream stored it
	Data []byte
}

// Backend is where the pods' history is kept: one stream of messages,
// each on its pod's subject, numbered in the order they were stored.
// Stream is the JetStream one, which the gateway runs on; Memory keeps it
// in the process, so that the pod core can be tested without a NATS
// server, as Centrifuge's memory broker lets its hub be.
type Backend interface {
	// Append stores msg on subject, without waiting, and calls done with
	// its sequence once it is stored, or with the error that kept it from
	// being stored (a *RejectedError when the stream refused it for good;
	// any other error may pass if the message is sent again). done is
	// called once per Append, on a goroutine that must not be blocked for
	// long; in the order of the Appends from a stream of the node's own,
	// in any order from a replicated one (a duplicate is answered at
	// once). msgID, when not empty, names the
	// message: an Append of an id stored in the last two minutes stores
	// nothing, and done gets the first one's sequence, and duplicate set.
	// (A Stream of the node's own also takes a writer's whole round at
	// once, with one acknowledgement: roundBackend, round.go.)
	Append(subject string, msg []byte, msgID string, done func(seq uint64, duplicate bool, err error))
	// Read calls fn, in order, with the messages of subject at the
	// sequences in want (ascending, no repeats). A sequence that is no
	// longer there is a *MissingError; the ones before it were read. (A
	// Stream with a cache, Config.CacheBytes, still gives one it holds.)
	Read(ctx context.Context, subject string, want []uint64, fn func(StoredMsg) error) error
	// Scan calls fn, in the stream's order, with every message stored on
	// any of subjects from sequence from on, and the subject it is on (a
	// subject may be a wildcard: "mcpp.pod.>").
	Scan(ctx context.Context, subjects []string, from uint64, fn func(subject string, m StoredMsg) error) error
	// Follow calls fn, on one goroutine and in the stream's order, with
	// every message stored on subjects (a wildcard: "mcpp.pod.>") after
	// the call, until stop is called (follow.go). from is the first
	// sequence it hands on: everything below was stored before the call,
	// which a reader that wants it scans for, even if the stream stays
	// idle and fn is never called.
	Follow(ctx context.Context, subjects []string, fn func(subject string, m StoredMsg), onErr func(error)) (from uint64, stop func(), err error)
	// FirstSeq is the oldest sequence the stream still holds: what is
	// below it was discarded by --history-bytes or --history-age.
	FirstSeq(ctx context.Context) (uint64, error)
	// Ready reports whether the stream takes messages.
	Ready(ctx context.Context) error
}

// MissingError is returned by Read when a sequence it was asked for is
// not in the stream (discarded by a limit meanwhile, or never stored);
// the ones before it were read.
type MissingError struct{ Seq uint64 }

func (e *MissingError) Error() string {
	return fmt.Sprintf("history: entry %d is not in the stream (discarded, or never stored)", e.Seq)
}

// ErrInProcess is the stream's answer for a message whose id another copy
// of it is being stored under right now: not stored yet, nor refused. The
// writer sends it again a moment later, without holding, and is told
// then (a duplicate, stored once; or stored now).
var ErrInProcess = errors.New("history: a message of the same id is on its way into the stream")

// RejectedError is the stream's refusal of a message: sending it again
// would be refused again.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "history: the stream refused a message: " + e.Reason }
