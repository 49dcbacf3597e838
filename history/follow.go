package history

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// followHeartbeat is how often the stream tells an idle follower it is
// still there; two missed heartbeats and the follower is recreated from
// the last sequence it saw (a stream leader that died, say). The pull
// expiry must be at least twice it.
const (
	followHeartbeat = time.Second
	followExpiry    = 5 * time.Second
)

// followBuffer bounds what the stream sends a follower ahead of what it has
// handled. It is large on purpose: the stream discards a pod's oldest
// entries past --history whether a follower has them or not, and once an
// entry is in the follower's buffer no discard can take it, so the stream
// must be free to push a burst (thousands of contexts concluding at once)
// into it at once. Bytes bound it for large envelopes.
const (
	followMaxMessages = 1 << 16
	followMaxBytes    = 16 << 20
)

// Follower delivers a pod's frames in the stream's order.
type Follower struct {
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
}

// followInactive is how long the stream keeps a follower whose gateway
// vanished without stopping it (a killed node).
const followInactive = 30 * time.Second

// Follow calls fn, on one goroutine and in the stream's order, with every
// frame stored on subjects from sequence start on (start 0: the oldest the
// stream holds), and with how many more the stream held at that moment
// (0: fn has caught up). It is an ordered consumer: a gap (a lost
// consumer, a leader that changed) recreates it from the last sequence
// delivered, so fn sees each frame once and in order.
func (s *Store) Follow(ctx context.Context, subjects []string, start uint64, fn func(m Msg, pending uint64), onErr func(error)) (*Follower, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: followInactive}
	if start > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return // not a stream message: nothing of the pod's
		}
		fn(Msg{Seq: md.Sequence.Stream, Time: md.Timestamp.UnixNano(), Data: m.Data()}, md.NumPending)
	}, jetstream.PullHeartbeat(followHeartbeat), jetstream.PullExpiry(followExpiry),
		jetstream.PullMaxMessagesWithBytesLimit(followMaxMessages, followMaxBytes),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { onErr(err) }))
	if err != nil {
		return nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	return &Follower{stream: s.stream, cons: cons, cc: cc}, nil
}

// Pending is how many frames the stream holds that the follower has not
// delivered yet.
func (f *Follower) Pending(ctx context.Context) (uint64, error) {
	info, err := f.cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending, nil
}

// Stop ends the follower and deletes its consumer from the stream (a pod
// that closes and opens again many times must not leave consumers
// behind). A call of fn in progress may still finish.
func (f *Follower) Stop() {
	f.cc.Stop()
	if info := f.cons.CachedInfo(); info != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = f.stream.DeleteConsumer(ctx, info.Name)
	}
}
