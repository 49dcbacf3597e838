package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/wire"
)

// The cluster's unit tests run several nodes in the process, each with
// its own history writer, follower, dispatchers and broker, as the
// gateway's nodes have, on a MemoryBus and one history.Memory as their
// stream: no NATS server. Their members are real participants on real
// WebSocket connections over loopback (helpers_test.go).

// testStream is the cluster's history stream: a history.Memory that each
// node appends to through its own view, one Append at a time, so that the
// followers are handed the stream's messages in its order. A test can
// hold one node's appends (its markers then come after what the others
// do meanwhile) and make the stream's leader go away for a while.
type testStream struct {
	mem *history.Memory

	mu sync.Mutex
	// gone: the leader is gone; nothing is stored, except the next
	// loseAcks appends, which are stored and whose acknowledgements are
	// lost (a leader that died after its replicas stored them). The
	// followers are handed nothing until it comes back (their consumers
	// are made again), then everything stored meanwhile, in order.
	gone     bool
	loseAcks int
	held     map[string][]heldAppend // by node, while holding
	holding  map[string]bool
	stalled  map[string]*stall // by node: its next append waits
	queued   []followed
	// stored counts the messages stored, duplicates the appends of one
	// stored already (not stored again).
	stored, duplicates int
	// scanned is called once a Scan has read what it hands (a test then
	// stores more while the tail reads the past); scanning, when set,
	// is given each Scan's subjects, start and fn, and returns the fn to
	// hand the messages to (a test holds a scan there).
	scanned  func()
	scanning func(subjects []string, from uint64, fn func(string, history.StoredMsg) error) func(string, history.StoredMsg) error
}

// stall is a node's next append, waiting: its history writer waits in
// it, and what the node appends meanwhile waits in the writer's queue.
type stall struct {
	entered chan struct{} // closed once the append waits
	open    chan struct{}
}

type heldAppend struct {
	subject string
	msg     []byte
	msgID   string
	done    func(uint64, bool, error)
}

type followed struct {
	fn      func(string, history.StoredMsg)
	subject string
	m       history.StoredMsg
}

func newTestStream(perSubject int) *testStream {
	return &testStream{mem: history.NewMemory(perSubject), held: map[string][]heldAppend{}, holding: map[string]bool{},
		stalled: map[string]*stall{}}
}

// stall makes node's next append wait, with its history writer, until
// go on is called; entered is closed once it waits. What the node appends
// meanwhile waits in its writer's queue, and is packed at once, as on a
// busy gateway.
func (s *testStream) stall(node string) (entered <-chan struct{}, goOn func()) {
	st := &stall{entered: make(chan struct{}), open: make(chan struct{})}
	s.mu.Lock()
	s.stalled[node] = st
	s.mu.Unlock()
	return st.entered, func() { close(st.open) }
}

// view is node's Backend.
func (s *testStream) view(node string) history.Backend { return &streamView{s: s, node: node} }

// hold makes node's appends wait, unstored, until release.
func (s *testStream) hold(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding[node] = true
}

// release stores what node appended while held, in order.
func (s *testStream) release(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding[node] = false
	held := s.held[node]
	delete(s.held, node)
	for _, a := range held {
		s.storeAppend(a)
	}
}

// leaderGone makes the stream take nothing (but the next loseAcks
// appends, stored without an acknowledgement) until leaderBack.
func (s *testStream) leaderGone(loseAcks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone, s.loseAcks = true, loseAcks
}

// leaderBack makes the stream answer again, and hands the followers what
// was stored meanwhile.
func (s *testStream) leaderBack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = false
	queued := s.queued
	s.queued = nil
	for _, q := range queued {
		q.fn(q.subject, q.m)
	}
}

var errNoLeader = errors.New("test stream: no leader")

