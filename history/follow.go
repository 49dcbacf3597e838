package history

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Where several gateway nodes share the pods (a cluster, or an external
// NATS), every node delivers them in the stream's order: each node reads
// the stream with one ordered consumer for every pod's subjects (Follow),
// and hands each message to the pod it is for, if that pod is open on
// the node. One consumer per node, not per pod: the stream's limit on
// consumers (1,000) bounds nodes, not pods. nats.go's ordered consumer
// delivers each message once, in order, and starts again after the last
// one when its consumer is lost (a leader that died), so a node sees no
// gap. (Measured against the stream's RePublish, one core subscription
// per pod: the consumer cost less per message, alone and in a cluster of
// three, and never drops; BENCHMARKS.md.)

// followHeartbeat is how often the stream tells an idle consumer it is
// still there; the ordered consumer starts again after two missed ones.
const followHeartbeat = 2 * time.Second

// Follow calls fn, on one goroutine and in the stream's order, with every
// message stored on subjects (wildcards allowed) after the call, until
// stop is called; onErr hears of the consumer's troubles (it recovers from
// them by itself).
func (s *Stream) Follow(ctx context.Context, subjects []string, fn func(subject string, m Msg), onErr func(error)) (stop func(), err error) {
	c, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		fn(m.Subject(), Msg{Seq: md.Sequence.Stream, Time: md.Timestamp.UnixNano(), Data: m.Data()})
	}, jetstream.PullHeartbeat(followHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if onErr != nil {
			onErr(err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("history: follow %v: %w", subjects, err)
	}
	return cc.Stop, nil
}
