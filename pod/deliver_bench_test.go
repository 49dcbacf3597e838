package pod

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// BenchmarkDeliver: one envelope of 256 B delivered to every member of a
// pod of N (real participants on loopback WebSockets, their readers
// dropping what they read), and written: the fan-out (deliver), each
// member's queue (Enqueue) and, when the order lock is let go, each
// member's write (Flush, writeNow: the frame header and one system
// call). What ingress does before (parsing, the registry, the history)
// is not in it. allocs/op and B/op are per envelope, for all N
// deliveries. "mcpx" has half the members speak MCPx, who share one copy
// with the protocol rewritten; "burst" queues 64 envelopes under one
// hold of the order lock, so that each member's write takes 64 (as a
// sender's burst does).
//
//	go test -run '^$' -bench Deliver -benchmem ./pod/
func BenchmarkDeliver(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		for _, way := range []string{"mcpp", "mcpx", "burst"} {
			b.Run(fmt.Sprintf("members=%d/%s", n, way), func(b *testing.B) {
				burst := 1
				if way == "burst" {
					burst = 64
				}
				benchDeliver(b, n, way == "mcpx", burst)
			})
		}
	}
}

func benchDeliver(b *testing.B, n int, mcpx bool, burst int) {
	node, _ := testNode(b, 0, nil)
	p := openPod(b, node, "bench")
	var members []*member
	for i := range n {
		m := join(b, p, fmt.Sprintf("m%d", i), joinOpts{noRead: true, sendQueue: 1 << 16})
		go discardAll(m.conn)
		if mcpx && i%2 == 1 {
			p.mu.Lock()
			m.r.Protocol = wire.ProtocolMCPX
			p.mu.Unlock()
		}
		members = append(members, m)
	}
	head := `{"protocol":"` + wire.ProtocolMCPP + `","id":"0f3a9c2e-5d4b-4c1e-9a7f-1b2c3d4e5f60","from":"outsider","kind":"chat","payload":{"text":"`
	body := []byte(head + strings.Repeat("x", 256-len(head)-3) + `"}}`)
	start := strings.Index(string(body), `"`+wire.ProtocolMCPP+`"`)
	meta := envelope.Meta{Kind: envelope.FrameEnvelope, Origin: node.ID, From: "outsider", ID: "0f3a9c2e-5d4b-4c1e-9a7f-1b2c3d4e5f60",
		Protocol: envelope.Span{Start: start, End: start + len(wire.ProtocolMCPP) + 2}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	delivered := 0
	for i := range b.N {
		meta.Seq = uint64(i + 1)
		if i%burst == 0 {
			p.lock()
		}
		delivered += p.deliver(&meta, body, true)
		if i%burst == burst-1 || i == b.N-1 {
			p.unlock()
		}
		if i%256 == 255 {
			drainQueues(b, members)
		}
	}
	b.StopTimer()
	if delivered != b.N*n {
		b.Fatalf("%d deliveries, want %d", delivered, b.N*n)
	}
	drainQueues(b, members)
}

// discardAll reads c's messages and drops them, with one buffer for all
// of them, so that the test's end of the connections allocates nothing
// per message and allocs/op counts the gateway's alone.
func discardAll(c *websocket.Conn) {
	buf := make([]byte, 32<<10)
	for {
		_, r, err := c.Reader(context.Background())
		if err != nil {
			return
		}
		for {
			_, err := r.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
	}
}

// drainQueues waits until every member's queue is written, so that a slow
// reader never fills one (which would cut it).
func drainQueues(b *testing.B, members []*member) {
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range members {
		for {
			if q, _ := m.r.Queued(); q == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: its queue does not drain", m.id)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}
