package history

import (
	"context"
	"errors"
	"fmt"
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
	// Entries bounds the entries kept per subject (--history).
	Entries int
	// MaxAge bounds their age (--history-age).
	MaxAge time.Duration
	// MaxBytes bounds all pods together (--history-bytes).
	MaxBytes int64
	// MaxMsgSize is the largest frame the gateway publishes.
	MaxMsgSize int32
	// Replicas is the number of copies over a NATS cluster.
	Replicas int
	// File keeps the history on disk (--history-dir), so that it survives
	// a restart; otherwise it is kept in memory.
	File bool
}

// Slack is how many entries per pod the stream keeps beyond --history. The
// stream discards a pod's oldest entries whether every node's follower has
// delivered them or not, and a follower may lag a little behind the
// stream (the server's consumer is a goroutine like any other); the slack
// keeps the entries a follower has not delivered yet. Replays and
// gateway/history see only the newest --history (the Index).
const Slack = 1024

// dedupWindow is how long the stream remembers the Nats-Msg-Id of the
// frames published with one (the system/context events, which every node
// of a cluster may publish for the same conclusion): longer than the clock
// skew and timer jitter between nodes concluding the same context, short
// enough that the remembered ids cost little.
const dedupWindow = 2 * time.Minute

// Store is the pods' history: one JetStream stream with one subject per
// pod. It publishes, follows one pod's frames in the stream's order, and
// reads a pod's past.
type Store struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config
}

// ErrNoJetStream is returned by Open when the NATS server has no
// JetStream.
var ErrNoJetStream = errors.New("history: the NATS server has no JetStream")

// Open creates the stream, or updates its limits to cfg when it exists
// (a gateway restarted with other flags, or another node's).
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
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
	return &Store{nc: nc, js: js, stream: stream, cfg: cfg}, nil
}

// Config is the store's configuration.
func (s *Store) Config() Config { return s.cfg }

// Publish stores frame on subject. It does not wait for the stream's
// acknowledgement: the frame comes back through Follow, in the stream's
// order, which is the acknowledgement the gateway needs (and costs
// nothing more per envelope).
func (s *Store) Publish(subject string, frame []byte) error {
	return s.nc.Publish(subject, frame)
}

// PublishOnce stores frame unless a frame with the same id was stored in
// the last two minutes: nodes that conclude the same context each publish
// its event, and the stream keeps the first.
func (s *Store) PublishOnce(subject string, frame []byte, id string) error {
	m := nats.NewMsg(subject)
	m.Data = frame
	m.Header.Set(jetstream.MsgIDHeader, id)
	return s.nc.PublishMsg(m)
}

// LastSeq is the sequence of the last frame stored on any of subjects,
// or 0 when they hold none.
func (s *Store) LastSeq(ctx context.Context, subjects ...string) (uint64, error) {
	var last uint64
	for _, subject := range subjects {
		m, err := s.stream.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("history: %w", err)
		default:
			last = max(last, m.Sequence)
		}
	}
	return last, nil
}

// Ready reports whether the stream answers and, in a cluster, has a
// leader that takes frames.
func (s *Store) Ready(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return errors.New("history: the stream has no leader")
	}
	return nil
}

// State is what the stream holds: entries (all pods, markers included)
// and their bytes.
func (s *Store) State(ctx context.Context) (entries, bytes uint64, err error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("history: %w", err)
	}
	return info.State.Msgs, info.State.Bytes, nil
}

// FirstSeq is the oldest sequence the stream still holds: entries below
// it were discarded by --history-bytes or --history-age.
func (s *Store) FirstSeq(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("history: %w", err)
	}
	return info.State.FirstSeq, nil
}
