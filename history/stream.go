package history

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream that holds every pod's history.
const StreamName = "MCPP_HISTORY"

// Config is what bounds the history (docs/protocol.md section 8) and where it lives.
type Config struct {
	// Subjects the stream captures: every pod's subject.
	Subjects []string
	// Entries bounds the messages kept per subject (--history): each
	// holds at least one entry, so the newest Entries messages of a pod
	// hold at least its newest Entries entries, which is what a replay
	// may send.
	Entries int
	// MaxAge bounds their age (--history-age).
	MaxAge time.Duration
	// MaxBytes bounds all pods together (--history-bytes).
	MaxBytes int64
	// MaxMsgSize is the largest message the writer stores.
	MaxMsgSize int32
	// Replicas is the number of copies over a NATS cluster.
	Replicas int
	// File keeps the history in JetStream's file store: in --history-dir,
	// so that it survives a restart, or in a temporary directory, out of
	// the Go heap (--history-store file); otherwise in its memory store.
	File bool
	// Temporary says the history does not outlive the process (a file
	// store in a temporary directory): the file store then writes its
	// messages in batches behind (JetStream's asynchronous persist mode),
	// not one system call each, since a crash loses the history anyway.
	// A replicated stream keeps writing each one (nats-server refuses the
	// asynchronous mode there).
	Temporary bool
	// AckWait bounds how long the stream may take to acknowledge a
	// message before it counts as not stored (a stream without a leader
	// answers nothing): 2s is right across a network; 0, for a stream in
	// the gateway's own process, which always answers, waits as long as
	// it takes. The wait grows while the stream answers later than it
	// (maxAckWait), and comes back as it answers in time again.
	AckWait time.Duration
	// Own says the stream is this process's own: in its embedded server,
	// not replicated, and written by this process's Writer alone (a
	// gateway node without a cluster or --nats-url). The writer's rounds
	// are then acknowledged once each, not once a message (round.go).
	Own bool
	// Reads are the connections reads go on, taken in turn (none: the
	// stream's own). A NATS server answers a direct get on the goroutine
	// of the connection that asked, one request after the other: reads on
	// the writer's connection delay its acknowledgements, and a follower
	// on it, behind them, and all of a node's reads on one connection
	// wait for each other (issue 38's full-size run: the server's read
	// loop of the one reading connection took up to 5.3 s a turn while a
	// node started again opened its pods).
	Reads []*nats.Conn
	// CacheBytes bounds the node's cache of the stream's messages
	// (--history-cache; cache.go): what its follower brings and its
	// reads read is kept there for the reads after them. Below 64 KiB,
	// none.
	CacheBytes int
}

// Slack is how many messages per pod the stream keeps beyond --history,
// so that a node whose follower is behind (a burst of many pods) still
// finds a pod's messages when it opens it and reads its past.
const Slack = 1024

// dedupWindow is how long the stream remembers the Nats-Msg-Id of the
// messages stored with one (every batch, so that one sent again after a
// lost acknowledgement is not stored twice, and the system/context events,
// which every node of a cluster may publish for the same conclusion):
// longer than a failover and the clock skew between nodes, short enough
// that the remembered ids cost little.
const dedupWindow = 2 * time.Minute

// AckWait is Config.AckWait for a stream across a network: long enough
// for a busy leader, short enough that a dead one is noticed well within
// the seconds an election takes.
const AckWait = 2 * time.Second

// maxAckWait bounds how far the acknowledgement wait grows. A stream
// alive but slower than the wait (a cluster loaded by a storm of
// resumes, a replica catching up) answered each message after the writer
// had given up on it: the writer held, sent again everything it had not
// seen stored, which loaded the stream more, and gave up again 2 s
// later, every time (issue 38's full-size run: up to 1,000 messages sent
// again every 2.5 s, for minutes). An answer that comes after its wait
// doubles the wait; answers in time bring it back down.
const maxAckWait = 16 * time.Second

