package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestPublishLongBody: a newline-delimited POST of many envelopes,
// longer than any line scanner's buffer, gets the answer each line
// deserves, in order, whatever the body's size up to its limit: the valid
// ones relayed in order, the broken ones invalid_json. (A scanner reusing
// its buffer under the lines answered the first 56 of 200 valid
// envelopes, 90 KB, invalid_json.)
func TestPublishLongBody(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 10000 // the receiver takes the whole body as one burst
	})
	const pod = "long-body"
	rx := g.Dial(t, pod, "rx", "")
	for _, size := range []struct {
		lines, pad int
		broken     map[int]bool
	}{
		{200, 400, nil}, // 200 valid envelopes, about 90 KB
		{6000, 600, map[int]bool{3: true, 4000: true, 5999: true}}, // about 3.9 MB, the limit being 4 MiB
	} {
		var body strings.Builder
		pad := strings.Repeat("x", size.pad)
		for i := range size.lines {
			if size.broken[i] {
				body.WriteString(`{"kind":"chat","payload":` + "\n")
				continue
			}
			fmt.Fprintf(&body, `{"id":"l%d-%d","kind":"chat","payload":{"n":%d,"pad":%q}}`+"\n", size.lines, i, i, pad)
		}
		if body.Len() > 4<<20 {
			t.Fatalf("the body is %d bytes, over the limit the test means to stay under", body.Len())
		}
		res := histPost(t, g, pod, "tool", "application/x-ndjson", body.String())
		if len(res) != size.lines {
			t.Fatalf("%d lines (%d bytes): %d answers", size.lines, body.Len(), len(res))
		}
		for i, r := range res {
			want := fmt.Sprintf("l%d-%d", size.lines, i)
			switch {
			case size.broken[i] && r["error"] != "invalid_json":
				t.Fatalf("%d lines: line %d (broken) answered %v, want invalid_json", size.lines, i, r)
			case !size.broken[i] && (r["id"] != want || r["error"] != nil):
				t.Fatalf("%d lines (%d bytes): line %d answered %v, want relayed as %s", size.lines, body.Len(), i, r, want)
			}
		}
		for i := range size.lines {
			if size.broken[i] {
				continue
			}
			m := rx.NextOf()
			if want := fmt.Sprintf("l%d-%d", size.lines, i); m.Str("id") != want {
				t.Fatalf("rx got %s, want %s", m.Str("id"), want)
			}
		}
		t.Logf("%d lines, %d bytes: every line answered in order", size.lines, body.Len())
	}
}

// TestResumeRightAfterABurst: a participant that reads a burst and drops
// resumes at once after the last envelope it read, on a node that
// delivers before its history stream has stored (the stream is written
// behind): the replay is exactly what came after, then the live ones.
func TestResumeRightAfterABurst(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) { c.Rate, c.Burst = 1e6, 1000000 })
	// A burst within --history (1000): the resume point is in it.
	const pod, burst = "resume-burst", 900
	tx := g.Dial(t, pod, "tx", "")
	rx := g.Dial(t, pod, "rx", "")
	tx.AwaitPresence("join", "rx", 5*time.Second)
	pad := strings.Repeat("y", 2000)
	for round := range 3 {
		for i := range burst {
			tx.Send(map[string]any{"id": fmt.Sprintf("b%d-%d", round, i), "kind": "seq", "payload": map[string]any{"seq": i, "pad": pad}})
		}
		// rx reads part of the burst, and drops.
		cut := burst / 3 * (round + 1)
		last := ""
		for i := 0; i < cut; i++ {
			m := rx.NextOf()
			if harness.SeqOf(m) != i {
				t.Fatalf("round %d: rx got %d, want %d", round, harness.SeqOf(m), i)
			}
			last = m.Str("id")
		}
		_ = rx.Conn.CloseNow()
		rx = g.Dial(t, pod, "rx", "resume="+last)
		// What the gateway had taken of the burst is replayed, the rest
		// comes live: either way, everything after last, once.
		if h := histInfo(rx); h["resumed"] != true || h["replayed"].(float64) > float64(burst-cut) {
			t.Fatalf("round %d: the welcome's history %v, want resumed with at most %d replayed", round, h, burst-cut)
		}
		for i := cut; i < burst; i++ {
			m := rx.NextOf()
			if harness.SeqOf(m) != i {
				t.Fatalf("round %d: after the resume rx got %v, want seq %d", round, m.Str("id"), i)
			}
		}
		tx.Send(map[string]any{"id": fmt.Sprintf("live-%d", round), "kind": "chat", "payload": map[string]any{}})
		if m := rx.NextOf(); m.Str("id") != fmt.Sprintf("live-%d", round) {
			t.Fatalf("round %d: after the replay rx got %v, want the live envelope", round, m)
		}
	}
}
