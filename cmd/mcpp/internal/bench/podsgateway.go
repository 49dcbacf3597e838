package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpp/gateway/client"
)

// gatewayPods joins the members of a --pods run to the gateway with
// package client, each reading its connection on a goroutine of its own.
type gatewayPods struct {
	urls    []string // the nodes; members of a pod are spread over them
	token   string
	sources *sourceAddrs
}

func (t gatewayPods) nodes() int { return len(t.urls) }

func (t gatewayPods) join(ctx context.Context, pod, member, conn int, m *podMember) (podConn, error) {
	u := t.urls[(pod+member)%len(t.urls)]
	c, err := client.DialConn(ctx, u, client.Options{Pod: fmt.Sprintf("pod-%d", pod),
		Participant: fmt.Sprintf("m%d", member), Token: t.token, DialTimeout: dialTimeout, ReadLimit: 1 << 20,
		HTTPClient: t.sources.httpClient(conn)})
	if err != nil {
		return nil, err
	}
	go func() {
		var buf []byte
		for {
			var err error
			if buf, err = c.Read(ctx, buf[:0]); err != nil {
				m.ended()
				return
			}
			m.receive(buf, time.Now().UnixNano())
		}
	}()
	return gatewayPodConn{c}, nil
}

type gatewayPodConn struct{ c *client.Conn }

func (g gatewayPodConn) send(ctx context.Context, b []byte) error { return g.c.Write(ctx, b) }
func (g gatewayPodConn) close()                                   { _ = g.c.CloseNow() }
