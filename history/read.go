package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readBatch and readBatchBytes bound one batched read (Stream.batch is
// readBatch but in benchmarks).
//
// A node that has just started opens its pods at once (a storm of
// members resuming there), and each opening reads the pod's whole past
// from a store whose blocks load from disk. A pod's messages lie in every
// block of the stream that all pods share. With 256 messages a batch,
// each batch goes through every block; with 32, the pods' reads go
// through the stream together, a few blocks at a time (what we take to
// be why they are so much faster: the store keeps few blocks loaded, for
// seconds). A replica also stores a message only once the reads under way
// on it are done (JetStream isolates reads from writes), so that where it
// leads the stream every node's writer waits for them. In issue 38's
// full-size run 34 a restarted node's reads took seconds a batch, its
// members' dials timed out, and the stream answered late.
// BenchmarkAcksUnderReads, 1,000 pods of 200 messages read at once after
// a restart, one run: with 32, every pod read in 22 s, the longest
// acknowledgement meanwhile 0.3 s; with 256, 857 of the 1,000 pods not
// read within the 30 s an opening waits, the longest acknowledgement
// 1.0 s. One read alone, on a stream at rest, takes 2.2 times as long
// (BenchmarkReadReplay), which the node's cache mostly spares.
const (
	readBatch      = 32
	readBatchBytes = 4 << 20
)

// noAnswerWait is how long a read whose caller sets no deadline waits for
// the stream's first answer.
const noAnswerWait = 5 * time.Second

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

// Read calls fn, in order, with every message stored on subject whose
// sequence is in want (ascending), reading the stream from want[0] up to
// the last of them. A replica answers direct gets from 90 % caught up
// (a node started again is one, and a follower under load lags the
// leader by a few messages), so a wanted sequence that the replica which
// answered lacks is asked of the stream's leader: a sequence the leader
// lacks too is a *MissingError.
//
// What the node's cache holds (Config.CacheBytes) is taken from it, the
// rest read from the stream and kept there.
func (s *Stream) Read(ctx context.Context, subject string, want []uint64, fn func(StoredMsg) error) error {
	if s.cache == nil {
		return s.readStream(ctx, subject, want, fn)
	}
	var hits []StoredMsg
	var misses []uint64
	for _, seq := range want {
		if m, ok := s.cache.Get(subject, seq, nil); ok {
			hits = append(hits, m)
		} else {
			misses = append(misses, seq)
		}
	}
	// In the order of want: the hits before each message read, then it.
	next := func(before uint64) error {
		for len(hits) > 0 && hits[0].Seq < before {
			if err := fn(hits[0]); err != nil {
				return err
			}
			hits = hits[1:]
		}
		return nil
	}
	err := s.readStream(ctx, subject, misses, func(m StoredMsg) error {
		s.cache.Put(subject, m)
		if err := next(m.Seq); err != nil {
			return err
		}
		return fn(m)
	})
	if err != nil {
		var missing *MissingError
		if errors.As(err, &missing) {
			// The ones before it were read, as Read promises.
			if err := next(missing.Seq); err != nil {
				return err
			}
		}
		return err
	}
	return next(math.MaxUint64)
}

// readStream is Read without the cache.
func (s *Stream) readStream(ctx context.Context, subject string, want []uint64, fn func(StoredMsg) error) error {
	for len(want) > 0 {
		got := 0
		n := int(min(want[len(want)-1]-want[0]+1, uint64(s.batch)))
		_, err := s.readBatch(ctx, subject, want[0], n, func(_ string, m StoredMsg) (bool, error) {
			if want[got] < m.Seq {
				// A wanted sequence was skipped: it is no longer there.
				return false, &MissingError{Seq: want[got]}
			}
			if want[got] == m.Seq {
				if err := fn(m); err != nil {
					return false, err
				}
				got++
				if got == len(want) {
					return false, nil
				}
			}
			return true, nil
		})
		want = want[got:]
		if err != nil {
			return err
		}
		if got > 0 || len(want) == 0 {
			continue
		}
		// Nothing of what is wanted came back: either it is gone, or the
		// replica that answered is behind. The leader says.
		if s.cfg.Replicas <= 1 {
			return &MissingError{Seq: want[0]}
		}
		m, err := s.leaderNext(ctx, subject, want[0])
		if err != nil {
			return err
		}
		if m == nil || m.Seq != want[0] {
			return &MissingError{Seq: want[0]}
		}
		if err := fn(*m); err != nil {
			return err
		}
		want = want[1:]
	}
	return nil
}

// Scan calls fn with every message stored on subjects from sequence from
// on, in the stream's order, and the subject it is on (subjects may hold
// a wildcard): one batched read per subject at a time, merged by
// sequence, so that a pod's whole past never sits in memory.
func (s *Stream) Scan(ctx context.Context, subjects []string, from uint64, fn func(subject string, m StoredMsg) error) error {
	cursors := make([]*cursor, len(subjects))
	for i, subj := range subjects {
		cursors[i] = &cursor{s: s, subject: subj, next: max(from, 1)}
	}
	for {
		var low *cursor
		for _, c := range cursors {
			m, err := c.peek(ctx)
			if err != nil {
				return err
			}
			if m != nil && (low == nil || m.Seq < low.buf[0].Seq) {
				low = c
			}
		}
		if low == nil {
			return nil
		}
		m, subject := low.buf[0], low.on[0]
		low.buf, low.on = low.buf[1:], low.on[1:]
		if err := fn(subject, m); err != nil {
			return err
		}
	}
}

// cursor reads one subject's messages ahead, a batch at a time.
type cursor struct {
	s       *Stream
	subject string
	next    uint64
	buf     []StoredMsg
	on      []string // the subject each of buf is on
	done    bool
}

// wildcardBatch is a batch of a subject with a wildcard ("mcpp.pod.>",
// every pod's): the stream finds its messages one after the other, in
// a block or two, where a batch of one pod's subject is found across
// every block (readBatch). A scan of 20,000 messages took 140 ms in
// batches of 1,024 and 194 ms in batches of 256 (one run, medians of 3;
// BenchmarkReadReplay/every-pod); readBatchBytes bounds it too.
const wildcardBatch = 1024

func (c *cursor) peek(ctx context.Context) (*StoredMsg, error) {
	if len(c.buf) == 0 && !c.done {
		var got []StoredMsg
		var on []string
		n := c.s.batch
		if strings.ContainsAny(c.subject, "*>") {
			n = wildcardBatch
		}
		more, err := c.s.readBatch(ctx, c.subject, c.next, n, func(subject string, m StoredMsg) (bool, error) {
			c.s.cache.Put(subject, m)
			got, on = append(got, m), append(on, subject)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		if len(got) > 0 {
			c.next = got[len(got)-1].Seq + 1
		}
		if !more && c.s.cfg.Replicas > 1 {
			// The replica that answered has nothing more; it may be
			// behind the leader (a replica answers direct gets from 90 %
			// caught up: a node started again is one, and any follower
			// under load is a few messages behind). The leader says, and
			// the next batch is asked of a replica again.
			subject, m, err := c.s.leaderNextOn(ctx, c.subject, c.next)
			if err != nil {
				return nil, err
			}
			if m != nil {
				got, on, more = append(got, *m), append(on, subject), true
				c.next = m.Seq + 1
			}
		}
		c.done = !more
		c.buf, c.on = got, on
	}
	if len(c.buf) == 0 {
		return nil, nil
	}
	return &c.buf[0], nil
}

// leaderNext is the first message stored on subject from seq on, asked of
// the stream's leader (JetStream's message get, not a direct get that any
// replica answers), or nil when there is none.
func (s *Stream) leaderNext(ctx context.Context, subject string, seq uint64) (*StoredMsg, error) {
	_, m, err := s.leaderNextOn(ctx, subject, seq)
	return m, err
}

// leaderNextOn is leaderNext, and the subject the message is on (subject
// may be a wildcard).
func (s *Stream) leaderNextOn(ctx context.Context, subject string, seq uint64) (string, *StoredMsg, error) {
	req, _ := json.Marshal(directGetRequest{Seq: seq, NextFor: subject})
	m, err := s.reader().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+StreamName, req)
	if err != nil {
		return "", nil, fmt.Errorf("history: read from the leader: %w", err)
	}
	return parseMsgGet(m.Data)
}

// leaderAnswer is the leader's answer for one sequence of leaderNextMany:
// the first message on the subject from there on (nil: none), or err.
type leaderAnswer struct {
	subject string
	m       *StoredMsg
	err     error
}

// leaderNextMany asks the stream's leader for the first message from
// each of the k sequences from seq on, all at once (the leader answers a
// message get with one message), and returns its answers in the order of
// the sequences; one not answered in time has an error. A follower
// reading through a replica still catching up gets k messages from the
// leader in about the time of one (issue 38's full-size runs: one at a
// time, a node restarted shortly before stayed behind the stream).
func (s *Stream) leaderNextMany(ctx context.Context, subject string, seq uint64, k int) []leaderAnswer {
	out := make([]leaderAnswer, k)
	nc := s.reader()
	inbox := nats.NewInbox() // not under the response inbox (above readBatch)
	ch := make(chan *nats.Msg, k)
	sub, err := nc.ChanSubscribe(inbox+".*", ch)
	if err != nil {
		for i := range out {
			out[i].err = fmt.Errorf("history: read from the leader: %w", err)
		}
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	asked := 0
	for i := range k {
		req, _ := json.Marshal(directGetRequest{Seq: seq + uint64(i), NextFor: subject})
		if err := nc.PublishRequest("$JS.API.STREAM.MSG.GET."+StreamName, inbox+"."+strconv.Itoa(i), req); err != nil {
			out[i].err = fmt.Errorf("history: read from the leader: %w", err)
			continue
		}
		out[i].err = errors.New("history: read from the leader: no answer")
		asked++
	}
	for ; asked > 0; asked-- {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return out
		}
		i, err := strconv.Atoi(m.Subject[len(inbox)+1:])
		if err != nil || i < 0 || i >= k {
			continue
		}
		out[i].subject, out[i].m, out[i].err = parseMsgGet(m.Data)
	}
	return out
}

// parseMsgGet reads the leader's answer to a message get: the message and
// its subject, nothing (404: none from there on), or an error.
func parseMsgGet(data []byte) (string, *StoredMsg, error) {
	var r struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", nil, fmt.Errorf("history: read from the leader: %w", err)
	}
	switch {
	case r.Error != nil && r.Error.Code == 404:
		return "", nil, nil
	case r.Error != nil:
		return "", nil, fmt.Errorf("history: read from the leader: %s", r.Error.Description)
	case r.Message == nil:
		return "", nil, errors.New("history: read from the leader: no message in the answer")
	}
	return r.Message.Subject, &StoredMsg{Seq: r.Message.Seq, Time: r.Message.Time.UnixNano(), Data: r.Message.Data}, nil
}

// The answers of a read that subscribes to them itself (readBatch,
// leaderNextMany) go to an inbox of their own (nats.NewInbox), never
// under the connection's response inbox (NewRespInbox): nats.go answers
// its requests through one subscription to every subject under that
// prefix, which then got each answer of every read as well, for nobody,
// and under issue 38's full-size faults fell behind ("slow consumer")
// and dropped the answers of the requests waiting on it
// (TestReadBatchAnswersOnce).

// readBatch asks for up to n messages of subject (a wildcard too) from seq
// on and calls fn with each, and the subject it is on, until it returns
// false. more reports whether the stream held more after the batch.
func (s *Stream) readBatch(ctx context.Context, subject string, seq uint64, n int, fn func(subject string, m StoredMsg) (bool, error)) (more bool, err error) {
	req, _ := json.Marshal(directGetRequest{Seq: seq, NextFor: subject, Batch: n, MaxBytes: readBatchBytes})
	nc := s.reader()
	inbox := nats.NewInbox() // not under the response inbox (above readBatch)
	ch := make(chan *nats.Msg, n+2)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return false, fmt.Errorf("history: read: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+StreamName, inbox, req); err != nil {
		return false, fmt.Errorf("history: read: %w", err)
	}
	// A read may wait as long as its caller does: on a loaded node a
	// replica answers a batch in seconds, and a read given up on is read
	// again from its start (a pod opened again, a replay resumed), which
	// only adds to the load (issue 38's full-size runs). Without a
	// deadline, noAnswerWait.
	wait := noAnswerWait
	if d, ok := ctx.Deadline(); ok {
		wait = max(wait, time.Until(d))
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timeout.C:
			return false, fmt.Errorf("history: read: no answer from the stream within %v", wait.Round(time.Millisecond))
		}
		if status := m.Header.Get("Status"); status != "" {
			// 204 ends a batch (Nats-Num-Pending says what is left); 404
			// means nothing from there on.
			if status == "204" {
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return pending > 0, nil
			}
			if status == "404" {
				return false, nil
			}
			return false, fmt.Errorf("history: read: status %s %s", status, m.Header.Get("Description"))
		}
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if seq == 0 {
			return false, errors.New("history: read: an answer without a sequence")
		}
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		goOn, err := fn(m.Header.Get(jetstream.SubjectHeader), StoredMsg{Seq: seq, Time: ts.UnixNano(), Data: m.Data})
		if err != nil || !goOn {
			return false, err
		}
	}
}
