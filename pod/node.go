package pod

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Ordering says where the order of a node's pods comes from (doc.go).
type Ordering int

const (
	// OrderLocal: one node. A pod's order is the order in which the node
	// accepts its envelopes; they are delivered at once and written
	// behind into the history stream.
	OrderLocal Ordering = iota
	// OrderStream: several nodes (a cluster, or an external NATS) with
	// history. A pod's order is the history stream's, which every node
	// follows with one ordered consumer (Follower), so that every node
	// delivers in one order and a resume is exact on any node.
	OrderStream
	// OrderCore: several nodes without history. Each node delivers what it
	// accepts at once and what others accepted as NATS brings it, on the
	// pod's core subject.
	OrderCore
)

func (o Ordering) String() string {
	return [...]string{"local", "stream", "core"}[o]
}

// Config is what the pods enforce: the gateway's limits as its flags set
// them (limits.Config: docs/protocol.md sections 3, 5, 8 and 11), read
// where each applies (the contexts' part by package contexts), and what
// the node derives from them.
type Config struct {
	limits.Config
	// FlightBytes bounds the bytes the history writer may hold unstored,
	// all pods together: senders wait past it (flow.go).
	FlightBytes int64
}

// Metrics are the counters the pods move; the gateway registers them.
type Metrics struct {
	// PodsOpen is the number of pods open on the node (table.go).
	PodsOpen    prometheus.Gauge
	EnvelopesIn prometheus.Counter
	Deliveries  prometheus.Counter
	Errors      *prometheus.CounterVec // by code
	Conclusions *prometheus.CounterVec // by reason
	// OrderLost counts pods whose order a node lost and could not get
	// back (OrderStream): their local connections were closed with 4503.
	OrderLost prometheus.Counter
	// FollowErrors counts the errors the node's follower of the history
	// stream recovered from by itself (retried in place, or its consumer
	// made again where it was); the log says the count and the last.
	FollowErrors prometheus.Counter
	// LiveLost counts the live frames (presence, ephemeral envelopes) of
	// other nodes whose marker came through the stream and whose body this
	// node could not get, neither on the pod's live subject nor from the
	// node that accepted it (gone, or no longer keeping it): the members
	// that may have missed one were sent a system/gap (livelost.go).
	LiveLost prometheus.Counter
	// Calls are the counters of MCP requests and proposals (calls.go).
	Calls *CallMetrics
	// Pods are the per-pod series (podmetrics.go).
	Pods *PodMetrics
}

// NewMetrics makes the metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		PodsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpp_pods", Help: "Pods that exist (with participants or contexts)."}),
		EnvelopesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_envelopes_in_total", Help: "Envelopes accepted and published to their pod."}),
		Deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_envelopes_out_total", Help: "Envelopes queued for delivery to a participant (one per recipient)."}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_errors_total", Help: "system/error answers, by code."}, []string{"code"}),
		Conclusions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_context_conclusions_total", Help: "Contexts concluded, by reason."}, []string{"reason"}),
		OrderLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_pod_order_lost_total", Help: "Pods whose delivery order this node lost (its follower of the history stream stayed behind what the stream stored for 5s); their connections here were closed with 4503, to resume elsewhere or again."}),
		FollowErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_history_follow_errors_total", Help: "Errors the node's follower of the history stream retried in place or recovered from (a cluster's route still forming, a consumer made again)."}),
		LiveLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_live_frames_lost_total", Help: "Live frames (presence, ephemeral envelopes) of other nodes whose body this node never got, nor could get again from the node that accepted it (gone); the members that may have missed one were sent a system/gap."}),
		Calls: newCallMetrics(),
		Pods:  newPodMetrics(),
	}
}

// Collectors lists the metrics, for a registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.PodsOpen, m.EnvelopesIn, m.Deliveries, m.Errors, m.Conclusions, m.OrderLost, m.FollowErrors, m.LiveLost},
		append(m.Calls.collectors(), m.Pods.collectors()...)...)
}

// Cluster is what a pod asks of the other gateway nodes (nil: the node is
// alone).
type Cluster interface {
	// Members asks the other nodes for their members of pod, waiting a
	// moment for their answers; the answers that come after it are
	// handed to late as they come.
	Members(pod string, late func(NodeMembers)) []NodeMembers
	// Ask asks one node for its members of pods, and waits for its
	// answer (a moment at most).
	Ask(node string, pods []string) ([]NodeMembers, error)
	// Seen records that node sent a frame (it is alive).
	Seen(node string)
}