// Stream is the pods' history in one JetStream stream, one subject per
// pod: the Backend the gateway runs on.
type Stream struct {
	nc     *nats.Conn
	reads  []*nats.Conn  // Config.Reads, or nc
	turn   atomic.Uint32 // the next of reads
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config
	cache  *Cache // nil: none
	batch  int    // messages a batched read asks for: readBatch

	ackPrefix string
	ackSub    *nats.Subscription
	mu        sync.Mutex
	token     uint64
	waiting   []pendingAck // appended, not acknowledged, oldest first
	waitArray []pendingAck // waiting's array from its start, for reuse
	// last is the highest sequence the stream answered with for a message
	// of this Stream's (and the stream's last when it was opened): a round
	// of messages stored after it, with nothing between, ends at last plus
	// its length (round.go).
	last   uint64
	groups []*group // settled, for reuse (round.go)
	// ackWait is the acknowledgement wait of the moment (Config.AckWait,
	// grown up to maxAckWait while answers come late), under mu.
	ackWait time.Duration
	// gaveUp is the newest token failed for its wait, and grownGaveUp
	// what it was when the wait last grew: a late answer to a token
	// given up on after that, under the wait of the moment, grows it
	// again; one given up on under a shorter wait does not. lateAt is
	// when the last late answer came: the wait shrinks only once the
	// stream has answered in time for ackCalm.
	gaveUp, grownGaveUp uint64
	lateAt              time.Time
	stop                chan struct{}
	stopOnce            sync.Once

	// late and inProcess count the answers out of the ordinary, and
	// bridged and fromLeader what followers read without a consumer
	// (Answers).
	late, inProcess, bridged, fromLeader atomic.Uint64
}

// Answers counts the stream's answers that a writer does not expect:
// Late, an answer that came after the writer gave up on it (it sent the
// message again, or will); InProcess, a message whose id another copy is
// on its way in under (the writer asks again). Bridged counts the
// messages a follower whose consumer was lost read by direct gets, and
// FromLeader those of them the stream's leader gave, past a replica that
// lacked them (follow.go).
type Answers struct {
	Late, InProcess, Bridged, FromLeader uint64
}

// pendingAck is an Append, or a group of a round's messages (round.go),
// waiting for its answer.
type pendingAck struct {
	token uint64
	at    time.Time
	done  func(seq uint64, duplicate bool, err error)
	group *group // instead of done: the messages the answer is for
}

// failAck ends p without an answer: a group's messages are looked for in
// the stream, since some may be stored.
func (s *Stream) failAck(p pendingAck, base uint64, err error) {
	if p.group != nil {
		s.resolve(p.group, base, 0, err)
		return
	}
	p.done(0, false, err)
}

// ErrNoJetStream is returned by Open when the NATS server has no
// JetStream.
var ErrNoJetStream = errors.New("history: the NATS server has no JetStream")

