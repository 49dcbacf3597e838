package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// A gateway node alone (no cluster, no --nats-url) runs the history stream
// in its own embedded server, and its writer is the only one that writes
// to it (Config.Own). The server stores the messages of one connection
// in the order they come, one after another, and a message published
// without a reply subject is stored just the same, unanswered. So the
// writer's round (what it found queued, packed into messages: writer.go)
// is published with one reply subject, on its last message: the answer
// for the last says where it is, and the others are the sequences just
// before it. That is one acknowledgement a round, where there was one a
// message, and most of what JetStream and nats.go allocated for each
// message was its acknowledgement (issue 39).
//
// What is sure is checked: the round's messages took the sequences just
// after the last one known (the previous answer's) up to the new one. When
// they did not (someone else published into the stream meanwhile, over
// --nats-port; the stream refused one of them, unanswered), or when the
// last one is refused, the stream is read back over that span, and each
// message of the round is found there by its subject and bytes (every
// frame holds its envelope's id or its live frame's sequence, so no two
// are alike): a message found is stored where it was found, one not found
// was not stored, and the writer sends it again, answered (the writer
// holds, as it does when a message is not acknowledged). A message with an
// id (Nats-Msg-Id) may be a duplicate, which the stream skips without
// taking a sequence: it is answered on its own.

// roundBackend is a Backend that takes a writer's whole round at once
// (Stream, for a stream of its own): the writer then keeps one round on
// its way at a time, and what comes meanwhile makes the next.
type roundBackend interface {
	// rounds reports whether appendRound is to be used.
	rounds() bool
	// linger is how long a pod's batch may wait for more of its frames
	// (0: it goes in the next round).
	linger() time.Duration
	// appendRound stores msgs, in order, and calls each one's done once,
	// in order, as Append does.
	appendRound(msgs []*batch)
}

func (s *Stream) rounds() bool { return s.cfg.Own }

// podLinger is how long the writer lets a pod's batch take more of its
// frames, where the history does not outlive the process (a node's own
// temporary store: Config.Temporary): one message for a second of a pod
// costs the stream what one envelope did. Nothing is lost by waiting
// (the process's end ends the history anyway), delivery never waits for
// it, and a wait for the history (Writer.WaitFor) sends what it waits for
// in the next round.
const podLinger = time.Second

func (s *Stream) linger() time.Duration {
	if s.cfg.Temporary {
		return podLinger
	}
	return 0
}

// appendRound publishes msgs in groups: a run of messages without an id,
// the last of the run answered for all of it, and each message with an id
// on its own, as is each the stream may refuse for its size (alone).
func (s *Stream) appendRound(msgs []*batch) {
	start := 0
	for i, b := range msgs {
		if i+1 < len(msgs) && s.groupable(b) && s.groupable(msgs[i+1]) {
			continue
		}
		s.appendGroup(msgs[start : i+1])
		start = i + 1
	}
}

// groupable reports whether b may go unanswered in a group: it has no id
// (the stream may skip a duplicate without a sequence), and the stream
// does not refuse it for its size (Config.MaxMsgSize). A message refused
// unanswered is found missing only when the count of the group's span
// falls short; a message of someone else's in the span (over
// --nats-port, which the gateway does not allow with rounds) would make
// up for it, and every message of the group would be told a sequence
// one off (TestRoundRefusedBesideAnotherWriter). What the stream may
// refuse otherwise (out of resources) cannot be told beforehand: the
// gateway keeps others from publishing into a stream of its own.
func (s *Stream) groupable(b *batch) bool {
	return b.id == "" && (s.cfg.MaxMsgSize <= 0 || len(b.data) <= int(s.cfg.MaxMsgSize))
}

// appendGroup publishes msgs, the last with a reply subject of its own,
// the others without.
func (s *Stream) appendGroup(msgs []*batch) {
	last := msgs[len(msgs)-1]
	if len(msgs) == 1 {
		s.Append(last.subject, last.data, last.id, last.done)
		return
	}
	g := s.newGroup(msgs)
	token := s.wait(pendingAck{group: g})
	for i, b := range msgs[:len(msgs)-1] {
		if err := s.nc.Publish(b.subject, b.data); err != nil {
			g.msgs = g.msgs[:i] // published, and so perhaps stored
			s.failGroup(token, g, fmt.Errorf("history: publish: %w", err))
			return
		}
	}
	if err := s.nc.PublishRequest(last.subject, s.reply(token), last.data); err != nil {
		s.failGroup(token, g, fmt.Errorf("history: publish: %w", err))
	}
}

// group is the messages one acknowledgement answers for, oldest first.
type group struct {
	msgs []*batch
}