// storeAppend stores a, or fails it while the leader is gone. Call it
// with testStream.mu held.
func (s *testStream) storeAppend(a heldAppend) {
	if s.gone {
		if s.loseAcks == 0 {
			a.done(0, false, errNoLeader)
			return
		}
		s.loseAcks--
		s.mem.Append(a.subject, a.msg, a.msgID, func(_ uint64, dup bool, _ error) {
			if !dup {
				s.stored++
			}
		})
		a.done(0, false, errors.New("test stream: no acknowledgement (the leader died)"))
		return
	}
	s.mem.Append(a.subject, a.msg, a.msgID, func(seq uint64, dup bool, err error) {
		if dup {
			s.duplicates++
		} else if err == nil {
			s.stored++
		}
		a.done(seq, dup, err)
	})
}

// streamView is one node's way into a testStream.
type streamView struct {
	s    *testStream
	node string
}

func (v *streamView) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	s := v.s
	s.mu.Lock()
	st := s.stalled[v.node]
	delete(s.stalled, v.node)
	s.mu.Unlock()
	if st != nil {
		close(st.entered)
		<-st.open
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := heldAppend{subject, append([]byte(nil), msg...), msgID, done}
	if s.holding[v.node] {
		s.held[v.node] = append(s.held[v.node], a)
		return
	}
	s.storeAppend(a)
}

func (v *streamView) Read(ctx context.Context, subject string, want []uint64, fn func(history.StoredMsg) error) error {
	return v.s.mem.Read(ctx, subject, want, fn)
}

func (v *streamView) Scan(ctx context.Context, subjects []string, from uint64, fn func(string, history.StoredMsg) error) error {
	if h := v.s.scanning; h != nil {
		fn = h(subjects, from, fn)
	}
	err := v.s.mem.Scan(ctx, subjects, from, fn)
	if h := v.s.scanned; h != nil {
		h()
	}
	return err
}

// Follow hands fn what is stored from now on, under the stream's lock
// (in its order); while the leader is gone, it is queued.
func (v *streamView) Follow(ctx context.Context, subjects []string, fn func(string, history.StoredMsg), onErr func(error)) (uint64, func(), error) {
	s := v.s
	return s.mem.Follow(ctx, subjects, func(subject string, m history.StoredMsg) {
		// Called by mem.Append, which storeAppend calls with s.mu held.
		if s.gone {
			s.queued = append(s.queued, followed{fn, subject, m})
			return
		}
		fn(subject, m)
	}, onErr)
}

func (v *streamView) FirstSeq(ctx context.Context) (uint64, error) { return v.s.mem.FirstSeq(ctx) }

func (v *streamView) Ready(ctx context.Context) error {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if v.s.gone {
		return errNoLeader
	}
	return v.s.mem.Ready(ctx)
}

// testCluster is several nodes sharing pods, in the process.
type testCluster struct {
	t      testing.TB
	stream *testStream
	bus    *MemoryBus
	nodes  []*Node
	logs   []*logSink

	mu   sync.Mutex
	pods map[*Node][]*Pod
	// late, when set, makes the next Members answer after its wait: its
	// lists go to its late function.
	late bool
}

// holdLate is late when the next Members must answer late (and clears
// it), else nil. Call it with testCluster.mu held.
func (c *testCluster) holdLate(late func(NodeMembers)) func(NodeMembers) {
	if !c.late {
		return nil
	}
	c.late = false
	return late
}