// Open creates the stream, or updates its limits to cfg when it exists (a
// gateway restarted with other flags, or another node's). node names this
// gateway node in the subjects of its acknowledgements.
func Open(ctx context.Context, nc *nats.Conn, cfg Config, node string) (*Stream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	storage := jetstream.MemoryStorage
	if cfg.File {
		storage = jetstream.FileStorage
	}
	sc := jetstream.StreamConfig{
		Name:              StreamName,
		Description:       "MCPP pod history: one subject per pod (mcpp-gateway)",
		Subjects:          cfg.Subjects,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: int64(cfg.Entries + Slack),
		MaxAge:            cfg.MaxAge,
		MaxBytes:          cfg.MaxBytes,
		MaxMsgSize:        cfg.MaxMsgSize,
		Storage:           storage,
		Replicas:          max(1, cfg.Replicas),
		Duplicates:        min(dedupWindow, cfg.MaxAge),
		AllowDirect:       true,
	}
	if cfg.File && cfg.Temporary && max(1, cfg.Replicas) == 1 {
		sc.PersistMode = jetstream.AsyncPersistMode
	}
	var stream jetstream.Stream
	// A cluster elects its JetStream meta leader a moment after the
	// routes form: retry until ctx ends.
	for {
		stream, err = js.CreateOrUpdateStream(ctx, sc)
		if err == nil {
			break
		}
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, ErrNoJetStream
		}
		select {
		case <-ctx.Done():
			if errors.Is(err, nats.ErrNoResponders) {
				// Nobody answers JetStream's API: it is not enabled.
				return nil, ErrNoJetStream
			}
			return nil, fmt.Errorf("history: stream %s: %w (last: %v)", StreamName, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	s := &Stream{nc: nc, reads: []*nats.Conn{nc}, js: js, stream: stream, cfg: cfg, ackPrefix: "_MCPP_ACK." + node + ".", stop: make(chan struct{}),
		ackWait: cfg.AckWait, cache: NewCache(cfg.CacheBytes), batch: readBatch}
	if len(cfg.Reads) > 0 {
		s.reads = cfg.Reads
	}
	if cfg.Own {
		info, err := stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("history: stream %s: %w", StreamName, err)
		}
		s.last = info.State.LastSeq
	}
	if s.ackSub, err = nc.Subscribe(s.ackPrefix+"*", s.onAck); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// Acknowledgements come as fast as the stream stores: never drop one.
	if err := s.ackSub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if cfg.AckWait > 0 {
		go s.watchAcks()
	}
	return s, nil
}

// AckBacklog is how many acknowledgements have come and wait for their
// handler (a handler behind makes answers in time look late), or -1 when
// it cannot say.
func (s *Stream) AckBacklog() int {
	n, _, err := s.ackSub.Pending()
	if err != nil {
		return -1
	}
	return n
}

// reader is the connection the next read goes on.
func (s *Stream) reader() *nats.Conn {
	return s.reads[int(s.turn.Add(1))%len(s.reads)]
}

// storedLast is the highest sequence the stream answered with for a
// message of this Stream's (watch).
func (s *Stream) storedLast() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Config is the stream's configuration.
func (s *Stream) Config() Config { return s.cfg }

// Answers is what the stream answered out of the ordinary since it was
// opened.
func (s *Stream) Answers() Answers {
	return Answers{Late: s.late.Load(), InProcess: s.inProcess.Load(), Bridged: s.bridged.Load(), FromLeader: s.fromLeader.Load()}
}

// CacheStats is what the node's cache of the stream's messages did
// (Config.CacheBytes): zero without one.
func (s *Stream) CacheStats() CacheStats { return s.cache.Stats() }

// Close stops waiting for acknowledgements; what was not acknowledged
// fails.
func (s *Stream) Close() {
	s.stopOnce.Do(func() {
		close(s.stop)
		_ = s.ackSub.Unsubscribe()
		s.mu.Lock()
		waiting, base := s.waiting, s.last
		s.waiting = nil
		s.mu.Unlock()
		for _, p := range waiting {
			s.failAck(p, base, errClosed)
		}
	})
}

// Append publishes msg with a reply subject of its own; the stream's
// acknowledgement on it calls done. NATS keeps one connection's order; the
// stream in this process (Config.Own) stores and acknowledges in that
// order, while a replicated one answers a duplicate at once, ahead of the
// messages before it still on their way through its leader's log. One
// that never comes is failed after Config.AckWait.
func (s *Stream) Append(subject string, msg []byte, msgID string, done func(seq uint64, duplicate bool, err error)) {
	token := s.wait(pendingAck{done: done})
	var err error
	if msgID == "" {
		err = s.nc.PublishRequest(subject, s.reply(token), msg)
	} else {
		err = s.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: s.reply(token), Data: msg,
			Header: nats.Header{jetstream.MsgIDHeader: []string{msgID}}})
	}
	if err != nil {
		s.fail(token, fmt.Errorf("history: publish: %w", err))
	}
}

// wait numbers p and queues it for its answer.
func (s *Stream) wait(p pendingAck) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token++
	p.token, p.at = s.token, time.Now()
	had := cap(s.waiting)
	if s.waiting = append(s.waiting, p); cap(s.waiting) != had {
		s.waitArray = s.waiting // a new array, which starts here
	}
	return p.token
}

