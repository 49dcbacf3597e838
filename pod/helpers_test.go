package pod

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// The pod's unit tests run a node alone (OrderLocal), its history in
// memory (history.Memory): no NATS server. Its members are real
// participants on real WebSocket connections over loopback, each read by
// a test client.

// testNode is a node with history entries per pod (0: history off).
func testNode(t testing.TB, entries int, tune func(*Config)) (*Node, *history.Memory) {
	t.Helper()
	cfg := testConfig(entries)
	cfg.MaxParticipantsPerPod = 100
	n := &Node{
		ID:      "node-a",
		Config:  cfg,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Buckets: limits.NewBucketSet(limits.Rate{Per: 1e6, Burst: 1e6}, limits.Rate{Per: 1e6, Burst: 1e6}),
	}
	if tune != nil {
		tune(&n.Config)
	}
	var mem *history.Memory
	if entries > 0 {
		mem = history.NewMemory(entries + history.Slack)
		n.History = mem
		n.Writer = history.NewWriter(mem, history.WriterOptions{Node: n.ID, Logger: n.Log})
		t.Cleanup(n.Writer.Close)
	}
	n.Start()
	t.Cleanup(n.Stop)
	return n, mem
}

// openPod opens a pod and waits until it has read its past.
func openPod(t testing.TB, n *Node, name string) *Pod {
	t.Helper()
	p := New(n, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// member is a participant of a pod and the test's end of its connection.
type member struct {
	t    testing.TB
	id   string
	r    *participant.Participant
	in   chan map[string]any
	conn *websocket.Conn // the test's end
	from *Sender
	// burst is the burst its envelopes are sent in, as its reader's
	// (nil: each one's own, woken as the order lock goes).
	burst *Burst
	p     *Pod
}

// joinOpts tune a join.
type joinOpts struct {
	query     string // the filter's query, e.g. "contexts=none"
	want      HistoryWant
	sendQueue int
	noRead    bool              // the test's end does not read
	discard   bool              // the test's end reads and drops what it reads (benchmarks)
	onCut     func(string)      // told when the gateway cuts it
	serves    []string          // what it serves (wire.ServesMCP)
	caps      []wire.Capability // its token's capabilities (nil: everything, "*")
}

// join connects id to p over a real WebSocket and makes it a member.
func join(t testing.TB, p *Pod, id string, o joinOpts) *member {
	t.Helper()
	q, err := urlQuery(o.query)
	if err != nil {
		t.Fatal(err)
	}
	f, err := filter.FromQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	if o.sendQueue == 0 {
		o.sendQueue = 1 << 14
	}
	caps := o.caps
	if caps == nil {
		caps = wire.Kinds("*")
	}
	joined := make(chan *participant.Participant, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := participant.SmallBuffers(w)
		c, err := websocket.Accept(hw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		joined <- participant.New(c, hw.Conn(), id, p.Name, capability.MustCompile(caps), nil, wire.ProtocolMCPP, f,
			participant.Options{SendQueue: o.sendQueue, SendQueueBytes: 64 << 20, WriteTimeout: 10 * time.Second, OnCut: o.onCut, Serves: o.serves})
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadLimit(-1)
	t.Cleanup(func() { _ = conn.CloseNow() })
	r := <-joined
	if dead, refusal := p.Reserve(id, false); dead || refusal != nil {
		t.Fatalf("%s: the pod refused the join: %v", id, refusal)
	}
	p.Join(r, o.want)
	m := &member{t: t, id: id, r: r, in: make(chan map[string]any, 1<<16), conn: conn, p: p,
		from: &Sender{ID: id, Protocol: wire.ProtocolMCPP, Conn: r, Reply: ReplyTo(r),
			Buckets: p.node.Buckets.Acquire(p.Name + "/" + id)}}
	switch {
	case o.discard:
		go func() {
			for {
				if _, _, err := conn.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	case !o.noRead:
		go m.read()
	}
	return m
}

func (m *member) read() {
	defer close(m.in)
	for {
		_, b, err := m.conn.Read(context.Background())
		if err != nil {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			m.t.Errorf("%s: a message that is not JSON: %q", m.id, b)
			return
		}
		m.in <- v
	}
}

// send hands the pod an envelope of the member's, as its reader would.
func (m *member) send(env map[string]any) {
	b, _ := json.Marshal(env)
	m.p.Handle(m.from, m.burst, b, false)
}

// sendRaw hands the pod an envelope of the member's as written, byte
// for byte.
func (m *member) sendRaw(env string) { m.p.Handle(m.from, m.burst, []byte(env), false) }

// next is the next message the member received, or a failure after 5s.
func (m *member) next() map[string]any {
	m.t.Helper()
	select {
	case v, ok := <-m.in:
		if !ok {
			m.t.Fatalf("%s: the connection ended", m.id)
		}
		return v
	case <-time.After(5 * time.Second):
		m.t.Fatalf("%s: nothing within 5s", m.id)
	}
	return nil
}

// nextOf skips presence and returns the next other message.
func (m *member) nextOf() map[string]any {
	m.t.Helper()
	for {
		if v := m.next(); v["kind"] != wire.KindPresence {
			return v
		}
	}
}

// quiet fails when the member receives anything but presence within d.
func (m *member) quiet(d time.Duration) {
	m.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case v := <-m.in:
			if v["kind"] != wire.KindPresence {
				m.t.Fatalf("%s: got %v, want nothing", m.id, v)
			}
		case <-deadline:
			return
		}
	}
}

func chat(id string, n int) map[string]any {
	return map[string]any{"id": id, "kind": "chat", "payload": map[string]any{"n": n}}
}

// payloadN reads the payload's n.
func payloadN(v map[string]any) int {
	pl, _ := v["payload"].(map[string]any)
	n, _ := pl["n"].(float64)
	return int(n)
}

func urlQuery(s string) (map[string][]string, error) {
	out := map[string][]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("bad query %q", s)
		}
		out[k] = append(out[k], v)
	}
	return out, nil
}

// websocketCode is the close code err carries, or -1.
func websocketCode(err error) int { return int(websocket.CloseStatus(err)) }