// newTestCluster starts n nodes ("node-a", "node-b", …) where the stream
// orders the pods (OrderStream); tune, when given and not nil, tunes each
// node's configuration.
func newTestCluster(t testing.TB, n int, tune ...func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, stream: newTestStream(1000 + history.Slack), bus: NewMemoryBus(), pods: map[*Node][]*Pod{}}
	for i := range n {
		id := "node-" + string(rune('a'+i))
		sink := &logSink{}
		node := &Node{
			ID:       id,
			Config:   testConfig(1000),
			Log:      slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Ordering: OrderStream,
			Buckets: limits.NewBucketSet(limits.Rate{Per: 1e6, Burst: 1e6},
				limits.Rate{Per: 1e6, Burst: 1e6}),
			Broker:  c.bus.Broker(),
			History: c.stream.view(id),
		}
		for _, f := range tune {
			if f != nil {
				f(&node.Config)
			}
		}
		node.Cluster = clusterView{c, node}
		node.Writer = history.NewWriter(node.History, history.WriterOptions{Node: id, Logger: node.Log, IDs: true})
		t.Cleanup(node.Writer.Close)
		node.Start()
		t.Cleanup(node.Stop)
		c.nodes = append(c.nodes, node)
		c.logs = append(c.logs, sink)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range c.logs {
				t.Logf("%s's log:\n%s", c.nodes[i].ID, l.String())
			}
		}
	})
	return c
}

// testConfig is a pod's configuration in these tests, with history
// entries per pod (0: off).
func testConfig(entries int) Config {
	return Config{
		Config: limits.Config{
			MaxMessageBytes: 1 << 20, MaxContextBytes: 4096,
			Contexts: limits.Contexts{
				MaxDepth: 5, ContextTimeout: time.Minute, ContextRetention: time.Minute,
				ConclusionKinds:   "conclusion",
				MaxContextsPerPod: 1000, MaxContextsPerParticipant: 100,
				ContextRate: 1e6, ContextBurst: 1e6,
			},
			Rate: 1e6, Burst: 1e6,
			MaxParticipantsPerPod: 1000, History: entries, HistoryAge: time.Hour,
		},
		FlightBytes: 64 << 20,
	}
}

// open opens pod name on node, as the gateway does when a first member
// comes.
func (c *testCluster) open(node *Node, name string) *Pod {
	c.t.Helper()
	p := openPod(c.t, node, name)
	c.mu.Lock()
	c.pods[node] = append(c.pods[node], p)
	c.mu.Unlock()
	return p
}

// join makes id a member of p as the gateway does: it learns the other
// nodes' members, waits for its node's frames to come back, then joins.
func (c *testCluster) join(p *Pod, id string, o joinOpts) *member {
	c.t.Helper()
	p.SyncMembers()
	p.Settle()
	return join(c.t, p, id, o)
}

// clusterView is the Cluster of one node of a testCluster.
type clusterView struct {
	c    *testCluster
	self *Node
}

func (v clusterView) Members(name string, late func(NodeMembers)) []NodeMembers {
	v.c.mu.Lock()
	var out []NodeMembers
	var ask []*Pod
	for node, pods := range v.c.pods {
		if node == v.self {
			continue
		}
		for _, p := range pods {
			if p.Name == name && !p.Dead() {
				ask = append(ask, p)
			}
		}
	}
	late = v.c.holdLate(late)
	v.c.mu.Unlock()
	for _, p := range ask {
		r := p.Roster()
		if late != nil {
			go late(r) // answered after the wait
			continue
		}
		out = append(out, r)
	}
	return out
}

