package pod

import (
	"context"
	"errors"
)

// Broker is what a node's pods need from what joins the gateway nodes,
// apart from the history stream: publishing on a subject, subscribing to
// one, and asking another node something (docs/protocol.md section 7).
// The stream (appending with an acknowledgement, reading, following in
// order across a failover) is the other half of the seam, history.Backend,
// which the node's writer (history.Writer) and follower (tail.go) use.
//
// Two implement it, as Centrifuge's Broker has its Redis and its memory
// brokers: NATSBroker, on the node's NATS connection (core NATS, the
// gateway's), and MemoryBroker, in the process, on which the pods' unit
// tests run several nodes with no NATS server (with history.Memory as
// their stream). Its shape is core NATS's, at most once: what a node does
// about a message it never received (a live frame's body: streamLog asks
// its origin again) is the pod's business, not the broker's, so that the
// memory broker, which never loses anything by itself, cannot hide a loss
// the pod would have on NATS (its tests drop messages on purpose).
type Broker interface {
	// Publish sends data on subject to every subscriber of it on any
	// node, this one included, at most once: a node that was not
	// subscribed at that moment never sees it, and one whose delivery
	// is behind by a whole queue may lose it. It does not wait for the
	// subscribers.
	Publish(subject string, data []byte) error
	// Subscribe calls fn with each message published on subject from the
	// moment Subscribe returns, until Unsubscribe: one at a time, in the
	// order each publisher published them, on a goroutine of the
	// broker's that many subscriptions share (never one per
	// subscription, so that an idle pod costs none), never the
	// publisher's: fn runs with no lock of the publisher's held, on
	// either broker (docs/locks.md). fn must not block. A message's Data
	// is fn's to keep.
	Subscribe(subject string, fn func(BrokerMsg)) (Subscription, error)
	// Request publishes data on subject with a reply subject of its own
	// and returns the first answer (a subscriber answers by publishing
	// on the message's Reply). It fails at once with ErrNoResponders when
	// nobody subscribes to subject, and with ctx's error when nobody
	// answered in time.
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
	// Close ends the node's subscriptions and their delivery; the node's
	// Stop calls it.
	Close()
}

// BrokerMsg is a message a subscription brings.
type BrokerMsg struct {
	Subject string
	// Reply is where to answer a Request ("" when nobody waits).
	Reply string
	Data  []byte
}

// Subscription is one Subscribe.
type Subscription interface {
	// Unsubscribe ends it: once it returns, fn is handed no message but
	// the one, if any, whose call the broker's goroutine had begun (fn
	// may still be running it).
	Unsubscribe()
}

// ErrNoResponders is Request's error when nobody subscribes to the
// subject: on the gateway's subjects, the node asked is gone.
var ErrNoResponders = errors.New("nobody subscribes to the subject")
