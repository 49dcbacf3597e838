package history

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// Memory is a Backend in the process's memory: the stream of the pod
// core's unit tests, which run with no NATS server. It keeps what Stream
// keeps (messages in order, at most limit per subject, the oldest going
// first), and can be held (Hold) so that a test sees the pods run ahead of
// their history.
type Memory struct {
	limit int

	mu      sync.Mutex
	seq     uint64
	first   uint64
	msgs    []memMsg // oldest first; dropped ones have a nil Data
	count   map[string]int
	ids     map[string]uint64
	held    bool
	waiting []memAppend
	// followers are told of each message stored, in order.
	followers map[int]memFollower
	nextID    int
}

type memFollower struct {
	prefix string // of the subjects followed ("" all)
	fn     func(string, StoredMsg)
}

type memMsg struct {
	subject string
	StoredMsg
}

type memAppend struct {
	subject string
	msg     []byte
	msgID   string
	done    func(uint64, bool, error)
}

// NewMemory makes an empty stream that keeps at most perSubject messages
// of each subject.
func NewMemory(perSubject int) *Memory {
	return &Memory{limit: perSubject, first: 1, count: map[string]int{}, ids: map[string]uint64{}}
}

// Hold makes Appends wait, unstored, until Release.
func (s *Memory) Hold() {
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
}

// Release stores what waited since Hold, in order, and stores at once
// from then on.
func (s *Memory) Release() {
	s.mu.Lock()
	s.held = false
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	for _, a := range waiting {
		s.Append(a.subject, a.msg, a.msgID, a.done)
	}
}

// Append implements Backend: it stores at once (unless held) and calls
// done before it returns.
func (s *Memory) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	s.mu.Lock()
	if s.held {
		s.waiting = append(s.waiting, memAppend{subject, append([]byte(nil), msg...), msgID, done})
		s.mu.Unlock()
		return
	}
	if seq, ok := s.ids[msgID]; ok && msgID != "" {
		s.mu.Unlock()
		done(seq, true, nil)
		return
	}
	s.seq++
	seq, at := s.seq, time.Now().UnixNano()
	s.msgs = append(s.msgs, memMsg{subject, StoredMsg{Seq: seq, Time: at, Data: append([]byte(nil), msg...)}})
	if msgID != "" {
		s.ids[msgID] = seq
	}
	s.count[subject]++
	for s.count[subject] > s.limit {
		s.dropOldest(subject)
	}
	var tell []memFollower
	for _, f := range s.followers {
		if strings.HasPrefix(subject, f.prefix) {
			tell = append(tell, f)
		}
	}
	stored := StoredMsg{Seq: seq, Time: at, Data: s.msgs[len(s.msgs)-1].Data}
	s.mu.Unlock()
	done(seq, false, nil)
	for _, f := range tell {
		f.fn(subject, stored)
	}
}

// Follow implements Backend: fn is called from Append, after it stored;
// subjects are one prefix pattern ("mcpp.pod.>").
func (s *Memory) Follow(_ context.Context, subjects []string, fn func(string, StoredMsg), _ func(error)) (uint64, func(), error) {
	prefix := ""
	if len(subjects) > 0 {
		prefix = strings.TrimSuffix(subjects[0], ">")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.followers == nil {
		s.followers = map[int]memFollower{}
	}
	s.nextID++
	id := s.nextID
	s.followers[id] = memFollower{prefix: prefix, fn: fn}
	return s.seq + 1, func() {
		s.mu.Lock()
		delete(s.followers, id)
		s.mu.Unlock()
	}, nil
}

// dropOldest drops the oldest message of subject.
func (s *Memory) dropOldest(subject string) {
	for i := range s.msgs {
		if m := &s.msgs[i]; m.subject == subject && m.Data != nil {
			m.Data = nil
			s.count[subject]--
			break
		}
	}
	for len(s.msgs) > 0 && s.msgs[0].Data == nil {
		s.first = s.msgs[0].Seq + 1
		s.msgs = s.msgs[1:]
	}
}

// Read implements Backend.
func (s *Memory) Read(ctx context.Context, subject string, want []uint64, fn func(StoredMsg) error) error {
	for _, seq := range want {
		s.mu.Lock()
		m, ok := s.at(seq)
		s.mu.Unlock()
		if !ok || m.subject != subject {
			return &MissingError{Seq: seq}
		}
		if err := fn(m.StoredMsg); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (s *Memory) at(seq uint64) (memMsg, bool) {
	if seq < s.first || len(s.msgs) == 0 {
		return memMsg{}, false
	}
	i := int(seq - s.msgs[0].Seq)
	if i >= len(s.msgs) || s.msgs[i].Data == nil {
		return memMsg{}, false
	}
	return s.msgs[i], true
}

// Scan implements Backend.
func (s *Memory) Scan(ctx context.Context, subjects []string, from uint64, fn func(string, StoredMsg) error) error {
	s.mu.Lock()
	var out []memMsg
	for _, m := range s.msgs {
		if m.Data == nil || m.Seq < from {
			continue
		}
		for _, subj := range subjects {
			// A wildcard is a prefix pattern ("mcpp.pod.>"), as Follow's.
			if m.subject == subj || (strings.HasSuffix(subj, ">") && strings.HasPrefix(m.subject, strings.TrimSuffix(subj, ">"))) {
				out = append(out, m)
				break
			}
		}
	}
	s.mu.Unlock()
	for _, m := range out {
		if err := fn(m.subject, m.StoredMsg); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// FirstSeq implements Backend.
func (s *Memory) FirstSeq(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

// Ready implements Backend: a held stream takes nothing.
func (s *Memory) Ready(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		return errors.New("history: the memory stream is held")
	}
	return nil
}