// Ask is what the node's pods of those names answer.
func (v clusterView) Ask(node string, names []string) ([]NodeMembers, error) {
	v.c.mu.Lock()
	var of *Node
	var pods []*Pod
	for n, ps := range v.c.pods {
		if n.ID == node {
			of, pods = n, ps
		}
	}
	v.c.mu.Unlock()
	if of == nil {
		return nil, fmt.Errorf("no node %s", node)
	}
	var out []NodeMembers
	for _, name := range names {
		r := of.Roster()
		for _, p := range pods {
			if p.Name == name && !p.Dead() {
				r = p.Roster()
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (v clusterView) Seen(string) {}

// logSink is a node's log.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// has reports whether the log holds text.
func (l *logSink) has(text string) bool { return strings.Contains(l.String(), text) }

// ephemeral is an ephemeral envelope numbered n.
func ephemeral(id string, n int) map[string]any {
	return map[string]any{"id": id, "kind": "note", "lifecycle": map[string]any{"mode": "ephemeral"}, "payload": map[string]any{"n": n}}
}

// view is what a member was told of who else is in the pod: its
// welcome's participants, then each presence event (and presence gap) it
// received, and the envelopes it received, in order.
type memberView struct {
	others    map[string]bool
	envelopes []map[string]any
	gaps      []map[string]any
	joinedAt  map[string]int // the number of envelopes it had when it heard of each join
}

// drain reads m until it has been quiet for quiet, from its welcome on.
func drain(t testing.TB, m *member, quiet time.Duration) *memberView {
	t.Helper()
	return drainUntil(t, m, func(*memberView) bool { return true }, quiet)
}

// drainUntil reads m, from its welcome on, until done holds (at most 10 s),
// then until it has been quiet for quiet.
func drainUntil(t testing.TB, m *member, done func(*memberView) bool, quiet time.Duration) *memberView {
	t.Helper()
	v := &memberView{others: map[string]bool{}, joinedAt: map[string]int{}}
	welcome := m.next()
	if welcome["kind"] != wire.KindWelcome {
		t.Fatalf("%s: first message %v, want its welcome", m.id, welcome)
	}
	for _, p := range welcome["payload"].(map[string]any)["participants"].([]any) {
		v.others[p.(map[string]any)["id"].(string)] = true
	}
	deadline := time.After(10 * time.Second)
	for !done(v) {
		select {
		case msg, ok := <-m.in:
			if !ok {
				t.Fatalf("%s: its connection ended", m.id)
			}
			v.take(t, m.id, msg)
		case <-deadline:
			return v
		}
	}
	for {
		select {
		case msg, ok := <-m.in:
			if !ok {
				t.Fatalf("%s: its connection ended", m.id)
			}
			v.take(t, m.id, msg)
		case <-time.After(quiet):
			return v
		}
	}
}

// more reads what m received since, until it has been quiet for quiet.
func (v *memberView) more(t testing.TB, m *member, quiet time.Duration) {
	t.Helper()
	for {
		select {
		case msg := <-m.in:
			v.take(t, m.id, msg)
		case <-time.After(quiet):
			return
		}
	}
}

func (v *memberView) take(t testing.TB, self string, msg map[string]any) {
	pl, _ := msg["payload"].(map[string]any)
	switch msg["kind"] {
	case wire.KindPresence:
		id := pl["participant"].(map[string]any)["id"].(string)
		v.presence(t, self, pl["event"].(string), id)
	case wire.KindGap:
		v.gaps = append(v.gaps, pl)
		if pl["lost"] == wire.GapPresence {
			v.presence(t, self, pl["event"].(string), pl["participant"].(map[string]any)["id"].(string))
		}
	default:
		v.envelopes = append(v.envelopes, msg)
	}
}

func (v *memberView) presence(t testing.TB, self, event, id string) {
	switch event {
	case wire.PresenceJoin:
		if v.others[id] {
			t.Errorf("%s: told %s joined, which it knew was there", self, id)
		}
		v.others[id] = true
		v.joinedAt[id] = len(v.envelopes)
	case wire.PresenceLeave:
		if !v.others[id] {
			t.Errorf("%s: told %s left, which it did not know was there", self, id)
		}
		delete(v.others, id)
	}
}

// readUntilClosed is member.read for a member joined with noRead: it
// returns the error that ended the connection (its close status).
func readUntilClosed(m *member) error {
	for {
		_, b, err := m.conn.Read(context.Background())
		if err != nil {
			return err
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		m.in <- v
	}
}

// noneLost fails the test when a node counted or logged a live frame lost.
func (c *testCluster) noneLost(t *testing.T) {
	t.Helper()
	for i, n := range c.nodes {
		if lost := counted(n.Metrics.LiveLost); lost != 0 || c.logs[i].has("lost") {
			t.Errorf("%s counted %v live frames lost", n.ID, lost)
		}
	}
}
