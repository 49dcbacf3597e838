package pod

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkFanout measures one envelope through Handle to every member of
// a pod of 10 (each a real participant on a loopback WebSocket), with
// history on: with the token estimate that issue 24 added to ingress and
// without it (a constant in its place), in the same run, so that the
// ratio says what the estimate costs the fan-out. ns/op is per envelope
// handled; the members' writers run meanwhile.
func BenchmarkFanout(b *testing.B) {
	for _, size := range []int{256, 4096} {
		for _, way := range []string{"estimate", "no-estimate"} {
			b.Run(fmt.Sprintf("%dB/%s", size, way), func(b *testing.B) {
				if way == "no-estimate" {
					estimateTokens = func([]byte) int { return 1 }
					defer func() { estimateTokens = realEstimate }()
				}
				benchFanout(b, size)
			})
		}
	}
}

var realEstimate = estimateTokens

func benchFanout(b *testing.B, size int) {
	n, _ := testNode(b, 100000, nil)
	benchFanoutOf(b, n, 10, size)
}

// benchFanoutOf is benchFanout on node n, to a pod of members.
func benchFanoutOf(b *testing.B, n *Node, count, size int) {
	p := openPod(b, n, "bench")
	var members []*member
	for i := range count {
		members = append(members, join(b, p, fmt.Sprintf("m%d", i), joinOpts{discard: true, sendQueue: 1 << 16}))
	}
	from := members[0].from
	from.Hold = true
	text := strings.Repeat("the agent reads a file and plans the next step; ", size/48+1)[:size-64]
	body, _ := json.Marshal(map[string]any{"kind": "chat", "payload": map[string]any{"text": text}})
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := range b.N {
		p.Handle(from, body, false)
		if i%64 == 63 {
			from.Flush()
			p.Throttle(from)
		}
	}
	from.Flush()
	b.StopTimer()
	// Let the writers drain before the members are closed.
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range members {
		for time.Now().Before(deadline) {
			if q, _ := m.r.Queued(); q == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}
