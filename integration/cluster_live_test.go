package integration

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// Live frames in a cluster (docs/protocol.md section 8): presence and
// ephemeral envelopes, whose bodies travel outside the history stream
// with a marker in it, are never lost during a join storm, and the
// presence every member is told stays exact.

// TestClusterLiveFramesInAJoinStorm: in each pod a sender on the first
// node sends ephemeral envelopes, one in the main context and one in a
// sub-context in turn, while members join the pod on the two other nodes,
// opening it there. Each joiner receives every ephemeral envelope the
// pod's order put after its join that its filter admits (the sender, who
// echoes its own, sees that order), once and in that order; each
// member's welcome and the presence it then receives name exactly the
// pod's other members; and no node loses a live frame.
//
// The size CI runs is 20 pods of a sender and 12 joiners, each sender
// sending every 10 ms; MCPP_STORM="PODS,JOINERS,EVERY" runs another (the
// full size of BENCHMARKS.md is MCPP_STORM=3000,2,1s: 9,000 members).
func TestClusterLiveFramesInAJoinStorm(t *testing.T) {
	pods, joiners, every := 20, 12, 10*time.Millisecond
	if s := os.Getenv("MCPP_STORM"); s != "" {
		var e string
		if _, err := fmt.Sscanf(strings.ReplaceAll(s, ",", " "), "%d %d %s", &pods, &joiners, &e); err != nil {
			t.Fatalf("MCPP_STORM=%q: want PODS,JOINERS,EVERY: %v", s, err)
		}
		d, err := time.ParseDuration(e)
		if err != nil {
			t.Fatalf("MCPP_STORM=%q: %v", s, err)
		}
		every = d
	}
	// Heartbeats every second, not 200 ms: on a loaded machine a node not
	// heard from for three of them is taken for gone, and its members
	// for left, which is another test's matter.
	// A client's buffers are allocated whole; at the full size, 9,000 of
	// them get what they receive (a few hundred messages) and some room.
	buffer := 1 << 16
	if pods*(1+joiners) > 1000 {
		buffer = 4096
	}
	nodes := startCluster(t, 3, "--history", "1000", "--rate", "100000", "--burst", "100000", "--cluster-heartbeat", "1s")
	type joiner struct {
		c        *harness.Client
		filtered bool // contexts=none: only the main context's envelopes
	}
	type podRun struct {
		name    string
		sender  *harness.Client
		joiners []joiner
	}
	runs := make([]*podRun, pods)
	for i := range runs {
		r := &podRun{name: fmt.Sprint("live-storm-", i)}
		r.sender = nodes[0].GW.DialBuffered(t, r.name, "sender", "echo=true", buffer)
		runs[i] = r
	}

	stop := make(chan struct{})
	var sending sync.WaitGroup
	for _, r := range runs {
		sending.Add(1)
		go func() {
			defer sending.Done()
			for n := 0; ; n++ {
				env := map[string]any{"id": fmt.Sprint("e", n), "kind": "note", "lifecycle": map[string]any{"mode": "ephemeral"},
					"payload": map[string]any{"seq": n}}
				if n%2 == 1 {
					env["context"] = map[string]any{"id": "r1", "type": "reasoning"}
				}
				select {
				case <-stop:
					// The last one, in the main context: once a member has it,
					// it has everything before it.
					env["id"], env["kind"] = "end", "end"
					delete(env, "context")
					r.sender.Send(env)
					return
				default:
				}
				r.sender.Send(env)
				time.Sleep(every)
			}
		}()
	}

	var mu sync.Mutex
	var joining sync.WaitGroup
	slots := make(chan struct{}, 16)
	var retried atomic.Int64
	started := time.Now()
	for _, r := range runs {
		for j := range joiners {
			joining.Add(1)
			go func() {
				defer joining.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				filtered := j%3 == 2
				q := url.Values{"pod": {r.name}, "participant": {fmt.Sprint("j", j)}}
				if filtered {
					q.Set("contexts", "none")
				}
				// A joiner does what a client does with a refusal that
				// says "try again" (the pod still reading its history on
				// that node) or a dial that timed out: it tries again.
				conn, err := harness.DialConn(nodes[1+j%2].GW.WS, q, nil)
				for deadline := time.Now().Add(2 * time.Minute); err != nil && time.Now().Before(deadline) &&
					(strings.Contains(err.Error(), "try again") || strings.Contains(err.Error(), "deadline exceeded")); {
					retried.Add(1)
					time.Sleep(500 * time.Millisecond)
					conn, err = harness.DialConn(nodes[1+j%2].GW.WS, q, nil)
				}
				if err != nil {
					t.Errorf("%s: j%d could not join: %v", r.name, j, err)
					return
				}
				c := harness.StartClientBuffered(t, conn, false, buffer)
				c.ID = fmt.Sprint("j", j)
				mu.Lock()
				r.joiners = append(r.joiners, joiner{c, filtered})
				mu.Unlock()
			}()
		}
	}
	joining.Wait()
	t.Logf("%d pods: %d members joined on the other nodes in %v (%d dials tried again)",
		pods, pods*joiners, time.Since(started).Round(time.Millisecond), retried.Load())
	time.Sleep(200 * time.Millisecond)
	close(stop)
	sending.Wait()
	if t.Failed() {
		return
	}

	for _, r := range runs {
		everyone := []string{"sender"}
		for _, j := range r.joiners {
			everyone = append(everyone, j.c.ID)
		}
		sender := readLive(t, r.sender, true)
		for i, id := range sender.ephemeral {
			if id != fmt.Sprint("e", i) && !(id == "end" && i == len(sender.ephemeral)-1) {
				t.Fatalf("%s: the sender's own envelopes came back as %v", r.name, sender.ephemeral)
			}
		}
		if want := without(everyone, "sender"); !sameSet(sender.others(), want) {
			t.Errorf("%s: the sender sees %v, want %v", r.name, sender.others(), want)
		}
		for _, j := range r.joiners {
			got := readLive(t, j.c, false)
			if want := without(everyone, j.c.ID); !sameSet(got.others(), want) {
				t.Errorf("%s: %s sees %v, want %v", r.name, j.c.ID, got.others(), want)
			}
			from, ok := sender.joinedAt[j.c.ID]
			if !ok {
				t.Errorf("%s: the sender was never told %s joined", r.name, j.c.ID)
				continue
			}
			var want []string
			for _, id := range sender.ephemeral[from:] {
				if !j.filtered || !inContext(id) {
					want = append(want, id)
				}
			}
			// What it received is the sender's order (it may have
			// received some from before its join's place too).
			if !isSubsequence(got.ephemeral, sender.ephemeral) {
				t.Errorf("%s: %s received %v: not the pod's order, or twice", r.name, j.c.ID, got.ephemeral)
			}
			if !isSubsequence(want, got.ephemeral) {
				t.Errorf("%s: %s (filtered: %v) received %v, want every one of %v", r.name, j.c.ID, j.filtered, got.ephemeral, want)
			}
			for _, id := range got.ephemeral {
				if j.filtered && inContext(id) {
					t.Errorf("%s: %s received %s, which its filter does not admit", r.name, j.c.ID, id)
				}
			}
		}
	}
	for i, n := range nodes {
		logs := n.Stderr.String()
		for _, bad := range []string{"never came", "was lost"} {
			if strings.Contains(logs, bad) {
				t.Errorf("node %d logged %q", i+1, bad)
			}
		}
		if lost := harness.MetricsOf(t, n.GW.URL)["mcpp_live_frames_lost_total"]; lost != 0 {
			t.Errorf("node %d counted %v live frames lost", i+1, lost)
		}
	}
}