// reply is the reply subject of the Append numbered token.
func (s *Stream) reply(token uint64) string {
	var b [64]byte
	return string(strconv.AppendUint(append(b[:0], s.ackPrefix...), token, 10))
}

// onAck handles the stream's answer to one Append; from the stream in
// this process, the ones before it that were not answered were lost.
func (s *Stream) onAck(m *nats.Msg) {
	token, err := strconv.ParseUint(m.Subject[len(s.ackPrefix):], 10, 64)
	if err != nil {
		return
	}
	seq, dup, ackErr := parseAck(m)
	s.mu.Lock()
	var lost []pendingAck
	var mine pendingAck
	found := false
	if s.cfg.Own {
		// The stream in this process answers in the order of the
		// Appends: the ones before this one not answered were lost.
		for len(s.waiting) > 0 && s.waiting[0].token <= token {
			p := s.waiting[0]
			s.popWaiting()
			if p.token == token {
				mine, found = p, true
				break
			}
			lost = append(lost, p)
		}
	} else if i, ok := slices.BinarySearchFunc(s.waiting, token, func(p pendingAck, t uint64) int { return cmp.Compare(p.token, t) }); ok {
		// Any other stream may answer out of the Appends' order: a
		// replicated one answers a duplicate at once, ahead of the
		// messages before it that go through its leader's log (issue
		// 38's full-size run took them for lost, held, and sent them
		// again, again and again). An answer says nothing of the
		// others: each waits for its own, or for AckWait.
		mine, found = s.waiting[i], true
		s.removeWaiting(i)
	}
	base := s.last
	if found && ackErr == nil && !dup {
		s.last = max(s.last, seq)
	}
	s.adaptWait(token, found, mine.at)
	if !found {
		s.late.Add(1)
	} else if ackErr == ErrInProcess {
		s.inProcess.Add(1)
	}
	s.mu.Unlock()
	for _, p := range lost {
		s.failAck(p, base, errors.New("history: no acknowledgement (the stream's leader changed?)"))
	}
	switch {
	case !found:
	case mine.group != nil && len(lost) > 0:
		// What was lost before it may be stored in the group's span, and
		// base does not count it: the count proves nothing (round.go).
		s.resolve(mine.group, base, seq, ackErr)
	case mine.group != nil:
		s.settleGroup(mine.group, base, seq, ackErr)
	default:
		mine.done(seq, dup, ackErr)
	}
}

// adaptWait grows the acknowledgement wait when the answer to token came
// after it was given up on (a stream alive but slower than the wait), and
// brings it back down as answers come well within it, once none has come
// late for ackCalm. Call it with mu held.
func (s *Stream) adaptWait(token uint64, found bool, sent time.Time) {
	base := s.cfg.AckWait
	switch {
	case base == 0:
	case !found && token <= s.gaveUp:
		s.lateAt = time.Now()
		if token > s.grownGaveUp {
			s.ackWait = min(2*s.ackWait, maxAckWait)
			s.grownGaveUp = s.gaveUp
		}
	case found && s.ackWait > base && time.Since(sent) < s.ackWait/4 && time.Since(s.lateAt) > ackCalm:
		s.ackWait = max(base, s.ackWait-s.ackWait/8)
	}
}

// ackCalm is how long the stream must answer in time before a grown
// acknowledgement wait shrinks. A stream slow for some messages (a
// thousand sent again at once to a leader just elected, a replica
// catching up) answers others at once meanwhile: those quick answers
// brought the wait back down between two late rounds, and the same
// thousand messages were given up on and sent again every 4.5 s for a
// minute (issue 38's full-size run 25: 12,910 answers after the wait on
// one node).
const ackCalm = 30 * time.Second

// popWaiting drops the oldest Append waiting, and what its callback
// holds (a batch, and through it a pod). Call it with mu held.
func (s *Stream) popWaiting() {
	s.waiting[0] = pendingAck{}
	s.waiting = s.waiting[1:]
	if len(s.waiting) == 0 {
		s.waiting = s.waitArray[:0] // its array, reused
	}
}