// maxFreeGroups bounds the groups a Stream keeps for reuse: a round is
// one group, or a few, and one round is on its way at a time.
const maxFreeGroups = 16

// newGroup is a group of msgs (copied), a settled one reused when there
// is one.
func (s *Stream) newGroup(msgs []*batch) *group {
	s.mu.Lock()
	var g *group
	if n := len(s.groups); n > 0 {
		g = s.groups[n-1]
		s.groups = s.groups[:n-1]
	} else {
		g = &group{}
	}
	s.mu.Unlock()
	g.msgs = append(g.msgs[:0], msgs...)
	return g
}

// freeGroup keeps g, whose messages are all settled, for newGroup.
func (s *Stream) freeGroup(g *group) {
	clear(g.msgs)
	g.msgs = g.msgs[:0]
	s.mu.Lock()
	if len(s.groups) < maxFreeGroups {
		s.groups = append(s.groups, g)
	}
	s.mu.Unlock()
}

// settleGroup hears the answer for g's last message: seq is where the
// stream stored it (0: not stored, err says why). Called in the order of
// the answers, with the sequence of the last message this stream stored
// before g's (base).
func (s *Stream) settleGroup(g *group, base, seq uint64, err error) {
	if err == nil && seq == base+uint64(len(g.msgs)) {
		first := base + 1
		for i, b := range g.msgs {
			b.done(first+uint64(i), false, nil)
		}
		s.freeGroup(g)
		return
	}
	s.resolve(g, base, seq, err)
}

// failGroup ends g, whose publishing failed after some of its messages
// went out: the ones that did are looked for in the stream.
func (s *Stream) failGroup(token uint64, g *group, err error) {
	s.mu.Lock()
	found := false
	for i := range s.waiting {
		if s.waiting[i].token == token {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			found = true
			break
		}
	}
	base := s.last
	s.mu.Unlock()
	if found {
		s.resolve(g, base, 0, err)
	}
}

// resolveRetry is how often resolve asks again a stream that does not
// answer.
const resolveRetry = 200 * time.Millisecond

// resolve finds where g's messages are, when the answer for its last one
// did not say (see above): it reads the stream from base on, up to seq (0:
// up to its last message), and calls each message's done. It waits for a
// stream that does not answer, until the Stream is closed; meanwhile the
// writer sends nothing (its round is not settled).
func (s *Stream) resolve(g *group, base, seq uint64, lastErr error) {
	for {
		found, err := s.find(g, base, seq)
		if err == nil {
			var stored uint64
			for i, b := range g.msgs {
				switch {
				case found[i] != 0:
					stored = max(stored, found[i])
					b.done(found[i], false, nil)
				case i == len(g.msgs)-1 && lastErr != nil:
					b.done(0, false, lastErr)
				default:
					b.done(0, false, errNotStored)
				}
			}
			s.mu.Lock()
			s.last = max(s.last, stored)
			s.mu.Unlock()
			s.freeGroup(g)
			return
		}
		select {
		case <-s.stop:
			for _, b := range g.msgs {
				b.done(0, false, errClosed)
			}
			return
		case <-time.After(resolveRetry):
		}
	}
}

var (
	// errNotStored is a message of a round that the stream did not
	// store, unanswered: sent again, answered, it is stored or refused.
	errNotStored = errors.New("history: the stream did not store a message of the writer's round")
	errClosed    = errors.New("history: closed")
)

// find reads the stream after base, up to end (0: to its last message),
// and finds each of g's messages there: found[i] is the sequence of
// g.msgs[i], or 0. Within a subject the stream holds g's messages in
// their order, so each is looked for after the one before it of its
// subject.
func (s *Stream) find(g *group, base, end uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if end == 0 {
		info, err := s.stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		end = info.State.LastSeq
	}
	bySubject := map[string][]int{}
	for i, b := range g.msgs {
		bySubject[b.subject] = append(bySubject[b.subject], i)
	}
	found := make([]uint64, len(g.msgs))
	for from := base + 1; from <= end; {
		last := uint64(0)
		_, err := s.readBatch(ctx, allSubjects, from, s.batch, func(subject string, m StoredMsg) (bool, error) {
			if m.Seq > end {
				return false, nil
			}
			last = m.Seq
			q := bySubject[subject]
			for k, i := range q {
				if bytes.Equal(g.msgs[i].data, m.Data) {
					found[i] = m.Seq
					bySubject[subject] = q[k+1:]
					break
				}
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		if last == 0 || last >= end {
			break // nothing more up to end
		}
		from = last + 1
	}
	return found, nil
}

// allSubjects reads every subject of the stream (a direct get's filter).
const allSubjects = ">"
