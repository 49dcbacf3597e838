package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
)

// TestPodsEndWithTheirParticipants: a pod exists while it has participants
// or contexts, and --max-pods counts those alone. A participant that
// sent an envelope (its rate bucket partly drained) and left takes its pod
// with it at once, so a new pod is let in (its bucket stays its own:
// TestRateBucketInherited). The pod's history outlives the pod
// and does not count.
func TestPodsEndWithTheirParticipants(t *testing.T) {
	t.Parallel()
	g := startGateway(t, func(c *gateway.Config) {
		c.MaxPods = 3
		c.Rate, c.Burst = 1, 3 // a bucket refills in seconds, long after the leave
	})
	for _, pod := range []string{"p1", "p2", "p3"} {
		c := g.dial(t, pod, "alice", "")
		c.send(map[string]any{"kind": "chat", "id": pod + "-hello"})
		_ = c.conn.CloseNow()
		c.waitClosed(5 * time.Second)
	}
	eventually(t, 5*time.Second, "no pod left (no participant, no context)", func() bool {
		return metric(t, g.URL, "mcpp_pods") == 0
	})
	// Three new pods are let in at once, not after a sweep.
	for _, pod := range []string{"q1", "q2", "q3"} {
		c := g.dial(t, pod, "bob", "")
		defer c.conn.CloseNow()
	}
	if status, code := refusal(t, g.WS, limQuery("q4", "bob"), nil); status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("a fourth pod: %d %s, want 503 over_capacity (--max-pods 3)", status, code)
	}
}