// NodeMembers are one node's members of a pod, as of its frame Seq
// (remote.go).
type NodeMembers struct {
	Node    string
	Seq     uint64
	Members []wire.Identity
	// Since are when each of Members joined (the ts of its join event),
	// in their order; missing ones are older than any join.
	Since []time.Time
}

// Admitted is who a token says a participant is: its id, what it may
// send, and its credential (when the token expires, how to tell it was
// revoked).
type Admitted struct {
	ID         string
	Caps       *capability.Set
	Credential *participant.Credential
	// Token names the token that admitted it, as the audit trail does
	// (never the token itself): the zero value in open mode.
	Token audit.Credential
}

// Node is what the pods of one gateway node share: its identity, its
// limits, its history and its connection to the other nodes. Fill it,
// then call Start.
type Node struct {
	ID       string
	Config   Config
	Limits   wire.Limits // the welcome's: Config.Welcome()
	Log      *slog.Logger
	Metrics  *Metrics
	Ordering Ordering
	// History keeps the pods' history, and Writer writes into it; both
	// nil when history is off.
	History history.Backend
	Writer  *history.Writer
	// Broker carries what travels between nodes outside the stream
	// (OrderStream, OrderCore): NATSBroker in the gateway, MemoryBroker
	// in tests. The node closes it when it stops.
	Broker  Broker
	Cluster Cluster
	// Buckets are the participants' rate buckets, by pod and id.
	Buckets *limits.BucketSet
	// HistoryOpen, when not nil, is closed once History and Writer are
	// set (a cluster's stream opens in the background, once enough nodes
	// are up): Enter opens no pod before. Nil: they are set before Start.
	HistoryOpen <-chan struct{}
	// Verify checks a token a connection sends to refresh its own
	// (gateway/refresh) for a pod; nil when the node runs open (no token).
	Verify func(ctx context.Context, token, pod string) (Admitted, *envelope.Error)
	// OnServers is told, in a goroutine of its own, that an MCP server of
	// a pod (a participant that serves MCP) may have joined or left, or
	// said that its lists or a resource changed (notices.go); nil: nobody
	// asks.
	OnServers func(p *Pod, c ServerChange)
	// Audit is the node's audit trail of trust decisions (nil: off).
	Audit *audit.Log
	// Traces are the node's tracing (tracing.go); Start makes them, off,
	// when nil.
	Traces *Traces

	// table is the pods open on this node, by name (table.go), podCount
	// their number (Config.MaxPods).
	table    [tableShards]tableShard
	podCount atomic.Int64

	dispatch *dispatch
	// bodies are the bodies of this node's live frames, kept for the
	// nodes that did not receive them (OrderStream, livebodies.go).
	bodies *liveBodies
	// follow is the node's reader of the stream (OrderStream), started
	// by FollowNow or when the first pod opens, whichever comes first,
	// and made anew when the next pod opens after it was lost; lost is
	// the one given up last, whose sequences the next one takes on
	// (subjectSeqs.inherit).
	followMu sync.Mutex
	follow   *Follower
	lost     *Follower
	// followCtx is FollowNow's context (nil: FollowNow was not called):
	// the node then keeps a follower whose scan of every pod has ended,
	// making one anew at once when it gives one up, and is not ready
	// while it has none (ReadingPast). Under followMu.
	followCtx context.Context
	// turns is the line of senders waiting for the history writer's
	// budget (Config.FlightBytes), all pods together (turns.go).
	turns turns
	// frameSeq numbers the frames this node accepts (envelope.Meta.Seq).
	frameSeq atomic.Uint64
	// burstSeq numbers the bursts of the node's pods (Burst,
	// participant.BurstSeq).
	burstSeq atomic.Uint64
	draining atomic.Bool
	// cutSince is when the node was found cut off from a quorum of the
	// history stream (unix ns; 0: it is not), quorum.go.
	cutSince atomic.Int64
	watching atomic.Bool // WatchQuorum started
	stop     chan struct{}

	// closedMarks are, for pods closed on this node whose frames the
	// history writer may not have stored yet, the writer's mark at their
	// close: a pod opened again reads its past once they are stored.
	marksMu     sync.Mutex
	closedMarks map[string]uint64
}

