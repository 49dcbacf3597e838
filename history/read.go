package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is one stored frame.
type Msg struct {
	Seq  uint64
	Time int64 // unix nanoseconds: when the stream stored it
	Data []byte
}

// readBatch and readBatchBytes bound one batched read: a few round trips
// for the largest replay, and a bounded burst of memory for each.
const (
	readBatch      = 256
	readBatchBytes = 4 << 20
)

// directGetRequest is JetStream's direct get (nats-server 2.11 and later):
// up to Batch messages of one subject from Seq on, answered by any replica
// without a consumer. nats.go has no call for the batched form, so it is
// asked here; its answer is a run of messages ended by a 204 EOB status.
type directGetRequest struct {
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// MissingError is returned by Read when a sequence it was asked for is
// not in the stream (discarded by a limit meanwhile); the ones before it
// were read.
type MissingError struct{ Seq uint64 }

func (e *MissingError) Error() string {
	return fmt.Sprintf("history: entry %d was discarded before it was read", e.Seq)
}

// Read calls fn, in order, with every frame stored on subject whose
// sequence is in want (ascending), reading the stream from want[0] up to
// the last of them. A replica that answers before it has caught up with
// the leader is asked again, briefly; a sequence still absent then is a
// *MissingError.
func (s *Store) Read(ctx context.Context, subject string, want []uint64, fn func(Msg) error) error {
	deadline := time.Now().Add(lagWait)
	for len(want) > 0 {
		got, err := s.readOnce(ctx, subject, want, fn)
		if err != nil {
			return err
		}
		want = want[got:]
		if got > 0 || len(want) == 0 {
			deadline = time.Now().Add(lagWait)
			continue
		}
		// Nothing of what is wanted came back: either it is gone, or the
		// replica that answered has not caught up yet.
		if time.Now().After(deadline) {
			return &MissingError{Seq: want[0]}
		}
		if err := s.waitFor(ctx, want[0]); err != nil {
			return err
		}
	}
	return nil
}

// lagWait bounds how long Read waits for a replica to catch up.
const lagWait = 2 * time.Second

// readOnce reads one batch from want[0] and reports how many wanted
// sequences it delivered.
func (s *Store) readOnce(ctx context.Context, subject string, want []uint64, fn func(Msg) error) (int, error) {
	span := want[len(want)-1] - want[0] + 1
	req, _ := json.Marshal(directGetRequest{Seq: want[0], NextFor: subject, Batch: int(min(span, readBatch)), MaxBytes: readBatchBytes})
	inbox := s.nc.NewRespInbox()
	ch := make(chan *nats.Msg, readBatch+2)
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return 0, fmt.Errorf("history: read: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+StreamName, inbox, req); err != nil {
		return 0, fmt.Errorf("history: read: %w", err)
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	got := 0
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return got, ctx.Err()
		case <-timeout.C:
			return got, errors.New("history: read: no answer from the stream within 5s")
		}
		if status := m.Header.Get("Status"); status != "" {
			// 204 ends a batch; 404 means nothing from there on.
			if status == "204" || status == "404" {
				return got, nil
			}
			return got, fmt.Errorf("history: read: status %s %s", status, m.Header.Get("Description"))
		}
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if seq == 0 {
			return got, errors.New("history: read: an answer without a sequence")
		}
		if got < len(want) && want[got] < seq {
			// A wanted sequence was skipped: it is no longer there.
			return got, &MissingError{Seq: want[got]}
		}
		if got < len(want) && want[got] == seq {
			ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
			if err := fn(Msg{Seq: seq, Time: ts.UnixNano(), Data: m.Data}); err != nil {
				return got, err
			}
			got++
			if got == len(want) {
				return got, nil
			}
		}
	}
}

// waitFor pauses before Read asks again, unless the stream's first
// sequence is past seq: then it is gone for good.
func (s *Store) waitFor(ctx context.Context, seq uint64) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if info.State.FirstSeq > seq {
		return &MissingError{Seq: seq}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Millisecond):
		return nil
	}
}