// removeWaiting drops the Append waiting at i. Call it with mu held.
func (s *Stream) removeWaiting(i int) {
	if i == 0 {
		s.popWaiting()
		return
	}
	n := len(s.waiting)
	s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
	s.waiting[:n][n-1] = pendingAck{}
}

// fail ends the Append of token with err.
func (s *Stream) fail(token uint64, err error) {
	s.mu.Lock()
	var p pendingAck
	found := false
	for i := range s.waiting {
		if s.waiting[i].token == token {
			p, found = s.waiting[i], true
			s.removeWaiting(i)
			break
		}
	}
	base := s.last
	s.mu.Unlock()
	if found {
		s.failAck(p, base, err)
	}
}

// watchAcks fails the Appends that stay unanswered for AckWait.
func (s *Stream) watchAcks() {
	t := time.NewTicker(s.cfg.AckWait / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			var late []pendingAck
			ackWait := s.ackWait
			for len(s.waiting) > 0 && now.Sub(s.waiting[0].at) > ackWait {
				late = append(late, s.waiting[0])
				s.gaveUp = max(s.gaveUp, s.waiting[0].token)
				s.popWaiting()
			}
			base := s.last
			s.mu.Unlock()
			for _, p := range late {
				s.failAck(p, base, fmt.Errorf("history: the stream did not acknowledge within %v", ackWait))
			}
		}
	}
}

// parseAck reads the stream's acknowledgement: {"stream":…,"seq":N} (with
// "duplicate": true for an id stored before), a JetStream error, or a 503
// status when nothing answers.
func parseAck(m *nats.Msg) (seq uint64, duplicate bool, err error) {
	if status := m.Header.Get("Status"); status != "" {
		return 0, false, fmt.Errorf("history: the stream did not answer (status %s %s)", status, m.Header.Get("Description"))
	}
	if i := bytes.Index(m.Data, []byte(`"seq":`)); i >= 0 {
		if seq := leadingUint(m.Data[i+len(`"seq":`):]); seq > 0 {
			return seq, isDuplicate(m.Data), nil
		}
	}
	var a struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(m.Data, &a) == nil && a.Error != nil {
		if strings.Contains(a.Error.Description, "duplicate message id is in process") {
			// Another copy of it (another node's, or this one's sent
			// again) is on its way into the stream, not stored yet: it
			// may be (it is stored once), or not (a leader cut off from
			// its replicas drops what it could not commit). Asked again.
			return 0, false, ErrInProcess
		}
		if a.Error.Code == 503 {
			return 0, false, fmt.Errorf("history: the stream is unavailable: %s", a.Error.Description)
		}
		return 0, false, &RejectedError{Reason: a.Error.Description}
	}
	return 0, false, fmt.Errorf("history: an acknowledgement that does not parse: %q", m.Data)
}

// isDuplicate reports whether an acknowledgement says "duplicate": true
// (nats-server writes it with a space; read either way).
func isDuplicate(ack []byte) bool {
	i := bytes.Index(ack, []byte(`"duplicate":`))
	if i < 0 {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(ack[i+len(`"duplicate":`):], " "), []byte("true"))
}

// leadingUint is the decimal number d starts with (0: none, or one too
// large): an acknowledgement's sequence, read without a copy of it.
func leadingUint(d []byte) uint64 {
	var n uint64
	for i, c := range d {
		if c < '0' || c > '9' {
			break
		}
		if i == 19 {
			return 0 // more digits than a sequence has
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// Ready reports whether the stream answers and, in a cluster, has a
// leader that takes messages.
func (s *Stream) Ready(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return errors.New("history: the stream has no leader")
	}
	return nil
}

// State is what the stream holds: messages (all pods, markers included)
// and their bytes.
func (s *Stream) State(ctx context.Context) (msgs, bytes uint64, err error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("history: %w", err)
	}
	return info.State.Msgs, info.State.Bytes, nil
}

// FirstSeq is the oldest sequence the stream still holds.
func (s *Stream) FirstSeq(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("history: %w", err)
	}
	return info.State.FirstSeq, nil
}