// liveView is what a member was told: who else is in the pod (its
// welcome, then presence), the ids of the ephemeral envelopes it
// received in order, and, for each join it heard of, how many of them it
// had by then.
type liveView struct {
	present   map[string]bool
	ephemeral []string
	joinedAt  map[string]int
}

func (v *liveView) others() []string {
	var out []string
	for id := range v.present {
		out = append(out, id)
	}
	return out
}

// readLive reads c from its welcome to the "end" envelope.
func readLive(t *testing.T, c *harness.Client, welcomed bool) *liveView {
	t.Helper()
	v := &liveView{present: map[string]bool{}, joinedAt: map[string]int{}}
	w := c.Welcome
	if !welcomed {
		if w = c.Next(10 * time.Second); w == nil || w.Kind() != "system/welcome" {
			t.Fatalf("%s: first message %v, want its welcome", c.ID, w)
		}
	}
	for _, id := range welcomeIDs(w) {
		v.present[id] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := c.Next(time.Until(deadline))
		if m == nil {
			t.Fatalf("%s: no end within 30s (%d ephemeral envelopes)", c.ID, len(v.ephemeral))
		}
		switch m.Kind() {
		case "system/presence":
			who, _ := m.Payload()["participant"].(map[string]any)
			id, _ := who["id"].(string)
			switch m.Payload()["event"] {
			case "join":
				if v.present[id] {
					t.Errorf("%s: told %s joined, which it knew was there", c.ID, id)
				}
				v.present[id] = true
				v.joinedAt[id] = len(v.ephemeral)
			case "leave":
				delete(v.present, id)
			}
		case "note", "end":
			v.ephemeral = append(v.ephemeral, m.Str("id"))
			if m.Kind() == "end" {
				return v
			}
		default:
			t.Errorf("%s: got %v", c.ID, m)
		}
	}
}

// inContext reports whether the ephemeral envelope id was sent in the
// sub-context (the odd ones).
func inContext(id string) bool {
	var n int
	_, err := fmt.Sscanf(id, "e%d", &n)
	return err == nil && n%2 == 1
}

// isSubsequence reports whether every one of sub is in of, in the same
// order, once.
func isSubsequence(sub, of []string) bool {
	i := 0
	for _, id := range of {
		if i < len(sub) && sub[i] == id {
			i++
		}
	}
	return i == len(sub)
}

func without(ids []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == drop })
}