// closed records that pod name closed (OrderLocal with history).
func (n *Node) closed(name string) {
	w := n.Writer
	if n.Ordering != OrderLocal || w == nil {
		return
	}
	mark := w.Mark()
	n.marksMu.Lock()
	defer n.marksMu.Unlock()
	if n.closedMarks == nil {
		n.closedMarks = map[string]uint64{}
	}
	for pod, m := range n.closedMarks {
		if w.Settled(m) {
			delete(n.closedMarks, pod) // stored: nothing to wait for
		}
	}
	n.closedMarks[name] = mark
}

// closedMark is the writer's mark when pod name last closed, if its
// frames may still be on their way.
func (n *Node) closedMark(name string) (uint64, bool) {
	n.marksMu.Lock()
	defer n.marksMu.Unlock()
	m, ok := n.closedMarks[name]
	return m, ok
}

// Start starts what the node's pods share: the dispatchers of what other
// nodes send (OrderStream, OrderCore), and the answers for the bodies of
// this node's live frames (OrderStream).
func (n *Node) Start() {
	if n.Log == nil {
		n.Log = slog.Default()
	}
	if n.Metrics == nil {
		n.Metrics = NewMetrics()
	}
	if n.Traces == nil {
		n.Traces = NewTraces(nil)
	}
	n.stop = make(chan struct{})
	if n.Ordering == OrderLocal {
		return
	}
	n.dispatch = newDispatch(n.Broker)
	if n.Ordering == OrderStream {
		n.bodies = newLiveBodies(n.storedUpTo)
		if err := n.answerBodies(); err != nil {
			// The other nodes then count this node's bodies they miss as lost.
			n.Log.Error("this node cannot answer for its live frames' bodies", "err", err)
		}
	}
}

// storedUpTo reports whether the history writer stored everything
// appended up to mark (history.Writer.Settled).
func (n *Node) storedUpTo(mark uint64) bool { return n.Writer == nil || n.Writer.Settled(mark) }

// Stop stops them, and the broker.
func (n *Node) Stop() {
	n.followMu.Lock()
	if n.follow != nil {
		n.follow.close()
		n.follow = nil
	}
	n.followMu.Unlock()
	if n.stop != nil {
		close(n.stop)
	}
	if n.dispatch != nil {
		n.dispatch.close()
	}
	if n.Broker != nil {
		n.Broker.Close()
	}
}

// checkFollower gives up on the node's follower when it has stayed behind
// what the stream stored of this node's for behindAfter, or the node has
// been cut off from a quorum for cutAfter (the stream took
// the frames, and nothing brought them back): the pods it served lost
// their order (Pod.Tick), and the next pod to open starts a new one.
func (n *Node) checkFollower(now time.Time) *Follower {
	n.followMu.Lock()
	defer n.followMu.Unlock()
	f := n.follow
	if f == nil || n.Writer == nil {
		return f
	}
	if cut := n.cutFor(now); cut > cutAfter {
		n.Log.Error("this node has been cut off from a quorum of the history stream for a while; its pods lost their order here",
			"cut_off", cut.Round(time.Millisecond).String())
		n.giveUpFollowerLocked()
	} else if behind := f.behind(now, n.Writer.StoredSeq()); behind > behindAfter {
		last := ""
		if e := f.lastError.Load(); e != nil {
			last = *e
		}
		n.Log.Error("the node's follower of the history stream brings nothing back of what the stream stored; its pods lost their order here",
			"behind", behind.Round(time.Millisecond).String(), "errors", f.errors.Load(), "last_error", last)
		n.giveUpFollowerLocked()
	}
	return n.follow
}

// giveUpFollowerLocked ends the node's follower: a new one takes on
// what this one knew, started at once where FollowNow was called, else
// by the next pod to open. Call it with Node.followMu held.
func (n *Node) giveUpFollowerLocked() {
	n.follow.close()
	n.lost, n.follow = n.follow, nil
	if n.followCtx != nil {
		go n.followUntilRead(n.followCtx)
	}
}

// historyOn reports whether pods keep a history.
func (n *Node) historyOn() bool { return n.History != nil }
