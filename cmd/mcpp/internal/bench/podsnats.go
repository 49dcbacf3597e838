package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// natsPods joins the members of a --pods run to nats-server's WebSocket
// listener (--peer nats) with nats.go, as natsload.go drives the fan-out:
// a pod is a subject; member 0 publishes the same envelope bytes on it
// as a message's payload, the others subscribe to it, and each
// subscription's callback (a goroutine of its own, as the gateway's
// members read on theirs) counts what comes.
type natsPods struct {
	url     string // ws://HOST:PORT
	sources *sourceAddrs
}

func (t natsPods) nodes() int { return 1 }

func (t natsPods) join(ctx context.Context, pod, member, conn int, m *podMember) (podConn, error) {
	opts := []nats.Option{nats.Name(fmt.Sprintf("pod-%d/m%d", pod, member)), nats.Timeout(dialTimeout),
		// A member the server cuts (a slow consumer) stays cut, as at the
		// gateway, and is counted.
		nats.NoReconnect(), nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { m.ended() })}
	if d := t.sources.dialer(conn); d != nil {
		opts = append(opts, nats.SetCustomDialer(d))
	}
	nc, err := nats.Connect(t.url, opts...)
	if err != nil {
		return nil, err
	}
	subject := fmt.Sprintf("pod-%d", pod)
	if member > 0 {
		_, err = nc.Subscribe(subject, func(msg *nats.Msg) { m.receive(msg.Data, time.Now().UnixNano()) })
		if err == nil {
			// The server has the subscription once it answers a ping sent
			// after it: the member has joined.
			err = nc.Flush()
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
	}
	return natsPodConn{nc: nc, subject: subject}, nil
}

type natsPodConn struct {
	nc      *nats.Conn
	subject string
}

// send hands the envelope to the client's write buffer, which its
// flusher sends at once: in flight from here, as the gateway's is once
// written.
func (n natsPodConn) send(_ context.Context, b []byte) error { return n.nc.Publish(n.subject, b) }
func (n natsPodConn) close()                                 { n.nc.Close() }
